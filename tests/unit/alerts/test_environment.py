"""FleetmonEnvironmentDrop: the baseline's own hourly success against its trailing rate, as an e-detector."""

from __future__ import annotations

import numpy as np
import pytest

from alerts.engine import ENVIRONMENT_STATE_NAME, AlertEngine
from alerts.environment import ALERTNAME, EnvironmentWatch
from alerts.evidence import ArmCounts
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.pairing import PairedCounts, pair_key
from monitor.slices import slice_id, slice_key
from monitor.store.memory import MemoryStore
from monitor.windows import resolutions_for
from tests.support.validity import RecordingNotifier

HOUR = 3600.0
T0 = 1_700_002_800.0  # a whole hour


def _run(rates: list[float], traces_per_hour: int, seed: int, start_hours: int = 0) -> tuple[list, AlertEngine]:
    """Hourly baseline traffic at ``rates`` (one per hour) into hour windows; the engine ticks after each hour.

    A shadow comparison with one pair keeps v1 a baseline release of the engine."""
    rng = np.random.default_rng(seed)
    store = MemoryStore(resolutions=resolutions_for(48 * 3600, 35 * 86400))
    # the whole fleet's row (the release × arm grouping), which the environment detector reads
    sid = slice_id(slice_key({"release": "v1", "arm": "baseline"}))
    first = BatchDelta()
    first.add_paired_evidence(pair_key("v1", "v2", ""), PairedCounts(n_pairs=1).hash_fields())
    store.apply(first)
    notifier = RecordingNotifier()
    engine = AlertEngine(store, notifier)
    for h, p in enumerate(rates):
        start = T0 + HOUR * h
        n = int(rng.poisson(traces_per_hour))
        delta = BatchDelta()
        delta.windows[("1h", int(start), sid)] = Aggregate({"traces": n, "successes": int(rng.binomial(n, p))})
        delta.last_seen[sid] = start + HOUR - 1
        store.apply(delta)
        if h >= start_hours:
            engine.tick(start + HOUR + 180.0)
    return [e for e in notifier.events if e.alertname == ALERTNAME], engine


def test_a_drop_of_the_baseline_pages_once_and_resolves_after_it_ends() -> None:
    rates = [0.8] * (8 * 24) + [0.6] * 12 + [0.8] * (4 * 24)
    events, engine = _run(rates, 600, seed=1)
    assert [e.status for e in events] == ["firing", "resolved"]
    fired = events[0]
    assert 8 * 24 < (fired.ts - T0) / HOUR <= 8 * 24 + 3  # within three hours of the drop
    assert fired.labels["severity"] == "critical" and fired.labels["baseline_release"] == "v1"
    assert fired.evidence["reference"] == pytest.approx(fired.evidence["trailing_rate"] - 0.02)
    assert fired.annotations["runbook_url"].endswith("#fleetmonenvironmentdrop")
    saved = engine.store.get_state(ENVIRONMENT_STATE_NAME)
    assert saved is not None and saved["detectors"]["v1"]["firing"] is False


def test_a_stationary_baseline_and_a_sub_floor_dip_do_not_page() -> None:
    """40 days at 600 traces an hour (one look an hour): at A = 8,760 hours the chance of a false page in
    960 hours is about 0.1 per run at most; with a dip of 1 point (under the 2-point floor) too."""
    paged = 0
    for run in range(4):
        rates = [0.8] * (30 * 24) + [0.79] * (10 * 24)
        events, _ = _run(rates, 600, seed=10 + run, start_hours=7 * 24)
        paged += bool(events)
    assert paged <= 1


def test_state_survives_a_restart_and_detectors_round_trip() -> None:
    watch = EnvironmentWatch(arl_hours=100.0)
    for h in range(5):
        watch.observe("v1", h * HOUR, ArmCounts(n=1000, successes=500), ArmCounts(n=10_000, successes=8000), h)
    again = EnvironmentWatch.from_dict(watch.to_dict(), arl_hours=100.0)
    assert again.detectors["v1"].log_wealth == watch.detectors["v1"].log_wealth
    assert again.detectors["v1"].firing and again.active(10.0)[0].status == "firing"
    # too little trailing history: the hour is skipped, nothing moves
    before = list(watch.detectors["v1"].log_wealth)
    assert watch.observe("v1", 9 * HOUR, ArmCounts(n=1000, successes=0), ArmCounts(n=10, successes=9), 9) is None
    assert watch.detectors["v1"].log_wealth == before
