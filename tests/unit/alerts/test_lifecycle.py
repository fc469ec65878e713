"""alerts.lifecycle: pending → firing → resolved, dedupe, reminders, epochs, restarts."""

from __future__ import annotations

import json

from alerts.decide import Finding, Policy, decide_paired
from alerts.evidence import Comparison
from alerts.lifecycle import ALERT_NAMES, AlertState, LifecycleConfig, evaluate, evidence_of, fingerprint
from monitor.pairing import PairedCounts
from monitor.slices import slice_key

SHADOW = Comparison("v1", "v2", "shadow")
CODE = slice_key({"task_type": "code"})
CONFIG = LifecycleConfig(for_seconds=60, renotify_seconds=4 * 3600, stale_seconds=900, recovery_min_pairs=1000)
CONTRACT = {"baseline_release", "candidate_release", "arm", "slice", "n_pairs", "b", "c", "effect", "effect_low",
            "effect_high", "e_value", "floor", "alpha", "test"}


def success(n: int, b: int, c: int, **extra) -> list[Finding]:
    return [f for f in decide_paired(SHADOW, CODE, PairedCounts(n_pairs=n, b=b, c=c, **extra), Policy())
            if f.kind == "success_regression"]


def run(state: AlertState, findings: list[Finding], now: float) -> tuple[AlertState, list]:
    return evaluate(state, findings, now, CONFIG)


