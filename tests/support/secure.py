"""The secure services for tests: ``FLEETMON_SERVICES_SECURE=1 scripts/services.sh start kafka redis``.

That start adds a SASL_SSL (SCRAM-SHA-512) listener to the broker and a TLS
Redis with an ACL user, and writes ``<cache>/secure/fleetmon.toml``;
:func:`start_secure_services` returns that file's path. With ``FLEETMON_SERVICES_EXTERNAL=1`` the
script is not run and ``FLEETMON_SECURE_CONFIG`` names the file.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SERVICES_SCRIPT = ROOT / "scripts" / "services.sh"
START_TIMEOUT_SECONDS = 900


def cache_dir() -> Path:
    return Path(os.environ.get("FLEETMON_SERVICES_DIR") or ROOT / ".services")


def start_secure_services() -> Path:
    """Start (or find running) the secure services; the path of their fleetmon.toml."""
    if os.environ.get("FLEETMON_SERVICES_EXTERNAL") == "1":
        named = os.environ.get("FLEETMON_SECURE_CONFIG")
        if not named:
            pytest.fail("FLEETMON_SERVICES_EXTERNAL=1 needs FLEETMON_SECURE_CONFIG (the secure fleetmon.toml)",
                        pytrace=False)
        return Path(named)
    try:
        proc = subprocess.run(["bash", str(SERVICES_SCRIPT), "start", "kafka", "redis"], cwd=ROOT,
                              env=dict(os.environ, FLEETMON_SERVICES_SECURE="1"), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"FLEETMON_SERVICES_SECURE=1 scripts/services.sh start did not finish in {START_TIMEOUT_SECONDS}s",
                    pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"FLEETMON_SERVICES_SECURE=1 scripts/services.sh start failed ({proc.returncode}):\n"
                    f"{proc.stdout}{proc.stderr}", pytrace=False)
    path = cache_dir() / "secure" / "fleetmon.toml"
    assert path.is_file(), f"services.sh did not write {path}"
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def delete_prefix(redis_url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (the TLS Redis is shared by the secure tests of all sessions)."""
    from monitor.store.redis.store import connect

    client = connect(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start:start + 500])
    finally:
        client.close()
