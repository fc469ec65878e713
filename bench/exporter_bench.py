"""Exporter scrape time with 1,000 active slices, each with an hour of minute windows in Redis.

Fills a real Redis (``$FLEETMON_REDIS_URL``, default redis://127.0.0.1:6379/0)
under a unique key prefix, then times full scrapes of
:class:`monitor.exporter.collector.FleetCollector` over
:class:`monitor.store.redis.store.RedisStore`: store reads, collection and text
exposition, i.e. :func:`monitor.exporter.exposition.render` — the body ``fleetmon
exporter`` serves, what Prometheus waits for (the text format; one more
series times the OpenMetrics format Prometheus negotiates by default). It
checks once that the body is byte for byte prometheus_client's
``generate_latest`` of the same registry (which it also times once), and
measures Redis memory per slice-window (``MEMORY USAGE`` sampled over window
keys, and the ``INFO`` used_memory delta divided by the number of window
keys). The prefix is deleted afterwards, also on failure.

Aggregates are realistic: every (slice, minute) window holds 20–60 traces
with a populated latency sketch (log-normal latencies), token counts, safety
flags and outcomes. To keep the set-up short, windows are drawn from a pool
of 400 distinct aggregates built from synthetic traces.

Scenarios: cold (the first scrape), idle (nothing written between scrapes)
and all slices written (every slice got new traces in the current minute
between two scrapes, the realistic case in production).

Prints a human table, then as its last line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.exporter.collector import build_registry
from monitor.exporter.exposition import render
from monitor.pricing import PriceMap
from monitor.schema import Trace
from monitor.slices import slice_id
from monitor.store.redis.store import RedisStore
from monitor.windows import HOUR, MINUTE


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--redis", default=os.environ.get("FLEETMON_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()

    prefix = f"fleetmon-bench-{uuid.uuid4().hex[:12]}"
    store = RedisStore.from_url(args.redis, prefix=prefix)
    client = store.client
    prices = PriceMap.load()
    now = time.time()
    try:
        used_before = client.info("memory")["used_memory"]
        t0 = time.perf_counter()
        windows = fill(store, slice_keys(args.slices), now, args.minutes, args.seed)
        fill_seconds = time.perf_counter() - t0
        used_after = client.info("memory")["used_memory"]
        window_keys = [k for k in client.scan_iter(match=f"{prefix}:w:1m:*", count=5000)]
        sample = random.Random(1).sample(window_keys, min(200, len(window_keys)))
        usage = [client.memory_usage(k, samples=0) or 0 for k in sample]
        bytes_sampled = statistics.mean(usage)
        # the whole prefix (minute and hour windows, totals, zset) per minute window
        bytes_delta = (used_after - used_before) / max(windows, 1)
        fields = statistics.mean(client.hlen(k) for k in sample)

        registry, collector = build_registry(store, prices, now=lambda: now)
        t = time.perf_counter()
        text, _content_type = render(registry)
        cold_seconds = time.perf_counter() - t
        size = len(text)
        families = list(collector.collect())
        samples = sum(len(f.samples) for f in families)
        collect_times: list[float] = []
        scrape_times: list[float] = []
        live_times: list[float] = []
        live_om_times: list[float] = []
        for _ in range(args.scrapes):  # steady state: nothing written between scrapes
            t = time.perf_counter()
            list(collector.collect())
            collect_times.append(time.perf_counter() - t)
            t = time.perf_counter()
            render(registry)
            scrape_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        library_text = generate_latest(registry)
        library_seconds = time.perf_counter() - t
        identical = _without_duration(render(registry)[0]) == _without_duration(library_text)
        rng = random.Random(args.seed + 1)
        live_pool = [window_aggregate(rng, now) for _ in range(50)]
        slices = sorted(store.active_slices())
        for i in range(args.scrapes + max(args.scrapes // 2, 1)):  # every slice written between scrapes
            delta = BatchDelta()
            current = MINUTE.start(now)
            for sid in slices:
                agg = rng.choice(live_pool)
                delta.windows[(MINUTE.name, current, sid)] = agg
                delta.expire_at[(MINUTE.name, current)] = MINUTE.expire_at(current)
                delta.totals[sid] = agg
            store.apply(delta)
            openmetrics = i >= args.scrapes
            t = time.perf_counter()
            render(registry, OPENMETRICS if openmetrics else None)
            (live_om_times if openmetrics else live_times).append(time.perf_counter() - t)
    finally:
        store.clear()
        client.close()

    rows = [
        ("active slices", f"{args.slices}"),
        ("minute windows per slice", f"{windows // args.slices}"),
        ("fields per minute window (mean)", f"{fields:.0f}"),
        ("fill time", f"{fill_seconds:.1f} s"),
        ("scrapes", f"{args.scrapes}"),
        ("first scrape (cold caches)", f"{cold_seconds:.3f} s"),
        ("scrape, no writes between (collect + exposition), median",
         f"{statistics.median(scrape_times):.3f} s"),
        ("  min / max", f"{min(scrape_times):.3f} / {max(scrape_times):.3f} s"),
        ("  collect only, median", f"{statistics.median(collect_times):.3f} s"),
        ("scrape, every slice written between scrapes, median", f"{statistics.median(live_times):.3f} s"),
        ("  min / max", f"{min(live_times):.3f} / {max(live_times):.3f} s"),
        ("  same, OpenMetrics format, median", f"{statistics.median(live_om_times):.3f} s"),
        ("one scrape rendered by generate_latest instead", f"{library_seconds:.3f} s"),
        ("  identical body", f"{identical}"),
        ("samples per scrape", f"{samples}"),
        ("exposition size", f"{size / 1e6:.1f} MB"),
        ("Redis bytes per minute window (MEMORY USAGE)", f"{bytes_sampled:.0f}"),
        ("Redis bytes per minute window (used_memory delta)", f"{bytes_delta:.0f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'exporter bench':<{width}}  value")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(json.dumps({
        "bench": "exporter", "slices": args.slices, "windows_per_slice": windows // args.slices,
        "scrapes": args.scrapes, "scrape_seconds_median": round(statistics.median(scrape_times), 4),
        "collect_seconds_median": round(statistics.median(collect_times), 4),
        "scrape_seconds_median_all_slices_written": round(statistics.median(live_times), 4),
        "scrape_seconds_median_all_slices_written_openmetrics": round(statistics.median(live_om_times), 4),
        "scrape_seconds_cold": round(cold_seconds, 4), "scrape_seconds_generate_latest": round(library_seconds, 4),
        "identical_to_generate_latest": identical, "samples": samples,
        "redis_bytes_per_slice_window": round(bytes_sampled), "redis_used_memory_per_slice_window":
        round(bytes_delta), "target_scrape_seconds": 0.5,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
