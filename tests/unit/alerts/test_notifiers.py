import io
import json

import pytest

from alerts.lifecycle import AlertEvent
from alerts.notifiers import (
    AlertmanagerNotifier,
    FanOut,
    NotifyError,
    OnChange,
    StdoutNotifier,
    WebhookNotifier,
    alertmanager_alert,
    ends_after,
    sign,
    verify,
)
from monitor.run.simulate import ReleaseProfile, Scenario, generate
from monitor.schema import validate

EVENT = AlertEvent(ts=1767225700.0, status="firing", alertname="FleetmonSuccessRegression",
                   labels={"alertname": "FleetmonSuccessRegression", "severity": "critical", "slice": "all"},
                   annotations={"summary": "s", "description": "d", "runbook_url": "u"},
                   evidence={"n_pairs": 900, "b": 120, "c": 40, "effect": 0.0889, "e_value": float("inf"),
                             "effect_low": 0.05, "effect_high": 0.12, "floor": 0.02, "alpha": 0.05},
                   fingerprint="abc", starts_at=1767225690.0, ends_at=None)


def test_stdout_line_has_the_contract_keys_and_is_strict_json():
    out = io.StringIO()
    StdoutNotifier(out).send([EVENT])
    record = json.loads(out.getvalue())
    for key in ("ts", "status", "alertname", "labels", "annotations", "evidence"):
        assert key in record
    assert record["evidence"]["e_value"] == "inf" and record["startsAt"] == "2026-01-01T00:01:30Z"


def test_alertmanager_alert_shape():
    alert = alertmanager_alert(EVENT)
    assert alert["labels"]["alertname"] == "FleetmonSuccessRegression" and "endsAt" not in alert
    assert json.loads(alert["annotations"]["evidence_json"])["b"] == 120
    assert alert["annotations"]["evidence_b"] == "120"


def test_alertmanager_firing_alert_ends_a_few_intervals_ahead_of_the_wall_clock():
    assert ends_after(10) == 180 and ends_after(60) == 240
    notifier = AlertmanagerNotifier("http://127.0.0.1:1", ends_after_seconds=180, clock=lambda: 1767229200.0)
    [alert] = notifier.alerts([EVENT])
    assert alert["startsAt"] == "2026-01-01T00:01:30Z" and alert["endsAt"] == "2026-01-01T01:03:00Z"
    resolved = AlertEvent(**{**EVENT.__dict__, "status": "resolved", "ends_at": 1767225800.0})
    assert notifier.alerts([resolved])[0]["endsAt"] == "2026-01-01T00:03:20Z"
    with pytest.raises(ValueError, match="ends_after_seconds must be > 0"):
        AlertmanagerNotifier("http://127.0.0.1:1", ends_after_seconds=0)


def test_webhook_signature_covers_timestamp_and_body():
    body = b'{"a": 1}'
    signature = sign(b"k", "1767225700", body)
    now = 1767225700.0 + 10
    assert signature.startswith("sha256=") and verify(b"k", "1767225700", body, signature, now=now)
    assert not verify(b"k", "1767225701", body, signature, now=now)
    assert not verify(b"other", "1767225700", body, signature, now=now)
    # A captured request replayed later is refused, as is a timestamp from the future or not a number.
    assert not verify(b"k", "1767225700", body, signature, now=1767225700.0 + 301)
    assert verify(b"k", "1767225700", body, signature, max_age_seconds=1000, now=1767225700.0 + 708)
    assert not verify(b"k", "1767225700", body, signature, now=1767225700.0 - 301)
    assert not verify(b"k", "soon", body, sign(b"k", "soon", body), now=now)
    payload = WebhookNotifier("http://127.0.0.1:1/x", "k").payload([EVENT])
    assert payload["version"] == "4" and payload["alerts"][0]["evidence"]["n_pairs"] == 900
    with pytest.raises(ValueError, match="secret must be non-empty"):
        WebhookNotifier("http://127.0.0.1:1/x", "")


def test_simulator_is_seeded_time_ordered_and_valid():
    scenario = Scenario(duration_seconds=30, rate_per_second=10, canary_share=0.2, seed=3)
    first, again = list(generate(scenario)), list(generate(scenario))
    assert first == again
    stamps = [r["ts"] for r in first]
    assert stamps == sorted(stamps)
    traces = [validate(r) for r in first]
    arms = {t.arm for t in traces}
    assert arms == {"baseline", "shadow", "canary"}
    shadow_ids = {t.pair_id for t in traces if t.arm == "shadow"}
    assert shadow_ids <= {t.pair_id for t in traces if t.arm == "baseline"}


def test_simulated_regression_moves_only_the_candidate_after_its_start():
    base = Scenario(baseline=ReleaseProfile("a", success=0.8), candidate=ReleaseProfile("b", success=0.8),
                    duration_seconds=2000, rate_per_second=5, regression_at_seconds=1000, regression_drop=0.3,
                    regression_task_types=None, seed=1)
    records = list(generate(base))

    def rate(arm, after):
        rows = [r for r in records if r["arm"] == arm and (r["ts"] - base.start_ts >= 1000) == after]
        return sum(r["outcome"] == "success" for r in rows) / len(rows)

    assert abs(rate("shadow", False) - rate("baseline", False)) < 0.05
    assert rate("baseline", True) - rate("shadow", True) > 0.2
    with pytest.raises(ValueError, match="shadow_share must be in"):
        Scenario(shadow_share=2)


