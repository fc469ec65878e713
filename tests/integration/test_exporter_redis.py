"""The exporter over the real Redis store serves exactly what it serves over the
in-memory store with the same data — on the first scrape, after new batches
(change detection re-reads what changed), and as the windows slide — and its
incremental reader gives, field for field, what fresh reads of the store give."""

from __future__ import annotations

import logging
import math
import time

import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.exporter.collector import build_registry
from monitor.fold import fold
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from monitor.store.redis import reads as exporter_reads
from monitor.store.redis.packed import window_fields
from monitor.store.redis.reads import SpanReader
from monitor.store.redis.store import COUNT_BUCKET_WINDOWS, RedisStore
from monitor.windows import MINUTE
from tests.support.traces import make_traces

PRICES = PriceMap.load()


def samples(registry) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            if s.name == "fleetmon_scrape_duration_seconds":
                continue
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys(), (sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5])
    for key in a:
        assert math.isclose(a[key], b[key], rel_tol=1e-9, abs_tol=1e-12), (key, a[key], b[key])


def test_redis_and_memory_exports_agree_across_batches_and_sliding_windows(redis_client: redis.Redis):
    redis_store = RedisStore(redis_client, prefix="fleetmon-exp")
    memory_store = MemoryStore()
    # a real clock: Redis expires windows past retention, so event times must be recent
    NOW = float(int(time.time()))
    clock = {"now": NOW}
    built = [build_registry(store, PRICES, now=lambda: clock["now"]) for store in (redis_store, memory_store)]
    registries = [registry for registry, _ in built]
    assert built[0][1]._reader.incremental and not built[1][1]._reader.incremental
    slicer = Slicer()

    def apply(traces, first):
        for store in (redis_store, memory_store):
            assert store.apply(fold(traces, slicer, clock["now"]), "t:0", first, first + len(traces) - 1)

    apply(make_traces(1500, seed=11, now=NOW, spread_seconds=4000), 0)
    assert_same(*map(samples, registries))
    assert_same(*map(samples, registries))  # second scrape: served from the change-detection cache

    apply(make_traces(200, seed=12, now=NOW, spread_seconds=120), 1500)  # recent traffic into a few slices
    assert_same(*map(samples, registries))

    apply(make_traces(50, seed=13, now=NOW - 600, spread_seconds=2900), 1700)  # only old minutes change
    assert_same(*map(samples, registries))

    apply(make_traces(40, seed=14, now=NOW + 400, spread_seconds=100), 1750)  # stamped ahead: beyond the spans
    apply(make_traces(30, seed=15, now=NOW - 50 * 3600, spread_seconds=600), 1790)  # late: totals and hours only
    assert_same(*map(samples, registries))

    for minutes in (1, 2, 7, 61):  # the spans slide: windows leave and enter (the ones stamped ahead too)
        clock["now"] = NOW + 60 * minutes
        assert_same(*map(samples, registries))


def spans(now: float) -> list[tuple[float, float]]:
    return [(now - 300, now + 60), (now - 3600, now + 60)]  # the exporter's 5m and 1h


def assert_exact(got: dict, want: dict) -> None:
    """Field for field (float fields too: the reader adds them in the store's order)."""
    assert got.keys() == want.keys()
    for sid in want:
        assert got[sid].to_dict() == want[sid].to_dict(), sid
        assert got[sid].latency.count == want[sid].latency.count


class Scenario:
    """A Redis store fed batch by batch, read by a SpanReader and afresh."""

    def __init__(self, client: redis.Redis, now: float, reader: SpanReader | None = None) -> None:
        self.store = RedisStore(client, prefix="fleetmon-rd")
        self.reader = reader or SpanReader(self.store)
        self.now = now
        self.slicer = Slicer()
        self.batches: list = []
        self.offset = 0

    def apply(self, traces) -> None:
        self.batches.append(traces)
        assert self.store.apply(fold(traces, self.slicer, self.now), "t:0", self.offset, self.offset + len(traces) - 1)
        self.offset += len(traces)

    def check(self, now: float | None = None) -> dict[str, int]:
        now = self.now if now is None else now
        ids = sorted(self.store.active_slices())
        totals, sums = self.reader.read(spans(now), ids, ids)
        assert_exact(totals, self.store.totals(ids))
        for got, (start, end) in zip(sums, spans(now)):
            assert_exact(got, self.store.window_aggregates("1m", start, end, ids))
        return dict(self.reader.last_read)


