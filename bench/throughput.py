"""Throughput of one fleetmon worker through real Kafka → Redis, against a bare consumer, per traffic shape.

Run (services up: ``bash scripts/services.sh start``)::

    .venv/bin/python bench/throughput.py [--n 1000000] [--partitions 4] [--shapes plain,pairs20,pairs100,replay]

Every shape runs in one invocation, each on its own fresh topic and Redis
prefix (nothing shared with other users of the services):

* ``plain`` — live traffic (event times within the last minute), no pairs;
* ``pairs20`` / ``pairs100`` — live traffic with 20% / all of the traces sent
  as baseline + shadow pairs (same ``pair_id``, the key), joined by the worker;
* ``replay`` — an hour of event time (``--event-span 3600``: what ``fleetmon
  rebuild`` and a backfill read), which rewrites each slice's minute windows
  many more times.

Per shape:

1. produces N traces once (seeded; 360 slices, ~300 bytes each; event times
   ascending over the shape's span);
2. a bare aiokafka consumer (fresh group, ``getmany`` with the worker's batch
   size, no decoding) drains the topic, ``--bare-drains`` times (default 3,
   each a fresh group; the first half before the worker runs, the rest after,
   so a drift in the machine's state during the worker's run weighs on both
   sides): the median rate is that shape's ``bare_consumer_per_s`` and its
   ratio's denominator, every drain's rate is in ``bare_consumer_drains_per_s``
   (one drain swung 230k–390k/s between shapes of one run: a ratio over a
   single drain moved with it). For context, on the first shape only, a
   second bare consumer drains it one message at a time:
   ``bare_consumer_iter_per_s``;
3. one ``fleetmon worker`` subprocess (fresh group, fresh Redis prefix)
   processes it; the bench polls its per-partition watermarks in Redis until
   they reach the end offsets, then stops the worker;
4. checks that Redis counts exactly N traces and, with pairs, exactly the
   pairs produced; reads the Redis CPU the run cost (``INFO cpu`` and the
   apply script's ``INFO commandstats`` — server-wide figures, so other
   clients of a shared Redis add to them); deletes the topic and keys.

Rates are steady-state: records handled after the first observation divided
by the time since it (the bare consumer's first fetch; the worker's first
applied batch), so process start-up and group joins are excluded from both;
the worker's wall time from spawn is reported too. CPU, less noisy than the
rates on a shared machine (for comparing two builds on one shape): the worker
process's from spawn to its last apply (``/proc/<pid>/stat``, all its threads,
start-up included: imports and the group join, about a second),
``worker_cpu_seconds`` and per trace ``worker_cpu_us_per_trace``; the bare
consumer's (the bench process, nothing else running in it) per record,
``bare_cpu_us_per_record`` (the median over its drains). Kafka's and Redis's
CPU are in neither (Redis's is ``redis_cpu_seconds``). Rates and CPU are not
comparable with each other: the steady-state rates leave out what the worker
fetched before its first apply. ``--profile DIR`` attaches ``py-spy`` (when
installed) to each worker and writes its samples to ``DIR/<shape>.txt``.
Prints a table and, as the last line, one JSON object: the plain shape's
``traces_per_s``, ``bare_consumer_per_s``, ``ratio``, then ``pairs20_ratio``,
``pairs100_ratio``, ``replay_ratio`` and every shape's figures under
``shapes``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
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


def traces(n: int, seed: int, now: float, pair_share: float = 0.0, span: float = 3600.0,
           tally: dict[str, int] | None = None):
    """N ``(key, value)`` traces, event time ascending over the ``span`` seconds before ``now``.

    ``pair_share`` of them are baseline traces followed by a shadow twin
    (same ``pair_id``, the key), which the worker joins into paired counts;
    ``tally["pairs"]`` counts the pairs yielded.
    """
    tally = {} if tally is None else tally
    tally.setdefault("pairs", 0)
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
            tally["pairs"] += 1
            i += 2
        else:
            yield record["trace_id"].encode(), orjson.dumps(record)
            i += 1


async def produce(bootstrap: str, topic: str, partitions: int, n: int, seed: int,
                  pair_share: float = 0.0, span: float = 60.0) -> tuple[float, dict[int, int], int]:
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
        tally: dict[str, int] = {}
        for key, value in traces(n, seed, time.time(), pair_share, span, tally):
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
    return seconds, ends, tally["pairs"]


async def bare_consumer(bootstrap: str, topic: str, n: int, batch: int) -> dict[str, float]:
    """Drain the topic with a bare aiokafka consumer (the worker's fetch settings)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bench-bare-{uuid.uuid4().hex}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)
    await consumer.start()
    try:
        seen = first_batch = 0
        first_at = None
        started, started_cpu = time.perf_counter(), time.process_time()
        while seen < n:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=batch)
            got = sum(len(records) for records in fetched.values())
            if got and first_at is None:
                first_at, first_batch = time.perf_counter(), got
            seen += got
        done, done_cpu = time.perf_counter(), time.process_time()
    finally:
        await consumer.stop()
    if first_at is None:
        raise RuntimeError(f"no record arrived from {topic}")
    return {"per_s": (seen - first_batch) / (done - first_at), "wall_seconds": done - started,
            "cpu_us_per_record": (done_cpu - started_cpu) * 1e6 / max(1, seen)}


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


