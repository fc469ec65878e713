"""The canary and baseline readers over slice groupings read what the cross-product gave: for every
comparison slice and task type, exactly the counts of the traces in it (a reference counted from the
traces themselves, as the old full-key slices summed them), each trace once."""

from __future__ import annotations

import random

import pytest

from alerts.baseline import arm_counts, baseline_cells
from alerts.engine import canary_cells
from alerts.evidence import ArmCounts, CanaryStrata, Comparison
from monitor.aggregate import Aggregate
from monitor.fold import fold
from monitor.schema import Trace, validate
from monitor.slices import UNKNOWN, SliceKey, Slicer, comparison_slices
from monitor.store.memory import MemoryStore
from monitor.windows import resolutions_for

NOW = 1_800_000_000.0


def _traces(seed: int, n: int) -> list[Trace]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        arm = rng.choice(["baseline", "baseline", "canary"])
        release = "v2" if arm == "canary" else rng.choice(["v1", "v1", "v0"])
        record = {"trace_id": f"t{i}", "ts": NOW - rng.uniform(60, 1800), "model_id": "m", "release": release,
                  "arm": arm, "ok": rng.random() < 0.7, "harmful_action": rng.random() < 0.05,
                  "benign": rng.random() < 0.5, "refused": rng.random() < 0.1}
        for dim, values in (("task_type", ["code", "chat", "math"]), ("tenant", ["a", "b", "c", "d"]),
                            ("locale", ["en", "de"])):
            if rng.random() < 0.9:  # some unknown
                record[dim] = rng.choice(values)
        out.append(validate(record))
    return out


def _reference(traces: list[Trace], baseline: str, candidate: str) -> dict[SliceKey, CanaryStrata]:
    slicer = Slicer()
    cells: dict[SliceKey, dict[str, list[Aggregate]]] = {}
    for t in traces:
        if not ((t.arm == "canary" and t.release == candidate) or (t.arm == "baseline" and t.release == baseline)):
            continue
        for key in comparison_slices(slicer.key(t)):
            pair = cells.setdefault(key, {}).setdefault(t.task_type or UNKNOWN, [Aggregate(), Aggregate()])
            pair[1 if t.arm == "canary" else 0].update(t)
    return {key: CanaryStrata({s: (arm_counts(b), arm_counts(c)) for s, (b, c) in strata.items()})
            for key, strata in cells.items()}


def _store(traces: list[Trace]) -> MemoryStore:
    store = MemoryStore(resolutions=resolutions_for(48 * 3600, 35 * 86400))
    store.apply(fold(traces, Slicer(), NOW, store.resolutions))
    return store


def _without_empty(cells: dict[SliceKey, CanaryStrata]) -> dict[SliceKey, dict[str, tuple[ArmCounts, ArmCounts]]]:
    return {k: dict(v.strata) for k, v in cells.items()}


@pytest.mark.parametrize("seed", range(4))
def test_canary_cells_equal_the_reference_counted_from_the_traces(seed):
    traces = _traces(seed, 1500)
    found = canary_cells(_store(traces), NOW - 3600, NOW + 60)
    volume = {r: sum(t.arm == "baseline" and t.release == r for t in traces) for r in ("v0", "v1")}
    baseline = max(sorted(volume), key=volume.__getitem__)
    assert list(found) == [Comparison(baseline, "v2", "canary")]
    assert _without_empty(found[Comparison(baseline, "v2", "canary")]) == _without_empty(
        _reference(traces, baseline, "v2"))


@pytest.mark.parametrize("seed", range(3))
def test_baseline_cells_equal_the_reference_counted_from_the_traces(seed):
    traces = _traces(seed, 1200)
    store = _store(traces)
    ids = sorted(store.active_slices())
    found = baseline_cells(store, {"v0", "v1"}, ids, NOW - 7200, NOW + 60)
    slicer = Slicer()
    expected: dict[str, dict[SliceKey, ArmCounts]] = {}
    for t in traces:
        if t.release in ("v0", "v1") and t.arm == "baseline":
            for key in comparison_slices(slicer.key(t)):
                cells = expected.setdefault(t.release, {})
                cells[key] = cells.get(key, ArmCounts()).merge(arm_counts(Aggregate.of([t])))
    assert found == expected