def test_reader_equals_fresh_reads_through_batches_slides_late_writes_and_a_rebuild(redis_client, monkeypatch):
    monkeypatch.setattr(exporter_reads, "GROUP_SLICES", 3)  # several pipelined groups even with a few slices
    now = float(int(time.time()))
    run = Scenario(redis_client, now)
    assert run.reader.incremental
    run.apply(make_traces(1500, seed=11, now=now, spread_seconds=4000, tenants=tuple("abcde")))
    cold = run.check()
    n_slices = len(run.store.active_slices())
    assert cold["changed"] == n_slices and cold["totals_read"] == n_slices and cold["windows_fetched"] > 300
    assert run.check() == {"changed": 0, "windows_fetched": 0, "totals_followed": 0, "totals_read": 0}

    run.apply(make_traces(200, seed=12, now=now, spread_seconds=110, tenants=tuple("abcde")))  # the last 2 minutes
    recent = run.check()
    assert recent["totals_followed"] == recent["changed"] > 0 and recent["totals_read"] == 0
    assert recent["windows_fetched"] <= 3 * recent["changed"]  # only the (at most 3) windows that changed

    run.apply(make_traces(80, seed=13, now=now - 600, spread_seconds=2900, tenants=tuple("abcde")))  # old minutes
    old = run.check()  # their content before the write is not cached: those slices are summed afresh
    assert old["changed"] > 0 and old["totals_read"] == old["changed"] and old["totals_followed"] == 0
    run.apply(make_traces(60, seed=17, now=now, spread_seconds=50, tenants=tuple("abcde")))  # the current minute
    again = run.check()  # and followed again from there
    assert again["totals_followed"] == again["changed"] > 0 and again["windows_fetched"] <= 2 * again["changed"]

    run.apply(make_traces(30, seed=14, now=now - 5400, spread_seconds=300, tenants=tuple("abcde")))  # before the span
    outside = run.check()
    assert outside["totals_read"] > 0 and outside["windows_fetched"] == 0  # totals read whole: not in any window

    run.apply(make_traces(30, seed=15, now=now + 400, spread_seconds=100, tenants=tuple("abcde")))  # stamped ahead
    run.apply(make_traces(30, seed=16, now=now - 50 * 3600, spread_seconds=600, tenants=tuple("abcde")))  # late
    assert run.check()["totals_read"] > 0

    for minutes in (1, 2, 3, 7, 8, 61, 62):  # windows slide out; the ones stamped ahead slide in
        run.check(now + 60 * minutes)
    run.check(now)  # and back

    run.store.clear()  # a rebuild, replayed up to the middle: versions and counts went down
    for traces in run.batches[:3]:
        run.store.apply(fold(traces, run.slicer, now))
    rebuilt = run.check()
    assert rebuilt["changed"] == n_slices and rebuilt["totals_followed"] == 0
    for traces in run.batches[3:]:
        run.store.apply(fold(traces, run.slicer, now))
    run.check()


def test_window_counts_equal_the_windows_traces_and_expire_with_their_last_window(redis_client):
    now = float(int(time.time()))
    run = Scenario(redis_client, now)
    run.apply(make_traces(400, seed=21, now=now, spread_seconds=7200))
    store = run.store
    checked = 0
    for key in redis_client.scan_iter(match="fleetmon-rd:w:1m:*"):
        _p, _w, _res, start, sid = key.decode().split(":", 4)
        bucket = store.count_bucket(MINUTE, int(start))
        assert bucket % (60 * COUNT_BUCKET_WINDOWS) == 0 and bucket <= int(start) < bucket + 3600
        count_key = store.count_key("1m", bucket, sid)
        assert int(redis_client.hget(count_key, start)) == int(window_fields(redis_client.hgetall(key))["traces"])
        last_window_expiry = MINUTE.expire_at(bucket + 60 * (COUNT_BUCKET_WINDOWS - 1))
        assert abs(redis_client.expiretime(count_key) - last_window_expiry) <= 1
        checked += 1
    assert checked > 100
    fields = sum(redis_client.hlen(k) for k in redis_client.scan_iter(match="fleetmon-rd:wc:1m:*"))
    assert fields == checked  # one field per minute window, no more


