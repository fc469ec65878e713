"""Fixtures for integration tests against the real services.

Every test under ``tests/integration`` is marked ``integration`` and runs
against the Kafka broker, Redis, Prometheus and Alertmanager that
``scripts/services.sh`` starts (see docs/services.md). Nothing here is a fake:
if a service cannot be started the session fails with the script's output.

Session fixtures (addresses): ``kafka_bootstrap``, ``redis_url``,
``prometheus_url``, ``alertmanager_url``.
Per-test helpers: ``unique_topic`` (factory creating a fresh topic),
``redis_client`` (a client on a Redis database claimed for this test alone and
flushed afterwards) and ``redis_db_url`` (the URL of that same database).

Environment:
  FLEETMON_KAFKA_BOOTSTRAP   default localhost:${FLEETMON_KAFKA_PORT:-9092}
  FLEETMON_REDIS_URL         default redis://localhost:${FLEETMON_REDIS_PORT:-6379}/0
  FLEETMON_PROMETHEUS_PORT, FLEETMON_ALERTMANAGER_PORT  (9090, 9094)
  FLEETMON_SERVICES_EXTERNAL=1  do not run scripts/services.sh (services are
                                managed elsewhere); the addresses above are used as is
"""

from __future__ import annotations

import os
import subprocess
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

# kafka-python 3.0 loads its protocol schemas with importlib.resources.read_text,
# which calls the deprecated open_text; that inner warning is attributed to
# importlib.resources._legacy, so pyproject's "ignore ... kafka.*" misses it and
# "error" turns `import kafka` into a failure. Ignored here for the import below
# (conftest loading runs under pyproject's filters) and, through
# pytest_configure, for the tests themselves.
_KAFKA_IMPORT_WARNING = "open_text is deprecated"
warnings.filterwarnings("ignore", _KAFKA_IMPORT_WARNING, DeprecationWarning)

from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from monitor.store.redis.cluster import ClusterStore  # noqa: E402

INTEGRATION_DIR = Path(__file__).resolve().parent
REPO_DIR = INTEGRATION_DIR.parents[1]
SERVICES_SCRIPT = REPO_DIR / "scripts" / "services.sh"

# A generous bound: a cold start on a fresh machine installs Debian packages
# and fetches the Kafka jars before starting anything.
SERVICES_START_TIMEOUT_SECONDS = 900

# Redis databases are handed out one per test; the claim keys live in db 0 so
# that parallel pytest sessions on the same Redis never share a database.
REDIS_CLAIM_KEY = "fleetmon:test:db-claim:{db}"
REDIS_CLAIM_TTL_SECONDS = 3600


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", f"ignore:{_KAFKA_IMPORT_WARNING}:DeprecationWarning")


