"""What may be shown of a secret: the one place that masks secrets, in settings and in log lines.

Guarantees (each tested in ``tests/unit/monitor/test_redact.py``):

* :func:`redact_url` masks the password of a URL's user-info and the value of
  every query parameter whose name says it is a secret (``password``,
  ``token``, ``secret``, ``key``, ``signature``, ... — :data:`SECRET_QUERY_NAMES`,
  matched case-insensitively, also as a part such as ``access_token``).
* :func:`redact_notifier_url` (``notifiers.webhook_url``,
  ``notifiers.alertmanager_url``) also masks the user name, every query value
  and each path segment that looks like a token (16+ characters of letters
  *and* digits, e.g. the last parts of a Slack or Discord webhook URL): such
  URLs carry their credential in the path.
* :func:`redact_text` masks, in free text, every URL the :func:`redact_url` way
  (plus token-like path segments and user names), ``name=value`` and
  ``"name": "value"`` pairs whose name ends in a secret word (``password``,
  ``secret``, ``token``, ``api_key``; not ``tokens_in``), ``Bearer`` tokens, and
  every secret value :func:`remember` was given (the configuration's passwords),
  wherever it appears.
* :func:`install_log_redaction` makes every log record of the process go
  through :func:`redact_text` (its message and its traceback), whichever
  handler or formatter prints it — Faust's included.

Masked text is ``***``. Pure: no I/O, the standard library only.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

MASK = "***"

#: Configuration keys whose values are secrets (``Config.redacted`` shows ``***``).
SECRET_KEYS = frozenset(("sasl_password", "ssl_password", "webhook_secret"))

#: Query parameter names (or parts of them, split on ``_``/``-``/``.``) that hold secrets.
SECRET_QUERY_NAMES = frozenset(("password", "passwd", "pass", "pwd", "secret", "token", "key", "apikey",
                                "auth", "authorization", "signature", "sig", "credential", "credentials",
                                "session", "jwt", "code"))

#: Secret values shorter than this are not remembered (masking "a" everywhere would garble logs).
MIN_REMEMBERED_CHARS = 6

_TOKEN_SEGMENT = re.compile(r"^(?=[^/]*[0-9])(?=[^/]*[A-Za-z])[A-Za-z0-9_\-.~+=%]{16,}$")
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>\\]+")
# a name that ends in a secret word ("sasl_plain_password", "webhook_secret", "access_token"; not "tokens_in")
_SECRET_NAME = r"[A-Za-z0-9_.\-]*(?:password|passwd|secret|token|(?:api|secret|private|access)[_\-]?key)"
# name=value (value up to a space, quote, comma, semicolon, ampersand or bracket) ...
_ASSIGNMENT = re.compile(r"(?i)(?<![A-Za-z0-9_.\-])(" + _SECRET_NAME + r")(\s*=\s*)(?!\*\*\*)([^\s'\",;&)}\]]+)")
# ... and 'name': 'value' / "name": "value" (a repr'd dict, JSON)
_QUOTED_PAIR = re.compile(r"(?i)(['\"])(" + _SECRET_NAME + r")\1(\s*:\s*)(['\"])(?!\*\*\*\4)((?:(?!\4).)*)\4")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9_\-.~+/=]{8,}")

_remembered: set[str] = set()
_lock = threading.Lock()


def _secret_name(name: str) -> bool:
    lowered = name.lower()
    parts = re.split(r"[_\-.]", lowered)
    return lowered in SECRET_QUERY_NAMES or any(part in SECRET_QUERY_NAMES for part in parts if part)


def _netloc(parts: Any, username: str | None, password: str | None) -> str:
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if parts.port is not None:
        host += f":{parts.port}"
    if username is None and password is None:
        return host
    return f"{username or ''}" + (f":{password}" if password is not None else "") + f"@{host}"


def _query(query: str, mask_all: bool) -> str:
    if not query:
        return query
    pairs = parse_qsl(query, keep_blank_values=True)
    out = []
    for name, value in pairs:
        shown = MASK if (mask_all or _secret_name(name)) and value else quote(value, safe="/:@,")
        out.append(f"{quote(name, safe='')}={shown}")
    return "&".join(out)


def redact_url(url: str) -> str:
    """``redis://:secret@host/0?password=x`` → ``redis://:***@host/0?password=***``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return MASK if "@" in url or "?" in url else url
    secret_query = any(_secret_name(name) for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    if parts.password is None and not secret_query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        netloc = _netloc(parts, parts.username, MASK)
    query = _query(parts.query, mask_all=False) if secret_query else parts.query
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_notifier_url(url: str) -> str:
    """A webhook or Alertmanager URL with user-info, query values and token-like path segments masked."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018
    except ValueError:
        return MASK
    netloc = parts.netloc
    if parts.username is not None or parts.password is not None:
        netloc = _netloc(parts, MASK if parts.username else "", MASK if parts.password is not None else None)
    path = "/".join(MASK if _TOKEN_SEGMENT.match(segment) else segment for segment in parts.path.split("/"))
    return urlunsplit((parts.scheme, netloc, path, _query(parts.query, mask_all=True), ""))


def secrets_of_url(url: str) -> list[str]:
    """The secret parts of ``url`` (password, secret query values, token-like path segments), for :func:`remember`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.password] if parts.password else []
    found += [value for name, value in parse_qsl(parts.query) if _secret_name(name) and value]
    found += [segment for segment in parts.path.split("/") if _TOKEN_SEGMENT.match(segment)]
    return found