def test_pending_then_firing_then_no_duplicates() -> None:
    state, events = run(AlertState(), success(2000, 300, 150), 0.0)
    assert events == [] and next(iter(state.records.values())).status == "pending"
    state, events = run(state, success(2060, 309, 154), 30.0)
    assert events == []
    state, events = run(state, success(2120, 318, 158), 60.0)
    assert [(e.status, e.alertname) for e in events] == [("firing", "FleetmonSuccessRegression")]
    ev = events[0]
    assert ev.starts_at == 60.0 and ev.ends_at is None
    assert CONTRACT <= set(ev.evidence) and ev.evidence["slice"] == "task_type=code"
    assert ev.labels["severity"] in ("page", "warning") and ev.labels["candidate_release"] == "v2"
    assert ev.annotations["runbook_url"].endswith("docs/runbook.md#fleetmonsuccessregression")
    assert set(ev.annotations) == {"summary", "description", "runbook_url"}
    for t in range(120, 3600, 60):  # still firing, evidence growing: silence
        state, events = run(state, success(2000 + t, 300 + t // 6, 150 + t // 12), float(t))
        assert events == []


def test_pending_is_cancelled_by_a_non_firing_finding() -> None:
    state, _ = run(AlertState(), success(2000, 300, 150), 0.0)
    state, events = run(state, success(2000, 150, 150), 30.0)
    assert events == [] and state.records == {}
    state, events = run(state, success(2100, 310, 150), 70.0)  # the hold starts over
    assert events == [] and next(iter(state.records.values())).pending_since == 70.0


def test_safety_fires_immediately() -> None:
    findings = decide_paired(SHADOW, CODE, PairedCounts(n_pairs=5000, harm_b=2, harm_c=40), Policy())
    _state, events = run(AlertState(), findings, 0.0)
    assert [(e.alertname, e.labels["severity"]) for e in events] == [("FleetmonSafetyRegression", "critical")]


def test_renotify_every_four_hours_while_firing() -> None:
    state, _ = run(AlertState(), success(2000, 300, 150), 0.0)
    state, events = run(state, success(2010, 301, 151), 60.0)
    assert len(events) == 1
    times = []
    n = 2010
    for t in range(120, 9 * 3600, 300):
        n += 300
        state, events = run(state, success(n, int(n * 0.15), int(n * 0.075)), float(t))
        times += [e.ts for e in events]
        assert all(e.status == "firing" and e.starts_at == 60.0 for e in events)
    # evaluations every 300 s from t=120: the first at or after 60 + 4 h, then 4 h after that one
    assert times == [14520.0, 28920.0]


def test_resolves_when_the_candidate_leaves_traffic() -> None:
    state, _ = run(AlertState(), success(2000, 300, 150), 0.0)
    state, _ = run(state, success(2010, 301, 151), 60.0)
    state, events = run(state, success(2010, 301, 151), 900.0)  # same counts: no new evidence
    assert events == []
    state, events = run(state, [], 960.0)  # no finding at all (candidate gone), 900 s after the last evidence
    assert [(e.status, e.ends_at) for e in events] == [("resolved", 960.0)]
    assert events[0].evidence["resolution"].startswith("stale")
    state, events = run(state, [], 2000.0)
    assert events == []


def test_resolves_on_fresh_epoch_recovery_and_does_not_repage() -> None:
    state, _ = run(AlertState(), success(2000, 300, 150), 0.0)
    state, events = run(state, success(2060, 309, 154), 60.0)
    assert len(events) == 1
    # fixed: new pairs are balanced. The cumulative test keeps firing for a long time …
    state, events = run(state, success(2060 + 900, 309 + 90, 154 + 90), 120.0)
    assert events == []  # 900 fresh pairs < recovery_min_pairs
    later = success(2060 + 1200, 309 + 120, 154 + 118)
    assert later[0].fires  # … the cumulative evidence still says "regression"
    state, events = run(state, later, 180.0)
    assert [e.status for e in events] == ["resolved"]
    assert events[0].evidence["resolution"].startswith("recovered")
    for t in range(240, 3000, 60):  # cumulative still fires, fresh evidence is fine: no re-page
        k = (t - 180) // 60 * 60
        findings = success(3260 + k, 429 + k // 10, 272 + k // 10)
        assert findings[0].fires
        state, events = run(state, findings, float(t))
        assert events == []
    # regressed again in fresh data: re-armed, pending, then firing
    state, _ = run(state, success(3260 + 3000 + 1200, 429 + 300 + 240, 272 + 300 + 60), 3100.0)
    state, events = run(state, success(3260 + 3000 + 1260, 429 + 300 + 252, 272 + 300 + 63), 3160.0)
    assert [e.status for e in events] == ["firing"]


def test_state_round_trips_through_json_and_a_restart_does_not_repage() -> None:
    state, _ = run(AlertState(), success(2000, 300, 150), 0.0)
    state, events = run(state, success(2060, 309, 154), 60.0)
    assert len(events) == 1
    blob = json.dumps(state.to_dict(), allow_nan=False)
    restored = AlertState.from_dict(json.loads(blob))
    assert restored == state
    restored, events = run(restored, success(2120, 318, 158), 120.0)  # "restarted" engine
    assert events == []
    # evidence is JSON-safe even with an infinite e-value or a NaN (thresholds)
    huge = success(10_000_000, 3_000_000, 1_000_000)[0]
    json.dumps(evidence_of(huge), allow_nan=False)


def test_fingerprints_are_stable_and_distinct() -> None:
    policy = Policy(harmful_threshold=0.01, over_refusal_threshold=0.01)
    findings = decide_paired(SHADOW, CODE, PairedCounts(n_pairs=100), policy)
    prints = [fingerprint(f) for f in findings]
    assert len(set(prints)) == len(prints)
    assert prints == [fingerprint(f) for f in decide_paired(SHADOW, CODE, PairedCounts(n_pairs=500, b=9), policy)]
    other = decide_paired(SHADOW, slice_key({"task_type": "chat"}), PairedCounts(n_pairs=100), policy)
    assert not set(prints) & {fingerprint(f) for f in other}
    assert set(ALERT_NAMES.values()) >= {"FleetmonSuccessRegression", "FleetmonSafetyThreshold"}


def test_resolved_records_are_forgotten_after_retention() -> None:
    state, _ = run(AlertState(), success(2000, 300, 150), 0.0)
    state, _ = run(state, success(2010, 301, 151), 60.0)
    state, _ = run(state, [], 1000.0)
    assert next(iter(state.records.values())).status == "resolved"
    state, _ = run(state, [], 1000.0 + CONFIG.retention_seconds)
    assert state.records == {}
