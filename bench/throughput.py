"""Throughput of one fleetmon worker through real Kafka → Redis, against a bare consumer.

Run (services up: ``bash scripts/services.sh start``)::

    .venv/bin/python bench/throughput.py [--n 1000000] [--partitions 4]

What it does, in one run:

1. produces N traces once to a fresh topic (seeded; 360 slices, ~300 bytes
   each; event times ascending over the last ``--event-span`` seconds, 60 by
   default — live traffic, stamped about when it is produced — or 3600 to
   replay an hour of a slower fleet, which writes each slice's minute windows
   many more times; ``--pair-share`` of them as baseline + shadow pairs);
2. (i) a bare aiokafka consumer (fresh group, ``getmany`` with the worker's
   batch size, no decoding) drains the topic — this is ``bare_consumer_per_s``
   and the ``ratio``'s denominator; for context a second bare consumer drains
   it one message at a time (``async for``, ``bare_consumer_iter_per_s``);
3. (ii) one ``fleetmon worker`` subprocess (fresh group, fresh Redis prefix)
   processes it; the bench polls the worker's per-partition watermarks in
   Redis until they reach the end offsets, then stops the worker;
4. checks that Redis counts exactly N traces, deletes the topic and keys.

Rates are steady-state: records handled after the first observation divided
by the time since it (the bare consumer's first fetch; the worker's first
applied batch), so process start-up and group joins are excluded from both;
the worker's wall time from spawn is reported too. Prints a table and, as
the last line, one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

REPO = Path(__file__).resolve().parents[1]
FLEETMON = str(REPO / ".venv" / "bin" / "fleetmon") if (REPO / ".venv" / "bin" / "fleetmon").exists() else "fleetmon"


def traces(n: int, seed: int, now: float, pair_share: float = 0.0, span: float = 3600.0):
    """N ``(key, value)`` traces, event time ascending over the ``span`` seconds before ``now``.

    ``pair_share`` of them are baseline traces followed by a shadow twin
    (same ``pair_id``, the key), which the worker joins into paired counts.
    """
    rng = random.Random(seed)
    releases, arms = ("r41", "r42", "r43"), ("baseline", "canary")
    task_types, locales = ("code", "chat", "search", "refund"), ("en", "fr", "de")
    i = 0
    while i < n:
        ok = rng.random() < 0.7
        tokens_in = rng.randrange(200, 6000)
        record: dict[str, Any] = {
            "trace_id": f"bench-{seed}-{i}", "ts": now - span + span * i / n + rng.random(),
            "model_id": rng.choice(("model-a", "model-b")), "release": rng.choice(releases),
            "arm": rng.choice(arms), "task_type": rng.choice(task_types), "tenant": f"tenant-{rng.randrange(5)}",
            "locale": rng.choice(locales), "outcome": "success" if ok else rng.choice(("failure", "escalated")),
            "tokens_in": tokens_in, "tokens_cached_in": rng.randrange(0, tokens_in // 2),
            "tokens_out": rng.randrange(20, 1500), "latency_ms": round(rng.lognormvariate(7.5, 0.6), 1),
            "steps": rng.randrange(1, 12), "tool_calls": rng.randrange(0, 6), "fees_usd": 0.0005,
        }
        if i + 1 < n and rng.random() < pair_share:
            record.update(arm="baseline", pair_id=f"pair-{seed}-{i}")
            twin = dict(record, trace_id=record["trace_id"] + "-shadow", arm="shadow",
                        release=record["release"] + "-next", outcome=rng.choice(("success", "failure")))
            yield record["pair_id"].encode(), orjson.dumps(record)
            yield record["pair_id"].encode(), orjson.dumps(twin)
            i += 2
        else:
            yield record["trace_id"].encode(), orjson.dumps(record)
            i += 1


async def produce(bootstrap: str, topic: str, partitions: int, n: int, seed: int,
                  pair_share: float = 0.0, span: float = 60.0) -> tuple[float, dict[int, int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, max_batch_size=512 * 1024)
    await producer.start()
    started = time.perf_counter()
    try:
        pending = []
        for key, value in traces(n, seed, time.time(), pair_share, span):
            pending.append(await producer.send(topic, value, key=key))
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    seconds = time.perf_counter() - started
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: off for tp, off in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
    return seconds, ends


async def bare_consumer(bootstrap: str, topic: str, n: int, batch: int) -> dict[str, float]:
    """Drain the topic with a bare aiokafka consumer (the worker's fetch settings)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bench-bare-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)
    await consumer.start()
    try:
        seen = first_batch = 0
        first_at = None
        started = time.perf_counter()
        while seen < n:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=batch)
            got = sum(len(records) for records in fetched.values())
            if got and first_at is None:
                first_at, first_batch = time.perf_counter(), got
            seen += got
        done = time.perf_counter()
    finally:
        await consumer.stop()
    if first_at is None:
        raise RuntimeError(f"no record arrived from {topic}")
    return {"per_s": (seen - first_batch) / (done - first_at), "wall_seconds": done - started}


