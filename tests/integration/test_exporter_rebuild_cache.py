"""A running exporter serves what ``fleetmon rebuild`` repaired, even when the repair kept every count.

The exporter's reader (monitor/store/redis/reads.py) treats a slice's ``traces`` as its version: a
window or totals hash whose count did not move is taken as unchanged. A rebuild exists to repair
wrong state, and a repaired hash often has the same count (a corrupted ``successes`` or fee). Here the
live prefix is wrong in every window and totals hash with the counts kept, the exporter scrapes it,
the true state (the same traces folded into a rebuild prefix) is swapped in with the rebuild's own
SWAP script, and the next scrape must equal a fresh exporter's. On the services' Redis Cluster
(7000-7005) the same with the per-slot swaps of streams/rebuild_cluster.py. Real Redis, no fakes.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
import redis

from monitor.exporter.collector import build_registry
from monitor.exporter.exposition import render
from monitor.fold import fold
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.redis.cluster import ClusterStore
from monitor.store.redis.store import RedisStore
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.batch import decode_batch, fold_batch
from streams.rebuild import swap
from streams.rebuild_cluster import swap_shared, swap_view
from tests.support.batches import Rec
from tests.support.cluster_checks import ensure_services_cluster
from tests.support.pipeline import make_records
from tests.support.traces import make_traces

PRICES = PriceMap.load()
TOPIC = "traces"
PARTITIONS = 3


@pytest.fixture(scope="module")
def services_cluster(fleetmon_services) -> str:
    return ensure_services_cluster(int(os.environ.get("FLEETMON_REDIS_CLUSTER_PORT") or 7000))


def body(registry) -> bytes:
    return b"\n".join(line for line in render(registry)[0].split(b"\n")
                      if not line.startswith(b"fleetmon_scrape_duration_seconds "))


def corrupt_keeping_counts(client, prefix: str) -> int:
    """Every window and totals hash of ``prefix`` made wrong with its ``traces`` kept; returns how many."""
    changed = 0
    for pattern in (f"{prefix}:w:*", f"{prefix}:t:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            successes = int(client.hget(key, "successes") or 0)
            client.hset(key, "successes", successes - 1 if successes else 1)
            client.hincrbyfloat(key, "fees_usd", 1.25)
            changed += 1
    return changed


@pytest.mark.parametrize("max_series", [20_000, 400])  # 400: most rows folded into __other__ rows
def test_a_same_count_repair_reaches_a_running_exporter(redis_client: redis.Redis, max_series: int):
    live = f"fleetmon-stale-{uuid.uuid4().hex[:8]}"
    now = float(int(time.time()))
    slicer = Slicer()
    stores = [RedisStore(redis_client, prefix=p) for p in (live, f"{live}.rebuild.1")]
    for seed in range(3):
        traces = make_traces(120, seed=seed, now=now, spread_seconds=600, tenants=tuple("abc"))
        for store in stores:
            store.apply(fold(traces, slicer, now))
    assert corrupt_keeping_counts(redis_client, live) > 0
    registry, collector = build_registry(stores[0], PRICES, now=lambda: now, max_series=max_series)
    wrong = body(registry)
    assert wrong == body(build_registry(stores[0], PRICES, now=lambda: now, max_series=max_series)[0])
    assert (collector.folded_slices > 0) == (max_series < 20_000)

    result = swap(redis_client, live, stores[1].prefix, TOPIC)
    assert result.swapped and result.keys_moved > 0, result
    assert redis_client.hget(f"{live}:generation", "rebuilds") == b"1"  # the count the reader checks

    repaired = body(build_registry(stores[0], PRICES, now=lambda: now, max_series=max_series)[0])
    assert repaired != wrong, "the corruption did not show in the body: this test proves nothing"
    assert body(registry) == repaired
    # and again: the repair must stick, not only the first scrape after it
    assert body(registry) == repaired


def test_a_same_count_repair_of_cluster_views_reaches_a_running_exporter(services_cluster):
    live = f"fm-stale-{uuid.uuid4().hex[:10]}"
    fresh = f"{live}.rebuild.1"
    now = time.time()
    stores = [ClusterStore.from_url(services_cluster, p) for p in (live, fresh)]
    records = make_records(900, seed=7, now=now)
    try:
        for partition in range(PARTITIONS):
            mine = records[partition::PARTITIONS]
            batch = decode_batch([(TOPIC, partition, [Rec(i, json.dumps(r).encode()) for i, r in enumerate(mine)])],
                                 now)
            delta = fold_batch(batch, Slicer(), now, DEFAULT_RESOLUTIONS)
            for store in stores:
                assert store.apply_ranges(delta, batch.ranges()) is None
        client = stores[0].cluster
        sources = [f"{TOPIC}:{p}" for p in range(PARTITIONS)]
        assert all(corrupt_keeping_counts(client, stores[0].view(source).keys.prefix) > 0 for source in sources)
        registry, _collector = build_registry(stores[0], PRICES, now=lambda: now)
        wrong = body(registry)
        assert wrong == body(build_registry(stores[0], PRICES, now=lambda: now)[0])

        for source in sources:
            assert swap_view(client, live, fresh, source, TOPIC).swapped
        swap_shared(client, live, fresh)

        repaired = body(build_registry(stores[0], PRICES, now=lambda: now)[0])
        assert repaired != wrong, "the corruption did not show in the body: this test proves nothing"
        assert body(registry) == repaired
        assert body(registry) == repaired
    finally:
        for store in stores:
            store.clear()
            store.cluster.close()
