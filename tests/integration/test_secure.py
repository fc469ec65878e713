"""Secure transports for real: emitter → worker → Redis → exporter (consumer lag) → alerts over Kafka SASL_SSL
(SCRAM-SHA-512) and Redis TLS with an ACL user, and wrong passwords that fail fast, name the component and
never show a secret.

The services come from ``FLEETMON_SERVICES_SECURE=1 scripts/services.sh start kafka redis``
(``tests/support/secure.py``); every command gets the file it writes with ``--config``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient

from alerts.engine import AlertEngine
from alerts.notifiers import WebhookNotifier
from monitor.config import Config, load
from monitor.emitter import TraceEmitter
from monitor.kafka import kafka_python_admin, kafka_python_consumer, kafka_python_producer
from monitor.kafka_auth import KafkaCredentialsRefused
from monitor.redact import secrets_of_url
from monitor.run.simulate import ReleaseProfile, Scenario, generate
from monitor.store.redis.store import RedisStore
from tests.support.paths import ROOT
from tests.support.secure import delete_prefix, free_port, start_secure_services
from tests.support.webhook import Receiver

#: replay, dlq, run --kafka, simulate --kafka and the emitter ask the broker with aiokafka before building
#: their kafka-python client (monitor/kafka_auth.py)
KAFKA_REFUSED = r"Kafka at 127\.0\.0\.1:\d+ refused the credentials: .*SaslAuthenticationFailed.*invalid credentials"
WORKER_EXIT_SECONDS = 90      # a wrong password must end the process well within this


def secrets_of(config: Config) -> list[str]:
    return [config.kafka.sasl_password, *secrets_of_url(config.redis.url)]


def fleetmon(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "monitor.cli.main", *map(str, args)]


@pytest.fixture(scope="module")
def secure_config() -> Path:
    return start_secure_services()


@pytest.fixture
def config(secure_config: Path) -> Config:
    return load(secure_config, env={})


@pytest.fixture
def secure_prefix(config: Config) -> Iterator[str]:
    """A fresh key prefix on the TLS Redis, its keys deleted after the test."""
    prefix = f"sec{uuid.uuid4().hex[:10]}"
    yield prefix
    delete_prefix(config.redis.url, prefix)


@pytest.fixture
def secure_topics(config: Config) -> Iterator[Callable[[], str]]:
    """Fresh topic names on the secure listener, deleted after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(f"secure.{uuid.uuid4().hex[:12]}")
        return made[-1]

    yield make
    admin = KafkaAdminClient(**kafka_python_admin(config.kafka, client_id="fleetmon-test-cleanup"))
    try:
        existing = set(admin.list_topics())
        doomed = [t for t in made if t in existing]
        if doomed:
            admin.delete_topics(doomed)
    finally:
        admin.close()


