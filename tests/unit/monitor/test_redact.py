"""monitor.redact: no secret survives in shown settings or log lines (URLs, query parameters, notifier URLs)."""

from __future__ import annotations

import io
import json
import logging
import string
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor import redact
from monitor.cli.main import main
from monitor.config import ConfigError, load
from monitor.redact import (
    MASK,
    install_log_redaction,
    redact_notifier_url,
    redact_text,
    redact_url,
    remember,
    secrets_of_url,
)

# secrets long and odd enough that finding one in output cannot be a coincidence
_SECRET_CHARS = string.ascii_letters + string.digits + "-_.~!$*+"
secrets = st.text(alphabet=_SECRET_CHARS, min_size=12, max_size=40)


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("rediss://fleetmon:pw@127.0.0.1:6380/0?ssl_ca_certs=/etc/ca.pem",
     "rediss://fleetmon:***@127.0.0.1:6380/0?ssl_ca_certs=/etc/ca.pem"),
    ("redis://host:6379/0?password=abc&db=1", "redis://host:6379/0?password=***&db=1"),
    ("redis://host/0?PASSWORD=abc", "redis://host/0?PASSWORD=***"),
    ("https://am.example/api?access_token=abc&x=1", "https://am.example/api?access_token=***&x=1"),
    ("https://am.example/api?api-key=abc", "https://am.example/api?api-key=***"),
    ("redis://localhost:6379/0", "redis://localhost:6379/0"),
    ("http://127.0.0.1:9094", "http://127.0.0.1:9094"),
    ("redis://[::1]:6379/0?tokens_in=3", "redis://[::1]:6379/0?tokens_in=3"),   # not a secret name
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(("url", "shown"), [
    ("https://hooks.slack.com/services/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",
     "https://hooks.slack.com/services/T0AB1CD2E/B0AB1CD2E/***"),
    ("https://discord.com/api/webhooks/123456789012345678/AbCdEf123456_-GhIjKl7890",
     "https://discord.com/api/webhooks/123456789012345678/***"),   # the id is digits only: not the secret
    ("https://alice:s3cret@am.example:9094/", "https://***:***@am.example:9094/"),
    ("https://bot@hooks.example/x?token=abc&team=ops", "https://***@hooks.example/x?token=***&team=***"),
    ("http://127.0.0.1:9465/alertmanager", "http://127.0.0.1:9465/alertmanager"),
    ("", ""),
])
def test_redact_notifier_url(url: str, shown: str) -> None:
    assert redact_notifier_url(url) == shown


@settings(max_examples=200, deadline=None)
@given(password=secrets, token=secrets, user=st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8))
def test_no_url_secret_survives(password: str, token: str, user: str) -> None:
    url = f"rediss://{user}:{quote(password, safe='')}@cache.example:6380/0?password={quote(token, safe='')}&db=2"
    for shown in (redact_url(url), redact_text(f"connecting to {url} now")):
        assert password not in shown and quote(password, safe="") not in shown
        assert token not in shown and quote(token, safe="") not in shown
        assert "cache.example:6380" in shown      # what is not secret stays readable


@settings(max_examples=200, deadline=None)
@given(token=st.text(alphabet=_SECRET_CHARS, min_size=16, max_size=40)
       .filter(lambda t: any(c.isdigit() for c in t) and any(c.isalpha() for c in t)))
def test_no_path_token_survives_in_a_notifier_url(token: str) -> None:
    url = f"https://hooks.example/services/{quote(token, safe='')}"
    assert token not in redact_notifier_url(url)
    assert quote(token, safe="") not in redact_notifier_url(url)
    assert quote(token, safe="") in secrets_of_url(url)


