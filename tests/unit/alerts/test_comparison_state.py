"""alerts.comparison_state: one state per finding row, the planning estimate checked against statsmodels,
and the one-hot gauge the exporter builds from it."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from statsmodels.stats.power import NormalIndPower

from alerts.comparison_state import PLANNING_POWER, STATES, pairs_needed, state_of
from alerts.engine import AlertEngine, findings_snapshot, from_engine
from alerts.evidence import Comparison
from alerts.policy import Finding
from monitor.delta import BatchDelta
from monitor.exporter import comparisons
from monitor.exporter.comparisons import ComparisonCollector
from monitor.pairing import PairedCounts, pair_key
from monitor.slices import WHOLE_FLEET, comparison_slices, slice_id
from monitor.store.memory import MemoryStore
from tests.support.validity import RecordingNotifier

T0 = 1_700_000_040.0
REFUND = (("task_type", "refund"),)


def success(n: int, b: int, c: int, fires: bool = False, where=WHOLE_FLEET, **detail) -> Finding:
    return Finding("success_regression", Comparison("v1", "v2", "shadow"), where, "critical", fires, fires, fires,
                   1.0, (b - c) / max(n, 1), 0.0, 1.0, 0.02, 0.0194, n, b, c, {"alpha_family": 0.0194, **detail})


def test_the_exporter_spells_the_same_states():
    assert comparisons.STATES == STATES


def test_pairs_needed_is_the_one_sided_normal_sample_size_of_statsmodels():
    rng = random.Random(12)
    solver = NormalIndPower()
    for _ in range(40):
        n, floor, alpha = rng.randint(0, 20000), rng.choice([0.01, 0.02, 0.05]), rng.choice([0.005, 0.0194, 0.05])
        b = rng.randint(0, n // 4)
        c = rng.randint(0, n // 4)
        f = replace(success(n, b, c), floor=floor, detail={"alpha_family": alpha})
        psi = (b + c + 1) / (n + 2)
        # one sample (ratio=0), one-sided: a drop of 2·floor tested against H0: drop <= floor, sd sqrt(psi)
        expected = solver.solve_power(effect_size=floor / math.sqrt(psi), alpha=alpha, power=PLANNING_POWER,
                                      ratio=0.0, alternative="larger")
        assert pairs_needed(f) == math.ceil(expected - 1e-9), (n, b, c, floor, alpha)


def test_pairs_needed_rises_with_discordance_and_falls_with_the_floor():
    assert pairs_needed(success(1000, 50, 50)) < pairs_needed(success(1000, 150, 150))
    assert pairs_needed(replace(success(1000, 50, 50), floor=0.05)) < pairs_needed(success(1000, 50, 50))
    assert pairs_needed(success(0, 0, 0)) == pytest.approx(4226 * 0.5 / 0.2, rel=0.01)   # psi = 1/2 before any pair
    assert pairs_needed(replace(success(10, 1, 1), kind="cost_regression")) is None
    assert pairs_needed(replace(success(10, 1, 1), floor=0.0)) is None


def test_each_state_is_reached_and_the_alert_wins_over_the_evidence():
    thin, plenty = success(100, 10, 10), success(50_000, 5000, 5000)
    assert state_of(thin, None) == "warming" and state_of(plenty, None) == "no_evidence"
    assert state_of(success(0, 0, 0), None) == "warming"
    assert state_of(replace(plenty, kind="cost_regression", detail={"eligible": False}), None) == "warming"
    assert state_of(replace(plenty, kind="cost_regression", detail={"eligible": True}), None) == "no_evidence"
    assert state_of(plenty, "pending") == "pending" and state_of(plenty, "firing") == "firing"
    assert state_of(thin, "resolved") == "resolved"
    # a slice row follows its alert only when it carries the effect
    calm_slice = success(100, 10, 10, where=REFUND)
    assert state_of(calm_slice, "firing") == "warming"
    assert state_of(replace(calm_slice, fires=True), "firing") == "firing"
    assert state_of(replace(calm_slice, fires=True), "pending") == "pending"


def _minute(store: MemoryStore, b: int, c: int) -> None:
    delta = BatchDelta()
    for key in comparison_slices(REFUND):
        counts = PairedCounts(n_pairs=300, b=b, c=c)
        delta.add_paired_evidence(pair_key("v1", "v2", slice_id(key)), counts.hash_fields())
    store.apply(delta)


def one_hot(engine: AlertEngine) -> dict[tuple[str, str], str]:
    """(metric, task_type) → the state whose sample is 1, checking every row has exactly one."""
    (family,) = [f for f in ComparisonCollector(from_engine(engine)).collect() if f.name == "fleetmon_comparison_state"]
    rows: dict[tuple[str, str], list[str]] = {}
    for sample in family.samples:
        key = (sample.labels["metric"], sample.labels["task_type"])
        rows.setdefault(key, [])
        if sample.value == 1.0:
            rows[key].append(sample.labels["state"])
        else:
            assert sample.value == 0.0
    assert all(len(on) == 1 for on in rows.values()), rows
    assert all(sum(1 for s in family.samples if (s.labels["metric"], s.labels["task_type"]) == key) == len(STATES)
               for key in rows)
    return {key: on[0] for key, on in rows.items()}


def test_the_engine_exports_warming_then_pending_then_firing():
    store, notifier = MemoryStore(), RecordingNotifier()
    engine = AlertEngine(store, notifier)
    _minute(store, 30, 30)               # no regression, 300 pairs: far below the pairs needed
    engine.tick(T0)
    assert one_hot(engine)[("success_regression", "")] == "warming"
    needed = {r["pairs_needed"] for r in findings_snapshot(engine.findings, engine.state)
              if r["metric"] == "success_regression"}
    assert all(isinstance(n, int) and n > 300 for n in needed)
    for minute in range(1, 30):          # a 25-point drop: the test fires, holds 60 s, then pages
        _minute(store, 90, 15)
        engine.tick(T0 + 60.0 * minute)
        states = one_hot(engine)
        if states[("success_regression", "")] != "warming":
            break
    assert states[("success_regression", "")] == "pending"
    _minute(store, 90, 15)
    engine.tick(T0 + 60.0 * (minute + 1))
    assert one_hot(engine)[("success_regression", "")] == "firing"
    assert one_hot(engine)[("success_regression", "refund")] == "firing"
    assert [e.status for e in notifier.events if e.evidence["kind"] == "success_regression"] == ["firing"]
