"""Soak: live traffic at a fixed rate through Kafka → worker → Redis → exporter, with restarts.

Run (services up: ``bash scripts/services.sh start``; the soak starts its own Redis)::

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 200] [--redis-persistence off]

For ``--minutes`` (default 30, at most 1440) a producer thread sends ``--rate`` traces a second
(event time = now, 360 slices, ``--pair-share`` of them shadow pairs) to a fresh topic on the shared
Kafka. One ``fleetmon worker`` and one ``fleetmon exporter`` run as subprocesses against a private
``redis-server`` (tests/support/redis_server.py; never the shared one). A third of the way in the
worker is SIGKILLed and restarted; two thirds in Redis is SIGKILLed and restarted — with
``--redis-persistence off`` (default) it comes back empty and the worker restores the state from the
topic (docs/operating.md, "Lost Redis state"); with ``everysec`` it reloads its AOF.

Every ``--sample-seconds`` it records: the worker's and the exporter's RSS, Redis ``used_memory``,
the consumer lag (end offsets − applied), one scrape of ``/metrics`` (seconds, bytes), and the
exactness invariant ``counters.traces == Σ (watermark + 1)`` read in one MULTI (every record is a
valid trace, so the store must hold exactly one trace per applied offset, restore or not). At the end
the producer stops, the worker catches up, and the totals are compared with what was sent (traces,
successes, input tokens, pairs). Memory growth is the least-squares slope (MB/hour) of each process's
RSS over the samples after the last restart (of either kind) plus ``--warmup-seconds``. Redis is
expected to grow: every slice writes a new minute window each minute, kept 48 h (docs/operating.md,
"Retention"), so its slope is that of the retention filling, not a leak; the exporter's too for the
first hour, as it caches the minute windows of its longest span (``1h``): judge its flatness only
with ``--minutes`` well past 60. Prints a table as it goes,
a summary, and, as the last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

warnings.filterwarnings("ignore", category=DeprecationWarning)  # kafka-python's import-time warnings
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from tests.support.redis_server import RedisServer, free_port  # noqa: E402

FLEETMON = [sys.executable, "-m", "monitor.cli.main"]
MAX_MINUTES = 1440
RELEASES, ARMS = ("r41", "r42", "r43"), ("baseline", "canary")
TASK_TYPES, LOCALES = ("code", "chat", "search", "refund"), ("en", "fr", "de")


class Traffic:
    """Sends live traces at a fixed rate and keeps the exact expected figures of what Kafka acknowledged."""

    def __init__(self, bootstrap: str, topic: str, rate: float, pair_share: float, seed: int) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
        self.topic, self.rate, self.pair_share = topic, rate, pair_share
        self.rng = random.Random(seed)
        self.sent = {"traces": 0, "successes": 0, "tokens_in": 0, "pairs": 0}
        self.failed = 0  # sends Kafka did not acknowledge (the expected figures then over-count)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak-traffic", daemon=True)

    def _record(self, i: int, now: float) -> dict[str, Any]:
        rng = self.rng
        tokens_in = rng.randrange(200, 6000)
        return {"trace_id": f"soak-{i}", "ts": now, "model_id": rng.choice(("model-a", "model-b")),
                "release": rng.choice(RELEASES), "arm": rng.choice(ARMS), "task_type": rng.choice(TASK_TYPES),
                "tenant": f"tenant-{rng.randrange(5)}", "locale": rng.choice(LOCALES),
                "outcome": "success" if rng.random() < 0.7 else rng.choice(("failure", "escalated")),
                "tokens_in": tokens_in, "tokens_cached_in": rng.randrange(0, tokens_in // 2),
                "tokens_out": rng.randrange(20, 1500), "latency_ms": round(rng.lognormvariate(7.5, 0.6), 1),
                "steps": rng.randrange(1, 12), "fees_usd": 0.0005}

    def _send(self, key: str, record: dict[str, Any]) -> None:
        future = self.producer.send(self.topic, key=key.encode(), value=json.dumps(record).encode())
        future.add_errback(self._failed)
        self.sent["traces"] += 1
        self.sent["successes"] += record["outcome"] == "success"
        self.sent["tokens_in"] += record["tokens_in"]

    def _failed(self, exc: BaseException) -> None:
        self.failed += 1

    def _run(self) -> None:
        started, i = time.monotonic(), 0
        while not self.stop.is_set():
            now = time.time()
            record = self._record(i, now)
            if self.rng.random() < self.pair_share:
                record.update(arm="baseline", pair_id=f"soak-pair-{i}")
                twin = dict(record, trace_id=f"soak-{i}-shadow", arm="shadow", release=record["release"] + "-next",
                            outcome=self.rng.choice(("success", "failure")))
                self._send(record["pair_id"], record)
                self._send(record["pair_id"], twin)
                self.sent["pairs"] += 1
            else:
                self._send(record["trace_id"], record)
            i += 1
            delay = started + self.sent["traces"] / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.producer.flush(timeout=60)
        self.producer.close()


def rss_mb(proc: subprocess.Popen | None) -> float | None:
    if proc is None or proc.poll() is not None:
        return None
    try:
        with open(f"/proc/{proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) points in MB per hour (None with fewer than 3 points)."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 3600.0 * sum((t - mx) * (v - my) for t, v in points) / var if var else None


class Soak:
    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        self.args = args
        self.directory = directory
        tag = uuid.uuid4().hex[:10]
        self.topic, self.dlq, self.prefix, self.group = f"soak.{tag}", f"soak-dlq.{tag}", f"soak-{tag}", f"soak-{tag}"
        self.redis = RedisServer(directory / "redis", appendonly=args.redis_persistence == "everysec")
        self.worker: subprocess.Popen | None = None
        self.exporter: subprocess.Popen | None = None
        self.exporter_port = free_port()
        self.started_at: dict[str, float] = {}
        self.spawned = 0
        self.samples: list[dict[str, Any]] = []
        self.lag_client = KafkaConsumer(bootstrap_servers=args.bootstrap)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        env = dict(os.environ, FLEETMON_KAFKA_BOOTSTRAP=self.args.bootstrap, FLEETMON_REDIS_URL=self.redis.url,
                   PYTHONUNBUFFERED="1")
        self.spawned += 1
        log = open(self.directory / f"{name}-{self.spawned}.log", "wb")  # the child's stdout: kept open
        self.started_at[name] = time.monotonic()
        return subprocess.Popen([*FLEETMON, *args], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)

    def start_worker(self) -> None:
        self.worker = self._spawn("worker", ["worker", "--topic", self.topic, "--dlq-topic", self.dlq,
                                             "--prefix", self.prefix, "--group-id", self.group,
                                             "--session-timeout", "6"])

    def start_exporter(self) -> None:
        self.exporter = self._spawn("exporter", ["exporter", "--port", str(self.exporter_port), "--redis",
                                                 self.redis.url, "--prefix", self.prefix, "--kafka-bootstrap",
                                                 self.args.bootstrap, "--topic", self.topic])

    def applied(self) -> tuple[dict[int, int], int]:
        """Watermarks of the topic and ``counters.traces``, read in one MULTI (a consistent snapshot)."""
        with self.redis.client() as client:
            pipe = client.pipeline(transaction=True)
            pipe.hgetall(f"{self.prefix}:offsets")
            pipe.hget(f"{self.prefix}:counters", "traces")
            marks, traces = pipe.execute()
        out = {}
        for source, mark in marks.items():
            topic, _, partition = source.decode().rpartition(":")
            if topic == self.topic:
                out[int(partition)] = int(mark)
        return out, int(traces or 0)

    def lag(self, marks: dict[int, int]) -> int:
        parts = [TopicPartition(self.topic, p) for p in range(self.args.partitions)]
        ends = self.lag_client.end_offsets(parts)
        return sum(end - (marks.get(tp.partition, -1) + 1) for tp, end in ends.items())

    def scrape(self) -> tuple[float | None, int]:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.exporter_port}/metrics", timeout=30) as reply:
                body = reply.read()
        except OSError:
            return None, 0
        return time.perf_counter() - started, len(body)

    def sample(self, t: float, event: str) -> dict[str, Any]:
        row: dict[str, Any] = {"t": round(t, 1), "event": event, "worker_rss_mb": rss_mb(self.worker),
                               "exporter_rss_mb": rss_mb(self.exporter)}
        try:
            row["redis_used_mb"] = self.redis.used_memory() / 2**20
            marks, traces = self.applied()
            row["lag"] = self.lag(marks)
            row["applied"] = sum(m + 1 for m in marks.values())
            row["invariant_ok"] = traces == row["applied"]
        except Exception as exc:  # noqa: BLE001 - Redis restarting: the row says so
            row.update(redis_used_mb=None, lag=None, applied=None, invariant_ok=None, error=type(exc).__name__)
        row["scrape_seconds"], row["scrape_bytes"] = self.scrape()
        self.samples.append(row)
        print(f"{row['t']:>7.0f} {event:<16} {_fmt(row['worker_rss_mb'])} {_fmt(row['exporter_rss_mb'])} "
              f"{_fmt(row['redis_used_mb'])} {row['lag'] if row['lag'] is not None else '-':>8} "
              f"{_fmt(row['scrape_seconds'], '8.3f')} {row['invariant_ok']!s:>6}", flush=True)
        return row

    def growth(self, key: str, since: float) -> float | None:
        start = since + self.args.warmup_seconds
        return slope_per_hour([(r["t"], r[key]) for r in self.samples if r["t"] >= start and r[key] is not None])


def _fmt(value: float | None, spec: str = "9.1f") -> str:
    width = int(spec.split(".")[0])
    return format(value, spec) if value is not None else "-".rjust(width)


def final_figures(soak: Soak) -> dict[str, float]:
    from monitor.groupings import grouping_name
    from monitor.slices import parse_slice_id
    from monitor.store.redis.store import RedisStore

    store = RedisStore(soak.redis.client(), soak.prefix)
    # the release × arm grouping's rows: each trace once (every grouping holds it once, monitor/groupings.py)
    totals = {sid: agg for sid, agg in store.totals().items() if grouping_name(parse_slice_id(sid)) == ""}
    counters = store.counters()
    pairs = sum(int(fields.get("n_pairs", 0)) for key, fields in store.paired_evidence().items()
                if key.startswith("pair:") and key.endswith(":"))
    return {"traces": int(counters.get("traces", 0)), "successes": sum(a.successes for a in totals.values()),
            "tokens_in": sum(a.tokens("tokens_in") for a in totals.values()), "pairs": pairs,
            "dlq": int(counters.get("dlq", 0)), "restores": store.generation().restores}


def run(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    soak = Soak(args, directory)
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap, client_id="fleetmon-soak")
    admin.create_topics([NewTopic(soak.topic, args.partitions, 1), NewTopic(soak.dlq, 1, 1)], timeout_ms=30_000)
    traffic = Traffic(args.bootstrap, soak.topic, args.rate, args.pair_share, args.seed)
    duration = args.minutes * 60.0
    try:
        soak.redis.start()
        soak.start_worker()
        soak.start_exporter()
        time.sleep(5)  # group join and exporter bind
        print(f"{'t_s':>7} {'event':<16} {'wkr_MB':>9} {'exp_MB':>9} {'redis_MB':>9} {'lag':>8} {'scrape_s':>8} "
              f"{'exact':>6}", flush=True)
        traffic.thread.start()
        begin = time.monotonic()
        plan = [(duration / 3, "worker_restart"), (2 * duration / 3, "redis_restart")]
        next_sample = 0.0
        while (t := time.monotonic() - begin) < duration:
            event = ""
            if plan and t >= plan[0][0]:
                event = plan.pop(0)[1]
                if event == "worker_restart":
                    assert soak.worker is not None
                    soak.worker.send_signal(signal.SIGKILL)
                    soak.worker.wait(timeout=30)
                    soak.start_worker()
                else:
                    soak.redis.kill()
                    soak.redis.start()
                    soak.started_at["redis"] = time.monotonic()
            if event or t >= next_sample:
                soak.sample(t, event or "")
                next_sample = t + args.sample_seconds
            time.sleep(0.2)
        traffic.stop.set()
        traffic.thread.join(timeout=120)
        deadline = time.monotonic() + args.catch_up_seconds
        while time.monotonic() < deadline:
            marks, _traces = soak.applied()
            if soak.lag(marks) == 0 and final_figures(soak)["traces"] == traffic.sent["traces"]:
                break
            time.sleep(1)
        last = soak.sample(time.monotonic() - begin, "end")
        figures = final_figures(soak)
        expected = dict(traffic.sent, dlq=0)
        exact = traffic.failed == 0 and all(figures[k] == v for k, v in expected.items())
        # the slopes start after the last disruption: a restore after the Redis restart is a warm-up too
        settled = max(soak.started_at["worker"], soak.started_at.get("redis", begin)) - begin
        invariant = [r["invariant_ok"] for r in soak.samples if r["invariant_ok"] is not None]

        def column(key: str) -> list[float]:
            return [r[key] for r in soak.samples if r[key] is not None]

        return {"bench": "soak", "minutes": args.minutes, "rate_per_s": args.rate, "partitions": args.partitions,
                "redis_persistence": args.redis_persistence, "sent": traffic.sent["traces"],
                "send_failures": traffic.failed,
                "exact": exact, "expected": expected, "observed": figures,
                "invariant_samples": len(invariant), "invariant_violations": invariant.count(False),
                "final_lag": last["lag"], "max_lag": max(column("lag"), default=None),
                "worker_rss_mb": {"max": max(column("worker_rss_mb"), default=None),
                                  "end": last["worker_rss_mb"],
                                  "growth_mb_per_hour": soak.growth("worker_rss_mb", settled)},
                "exporter_rss_mb": {"max": max(column("exporter_rss_mb"), default=None),
                                    "end": last["exporter_rss_mb"],
                                    "growth_mb_per_hour": soak.growth("exporter_rss_mb", settled)},
                "redis_used_mb": {"max": max(column("redis_used_mb"), default=None), "end": last["redis_used_mb"],
                                  "growth_mb_per_hour": soak.growth("redis_used_mb", settled)},
                "scrape_seconds_max": max(column("scrape_seconds"), default=None),
                "series": [[r["t"], r["worker_rss_mb"], r["exporter_rss_mb"], r["redis_used_mb"], r["lag"]]
                           for r in soak.samples]}
    finally:
        traffic.stop.set()
        for proc in (soak.worker, soak.exporter):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        soak.redis.kill()
        soak.lag_client.close()
        try:
            admin.delete_topics([soak.topic, soak.dlq], timeout_ms=30_000)
        except Exception:  # noqa: BLE001 - best effort clean-up
            pass
        admin.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help=f"duration (default 30, 1..{MAX_MINUTES})")
    parser.add_argument("--rate", type=float, default=200.0, help="traces per second (default 200)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--pair-share", type=float, default=0.2, help="share of traces sent as shadow pairs")
    parser.add_argument("--redis-persistence", choices=("off", "everysec"), default="off",
                        help="off: the Redis restart comes back empty (restored from Kafka); everysec: AOF")
    parser.add_argument("--sample-seconds", type=float, default=15.0)
    parser.add_argument("--warmup-seconds", type=float, default=60.0,
                        help="after each (re)start, left out of the memory-growth slope (default 60)")
    parser.add_argument("--catch-up-seconds", type=float, default=180.0,
                        help="how long the worker may take to catch up after the traffic stops")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--bootstrap", default=os.environ.get("FLEETMON_KAFKA_BOOTSTRAP", "localhost:9092"))
    args = parser.parse_args(argv)
    if not 1 <= args.minutes <= MAX_MINUTES:
        parser.error(f"--minutes must be between 1 and {MAX_MINUTES}, got {args.minutes}")
    if not 0 < args.rate <= 100_000:
        parser.error(f"--rate must be > 0 and <= 100000 traces/s, got {args.rate}")
    if not 0 <= args.pair_share < 1:
        parser.error(f"--pair-share must be in [0, 1), got {args.pair_share}")
    with tempfile.TemporaryDirectory(prefix="fleetmon-soak-") as directory:
        result = run(args, Path(directory))
    print(f"\nsent {result['sent']} traces at {args.rate:g}/s for {args.minutes:g} min; exact: {result['exact']} "
          f"(invariant held in {result['invariant_samples'] - result['invariant_violations']}/"
          f"{result['invariant_samples']} samples; restores {result['observed'].get('restores')})")
    for name in ("worker_rss_mb", "exporter_rss_mb", "redis_used_mb"):
        row = result[name]
        growth = row["growth_mb_per_hour"]
        print(f"{name:<16} max {_fmt(row['max'])}  end {_fmt(row['end'])}  after warm-up "
              f"{'-' if growth is None else f'{growth:+.1f}'} MB/h")
    print(json.dumps(result, separators=(",", ":")))
    return 0 if result["exact"] and not result["invariant_violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
