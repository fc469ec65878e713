"""Paired regression alerts through the real Alertmanager to a real webhook receiver.

A seeded regression in shadow traffic fires; an A/A stream of the same
length does not; after the candidate recovers the alert resolves. The
evidence travels in the annotations (``evidence_json``). A page held longer
than Alertmanager's ``resolve_timeout`` (30 s, as scripts/services.sh
configures the test Alertmanager) stays active because the engine re-posts it;
its resolution posts ``endsAt`` = now and it leaves the active list.
"""

import json
import os
import time
import urllib.parse
import urllib.request
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
    assert alert["labels"]["severity"] in ("critical", "warning") and alert["annotations"]["runbook_url"]
    evidence = json.loads(alert["annotations"]["evidence_json"])
    for key in ("baseline_release", "candidate_release", "slice", "n_pairs", "b", "c", "effect", "effect_low",
                "effect_high", "e_value", "floor", "alpha", "test"):
        assert key in evidence, key
    assert evidence["b"] > evidence["c"] and evidence["e_value"] >= 1 / evidence["alpha"]
    assert evidence["slice"] == "all" and "slice" not in alert["labels"] and evidence["localization"]
    assert len(fired) == 1, "one page per regression, not one per slice"

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


def active_alerts(alertmanager_url, candidate):
    """What ``GET /api/v2/alerts`` lists as active for ``candidate``."""
    query = urllib.parse.urlencode({"filter": f'candidate_release="{candidate}"', "active": "true"})
    with urllib.request.urlopen(f"{alertmanager_url}/api/v2/alerts?{query}", timeout=5) as response:
        return [a for a in json.load(response) if a["status"]["state"] == "active"]


def resolve_timeout_seconds(alertmanager_url):
    with urllib.request.urlopen(f"{alertmanager_url}/api/v2/status", timeout=5) as response:
        original = json.load(response)["config"]["original"]
    line = next((x for x in original.splitlines() if x.strip().startswith("resolve_timeout:")), "")
    value = line.split(":", 1)[1].strip() if line else "5m"
    return float(value[:-1]) * {"s": 1, "m": 60, "h": 3600}[value[-1]]


def test_a_held_page_outlasts_resolve_timeout_and_its_resolution_ends_it(alertmanager_url, receiver):
    resolve_timeout = resolve_timeout_seconds(alertmanager_url)
    if resolve_timeout > 60:
        pytest.skip(f"the test Alertmanager's resolve_timeout is {resolve_timeout:.0f} s "
                    "(scripts/services.sh sets 30s)")
    hold = resolve_timeout + 15
    run = uuid.uuid4().hex[:8]
    candidate = f"hold-v2-{run}"
    t0 = time.time()
    # Event time ends in the present: 240 s of past traffic, then live traffic for the hold.
    scenario = Scenario(baseline=ReleaseProfile(f"hold-v1-{run}"), candidate=ReleaseProfile(candidate),
                        rate_per_second=20, duration_seconds=240 + hold + 30, regression_at_seconds=0,
                        regression_drop=0.25, regression_task_types=None, start_ts=t0 - 240, seed=21)
    # endsAt only 10 s ahead: without a re-post every evaluation the page would end within the hold.
    notifier = AlertmanagerNotifier(alertmanager_url, ends_after_seconds=10)
    store, pairer, slicer = MemoryStore(), Pairer(PriceMap.load()), Slicer()
    engine = AlertEngine(store, notifier, EngineConfig(lifecycle=LifecycleConfig(stale_seconds=10)))
    traces = [validate(r) for r in generate(scenario)]

    def feed_until(ts):
        batch = []
        while traces and traces[0].ts <= ts:
            batch.append(traces.pop(0))
        if batch:
            store.apply(pairer.join(batch, slicer, ts, fold(batch, slicer, ts)))

    events, tick = [], scenario.start_ts
    while tick + 10 < t0:
        tick += 10
        feed_until(tick)
        events += engine.tick(tick)
    fired = [e for e in events if e.status == "firing" and e.alertname == "FleetmonSuccessRegression"]
    assert fired and fired[0].labels["severity"] == "critical", "the seeded regression did not page"
    first_post = time.time()
    [page] = [a for a in active_alerts(alertmanager_url, candidate) if a["fingerprint"] and
              a["labels"]["alertname"] == "FleetmonSuccessRegression"]  # one page, not one per slice
    assert "slice" not in page["labels"]

    while time.time() < first_post + hold:  # the regression goes on, evaluated every 3 s of wall time
        time.sleep(3)
        now = time.time()
        feed_until(now)
        assert [e for e in engine.tick(now) if e.status == "resolved"] == []
    still = [a for a in active_alerts(alertmanager_url, candidate) if a["fingerprint"] == page["fingerprint"]]
    assert still and still[0]["startsAt"] == page["startsAt"], "the page left Alertmanager while still firing"
    assert time.time() - first_post > resolve_timeout
    assert not [a for a in ours(candidate)(receiver.requests) if a["status"] == "resolved"]
    assert any(r["json"]["receiver"] == "page" for r in receiver.requests if r["path"] == "/alertmanager"
               and any(a["labels"].get("candidate_release") == candidate for a in r["json"]["alerts"]))

    # Traffic stops: the alert resolves (stale) and is posted with endsAt = now.
    deadline = time.time() + 30
    resolved = []
    while not resolved and time.time() < deadline:
        time.sleep(2)
        resolved = [e for e in engine.tick(time.time()) if e.status == "resolved"
                    and e.fingerprint == fired[0].fingerprint]
    assert resolved, "the page did not resolve after its traffic stopped"
    assert resolved[0].ends_at is not None and abs(resolved[0].ends_at - time.time()) < 5
    gone = time.monotonic() + 5
    while any(a["fingerprint"] == page["fingerprint"] for a in active_alerts(alertmanager_url, candidate)):
        assert time.monotonic() < gone, "a resolved page is still active in Alertmanager"
        time.sleep(0.5)
    assert engine.delivery_failures == {}
