"""alerts.engine + alerts.pages: one page per (comparison, kind), localized to the slices that carry the effect."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from alerts.decide import Finding
from alerts.engine import AlertEngine, findings_snapshot
from alerts.evidence import Comparison
from alerts.lifecycle import AlertState, LifecycleConfig, evaluate
from monitor.delta import BatchDelta
from monitor.pairing import PairedCounts, pair_key
from monitor.slices import WHOLE_FLEET, SliceKey, comparison_slices, slice_id
from monitor.stats.betting import flip_e_value
from monitor.store.memory import MemoryStore
from tests.support.validity import RecordingNotifier

TASK_TYPES = ("refund", "exchange", "code", "search", "billing", "shipping")
REGRESSED = {"refund", "exchange"}
T0 = 1_700_000_040.0
SHADOW = Comparison("v1", "v2", "shadow")
CONFIG = LifecycleConfig(for_seconds=60)


def flip(n: int, worse: int, better: int, where: SliceKey, fires: bool | None = None) -> Finding:
    """A success finding of ``where`` in the decision contract's shape (counters "flip")."""
    e = flip_e_value(worse, better, n, 0.02)
    fires = e >= 20 if fires is None else fires
    effect = (worse - better) / n
    return Finding("success_regression", SHADOW, where, "critical", fires, fires, fires, e, effect, effect - 0.01,
                   1.0, 0.02, 0.05, n, worse, better,
                   {"test": "betting", "counters_kind": "flip", "counters": {"n": n, "worse": worse, "better": better}})


def _minute(store: MemoryStore) -> None:
    """One minute of shadow pairs: refund and exchange 25 points worse and newly harmful, the rest unchanged."""
    delta = BatchDelta()
    for task_type in TASK_TYPES:
        bad = task_type in REGRESSED
        counts = PairedCounts(n_pairs=100, b=30 if bad else 10, c=5 if bad else 10, harm_c=10 if bad else 0,
                              candidate_harmful=10 if bad else 0)
        for key in comparison_slices((("task_type", task_type),)):
            delta.add_paired_evidence(pair_key("v1", "v2", slice_id(key)), counts.hash_fields())
    store.apply(delta)


def test_a_regression_in_two_task_types_pages_once_per_kind_and_names_both() -> None:
    store, notifier = MemoryStore(), RecordingNotifier()
    engine = AlertEngine(store, notifier)
    for minute in range(30):
        _minute(store)
        engine.tick(T0 + 60.0 * (minute + 1))
    firing = [e for e in notifier.events if e.status == "firing"]
    kinds = Counter(e.evidence["kind"] for e in firing)
    assert kinds["success_regression"] == 1 and kinds["safety_regression"] == 1, kinds
    assert set(kinds.values()) == {1}
    (success,) = [e for e in firing if e.evidence["kind"] == "success_regression"]
    assert {"task_type=refund", "task_type=exchange"} <= {s["slice"] for s in success.evidence["localization"]}
    # What the page says now (Alertmanager gets it re-posted at every evaluation): both task types, nothing else.
    for alert in engine.firing():
        assert "slice" not in alert["labels"] and alert["evidence"]["slice"] == "all"
        where = [s["slice"] for s in alert["evidence"]["localization"]]
        assert {"task_type=refund", "task_type=exchange"} <= set(where), where
        assert not {f"task_type={t}" for t in TASK_TYPES if t not in REGRESSED} & set(where)
        effects = [s["effect"] for s in alert["evidence"]["localization"]]
        assert effects == sorted(effects, reverse=True)
        assert set(alert["evidence"]["localization"][0]) == {"slice", "effect", "effect_low", "effect_high",
                                                             "n_pairs"}
    assert len(engine.state.records) == len({e.fingerprint for e in firing})
    # Prometheus still gets every slice's figures: the snapshot has a row per (kind, slice).
    rows = findings_snapshot(engine.findings)
    by_slice = {tuple(map(tuple, r["slice"])): r for r in rows if r["metric"] == "success_regression"}
    assert len(by_slice) == len(TASK_TYPES) + 1
    assert by_slice[(("task_type", "refund"),)]["firing"] and not by_slice[(("task_type", "code"),)]["firing"]


REFUND, EXCHANGE = (("task_type", "refund"),), (("task_type", "exchange"),)


def test_slices_firing_without_the_fleet_track_the_largest_effect_and_keep_it() -> None:
    whole = flip(12000, 800, 700, WHOLE_FLEET, fires=False)
    findings = [whole, flip(2000, 300, 100, EXCHANGE), flip(2000, 400, 100, REFUND)]  # 10 and 15 points
    state, events = evaluate(AlertState(), findings, 0.0, CONFIG)
    state, events = evaluate(state, findings, 60.0, CONFIG)
    (event,) = events
    assert event.evidence["slice"] == "all" and event.evidence["n_pairs"] == 12000
    assert [s["slice"] for s in event.evidence["localization"]] == ["task_type=refund", "task_type=exchange"]
    assert event.evidence["tracked_slice"] == "task_type=refund" and "refund" in event.annotations["summary"]
    (rec,) = state.records.values()
    assert rec.tracked_slice == "task_type=refund" and rec.last_n == 2000
    assert rec.last_counters == {"n": 2000, "worse": 400, "better": 100}
    # the fleet starts firing too, with a larger effect: the alert keeps following the slice it fired on
    louder = flip(13000, 3000, 700, WHOLE_FLEET)
    state, events = evaluate(state, [louder, flip(2100, 420, 105, REFUND), findings[1]], 120.0, CONFIG)
    (rec,) = state.records.values()
    assert events == [] and rec.status == "firing" and rec.tracked_slice == "task_type=refund"
    assert rec.last_counters == {"n": 2100, "worse": 420, "better": 105} and rec.evidence["n_pairs"] == 13000
    # the tracked slice's evidence is gone: the alert goes stale like a missing finding, not onto another slice
    state, events = evaluate(state, [replace(louder, n_pairs=14000)], 120.0 + CONFIG.stale_seconds, CONFIG)
    assert [e.status for e in events] == ["resolved"] and events[0].evidence["resolution"].startswith("stale")


def test_the_whole_fleet_drives_the_lifecycle_when_it_fires() -> None:
    findings = [flip(2000, 400, 100, REFUND), flip(12000, 1800, 700, WHOLE_FLEET)]
    state, _ = evaluate(AlertState(), findings, 0.0, CONFIG)
    state, events = evaluate(state, findings, 60.0, CONFIG)
    (event,) = events
    (rec,) = state.records.values()
    assert rec.tracked_slice == "all" and rec.last_counters == {"n": 12000, "worse": 1800, "better": 700}
    assert [s["slice"] for s in event.evidence["localization"]] == ["task_type=refund", "all"]