def remember(values: Iterable[str]) -> None:
    """Mask these exact values (and their URL-quoted forms) in every later :func:`redact_text`."""
    with _lock:
        for value in values:
            if value and len(value) >= MIN_REMEMBERED_CHARS:
                _remembered.add(value)
                _remembered.add(quote(value, safe=""))


def forget_all() -> None:
    """Drop every remembered value (tests)."""
    with _lock:
        _remembered.clear()


def redact_text(text: str) -> str:
    """``text`` with URLs, secret ``name=value`` pairs, bearer tokens and remembered secrets masked."""
    if not text:
        return text
    with _lock:
        remembered = sorted(_remembered, key=len, reverse=True)
    for value in remembered:
        if value in text:
            text = text.replace(value, MASK)
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: _redact_url_in_text(m.group(0)), text)
    text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _QUOTED_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{MASK}{m.group(4)}",
                            text)
    return _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)


def _redact_url_in_text(url: str) -> str:
    """A URL met in free text: :func:`redact_url`, plus token-like user names and path segments masked."""
    shown = redact_url(url)
    try:
        parts = urlsplit(shown)
        parts.port  # noqa: B018
    except ValueError:
        return MASK
    netloc = parts.netloc
    if parts.username and parts.password is None and _TOKEN_SEGMENT.match(parts.username):
        netloc = _netloc(parts, MASK, None)
    path = "/".join(MASK if _TOKEN_SEGMENT.match(segment) else segment for segment in parts.path.split("/"))
    if netloc == parts.netloc and path == parts.path:
        return shown
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


_installed: list[Any] = []


def install_log_redaction() -> None:
    """Route every log record's message and traceback through :func:`redact_text` (idempotent).

    Works at record creation (``logging.setLogRecordFactory``), so it covers
    every logger, handler and formatter of the process, including ones set up
    later (Faust's worker sets up its own).
    """
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()
        formatter = logging.Formatter()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 - a bad format string: leave it to logging to report
                return record
            redacted = redact_text(message)
            if redacted != message:  # only then: formatters that apply msg % args themselves (mode's) keep working
                record.msg, record.args = redacted, None
            if record.exc_info and not record.exc_text:
                record.exc_text = redact_text(formatter.formatException(record.exc_info))
            return record

        logging.setLogRecordFactory(factory)
        _installed.append(factory)
