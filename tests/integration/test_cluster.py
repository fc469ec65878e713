"""The store on a real Redis Cluster (``redis.cluster = true``; monitor/store/redis/cluster.py).

Exactly once on the cluster that ``FLEETMON_SERVICES_REDIS_CLUSTER=1 scripts/services.sh start`` runs
(127.0.0.1:7000-7005): ``fleetmon worker`` processes consume a fresh topic on the shared Kafka into
their own key prefix, one of them SIGKILLed mid-stream, and every figure equals the input. A master
SIGKILLed mid-stream with its replica promoted runs on a private six-node cluster
(tests/support/redis_cluster.py), never on the shared one. The readers (store reads, ``fleetmon
stats``, the exporter) merge across the partitions' slots: checked against a single Redis holding
the same applies. No fakes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

from monitor.aggregate import FLOAT_FIELDS
from monitor.slices import Slicer
from monitor.store.redis.cluster import ClusterStore
from monitor.store.redis.layout import KeyLayout
from monitor.store.redis.merge import hash_tag, view_prefix
from monitor.store.redis.store import RedisStore
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.batch import decode_batch, fold_batch
from tests.support.batches import Rec
from tests.support.cluster_checks import ensure_services_cluster, exactness, reference
from tests.support.paths import ROOT
from tests.support.pipeline import (
    FLEETMON,
    Workers,
    end_offsets,
    make_records,
    send_all,
)
from tests.support.redis_cluster import RedisClusterNodes

WAIT_SECONDS = 180
SMALL_BATCHES = ("--batch-max-records", "2000")
SERVICES_CLUSTER_PORT = int(os.environ.get("FLEETMON_REDIS_CLUSTER_PORT") or 7000)
SERVICES_CLUSTER_TOML = ROOT / ".services" / "cluster" / "fleetmon.toml"
LOSS_LOGGED = "the store lost state this worker applied"


@pytest.fixture(scope="session")
def services_cluster(fleetmon_services) -> str:
    """The URL of the services' Redis Cluster, started here when it is not running yet."""
    return ensure_services_cluster(SERVICES_CLUSTER_PORT)


@pytest.fixture
def private_cluster(tmp_path):
    nodes = RedisClusterNodes(tmp_path / "cluster").start()
    yield nodes
    nodes.close()


@pytest.fixture
def cluster_workers(tmp_path, kafka_bootstrap):
    made: list[Workers] = []

    def make(url: str) -> Workers:
        workers = Workers(tmp_path, kafka_bootstrap, url)
        workers.env["FLEETMON_REDIS_CLUSTER"] = "true"
        made.append(workers)
        return workers

    yield make
    for workers in made:
        workers.close()


def names(unique_topic) -> tuple[str, str, str, str]:
    topic = unique_topic(partitions=4, prefix="cluster")
    dlq = unique_topic(partitions=1, prefix="cluster-dlq")
    tag = uuid.uuid4().hex[:10]
    return topic, dlq, f"fm-{tag}", f"fm-{tag}"


def progress(store: ClusterStore, topic: str) -> int:
    """Records at or below the store's watermarks of ``topic`` (0 while the cluster cannot answer)."""
    try:
        return sum(mark + 1 for source, mark in store.applied_offsets().items() if source.startswith(topic + ":"))
    except Exception:  # noqa: BLE001 - failing over: no progress to report
        return 0


def wait_progress(store: ClusterStore, topic: str, at_least: int, workers: Workers, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = progress(store, topic)
        if done >= at_least:
            return done
        time.sleep(0.05)
    pytest.fail(f"no progress to {at_least} records in {timeout} s\n{workers.tails()}")


def wait_exact(store: ClusterStore, topic: str, records: list[dict], bootstrap: str, workers: Workers,
               timeout: float = WAIT_SECONDS) -> None:
    ref = reference(records, time.time())
    ends = end_offsets(bootstrap, topic)
    assert sum(ends.values()) == len(records), "the topic does not retain what was sent"
    deadline = time.monotonic() + timeout
    problems: dict = {}
    while time.monotonic() < deadline:
        try:
            marks = store.applied_offsets()
            if all(marks.get(f"{topic}:{p}", -1) >= end - 1 for p, end in ends.items() if end > 0):
                problems = exactness(store, records, ref)
                if not problems:
                    return
        except Exception as exc:  # noqa: BLE001 - a failover in progress: ask again
            problems = {"error": repr(exc)}
        time.sleep(0.3)
    pytest.fail(f"the cluster store did not match the topic within {timeout} s: {problems}\n{workers.tails()}")



def loss_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if LOSS_LOGGED + " (" in line and "%s" not in line]


