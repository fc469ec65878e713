"""Exporter scrape time and memory for 1,000 / 3,000 / 10,000 active slices, each with an hour of minute windows.

Per point of the curve (``--curve``, default 1000,3000,10000) it fills a real Redis
(``$FLEETMON_REDIS_URL``, default redis://127.0.0.1:6379/0) under a unique key
prefix, starts a real ``fleetmon exporter`` process on a free loopback port over
that prefix (the default configuration: ``exporter.max_series`` 20,000, so most
slices of the larger points are folded into their ``__other__`` rows) and scrapes
``/metrics`` over HTTP as Prometheus does (``Accept-Encoding: gzip``, the text
format): the first scrape (cold caches), scrapes with nothing written between
them (idle), and scrapes with every slice written in the current minute between
two scrapes (all changed, the realistic case in production). The exporter's
resident memory is read from ``/proc/<pid>/status`` after the scrapes (VmRSS, and
VmHWM its peak), also for an exporter over an empty prefix (what the process
costs before any slice). Each prefix is deleted afterwards, also on failure.

At the first point it also checks once, in this process, that the body
:func:`monitor.exporter.exposition.render` serves is byte for byte
prometheus_client's ``generate_latest`` of the same registry, and measures Redis
memory per slice-window (``MEMORY USAGE`` sampled over window keys, and the
``INFO`` used_memory delta divided by the number of window keys).

Aggregates are realistic: every (slice, minute) window holds 20–60 traces
with a populated latency sketch (log-normal latencies), token counts, safety
flags and outcomes. To keep the set-up short, windows are drawn from a pool
of 400 distinct aggregates built from synthetic traces.

Prints a human table, then as its last line one JSON object
(``scrape_seconds_median_1k`` … ``_10k``: all changed; ``scrape_seconds_cold_*``,
``scrape_seconds_idle_median_*``, ``exporter_rss_mb`` at 1,000 slices, ``exporter_rss_mb_*``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.exporter.collector import build_registry
from monitor.exporter.exposition import render
from monitor.pricing import PriceMap
from monitor.schema import Trace
from monitor.slices import slice_id
from monitor.store.redis.store import RedisStore
from monitor.windows import HOUR, MINUTE

ROOT = Path(__file__).resolve().parents[1]


def window_aggregate(rng: random.Random, ts: float) -> Aggregate:
    agg = Aggregate()
    for i in range(rng.randint(20, 60)):
        ok = rng.random() < 0.75
        tokens_in = rng.randint(500, 20_000)
        agg.update(Trace(
            trace_id=f"b{i}", ts=ts, model_id=rng.choice(("model-a", "model-b")), release="r",
            success=ok, ok=ok, outcome="success" if ok else rng.choice(("failure", "escalated", "abandoned")),
            steps=rng.randint(1, 30), tool_calls=rng.randint(0, 12), tool_errors=rng.randint(0, 2),
            tokens_in=tokens_in, tokens_cached_in=rng.randint(0, tokens_in // 2),
            tokens_out=rng.randint(50, 4000), latency_seconds=rng.lognormvariate(1.5, 0.9),
            harmful_action=rng.random() < 0.01, refused=rng.random() < 0.05, benign=rng.random() < 0.9,
            side_effects=1 if rng.random() < 0.02 else 0, prompt_injection=rng.random() < 0.01,
        ))
    return agg


def slice_keys(n: int) -> list[str]:
    out: list[str] = []
    releases = ("rel-2026.11.1", "rel-2026.11.2", "rel-2026.12.0", "rel-2026.12.1")
    arms = ("baseline", "canary", "shadow")
    task_types = ("code", "support", "search", "billing", "triage")
    locales = ("en", "de", "fr", "ja")
    i = 0
    while len(out) < n:
        key = (("release", releases[i % 4]), ("arm", arms[(i // 4) % 3]),
               ("task_type", task_types[(i // 12) % 5]), ("tenant", f"tenant-{i // 60:03d}"),
               ("locale", locales[(i // 7) % 4]))
        out.append(slice_id(key))
        i += 1
    return out


def fill(store: RedisStore, slices: list[str], now: float, minutes: int, seed: int) -> int:
    rng = random.Random(seed)
    pool = [window_aggregate(rng, now) for _ in range(400)]
    current = MINUTE.start(now)
    starts = [current - 60 * k for k in range(minutes, -1, -1)]  # a full hour plus the current minute
    windows = 0
    for chunk in range(0, len(slices), 20):
        delta = BatchDelta()
        for sid in slices[chunk:chunk + 20]:
            total = Aggregate()
            for start in starts:
                agg = rng.choice(pool)
                delta.windows[(MINUTE.name, start, sid)] = agg
                delta.expire_at[(MINUTE.name, start)] = MINUTE.expire_at(start)
                total.merge(agg)
                windows += 1
            hour = HOUR.start(now)
            delta.windows[(HOUR.name, hour, sid)] = total
            delta.expire_at[(HOUR.name, hour)] = HOUR.expire_at(hour)
            delta.totals[sid] = total
            delta.last_seen[sid] = now - rng.uniform(0, 30)
            delta.count("traces", total.traces)
        store.apply(delta)
    return windows


def _without_duration(text: bytes) -> bytes:
    """The body without its scrape-duration sample (which differs from scrape to scrape)."""
    return b"\n".join(line for line in text.split(b"\n")
                      if not line.startswith(b"fleetmon_scrape_duration_seconds "))


def label(n: int) -> str:
    """``1k`` for 1000, ``10k`` for 10000, else the number."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


