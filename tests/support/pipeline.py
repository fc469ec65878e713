"""Driving ``fleetmon worker`` processes on the real Kafka and checking Redis against the input.

The same habits as tests/integration/test_pipeline.py (which keeps its own copies): workers are
subprocesses killed at teardown, input is produced to a fresh topic, and what Redis holds is
compared with counts computed from the records themselves.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import redis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from monitor.groupings import grouping_set, rows_of
from monitor.schema import validate
from monitor.slices import Slicer, parse_slice_id, slice_id
from monitor.store.redis.store import RedisStore
from monitor.store.redis.wire import text
from tests.support.paths import ROOT

FLEETMON = [sys.executable, "-m", "monitor.cli.main"]


def make_records(n: int, seed: int, now: float, pair_share: float = 0.0) -> list[dict]:
    """Valid traces with event times in the last hour over ~300 slices; ``pair_share`` of them are a
    baseline trace followed by its shadow twin (same ``pair_id``, release ``<release>-next``)."""
    rng = random.Random(seed)
    out: list[dict] = []
    i = 0
    while len(out) < n:
        tokens_in = rng.randrange(100, 4000)
        record: dict[str, Any] = {
            "trace_id": f"s{seed}-{i}", "ts": now - rng.random() * 3000, "model_id": rng.choice(["m-a", "m-b"]),
            "release": rng.choice(["r1", "r2", "r3"]), "arm": rng.choice(["baseline", "canary"]),
            "task_type": rng.choice(["code", "chat", "search", "refund"]), "tenant": f"tenant-{rng.randrange(4)}",
            "locale": rng.choice(["en", "fr", "de"]),
            "outcome": rng.choice(["success", "success", "failure", "escalated"]),
            "tokens_in": tokens_in, "tokens_cached_in": rng.randrange(0, tokens_in // 2),
            "tokens_out": rng.randrange(10, 900), "latency_ms": round(rng.lognormvariate(7, 0.6), 2),
            "steps": rng.randrange(1, 9), "fees_usd": 0.001,
        }
        i += 1
        if len(out) + 1 < n and rng.random() < pair_share:
            record.update(arm="baseline", pair_id=f"p{seed}-{i}")
            twin = dict(record, trace_id=f"{record['trace_id']}-shadow", arm="shadow",
                        release=record["release"] + "-next", ts=record["ts"] + rng.random() * 5,
                        outcome=rng.choice(["success", "failure"]))
            out += [record, twin]
        else:
            out.append(record)
    return out


def expected_by_slice(records: list[dict]) -> dict[str, Counter]:
    """Per stored row (one per trace in every default slice grouping; no grouping past its budget here)."""
    slicer = Slicer()
    groupings = grouping_set(slicer.dimensions)
    out: dict[str, Counter] = defaultdict(Counter)
    for record in records:
        trace = validate(record)
        for _grouping, row, _folded in groupings.rows(slicer.key(trace), lambda _g, _combination: True):
            c = out[slice_id(row)]
            c["traces"] += 1
            c["successes"] += trace.success
            c["tokens_in"] += trace.tokens_in
            c["tokens_out"] += trace.tokens_out
            c["tokens_cached_in"] += trace.tokens_cached_in
    return out


def observed_by_slice(store: RedisStore) -> dict[str, dict[str, float]]:
    return {sid: dict(traces=agg.traces, successes=agg.successes, tokens_in=agg.tokens("tokens_in"),
                      tokens_out=agg.tokens("tokens_out"), tokens_cached_in=agg.tokens("tokens_cached_in"))
            for sid, agg in store.totals().items()}


def expected_pairs(records: list[dict]) -> dict[str, Counter]:
    """``pair:<baseline>:<candidate>:`` (the all-slices comparison) → n_pairs, b, c."""
    halves: dict[str, dict] = {}
    out: dict[str, Counter] = defaultdict(Counter)
    for record in records:
        if "pair_id" in record:
            halves.setdefault(record["pair_id"], {})[record["arm"]] = validate(record)
    for pair in halves.values():
        base, cand = pair["baseline"], pair["shadow"]
        c = out[f"pair:{base.release}:{cand.release}:"]
        c["n_pairs"] += 1
        c["b"] += base.success and not cand.success
        c["c"] += cand.success and not base.success
    return out


def observed_pairs(store: RedisStore) -> dict[str, Counter]:
    return {key: Counter({name: int(fields.get(name, 0)) for name in ("n_pairs", "b", "c")})
            for key, fields in store.paired_evidence().items() if key.endswith(":")}


def exactness(store: RedisStore, records: list[dict], dlq: int = 0) -> dict[str, Any]:
    """What differs between the store and ``records`` (an empty dict when every figure is exact):
    per-slice totals, paired counts of the all-slices comparisons, the pipeline counters, the
    waiting halves left (every pair is complete) and each resolution's window sum over the
    release x arm grouping's rows (each trace counts once per grouping)."""
    problems: dict[str, Any] = {}
    expected, observed = expected_by_slice(records), observed_by_slice(store)
    wrong = {sid: (observed.get(sid), dict(expected.get(sid, {})))
             for sid in set(expected) | set(observed) if observed.get(sid) != expected.get(sid)}
    if wrong:
        problems["slices"] = dict(sorted(wrong.items())[:5]) | {"count": len(wrong)}
    pairs = {k: +v for k, v in expected_pairs(records).items()}
    if observed_pairs(store) != pairs:
        problems["pairs"] = (observed_pairs(store), pairs)
    counters = store.counters()
    wanted = {"traces": len(records), "pairs": sum(c["n_pairs"] for c in pairs.values()), "dlq": dlq}
    got = {name: int(counters.get(name, 0)) for name in wanted}
    if got != wanted:
        problems["counters"] = (got, wanted)
    ids = list(rows_of(store.active_slices(), "", parse_slice_id))  # one grouping: release x arm
    now = time.time()
    for res in ("1m", "1h"):
        total = sum(a.traces for a in store.window_aggregates(res, now - 2 * 3600, now + 600, ids).values())
        if total != len(records):
            problems[f"windows_{res}"] = (total, len(records))
    return problems


