"""``fleetmon rebuild`` on a real Redis Cluster (streams/rebuild_cluster.py): one atomic swap per slot.

On the services' cluster (127.0.0.1:7000-7005) with a fresh topic on the shared Kafka and a key
prefix of its own: workers fold traffic, then state is corrupted and deleted in ways no worker notices
(counters and totals edited, a view's totals and windows deleted, the shared admitted values deleted,
the paired evidence of one view deleted — watermarks left alone), and ``fleetmon rebuild --config
.services/cluster/fleetmon.toml`` makes every figure equal the topic again, without a worker and
with one running (which must neither restore nor count twice). While the rebuild runs, a reader polls
the merged counters: each read must be a sum, per partition view, of its old or its rebuilt value —
never a view caught half-swapped. No fakes.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import threading
import time
import uuid

import pytest

from monitor.store.redis.cluster import ClusterStore
from monitor.store.redis.layout import GENERATION_ID_FIELD
from tests.support.cluster_checks import ensure_services_cluster, exactness, reference
from tests.support.paths import ROOT
from tests.support.pipeline import FLEETMON, Workers, end_offsets, make_records, send_all

SERVICES_CLUSTER_PORT = int(os.environ.get("FLEETMON_REDIS_CLUSTER_PORT") or 7000)
SERVICES_CLUSTER_TOML = ROOT / ".services" / "cluster" / "fleetmon.toml"
LOSS_LOGGED = "the store lost state this worker applied ("
PARTITIONS = 4


@pytest.fixture(scope="module")
def services_cluster(fleetmon_services) -> str:
    return ensure_services_cluster(SERVICES_CLUSTER_PORT)


@pytest.fixture
def cluster_workers(tmp_path, kafka_bootstrap, services_cluster):
    workers = Workers(tmp_path, kafka_bootstrap, services_cluster)
    workers.env["FLEETMON_REDIS_CLUSTER"] = "true"
    yield workers
    workers.close()


@pytest.fixture
def names(unique_topic, services_cluster):
    topic = unique_topic(partitions=PARTITIONS, prefix="cluster-rebuild")
    dlq = unique_topic(partitions=1, prefix="cluster-rebuild-dlq")
    tag = f"fm-rb-{uuid.uuid4().hex[:10]}"
    yield topic, dlq, tag, tag
    ClusterStore.from_url(services_cluster, tag).clear()
    for store in leftover_stores(services_cluster, tag):
        store.clear()


def leftover_stores(url: str, prefix: str) -> list[ClusterStore]:
    """A ClusterStore per ``<prefix>.rebuild.<stamp>`` prefix still holding keys."""
    probe = ClusterStore.from_url(url, prefix)
    prefixes = {k.decode().split(":{", 1)[0] for k in probe.cluster.scan_iter(match=f"{prefix}.rebuild.*", count=1000)}
    return [ClusterStore(probe.cluster, p) for p in sorted(prefixes)]


def applied_through(store: ClusterStore, topic: str) -> int:
    try:
        return sum(mark + 1 for source, mark in store.applied_offsets().items() if source.startswith(topic + ":"))
    except Exception:  # noqa: BLE001 - the cluster cannot answer right now: no progress to report
        return 0


def wait_through(store: ClusterStore, topic: str, at_least: int, workers: Workers, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if applied_through(store, topic) >= at_least:
            return
        time.sleep(0.05)
    pytest.fail(f"no progress to {at_least} records in {timeout} s\n{workers.tails()}")


def wait_exact(store: ClusterStore, records: list[dict], workers: Workers, timeout: float = 180) -> None:
    ref = reference(records, time.time())
    deadline, problems = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        problems = exactness(store, records, ref)
        if not problems:
            return
        time.sleep(0.3)
    pytest.fail(f"the cluster store does not equal the topic after {timeout} s: {problems}\n{workers.tails()}")


def corrupt(store: ClusterStore, topic: str) -> None:
    """Damage no loss check sees (every watermark left as it is): an edited counter and totals hash in
    partition 0, partition 1's totals and windows deleted, partition 2's paired evidence deleted, the
    shared admitted values deleted. Partition 3 is left alone."""
    cluster = store.cluster
    zero, one, two = (store.view(f"{topic}:{p}").keys for p in range(3))
    cluster.hincrby(zero.counters(), "traces", 1000)
    some_totals = next(cluster.scan_iter(match=zero.prefix + ":t:*", count=1000))
    cluster.hincrby(some_totals, "successes", 77)
    for pattern in (":t:*", ":w:*", ":wc:*"):
        for key in list(cluster.scan_iter(match=one.prefix + pattern, count=1000)):
            cluster.delete(key)
    for key in list(cluster.scan_iter(match=two.prefix + ":x:*", count=1000)):
        cluster.delete(key)
    for key in list(cluster.scan_iter(match=store.shared.keys.prefix + ":dims:*", count=1000)):
        cluster.delete(key)


def view_traces(store: ClusterStore, topic: str) -> list[int]:
    return [int(float(store.view(f"{topic}:{p}").counters().get("traces", 0))) for p in range(PARTITIONS)]


class CounterPoller(threading.Thread):
    """Reads the merged ``traces`` counter in a loop until stopped (a reader during the rebuild)."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.store = ClusterStore.from_url(url, prefix)
        self.seen: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.seen.append(int(float(self.store.counters().get("traces", 0))))


