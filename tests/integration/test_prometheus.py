"""Proof on the real Prometheus: every dashboard query and every rule returns data.

Redis is filled the way production fills it when the streaming worker is
available: traces are produced to a fresh Kafka topic with ``fleetmon
replay`` and a real ``fleetmon worker`` subprocess folds them into Redis
(with a few invalid records, which must reach the DLQ). Set
``FLEETMON_TEST_FILL=fold`` to fold with :func:`monitor.fold.fold` and apply
to the Redis store directly instead (also used when ``streams`` has no
worker). Then ``fleetmon exporter`` runs as a subprocess on 127.0.0.1:9464,
the port the services' Prometheus scrapes every 5 s, and every PromQL
expression of every dashboard panel, every template variable, every
recording rule and every alert expression is evaluated through
Prometheus's HTTP API.

The second test scrapes the exporter after a burst of 100,000 distinct
tenants and checks that no unguarded label value escapes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.delta import BatchDelta
from monitor.fold import fold
from monitor.schema import validate
from monitor.slices import Slicer
from monitor.store.redis.store import RedisGuard, RedisStore

ROOT = Path(__file__).resolve().parents[2]
FLEETMON = str(Path(sys.executable).with_name("fleetmon"))
EXPORTER_HOST = "127.0.0.1"
EXPORTER_PORT = int(os.environ.get("FLEETMON_EXPORTER_PORT", "9464"))
SLICE_DIMENSIONS = ("release", "arm", "task_type", "tenant", "locale")

#: Panels whose queries may legitimately return nothing here, with the reason.
#: Kept empty on purpose: the comparison panels are fed by an extra collector.
EMPTY_OK: dict[str, str] = {}

COMPARISON_EXTRA = '''
from prometheus_client.core import GaugeMetricFamily

LABELS = ["baseline", "candidate", "arm", "metric", "task_type", "tenant", "locale"]


class Comparisons:
    """Stands in for the alert engine's evidence collector (monitor/exporter/comparisons.py)."""

    def __init__(self, baseline, candidate):
        # the whole comparison (no slice label) and one slice
        self.rows = [[baseline, candidate, "shadow", "success_regression", "", "", ""],
                     [baseline, candidate, "shadow", "success_regression", "code", "", ""]]

    def collect(self):
        for name, value in (("effect", 0.031), ("effect_lower", 0.004), ("effect_upper", 0.058),
                            ("e_value", 27.0), ("pairs", 812), ("firing", 1), ("pairs_needed", 4226)):
            family = GaugeMetricFamily("fleetmon_comparison_" + name, name, labels=LABELS)
            for values in self.rows:
                family.add_metric(values, value)
            yield family
        family = GaugeMetricFamily("fleetmon_comparison_discordant", "b/c", labels=LABELS + ["kind"])
        state = GaugeMetricFamily("fleetmon_comparison_state", "one-hot", labels=LABELS + ["state"])
        for values in self.rows:
            family.add_metric(values + ["b"], 61)
            family.add_metric(values + ["c"], 36)
            for name in ("warming", "no_evidence", "pending", "firing", "resolved"):
                state.add_metric(values + [name], 1.0 if name == "firing" else 0.0)
        yield family
        yield state


def factory(store, prices):
    return Comparisons("{baseline}", "{candidate}")