async def bare_iterator(bootstrap: str, topic: str, n: int) -> dict[str, float]:
    """Drain the topic one message at a time (``async for``): the simplest consumer program."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bench-iter-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        seen = 0
        started = time.perf_counter()
        first_at = None
        async for _ in consumer:
            if first_at is None:
                first_at = time.perf_counter()
            seen += 1
            if seen >= n:
                break
        done = time.perf_counter()
    finally:
        await consumer.stop()
    if first_at is None:
        raise RuntimeError(f"no record arrived from {topic}")
    return {"per_s": (seen - 1) / (done - first_at), "wall_seconds": done - started}


def worker_run(bootstrap: str, redis_url: str, topic: str, ends: dict[int, int], prefix: str,
               timeout_seconds: float) -> dict[str, float]:
    """Run one ``fleetmon worker`` until its watermarks reach ``ends``."""
    client = redis.Redis.from_url(redis_url)
    group = f"bench-worker-{uuid.uuid4().hex}"
    env = dict(os.environ, FLEETMON_KAFKA_BOOTSTRAP=bootstrap, FLEETMON_REDIS_URL=redis_url)
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"{group}.log"
    cpu_before = client.info("cpu")
    peak_rss_kb = 0
    with open(log_path, "wb") as log:
        spawned = time.perf_counter()
        proc = subprocess.Popen([FLEETMON, "worker", "--topic", topic, "--dlq-topic", f"{topic}.dlq",
                                 "--group-id", group, "--prefix", prefix, "--loglevel", "warn"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            first_at = None
            first_count = 0
            targets = {f"{topic}:{p}": end - 1 for p, end in ends.items() if end > 0}
            while True:
                marks = {_text(k): int(v) for k, v in client.hgetall(f"{prefix}:offsets").items()}
                now = time.perf_counter()
                applied = sum(marks.get(source, -1) + 1 for source in targets)
                if applied and first_at is None:
                    first_at, first_count = now, applied
                if all(marks.get(source, -1) >= end for source, end in targets.items()):
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited with {proc.returncode}; see {log_path}")
                peak_rss_kb = max(peak_rss_kb, _peak_rss_kb(proc.pid))
                if now - spawned > timeout_seconds:
                    raise RuntimeError(f"worker did not finish within {timeout_seconds} s; see {log_path}")
                time.sleep(0.02)
            done = time.perf_counter()
            peak_rss_kb = max(peak_rss_kb, _peak_rss_kb(proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    cpu_after = client.info("cpu")
    counted = int(float(client.hget(f"{prefix}:counters", "traces") or 0))
    keys = sum(1 for _ in client.scan_iter(match=f"{prefix}:w:*", count=5000))
    sample = next(client.scan_iter(match=f"{prefix}:w:1m:*", count=5000), None)
    sample_bytes = (client.memory_usage(sample) or 0) if sample else 0
    client.close()
    total = sum(ends.values())
    redis_cpu = sum(cpu_after[k] - cpu_before[k] for k in ("used_cpu_user", "used_cpu_sys"))
    if first_at is None:
        raise RuntimeError(f"the worker applied no record of {topic}; see {log_path}")
    return {"per_s": (total - first_count) / (done - first_at), "wall_seconds": done - spawned,
            "counted": counted, "redis_cpu_seconds": redis_cpu, "peak_rss_mb": peak_rss_kb / 1024,
            "window_keys": keys, "minute_window_bytes": sample_bytes}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _peak_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def cleanup(bootstrap: str, redis_url: str, topics: list[str], prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(topics)
    except KafkaError:  # best effort: a topic may be gone already
        pass
    finally:
        await admin.close()
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.unlink(key)
    client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="traces to produce (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=200_000,
                        help="records per getmany for the bare consumer (the worker's batch size)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--pair-share", type=float, default=0.0,
                        help="share of traces sent as baseline + shadow pairs (default 0)")
    parser.add_argument("--event-span", type=float, default=60.0,
                        help="seconds of event time the traces are spread over, ending now: 60 (default) is a "
                             "burst of live traffic; 3600 replays an hour of a slower fleet, which writes ~60 "
                             "times as many minute windows")
    parser.add_argument("--bootstrap", default=os.environ.get("FLEETMON_KAFKA_BOOTSTRAP", "localhost:9092"))
    parser.add_argument("--redis", default=os.environ.get("FLEETMON_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed for the worker")
    args = parser.parse_args(argv)

    topic = f"bench.throughput.{uuid.uuid4().hex}"
    prefix = f"bench-throughput-{uuid.uuid4().hex[:12]}"
    try:
        produce_seconds, ends = asyncio.run(produce(args.bootstrap, topic, args.partitions, args.n, args.seed,
                                                       args.pair_share, args.event_span))
        bare = asyncio.run(bare_consumer(args.bootstrap, topic, args.n, args.batch))
        iterated = asyncio.run(bare_iterator(args.bootstrap, topic, args.n))
        worker = worker_run(args.bootstrap, args.redis, topic, ends, prefix, args.timeout)
    finally:
        asyncio.run(cleanup(args.bootstrap, args.redis, [topic, f"{topic}.dlq"], prefix))
    if worker["counted"] != args.n:
        print(f"MISMATCH: Redis counted {worker['counted']} traces, produced {args.n}", file=sys.stderr)
    ratio = worker["per_s"] / bare["per_s"]
    rows = [("produce (aiokafka, not timed)", args.n / produce_seconds, produce_seconds),
            ("bare aiokafka consumer (getmany)", bare["per_s"], bare["wall_seconds"]),
            ("bare aiokafka consumer (async for)", iterated["per_s"], iterated["wall_seconds"]),
            ("fleetmon worker → Redis", worker["per_s"], worker["wall_seconds"])]
    print(f"throughput bench: {args.n:,} traces, {args.partitions} partitions, Kafka {args.bootstrap}")
    print(f"{'stage':<36} {'records/s':>12} {'wall s':>8}")
    for name, rate, wall in rows:
        print(f"{name:<36} {rate:>12,.0f} {wall:>8.1f}")
    print(f"worker peak RSS {worker['peak_rss_mb']:.0f} MB; "
          f"Redis server CPU (all clients) {worker['redis_cpu_seconds']:.1f} s "
          f"over the worker's {worker['wall_seconds']:.1f} s; {worker['window_keys']:,} window hashes "
          f"(a 1-minute one: {worker['minute_window_bytes']:,} bytes)")
    print(f"ratio worker / bare consumer: {ratio:.3f} (getmany), {worker['per_s'] / iterated['per_s']:.3f} "
          f"(async for)   Redis counted {worker['counted']:,} traces")
    print(json.dumps({"bench": "throughput", "n": args.n, "partitions": args.partitions,
                      "pair_share": args.pair_share, "event_span_seconds": args.event_span,
                      "traces_per_s": round(worker["per_s"]), "bare_consumer_per_s": round(bare["per_s"]),
                      "ratio": round(ratio, 3), "bare_consumer_iter_per_s": round(iterated["per_s"]),
                      "ratio_vs_iter": round(worker["per_s"] / iterated["per_s"], 3),
                      "worker_wall_seconds": round(worker["wall_seconds"], 2),
                      "worker_peak_rss_mb": round(worker["peak_rss_mb"]),
                      "redis_cpu_seconds": round(worker["redis_cpu_seconds"], 2),
                      "counted_exact": worker["counted"] == args.n}))
    return 0 if worker["counted"] == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
