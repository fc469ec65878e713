"""A worker's cached guard answers do not outlive a rebuild's swap of the admitted values (real Redis).

A ``fleetmon rebuild`` swaps ``dims:`` (the admitted values) with the rebuilt ones and moves the
watermarks past what a live worker applied; that worker's next apply is refused. Its
:class:`~monitor.store.redis.store.RedisGuard` remembers the values Redis admitted before the swap;
if it kept them, it would go on writing rows for a value the new ``dims:`` does not hold, past the
cap. So a refusal drops what the guard remembers, and the refold asks Redis again.
"""

from __future__ import annotations

import json
import time
import uuid

from aiokafka import TopicPartition

from monitor.slices import Slicer
from monitor.store.redis.store import RedisGuard, RedisStore
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.apply import BatchApplier, LoopCounters
from streams.batch import decode_batch
from tests.support.batches import Rec

SOURCE = "t:0"
TP = TopicPartition("t", 0)


def records(first: int, n: int, tenant: str, now: float) -> list[Rec]:
    return [Rec(offset, json.dumps({
        "trace_id": f"tr-{offset}", "ts": now - 30, "model_id": "m-a", "release": "r1", "arm": "baseline",
        "task_type": "chat", "tenant": tenant, "locale": "en", "outcome": "success",
        "tokens_in": 100, "tokens_out": 10, "latency_ms": 900.0, "fees_usd": 0.001}).encode())
        for offset in range(first, first + n)]


def test_a_refused_apply_drops_the_guards_cached_answers_and_the_refold_asks_redis(redis_client):
    store = RedisStore(redis_client, f"fm-{uuid.uuid4().hex[:10]}")
    guard = RedisGuard(store, max_values=1)
    applier = BatchApplier(store, Slicer(guard=guard), tuple(DEFAULT_RESOLUTIONS), LoopCounters(),
                           None, None, lambda: False)
    now = time.time()

    first = decode_batch([("t", 0, records(0, 10, "t-x", now))], now, native=None)
    assert applier.apply({SOURCE: TP}, first, now, {}) == {TP: 9}
    assert "t-x" in guard.admitted["tenant"]   # remembered: the next batch would not ask Redis

    # A rebuild's swap: its dims:tenant holds another value (the cap of 1 is full), and its
    # watermark is past offsets 10..14 of the next batch.
    store.client.delete(store.keys.dims("tenant"))
    assert store.admit("tenant", "t-y", 1)
    store.client.hset(store.keys.offsets(), SOURCE, 14)

    second = decode_batch([("t", 0, records(10, 10, "t-x", now))], now, native=None)
    assert applier.apply({SOURCE: TP}, second, now, {SOURCE: 9}) == {TP: 19}
    assert applier.counters.applies_refused == 1
    counters = store.counters()
    assert counters["traces"] == 15                       # 10 + the 5 above the rebuilt watermark
    assert counters.get("folded:tenant") == 5             # t-x is past the cap of the swapped set
    assert store.client.smembers(store.keys.dims("tenant")) == {b"t-y"}
