"""The alert engine when the store loses its state (alerts/engine.py, ``_holding_after_lost_state``).

A firing alert must not be forgotten (it stays firing and is re-posted), nothing may page again while
the workers rebuild the evidence from Kafka, and the lifecycle must be back in the store at once.
"""

from __future__ import annotations

from alerts.engine import STATE_NAME, AlertEngine, EngineConfig
from alerts.lifecycle import LifecycleConfig
from monitor.store.memory import MemoryStore
from tests.support.regressed import regressed_minute
from tests.support.validity import RecordingNotifier

T0 = 1_700_000_040.0
#: Stale after 3 minutes without new evidence: shorter than this restore, so only the hold keeps the alert.
CONFIG = EngineConfig(lifecycle=LifecycleConfig(stale_seconds=180.0), restore_hold_seconds=600.0)


class Refreshing(RecordingNotifier):
    """Also records what each refresh re-posts (as Alertmanager gets it)."""

    def __init__(self) -> None:
        super().__init__()
        self.refreshed: list[set[str]] = []

    def refresh(self, events, now) -> None:
        self.refreshed.append({e.fingerprint for e in events})


def firing_engine() -> tuple[MemoryStore, Refreshing, AlertEngine, float]:
    store, notifier = MemoryStore(), Refreshing()
    engine = AlertEngine(store, notifier, CONFIG)
    now = T0
    for minute in range(20):
        regressed_minute(store, 100 * minute)
        now = T0 + 60.0 * (minute + 1)
        engine.tick(now)
    assert engine.firing(), "the regression must fire before the loss, or the test proves nothing"
    return store, notifier, engine, now


def test_a_lost_store_keeps_firing_alerts_rewrites_them_and_pages_nothing_during_the_hold():
    store, notifier, engine, now = firing_engine()
    firing = {r["alertname"] for r in engine.firing()}
    pages_before = len(notifier.events)

    store.lose_state()  # Redis restarted empty: lifecycle, outboxes, evidence and generation gone
    assert store.get_state(STATE_NAME) is None
    engine.tick(now + 60)
    assert engine.state_losses == 1
    assert store.get_state(STATE_NAME) is not None and {r["alertname"] for r in engine.firing()} == firing
    assert notifier.refreshed[-1], "the firing alerts are re-posted while holding"

    # a slow restore: five minutes without evidence (past stale_seconds), then it grows back
    for minute in range(5):
        engine.tick(now + 120 + 60.0 * minute)
    assert {r["alertname"] for r in engine.firing()} == firing and len(notifier.events) == pages_before
    for minute in range(25):
        regressed_minute(store, 100 * minute)
        engine.tick(now + 420 + 60.0 * minute)
    assert engine.state_losses == 1  # the new generation is the restore's, not a second loss
    assert len(notifier.events) == pages_before  # nothing paged again, nothing resolved
    assert {r["alertname"] for r in engine.firing()} == firing


def test_a_restore_counted_by_a_worker_is_a_loss_too_and_an_unchanged_store_is_not():
    store, _notifier, engine, now = firing_engine()
    engine.tick(now + 60)
    assert engine.state_losses == 0
    store.count_restore()  # a worker found the store rolled back and re-read its partitions
    engine.tick(now + 120)
    assert engine.state_losses == 1 and engine.firing()


def test_an_engine_started_before_the_first_apply_sees_no_loss():
    store = MemoryStore()
    engine = AlertEngine(store, RecordingNotifier(), CONFIG)
    engine.tick(T0)
    regressed_minute(store, 0)  # the generation starts here
    engine.tick(T0 + 60)
    assert engine.state_losses == 0
