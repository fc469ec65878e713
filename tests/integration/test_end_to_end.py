"""The production path end to end: simulated shadow traffic → Kafka → ``fleetmon worker`` →
Redis → alert engine → the real Alertmanager → a real webhook receiver."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from alerts.engine import AlertEngine
from alerts.notifiers import AlertmanagerNotifier
from monitor.emitter import TraceEmitter
from monitor.run.simulate import ReleaseProfile, Scenario, generate
from monitor.store.redis.store import RedisStore
from tests.support.webhook import Receiver

REPO = Path(__file__).resolve().parents[2]
WEBHOOK_PORT = int(os.environ.get("FLEETMON_TEST_WEBHOOK_PORT", "9465"))


def applied_everything(store: RedisStore, bootstrap: str, topic: str) -> bool:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends = consumer.end_offsets(parts)
    finally:
        consumer.close()
    applied = store.applied_offsets()
    return all(end == 0 or applied.get(f"{topic}:{tp.partition}", -1) >= end - 1 for tp, end in ends.items())


def test_shadow_regression_through_kafka_worker_redis_and_alertmanager(kafka_bootstrap, unique_topic, redis_client,
                                                                         redis_db_url, alertmanager_url, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = unique_topic(partitions=4)
    dlq = unique_topic(partitions=1)
    prefix = f"e2e{run}"
    now = time.time()
    scenario = Scenario(baseline=ReleaseProfile(f"v1-{run}"), candidate=ReleaseProfile(f"v2-{run}"),
                        rate_per_second=20, duration_seconds=600, start_ts=now - 660, regression_at_seconds=60,
                        regression_drop=0.2, seed=21)
    with TraceEmitter(kafka_bootstrap, topic=topic) as emitter:
        for record in generate(scenario):
            emitter.emit(record)

    log = tmp_path / "worker.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "monitor.cli.main", "worker", "--bootstrap", kafka_bootstrap,
                                   "--redis", redis_db_url, "--prefix", prefix, "--topic", topic, "--dlq-topic", dlq,
                                   "--group-id", f"g-{run}"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    store = RedisStore(redis_client, prefix=prefix)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not applied_everything(store, kafka_bootstrap, topic):
            assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        assert applied_everything(store, kafka_bootstrap, topic), log.read_text(errors="replace")[-3000:]
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    assert store.counters()["pairs"] == 12_000

    with Receiver(port=WEBHOOK_PORT) as receiver:
        engine = AlertEngine(store, AlertmanagerNotifier(alertmanager_url))
        engine.tick(now)           # pending: the finding must hold for a minute
        events = engine.tick(now + 61)
        fired = [e for e in events if e.status == "firing" and e.alertname == "FleetmonSuccessRegression"]
        assert any(e.evidence["slice"] == "all" for e in fired), [f.kind for f in engine.findings if f.fires]
        whole = next(e for e in fired if e.evidence["slice"] == "all")
        assert whole.evidence["n_pairs"] == 12_000 and whole.evidence["b"] > whole.evidence["c"]
        assert len(fired) == 1 and whole.evidence["localization"], "one page per regression, with its slices"

        def ours(requests):
            return [a for r in requests for a in r["json"]["alerts"]
                    if a["labels"].get("candidate_release") == f"v2-{run}" and a["status"] == "firing"]

        assert receiver.wait_for(lambda reqs: bool(ours(reqs)), 30)
    # A restarted engine reads its state back from Redis and does not page again.
    assert AlertEngine(store, AlertmanagerNotifier(alertmanager_url)).tick(now + 70) == []
