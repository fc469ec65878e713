"""Redis losing the workers' state mid-stream, restored from Kafka (streams/restore.py).

Each test runs its own ``redis-server`` (tests/support/redis_server.py: never the shared one) that it
SIGKILLs, restarts, rolls back or flushes while ``fleetmon worker`` processes consume a fresh topic on
the shared Kafka; afterwards Redis must hold exactly what the topic retains — every slice's totals,
the paired counts, the pipeline counters and the windows — and the loss must have been logged and
counted. No fakes.
"""

from __future__ import annotations

import re
import threading
import time
import uuid

import pytest

from monitor.store.redis.store import RedisStore
from tests.support.pipeline import (
    Workers,
    applied,
    count_messages,
    end_offsets,
    exactness,
    make_records,
    send_all,
    send_raw,
)
from tests.support.redis_server import RedisServer

WAIT_SECONDS = 180
SMALL_BATCHES = ("--batch-max-records", "2000")
LOSS_LOGGED = "the store lost state this worker applied"
#: What a worker logs when it is assigned a partition the store has no watermark for but the group consumed.
LOST_AT_ASSIGNMENT = "the store holds no watermark for partitions the group has consumed"


@pytest.fixture
def own_redis(tmp_path):
    servers: list[RedisServer] = []

    def make(appendonly: bool = False) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(servers)}", appendonly=appendonly).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.kill()


def names(unique_topic) -> tuple[str, str, str, str]:
    topic = unique_topic(partitions=4, prefix="state-loss")
    dlq = unique_topic(partitions=1, prefix="state-loss-dlq")
    tag = uuid.uuid4().hex[:10]
    return topic, dlq, f"fm-{tag}", f"fm-{tag}"


def progress(server: RedisServer, prefix: str, topic: str) -> int:
    """Records at or below the store's watermarks (0 while Redis is down)."""
    try:
        with server.client() as client:
            return sum(m + 1 for m in applied(client, prefix, topic).values())
    except Exception:  # noqa: BLE001 - down or loading: no progress to report
        return 0


def wait_progress(server: RedisServer, prefix: str, topic: str, at_least: int, workers: Workers,
                  timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = progress(server, prefix, topic)
        if done >= at_least:
            return done
        time.sleep(0.02)
    pytest.fail(f"no progress to {at_least} records in {timeout} s\n{workers.tails()}")


def wait_exact(server: RedisServer, prefix: str, topic: str, records: list[dict], bootstrap: str,
               workers: Workers, timeout: float = WAIT_SECONDS, dlq: int = 0) -> RedisStore:
    """Until every watermark is its partition's last offset and the store matches ``records``
    (plus ``dlq`` rejected records in the topic)."""
    ends = end_offsets(bootstrap, topic)
    assert sum(ends.values()) == len(records) + dlq, "the topic does not retain what was sent"
    store = RedisStore(server.client(), prefix)
    deadline = time.monotonic() + timeout
    problems: dict = {}
    while time.monotonic() < deadline:
        with server.client() as client:
            marks = applied(client, prefix, topic)
        if all(marks.get(p, -1) >= end - 1 for p, end in ends.items() if end > 0):
            problems = exactness(store, records, dlq)
            if not problems:
                return store
        time.sleep(0.2)
    pytest.fail(f"the store did not match the topic within {timeout} s: {problems}\n{workers.tails()}")


def exported_state(store: RedisStore) -> dict[str, float]:
    """The two state metrics as the exporter serves them from this store."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from monitor.exporter.collector import build_registry
    from monitor.pricing import PriceMap

    registry, _collector = build_registry(store, PriceMap.load(None))
    wanted = {"fleetmon_state_restores_total", "fleetmon_state_generation"}
    return {sample.name: sample.value for family in text_string_to_metric_families(generate_latest(registry).decode())
            for sample in family.samples if sample.name in wanted}


def loss_lines(log: str) -> list[str]:
    """The worker's loss errors (not the source line a logging traceback may quote)."""
    return [line for line in log.splitlines() if re.search(LOSS_LOGGED + r" \((?!%s\))", line)]


def restore_events(log: str) -> int:
    """Restores a worker logged: each loss it found, and each assignment of partitions the store had lost
    (a rebalance between a loss and the first apply after it hands the new owner such partitions)."""
    at_assignment = [line for line in log.splitlines() if re.search(LOST_AT_ASSIGNMENT + ": (?!%s)", line)]
    return len(loss_lines(log)) + len(at_assignment)


@pytest.fixture
def workers_on(tmp_path, kafka_bootstrap):
    made: list[Workers] = []

    def make(server: RedisServer) -> Workers:
        w = Workers(tmp_path, kafka_bootstrap, server.url)
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def test_redis_sigkilled_without_persistence_is_rebuilt_from_the_topic(kafka_bootstrap, unique_topic, own_redis,
                                                                        workers_on):
    topic, dlq, prefix, group = names(unique_topic)
    server = own_redis(appendonly=False)
    workers = workers_on(server)
    records = make_records(40_000, seed=21, now=time.time(), pair_share=0.2)
    a = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(a)
    b = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(b)
    time.sleep(2)  # let the rebalance b's joining caused settle on both
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, records, 6000))
    feeder.start()
    try:
        wait_progress(server, prefix, topic, 12_000, workers)
        with server.client() as client:
            old_generation = RedisStore(client, prefix).generation().id
        server.kill()
        server.start()  # empty: no RDB, no AOF
    finally:
        feeder.join(timeout=120)
    store = wait_exact(server, prefix, topic, records, kafka_bootstrap, workers)

    generation = store.generation()
    assert old_generation is not None and generation.id is not None and generation.id != old_generation
    detected = {name: loss_lines(workers.log_of(proc)) for name, proc in (("a", a), ("b", b))}
    assert any(detected.values()), f"no worker logged the loss\n{workers.tails()}"
    assert generation.restores == sum(restore_events(workers.log_of(proc)) for proc in (a, b))
    for lines in detected.values():
        for line in lines:  # the error names the partitions, what the worker applied and what Redis holds
            assert re.search(rf"{re.escape(topic)}:\d \d+ -> None", line), line
    assert a.poll() is None and b.poll() is None


