"""``alerts.restore_hold``: parsed like the other alerts durations, overridden by
``FLEETMON_ALERTS_RESTORE_HOLD``, a bad value named with its field."""

from __future__ import annotations

import pytest

from monitor.config import ConfigError, load


def write(tmp_path, text: str):
    path = tmp_path / "fleetmon.toml"
    path.write_text(text)
    return path


def test_default_and_shipped_file_hold_five_minutes():
    assert load(None, env={}).alerts.restore_hold == "5m"
    shipped = load("fleetmon.toml", env={})
    assert shipped.alerts.restore_hold == "5m" and shipped.seconds("alerts", "restore_hold") == 300.0


def test_file_and_environment(tmp_path):
    path = write(tmp_path, '[alerts]\nrestore_hold = "90s"\n')
    assert load(path, env={}).seconds("alerts", "restore_hold") == 90.0
    assert load(path, env={"FLEETMON_ALERTS_RESTORE_HOLD": "2h"}).seconds("alerts", "restore_hold") == 7200.0


@pytest.mark.parametrize("value", ["soon", "-5m", "0s", "5 minutes"])
def test_bad_value_names_the_field_and_the_value(tmp_path, value):
    with pytest.raises(ConfigError, match=rf"alerts\.restore_hold must be a duration like 90s.*got '{value}'"):
        load(write(tmp_path, f'[alerts]\nrestore_hold = "{value}"\n'), env={})


def test_bad_environment_value_names_the_variable():
    with pytest.raises(ConfigError, match=r"alerts\.restore_hold must be a duration.*got 'later'"):
        load(None, env={"FLEETMON_ALERTS_RESTORE_HOLD": "later"})


def test_a_number_is_not_a_duration(tmp_path):
    with pytest.raises(ConfigError, match=r"alerts\.restore_hold"):
        load(write(tmp_path, "[alerts]\nrestore_hold = 300\n"), env={})
