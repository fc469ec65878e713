import pytest

from monitor.config import ConfigError, load
from monitor.kafka import kafka_python_security
from monitor.redact import redact_url


def write(tmp_path, text):
    path = tmp_path / "fleetmon.toml"
    path.write_text(text)
    return path


def test_shipped_file_is_valid_and_defaults_hold():
    config = load("fleetmon.toml", env={})
    assert config.kafka.bootstrap == "localhost:9092" and config.alerts.alpha == 0.05
    assert config.slices.dimensions == ("release", "arm", "task_type", "tenant", "locale")
    assert load(None, env={}).exporter.port == 9464


def test_environment_overrides_every_section(tmp_path):
    config = load(write(tmp_path, "[alerts]\nalpha = 0.05\n"),
                  env={"FLEETMON_KAFKA_BOOTSTRAP": "b1:9092,b2:9092", "FLEETMON_ALERTS_ALPHA": "0.01",
                       "FLEETMON_SLICES_DIMENSIONS": "release,arm,tenant", "FLEETMON_EXPORTER_PORT": "9999"})
    assert config.kafka.bootstrap == "b1:9092,b2:9092" and config.alerts.alpha == 0.01
    assert config.slices.dimensions == ("release", "arm", "tenant") and config.exporter.port == 9999


@pytest.mark.parametrize("text,needle", [
    ("[alerts]\nalpha = 1.5\n", "alerts.alpha must be in (0, 1), got 1.5"),
    ("[alerts]\nalhpa = 0.1\n", "unknown keys ['alhpa'] in [alerts]"),
    ("[kafak]\n", "unknown sections ['kafak']"),
    ("[kafka]\nsecurity_protocol = 'TLS'\n", "kafka.security_protocol must be one of PLAINTEXT, SSL"),
    ("[kafka]\nsecurity_protocol = 'SASL_SSL'\n", "kafka.sasl_mechanism must be set when"),
    ("[redis]\nurl = 'http://x'\n", "redis.url must start with redis://"),
    ("[windows]\nminute_retention = 'forever'\n", "windows.minute_retention must be a duration"),
    ("[slices]\nmax_values = 0\n", "slices.max_values must be an integer >= 1, got 0"),
    ("[slices]\ndimensions = 'release'\n", "slices.dimensions must be a list of non-empty strings"),
    ("[notifiers]\nwebhook_url = 'http://127.0.0.1:1/x'\n", "webhook_secret must be set"),
    ("[exporter]\nport = 70000\n", "exporter.port must be a TCP port"),
    ("[alerts\n", "not valid TOML"),
])
def test_bad_values_are_named(tmp_path, text, needle):
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), env={})
    assert needle in str(info.value)


def test_bad_environment_value_names_the_variable(tmp_path):
    with pytest.raises(ConfigError, match=r"FLEETMON_ALERTS_ALPHA \(alerts.alpha\) must be a number, got 'high'"):
        load(None, env={"FLEETMON_ALERTS_ALPHA": "high"})


def test_secrets_never_shown(tmp_path):
    config = load(write(tmp_path, "[kafka]\nsecurity_protocol='SASL_SSL'\nsasl_mechanism='PLAIN'\n"
                        "sasl_username='u'\nsasl_password='hunter2'\n[redis]\nurl='redis://:s3cret@h:6379/0'\n"
                        "[notifiers]\nwebhook_url='http://127.0.0.1:1/x'\nwebhook_secret='topsecret'\n"), env={})
    shown = repr(config) + str(config.redacted())
    for secret in ("hunter2", "s3cret", "topsecret"):
        assert secret not in shown
    assert kafka_python_security(config.kafka)["sasl_plain_password"] == "hunter2"
    assert redact_url("redis://:pw@host:6379/0") == "redis://:***@host:6379/0"
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, "[notifiers]\nwebhook_secret = 987654321\n"), env={})
    assert "notifiers.webhook_secret must be a string, got ***" in str(info.value)
    assert "987654321" not in str(info.value)
