"""The cardinality bomb of issue 13, through the write path, Redis and the exporter.

Traffic over 20 releases × 3 arms × 50 task types × 100 tenants × 10 locales,
``--combinations`` (default 50,000) distinct combinations actually sent, each
``--per-combination`` times (default 2) at times spread over the last
``--minutes`` (default 10) minutes. It is folded as a worker folds it
(:class:`monitor.store.redis.store.RedisGuard`: admitted sets in Redis, one
row per slice grouping, :mod:`monitor.groupings`) into a private
``redis-server`` (started on a free port with its own directory and no
persistence, so ``INFO memory`` counts this bench alone), then scraped by the
exporter (:class:`monitor.exporter.collector.FleetCollector`, ``render``: the
body ``fleetmon exporter`` serves) with its default ``exporter.max_series``.

Modes, each in its own child process (its own peak RSS) on a fresh Redis:

* ``groupings``: the default groupings with ``--budget`` (default 1,000)
  combinations per grouping — what fleetmon does now;
* ``cross``: the old layout for comparison — one grouping of all five
  dimensions without a budget (the per-dimension cap of 100 values only).

Reported per mode: stored rows per grouping, window keys, Redis
``used_memory`` over the empty server and per row-window (the sizing unit of
docs/metrics.md), series served, body bytes, scrape seconds (median of
``--scrapes``), folded counts, peak RSS. The machine may be shared: figures
are noisy, the ratio of the two modes measured in one run is the honest one.
Prints a table, then as its last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from monitor.exporter.collector import DEFAULT_MAX_SERIES, build_registry
from monitor.exporter.exposition import render
from monitor.fold import fold
from monitor.groupings import FOLDED_COUNTER_PREFIX, Grouping, GroupingSet, grouping_name, grouping_set
from monitor.pricing import PriceMap
from monitor.schema import validate
from monitor.slices import DEFAULT_DIMENSIONS, Slicer, parse_slice_id
from monitor.store.redis.store import RedisGuard, RedisStore

SHAPE = {"release": 20, "arm": 3, "task_type": 50, "tenant": 100, "locale": 10}
ARMS = ("baseline", "canary", "shadow")


def combinations(n: int, seed: int) -> list[tuple[int, ...]]:
    """``n`` distinct cells of the 20 × 3 × 50 × 100 × 10 space, drawn uniformly."""
    rng = random.Random(seed)
    sizes = [SHAPE[d] for d in DEFAULT_DIMENSIONS]
    space = 1
    for s in sizes:
        space *= s
    out = []
    for code in rng.sample(range(space), n):
        cell = []
        for s in reversed(sizes):
            code, digit = divmod(code, s)
            cell.append(digit)
        out.append(tuple(reversed(cell)))
    return out


def records(cells: list[tuple[int, ...]], per_cell: int, minutes: int, now: float, seed: int) -> list[dict]:
    rng = random.Random(seed + 1)
    out = []
    for i in range(per_cell):
        for j, (rel, arm, task, tenant, locale) in enumerate(cells):
            out.append({"trace_id": f"b{i}-{j}", "ts": now - rng.uniform(0, minutes * 60), "model_id": "gpt-4o",
                        "release": f"rel-{rel:02d}", "arm": ARMS[arm], "task_type": f"task-{task:02d}",
                        "tenant": f"tenant-{tenant:03d}", "locale": f"loc-{locale}", "ok": rng.random() < 0.7,
                        "tokens_in": rng.randint(100, 5000), "tokens_out": rng.randint(10, 800),
                        "latency_ms": rng.lognormvariate(7, 0.6)})
    rng.shuffle(out)
    return out


def start_redis(directory: Path) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
                             "--save", "", "--appendonly", "no", "--protected-mode", "no",
                             # a busy shared machine can stretch one apply script past the default 5 s
                             "--busy-reply-threshold", "120000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            redis.Redis(port=port).ping()
            return proc, port
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.1)


def run_mode(args: argparse.Namespace) -> dict:
    now = time.time()
    if args.mode == "cross":
        groupings = GroupingSet(DEFAULT_DIMENSIONS, (Grouping(DEFAULT_DIMENSIONS, 10**9),))
    else:
        groupings = grouping_set(DEFAULT_DIMENSIONS, budget=args.budget)
    with tempfile.TemporaryDirectory(prefix="fleetmon-bomb-") as tmp:
        proc, port = start_redis(Path(tmp))
        try:
            client = redis.Redis(port=port)
            empty_memory = int(client.info("memory")["used_memory"])
            store = RedisStore(client, prefix="bomb")
            slicer = Slicer(DEFAULT_DIMENSIONS, RedisGuard(store, max_values=100), groupings)
            traces = [validate(r) for r in records(combinations(args.combinations, args.seed), args.per_combination,
                                                   args.minutes, now, args.seed)]
            started = time.perf_counter()
            for i in range(0, len(traces), args.batch):
                batch = traces[i:i + args.batch]
                store.apply(fold(batch, slicer, now, store.resolutions), "bomb:0", i, i + len(batch) - 1)
            write_seconds = time.perf_counter() - started
            used_memory = int(client.info("memory")["used_memory"]) - empty_memory
            window_keys = sum(1 for _ in client.scan_iter(match="bomb:w:*", count=10_000))
            rows = store.active_slices()
            per_grouping: dict[str, int] = {}
            for sid in rows:
                name = grouping_name(parse_slice_id(sid))
                per_grouping[name] = per_grouping.get(name, 0) + 1
            counters = store.counters()
            registry, collector = build_registry(store, PriceMap.load(None), now=lambda: now)
            seconds, body = [], b""
            for _ in range(args.scrapes):
                t0 = time.perf_counter()
                body, _content_type = render(registry)
                seconds.append(time.perf_counter() - t0)
            lines = body.decode().splitlines()
            slice_series = sum(1 for line in lines if line and not line.startswith("#") and "grouping=" in line)
            return {
                "mode": args.mode, "traces": len(traces), "combinations": args.combinations,
                "write_seconds": round(write_seconds, 2), "rows": len(rows), "rows_per_grouping": per_grouping,
                "window_keys": window_keys, "redis_used_memory_bytes": used_memory,
                "redis_bytes_per_row_window": round(used_memory / max(window_keys, 1)),
                "series_served": sum(1 for line in lines if line and not line.startswith("#")),
                "slice_series_served": slice_series, "max_series": DEFAULT_MAX_SERIES,
                "exporter_folded_slices": collector.folded_slices, "body_bytes": len(body),
                "scrape_seconds_median": round(statistics.median(seconds), 3),
                "scrape_seconds_first": round(seconds[0], 3),
                "grouping_folded": {k[len(FOLDED_COUNTER_PREFIX):]: int(v) for k, v in counters.items()
                                    if k.startswith(FOLDED_COUNTER_PREFIX)},
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            }
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--combinations", type=int, default=50_000)
    parser.add_argument("--per-combination", type=int, default=2)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--scrapes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--modes", default="groupings,cross")
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # a child: run one mode, print its JSON
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args)))
        return 0
    results = {}
    for mode in args.modes.split(","):
        child = [sys.executable, __file__, "--mode", mode, *sys.argv[1:]]
        done = subprocess.run(child, capture_output=True, text=True)
        if done.returncode:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"mode {mode} failed (exit {done.returncode})")
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    keys = ("traces", "write_seconds", "rows", "window_keys", "redis_used_memory_bytes",
            "redis_bytes_per_row_window", "series_served", "exporter_folded_slices", "body_bytes",
            "scrape_seconds_median", "scrape_seconds_first", "peak_rss_mb")
    print(f"{'':32}" + "".join(f"{m:>16}" for m in results))
    for key in keys:
        print(f"{key:32}" + "".join(f"{results[m][key]:>16,}" for m in results))
    for mode, r in results.items():
        print(f"{mode}: rows per grouping {r['rows_per_grouping']}; folded past a budget {r['grouping_folded']}")
    out: dict = {"bench": "cardinality_bomb", "combinations": args.combinations, "budget": args.budget,
                 "max_series": DEFAULT_MAX_SERIES}
    for mode, r in results.items():
        out.update({f"{mode}_{k}": r[k] for k in keys})
        out[f"{mode}_rows_per_grouping"] = r["rows_per_grouping"]
    if "groupings" in results and "cross" in results:
        out["redis_memory_ratio"] = round(results["groupings"]["redis_used_memory_bytes"]
                                          / results["cross"]["redis_used_memory_bytes"], 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
