"""The streaming pipeline end to end on the real Kafka and Redis.

Each test runs ``fleetmon worker`` as subprocesses (SIGKILLed where the test
says so; every one is killed in teardown), produces to a fresh topic and
compares what Redis holds with counts computed from the input. No fakes.
"""

from __future__ import annotations

import json
import math
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from monitor.aggregate import Aggregate
from monitor.groupings import grouping_name, grouping_set
from monitor.schema import validate
from monitor.slices import DEFAULT_DIMENSIONS, parse_slice_id
from monitor.store.redis.packed import window_fields
from monitor.store.redis.store import RedisStore
from streams.dlq import original_payload, parse_dlq_record
from tests.support.pipeline import (
    Workers,
    applied,
    encode,
    end_offsets,
    expected_by_slice,
    expected_pairs,
    make_records,
    observed_by_slice,
    observed_pairs,
    producer,
)

REPO = Path(__file__).resolve().parents[2]
FLEETMON = [sys.executable, "-m", "monitor.cli.main"]
WAIT_SECONDS = 120


# -- input and expectations -------------------------------------------------------------
def assert_exact(store: RedisStore, records: list[dict], dlq: int = 0) -> None:
    expected = expected_by_slice(records)
    assert observed_by_slice(store) == expected
    pairs = expected_pairs(records)
    assert observed_pairs(store) == {k: +v for k, v in pairs.items()}
    assert store.counters().get("pairs", 0) == sum(c["n_pairs"] for c in pairs.values())
    counters = store.counters()
    assert counters.get("traces", 0) == len(records)
    assert counters.get("dlq", 0) == dlq
    # every trace is in exactly one window of each resolution, in each slice grouping
    ids = list(store.active_slices())
    now = time.time()
    for res in ("1m", "1h"):
        windows = store.window_aggregates(res, now - 2 * 3600, now + 600, ids)
        per_grouping: Counter[str] = Counter()
        for sid, agg in windows.items():
            per_grouping[grouping_name(parse_slice_id(sid))] += agg.traces
        assert per_grouping == dict.fromkeys(grouping_set(DEFAULT_DIMENSIONS).names(), len(records)), res


# -- Kafka helpers --------------------------------------------------------------------------
def send_all(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None]],
             per_second: float | None = None) -> None:
    p = producer(bootstrap)
    try:
        started = time.monotonic()
        for i, (key, value) in enumerate(items):
            p.send(topic, key=key, value=value)
            if per_second and i % 500 == 0:
                delay = started + i / per_second - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        p.flush(timeout=60)
    finally:
        p.close()


# -- worker processes -----------------------------------------------------------------------
@pytest.fixture
def workers(tmp_path, kafka_bootstrap, redis_db_url):
    w = Workers(tmp_path, kafka_bootstrap, redis_db_url)
    yield w
    w.close()