'''


# ---------------------------------------------------------------- helpers

def http_get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read()
        if response.headers.get_content_type() == "application/json":
            return json.loads(body)
        return body.decode()


def prom_query(prometheus_url: str, expr: str) -> dict[str, Any]:
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        return http_get(url)
    except urllib.error.HTTPError as exc:  # 400/422: the query itself is wrong
        return json.loads(exc.read() or b"{}") or {"status": "error", "error": str(exc)}


def port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) != 0


def wait_port_free(host: str, port: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not port_free(host, port):
        if time.monotonic() > deadline:
            pytest.fail(f"{host}:{port} is taken by another program; the services' Prometheus scrapes the "
                        f"exporter there (set FLEETMON_EXPORTER_PORT for both). Listening there:\n"
                        f"{listener(port)}", pytrace=False)
        time.sleep(0.5)


def listener(port: int) -> str:
    """What ``ss`` says listens on ``port`` (the process too, when this user may see it)."""
    try:
        done = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"(ss failed: {exc})"
    return done.stdout.strip() or done.stderr.strip() or "(nothing now)"


def trace_records(run: str, n: int, now: float, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ok = rng.random() < 0.7
        tokens_in = rng.randint(200, 8000)
        out.append({
            "trace_id": f"{run}-{i}", "ts": now - rng.uniform(5, 3000), "model_id": "model-a",
            "release": rng.choice((f"rel-{run}-1", f"rel-{run}-2")), "arm": rng.choice(("baseline", "canary")),
            "task_type": rng.choice(("code", "support")), "tenant": rng.choice(("acme", "globex", "initech")),
            "locale": rng.choice(("en", "de")), "ok": ok,
            "outcome": "success" if ok else rng.choice(("failure", "escalated", "abandoned")),
            "tokens_in": tokens_in, "tokens_cached_in": rng.randint(0, tokens_in // 2),
            "tokens_out": rng.randint(50, 3000), "tool_calls": rng.randint(0, 6), "tool_errors": rng.randint(0, 1),
            "steps": rng.randint(1, 12), "latency_ms": rng.lognormvariate(8.0, 1.0),
            "harmful_action": rng.random() < 0.03, "refused": rng.random() < 0.1,
            "benign": rng.random() < 0.85, "side_effects": 1 if rng.random() < 0.05 else 0,
        })
    return out


INVALID_LINES = ['{"trace_id": "bad-1", "ts": 1, "model_id": "m"}',  # no outcome
                 '{"trace_id": "bad-2", "ts": "yesterday", "model_id": "m", "ok": true}',
                 'this is not json']


def fill_with_worker(tmp_path: Path, records: list[dict], kafka_bootstrap: str, topic: str, dlq_topic: str,
                     redis_url: str, prefix: str) -> str:
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    replay = subprocess.run([FLEETMON, "replay", str(path), "--bootstrap", kafka_bootstrap, "--topic", topic,
                             "--quiet"], capture_output=True, text=True, timeout=180, check=False)
    assert replay.returncode == 0, f"fleetmon replay failed:\n{replay.stdout}{replay.stderr}"
    # replay skips invalid lines, so the bad records go in with a plain producer
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        for line in INVALID_LINES:
            producer.send(topic, value=line.encode())
        producer.flush(timeout=30)
    finally:
        producer.close()
    log = open(tmp_path / "worker.log", "w")
    worker = subprocess.Popen([FLEETMON, "worker", "--bootstrap", kafka_bootstrap, "--redis", redis_url,
                               "--prefix", prefix, "--topic", topic, "--group-id", f"test-{uuid.uuid4().hex}",
                               "--dlq-topic", dlq_topic, "--loglevel", "warn"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    store = RedisStore.from_url(redis_url, prefix=prefix)
    try:
        deadline = time.monotonic() + 180
        counters: dict[str, float] = {}
        while time.monotonic() < deadline and worker.poll() is None:
            counters = store.counters()
            if counters.get("traces", 0) >= len(records) and counters.get("dlq", 0) >= len(INVALID_LINES):
                break
            time.sleep(0.5)
        else:
            log.flush()
            pytest.fail(f"the worker did not fold {len(records)} traces + {len(INVALID_LINES)} DLQ records "
                        f"(exit {worker.poll()}, counters {counters}); log:\n"
                        f"{(tmp_path / 'worker.log').read_text()[-4000:]}", pytrace=False)
        assert counters["traces"] == len(records) and counters["dlq"] == len(INVALID_LINES), counters
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=10)
        log.close()
        store.client.close()
    return "worker"


def fill_with_fold(records: list[dict], topic: str, redis_url: str, prefix: str, now: float) -> str:
    store = RedisStore.from_url(redis_url, prefix=prefix)
    traces = [validate(r) for r in records]
    delta = fold(traces, Slicer(), now)
    delta.count("dlq", len(INVALID_LINES))
    half = len(traces) // 2
    assert store.apply(delta, f"{topic}:0", 0, half)
    assert store.apply(BatchDelta(), f"{topic}:1", 0, len(traces) - half - 1)
    store.client.close()
    return "fold"


class Exporter:
    """``fleetmon exporter`` as a subprocess on the port Prometheus scrapes."""

    def __init__(self, tmp_path: Path, redis_url: str, prefix: str, extra_args: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        wait_port_free(EXPORTER_HOST, EXPORTER_PORT)
        self.log_path = tmp_path / f"exporter-{prefix}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [FLEETMON, "exporter", "--host", EXPORTER_HOST, "--port", str(EXPORTER_PORT), "--redis", redis_url,
             "--prefix", prefix, *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 30
        while True:
            try:
                self.text = http_get(self.url, timeout=30)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"fleetmon exporter did not come up:\n{self.log_path.read_text()}", pytrace=False)
                time.sleep(0.3)

    @property
    def url(self) -> str:
        return f"http://{EXPORTER_HOST}:{EXPORTER_PORT}/metrics"

    def scrape(self) -> str:
        return http_get(self.url, timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel, expr with every $variable replaced by .*)."""
    spec = importlib.util.spec_from_file_location("grafana_build", ROOT / "grafana" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    out = []
    for name, model in build.dashboards().items():
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                out.append((name, panel["title"], re.sub(r"\$\{?\w+\}?", ".*", target["expr"])))
        for annotation in model.get("annotations", {}).get("list", []):  # the release-change annotations
            if annotation.get("expr"):
                out.append((name, f"annotation {annotation['name']}", re.sub(r"\$\{?\w+\}?", ".*",
                                                                            annotation["expr"])))
    return out


def dashboard_variables() -> list[tuple[str, str, str]]:
    """(dashboard, label, metric) for every label_values(metric, label) variable."""
    out = []
    for path in sorted((ROOT / "grafana" / "dashboards").glob("*.json")):
        for var in json.loads(path.read_text())["templating"]["list"]:
            text = var.get("query", "")
            match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", text if isinstance(text, str) else "")
            if match:
                out.append((path.name, match.group(2), match.group(1)))
    return out


_COMPARISON = re.compile(r"\s(>=|<=|==|!=|>|<)\s")


def _top_level_parts(expr: str) -> list[str]:
    """``expr`` split at its ``and`` / ``or`` / ``unless`` outside parentheses, each part unwrapped
    of parentheses that enclose it whole and split again."""
    expr = expr.strip()
    while expr.startswith("(") and _closing(expr, 0) == len(expr) - 1:
        expr = expr[1:-1].strip()
    parts, depth, start = [], 0, 0
    for match in re.finditer(r"[()]|\s(?:and|or|unless)\s", expr):
        token = match.group()
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            parts.append(expr[start:match.start()])
            start = match.end()
    if not parts:
        return [expr]
    return [p for part in [*parts, expr[start:]] for p in _top_level_parts(part)]


def _closing(expr: str, at: int) -> int:
    """The index of the parenthesis closing the one at ``at``."""
    depth = 0
    for i in range(at, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return i
    raise ValueError(f"unbalanced parentheses in {expr!r}")


def alert_signal_parts(expr: str) -> list[str]:
    """The operands of an alert expression, thresholds stripped: each must return data.

    Splits at top-level ``and`` / ``or`` / ``unless`` (parentheses respected), then at a
    comparison, and keeps the sides that are not plain numbers. ``absent(...)`` parts are
    left out: they are empty exactly when the target is there.
    """
    out = []
    for part in _top_level_parts(" ".join(expr.split())):
        for side in _COMPARISON.split(part)[::2]:
            side = side.strip()
            if side and not re.fullmatch(r"[0-9.e+-]+", side) and not side.startswith("absent("):
                out.append(side)
    return out


# ---------------------------------------------------------------- tests

def test_every_dashboard_query_and_rule_returns_data(tmp_path, prometheus_url, kafka_bootstrap, unique_topic,
                                                     redis_client, redis_db_url):
    run = uuid.uuid4().hex[:8]
    prefix = f"fleetmon-prom-{run}"
    now = time.time()
    records = trace_records(run, 600, now)
    topic = unique_topic(partitions=2, prefix="fleetmon-test-prom")
    dlq_topic = unique_topic(partitions=1, prefix="fleetmon-test-prom-dlq")
    mode = os.environ.get("FLEETMON_TEST_FILL", "auto")
    if mode == "auto":
        mode = "worker" if importlib.util.find_spec("monitor.cli.streams") is not None else "fold"
    if mode == "worker":
        filled_by = fill_with_worker(tmp_path, records, kafka_bootstrap, topic, dlq_topic, redis_db_url, prefix)
    else:
        filled_by = fill_with_fold(records, topic, redis_db_url, prefix, now)
    print(f"redis filled by: {filled_by}")

    # Prometheus must have loaded this checkout's rules (it reads alerts/rules/*.yml)
    urllib.request.urlopen(urllib.request.Request(f"{prometheus_url}/-/reload", method="POST"), timeout=30)
    groups = {g["name"]: g for g in http_get(f"{prometheus_url}/api/v1/rules")["data"]["groups"]}
    assert {"fleetmon-recording", "fleetmon-trailing", "fleetmon-alerts"} <= set(groups), sorted(groups)
    rules = [r for name in ("fleetmon-recording", "fleetmon-trailing", "fleetmon-alerts")
             for r in groups[name]["rules"]]

    (tmp_path / "cmp_extra.py").write_text(
        COMPARISON_EXTRA.replace("{baseline}", f"rel-{run}-1").replace("{candidate}", f"rel-{run}-2"))
    exporter = Exporter(tmp_path, redis_db_url, prefix,
                        ["--kafka-bootstrap", kafka_bootstrap, "--topic", topic, "--extra", "cmp_extra:factory"],
                        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])})
    try:
        assert f'release="rel-{run}-1"' in exporter.text
        checks: list[tuple[str, str, bool]] = []  # (where, expr, must be non-empty)
        for dashboard, panel, expr in dashboard_queries():
            checks.append((f"{dashboard} / {panel}", expr, panel not in EMPTY_OK))
        for rule in rules:
            if rule["type"] == "recording":
                checks.append((f"recording rule {rule['name']}", rule["name"], True))
                checks.append((f"recording rule {rule['name']} (expr)", rule["query"], True))
            else:
                checks.append((f"alert {rule['name']} (expr)", rule["query"], False))
                for part in alert_signal_parts(rule["query"]):
                    checks.append((f"alert {rule['name']} operand", part, True))

        deadline = time.monotonic() + 180  # the trailing group is evaluated once a minute
        pending = checks
        errors: list[str] = []
        while True:
            errors, still = [], []
            for where, expr, must in pending:
                body = prom_query(prometheus_url, expr)
                if body.get("status") != "success":
                    errors.append(f"{where}: {expr!r} -> {body.get('error')}")
                elif must and not body["data"]["result"]:
                    still.append((where, expr, must))
                elif body["data"]["result"] and body["data"]["resultType"] == "vector":
                    releases = {s["metric"].get("release") for s in body["data"]["result"]} - {None}
                    if releases and not any(r and r.startswith(f"rel-{run}-") for r in releases):
                        still.append((where, expr, must))  # only an earlier run's series so far
            assert not errors, "queries Prometheus rejected:\n" + "\n".join(errors)
            pending = still
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(5)
        assert not pending, "queries with no series from this run:\n" + "\n".join(f"{w}: {e}" for w, e, _ in pending)

        for dashboard, label, metric in dashboard_variables():
            url = (f"{prometheus_url}/api/v1/label/{label}/values?"
                   f"{urllib.parse.urlencode({'match[]': metric})}")
            assert http_get(url)["data"], f"{dashboard}: label_values({metric}, {label}) is empty"

        # the exporter reports consumer lag for the test topic, and nothing is left behind
        deadline = time.monotonic() + 30
        while True:
            lag = prom_query(prometheus_url, "fleetmon_consumer_lag")
            ours = {s["metric"]["source"]: float(s["value"][1]) for s in lag["data"]["result"]
                    if s["metric"]["source"].startswith(topic + ":")}
            if len(ours) == 2 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert sorted(ours) == [f"{topic}:0", f"{topic}:1"], lag
        if filled_by == "worker":
            assert set(ours.values()) == {0.0}, ours  # the worker applied everything
    finally:
        exporter.stop()


def test_exporter_text_parses_and_no_unguarded_label_escapes_a_100k_tenant_burst(tmp_path, redis_client,
                                                                                   redis_db_url):
    prefix = f"fleetmon-burst-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_client, prefix=prefix)
    cap = 20
    slicer = Slicer(guard=RedisGuard(store, max_values=cap))
    now = time.time()
    from monitor.identity import COMPONENTS as IDENTITY_COMPONENTS
    from monitor.schema import Trace

    traces = [Trace(trace_id=f"b{i}", ts=now - (i % 600), model_id="m", release="burst", success=i % 3 != 0,
                    ok=i % 3 != 0, task_type="code", tenant=f"tenant-{i:06d}", locale="en",
                    latency_seconds=0.5 + (i % 50) / 10, tokens_in=100, tokens_out=20)
              for i in range(100_000)]
    delta = fold(traces, slicer, now)
    assert store.apply(delta, "burst:0", 0, len(traces) - 1)
    admitted = {v.decode() for v in redis_client.smembers(f"{prefix}:dims:tenant")}
    assert len(admitted) == cap

    exporter = Exporter(tmp_path, redis_db_url, prefix)
    try:
        text = exporter.scrape()
    finally:
        exporter.stop()
    families = list(text_string_to_metric_families(text))
    assert families
    tenants: set[str] = set()
    folded = None
    for family in families:
        for sample in family.samples:
            if sample.labels.get("tenant"):  # rows of groupings without tenant have it empty
                tenants.add(sample.labels["tenant"])
            if sample.name == "fleetmon_folded_label_values_total" and sample.labels.get("dimension") == "tenant":
                folded = sample.value
            # label names: the slice dimensions plus the exporter's own labels, nothing else
            assert set(sample.labels) <= {*SLICE_DIMENSIONS, "window", "outcome", "type", "le", "source",
                                          "dimension", "grouping", *IDENTITY_COMPONENTS}, sample
    assert tenants <= admitted | {"__other__"}
    assert "__other__" in tenants
    assert folded == 100_000 - cap
    assert len(text) < 2_000_000  # 21 tenant values in each grouping with tenant, not 100,000
