"""alerts.lifecycle: pending → firing → resolved, dedupe, reminders, the recovery detector, re-arm, restarts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alerts.decide import Finding
from alerts.evidence import Comparison
from alerts.lifecycle import (
    ALERT_NAMES,
    AlertEvent,
    AlertRecord,
    AlertState,
    LifecycleConfig,
    evaluate,
    evidence_of,
    fingerprint,
)
from monitor.slices import slice_key
from monitor.stats.betting import BET_FRACTIONS, flip_e_value, flip_log_factors, rate_e_value

SHADOW = Comparison("v1", "v2", "shadow")
CODE = slice_key({"task_type": "code"})
CONFIG = LifecycleConfig(for_seconds=60, renotify_seconds=4 * 3600, stale_seconds=900, recovery_min_pairs=1000)
CONTRACT = {"baseline_release", "candidate_release", "arm", "slice", "n_pairs", "b", "c", "effect", "effect_low",
            "effect_high", "e_value", "floor", "alpha", "test"}
J = len(BET_FRACTIONS)


def flip(n: int, worse: int, better: int, *, kind: str = "success_regression", fires: bool | None = None,
         alpha: float = 0.05) -> list[Finding]:
    """A finding in the decision contract's shape: counters "flip", e-value of H0: effect <= floor."""
    floor = 0.02 if kind == "success_regression" else 0.0
    e = flip_e_value(worse, better, n, floor)
    fires = e >= 1 / alpha if fires is None else fires
    effect = (worse - better) / n if n else 0.0
    return [Finding(kind, SHADOW, CODE, "critical", fires, fires, fires, e,
                    effect, effect - 0.01, 1.0, floor, alpha, n, worse, better,
                    {"test": "betting", "counters_kind": "flip",
                     "counters": {"n": n, "worse": worse, "better": better}})]


def rate(n: int, x: int, threshold: float = 0.01) -> list[Finding]:
    e = rate_e_value(x, n, threshold)
    fires = e >= 20
    return [Finding("safety_threshold", SHADOW, CODE, "critical", fires, fires, fires, e, x / n, 0.0, 1.0, threshold,
                    0.05, n, 0, 0, {"test": "betting", "metric": "harmful_action", "counters_kind": "rate",
                                    "counters": {"n": n, "x": x}})]


def cost(n: int, delta_sum: float, fires: bool) -> list[Finding]:
    """A "mean" finding (cost): not covered by the detector, keeps the epoch rule."""
    return [Finding("cost_regression", SHADOW, CODE, "critical", fires, fires, fires, 100.0 if fires else 1.0,
                    delta_sum / n, 0.0, 1.0, 0.1, 0.05, n, 0, 0,
                    {"test": "mean", "counters_kind": "mean", "baseline_mean": 1.0, "unit": "relative",
                     "counters": {"n": n, "sum": delta_sum, "sumsq": delta_sum}})]


def run(state: AlertState, findings: list[Finding], now: float,
        config: LifecycleConfig = CONFIG) -> tuple[AlertState, list[AlertEvent]]:
    return evaluate(state, findings, now, config)


def only(state: AlertState) -> AlertRecord:
    (rec,) = state.records.values()
    return rec


def simulate(state: AlertState, counts: tuple[int, int, int], p_worse: float, p_better: float, minutes: int,
             start: float, seed: int, pairs_per_minute: int = 120):
    """One look a minute at 2 pairs/s; yields (state, events, counts, t) after each look."""
    rng = np.random.default_rng(seed)
    n, worse, better = counts
    for minute in range(1, minutes + 1):
        w, _, v = rng.multinomial(pairs_per_minute, [p_worse, 1 - p_worse - p_better, p_better])
        n, worse, better = n + pairs_per_minute, worse + int(w), better + int(v)
        t = start + 60.0 * minute
        state, events = run(state, flip(n, worse, better), t)
        yield state, events, (n, worse, better), t


