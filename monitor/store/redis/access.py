"""Checking that a Redis client may talk to its server: credentials and TLS, once, when it is built.

A wrong password, a disabled ACL user or an untrusted server certificate
never heals by itself, so it is a :class:`~monitor.store.base.StoreError`
at start-up that names Redis and the URL (password masked) — not a retry
loop that looks like an outage. Redis merely down or restarting is left to
the callers' retries (the worker waits for it; a reader reports it when it
reads).
"""

from __future__ import annotations

import redis

from monitor.redact import redact_url
from monitor.store.base import StoreError

#: Words of an ssl error that a retry cannot fix (the handshake, not the network).
_TLS_WORDS = ("certificate", "ssl", "tls", "wrong version number", "handshake")


def check_access(client: redis.Redis, url: str) -> None:
    """One PING; raises StoreError when the server refuses the credentials or the TLS handshake fails."""
    where = f"redis at {redact_url(url)}"
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise StoreError(f"{where} refused the credentials: {exc} "
                         "(check the user and password in redis.url / FLEETMON_REDIS_URL)") from exc
    except redis.ResponseError as exc:  # NOPERM: the ACL user may not even PING
        raise StoreError(f"{where} refused the user: {exc} (check the ACL of the user in redis.url)") from exc
    except redis.ConnectionError as exc:
        text = str(exc).lower()
        if any(word in text for word in _TLS_WORDS):
            raise StoreError(f"{where}: TLS failed: {exc} (check rediss:// and its ssl_ca_certs, "
                             "or redis:// for a server without TLS)") from exc
        # down, refused or restarting: the callers retry
