"""RedisStore on the real Redis: same answers as MemoryStore, exactly-once apply, pending halves."""

import random
import time

import pytest

from monitor.fold import fold
from monitor.pairing import Pairer
from monitor.pricing import PriceMap
from monitor.schema import validate
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from monitor.store.redis.packed import window_fields
from monitor.store.redis.store import RedisGuard, RedisStore

NOW = time.time()  # window keys expire at real time (EXPIREAT), so event times are recent


def traces(n, seed=1):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(validate({
            "trace_id": f"t{i}", "ts": NOW - rng.random() * 3 * 3600, "model_id": f"m{i % 3}",
            "ok": rng.random() < 0.7, "tokens_in": rng.randint(0, 5000), "tokens_out": rng.randint(0, 500),
            "latency_ms": rng.expovariate(1 / 2000), "tenant": f"t{i % 5}", "fees_usd": 0.001 * (i % 7),
            "harmful_action": rng.random() < 0.01, "arm": "shadow" if i % 2 else "baseline",
            "release": "v2" if i % 2 else "v1", "pair_id": f"p{i // 2}"}))
    return out


def test_redis_store_matches_memory_store_and_skips_redelivery(redis_client):
    store = RedisStore(redis_client, prefix="it")
    memory = MemoryStore()
    data = traces(4000)
    pairer_r, pairer_m = Pairer(PriceMap.load()), Pairer(PriceMap.load())
    for start in range(0, len(data), 500):
        batch = data[start:start + 500]
        delta_r = pairer_r.join(batch, Slicer(), NOW, fold(batch, Slicer(), NOW))
        delta_m = pairer_m.join(batch, Slicer(), NOW, fold(batch, Slicer(), NOW))
        assert store.apply(delta_r, "topic:0", start, start + len(batch) - 1)
        memory.apply(delta_m, "topic:0", start, start + len(batch) - 1)
        # Redelivery of the same batch (or an overlapping one) changes nothing.
        assert not store.apply(delta_r, "topic:0", start, start + len(batch) - 1)
    assert store.applied_offset("topic:0") == 3999
    ids = sorted(store.active_slices())
    assert ids == sorted(memory.active_slices())
    assert store.totals(ids) == memory.totals(ids)
    for res in ("1m", "1h"):
        got = store.window_aggregates(res, NOW - 4 * 3600, NOW + 60, ids)
        want = memory.window_aggregates(res, NOW - 4 * 3600, NOW + 60, ids)
        assert got == want
    # every trace once in each of the six default slice groupings
    assert sum(a.traces for a in store.totals(ids).values()) == 6 * 4000
    assert sum(a.traces for sid, a in store.totals(ids).items() if sid.count("|") == 1) == 4000  # release × arm
    assert store.counters()["traces"] == 4000
    got, want = store.paired_evidence(), memory.paired_evidence()
    assert got.keys() == want.keys() and len(got) == 6  # all + 5 tenants
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12)
    assert store.pending("topic:0") == memory.pending("topic:0")


def test_windows_expire_at_their_retention(redis_client):
    store = RedisStore(redis_client, prefix="ttl")
    import time
    now = time.time()
    trace = validate({"trace_id": "x", "ts": now - 30, "model_id": "m", "ok": True})
    store.apply(fold([trace], Slicer(), now))
    sid = "release=m|arm=baseline"  # the release × arm row (release defaults to the model), one of six
    assert sid in store.active_slices()
    key = store.window_key("1m", int((now - 30) // 60 * 60), sid)
    ttl = redis_client.ttl(key)
    assert 47 * 3600 < ttl <= 48 * 3600 + 60


def test_redis_guard_is_shared_between_workers(redis_client):
    store = RedisStore(redis_client, prefix="guard")
    first, second = RedisGuard(store, max_values=3), RedisGuard(store, max_values=3)
    assert [first.admit("tenant", f"t{i}") for i in range(2)] == ["t0", "t1"]
    assert [second.admit("tenant", v) for v in ("t5", "t0", "t6")] == ["t5", "t0", "__other__"]
    assert first.admit("tenant", "t7") == "__other__"


def test_an_apply_merges_into_existing_hashes_exactly_even_very_wide_ones(redis_client):
    """The apply script reads and rewrites each hash once; a hash wider than one HSET call is written in parts."""
    store = RedisStore(redis_client, f"wide-{random.randrange(10**9)}")
    models = [f"model-{i}" for i in range(3000)]   # 3 token fields each: 9,000 fields in one window hash
    big = 10**12 - 3000  # near the schema's token bound (monitor.limits): exact integers, not floats
    batch = [validate({"trace_id": f"t{i}", "ts": NOW - 30, "model_id": m, "ok": True, "tokens_in": big + i,
                       "tokens_out": 7, "tokens_cached_in": 1, "fees_usd": 0.1, "latency_ms": 250 + i})
             for i, m in enumerate(models)]
    slicer = Slicer(dimensions=("tenant",))
    for _ in range(2):
        assert store.apply(fold(batch, slicer, NOW))
    # the tenant grouping's row (the other is the whole fleet's, id "")
    (key,) = [k for k in redis_client.scan_iter(match=f"{store.prefix}:w:1m:*") if k.endswith(b"tenant=unknown")]
    stored = window_fields(redis_client.hgetall(key))  # a window is one packed field (layout)
    assert len(stored) > 9000
    assert redis_client.hlen(store.total_key("tenant=unknown")) > 9000  # totals: field by field, in parts
    assert stored["traces"] == "6000"
    assert all(stored[f"tokens_in:{m}"] == str(2 * (big + i)) for i, m in enumerate(models))
    assert abs(float(stored["fees_usd"]) - 600.0) < 1e-9
    assert store.totals()["tenant=unknown"].traces == 6000


def test_an_apply_of_several_partitions_is_all_or_nothing(redis_client):
    store = RedisStore(redis_client, f"ranges-{random.randrange(10**9)}")
    delta = fold(traces(20), Slicer(), NOW)
    assert store.apply_ranges(delta, [("t:0", 0, 9), ("t:1", 0, 4)], {"t:1": ({"p": "half"}, set())}) is None
    assert store.applied_offsets() == {"t:0": 9, "t:1": 4} and store.pending("t:1") == {"p": "half"}
    before = store.counters()
    # partition 1 overlaps what is applied: nothing of the batch is written, partition 0 included
    assert store.apply_ranges(delta, [("t:0", 10, 19), ("t:1", 3, 8)], {"t:1": ({}, {"p"})}) == ("t:1", 4)
    assert store.counters() == before and store.applied_offsets() == {"t:0": 9, "t:1": 4}
    assert store.pending("t:1") == {"p": "half"}
    assert store.apply_ranges(delta, [("t:0", 10, 19), ("t:1", 5, 8)], {"t:1": ({}, {"p"})}) is None
    assert store.counters()["traces"] == 2 * before["traces"] and store.pending("t:1") == {}