def wait_applied(client, prefix, topic, ends, workers: Workers, timeout: float = WAIT_SECONDS) -> None:
    """Until the watermark of every non-empty partition is its last offset."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        marks = applied(client, prefix, topic)
        if all(marks.get(p, -1) >= end - 1 for p, end in ends.items() if end > 0):
            return
        time.sleep(0.1)
    pytest.fail(f"watermarks {applied(client, prefix, topic)} did not reach {ends} in {timeout} s\n"
                f"{workers.tails()}")


def wait_progress(client, prefix, topic, at_least: int, workers: Workers, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = sum(m + 1 for m in applied(client, prefix, topic).values())
        if done >= at_least:
            return done
        time.sleep(0.01)
    pytest.fail(f"no progress to {at_least} records in {timeout} s\n{workers.tails()}")


def names(unique_topic):
    topic = unique_topic(partitions=4, prefix="pipeline")
    dlq = unique_topic(partitions=1, prefix="pipeline-dlq")
    tag = uuid.uuid4().hex[:10]
    return topic, dlq, f"fm-{tag}", f"fm-{tag}"


# -- (a) ------------------------------------------------------------------------------------
def test_100k_traces_end_to_end_counts_are_exact(kafka_bootstrap, redis_client, redis_db_url, unique_topic,
                                                 workers, tmp_path):
    topic, dlq, prefix, group = names(unique_topic)
    records = make_records(100_000, seed=1, now=time.time())
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # the operator's path in: fleetmon replay
    replay = subprocess.run([*FLEETMON, "replay", str(path), "--topic", topic, "--bootstrap", kafka_bootstrap,
                             "--quiet", "--json"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout.strip().splitlines()[-1])["sent"] == 100_000

    workers.start(topic, dlq, prefix, group)
    wait_applied(redis_client, prefix, topic, end_offsets(kafka_bootstrap, topic), workers)
    store = RedisStore(redis_client, prefix)
    assert_exact(store, records)

    stats = subprocess.run([*FLEETMON, "stats", "--json", "--redis", redis_db_url, "--prefix", prefix],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert stats.returncode == 0, stats.stderr
    doc = json.loads(stats.stdout)
    assert doc["totals"]["traces"] == 100_000
    assert doc["totals"]["successes"] == sum(validate(r).success for r in records)
    assert doc["totals"]["tokens_in"] == sum(r["tokens_in"] for r in records)
    assert doc["totals"]["tokens_out"] == sum(r["tokens_out"] for r in records)
    assert (doc["dlq"], doc["late"]) == (0, 0)
    recent = json.loads(subprocess.run([*FLEETMON, "stats", "--json", "--since", "2h", "--redis", redis_db_url,
                                        "--prefix", prefix], cwd=REPO, capture_output=True, text=True,
                                       timeout=120).stdout)
    fees = recent["totals"].pop("fees_usd"), doc["totals"].pop("fees_usd")
    assert recent["totals"] == doc["totals"]
    assert fees[0] == pytest.approx(fees[1], rel=1e-9)


# -- (b) ------------------------------------------------------------------------------------
def test_sigkill_mid_stream_and_restart_loses_and_doubles_nothing(kafka_bootstrap, redis_client, unique_topic,
                                                                  workers):
    topic, dlq, prefix, group = names(unique_topic)
    records = make_records(40_000, seed=2, now=time.time(), pair_share=0.2)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, [encode(r) for r in records], 8000))
    small_batches = ("--batch-max-records", "2000")
    first = workers.start(topic, dlq, prefix, group, *small_batches)
    workers.wait_assigned(first)
    feeder.start()
    try:
        wait_progress(redis_client, prefix, topic, 12_000, workers)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        killed_at = sum(m + 1 for m in applied(redis_client, prefix, topic).values())
        assert killed_at < len(records), "the worker finished before it was killed; the test proves nothing"
        second = workers.start(topic, dlq, prefix, group, *small_batches)
    finally:
        feeder.join(timeout=120)
    wait_applied(redis_client, prefix, topic, end_offsets(kafka_bootstrap, topic), workers)
    store = RedisStore(redis_client, prefix)
    assert_exact(store, records)

    # Kafka may deliver again (at least once): rewind the group's committed
    # offsets to 0 and restart; the Redis watermarks must keep counts exact.
    workers.stop(second)
    rewind = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in range(4)]
        rewind.assign(parts)
        rewind.commit({tp: OffsetAndMetadata(0, "", -1) for tp in parts})
    finally:
        rewind.close()
    third = workers.start(topic, dlq, prefix, group)
    workers.wait_assigned(third)
    time.sleep(3)
    assert_exact(store, records)


# -- (c) ------------------------------------------------------------------------------------
def test_two_workers_one_killed_mid_stream_counts_stay_exact(kafka_bootstrap, redis_client, unique_topic, workers):
    topic, dlq, prefix, group = names(unique_topic)
    records = make_records(40_000, seed=3, now=time.time(), pair_share=0.2)
    small_batches = ("--batch-max-records", "2000")
    a = workers.start(topic, dlq, prefix, group, *small_batches)
    workers.wait_assigned(a)
    b = workers.start(topic, dlq, prefix, group, *small_batches)
    workers.wait_assigned(b)
    time.sleep(2)  # let the rebalance that b's joining caused settle on both
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, [encode(r) for r in records], 6000))
    feeder.start()
    try:
        wait_progress(redis_client, prefix, topic, 12_000, workers)
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        assert sum(m + 1 for m in applied(redis_client, prefix, topic).values()) < len(records)
    finally:
        feeder.join(timeout=120)
    wait_applied(redis_client, prefix, topic, end_offsets(kafka_bootstrap, topic), workers)
    assert b.poll() is None
    log_b = workers.log_of(b)
    assert log_b.count("partitions assigned: ['") >= 2, "b never took over a's partitions"
    assert_exact(RedisStore(redis_client, prefix), records)


# -- (d) ------------------------------------------------------------------------------------
def malformed(count: int, now: float) -> list[tuple[bytes | None, bytes | None, str]]:
    """``count`` bad records of assorted kinds: (key, value, expected reason fragment)."""
    base = {"trace_id": "bad", "ts": now - 10, "model_id": "m", "ok": True}
    kinds = [
        (b"not json at all", "not valid JSON"),
        (b'{"trace_id": "x", "ts": ', "not valid JSON"),
        (b'{"trace_id": "\xff\xfe", "ts": 1}', "not valid UTF-8"),
        (b"\x80\x81\x82", "not valid UTF-8"),
        (json.dumps({**base, "tokens_in": "many"}).encode(), "tokens_in must be an integer >= 0"),
        (json.dumps({**base, "ok": "yes please"}).encode(), "ok must be true or false"),
        (json.dumps({**base, "trace_id": 12.5}).encode(), "trace_id must be a string"),
        (json.dumps({k: v for k, v in base.items() if k != "model_id"}).encode(), "model_id is required"),
        (json.dumps({k: v for k, v in base.items() if k != "ts"}).encode(), "ts is required"),
        (json.dumps({**base, "tokens_in": -3}).encode(), "tokens_in must be an integer >= 0, got -3"),
        (json.dumps({**base, "ts": now + 86_400}).encode(), "ts must be at most"),
        (json.dumps([1, 2, 3]).encode(), "must be a JSON object"),
        (None, "tombstone"),
    ]
    out: list[tuple[bytes | None, bytes | None, str]] = [(f"bad-{i}".encode(), *kinds[i % len(kinds)])
                                                         for i in range(count - 1)]
    huge = json.dumps({**base, "tags": {"blob": "x" * (5 * 1024 * 1024)}}).encode()
    out.insert(count // 2, (b"bad-huge", huge, "over the 1048576-byte limit"))
    return out


def test_malformed_records_reach_the_dlq_with_reasons_while_valid_traffic_flows(
        kafka_bootstrap, redis_client, unique_topic, workers):
    dlq = unique_topic(partitions=1, prefix="pipeline-dlq")
    prefix = group = f"fm-{uuid.uuid4().hex[:10]}"
    now = time.time()
    good = make_records(6000, seed=4, now=now)
    bad = malformed(1000, now)
    rng = random.Random(4)
    stream: list[tuple[bytes | None, bytes | None, str | None]] = [(*encode(r), None) for r in good] + bad
    rng.shuffle(stream)
    # one partition: the DLQ source offsets are then the positions in `stream`
    single = unique_topic(partitions=1, prefix="pipeline")
    worker = workers.start(single, dlq, prefix, group)
    workers.wait_assigned(worker)
    send_all(kafka_bootstrap, single, [(k, v) for k, v, _ in stream])
    wait_applied(redis_client, prefix, single, end_offsets(kafka_bootstrap, single), workers)
    assert worker.poll() is None, "a bad record stopped the worker"
    assert_exact(RedisStore(redis_client, prefix), good, dlq=1000)

    consumer = KafkaConsumer(dlq, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=f"check-{uuid.uuid4().hex}",
                             fetch_max_bytes=32 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024,
                             consumer_timeout_ms=3000)
    try:
        dead = {}
        deadline = time.monotonic() + 60
        while len(dead) < 1000 and time.monotonic() < deadline:
            for message in consumer:
                dead[message.key] = parse_dlq_record(message.value)  # keyed by source: dedupe
    finally:
        consumer.close()
    assert len(dead) == 1000
    for offset, (key, value, reason) in enumerate(stream):
        if reason is None:
            continue
        record = dead.pop(f"{single}:0:{offset}".encode())
        assert record["source"]["offset"] == offset and record["source"]["topic"] == single
        assert record["source"]["key"] == key.decode()
        assert any(reason in r for r in record["reasons"]), (reason, record["reasons"])
        assert record["payload_truncated"] is False
        assert original_payload(record) == value
    assert dead == {}


# -- (e) ------------------------------------------------------------------------------------
def snapshot(store: RedisStore, topic: str) -> dict:
    ids = sorted(store.active_slices())
    now = time.time()
    return {
        "slices": store.active_slices(),
        "totals": store.totals(ids),
        "1m": store.window_aggregates("1m", now - 2 * 3600, now + 600, ids),
        "1h": store.window_aggregates("1h", now - 3 * 3600, now + 3600, ids),
        "counters": store.counters(),
        "offsets": store.applied_offsets(),
        "pairs": store.paired_evidence(),
        "pending": {p: store.pending(f"{topic}:{p}") for p in range(4)},
    }


def _number_or_bytes(value: bytes) -> float | bytes:
    try:
        return float(value)
    except ValueError:
        return value  # e.g. a waiting pair half (JSON)


def raw_dump(client: redis.Redis, prefix: str) -> dict:
    """Every key under the prefix with its content (numbers as floats)."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    kinds = pipe.execute()
    readers = {b"hash": pipe.hgetall, b"zset": lambda k: pipe.zrange(k, 0, -1, withscores=True),
               b"set": pipe.smembers}
    for key, kind in zip(keys, kinds):
        readers.get(kind, pipe.get)(key)
    out = {}
    for key, kind, value in zip(keys, kinds, pipe.execute()):
        if kind == b"hash":
            if b":w:" in key:  # a window is one packed field: compare its aggregate's fields
                value = {f.encode(): v.encode() for f, v in window_fields(value).items()}
            value = {f: _number_or_bytes(v) for f, v in value.items()}
        elif kind == b"zset":
            value = dict(value)
        out[key] = value
    return out


