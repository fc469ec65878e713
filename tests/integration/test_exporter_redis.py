"""The exporter over the real Redis store serves exactly what it serves over the
in-memory store with the same data — on the first scrape, after new batches
(change detection re-reads what changed), and as the windows slide."""

from __future__ import annotations

import math
import time

import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.exporter import build_registry
from monitor.fold import fold
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store import MemoryStore
from monitor.store_redis import RedisStore
from tests.unit.test_exporter import make_traces

PRICES = PriceMap.load()


def samples(registry) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == "fleetmon_scrape_duration_seconds":
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys(), (sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5])
    for key in a:
        assert math.isclose(a[key], b[key], rel_tol=1e-9, abs_tol=1e-12), (key, a[key], b[key])


def test_redis_and_memory_exports_agree_across_batches_and_sliding_windows(redis_client: redis.Redis):
    redis_store = RedisStore(redis_client, prefix="fleetmon-exp")
    memory_store = MemoryStore()
    # a real clock: Redis expires windows past retention, so event times must be recent
    NOW = float(int(time.time()))
    clock = {"now": NOW}
    built = [build_registry(store, PRICES, now=lambda: clock["now"]) for store in (redis_store, memory_store)]
    registries = [registry for registry, _ in built]
    assert built[0][1]._reader.incremental and not built[1][1]._reader.incremental
    slicer = Slicer()

    def apply(traces, first):
        for store in (redis_store, memory_store):
            assert store.apply(fold(traces, slicer, clock["now"]), "t:0", first, first + len(traces) - 1)

    apply(make_traces(1500, seed=11, now=NOW, spread_seconds=4000), 0)
    assert_same(*map(samples, registries))
    assert_same(*map(samples, registries))  # second scrape: served from the change-detection cache

    apply(make_traces(200, seed=12, now=NOW, spread_seconds=120), 1500)  # recent traffic into a few slices
    assert_same(*map(samples, registries))

    apply(make_traces(50, seed=13, now=NOW - 600, spread_seconds=2900), 1700)  # only old minutes change
    assert_same(*map(samples, registries))

    for minutes in (1, 2, 7, 61):  # the spans slide: windows leave and enter
        clock["now"] = NOW + 60 * minutes
        assert_same(*map(samples, registries))
