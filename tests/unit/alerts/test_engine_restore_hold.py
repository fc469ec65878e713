"""``alerts.restore_hold`` (fleetmon.toml) reaches the engine: the hold after a lost store lasts that long.

Time is passed in; the store is the in-memory one. The alert that fires before the loss would go stale
after ``stale_seconds`` (60 s here) without evidence; only the hold keeps it firing, so the time it
stops firing shows where the hold ended.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from alerts.engine import AlertEngine, EngineConfig
from alerts.wiring import engine_config
from monitor.config import load
from monitor.store.memory import MemoryStore
from tests.support.regressed import regressed_minute
from tests.support.validity import RecordingNotifier

T0 = 1_700_000_040.0
STALE_SECONDS = 60.0


def configured(tmp_path: Path, hold: str | None) -> EngineConfig:
    path = tmp_path / "fleetmon.toml"
    path.write_text("[alerts]\n" + (f"restore_hold = \"{hold}\"\n" if hold else ""))
    config = engine_config(load(path, env={}))
    return replace(config, lifecycle=replace(config.lifecycle, stale_seconds=STALE_SECONDS))


def firing_until_after_loss(config: EngineConfig) -> float:
    """Seconds after the loss was noticed that the pre-loss alert stopped firing (ticks every 10 s)."""
    store = MemoryStore()
    engine = AlertEngine(store, RecordingNotifier(), config)
    now = T0
    for minute in range(20):
        regressed_minute(store, 100 * minute)
        now = T0 + 60.0 * (minute + 1)
        engine.tick(now)
    assert engine.firing(), "the regression must fire before the loss, or the test proves nothing"
    store.lose_state()
    noticed = now + 10
    engine.tick(noticed)
    assert engine.state_losses == 1
    for step in range(1, 200):
        engine.tick(noticed + 10.0 * step)
        if not engine.firing():
            return 10.0 * step
    raise AssertionError("the alert never stopped firing without evidence")


def test_the_default_hold_is_five_minutes(tmp_path):
    config = configured(tmp_path, None)
    assert config.restore_hold_seconds == 300.0 == EngineConfig().restore_hold_seconds
    assert 300.0 <= firing_until_after_loss(config) < 300.0 + STALE_SECONDS + 20


def test_a_configured_hold_is_the_one_the_engine_keeps(tmp_path):
    short, long = configured(tmp_path, "90s"), configured(tmp_path, "15m")
    assert (short.restore_hold_seconds, long.restore_hold_seconds) == (90.0, 900.0)
    assert 90.0 <= firing_until_after_loss(short) < 300.0
    assert 900.0 <= firing_until_after_loss(long) < 900.0 + STALE_SECONDS + 20


def test_a_hold_shorter_than_staleness_ends_in_staleness(tmp_path):
    assert 10.0 <= firing_until_after_loss(configured(tmp_path, "10s")) < 90.0  # stale 60 s after the last evidence


