"""Paired regression alerts through the real Alertmanager to a real webhook receiver.

A seeded regression in shadow traffic fires; an A/A stream of the same
length does not; after the candidate recovers the alert resolves. The
evidence travels in the annotations (``evidence_json``).
"""

import json
import os
import uuid
from dataclasses import replace

import pytest

from alerts.engine import AlertEngine, EngineConfig
from alerts.lifecycle import LifecycleConfig
from alerts.notifiers import AlertmanagerNotifier
from monitor.fold import fold
from monitor.pairing import Pairer
from monitor.pricing import PriceMap
from monitor.run.simulate import ReleaseProfile, Scenario, generate
from monitor.schema import validate
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from tests.support.webhook import Receiver

WEBHOOK_PORT = int(os.environ.get("FLEETMON_TEST_WEBHOOK_PORT", "9465"))


def drive(engine, store, pairer, scenario, tick_seconds=10.0):
    """Fold the scenario's traces and tick the engine every ``tick_seconds`` of event time."""
    slicer, batch, events = Slicer(), [], []
    next_tick = scenario.start_ts + tick_seconds
    last = scenario.start_ts
    for record in generate(scenario):
        trace = validate(record)
        batch.append(trace)
        last = trace.ts
        if trace.ts >= next_tick:
            store.apply(pairer.join(batch, slicer, trace.ts, fold(batch, slicer, trace.ts)))
            batch = []
            events += engine.tick(trace.ts)
            next_tick += tick_seconds
    store.apply(pairer.join(batch, slicer, last, fold(batch, slicer, last)))
    events += engine.tick(last)
    return events


def ours(candidate):
    def alerts(requests):
        return [a for r in requests if r["path"] == "/alertmanager" for a in r["json"]["alerts"]
                if a["labels"].get("candidate_release") == candidate]
    return alerts


@pytest.fixture
def receiver():
    with Receiver(port=WEBHOOK_PORT) as r:
        yield r


def test_regression_fires_and_resolves_aa_stays_silent(alertmanager_url, receiver):
    run = uuid.uuid4().hex[:8]
    candidate = f"support-v2-{run}"
    base = Scenario(baseline=ReleaseProfile(f"support-v1-{run}"), candidate=ReleaseProfile(candidate),
                    rate_per_second=20, duration_seconds=300, regression_at_seconds=60, regression_drop=0.2,
                    seed=11)
    # A small ARL keeps the recovery phase short; the detector is the production one.
    config = EngineConfig(lifecycle=LifecycleConfig(recovery_arl=200))

    # A/A first: same length, no regression, nothing reaches Alertmanager.
    aa_store = MemoryStore()
    aa_engine = AlertEngine(aa_store, AlertmanagerNotifier(alertmanager_url), config)
    aa_events = drive(aa_engine, aa_store, Pairer(PriceMap.load()), replace(base.aa(), seed=12))
    assert aa_events == []

    store = MemoryStore()
    engine = AlertEngine(store, AlertmanagerNotifier(alertmanager_url), config)
    pairer = Pairer(PriceMap.load())
    events = drive(engine, store, pairer, base)
    fired = [e for e in events if e.status == "firing" and e.alertname == "FleetmonSuccessRegression"]
    assert fired, "the seeded regression did not fire"
    assert receiver.wait_for(lambda reqs: any(a["status"] == "firing" for a in ours(candidate)(reqs)), 30)
    alert = next(a for a in ours(candidate)(receiver.requests) if a["status"] == "firing")
    assert alert["labels"]["alertname"] == "FleetmonSuccessRegression"
    assert alert["labels"]["severity"] in ("page", "warning") and alert["annotations"]["runbook_url"]
    evidence = json.loads(alert["annotations"]["evidence_json"])
    for key in ("baseline_release", "candidate_release", "slice", "n_pairs", "b", "c", "effect", "effect_low",
                "effect_high", "e_value", "floor", "alpha", "test"):
        assert key in evidence, key
    assert evidence["b"] > evidence["c"] and evidence["e_value"] >= 1 / evidence["alpha"]

    # The candidate is fixed: the same traffic with no regression, later in event time.
    recovery = replace(base.aa(), start_ts=base.start_ts + base.duration_seconds, duration_seconds=1500, seed=13)
    events = drive(engine, store, pairer, recovery)
    resolved = [e for e in events if e.status == "resolved"]
    assert resolved and {e.fingerprint for e in resolved} >= {e.fingerprint for e in fired}
    assert receiver.wait_for(lambda reqs: any(a["status"] == "resolved" for a in ours(candidate)(reqs)), 30)


def test_restarted_engine_does_not_page_again(alertmanager_url):
    run = uuid.uuid4().hex[:8]
    scenario = Scenario(baseline=ReleaseProfile(f"a-{run}"), candidate=ReleaseProfile(f"b-{run}"),
                        rate_per_second=20, duration_seconds=240, regression_drop=0.25, seed=5)
    store = MemoryStore()
    pairer = Pairer(PriceMap.load())
    first = AlertEngine(store, AlertmanagerNotifier(alertmanager_url))
    assert any(e.status == "firing" for e in drive(first, store, pairer, scenario))
    again = AlertEngine(store, AlertmanagerNotifier(alertmanager_url))
    assert again.tick(scenario.start_ts + scenario.duration_seconds + 5) == []