def test_workers_on_the_cluster_count_exactly_once_with_a_worker_sigkilled(kafka_bootstrap, unique_topic,
                                                                            services_cluster, cluster_workers):
    topic, dlq, prefix, group = names(unique_topic)
    workers = cluster_workers(services_cluster)
    store = ClusterStore.from_url(services_cluster, prefix)
    records = make_records(30_000, seed=31, now=time.time(), pair_share=0.2)
    a = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(a)
    b = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(b)
    time.sleep(2)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, records, 5000))
    feeder.start()
    try:
        wait_progress(store, topic, 8000, workers)
        a.send_signal(signal.SIGKILL)  # mid-batch, mid-apply: whatever it applied is in the watermarks
        a.wait(timeout=30)
        c = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
        workers.wait_assigned(c)
    finally:
        feeder.join(timeout=120)
    try:
        wait_exact(store, topic, records, kafka_bootstrap, workers)
        # every partition has its own view, in its own slot, and the views span several masters
        sources = store.sources()
        assert sources == [f"{topic}:{p}" for p in range(4)]
        assert len(set(store.nodes().values())) >= 2, store.nodes()
        keys = [k.decode() for k in store.cluster.scan_iter(match=f"{prefix}:*", count=1000)]
        tags = {hash_tag(k) for k in keys}
        assert tags == {"g", *(f"t:{source}" for source in sources)}, sorted(tags)
        assert not loss_lines(workers.log_of(b)) and not loss_lines(workers.log_of(c)), workers.tails()

        # fleetmon stats reads the cluster through the config services.sh wrote (every view merged)
        assert SERVICES_CLUSTER_TOML.exists(), "services.sh did not write .services/cluster/fleetmon.toml"
        stats = subprocess.run([*FLEETMON, "stats", "--json", "--config", str(SERVICES_CLUSTER_TOML),
                                "--prefix", prefix], cwd=ROOT, capture_output=True, text=True, timeout=120,
                               check=False, env={k: v for k, v in os.environ.items()
                                                 if not k.startswith("FLEETMON_REDIS")})
        assert stats.returncode == 0, stats.stderr
        doc = json.loads(stats.stdout)
        assert doc["traces_folded_all_time"] == len(records)
        assert doc["totals"]["traces"] == len(records)
        ends = end_offsets(kafka_bootstrap, topic)
        assert doc["applied_offsets"] == {f"{topic}:{p}": end - 1 for p, end in ends.items()}
    finally:
        store.clear()