# `make test` runs these tests on two processes (pytest-xdist, ``--dist loadgroup``). The files of a
# group share something one process at a time may hold, so they run in the same process:
XDIST_GROUPS = {
    # the webhook port Alertmanager's receivers post to (scripts/services.sh WEBHOOK_PORT)
    "test_alertmanager.py": "alertmanager-webhook",
    "test_end_to_end.py": "alertmanager-webhook",
    # the exporter port the services' Prometheus scrapes (FLEETMON_EXPORTER_PORT)
    "test_prometheus.py": "prometheus-exporter-port",
    "test_rollouts.py": "prometheus-exporter-port",
    # the shared Redis Cluster on 7000-7005: rebuilds swap views on it, workers are killed on it
    "test_cluster.py": "redis-cluster",
    "test_cluster_rebuild.py": "redis-cluster",
    "test_exporter_cluster_folds.py": "redis-cluster",
    "test_exporter_rebuild_cache.py": "redis-cluster",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test collected from this directory as ``integration``, and put it in its
    :data:`XDIST_GROUPS` group (a no-op without ``--dist loadgroup``)."""
    for item in items:
        path = Path(item.path).resolve()
        if INTEGRATION_DIR in path.parents:
            item.add_marker(pytest.mark.integration)
            group = XDIST_GROUPS.get(path.name)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))


def _env_port(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise pytest.UsageError(f"{name} must be a TCP port number, got {raw!r}") from None


def _text(output: bytes | str | None) -> str:
    """Captured output as text (``TimeoutExpired`` holds bytes even under ``text=True``)."""
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


@pytest.fixture(scope="session")
def fleetmon_services() -> None:
    """Run ``scripts/services.sh start`` once per session (cheap when all run)."""
    if os.environ.get("FLEETMON_SERVICES_EXTERNAL") == "1":
        return
    try:
        proc = subprocess.run(
            ["bash", str(SERVICES_SCRIPT), "start"],
            cwd=REPO_DIR,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SERVICES_START_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"scripts/services.sh start did not finish within {SERVICES_START_TIMEOUT_SECONDS}s:\n"
            f"{_text(exc.stdout)}{_text(exc.stderr)}",
            pytrace=False,
        )
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/services.sh start failed with exit code {proc.returncode}:\n"
            f"{proc.stdout}{proc.stderr}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def kafka_bootstrap(fleetmon_services: None) -> str:
    port = _env_port("FLEETMON_KAFKA_PORT", 9092)
    return os.environ.get("FLEETMON_KAFKA_BOOTSTRAP") or f"localhost:{port}"


@pytest.fixture(scope="session")
def redis_url(fleetmon_services: None) -> str:
    port = _env_port("FLEETMON_REDIS_PORT", 6379)
    return os.environ.get("FLEETMON_REDIS_URL") or f"redis://localhost:{port}/0"


@pytest.fixture(scope="session")
def prometheus_url(fleetmon_services: None) -> str:
    return f"http://127.0.0.1:{_env_port('FLEETMON_PROMETHEUS_PORT', 9090)}"


@pytest.fixture(scope="session")
def alertmanager_url(fleetmon_services: None) -> str:
    return f"http://127.0.0.1:{_env_port('FLEETMON_ALERTMANAGER_PORT', 9094)}"


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="fleetmon-tests-admin")
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture
def unique_topic(kafka_admin: KafkaAdminClient) -> Iterator[Callable[..., str]]:
    """Factory: ``unique_topic(partitions=4, prefix="test")`` creates a fresh
    topic named ``<prefix>.<uuid hex>`` and returns its name once the broker's
    metadata knows it. Topics created by a test are deleted after it."""
    created: list[str] = []

    def make(partitions: int = 4, prefix: str = "test", configs: dict[str, str] | None = None) -> str:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        name = f"{prefix}.{uuid.uuid4().hex}"
        kafka_admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, topic_configs=configs or {})],
            timeout_ms=30_000,
            wait_for_metadata=True,
        )
        created.append(name)
        return name

    yield make
    if created:
        # best effort: a failed clean-up must not fail the test that passed
        try:
            kafka_admin.delete_topics(created, timeout_ms=30_000, raise_errors=False)
        except Exception:  # noqa: BLE001
            pass


def _with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A ``redis.Redis`` on a database claimed for this test alone (never db 0),
    empty at the start and flushed at the end. ``decode_responses`` is off:
    values come back as bytes, as the stores see them."""
    admin = redis.Redis.from_url(_with_db(redis_url, 0))
    token = uuid.uuid4().hex
    try:
        try:
            configured = admin.config_get("databases").get("databases")
            databases = 16 if configured is None else int(configured)
        except redis.ResponseError:  # CONFIG disabled on this server
            databases = 16
        db = next(
            (
                candidate
                for candidate in range(1, databases)
                if admin.set(REDIS_CLAIM_KEY.format(db=candidate), token, nx=True, ex=REDIS_CLAIM_TTL_SECONDS)
            ),
            None,
        )
        if db is None:
            pytest.fail(f"no free Redis database among 1..{databases - 1} at {redis_url}", pytrace=False)
        client = redis.Redis.from_url(_with_db(redis_url, db))
        try:
            client.flushdb()  # leftovers of a test run that was killed
            yield client
        finally:
            client.flushdb()
            client.close()
            if admin.get(REDIS_CLAIM_KEY.format(db=db)) == token.encode():
                admin.delete(REDIS_CLAIM_KEY.format(db=db))
    finally:
        admin.close()


@pytest.fixture(autouse=True)
def close_cluster_stores(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the client of every ``ClusterStore.from_url`` a test opened, at its end.

    Many cluster tests open a store and only clear its keys; a RedisCluster client left open is
    an unclosed socket when the garbage collector meets it, and under ``filterwarnings = error``
    that ResourceWarning fails whichever test (or the session's end) it happens to surface in."""
    opened: list[ClusterStore] = []
    from_url = ClusterStore.from_url.__func__  # type: ignore[attr-defined]

    def tracked(cls: type[ClusterStore], *args: object, **kwargs: object) -> ClusterStore:
        store = from_url(cls, *args, **kwargs)
        opened.append(store)
        return store

    monkeypatch.setattr(ClusterStore, "from_url", classmethod(tracked))
    yield
    for store in opened:
        store.cluster.close()


@pytest.fixture
def redis_db_url(redis_client: redis.Redis, redis_url: str) -> str:
    """URL of the database ``redis_client`` uses, for code that takes a URL."""
    return _with_db(redis_url, int(redis_client.connection_pool.connection_kwargs["db"]))