def _script_usec(client: redis.Redis) -> float:
    """Microseconds Redis spent in scripts and functions so far (the worker's apply is one call per batch)."""
    stats = client.info("commandstats")
    return float(sum(v.get("usec", 0) for k, v in stats.items()
                     if k.split("|")[0] in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")))


def _start_profiler(pid: int, out: Path) -> subprocess.Popen | None:
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(REPO / ".venv" / "bin"))
    if spy is None:
        print("--profile: py-spy is not installed (pip install py-spy); not profiling", file=sys.stderr)
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "200", "--nonblocking",
                             "--format", "raw", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_profiler(spy: subprocess.Popen | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)   # py-spy writes its samples on SIGINT
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()


def worker_run(bootstrap: str, redis_url: str, topic: str, ends: dict[int, int], prefix: str,
               timeout_seconds: float, profile: Path | None = None) -> dict[str, float]:
    """Run one ``fleetmon worker`` until its watermarks reach ``ends`` (``profile``: py-spy output)."""
    client = redis.Redis.from_url(redis_url)
    group = f"bench-worker-{uuid.uuid4().hex}"
    env = dict(os.environ, FLEETMON_KAFKA_BOOTSTRAP=bootstrap, FLEETMON_REDIS_URL=redis_url)
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"{group}.log"
    cpu_before = client.info("cpu")
    script_before = _script_usec(client)
    peak_rss_kb = 0
    spy = None
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
                    if profile is not None:
                        spy = _start_profiler(proc.pid, profile)
                if all(marks.get(source, -1) >= end for source, end in targets.items()):
                    break
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited with {proc.returncode}; see {log_path}")
                peak_rss_kb = max(peak_rss_kb, _peak_rss_kb(proc.pid))
                if now - spawned > timeout_seconds:
                    raise RuntimeError(f"worker did not finish within {timeout_seconds} s; see {log_path}")
                time.sleep(0.02)
            done, done_cpu = time.perf_counter(), _cpu_seconds(proc.pid)
            peak_rss_kb = max(peak_rss_kb, _peak_rss_kb(proc.pid))
        finally:
            _stop_profiler(spy)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    cpu_after = client.info("cpu")
    script_usec = _script_usec(client) - script_before
    counted = int(float(client.hget(f"{prefix}:counters", "traces") or 0))
    pairs = int(float(client.hget(f"{prefix}:counters", "pairs") or 0))
    waiting = sum(client.hlen(key) for key in client.scan_iter(match=f"{prefix}:pending:*", count=1000))
    keys = sum(1 for _ in client.scan_iter(match=f"{prefix}:w:*", count=5000))
    sample = next(client.scan_iter(match=f"{prefix}:w:1m:*", count=5000), None)
    sample_bytes = (client.memory_usage(sample) or 0) if sample else 0
    client.close()
    total = sum(ends.values())
    redis_cpu = sum(cpu_after[k] - cpu_before[k] for k in ("used_cpu_user", "used_cpu_sys"))
    if first_at is None:
        raise RuntimeError(f"the worker applied no record of {topic}; see {log_path}")
    return {"per_s": (total - first_count) / (done - first_at), "wall_seconds": done - spawned,
            "counted": counted, "pairs": pairs, "waiting_halves": waiting, "redis_cpu_seconds": redis_cpu,
            "redis_script_seconds": script_usec / 1e6, "peak_rss_mb": peak_rss_kb / 1024,
            "window_keys": keys, "minute_window_bytes": sample_bytes,
            "cpu_seconds": done_cpu, "cpu_us_per_trace": done_cpu * 1e6 / max(1, total)}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _cpu_seconds(pid: int) -> float:
    """The user + system CPU seconds process ``pid`` has used (``/proc/<pid>/stat``; its threads included)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


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


#: name → (share of traces sent as pairs, seconds of event time)
SHAPES = {"plain": (0.0, 60.0), "pairs20": (0.2, 60.0), "pairs100": (1.0, 60.0), "replay": (0.0, 3600.0)}


def run_shape(args: argparse.Namespace, name: str, pair_share: float, span: float, iterate: bool) -> dict[str, Any]:
    """One shape end to end on its own topic and prefix (see the module docstring)."""
    topic = f"bench.throughput.{name}.{uuid.uuid4().hex}"
    prefix = f"bench-throughput-{uuid.uuid4().hex[:12]}"
    profile = None
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        profile = Path(args.profile) / f"{name}.txt"
    try:
        produce_seconds, ends, pairs = asyncio.run(produce(args.bootstrap, topic, args.partitions, args.n,
                                                           args.seed, pair_share, span))
        before = (args.bare_drains + 1) // 2
        drains = [asyncio.run(bare_consumer(args.bootstrap, topic, args.n, args.batch)) for _ in range(before)]
        iterated = asyncio.run(bare_iterator(args.bootstrap, topic, args.n)) if iterate else None
        worker = worker_run(args.bootstrap, args.redis, topic, ends, prefix, args.timeout, profile)
        drains += [asyncio.run(bare_consumer(args.bootstrap, topic, args.n, args.batch))
                   for _ in range(args.bare_drains - before)]
    finally:
        asyncio.run(cleanup(args.bootstrap, args.redis, [topic, f"{topic}.dlq"], prefix))
    exact = worker["counted"] == args.n and worker["pairs"] == pairs and worker["waiting_halves"] == 0
    if not exact:
        print(f"MISMATCH ({name}): Redis counted {worker['counted']} traces and {worker['pairs']} pairs "
              f"({worker['waiting_halves']} halves waiting); produced {args.n} traces, {pairs} pairs", file=sys.stderr)
    bare_per_s = statistics.median(d["per_s"] for d in drains)
    bare = {"per_s": bare_per_s, "cpu_us_per_record": statistics.median(d["cpu_us_per_record"] for d in drains),
            "drains_per_s": [d["per_s"] for d in drains]}
    return {"pair_share": pair_share, "event_span_seconds": span, "produce_per_s": args.n / produce_seconds,
            "bare": bare, "iterated": iterated, "worker": worker, "pairs_produced": pairs, "exact": exact,
            "ratio": worker["per_s"] / bare_per_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="traces to produce per shape (default 1,000,000)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=200_000,
                        help="records per getmany for the bare consumer (the worker's batch size)")
    parser.add_argument("--bare-drains", type=int, default=3,
                        help="bare-consumer drains per shape, half before the worker and half after; "
                             "the median is the ratio's denominator (default 3)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help=f"comma-separated shapes to run, of {', '.join(SHAPES)} (default: all)")
    parser.add_argument("--bootstrap", default=os.environ.get("FLEETMON_KAFKA_BOOTSTRAP", "localhost:9092"))
    parser.add_argument("--redis", default=os.environ.get("FLEETMON_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for each worker run")
    parser.add_argument("--profile", default="", help="directory for py-spy samples of each worker (optional)")
    args = parser.parse_args(argv)
    if args.bare_drains < 1:
        parser.error(f"--bare-drains must be at least 1, got {args.bare_drains}")
    names = [name.strip() for name in args.shapes.split(",") if name.strip()]
    unknown = [name for name in names if name not in SHAPES]
    if unknown or not names:
        parser.error(f"--shapes must name some of {', '.join(SHAPES)}, got {args.shapes!r}")

    results = {name: run_shape(args, name, *SHAPES[name], iterate=i == 0) for i, name in enumerate(names)}
    print(f"throughput bench: {args.n:,} traces per shape, {args.partitions} partitions, Kafka {args.bootstrap}, "
          f"Redis {args.redis} (ratios: worker / bare consumer on the same topic, same run)")
    print(f"{'shape':<9} {'pairs':>6} {'span s':>7} {'bare/s':>10} {'worker/s':>10} {'ratio':>6} {'wall s':>7} "
          f"{'RSS MB':>7} {'Redis CPU s':>11} {'script µs/trace':>15} {'CPU µs/trace':>12} {'exact':>6}")
    for name, r in results.items():
        w = r["worker"]
        print(f"{name:<9} {r['pair_share']:>6.0%} {r['event_span_seconds']:>7.0f} {r['bare']['per_s']:>10,.0f} "
              f"{w['per_s']:>10,.0f} {r['ratio']:>6.3f} {w['wall_seconds']:>7.1f} {w['peak_rss_mb']:>7.0f} "
              f"{w['redis_cpu_seconds']:>11.2f} {w['redis_script_seconds'] * 1e6 / args.n:>15.2f} "
              f"{w['cpu_us_per_trace']:>12.2f} {r['exact']!s:>6}")
    first = results[names[0]]
    if first["iterated"] is not None:
        print(f"bare consumer one message at a time (async for, {names[0]}): {first['iterated']['per_s']:,.0f}/s")
    out: dict[str, Any] = {"bench": "throughput", "n": args.n, "partitions": args.partitions}
    if "plain" in results:
        plain = results["plain"]
        out.update(traces_per_s=round(plain["worker"]["per_s"]), bare_consumer_per_s=round(plain["bare"]["per_s"]),
                   ratio=round(plain["ratio"], 3))
    for name in ("pairs20", "pairs100", "replay"):
        if name in results:
            out[f"{name}_ratio"] = round(results[name]["ratio"], 3)
    if first["iterated"] is not None:
        out["bare_consumer_iter_per_s"] = round(first["iterated"]["per_s"])
    out["counted_exact"] = all(r["exact"] for r in results.values())
    out["shapes"] = {name: {
        "traces_per_s": round(r["worker"]["per_s"]), "bare_consumer_per_s": round(r["bare"]["per_s"]),
        "ratio": round(r["ratio"], 3), "pair_share": r["pair_share"], "event_span_seconds": r["event_span_seconds"],
        "pairs": r["worker"]["pairs"], "worker_wall_seconds": round(r["worker"]["wall_seconds"], 2),
        "worker_peak_rss_mb": round(r["worker"]["peak_rss_mb"]),
        "redis_cpu_seconds": round(r["worker"]["redis_cpu_seconds"], 2),
        "redis_script_us_per_trace": round(r["worker"]["redis_script_seconds"] * 1e6 / args.n, 3),
        "window_keys": r["worker"]["window_keys"], "minute_window_bytes": r["worker"]["minute_window_bytes"],
        "worker_cpu_seconds": round(r["worker"]["cpu_seconds"], 2),
        "worker_cpu_us_per_trace": round(r["worker"]["cpu_us_per_trace"], 2),
        "bare_consumer_drains_per_s": [round(rate) for rate in r["bare"]["drains_per_s"]],
        "bare_cpu_us_per_record": round(r["bare"]["cpu_us_per_record"], 2),
        "counted_exact": r["exact"]} for name, r in results.items()}
    print(json.dumps(out))
    return 0 if out["counted_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