def test_readers_merge_across_slots_like_one_redis(services_cluster, redis_client):
    """The same per-partition applies into the cluster and into one Redis: every reader agrees."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from monitor.cli.stats import collect_stats
    from monitor.exporter.collector import build_registry
    from monitor.pricing import PriceMap

    prefix = f"fm-{uuid.uuid4().hex[:10]}"
    cluster, single = ClusterStore.from_url(services_cluster, prefix), RedisStore(redis_client, prefix)
    now = time.time()
    records = make_records(6000, seed=32, now=now)
    try:
        for partition in range(4):
            mine = records[partition::4]
            for start in range(0, len(mine), 500):
                part = [Rec(start + i, json.dumps(r).encode()) for i, r in enumerate(mine[start:start + 500])]
                batch = decode_batch([("t", partition, part)], now)
                delta = fold_batch(batch, Slicer(), now, DEFAULT_RESOLUTIONS)
                ranges = batch.ranges()
                assert cluster.apply_ranges(delta, ranges) is None and single.apply_ranges(delta, ranges) is None
        ref = reference(records, now)
        assert exactness(single, records, ref) == {}
        assert exactness(cluster, records, ref) == {}
        assert cluster.applied_offsets() == single.applied_offsets()
        assert cluster.active_slices() == single.active_slices()
        assert cluster.counters() == single.counters()
        assert cluster.release_identities() == single.release_identities()
        ids = sorted(single.active_slices())
        for mine, theirs in ((cluster.totals(), single.totals()),
                             (cluster.window_aggregates("1m", now - 3600, now + 60, ids),
                              single.window_aggregates("1m", now - 3600, now + 60, ids))):
            assert set(mine) == set(theirs)
            for sid in theirs:
                assert {k: v for k, v in mine[sid].to_dict().items() if k not in FLOAT_FIELDS} == \
                    {k: v for k, v in theirs[sid].to_dict().items() if k not in FLOAT_FIELDS}
                for name, value in theirs[sid].counts.items():
                    assert mine[sid].counts[name] == pytest.approx(value, rel=1e-12), (sid, name)
        doc_c, doc_s = (collect_stats(s, now=now) for s in (cluster, single))
        assert doc_c["totals"]["traces"] == doc_s["totals"]["traces"] == len(records)
        assert [row["slice"] for row in doc_c["slices"]] == [row["slice"] for row in doc_s["slices"]]

        def scrape(store) -> dict:
            registry, _ = build_registry(store, PriceMap.load(None), now=lambda: now)
            return {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(generate_latest(registry).decode())
                    for s in family.samples if not s.name.startswith(("fleetmon_exporter_", "fleetmon_scrape_"))}

        mine, theirs = scrape(cluster), scrape(single)
        assert any(name == "fleetmon_traces_total" for name, _ in theirs)
        assert set(mine) == set(theirs)
        for key, value in theirs.items():
            assert mine[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    finally:
        cluster.clear()


def test_a_master_sigkilled_mid_stream_fails_over_and_counts_stay_exact(kafka_bootstrap, unique_topic,
                                                                        private_cluster, cluster_workers):
    """A master of the partitions' slots SIGKILLed mid-stream, its replica promoted: the replica was
    frozen for a while first, so it lacks the master's last applies, and the workers restore the
    partitions it serves from Kafka (the watermark check sees the promoted replica behind them)."""
    topic, dlq, prefix, group = names(unique_topic)
    nodes = private_cluster
    workers = cluster_workers(nodes.url)
    store = ClusterStore(nodes.client(), prefix)
    records = make_records(40_000, seed=33, now=time.time(), pair_share=0.2)
    a = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(a)
    b = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(b)
    time.sleep(2)
    victim_key = KeyLayout(view_prefix(prefix, f"{topic}:0")).offsets()
    master = nodes.master_of(victim_key)
    replica = nodes.replica_of(master)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, records, 5000))
    feeder.start()
    try:
        wait_progress(store, topic, 8000, workers)
        nodes.signal(replica, signal.SIGSTOP)  # the replica falls behind its master
        with nodes.node(master) as client:
            start = int(client.hget(victim_key, f"{topic}:0") or -1)
            deadline = time.monotonic() + 30
            while int(client.hget(victim_key, f"{topic}:0") or -1) < start + 3000 and time.monotonic() < deadline:
                time.sleep(0.05)
            on_master = {k.decode(): int(v) for k, v in client.hgetall(victim_key).items()}
        nodes.kill(master)
        nodes.signal(replica, signal.SIGCONT)
        nodes.wait_master(replica)
        on_replica = {k.decode(): int(v) for k, v in nodes.read(replica, "HGETALL", victim_key).items()}
    finally:
        feeder.join(timeout=120)
    wait_exact(store, topic, records, kafka_bootstrap, workers)
    lagged = on_replica.get(f"{topic}:0", -1) < on_master[f"{topic}:0"]
    assert lagged, f"the promoted replica held everything ({on_replica} vs {on_master}): the test proves nothing"
    lines = loss_lines(workers.log_of(a)) + loss_lines(workers.log_of(b))
    assert lines, f"no worker logged the loss\n{workers.tails()}"
    assert any(f"{topic}:0 " in line for line in lines), lines
    assert store.generation().restores >= 1
    assert a.poll() is None and b.poll() is None


def test_the_services_cluster_config_is_what_fleetmon_takes(services_cluster):
    from monitor.config import load

    assert SERVICES_CLUSTER_TOML.exists(), "services.sh did not write .services/cluster/fleetmon.toml"

    config = load(SERVICES_CLUSTER_TOML, env={})
    assert config.redis.cluster is True and config.redis.url == services_cluster
    with ClusterStore.from_url(config.redis.url, f"fm-{uuid.uuid4().hex[:10]}").cluster as client:
        assert len(client.get_primaries()) == 3 and len(client.get_replicas()) == 3


def test_the_cluster_apply_refuses_a_partition_or_shared_slot_that_lost_what_the_writer_applied(services_cluster):
    """``apply_verified``'s contract on the real cluster (one Redis: test_state_loss.py)."""
    from monitor.delta import BatchDelta
    from monitor.store.base import AlreadyApplied, Applied, Expected, LostState

    prefix = f"fm-{uuid.uuid4().hex[:10]}"
    store = ClusterStore.from_url(services_cluster, prefix)
    client = store.cluster
    delta = BatchDelta()
    delta.count("traces", 3)
    try:
        assert store.apply_verified(delta, [("t:0", 0, 9)], None, Expected(), "1796000000001") == \
            Applied("1796000000001")
        assert store.apply_verified(delta, [("t:1", 0, 4)], None, Expected("1796000000001", {"t:0": 9}), "x") == \
            Applied("1796000000001")
        mine = Expected("1796000000001", {"t:0": 9, "t:1": 4})
        assert store.apply_verified(delta, [("t:0", 5, 12)], None, mine, "x") == AlreadyApplied("t:0", 9)
        assert store.counters()["traces"] == 6 and store.applied_offsets() == {"t:0": 9, "t:1": 4}
        with pytest.raises(ValueError, match="one partition at a time"):
            store.apply_verified(delta, [("t:0", 10, 19), ("t:1", 5, 9)], None, mine, "x")

        # a partition's slot rolled back (a lagging replica promoted): its watermark is below the writer's
        client.hset(KeyLayout(view_prefix(prefix, "t:1")).offsets(), "t:1", 2)
        lost = store.apply_verified(delta, [("t:1", 5, 9)], None, mine, "x")
        assert lost == LostState(mine, "1796000000001", {"t:1": 2}) and store.counters()["traces"] == 6
        # another partition of the same writer still applies (its own slot holds what it applied)
        assert store.apply_verified(delta, [("t:0", 10, 19)], None, mine, "x") == Applied("1796000000001")
        # a partition's slot emptied (a master restarted empty)
        for key in client.scan_iter(match=f"{prefix}:{{t:t:0}}:*"):
            client.delete(key)
        mine = Expected("1796000000001", {"t:0": 19})
        assert store.apply_verified(delta, [("t:0", 20, 29)], None, mine, "x") == LostState(mine, "1796000000001",
                                                                                              {"t:0": None})
        # the shared slot lost: a new generation, the writer's is gone; the partition views are intact
        for key in client.scan_iter(match=f"{prefix}:{{g}}:*"):
            client.delete(key)
        lost = store.apply_verified(delta, [("t:1", 5, 9)], None, Expected("1796000000001", {"t:1": 2}),
                                    "1796000000999")
        assert lost == LostState(Expected("1796000000001", {"t:1": 2}), "1796000000999", {})
        assert store.generation().id == "1796000000999"
        assert store.applied_offsets() == {"t:1": 2}  # the views this process applied to are still found
        store.count_restore()
        assert store.apply_verified(delta, [("t:1", 3, 9)], None, Expected("1796000000999", {"t:1": 2}), "y") == \
            Applied("1796000000999")
        assert (store.generation().id, store.generation().restores) == ("1796000000999", 1)
    finally:
        store.clear()