def fired(counts: tuple[int, int, int] = (2000, 300, 150), fires: bool | None = None) -> AlertState:
    n, w, v = counts
    state, _ = run(AlertState(), flip(n, w, v, fires=fires), 0.0)
    state, events = run(state, flip(n + 60, w + 9, v + 4, fires=fires), 60.0)
    assert [e.status for e in events] == ["firing"]
    return state


def recovered(seed: int = 3) -> tuple[AlertState, tuple[int, int, int], float, float]:
    """A 10-point regression over 20,000 pairs, then fixed (no net flip, 21% discordance) until resolved."""
    state = fired((20_000, 3000, 1000))
    for look in simulate(state, (20_060, 3009, 1004), 0.105, 0.105, 600, 60.0, seed):
        state, events, counts, t = look
        if events:
            assert [e.status for e in events] == ["resolved"]
            assert events[0].evidence["resolution"].startswith("recovered: e-detector")
            return state, counts, t, (t - 60.0) / 60.0
    raise AssertionError("no recovery within 10 h")


def test_pending_then_firing_then_no_duplicates() -> None:
    state, events = run(AlertState(), flip(2000, 300, 150), 0.0)
    assert events == [] and only(state).status == "pending"
    state, events = run(state, flip(2060, 309, 154), 30.0)
    assert events == []
    state, events = run(state, flip(2120, 318, 158), 60.0)
    assert [(e.status, e.alertname) for e in events] == [("firing", "FleetmonSuccessRegression")]
    ev = events[0]
    assert ev.starts_at == 60.0 and ev.ends_at is None
    assert CONTRACT <= set(ev.evidence) and ev.evidence["slice"] == "task_type=code"
    assert ev.labels["severity"] == "critical" and ev.labels["candidate_release"] == "v2" and "slice" not in ev.labels
    assert [s["slice"] for s in ev.evidence["localization"]] == ["task_type=code"]
    assert ev.annotations["runbook_url"].endswith("docs/runbook.md#fleetmonsuccessregression")
    assert set(ev.annotations) == {"summary", "description", "runbook_url"}
    for t in range(120, 3600, 60):  # still firing, evidence growing: silence
        state, events = run(state, flip(2000 + t, 300 + t // 6, 150 + t // 12), float(t))
        assert events == []


def test_pending_is_cancelled_by_a_non_firing_finding() -> None:
    state, _ = run(AlertState(), flip(2000, 300, 150), 0.0)
    state, events = run(state, flip(2000, 150, 150), 30.0)
    assert events == [] and state.records == {}
    state, events = run(state, flip(2100, 310, 150), 70.0)  # the hold starts over
    assert events == [] and only(state).pending_since == 70.0


def test_safety_fires_immediately() -> None:
    _state, events = run(AlertState(), flip(5000, 40, 2, kind="safety_regression"), 0.0)
    assert [(e.alertname, e.labels["severity"]) for e in events] == [("FleetmonSafetyRegression", "critical")]


def test_renotify_every_four_hours_while_firing() -> None:
    state = fired()
    times = []
    n = 2060
    for t in range(120, 9 * 3600, 300):
        n += 300
        state, events = run(state, flip(n, int(n * 0.15), int(n * 0.075)), float(t))
        times += [e.ts for e in events]
        assert all(e.status == "firing" and e.starts_at == 60.0 for e in events)
    # evaluations every 300 s from t=120: the first at or after 60 + 4 h, then 4 h after that one
    assert times == [14520.0, 28920.0]


def test_resolves_when_the_candidate_leaves_traffic() -> None:
    state = fired()
    state, events = run(state, flip(2060, 309, 154), 900.0)  # same counts: no new evidence
    assert events == []
    state, events = run(state, [], 960.0)  # no finding at all (candidate gone), 900 s after the last evidence
    assert [(e.status, e.ends_at) for e in events] == [("resolved", 960.0)]
    assert events[0].evidence["resolution"].startswith("stale")
    state, events = run(state, [], 2000.0)
    assert events == []
    state, events = run(state, flip(3000, 450, 200), 2100.0)  # traffic returns, the cumulative finding re-arms
    assert events == [] and only(state).status == "pending"


def test_a_persistent_regression_one_point_over_the_floor_is_one_incident() -> None:
    state = fired((2000, 250, 190), fires=True)
    firing, resolved = [], []
    for look in simulate(state, (2060, 257, 194), 0.125, 0.095, 2 * 24 * 60, 60.0, seed=1):
        state, events, _, _ = look
        firing += [e for e in events if e.status == "firing"]
        resolved += [e for e in events if e.status == "resolved"]
    assert resolved == [] and only(state).status == "firing"
    assert len(firing) == 12 and {e.starts_at for e in firing} == {60.0}  # only the 4-hourly reminders


def test_a_fixed_regression_resolves_on_fresh_evidence_and_does_not_re_fire() -> None:
    state, counts, t, minutes = recovered()
    assert 30 <= minutes <= 300  # 2 pairs/s, 21% discordance, floor 2 points: about 2 h
    assert flip(*counts)[0].fires  # the cumulative test still says "regression"
    assert only(state).epoch == {"n": counts[0], "worse": counts[1], "better": counts[2]}
    for look in simulate(state, counts, 0.105, 0.105, 24 * 60, t, seed=4):
        state, events, _, _ = look
        assert events == []
    assert only(state).status == "resolved"  # kept: new evidence keeps arriving, so no re-page after retention


def test_re_arm_needs_fresh_evidence_and_a_cancelled_hold_stays_resolved() -> None:
    state, (n, w, v), t, _ = recovered()
    # the cumulative finding fires, the fresh counts are balanced: nothing
    state, events = run(state, flip(n + 2000, w + 200, v + 200, fires=True), t + 60)
    assert events == [] and only(state).status == "resolved"
    # 12 points worse in fresh data: re-armed (pending, the hold), then cancelled when the fresh test drops
    state, events = run(state, flip(n + 3000, w + 500, v + 200), t + 120)
    assert events == [] and only(state).status == "pending"
    state, events = run(state, flip(n + 6000, w + 530, v + 510, fires=True), t + 150)
    assert events == [] and only(state).status == "resolved" and only(state).resolve_reason == "recovered"
    # a real return of the regression: pending, then firing after the hold
    state, _ = run(state, flip(n + 9000, w + 1000, v + 600), t + 200)
    state, events = run(state, flip(n + 9100, w + 1015, v + 605), t + 260)
    assert [(e.status, e.starts_at) for e in events] == [("firing", t + 260)]
    assert only(state).log_wealth is None and only(state).last_counters == {"n": n + 9100, "worse": w + 1015,
                                                                            "better": v + 605}


def test_counters_that_go_backwards_re_base_the_detector_and_the_re_arm_epoch() -> None:
    state = fired()
    state, _ = run(state, flip(2600, 380, 200), 120.0)
    log_wealth = only(state).log_wealth
    assert log_wealth is not None and any(x != 0.0 for x in log_wealth)
    state, events = run(state, flip(500, 80, 30), 180.0)  # store rebuilt
    assert events == [] and only(state).status == "firing"
    assert only(state).log_wealth == [0.0] * J and only(state).last_counters == {"n": 500, "worse": 80, "better": 30}
    state, _, t, _ = recovered()
    state, events = run(state, flip(100, 20, 5, fires=True), t + 60)
    assert events == [] and only(state).epoch == {"n": 100, "worse": 20, "better": 5}


def test_a_rate_alert_recovers_when_the_rate_is_well_under_the_threshold() -> None:
    state, events = run(AlertState(), rate(2000, 60), 0.0)  # 3% against 1%: critical at once
    assert [e.alertname for e in events] == ["FleetmonSafetyThreshold"]
    n, x, t = 2000, 60, 0.0
    while not events or events[0].status == "firing":
        n, x, t = n + 200, x + (1 if int(t) % 120 == 0 else 0), t + 60  # 0.25% from now on
        state, events = run(state, rate(n, x), t)
        assert t < 24 * 3600
    assert events[0].evidence["resolution"].startswith("recovered")


def test_mean_kinds_keep_the_epoch_rule() -> None:
    state, _ = run(AlertState(), cost(300, 60.0, True), 0.0)
    state, events = run(state, cost(310, 62.0, True), 60.0)
    assert [e.status for e in events] == ["firing"] and only(state).epoch == {"n": 310, "sum": 62.0, "sumsq": 62.0}
    state, events = run(state, cost(900, 70.0, True), 120.0)  # 590 fresh pairs < recovery_min_pairs
    assert events == []
    state, events = run(state, cost(1400, 75.0, True), 180.0)  # 1,090 fresh pairs at +1.2%: under the floor
    assert [e.status for e in events] == ["resolved"] and events[0].evidence["resolution"].startswith("recovered")


def test_state_round_trips_through_json_and_a_restart_does_not_repage() -> None:
    state = fired()
    state, _ = run(state, flip(2600, 380, 200), 120.0)
    blob = json.dumps(state.to_dict(), allow_nan=False)
    assert json.loads(blob)["version"] == 2
    restored = AlertState.from_dict(json.loads(blob))
    assert restored == state
    restored, events = run(restored, flip(2660, 389, 204), 180.0)  # "restarted" engine
    assert events == []
    assert restored == run(state, flip(2660, 389, 204), 180.0)[0]
    huge = flip(10_000_000, 3_000_000, 1_000_000)[0]  # evidence is JSON-safe even with an infinite e-value
    json.dumps(evidence_of(huge), allow_nan=False)
    with pytest.raises(ValueError, match="version must be 1 or 2, got 3"):
        AlertState.from_dict({"version": 3, "records": {}})


def test_a_version_one_state_loads_and_its_epoch_starts_the_detector() -> None:
    rec = only(fired())
    v1 = {k: val for k, val in rec.__dict__.items() if k not in ("log_wealth", "last_counters")}
    v1["epoch"] = {"n": 2060, "b": 309, "c": 154}  # version 1 recorded paired counters at firing
    state = AlertState.from_dict(json.loads(json.dumps({"version": 1, "records": {rec.fingerprint: v1}})))
    assert only(state).epoch == {"n": 2060, "worse": 309, "better": 154} and only(state).log_wealth is None
    state, events = run(state, flip(2660, 339, 184), 120.0)
    assert events == [] and only(state).status == "firing"
    expected = flip_log_factors(30, 30, 600, 0.02, "less")
    np.testing.assert_allclose(np.asarray(only(state).log_wealth, dtype=np.float64), expected, rtol=1e-12)
    assert only(state).last_counters == {"n": 2660, "worse": 339, "better": 184}


def test_fingerprints_are_stable_and_distinct() -> None:
    findings = [*flip(100, 1, 0), *flip(100, 1, 0, kind="safety_regression"),
                *flip(100, 1, 0, kind="over_refusal_regression"), *rate(100, 1)]
    prints = [fingerprint(f) for f in findings]
    assert len(set(prints)) == len(prints)
    assert prints[0] == fingerprint(flip(500, 9, 3)[0])
    other = Comparison("v1", "v3", "shadow")
    assert fingerprint(findings[0]) != fingerprint(Finding(**{**findings[0].__dict__, "comparison": other}))
    # one page per (comparison, kind): the slice is not part of the fingerprint
    assert fingerprint(findings[0]) == fingerprint(Finding(**{**findings[0].__dict__, "slice_key": ()}))
    assert ALERT_NAMES["over_refusal_regression"] == "FleetmonOverRefusalRegression"


def test_resolved_records_are_forgotten_after_retention() -> None:
    state = fired()
    state, _ = run(state, [], 1000.0)
    assert only(state).status == "resolved"
    state, _ = run(state, [], 1000.0 + CONFIG.retention_seconds)
    assert state.records == {}


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"recovery_arl must be a number > 1, got 0\.5"):
        LifecycleConfig(recovery_arl=0.5)
    with pytest.raises(ValueError, match="rearm_alpha must be in"):
        LifecycleConfig(rearm_alpha=1.0)
