"""Smoke tests: the services that scripts/services.sh starts answer as the
rest of the suite expects (real Kafka, Redis, Prometheus, Alertmanager)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def _http_json(url: str, payload: Any | None = None, timeout_seconds: float = 10.0) -> tuple[int, Any]:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout_seconds) as response:
        body = response.read()
        is_json = response.headers.get_content_type() == "application/json"
        return response.status, (json.loads(body) if is_json and body.strip() else body.decode())


def _consume(bootstrap: str, topic: str, expected: int, deadline_seconds: float = 30.0, **config: Any) -> list:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"test-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1000,
        **config,
    )
    records: list = []
    try:
        deadline = time.monotonic() + deadline_seconds
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer)  # stops after consumer_timeout_ms without records
    finally:
        consumer.close()
    return records


def test_kafka_produce_and_consume_100_messages(kafka_bootstrap, unique_topic):
    topic = unique_topic(partitions=4)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    try:
        assert producer.partitions_for(topic) == {0, 1, 2, 3}
        for i in range(100):
            producer.send(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode())
        producer.flush(timeout=30)
    finally:
        producer.close()

    records = _consume(kafka_bootstrap, topic, expected=100)

    assert sorted(r.value.decode() for r in records) == sorted(f"value-{i}" for i in range(100))
    assert {r.partition for r in records} == {0, 1, 2, 3}
    # a key always lands on the same partition, and order holds within one
    by_key = {r.key: r.partition for r in records}
    assert len(by_key) == 100
    for partition in range(4):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == sorted(offsets)


def test_kafka_accepts_a_5_mb_record(kafka_bootstrap, unique_topic):
    """The broker allows ~10 MiB records, so an oversized trace can be
    produced and then routed to the DLQ instead of being refused at the door."""
    topic = unique_topic(partitions=1)
    payload = b"x" * (5 * 1024 * 1024)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=10 * 1024 * 1024)
    try:
        metadata = producer.send(topic, value=payload).get(timeout=30)
    finally:
        producer.close()
    assert metadata.topic_partition == TopicPartition(topic, 0)

    records = _consume(kafka_bootstrap, topic, expected=1, fetch_max_bytes=16 * 1024 * 1024)
    assert [len(r.value) for r in records] == [len(payload)]


def test_redis_set_get_and_multi_exec(redis_client: redis.Redis):
    assert redis_client.ping() is True
    assert redis_client.dbsize() == 0  # a fresh database per test

    redis_client.set("smoke:greeting", "hello")
    assert redis_client.get("smoke:greeting") == b"hello"

    pipe = redis_client.pipeline(transaction=True)  # MULTI ... EXEC
    pipe.incrby("smoke:count", 5)
    pipe.hset("smoke:hash", mapping={"a": 1, "b": 2})
    pipe.hincrby("smoke:hash", "a", 10)
    assert pipe.execute() == [5, 2, 11]
    assert redis_client.hgetall("smoke:hash") == {b"a": b"11", b"b": b"2"}


def test_redis_client_claims_its_own_database(redis_client: redis.Redis, redis_url: str):
    db = redis_client.connection_pool.connection_kwargs["db"]
    assert db != 0  # db 0 holds the claims and is left to the application
    other = redis.Redis.from_url(redis_url)
    try:
        assert other.get(f"fleetmon:test:db-claim:{db}") is not None
    finally:
        other.close()


def test_prometheus_ready_and_answers_queries(prometheus_url: str):
    status, _ = _http_json(f"{prometheus_url}/-/ready")
    assert status == 200

    query = urllib.parse.urlencode({"query": "up"})
    deadline = time.monotonic() + 20  # the first scrape lands within one 5 s interval
    while True:
        status, body = _http_json(f"{prometheus_url}/api/v1/query?{query}")
        assert status == 200
        assert body["status"] == "success"
        jobs = {sample["metric"].get("job") for sample in body["data"]["result"]}
        if "prometheus" in jobs or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert "prometheus" in jobs, body
    # it also scrapes the fleetmon exporter target (up or not)
    status, targets = _http_json(f"{prometheus_url}/api/v1/targets")
    assert {t["labels"]["job"] for t in targets["data"]["activeTargets"]} >= {"prometheus", "fleetmon"}


def test_alertmanager_accepts_and_lists_an_alert(alertmanager_url: str):
    status, _ = _http_json(f"{alertmanager_url}/-/ready")
    assert status == 200

    test_id = uuid.uuid4().hex
    now = datetime.now(UTC)
    labels = {
        "alertname": "FleetmonSmokeTest",
        "severity": "info",
        "test_id": test_id,
        # routed to the "none" receiver: a smoke alert must not reach a test webhook
        "fleetmon_notify": "none",
    }
    alert = {
        "labels": labels,
        "annotations": {"summary": "services smoke test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=5)).isoformat(),
        "generatorURL": "http://127.0.0.1/fleetmon-smoke",
    }
    status, _ = _http_json(f"{alertmanager_url}/api/v2/alerts", payload=[alert])
    assert status == 200

    query = urllib.parse.urlencode({"filter": f'test_id="{test_id}"'})
    status, alerts = _http_json(f"{alertmanager_url}/api/v2/alerts?{query}")
    assert status == 200
    assert len(alerts) == 1
    assert alerts[0]["labels"] == labels
    assert alerts[0]["status"]["state"] == "active"
    assert [r["name"] for r in alerts[0]["receivers"]] == ["none"]

    # resolve it so that it does not linger for other tests
    resolved = dict(alert, endsAt=datetime.now(UTC).isoformat())
    status, _ = _http_json(f"{alertmanager_url}/api/v2/alerts", payload=[resolved])
    assert status == 200