class Exporter:
    """A ``fleetmon exporter`` subprocess over one prefix, on a free loopback port."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "exporter", "--port", "0", "--host", "127.0.0.1",
             "--redis", redis_url, "--prefix", prefix],
            cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        self.url = ""
        while not self.url:
            line = self.process.stderr.readline()
            if not line and (self.process.poll() is not None or time.monotonic() > deadline):
                self.close()
                raise RuntimeError(f"fleetmon exporter did not start (exit {self.process.returncode})")
            found = re.search(r"serving (http://\S+/metrics)", line)
            if found:
                self.url = found.group(1)
        threading.Thread(target=self.process.stderr.read, daemon=True).start()  # drain its log

    def scrape(self) -> tuple[float, bytes]:
        """Seconds for one GET /metrics as Prometheus sends it, and the (gunzipped) body."""
        request = urllib.request.Request(self.url, headers={"Accept-Encoding": "gzip"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=300) as response:
            body = response.read()
            seconds = time.perf_counter() - started
            if response.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
        return seconds, body

    def memory_mb(self) -> tuple[float, float]:
        """VmRSS and VmHWM (peak) of the process, in MB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        found = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
        return int(found["VmRSS"]) / 1024, int(found["VmHWM"]) / 1024

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def write_current_minute(store: RedisStore, slices: list[str], pool: list[Aggregate], rng: random.Random) -> None:
    """New traces in every slice's current minute (as the workers write them)."""
    current = MINUTE.start(time.time())
    for chunk in range(0, len(slices), 1000):
        delta = BatchDelta()
        for sid in slices[chunk:chunk + 1000]:
            agg = rng.choice(pool)
            delta.windows[(MINUTE.name, current, sid)] = agg
            delta.expire_at[(MINUTE.name, current)] = MINUTE.expire_at(current)
            delta.totals[sid] = agg
            delta.last_seen[sid] = time.time()
        store.apply(delta)


def folded_slices(body: bytes) -> int:
    found = re.search(rb"^fleetmon_exporter_folded_slices (\S+)$", body, re.M)
    return int(float(found.group(1))) if found else 0


def in_process_checks(store: RedisStore, prices: PriceMap, now: float) -> dict[str, object]:
    """The served body against generate_latest's, and Redis bytes per window (at one point)."""
    registry, _collector = build_registry(store, prices, now=lambda: now)
    render(registry)
    identical = _without_duration(render(registry)[0]) == _without_duration(generate_latest(registry))
    client = store.client
    window_keys = list(client.scan_iter(match=f"{store.prefix}:w:1m:*", count=5000))
    sample = random.Random(1).sample(window_keys, min(200, len(window_keys)))
    return {"identical_to_generate_latest": identical,
            "redis_bytes_per_slice_window": round(statistics.mean(client.memory_usage(k, samples=0) or 0
                                                                  for k in sample)),
            "fields_per_minute_window": round(statistics.mean(client.hlen(k) for k in sample))}


