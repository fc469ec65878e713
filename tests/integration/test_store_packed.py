"""Packed windows on the real Redis: one field per window hash, and every read exactly the aggregate
MemoryStore holds, for windows written packed, field by field (before packing) or both."""

from __future__ import annotations

import random
import time
import uuid

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.fold import fold
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from monitor.store.redis import scripts
from monitor.store.redis.layout import PACKED_FIELD
from monitor.store.redis.packed import PACKING, pack, window_fields
from monitor.store.redis.store import RedisStore
from monitor.store.redis.wire import decode_hash
from tests.support.traces import make_traces

NOW = float(int(time.time()))  # windows expire at real time (EXPIREAT)


def fetched(store: RedisStore, keys: list[str]) -> list[Aggregate]:
    """The windows ``keys`` as the exporter's fetch script sends them, decoded."""
    reply = store.client.eval(scripts.FETCH, 1 + len(keys), store.total_key("none"), *keys, len(keys), "whole")
    return [decode_hash(raw) for raw in reply[0][2:]]


def same(got: Aggregate, want: Aggregate) -> bool:
    ints = {k: v for k, v in got.counts.items() if k not in FLOAT_FIELDS}
    floats_close = all(abs(got.counts.get(k, 0) - want.counts.get(k, 0)) <= 1e-9 * max(1.0, abs(want.counts[k]))
                       for k in FLOAT_FIELDS if k in want.counts)
    return ints == {k: v for k, v in want.counts.items() if k not in FLOAT_FIELDS and v} and floats_close \
        and got.latency == want.latency


def test_windows_are_one_packed_field_and_read_back_as_the_memory_store_holds(redis_client):
    store = RedisStore(redis_client, prefix=f"packed-{uuid.uuid4().hex[:8]}")
    memory = MemoryStore()
    rng = random.Random(3)
    data = make_traces(3000, seed=3, now=NOW, spread_seconds=5400)
    for start in range(0, len(data), 400):  # batches of varied sizes rewrite the same windows many times
        batch = data[start:start + rng.randint(50, 400)]
        store.apply(fold(batch, Slicer(), NOW))
        memory.apply(fold(batch, Slicer(), NOW))
    keys = list(redis_client.scan_iter(match=f"{store.prefix}:w:*", count=1000))
    assert len(keys) > 100
    assert all(redis_client.hkeys(key) == [PACKED_FIELD.encode()] for key in keys)  # fails field by field
    ids = sorted(memory.active_slices())
    for res in ("1m", "1h"):  # MERGE's reads
        assert store.window_aggregates(res, NOW - 3 * 3600, NOW + 60, ids) == \
            memory.window_aggregates(res, NOW - 3 * 3600, NOW + 60, ids)
    assert store.totals(ids) == memory.totals(ids)
    sid = ids[0]
    starts = [int(key.decode().split(":")[3]) for key in keys if key.decode().startswith(f"{store.prefix}:w:1m:")
              and key.decode().endswith(":" + sid)]
    want = [memory.window_aggregates("1m", start, start + 60, [sid])[sid] for start in starts]
    got = fetched(store, [store.window_key("1m", start, sid) for start in starts])  # FETCH's reads
    assert len(got) == len(want) > 10 and all(same(g, w) for g, w in zip(got, want))


def test_a_window_held_field_by_field_is_read_as_is_then_rewritten_packed(redis_client):
    store = RedisStore(redis_client, prefix=f"legacy-{uuid.uuid4().hex[:8]}")
    first, second = make_traces(200, seed=5, now=NOW, spread_seconds=50), make_traces(200, seed=6, now=NOW,
                                                                                        spread_seconds=50)
    delta = fold(first, Slicer(), NOW)
    (res, start, sid), agg = next((k, a) for k, a in delta.windows.items() if k[0] == "1m" and a.traces > 20)
    key = store.window_key(res, start, sid)
    # as the apply wrote windows before they were packed: one hash field per aggregate field
    redis_client.hset(key, mapping={k: repr(float(v)) if k in FLOAT_FIELDS else str(int(v))
                                    for k, v in agg.to_dict().items() if v})
    assert store.window_aggregates(res, start, start + 60, [sid])[sid] == agg
    assert same(fetched(store, [key])[0], agg)
    later = fold([t for t in second if int(t.ts) // 60 * 60 == start], Slicer(), NOW)
    store.apply(later)
    want = agg.copy().merge(later.windows[(res, start, sid)]) if (res, start, sid) in later.windows else agg
    assert (res, start, sid) in later.windows
    assert redis_client.hkeys(key) == [PACKED_FIELD.encode()]
    assert redis_client.ttl(key) > 3600  # the rewrite kept the window's retention
    assert store.window_aggregates(res, start, start + 60, [sid])[sid] == want
    assert int(window_fields(redis_client.hgetall(key))["traces"]) == want.traces
    # a field set beside the packed one (an edit by hand) is added by every read, then folded in
    redis_client.hincrby(key, "successes", 3)
    edited = want.copy().merge(Aggregate({"successes": 3}))
    assert store.window_aggregates(res, start, start + 60, [sid])[sid] == edited
    assert same(fetched(store, [key])[0], edited)
    store.apply(fold([], Slicer(), NOW))
    store.apply(later)
    assert redis_client.hkeys(key) == [PACKED_FIELD.encode()]
    assert store.window_aggregates(res, start, start + 60, [sid])[sid] == edited.merge(later.windows[(res, start, sid)])


def test_the_scripts_merge_of_two_packed_windows_is_the_aggregates_sum(redis_client):
    rng = random.Random(11)
    data = make_traces(400, seed=11, now=NOW)
    odd = Aggregate({"traces": 2, 'tokens_in:m/"é"\n': 10**12 + 1, "fees_usd": 0.1})
    for seconds in (0.0, 0.0004, 0.3, 45.0):  # zero, negative and positive bucket indices
        odd.latency.add(seconds)
    cases = [(Aggregate(), Aggregate.of(data[:3])), (odd, odd.copy()), (odd, Aggregate.of(data[:50]))]
    cases += [(Aggregate.of(rng.sample(data, rng.randint(1, 400))), Aggregate.of(rng.sample(data, rng.randint(1, 400))))
              for _ in range(20)]
    for a, b in cases:
        text = redis_client.eval(PACKING + "return merged(ARGV[1], ARGV[2])", 0, pack(a), pack(b))
        got, want = decode_hash(text), a.copy().merge(b)
        assert got.latency == want.latency and got.latency.count == want.latency.count
        assert got.counts == {k: v for k, v in want.counts.items() if v}  # floats too: '%.17g' is exact