def run_rebuild(topic: str, group: str, prefix: str, bootstrap: str) -> dict:
    """``fleetmon rebuild`` with the cluster config that services.sh wrote (no FLEETMON_REDIS_* env)."""
    assert SERVICES_CLUSTER_TOML.exists(), "services.sh did not write .services/cluster/fleetmon.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETMON_REDIS")}
    proc = subprocess.run([*FLEETMON, "rebuild", "--config", str(SERVICES_CLUSTER_TOML), "--topic", topic,
                           "--group-id", group, "--prefix", prefix, "--bootstrap", bootstrap, "--json", "--quiet",
                           "--loglevel", "info"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False, env=env)
    print(proc.stderr[-6000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stats(prefix: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETMON_REDIS")}
    proc = subprocess.run([*FLEETMON, "stats", "--json", "--config", str(SERVICES_CLUSTER_TOML), "--prefix", prefix],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_rebuild_on_the_cluster_repairs_what_no_worker_notices_and_readers_see_only_whole_views(
        names, kafka_bootstrap, kafka_admin, services_cluster, cluster_workers):
    topic, dlq, prefix, group = names
    store = ClusterStore.from_url(services_cluster, prefix)
    records = make_records(20_000, seed=41, now=time.time(), pair_share=0.2)
    worker = cluster_workers.start(topic, dlq, prefix, group, "--batch-max-records", "2000")
    cluster_workers.wait_assigned(worker)
    send_all(kafka_bootstrap, topic, records)
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == len(records)
    wait_exact(store, records, cluster_workers)
    cluster_workers.stop(worker)
    generation = store.generation()
    marks = store.applied_offsets()
    dims_before = {k for k in store.cluster.scan_iter(match=store.shared.keys.prefix + ":dims:*")}
    assert generation.id is not None and dims_before

    corrupt(store, topic)
    ref = reference(records, time.time())
    damage = exactness(store, records, ref)
    assert {"slices", "counters", "pairs"} <= set(damage), damage
    old = view_traces(store, topic)

    poller = CounterPoller(services_cluster, prefix)
    poller.start()
    try:
        summary = run_rebuild(topic, group, prefix, kafka_bootstrap)
    finally:
        poller.halt.set()
        poller.join(timeout=30)
    new = view_traces(store, topic)
    assert summary["cluster"] is True and summary["partitions"] == PARTITIONS
    assert summary["traces"] == len(records) and summary["dlq"] == 0 and summary["keys_moved"] > 0
    assert sum(new) == len(records) and new != old
    allowed = {sum(choice) for choice in itertools.product(*zip(old, new, strict=True))}
    assert poller.seen and set(poller.seen) <= allowed, (sorted(set(poller.seen) - allowed)[:5], old, new)
    print(f"rebuild summary {summary}; {len(poller.seen)} reads during it")

    assert exactness(store, records, ref) == {}
    assert store.generation() == generation  # kept: a rebuild is not a loss
    assert store.applied_offsets() == marks
    assert {k for k in store.cluster.scan_iter(match=store.shared.keys.prefix + ":dims:*")} == dims_before
    assert store.sources() == [f"{topic}:{p}" for p in range(PARTITIONS)]
    assert leftover_stores(services_cluster, prefix) == []
    groups = {g["group_id"] if isinstance(g, dict) else g[0] for g in kafka_admin.list_groups()}
    assert not {g for g in groups if g.startswith(f"{group}.rebuild.")}, "the rebuild's consumer group was kept"
    doc = stats(prefix)
    assert doc["traces_folded_all_time"] == len(records) and doc["totals"]["traces"] == len(records)
    assert doc["applied_offsets"] == {f"{topic}:{p}": end - 1 for p, end in end_offsets(kafka_bootstrap, topic).items()}


def test_rebuild_on_the_cluster_with_a_worker_running_stays_exactly_once(
        names, kafka_bootstrap, services_cluster, cluster_workers):
    """A burst, then a trickle that outlasts the rebuild: the per-view swaps land while the worker is
    applying the same partitions, so its applies race them (refused and refolded, never restored)."""
    topic, dlq, prefix, group = names
    store = ClusterStore.from_url(services_cluster, prefix)
    # the trickle (9,000 at 200/s: 45 s) outlasts a rebuild of the burst and more (about 15 s)
    records = make_records(21_000, seed=42, now=time.time(), pair_share=0.2)
    burst, trickle = records[:12_000], records[12_000:]
    worker = cluster_workers.start(topic, dlq, prefix, group, "--batch-max-records", "2000")
    cluster_workers.wait_assigned(worker)
    epoch = store.cluster.cluster_info()["cluster_current_epoch"]
    send_all(kafka_bootstrap, topic, burst)
    wait_through(store, topic, 6000, cluster_workers)
    generation_id = store.cluster.hget(store.shared.keys.generation(), GENERATION_ID_FIELD)
    corrupt(store, topic)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, trickle, 200))
    feeder.start()
    try:
        summary = run_rebuild(topic, group, prefix, kafka_bootstrap)
        print(f"rebuild under a live worker: {summary}")
    finally:
        feeder.join(timeout=180)
    assert summary["partitions"] == PARTITIONS and summary["keys_moved"] > 0
    # the swaps landed while records were still coming: the rebuild never read the last ones
    assert summary["records"] < len(records), f"the swaps came after the traffic, not racing the worker: {summary}"
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == len(records)
    wait_exact(store, records, cluster_workers)
    assert worker.poll() is None, cluster_workers.tails()
    log = cluster_workers.log_of(worker)
    failed_over = store.cluster.cluster_info()["cluster_current_epoch"] != epoch
    assert not failed_over, (f"the cluster failed a master over during the test (epoch {epoch} -> "
                             f"{store.cluster.cluster_info()['cluster_current_epoch']}): a swap longer than "
                             f"cluster-node-timeout? {summary}")
    assert LOSS_LOGGED not in log, "the worker took the swap for lost state:\n" + log[-3000:]
    assert store.generation().restores == 0
    assert store.cluster.hget(store.shared.keys.generation(), GENERATION_ID_FIELD) == generation_id
    assert leftover_stores(services_cluster, prefix) == []
    assert stats(prefix)["totals"]["traces"] == len(records)