def assert_same_dump(before: dict, after: dict) -> None:
    assert set(after) == set(before)
    for key, value in before.items():
        if isinstance(value, dict):
            assert set(after[key]) == set(value), key
            for field, number in value.items():
                other = after[key][field]
                if isinstance(number, float):
                    # float sums (fees, latency, cost deltas) depend on batch boundaries
                    assert math.isclose(other, number, rel_tol=1e-9, abs_tol=1e-9), (key, field, number, other)
                else:
                    assert other == number, (key, field)
        else:
            assert after[key] == value, key


def test_rebuild_after_redis_is_flushed_restores_identical_aggregates(kafka_bootstrap, redis_client, redis_db_url,
                                                                      unique_topic, workers):
    topic, dlq, prefix, group = names(unique_topic)
    now = time.time()
    records = make_records(20_000, seed=5, now=now, pair_share=0.2)
    items = [encode(r) for r in records] + [(k, v) for k, v, _ in malformed(50, now)[:49]]
    send_all(kafka_bootstrap, topic, items)
    worker = workers.start(topic, dlq, prefix, group)
    wait_applied(redis_client, prefix, topic, end_offsets(kafka_bootstrap, topic), workers)
    workers.stop(worker)
    store = RedisStore(redis_client, prefix)
    before = snapshot(store, topic)
    assert before["counters"]["traces"] == 20_000 and before["counters"]["dlq"] == 49
    assert before["counters"]["pairs"] > 1000
    assert all(isinstance(a, Aggregate) and a.traces for a in before["totals"].values())
    # window keys carry the TTL of their retention
    some_window = next(iter(redis_client.scan_iter(match=f"{prefix}:w:1m:*")))
    ttl_before = redis_client.ttl(some_window)
    dump_before = raw_dump(redis_client, prefix)

    redis_client.flushdb()
    assert store.totals() == {}
    rebuild = subprocess.run([*FLEETMON, "rebuild", "--topic", topic, "--group-id", group, "--prefix", prefix,
                              "--bootstrap", kafka_bootstrap, "--redis", redis_db_url, "--json", "--quiet"],
                             cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rebuild.returncode == 0, rebuild.stderr
    summary = json.loads(rebuild.stdout.strip().splitlines()[-1])
    assert summary["traces"] == 20_000 and summary["dlq"] == 49

    after = snapshot(store, topic)
    pairs_before, pairs_after = before.pop("pairs"), after.pop("pairs")
    assert after == before
    assert_same_dump(pairs_before, pairs_after)  # paired counts exact; their float sums up to rounding
    dump_after = raw_dump(redis_client, prefix)
    for dump in (dump_before, dump_after):  # a new generation after the flush, by design (streams/restore.py)
        dump.pop(f"{prefix}:generation".encode(), None)
    assert_same_dump(dump_before, dump_after)  # every key, not only what readers ask
    assert 0 < redis_client.ttl(some_window) <= ttl_before
    leftovers = [k for k in redis_client.scan_iter(match="*") if b".rebuild." in k]
    assert leftovers == []


# -- the refused-apply path (a zombie applied part of our batch first) ---------------------
def test_refused_apply_refolds_only_the_records_after_the_watermark(redis_client):
    from aiokafka import TopicPartition as AioTopicPartition

    from monitor.slices import Slicer as PlainSlicer
    from monitor.worker_settings import WorkerSettings
    from streams.batch import fold_batch
    from streams.loop import ConsumeLoop
    from tests.support.batches import Rec, decode_records

    now = time.time()
    prefix = f"fm-{uuid.uuid4().hex[:10]}"
    records = make_records(3000, seed=6, now=now)
    raw = [Rec(offset, json.dumps(r).encode()) for offset, r in enumerate(records)]
    store = RedisStore(redis_client, prefix)
    # the other consumer applied offsets 0..1199 of the same partition
    other = decode_records("t", 0, raw[:1200], now)
    assert store.apply(fold_batch(other, PlainSlicer(), now), "t:0", 0, 1199)

    loop = ConsumeLoop(WorkerSettings(prefix=prefix), store, dlq=None, consumer=object())
    assert loop.native is not None  # the refold decodes the rest natively again
    try:
        tp = AioTopicPartition("t", 0)
        mine = decode_records("t", 0, raw, now, native=loop.native)
        marks = loop._apply_blocking({"t:0": tp}, mine, now)
    finally:
        loop._executor.shutdown()
    assert marks == {tp: 2999} and loop.counters.applies_refused == 1
    assert loop.counters.records_already_applied == 1200
    assert_exact(store, records)


# -- Redis replies lost mid-stream ----------------------------------------------------------
class ReplyDroppingProxy:
    """A TCP proxy in front of Redis that, while armed, lets a batch apply
    (EVALSHA on ``<prefix>:offsets``) run in Redis and then drops the reply
    and the connection: the worker cannot know whether its batch landed."""

    def __init__(self, upstream: tuple[str, int], drops: int) -> None:
        self.upstream = upstream
        self.drops_left = drops
        self.dropped = 0
        self.applies = 0
        self.armed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self.sockets += [client, upstream]
            poisoned = threading.Event()
            threading.Thread(target=self._pump_requests, args=(client, upstream, poisoned), daemon=True).start()
            threading.Thread(target=self._pump_replies, args=(upstream, client, poisoned), daemon=True).start()

    def _pump_requests(self, client, upstream, poisoned) -> None:
        try:
            while data := client.recv(65536):
                if self.armed.is_set() and b"EVALSHA" in data and b":offsets" in data:
                    self.applies += 1
                    if self.drops_left > 0 and self.applies % 3 == 1:  # the retry after a drop gets through
                        self.drops_left -= 1
                        poisoned.set()
                upstream.sendall(data)
        except OSError:
            pass

    def _pump_replies(self, upstream, client, poisoned) -> None:
        try:
            while data := upstream.recv(65536):
                if poisoned.is_set():  # the script ran; its reply is lost with the connection
                    self.dropped += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        for sock in (client, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


def test_lost_redis_replies_mid_stream_leave_counts_exact(kafka_bootstrap, redis_client, redis_db_url,
                                                          unique_topic, workers):
    topic, dlq, prefix, group = names(unique_topic)
    records = make_records(30_000, seed=7, now=time.time(), pair_share=0.2)
    parts = urlsplit(redis_db_url)
    proxy = ReplyDroppingProxy((parts.hostname, parts.port or 6379), drops=5)
    try:
        workers.env["FLEETMON_REDIS_URL"] = f"redis://127.0.0.1:{proxy.port}{parts.path}"
        worker = workers.start(topic, dlq, prefix, group, "--batch-max-records", "1000")
        workers.wait_assigned(worker)
        feeder = threading.Thread(target=send_all,
                                  args=(kafka_bootstrap, topic, [encode(r) for r in records], 6000))
        feeder.start()
        try:
            wait_progress(redis_client, prefix, topic, 3000, workers)
            proxy.armed.set()
        finally:
            feeder.join(timeout=120)
        wait_applied(redis_client, prefix, topic, end_offsets(kafka_bootstrap, topic), workers)
        assert worker.poll() is None
        assert proxy.dropped == 5, "the proxy dropped fewer replies than planned; the test proves less"
        assert_exact(RedisStore(redis_client, prefix), records)
        workers.stop(worker)
        assert workers.log_of(worker).count(" at watermark ") == 5
    finally:
        proxy.close()


def test_rebuild_while_a_worker_keeps_running_swaps_in_without_loss_or_double_count(
        kafka_bootstrap, redis_client, redis_db_url, unique_topic, workers):
    topic, dlq, prefix, group = names(unique_topic)
    records = make_records(30_000, seed=8, now=time.time(), pair_share=0.2)
    worker = workers.start(topic, dlq, prefix, group, "--batch-max-records", "2000")
    workers.wait_assigned(worker)
    feeder = threading.Thread(target=send_all, args=(kafka_bootstrap, topic, [encode(r) for r in records], 5000))
    feeder.start()
    try:
        wait_progress(redis_client, prefix, topic, 5000, workers)
        rebuild = subprocess.run([*FLEETMON, "rebuild", "--topic", topic, "--group-id", group, "--prefix", prefix,
                                  "--bootstrap", kafka_bootstrap, "--redis", redis_db_url, "--json", "--quiet"],
                                 cwd=REPO, capture_output=True, text=True, timeout=300)
        assert rebuild.returncode == 0, rebuild.stderr
        assert json.loads(rebuild.stdout.strip().splitlines()[-1])["keys_moved"] > 0
    finally:
        feeder.join(timeout=120)
    wait_applied(redis_client, prefix, topic, end_offsets(kafka_bootstrap, topic), workers)
    assert worker.poll() is None
    assert_exact(RedisStore(redis_client, prefix), records)