def test_appendonly_everysec_rolled_back_redis_is_caught_up_from_the_topic(kafka_bootstrap, unique_topic, own_redis,
                                                                           workers_on, tmp_path):
    topic, dlq, prefix, group = names(unique_topic)
    server = own_redis(appendonly=True)
    workers = workers_on(server)
    records = make_records(40_000, seed=22, now=time.time(), pair_share=0.2)
    worker = workers.start(topic, dlq, prefix, group, *SMALL_BATCHES)
    workers.wait_assigned(worker)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, records, 6000))
    feeder.start()
    try:
        wait_progress(server, prefix, topic, 10_000, workers)
        snapshot = server.snapshot_aof(tmp_path / "aof-earlier")
        at_snapshot = progress(server, prefix, topic)
        with server.client() as client:
            generation_before = RedisStore(client, prefix).generation().id
        before_kill = wait_progress(server, prefix, topic, at_snapshot + 6000, workers)
        server.kill()
        server.restore_aof(snapshot)  # what a crash under everysec does, only further back
        server.start()
        rolled_back = progress(server, prefix, topic)
        # (the worker may have restored and applied one batch of <= 2000 records before this read)
        assert 0 < rolled_back < before_kill, "Redis was not rolled back: the test proves nothing"
    finally:
        feeder.join(timeout=120)
    store = wait_exact(server, prefix, topic, records, kafka_bootstrap, workers)

    generation = store.generation()
    assert generation.id == generation_before  # a rollback keeps the lineage; the watermarks betrayed it
    lines = loss_lines(workers.log_of(worker))
    assert len(lines) == 1 and generation.restores == 1, workers.tails()
    assert re.search(rf"{re.escape(topic)}:\d \d+ -> \d+", lines[0]), lines[0]
    assert worker.poll() is None
    assert exported_state(store) == {"fleetmon_state_restores_total": 1.0,
                                     "fleetmon_state_generation": float(generation_before)}


def test_flushed_redis_is_restored_by_an_idle_worker_and_by_a_worker_started_after_it(
        kafka_bootstrap, unique_topic, own_redis, workers_on):
    topic, dlq, prefix, group = names(unique_topic)
    server = own_redis(appendonly=False)
    workers = workers_on(server)
    records = make_records(12_000, seed=23, now=time.time(), pair_share=0.2)
    send_all(kafka_bootstrap, topic, records)
    bad = [b"not json %d" % i for i in range(40)]
    send_raw(kafka_bootstrap, topic, bad)
    first = workers.start(topic, dlq, prefix, group)
    wait_exact(server, prefix, topic, records, kafka_bootstrap, workers, dlq=len(bad))

    # no traffic: only the idle check can notice
    with server.client() as client:
        client.flushall()
    store = wait_exact(server, prefix, topic, records, kafka_bootstrap, workers, dlq=len(bad))
    assert len(loss_lines(workers.log_of(first))) == 1 and store.generation().restores == 1
    assert count_messages(kafka_bootstrap, dlq) == len(bad)  # re-read, counted again, dead-lettered once

    # the worker stops, Redis loses everything, a new worker starts: the group's committed offsets
    # are past everything, yet the state must come back from the earliest retained offsets
    workers.stop(first)
    with server.client() as client:
        client.flushall()
    second = workers.start(topic, dlq, prefix, group)
    store = wait_exact(server, prefix, topic, records, kafka_bootstrap, workers, dlq=len(bad))
    log = workers.log_of(second)
    assert restore_events(log) == 1 and LOST_AT_ASSIGNMENT in log, workers.tails()
    assert store.generation().restores == 1  # counted in the new generation