def measure(n: int, args: argparse.Namespace, prices: PriceMap, first: bool) -> dict[str, Any]:
    """One point of the curve (see the module docstring)."""
    prefix = f"fleetmon-bench-{uuid.uuid4().hex[:12]}"
    store = RedisStore.from_url(args.redis, prefix=prefix)
    client = store.client
    exporter = None
    try:
        used_before = client.info("memory")["used_memory"]
        now = time.time()
        t0 = time.perf_counter()
        windows = fill(store, slice_keys(n), now, args.minutes, args.seed)
        out: dict[str, Any] = {"slices": n, "windows_per_slice": windows // n,
                                  "fill_seconds": round(time.perf_counter() - t0, 1),
                                  "redis_used_memory_per_slice_window":
                                  round((client.info("memory")["used_memory"] - used_before) / windows)}
        if first:
            out.update(in_process_checks(store, prices, now))
        exporter = Exporter(args.redis, prefix)
        out["cold"], body = exporter.scrape()
        out["samples"] = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
        out["body_mb"] = len(body) / 1e6
        out["folded"] = folded_slices(body)
        out["idle"] = [exporter.scrape()[0] for _ in range(args.scrapes)]
        rng = random.Random(args.seed + 1)
        pool = [window_aggregate(rng, now) for _ in range(50)]
        slices = sorted(store.active_slices())
        changed = []
        for _ in range(args.scrapes):
            write_current_minute(store, slices, pool, rng)
            changed.append(exporter.scrape()[0])
        out["changed"] = changed
        out["rss_mb"], out["peak_rss_mb"] = exporter.memory_mb()
        return out
    finally:
        if exporter is not None:
            exporter.close()
        store.clear()
        client.close()


def empty_exporter_rss(redis_url: str) -> float:
    """VmRSS of an exporter over an empty prefix after two scrapes: the process before any slice."""
    exporter = Exporter(redis_url, f"fleetmon-bench-empty-{uuid.uuid4().hex[:8]}")
    try:
        exporter.scrape()
        exporter.scrape()
        return exporter.memory_mb()[0]
    finally:
        exporter.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curve", default="1000,3000,10000", help="active slices per point, comma-separated")
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--scrapes", type=int, default=7, help="idle and all-changed scrapes per point")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--redis", default=os.environ.get("FLEETMON_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    points = [int(n) for n in args.curve.split(",") if n]
    prices = PriceMap.load()
    load_before = os.getloadavg()[0]
    empty_rss = empty_exporter_rss(args.redis)
    results = [measure(n, args, prices, i == 0) for i, n in enumerate(points)]

    rows = [("exporter over an empty prefix, resident memory", f"{empty_rss:.0f} MB"),
            ("load average (1 min) before / after", f"{load_before:.1f} / {os.getloadavg()[0]:.1f}")]
    summary: dict[str, Any] = {"bench": "exporter", "curve": points, "minutes": args.minutes,
                                  "scrapes": args.scrapes, "exporter_rss_mb_empty": round(empty_rss, 1)}
    for r in results:
        n, name = r["slices"], label(r["slices"])
        rows += [(f"{n} slices: windows per slice / fill time", f"{r['windows_per_slice']} / {r['fill_seconds']} s"),
                 ("  first scrape (cold caches)", f"{r['cold']:.3f} s"),
                 ("  scrape, nothing written between, median", f"{statistics.median(r['idle']):.3f} s"),
                 ("  scrape, every slice written between, median (min / max)",
                  f"{statistics.median(r['changed']):.3f} s ({min(r['changed']):.3f} / {max(r['changed']):.3f})"),
                 ("  samples / body / slices folded into __other__",
                  f"{r['samples']} / {r['body_mb']:.1f} MB / {r['folded']}"),
                 ("  exporter resident memory (peak)", f"{r['rss_mb']:.0f} MB ({r['peak_rss_mb']:.0f} MB)"),
                 ("  Redis used_memory per minute window", f"{r['redis_used_memory_per_slice_window']} bytes")]
        summary.update({f"scrape_seconds_median_{name}": round(statistics.median(r["changed"]), 4),
                        f"scrape_seconds_cold_{name}": round(r["cold"], 4),
                        f"scrape_seconds_idle_median_{name}": round(statistics.median(r["idle"]), 4),
                        f"exporter_rss_mb_{name}": round(r["rss_mb"], 1),
                        f"exporter_peak_rss_mb_{name}": round(r["peak_rss_mb"], 1),
                        f"samples_{name}": r["samples"], f"folded_slices_{name}": r["folded"]})
        for key in ("identical_to_generate_latest", "redis_bytes_per_slice_window", "fields_per_minute_window"):
            if key in r:
                summary[key] = r[key]
                rows.append((f"  {key.replace('_', ' ')}", f"{r[key]}"))
    if "exporter_rss_mb_1k" in summary:
        summary["exporter_rss_mb"] = summary["exporter_rss_mb_1k"]
    summary.update({"load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2),
                    "target_scrape_seconds_1k": 0.15, "target_scrape_seconds_cold_1k": 1.0,
                    "target_scrape_seconds_10k": 1.0, "target_exporter_rss_mb": 60})
    width = max(len(r[0]) for r in rows)
    print(f"{'exporter bench':<{width}}  value")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
