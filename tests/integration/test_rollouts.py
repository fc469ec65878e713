"""docs/rollouts.md on the real Prometheus: the Argo Rollouts and Flagger templates reach the right verdicts.

The templates' queries and conditions are read from the YAML blocks of
docs/rollouts.md (so the doc cannot drift from what is tested). fleetmon's
exporter serves, on the port the services' Prometheus scrapes, the findings of
a real alert engine over two simulated shadow comparisons of one baseline: a
15-point success regression and an A/A. Each phase waits until Prometheus has
scraped the engine's latest evaluation, then evaluates the doc's queries
through Prometheus's HTTP API and applies the doc's conditions as Argo
Rollouts (successCondition / failureCondition, else inconclusive; failureLimit)
and Flagger (thresholdRange) would.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

import pytest
import yaml

from alerts.engine import AlertEngine, from_engine
from monitor.delta import BatchDelta
from monitor.exporter.collector import serve
from monitor.exporter.comparisons import ComparisonCollector
from monitor.pairing import PairedCounts, pair_key
from monitor.pricing import PriceMap
from monitor.slices import comparison_slices, slice_id
from monitor.store.memory import MemoryStore
from tests.support.paths import ROOT
from tests.support.validity import RecordingNotifier

EXPORTER_HOST = "127.0.0.1"
EXPORTER_PORT = int(os.environ.get("FLEETMON_EXPORTER_PORT", "9464"))
T0 = 1_800_000_000.0
#: Per pair: P(both succeed), P(baseline only) = b, P(candidate only) = c; the rest fail both.
AA = (0.70, 0.10, 0.10)
REGRESSION = (0.62, 0.20, 0.05)     # a 15-point drop, 25% discordance


# ---------------------------------------------------------------- the doc's templates

def doc_templates() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The Argo AnalysisTemplate's metric, the Flagger MetricTemplate and the Canary's metric ref, from the doc."""
    text = (ROOT / "docs" / "rollouts.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    by_kind = {b["kind"]: b for b in blocks if isinstance(b, dict) and "kind" in b}
    (argo_metric,) = by_kind["AnalysisTemplate"]["spec"]["metrics"]
    flagger = by_kind["MetricTemplate"]["spec"]
    (canary_metric,) = next(b for b in blocks if isinstance(b, dict) and "analysis" in b)["analysis"]["metrics"]
    return argo_metric, flagger, canary_metric


def argo_query(metric: dict[str, Any], candidate: str) -> str:
    query = re.sub(r"\{\{\s*args\.candidate\s*\}\}", candidate, metric["provider"]["prometheus"]["query"])
    assert "{{" not in query, f"the Argo query uses an argument the test does not know: {query}"
    return query


def flagger_query(template: dict[str, Any], candidate: str) -> str:
    query = re.sub(r"\{\{\s*variables\.candidate\s*\}\}", candidate, template["query"])
    assert "{{" not in query, f"the Flagger query uses a variable the test does not know: {query}"
    return query


_CONDITION = re.compile(r"\s*result\[0\]\s*(==|!=|>=|<=|>|<)\s*(-?[0-9.]+)\s*")
_OPS = {"==": float.__eq__, "!=": float.__ne__, ">=": float.__ge__, "<=": float.__le__, ">": float.__gt__,
        "<": float.__lt__}


def holds(condition: str, value: float) -> bool:
    """An Argo condition of the form ``result[0] <op> <number>`` (the only form the doc may use)."""
    match = _CONDITION.fullmatch(condition)
    assert match, f"docs/rollouts.md: the test evaluates conditions like 'result[0] >= 2', got {condition!r}"
    return _OPS[match.group(1)](value, float(match.group(2)))


def argo_measurement(metric: dict[str, Any], value: float) -> str:
    if holds(metric["failureCondition"], value):
        return "Failed"
    if holds(metric["successCondition"], value):
        return "Successful"
    return "Inconclusive"


def argo_run(metric: dict[str, Any], phases: list[str]) -> str:
    """Where an analysis run with these measurements stands (Argo: failures and inconclusives over their limits)."""
    if phases.count("Failed") > int(metric.get("failureLimit", 0)):
        return "Failed"
    if phases.count("Inconclusive") > int(metric.get("inconclusiveLimit", 0)):
        return "Inconclusive"
    return "Successful" if phases and all(p == "Successful" for p in phases) else "Running"


def flagger_check(metric: dict[str, Any], value: float) -> bool:
    limits = metric["thresholdRange"]
    return float(limits.get("min", float("-inf"))) <= value <= float(limits.get("max", float("inf")))


# ---------------------------------------------------------------- Prometheus and the exporter

def prom_query(prometheus_url: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        pytest.fail(f"Prometheus rejected {expr!r}: {exc.read()[:500]!r}", pytrace=False)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def scalar(prometheus_url: str, expr: str) -> float:
    result = prom_query(prometheus_url, expr)
    assert len(result) == 1, f"{expr!r} should give one number, got {result}"
    return float(result[0]["value"][1])


def wait_port_free(seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        with socket.socket() as sock:
            if sock.connect_ex((EXPORTER_HOST, EXPORTER_PORT)) != 0:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"{EXPORTER_HOST}:{EXPORTER_PORT} is taken; the services' Prometheus scrapes the exporter "
                        "there (set FLEETMON_EXPORTER_PORT for both)", pytrace=False)
        time.sleep(0.5)


def wait_scraped(prometheus_url: str, pairs: dict[str, int], seconds: float = 60.0) -> None:
    """Until Prometheus holds each candidate's whole-comparison success pairs as the engine last saw them."""
    deadline = time.monotonic() + seconds
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = {candidate: [float(s["value"][1]) for s in prom_query(
            prometheus_url, f'fleetmon_comparison_pairs{{candidate="{candidate}", metric="success_regression", '
                            'task_type=""}')] for candidate in pairs}
        if all(seen[c] == [float(n)] for c, n in pairs.items()):
            return
        time.sleep(1.0)
    pytest.fail(f"Prometheus did not scrape the engine's evaluation within {seconds:.0f} s: want {pairs}, "
                f"have {seen}", pytrace=False)


# ---------------------------------------------------------------- the simulation

def add_pairs(store: MemoryStore, rng: random.Random, baseline: str, candidate: str, n: int,
              cells: tuple[float, float, float]) -> None:
    both, b_only, c_only = cells
    b = c = successes = 0
    for _ in range(n):
        u = rng.random()
        if u < both:
            successes += 1
        elif u < both + b_only:
            b += 1
        elif u < both + b_only + c_only:
            c += 1
    delta = BatchDelta()
    counts = PairedCounts(n_pairs=n, b=b, c=c)
    for key in comparison_slices((("task_type", "refund"),)):
        delta.add_paired_evidence(pair_key(baseline, candidate, slice_id(key)), counts.hash_fields())
    store.apply(delta)


def test_the_documented_gates_wait_then_pass_an_aa_and_fail_a_regression(prometheus_url: str) -> None:
    argo, flagger, canary = doc_templates()
    run = uuid.uuid4().hex[:8]
    baseline, regressed, same = f"rollout-{run}-v1", f"rollout-{run}-bad", f"rollout-{run}-aa"
    store, rng = MemoryStore(), random.Random(2026)
    engine = AlertEngine(store, RecordingNotifier())
    wait_port_free()
    server = serve(store, PriceMap.load(), port=EXPORTER_PORT, host=EXPORTER_HOST, now=lambda: T0,
                   extra_collectors=[ComparisonCollector(from_engine(engine))])
    n = {regressed: 0, same: 0}

    def minute(i: int, pairs: int) -> None:
        for candidate, cells in ((regressed, REGRESSION), (same, AA)):
            add_pairs(store, rng, baseline, candidate, pairs, cells)
            n[candidate] += pairs
        engine.tick(T0 + 60.0 * i)

    def verdicts() -> dict[str, tuple[float, str, bool, float]]:
        out = {}
        for candidate in (regressed, same):
            value = scalar(prometheus_url, argo_query(argo, candidate))
            flagger_value = scalar(prometheus_url, flagger_query(flagger, candidate))
            out[candidate] = (value, argo_measurement(argo, value), flagger_check(canary, flagger_value),
                              flagger_value)
        return out

    try:
        # 1. a candidate fleetmon has never seen: wait
        unknown = scalar(prometheus_url, argo_query(argo, f"rollout-{run}-nobody"))
        assert argo_measurement(argo, unknown) == "Inconclusive"

        # 2. 300 pairs each: far below the pairs needed, nothing can be said yet
        minute(0, 300)
        wait_scraped(prometheus_url, n)
        early = verdicts()
        assert {c: v[1] for c, v in early.items()} == {regressed: "Inconclusive", same: "Inconclusive"}, early
        assert all(v[2] for v in early.values()), early        # Flagger lets warming pass

        # 3. twenty more minutes at 600 pairs a minute: the regression pages, the A/A has its pairs
        for i in range(1, 21):
            minute(i, 600)
        wait_scraped(prometheus_url, n)
        needed = scalar(prometheus_url, f'fleetmon_comparison_pairs_needed{{candidate="{same}", '
                                        'metric="success_regression", task_type=""}')
        assert n[same] >= needed, (n, needed)
        phases: dict[str, list[str]] = {regressed: [], same: []}
        for _look in range(3):   # three measurements, each after a fresh scrape
            now = verdicts()
            for candidate, (value, phase, flagger_ok, flagger_value) in now.items():
                phases[candidate].append(phase)
                assert value == flagger_value        # the two templates ask the same question
                assert flagger_ok == (candidate == same), now
            time.sleep(6)
        assert phases[regressed] == ["Failed"] * 3 and phases[same] == ["Successful"] * 3, phases
        assert argo_run(argo, phases[regressed]) == "Failed"
        assert argo_run(argo, phases[same]) == "Successful"
        # what the engine itself says agrees with the controllers' reading
        firing = {r.labels["candidate_release"] for r in engine.state.records.values() if r.status == "firing"}
        assert firing == {regressed}
    finally:
        server.shutdown()
        server.server_close()
