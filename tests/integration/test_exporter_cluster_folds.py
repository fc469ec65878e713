"""On the Redis Cluster store, folded rows moved by their members' changes equal a fresh exporter's (real cluster).

Traffic lands in several partition views (so a slice's aggregates are the merge of several views'
parts, and the views' reported steps hold only for the slices one view holds), with a small
``exporter.max_series`` so most rows fold into ``__other__`` rows: after every apply the
long-lived exporter's body equals, byte for byte, a fresh exporter's on the same store.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from monitor.exporter.collector import build_registry
from monitor.exporter.exposition import render
from monitor.fold import fold
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.redis.cluster import ClusterStore
from tests.support.cluster_checks import ensure_services_cluster
from tests.support.traces import make_traces

PRICES = PriceMap.load()
SERVICES_CLUSTER_PORT = int(os.environ.get("FLEETMON_REDIS_CLUSTER_PORT") or 7000)


@pytest.fixture(scope="module")
def services_cluster(fleetmon_services) -> str:
    return ensure_services_cluster(SERVICES_CLUSTER_PORT)


def body(registry) -> bytes:
    return b"\n".join(line for line in render(registry)[0].split(b"\n")
                      if not line.startswith(b"fleetmon_scrape_duration_seconds "))


def test_folded_rows_on_the_cluster_equal_a_fresh_exporter(services_cluster):
    store = ClusterStore.from_url(services_cluster, f"fm-folds-{uuid.uuid4().hex[:8]}")
    clock = {"now": float(int(time.time()))}
    now = lambda: clock["now"]  # noqa: E731 - the exporters' injected clock
    slicer = Slicer()
    registry, collector = build_registry(store, PRICES, now=now, max_series=900)
    offsets = [0, 0, 0]
    try:
        moved = 0
        for seed in range(6):
            partition = seed % 3 if seed < 3 else (seed * 7) % 3
            traces = make_traces(300, seed=seed, now=clock["now"], spread_seconds=600, tenants=tuple("abcd"))
            first = offsets[partition]
            assert store.apply(fold(traces, slicer, clock["now"]), f"t:{partition}", first, first + len(traces) - 1)
            offsets[partition] += len(traces)
            clock["now"] += 20
            fresh, _collector = build_registry(store, PRICES, now=now, max_series=900)
            assert body(registry) == body(fresh), seed
            assert collector.folded_slices > 0
            moved += collector._folds.last["moved"]
        assert moved > 0
    finally:
        store.clear()