@pytest.mark.parametrize(("text", "shown"), [
    ("{'sasl_plain_password': 'abc', 'x': 1}", "{'sasl_plain_password': '***', 'x': 1}"),
    ('{"webhook_secret": "s3", "tokens_in": 5}', '{"webhook_secret": "***", "tokens_in": 5}'),
    ("password=abc tokens_in=5 ok", "password=*** tokens_in=5 ok"),
    ("Authorization: Bearer abcdefghijklmnop", "Authorization: Bearer ***"),
    ("tokens_in must be an integer >= 0, got -3", "tokens_in must be an integer >= 0, got -3"),
    ("already password=*** masked", "already password=*** masked"),
])
def test_redact_text(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_remembered_values_are_masked_anywhere() -> None:
    remember(["correct-horse-battery", "short"])    # "short" is under MIN_REMEMBERED_CHARS: kept
    assert redact_text("auth failed for correct-horse-battery (short)") == f"auth failed for {MASK} (short)"
    assert redact_text("quoted correct-horse-battery%21") == f"quoted {MASK}%21"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleetmon.toml"
    path.write_text(text)
    return path


SECRETFUL_TOML = """
[kafka]
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_username = "fleetmon"
sasl_password = "kafka-pw-0123456789"
ssl_password = "keystore-pw-0123456789"
[redis]
url = "rediss://fleetmon:redis-pw-0123456789@cache.example:6380/0?password=query-pw-0123456789"
[notifiers]
alertmanager_url = "https://am-user:am-pw-0123456789@am.example/?token=am-token-0123456789"
webhook_url = "https://hooks.example/services/T0AB1CD2E/hook-token-0123456789abc"
webhook_secret = "hmac-secret-0123456789"
"""
SECRET_VALUES = ("kafka-pw-0123456789", "keystore-pw-0123456789", "redis-pw-0123456789", "query-pw-0123456789",
                 "am-pw-0123456789", "am-token-0123456789", "hook-token-0123456789abc", "hmac-secret-0123456789",
                 "am-user")


def test_config_check_show_redacts_every_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, SECRETFUL_TOML)
    assert main(["config", "check", str(path), "--show"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    for secret in SECRET_VALUES:
        assert secret not in out
    assert shown["redis"]["url"] == "rediss://fleetmon:***@cache.example:6380/0?password=***"
    assert shown["notifiers"]["alertmanager_url"] == "https://***:***@am.example/?token=***"
    assert shown["notifiers"]["webhook_url"] == "https://hooks.example/services/T0AB1CD2E/***"
    assert shown["kafka"]["sasl_password"] == MASK
    config = load(path, env={})
    for text in (repr(config), repr(config.kafka), repr(config.redis), repr(config.notifiers)):
        for secret in SECRET_VALUES:
            assert secret not in text


def test_config_errors_do_not_show_notifier_tokens(tmp_path: Path) -> None:
    path = _write(tmp_path, '[notifiers]\nwebhook_url = "ftp://hooks.example/x/hook-token-0123456789abc"\n')
    with pytest.raises(ConfigError) as caught:
        load(path, env={})
    assert "hook-token-0123456789abc" not in str(caught.value)
    assert "notifiers.webhook_url" in str(caught.value)


def test_every_log_line_is_redacted(tmp_path: Path) -> None:
    load(_write(tmp_path, SECRETFUL_TOML), env={})   # remembers the configuration's secrets
    install_log_redaction()
    install_log_redaction()                          # idempotent
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log = logging.getLogger("fleetmon.test.redact")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("connecting to %s with %r", "rediss://u:redis-pw-0123456789@h:6380/0",
                    {"sasl_plain_password": "kafka-pw-0123456789"})
        log.error("POST https://hooks.example/services/T0AB1CD2E/hook-token-0123456789abc failed")
        try:
            raise RuntimeError("signing with hmac-secret-0123456789 failed")
        except RuntimeError:
            log.exception("notify failed (token=am-token-0123456789)")
    finally:
        log.removeHandler(handler)
    text = stream.getvalue()
    for secret in SECRET_VALUES:
        assert secret not in text
    assert "RuntimeError" in text and "rediss://u:***@h:6380/0" in text    # still useful to read
