"""Release identities on the real Redis: the apply script's merge equals monitor.identity.apply_to (MemoryStore)."""

from __future__ import annotations

import random
import time

from monitor.delta import BatchDelta
from monitor.fold import fold
from monitor.identity import MAX_IDENTITIES_PER_RELEASE, OVERFLOW_FIELD, encode, summarize
from monitor.schema import validate
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from monitor.store.redis.store import RedisStore

NOW = time.time()


def batch(rng: random.Random, start: int, n: int) -> list:
    return [validate({"trace_id": f"t{start + i}", "ts": NOW - rng.random() * 3600, "model_id": "m1", "ok": True,
                      "release": rng.choice(["v1", "v2", "v|3 *"]), "prompt_hash": rng.choice(["p1", "p2", "p3"]),
                      "config_hash": rng.choice(["", "c1"])}) for i in range(n)]


def test_the_apply_script_keeps_the_same_identities_as_the_memory_store(redis_client):
    rng = random.Random(5)
    store, memory = RedisStore(redis_client, prefix="idt"), MemoryStore()
    for start in range(0, 2000, 250):
        delta = fold(batch(rng, start, 250), Slicer(), NOW)
        assert store.apply(delta, "topic:0", start, start + 249)
        memory.apply(delta, "topic:0", start, start + 249)
        assert not store.apply(delta, "topic:0", start, start + 249)     # redelivered: refused, nothing moves
    assert store.release_identities() == memory.release_identities()
    found = summarize(store.release_identities())
    assert sorted(found) == ["v1", "v2", "v|3 *"] and all(f.changes == 5 for f in found.values())


def test_past_the_cap_the_script_counts_instead_of_keeping(redis_client):
    store, memory = RedisStore(redis_client, prefix="idc"), MemoryStore()
    for round_ in range(3):
        delta = BatchDelta()
        delta.identities["r"] = {encode(("m", "", f"p{round_}-{i}", "", "")): float(i) for i in range(20)}
        delta.identities["r"][encode(("m", "", "p0-0", "", ""))] = 100.0 + round_   # a kept tuple moves on
        store.apply(delta)
        memory.apply(delta)
    stored, mine = store.release_identities(), memory.release_identities()
    # which of the later rounds' tuples fill the cap depends on iteration order (documented); the counts do not
    assert len(stored["r"]) == len(mine["r"]) and stored["r"][OVERFLOW_FIELD] == mine["r"][OVERFLOW_FIELD]
    assert all(stored["r"][encode(("m", "", f"p0-{i}", "", ""))] == mine["r"][encode(("m", "", f"p0-{i}", "", ""))]
               for i in range(20))   # the first round fits entirely
    assert len(stored["r"]) - 1 == MAX_IDENTITIES_PER_RELEASE and stored["r"][OVERFLOW_FIELD] == 60 - 32
    assert stored["r"][encode(("m", "", "p0-0", "", ""))] == 102.0
    assert summarize(stored)["r"].changes == 60 - 1