def end_offsets(config: Config, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(**kafka_python_consumer(config.kafka, client_id="fleetmon-test-offsets"))
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return {tp.partition: end for tp, end in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def scrape(port: int) -> str:
    """The exporter's /metrics ("" while it is not listening yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return str(response.read().decode())
    except urllib.error.URLError:
        return ""


def lag_of(text: str, topic: str) -> dict[str, float]:
    pattern = re.compile(r'^fleetmon_consumer_lag\{source="(' + re.escape(topic) + r':\d+)"\} (\S+)$', re.M)
    return {source: float(value) for source, value in pattern.findall(text)}


def wait_for(check: Callable[[], bool], seconds: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
    raise AssertionError(f"{what} not within {seconds:g} s\n{tail}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_emitter_worker_redis_exporter_alerts_over_sasl_ssl_and_redis_tls(
        config: Config, secure_config: Path, secure_topics: Callable[[], str], secure_prefix: str,
        tmp_path: Path) -> None:
    assert config.kafka.security_protocol == "SASL_SSL" and config.redis.url.startswith("rediss://")
    assert secure_config.stat().st_mode & 0o777 == 0o600
    run = uuid.uuid4().hex[:8]
    topic, dlq = secure_topics(), secure_topics()
    now = time.time()
    scenario = Scenario(baseline=ReleaseProfile(f"v1-{run}"), candidate=ReleaseProfile(f"v2-{run}"),
                        rate_per_second=20, duration_seconds=600, start_ts=now - 660, regression_at_seconds=60,
                        regression_drop=0.2, seed=29)
    with TraceEmitter(topic=topic, kafka=config.kafka) as emitter:        # SASL_SSL from the config
        for record in generate(scenario):
            emitter.emit(record)
    producer = KafkaProducer(**kafka_python_producer(config.kafka))      # one record for the DLQ
    producer.send(topic, b"not a trace")
    producer.flush()
    producer.close()
    sent = emitter.sent + 1
    assert sum(end_offsets(config, topic).values()) == sent

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("FLEETMON_KAFKA_BOOTSTRAP", None)
    env.pop("FLEETMON_REDIS_URL", None)
    exporter_log, worker_log = tmp_path / "exporter.log", tmp_path / "worker.log"
    port = free_port()
    with open(exporter_log, "wb") as out:
        exporter = subprocess.Popen(fleetmon("exporter", "--config", secure_config, "--prefix", secure_prefix,
                                             "--port", str(port), "--kafka-bootstrap", config.kafka.bootstrap,
                                             "--topic", topic), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    worker: subprocess.Popen[bytes] | None = None
    try:
        # before the worker: the whole topic is lag, read from the broker over SASL_SSL
        wait_for(lambda: sum(lag_of(scrape(port), topic).values()) == sent, 60, "lag of the unread topic",
                 exporter_log)
        with open(worker_log, "wb") as out:
            worker = subprocess.Popen(fleetmon("worker", "--config", secure_config, "--topic", topic, "--dlq-topic",
                                               dlq, "--group-id", f"g-{run}", "--prefix", secure_prefix),
                                      cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        store = RedisStore.from_url(config.redis.url, prefix=secure_prefix)    # TLS + ACL user
        ends = end_offsets(config, topic)

        def applied() -> bool:
            assert worker is not None and worker.poll() is None, worker_log.read_text(errors="replace")[-3000:]
            marks = store.applied_offsets()
            return all(end == 0 or marks.get(f"{topic}:{p}", -1) >= end - 1 for p, end in ends.items())

        wait_for(applied, 180, "the worker applying the topic", worker_log)
        assert store.counters()["pairs"] == (sent - 1) // 2 and store.counters()["dlq"] == 1
        listed = subprocess.run(fleetmon("dlq", "list", "--config", secure_config, "--dlq-topic", dlq, "--json"),
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout.splitlines()[-1])["summary"]["records"] == 1
        wait_for(lambda: set(lag_of(scrape(port), topic).values()) == {0.0}, 30, "zero lag", exporter_log)
        body = scrape(port)
        assert len(lag_of(body, topic)) == len(ends)
        assert re.search(r"^fleetmon_consumer_lag_up 1\.0$", body, re.M)
        assert re.search(r"^fleetmon_traces_total\{", scrape(port), re.M)
    finally:
        if worker is not None:
            stop(worker)
        stop(exporter)

    secret = "hmac-" + uuid.uuid4().hex
    with Receiver() as receiver:
        engine = AlertEngine(store, WebhookNotifier(f"{receiver.url}/hook", secret))
        engine.tick(now)                      # pending: the finding must hold for a minute
        fired = [e for e in engine.tick(now + 61) if e.status == "firing"]
        assert any(e.alertname == "FleetmonSuccessRegression" for e in fired), fired
        assert receiver.wait_for(lambda reqs: bool(reqs), 30)

        alerts_toml = tmp_path / "alerts.toml"
        alerts_toml.write_text(secure_config.read_text() + f'\n[notifiers]\nwebhook_url = "{receiver.url}/hook"\n'
                               f'webhook_secret = "{secret}"\n')
        cli = subprocess.run(fleetmon("alerts", "--config", alerts_toml, "--once"), cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120, check=False)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "alert(s) firing" in cli.stderr

    logs = (worker_log.read_text(errors="replace") + exporter_log.read_text(errors="replace") + cli.stdout
            + cli.stderr + listed.stdout + listed.stderr)
    for value in [*secrets_of(config), secret]:
        assert value not in logs


def _with_password(secure_config: Path, tmp_path: Path, component: str) -> Path:
    """The secure config with a wrong password for ``component`` (kafka or redis)."""
    text = secure_config.read_text()
    if component == "kafka":
        text = re.sub(r'^sasl_password = ".*"$', 'sasl_password = "wrong-kafka-password-0123"', text, flags=re.M)
    else:
        text = re.sub(r"(rediss://[^:]+:)[^@]+@", r"\1wrong-redis-password-0123@", text)
    path = tmp_path / f"wrong-{component}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("command", "component", "expected"), [
    ("worker", "kafka", r"SaslAuthenticationFailed: Authentication failed .*invalid credentials"),
    ("worker", "redis", r"redis at rediss://fleetmon:\*\*\*@.* refused the credentials"),
    ("exporter", "redis", r"redis at rediss://fleetmon:\*\*\*@.* refused the credentials"),
    ("stats", "redis", r"redis at rediss://fleetmon:\*\*\*@.* refused the credentials"),
    ("replay", "kafka", KAFKA_REFUSED),
    ("dlq", "kafka", KAFKA_REFUSED),
    ("run", "kafka", KAFKA_REFUSED),
    ("simulate", "kafka", KAFKA_REFUSED),
])
def test_a_wrong_password_is_a_clear_error_naming_the_component(
        config: Config, secure_config: Path, secure_topics: Callable[[], str], tmp_path: Path,
        command: str, component: str, expected: str) -> None:
    bad = _with_password(secure_config, tmp_path, component)
    args: list[str | Path] = [command, "--config", bad]
    if command == "worker":
        args += ["--topic", secure_topics(), "--dlq-topic", secure_topics(), "--group-id", "g-wrong"]
    elif command == "exporter":
        args += ["--port", str(free_port())]
    elif command == "replay":
        traces = tmp_path / "one.jsonl"
        traces.write_text(json.dumps(next(generate(Scenario(duration_seconds=1, start_ts=time.time())))) + "\n")
        args = [command, traces, "--config", bad, "--topic", secure_topics(), "--quiet"]
    elif command == "dlq":
        args = [command, "list", "--config", bad, "--dlq-topic", secure_topics()]
    elif command == "run":
        args = [command, "--config", bad, "--kafka", config.kafka.bootstrap, "--headless", "--duration", "60",
                "--port", str(free_port())]
    elif command == "simulate":
        args = [command, "--config", bad, "--kafka", "--topic", secure_topics(), "--sim-duration", "1"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    timeout = WORKER_EXIT_SECONDS
    started = time.monotonic()
    proc = subprocess.run(fleetmon(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    elapsed = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert re.search(expected, output), output[-3000:]
    assert component in output.lower()
    for value in [*secrets_of(config), "wrong-kafka-password-0123", "wrong-redis-password-0123"]:
        assert value not in output, f"a secret shows in the {command} output"
    print(f"{command} with a wrong {component} password exited {proc.returncode} after {elapsed:.1f} s")


def test_the_emitter_library_names_a_refused_kafka_password(secure_config: Path, tmp_path: Path) -> None:
    """An agent's TraceEmitter with a wrong password: KafkaCredentialsRefused with the broker's words, not
    kafka-python's bootstrap timeout; the password is not in the message."""
    bad = load(_with_password(secure_config, tmp_path, "kafka"), env={})
    with pytest.raises(KafkaCredentialsRefused, match=KAFKA_REFUSED) as caught:
        TraceEmitter(topic="secure.never-written", kafka=bad.kafka)
    assert "wrong-kafka-password-0123" not in str(caught.value)

    async def in_an_agents_event_loop() -> None:  # the check runs its own loop on a thread there
        TraceEmitter(topic="secure.never-written", kafka=bad.kafka)

    with pytest.raises(KafkaCredentialsRefused, match=KAFKA_REFUSED):
        asyncio.run(in_an_agents_event_loop())


def test_an_exporter_with_a_refused_kafka_password_serves_every_scrape(
        config: Config, secure_config: Path, secure_prefix: str, tmp_path: Path) -> None:
    """Consumer lag is read off the scrape path: with Kafka refusing the exporter's password, every scrape
    is answered within Prometheus's default scrape timeout (10 s: ``scrape``'s own timeout; kafka-python
    waits 30 s before it gives up), without the lag but with ``fleetmon_consumer_lag_up 0`` (the lag alerts
    cannot fire; FleetmonConsumerLagUnknown does), and the log names the refusal."""
    bad = _with_password(secure_config, tmp_path, "kafka")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("FLEETMON_KAFKA_BOOTSTRAP", None)
    env.pop("FLEETMON_REDIS_URL", None)
    log_path, port = tmp_path / "exporter.log", free_port()
    with open(log_path, "wb") as out:
        exporter = subprocess.Popen(fleetmon("exporter", "--config", bad, "--prefix", secure_prefix, "--port",
                                             str(port)), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "fleetmon_store_up 1.0" in scrape(port), 60, "the first scrape", log_path)
        for _ in range(3):  # each answered (scrape() times out at 10 s and returns "")
            body = scrape(port)
            assert "fleetmon_store_up 1.0" in body, log_path.read_text(errors="replace")[-3000:]
            assert "fleetmon_consumer_lag{" not in body
            assert re.search(r"^fleetmon_consumer_lag_up 0\.0$", body, re.M), body[-3000:]
        wait_for(lambda: re.search(KAFKA_REFUSED, log_path.read_text(errors="replace")) is not None, 60,
                 "the refusal in the exporter's log", log_path)
    finally:
        stop(exporter)
    logged = log_path.read_text(errors="replace")
    for value in [*secrets_of(config), "wrong-kafka-password-0123"]:
        assert value not in logged


def test_an_untrusted_redis_certificate_is_a_clear_error(config: Config, tmp_path: Path) -> None:
    """The TLS Redis's certificate checked against a bundle without its CA: TLS named, no retry loop."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        pytest.skip(f"no system CA bundle at {bundle}")
    url = re.sub(r"ssl_ca_certs=[^&]+", f"ssl_ca_certs={bundle}", config.redis.url)
    proc = subprocess.run(fleetmon("stats", "--redis", url), cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 3, proc.stderr
    assert re.search(r"redis at rediss://fleetmon:\*\*\*@\S+: TLS failed: .*certificate verify failed", proc.stderr), \
        proc.stderr
    for value in secrets_of(config):
        assert value not in proc.stdout + proc.stderr