def test_the_apply_script_refuses_a_store_that_lost_what_the_writer_applied(redis_client):
    """The contract of ``apply_verified`` on Redis itself (the memory store's twin: tests/unit/streams)."""
    from monitor.delta import BatchDelta
    from monitor.store.base import AlreadyApplied, Applied, Expected, LostState

    store = RedisStore(redis_client, f"fm-{uuid.uuid4().hex[:10]}")
    delta = BatchDelta()
    delta.count("traces", 3)
    assert store.generation().id is None
    first = store.apply_verified(delta, [("t:0", 0, 9), ("t:1", 0, 4)], None, Expected(), "1796000000001")
    assert first == Applied("1796000000001") and store.generation().id == "1796000000001"
    # the worker's view matches: applied; a stale range: already applied; the generation is kept
    mine = Expected("1796000000001", {"t:0": 9, "t:1": 4})
    assert store.apply_verified(delta, [("t:0", 10, 19)], None, mine, "x") == Applied("1796000000001")
    mine = Expected("1796000000001", {"t:0": 19, "t:1": 4})
    assert store.apply_verified(delta, [("t:0", 15, 25)], None, mine, "x") == AlreadyApplied("t:0", 19)
    assert store.counters()["traces"] == 6

    # rolled back: a watermark below the worker's; nothing written
    redis_client.hset(f"{store.prefix}:offsets", "t:1", 2)
    lost = store.apply_verified(delta, [("t:0", 20, 29)], None, mine, "x")
    assert lost == LostState(mine, "1796000000001", {"t:1": 2}) and store.counters()["traces"] == 6
    # emptied: no generation, no watermarks; the next unchecked apply starts a new generation
    redis_client.flushdb()
    lost = store.apply_verified(delta, [("t:0", 20, 29)], None, mine, "x")
    assert lost == LostState(mine, None, {"t:0": None, "t:1": None}) and store.counters() == {}
    store.count_restore()
    assert store.apply_verified(delta, [("t:0", 0, 29)], None, Expected(), "1796000000777") == \
        Applied("1796000000777")
    assert (store.generation().id, store.generation().restores) == ("1796000000777", 1)


def test_a_rebuild_swap_keeps_the_live_generation_or_gives_an_emptied_redis_the_rebuilds(redis_client):
    from streams.rebuild import adopt_generation

    live, fresh = f"fm-{uuid.uuid4().hex[:10]}", f"fm-{uuid.uuid4().hex[:10]}.rebuild.1"
    redis_client.hset(f"{fresh}:generation", "id", "200")
    adopt_generation(redis_client, live, fresh)  # the live Redis was emptied: it takes the rebuild's
    assert RedisStore(redis_client, live).generation().id == "200"
    assert not redis_client.exists(f"{fresh}:generation")
    redis_client.hset(f"{fresh}:generation", "id", "300")
    adopt_generation(redis_client, live, fresh)  # running workers know "200": a swap is no loss
    assert RedisStore(redis_client, live).generation().id == "200"


def test_appendonly_redis_sigkilled_repeatedly_mid_stream_keeps_counts_exact(kafka_bootstrap, unique_topic,
                                                                             own_redis, workers_on):
    """Redis with ``appendonly everysec`` SIGKILLed and restarted while applies are in flight: whatever
    it reloads is consistent (``counters.traces`` = the offsets its watermarks cover) and the retried
    applies count once (a retry decodes its batch afresh; streams/apply.py)."""
    topic, dlq, prefix, group = names(unique_topic)
    server = own_redis(appendonly=True)
    workers = workers_on(server)
    records = make_records(30_000, seed=24, now=time.time(), pair_share=0.2)
    worker = workers.start(topic, dlq, prefix, group, "--batch-max-records", "500")
    workers.wait_assigned(worker)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, records, 3000))
    feeder.start()
    reloaded = []
    try:
        wait_progress(server, prefix, topic, 2000, workers)
        for _ in range(3):
            time.sleep(2.0)
            server.kill()
            server.start()
            with server.client() as client:
                pipe = client.pipeline(transaction=True)
                pipe.hgetall(f"{prefix}:offsets")
                pipe.hget(f"{prefix}:counters", "traces")
                marks, traces = pipe.execute()
            reloaded.append((sum(int(m) + 1 for m in marks.values()), int(traces or 0)))
    finally:
        feeder.join(timeout=120)
    assert all(covered == traces for covered, traces in reloaded), reloaded
    wait_exact(server, prefix, topic, records, kafka_bootstrap, workers)
    assert worker.poll() is None