def producer(bootstrap: str) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10, batch_size=512 * 1024,
                         max_request_size=10 * 1024 * 1024)


def encode(record: dict) -> tuple[bytes, bytes]:
    """Keyed like the emitter: pair_id, else trace_id."""
    return record.get("pair_id", record["trace_id"]).encode(), json.dumps(record).encode()


def send_all(bootstrap: str, topic: str, records: list[dict], per_second: float | None = None) -> None:
    p = producer(bootstrap)
    try:
        started = time.monotonic()
        for i, record in enumerate(records):
            key, value = encode(record)
            p.send(topic, key=key, value=value)
            if per_second and i % 500 == 0:
                delay = started + i / per_second - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        p.flush(timeout=60)
    finally:
        p.close()


def send_raw(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = producer(bootstrap)
    try:
        for i, value in enumerate(values):
            p.send(topic, key=f"raw-{i}".encode(), value=value)
        p.flush(timeout=60)
    finally:
        p.close()


def count_messages(bootstrap: str, topic: str, idle_seconds: float = 5.0) -> int:
    """Records in ``topic`` from the earliest offset (read until nothing arrives for ``idle_seconds``)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=int(idle_seconds * 1000))
    try:
        return sum(1 for _ in consumer)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def applied(client: redis.Redis, prefix: str, topic: str) -> dict[int, int]:
    """The store's watermark per partition of ``topic``."""
    out = {}
    for source, mark in client.hgetall(f"{prefix}:offsets").items():
        name, _, partition = text(source).rpartition(":")
        if name == topic:
            out[int(partition)] = int(mark)
    return out


class Workers:
    """Starts ``fleetmon worker`` subprocesses logging to files under ``directory``; ``close`` kills them."""

    def __init__(self, directory: Path, bootstrap: str, redis_url: str) -> None:
        self.directory = directory
        self.env = dict(os.environ, FLEETMON_KAFKA_BOOTSTRAP=bootstrap, FLEETMON_REDIS_URL=redis_url,
                        PYTHONUNBUFFERED="1")
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, topic: str, dlq_topic: str, prefix: str, group: str, *extra: str) -> subprocess.Popen:
        log = self.directory / f"worker-{len(self.procs)}.log"
        args = [*FLEETMON, "worker", "--topic", topic, "--dlq-topic", dlq_topic, "--prefix", prefix,
                "--group-id", group, "--session-timeout", "6", *extra]
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append((proc, log))
        return proc

    def log_of(self, proc: subprocess.Popen) -> str:
        return next((log.read_text(errors="replace") for p, log in self.procs if p is proc), "")

    def wait_assigned(self, proc: subprocess.Popen, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "partitions assigned: ['" in self.log_of(proc):
                return
            if proc.poll() is not None:
                raise AssertionError(f"worker exited with {proc.returncode}:\n{self.log_of(proc)[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"worker got no partitions within {timeout} s:\n{self.log_of(proc)[-3000:]}")

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        for proc, _ in self.procs:
            self.stop(proc)

    def tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2500:]}" for _, log in self.procs)
