"""What may be shown of a secret: URLs with their password masked, and the configuration keys that are secrets."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

SECRET_KEYS = frozenset(("sasl_password", "ssl_password", "webhook_secret"))


def redact_url(url: str) -> str:
    """``redis://:secret@host/0`` → ``redis://:***@host/0``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
