"""The exporter's release identities come from the registry set the apply writes, not a SCAN (the real Redis)."""

from __future__ import annotations

import uuid

from monitor.delta import BatchDelta
from monitor.identity import encode
from monitor.store.memory import MemoryStore
from monitor.store.redis.store import RedisStore


def identities(release: str, n: int) -> BatchDelta:
    delta = BatchDelta()
    delta.identities[release] = {encode(("m", "", f"p{i}", "", "")): float(100 + i) for i in range(n)}
    return delta


class CountingScans:
    """The store's real client, with its SCANs counted."""

    def __init__(self, client) -> None:
        self.client, self.scans = client, 0

    def __getattr__(self, name):
        return getattr(self.client, name)

    def scan_iter(self, *args, **kwargs):
        self.scans += 1
        return self.client.scan_iter(*args, **kwargs)


def test_the_apply_registers_each_release_and_reads_scan_no_more(redis_client):
    prefix = f"fleetmon-reg-{uuid.uuid4().hex[:8]}"
    writer, memory = RedisStore(redis_client, prefix=prefix), MemoryStore()
    for delta in (identities("v1", 3), identities("v|2 *", 2), identities("v1", 5)):
        writer.apply(delta)
        memory.apply(delta)
    assert {m.decode() for m in redis_client.smembers(f"{prefix}:id:")} == {"v1", "v|2 *"}
    counting = CountingScans(redis_client)
    reader = RedisStore(counting, prefix=prefix)
    assert reader.release_identities() == memory.release_identities()
    assert counting.scans == 1  # the first read looks once for hashes written before the registry
    writer.apply(identities("v3", 1))
    memory.apply(identities("v3", 1))
    assert reader.release_identities() == memory.release_identities()  # a new release, through the registry
    assert counting.scans == 1


def test_hashes_written_before_the_registry_are_still_read(redis_client):
    prefix = f"fleetmon-legacy-{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_client, prefix=prefix)
    store.apply(identities("new", 2))
    redis_client.hset(f"{prefix}:id:old", mapping={encode(("m", "", "p", "", "")): "7.0"})  # no registry entry
    counting = CountingScans(redis_client)
    reader = RedisStore(counting, prefix=prefix)
    for _ in range(2):
        found = reader.release_identities()
        assert sorted(found) == ["new", "old"] and found["old"] == {encode(("m", "", "p", "", "")): 7.0}
    assert counting.scans == 2  # while a hash outside the registry exists, every read scans
    redis_client.delete(f"{prefix}:id:old")
    assert sorted(reader.release_identities()) == ["new"]
    reader.release_identities()
    assert counting.scans == 3  # none left outside: no more scans