def test_pipelined_and_one_call_at_a_time_agree_and_a_lost_script_is_reloaded(redis_client, monkeypatch, caplog):
    monkeypatch.setattr(exporter_reads, "GROUP_SLICES", 2)
    now = float(int(time.time()))
    run = Scenario(redis_client, now)
    piped, plain = run.reader, SpanReader(run.store)
    monkeypatch.setattr(plain._scripts, "wire", lambda: None)
    run.apply(make_traces(600, seed=31, now=now, spread_seconds=3000))
    with caplog.at_level(logging.WARNING, logger="fleetmon.exporter"):
        for step in range(3):
            run.apply(make_traces(100, seed=32 + step, now=now, spread_seconds=200 * (step + 1)))
            for reader in (piped, plain):
                run.reader = reader
                run.check()
    assert not caplog.records  # the pipelined reads went through as such
    run.reader = piped
    piped._scripts.by_name["fetch"].sha = "0" * 40  # as if Redis had restarted and forgotten the script
    run.apply(make_traces(50, seed=40, now=now, spread_seconds=60))
    with caplog.at_level(logging.WARNING, logger="fleetmon.exporter"):
        run.check()
    assert any("one call at a time" in r.getMessage() for r in caplog.records)
    caplog.clear()
    run.apply(make_traces(50, seed=41, now=now, spread_seconds=60))
    with caplog.at_level(logging.WARNING, logger="fleetmon.exporter"):
        run.check()
    assert not caplog.records  # reloaded: pipelined again


def test_a_write_between_the_two_scripts_is_caught_up_on_the_next_scrape(redis_client, monkeypatch):
    now = float(int(time.time()))
    run = Scenario(redis_client, now)
    run.apply(make_traces(600, seed=61, now=now, spread_seconds=3000))
    run.check()
    plan, raced = SpanReader._plan, []

    def plan_then_write(reader, *args):  # runs between a group's counts script and its fetch script
        if not raced:
            raced.append(True)
            run.apply(make_traces(80, seed=63, now=now, spread_seconds=100))
        return plan(reader, *args)

    monkeypatch.setattr(SpanReader, "_plan", plan_then_write)
    run.apply(make_traces(80, seed=62, now=now, spread_seconds=100))
    ids = sorted(run.store.active_slices())
    totals, _sums = run.reader.read(spans(now), ids, ids)
    assert raced and run.reader.last_read["totals_read"] > 0
    assert_exact(totals, run.store.totals(ids))  # the totals of a raced slice are read whole, after the write
    monkeypatch.setattr(SpanReader, "_plan", plan)
    run.check()  # and the windows caught up


def test_spans_longer_than_the_retention_are_merged_by_the_store(redis_client):
    now = float(int(time.time()))
    run = Scenario(redis_client, now)
    run.apply(make_traces(100, seed=51, now=now, spread_seconds=600))
    ids = sorted(run.store.active_slices())
    totals, (long,) = run.reader.read([(now - 49 * 3600, now + 60)], ids, ids)
    assert_exact(long, run.store.window_aggregates("1m", now - 49 * 3600, now + 60, ids))
    assert_exact(totals, run.store.totals(ids))


def test_other_spans_from_the_same_reader_are_still_fresh_reads(redis_client):
    now = float(int(time.time()))
    run = Scenario(redis_client, now)
    run.apply(make_traces(300, seed=71, now=now, spread_seconds=3000))
    run.check()
    ids = sorted(run.store.active_slices())
    for spans_now in ([(now - 3600, now + 60)], [(now - 900, now + 60), (now - 600, now + 60), (now - 3600, now + 60)],
                      spans(now)):
        run.apply(make_traces(20, seed=72 + len(spans_now), now=now, spread_seconds=100))
        totals, sums = run.reader.read(spans_now, ids, ids)
        assert_exact(totals, run.store.totals(ids))
        for got, (start, end) in zip(sums, spans_now):
            assert_exact(got, run.store.window_aggregates("1m", start, end, ids))


def test_a_window_written_as_it_slides_out_is_summed_afresh(redis_client, caplog):
    now = float(int(time.time()))
    edge = MINUTE.start(now - 3600) + 5  # in the first minute of the 1h span
    run = Scenario(redis_client, now)
    run.apply(make_traces(300, seed=81, now=now, spread_seconds=3000))
    run.apply(make_traces(20, seed=82, now=edge, spread_seconds=1))
    run.check()
    run.apply(make_traces(20, seed=83, now=edge, spread_seconds=1))  # written again, and then it slides out
    with caplog.at_level(logging.INFO, logger="fleetmon.exporter"):
        run.check(now + 60)
    assert any("did not add up" in r.getMessage() for r in caplog.records)
    run.check(now + 120)
