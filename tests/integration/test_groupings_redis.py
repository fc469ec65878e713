"""Slice groupings on the real Redis: the admitted combinations of each grouping are shared by every
worker (``P:dims:grouping:<name>``), a grouping's budget holds across workers, and each grouping's
stored rows sum to the whole fleet."""

from __future__ import annotations

import time

from monitor.aggregate import Aggregate
from monitor.fold import fold
from monitor.groupings import FOLDED_COUNTER_PREFIX, grouping_name, grouping_set
from monitor.schema import validate
from monitor.slices import OTHER, Slicer, parse_slice_id
from monitor.store.redis.store import RedisGuard, RedisStore

DIMS = ("release", "arm", "task_type", "tenant", "locale")


def _traces(start: int, n: int, now: float, tenants: range) -> list:
    return [validate({"trace_id": f"t{start + i}", "ts": now - 30, "model_id": "m", "release": "r1",
                      "arm": "baseline", "task_type": f"k{i % 2}", "tenant": f"t{tenants[i % len(tenants)]}",
                      "locale": "en", "ok": i % 3 == 0}) for i in range(n)]


def test_two_workers_share_each_groupings_admitted_combinations_and_budget(redis_client):
    prefix = "fleetmon-groupings-test"
    groupings = grouping_set(DIMS, budget=4)
    now = time.time()
    stores = [RedisStore(redis_client, prefix=prefix) for _ in range(2)]
    workers = [Slicer(DIMS, RedisGuard(store, max_values=100), groupings) for store in stores]
    first = _traces(0, 40, now, range(0, 3))        # worker A: tenants t0..t2 (3 of the budget of 4)
    second = _traces(1000, 40, now, range(2, 8))    # worker B: t2..t7; only one more fits
    assert stores[0].apply(fold(first, workers[0], now), "g:0", 0, len(first) - 1)
    assert stores[1].apply(fold(second, workers[1], now), "g:1", 0, len(second) - 1)

    admitted = {v.decode() for v in redis_client.smembers(f"{prefix}:dims:grouping:tenant")}
    assert admitted == {f"release=r1|arm=baseline|tenant=t{i}" for i in range(4)}  # first seen, across workers
    for name in groupings.names()[1:]:
        assert redis_client.scard(f"{prefix}:dims:grouping:{name}") <= 4

    totals = stores[0].totals()
    everything = Aggregate.of(first + second)
    for name in groupings.names():
        merged = Aggregate()
        for sid, agg in totals.items():
            if grouping_name(parse_slice_id(sid)) == name:
                merged.merge(agg)
        assert merged == everything, name
    other = f"release=r1|arm=baseline|tenant={OTHER}"
    moved = sum(t.tenant not in ("t0", "t1", "t2", "t3") for t in second)
    assert totals[other].traces == moved
    assert stores[0].counters()[FOLDED_COUNTER_PREFIX + "tenant"] == moved

    # a restarted worker (fresh guard) reads the same answers from Redis
    again = Slicer(DIMS, RedisGuard(stores[0], max_values=100), groupings)
    delta = fold(_traces(5000, 8, now, range(0, 8)), again, now)
    rows = {sid for sid in delta.totals if grouping_name(parse_slice_id(sid)) == "tenant"}
    assert rows == {f"release=r1|arm=baseline|tenant={t}" for t in ("t0", "t1", "t2", "t3", OTHER)}