def test_comparison_metrics_from_a_stored_snapshot():
    from prometheus_client import CollectorRegistry, generate_latest

    from alerts.engine import AlertEngine
    from alerts.saved_findings import from_store
    from monitor.exporter.comparisons import ComparisonCollector
    from monitor.fold import fold
    from monitor.pairing import Pairer
    from monitor.pricing import PriceMap
    from monitor.slices import Slicer
    from monitor.store.memory import MemoryStore

    scenario = Scenario(duration_seconds=120, rate_per_second=20, regression_at_seconds=0, regression_drop=0.3, seed=2)
    store = MemoryStore()
    traces = [validate(r) for r in generate(scenario)]
    store.apply(Pairer(PriceMap.load()).join(traces, Slicer(), traces[-1].ts, fold(traces, Slicer(), traces[-1].ts)))
    AlertEngine(store, StdoutNotifier(io.StringIO())).tick(traces[-1].ts)
    registry = CollectorRegistry()
    registry.register(ComparisonCollector(from_store(store, clock=lambda: traces[-1].ts + 10)))
    text = generate_latest(registry).decode()
    assert 'fleetmon_comparison_e_value{arm="shadow",baseline="support-v1",candidate="support-v2",' in text
    assert 'kind="b"' in text and "fleetmon_comparison_firing" in text
    stale = CollectorRegistry()
    stale.register(ComparisonCollector(from_store(store, clock=lambda: traces[-1].ts + 3600)))
    assert "fleetmon_comparison_e_value{" not in generate_latest(stale).decode()


class Recorder(OnChange):
    """A destination that records what it gets and fails while ``down``."""

    def __init__(self, name: str, down: bool = False) -> None:
        self.name, self.down = name, down
        self.sent: list[list[AlertEvent]] = []
        self.refreshed: list[list[str]] = []

    def send(self, events):
        if self.down:
            raise NotifyError(f"{self.name}: down")
        self.sent.append(list(events))


class Reposting(Recorder):
    def refresh(self, active, now):
        if self.down:
            raise NotifyError(f"{self.name}: down")
        self.refreshed.append([e.fingerprint for e in active])


def _firing_engine(notifier):
    from alerts.engine import AlertEngine, EngineConfig
    from alerts.lifecycle import LifecycleConfig
    from monitor.fold import fold
    from monitor.pairing import Pairer
    from monitor.pricing import PriceMap
    from monitor.slices import Slicer
    from monitor.store.memory import MemoryStore

    scenario = Scenario(duration_seconds=120, rate_per_second=20, regression_at_seconds=0, regression_drop=0.3, seed=2)
    store = MemoryStore()
    traces = [validate(r) for r in generate(scenario)]
    store.apply(Pairer(PriceMap.load()).join(traces, Slicer(), traces[-1].ts, fold(traces, Slicer(), traces[-1].ts)))
    engine = AlertEngine(store, notifier, EngineConfig(lifecycle=LifecycleConfig(for_seconds=0)))
    return engine, store, traces[-1].ts


def test_a_failed_destination_is_retried_alone_and_alertmanager_gets_reposts():
    stdout, webhook, alertmanager = Recorder("stdout"), Recorder("webhook", down=True), Reposting("alertmanager")
    engine, _, now = _firing_engine(FanOut([stdout, webhook, alertmanager]))
    fired = engine.tick(now)
    assert fired and all(e.status == "firing" for e in fired)
    assert len(stdout.sent) == 1 and len(alertmanager.sent) == 1 and engine.delivery_failures == {"webhook": 1}
    assert alertmanager.refreshed == [[]]  # this tick's changes were just sent
    webhook.down = False
    assert engine.tick(now + 10) == []
    assert len(stdout.sent) == 1  # not sent again
    assert [e.fingerprint for e in webhook.sent[0]] == [e.fingerprint for e in fired]
    assert sorted(alertmanager.refreshed[-1]) == sorted(e.fingerprint for e in fired)
    assert engine.delivery_failures == {"webhook": 1}
    engine.tick(now + 20)
    assert len(webhook.sent) == 1 and len(alertmanager.refreshed) == 3


def test_an_undelivered_event_survives_a_restart():
    from alerts.engine import AlertEngine

    webhook = Recorder("webhook", down=True)
    engine, store, now = _firing_engine(FanOut([Recorder("stdout"), webhook]))
    fired = engine.tick(now)
    assert fired and engine.delivery_failures["webhook"] == 1
    again = Recorder("webhook")
    restarted = AlertEngine(store, FanOut([Recorder("stdout"), again]), engine.config)
    assert restarted.tick(now + 10) == []
    assert [e.fingerprint for e in again.sent[0]] == [e.fingerprint for e in fired]
