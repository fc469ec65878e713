"""The exporter's incremental path never diverges from a cold full read (hypothesis, over the real Redis).

Random sequences of applies (recent traffic, late minutes, before the spans, stamped ahead),
clock moves (the spans slide) and rebuilds (the store cleared and replayed in part), with a
scrape after each step: the long-lived exporter's body equals, byte for byte, the body of a
fresh exporter built on the same store at that moment, and its reader's sums equal the
store's own merge of the windows field for field. With a small ``max_series`` most rows are
folded into ``__other__`` rows, which the long-lived exporter moves by its members' changes
(monitor/exporter/folds.py) while the fresh one merges them: the bodies must still be equal.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.exporter.collector import build_registry
from monitor.exporter.exposition import render
from monitor.fold import fold
from monitor.pricing import PriceMap
from monitor.slices import Slicer, slice_id
from monitor.store.redis import reads as exporter_reads
from monitor.store.redis.store import RedisStore
from monitor.windows import MINUTE
from tests.support.traces import make_traces

PRICES = PriceMap.load()
TENANTS = tuple("abcd")

#: (kind, seed, how far back from the clock in seconds, spread in seconds, traces)
apply_step = st.tuples(st.just("apply"), st.integers(0, 10_000),
                       st.sampled_from([0, 0, 0, 30, 90, 200, 900, 3000, 3500, 5400, -120]),
                       st.sampled_from([1, 20, 60, 110, 600]), st.integers(1, 40))
clock_step = st.tuples(st.just("clock"), st.sampled_from([0, 1, 1, 2, 5, 61]))
rebuild_step = st.tuples(st.just("rebuild"), st.integers(0, 3))
steps = st.lists(st.one_of(apply_step, apply_step, apply_step, clock_step, rebuild_step), min_size=2, max_size=9)


def body(registry) -> bytes:
    return b"\n".join(line for line in render(registry)[0].split(b"\n")
                      if not line.startswith(b"fleetmon_scrape_duration_seconds "))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps, group=st.sampled_from([1, 2, 250]), max_series=st.sampled_from([1_000_000, 3_000, 900, 400]))
def test_incremental_scrapes_equal_a_fresh_exporter(redis_client: redis.Redis, monkeypatch, plan, group, max_series):
    monkeypatch.setattr(exporter_reads, "GROUP_SLICES", group)  # several pipelined groups with a few slices
    store = RedisStore(redis_client, prefix=f"fleetmon-inc-{uuid.uuid4().hex[:8]}")
    start = float(int(time.time()))
    clock = {"now": start}
    now = lambda: clock["now"]  # noqa: E731 - the exporters' injected clock
    slicer = Slicer()
    batches: list = []
    registry, collector = build_registry(store, PRICES, now=now, max_series=max_series)
    try:
        for step in [("apply", 0, 0, 3000, 300), *plan]:
            if step[0] == "apply":
                _kind, seed, back, spread, n = step
                traces = make_traces(n, seed=seed, now=clock["now"] - back, spread_seconds=spread, tenants=TENANTS)
                batches.append((traces, clock["now"]))
                store.apply(fold(traces, slicer, clock["now"]))
            elif step[0] == "clock":
                clock["now"] += 60 * step[1]
            else:  # a rebuild: cleared, then the first batches replayed (counts and versions go down)
                store.clear()
                for traces, at in batches[:step[1]]:
                    store.apply(fold(traces, slicer, at))
                del batches[step[1]:]
            fresh_registry, _fresh = build_registry(store, PRICES, now=now, max_series=max_series)
            assert body(registry) == body(fresh_registry), step
            ids = sorted(store.active_slices())
            spans = [(clock["now"] - seconds, clock["now"] + 60) for _name, seconds in collector.windows]
            reader = collector._reader
            totals, sums = reader.read(spans, ids, ids)  # nothing moved since the scrape: the cache as it is
            assert {s: a.to_dict() for s, a in totals.items()} == {s: a.to_dict() for s, a in store.totals(ids).items()}
            for got, (low, high) in zip(sums, spans):
                want = store.window_aggregates("1m", low, high, ids)
                assert {s: a.to_dict() for s, a in got.items()} == {s: a.to_dict() for s, a in want.items()}, step
    finally:
        store.clear()


def test_folded_rows_move_by_their_members_changes(redis_client: redis.Redis):
    """Most rows folded, traffic into every slice between scrapes: the ``__other__`` rows are moved by
    their members' changes (not merged afresh) and the body still equals a fresh exporter's."""
    store = RedisStore(redis_client, prefix=f"fleetmon-fold-{uuid.uuid4().hex[:8]}")
    clock = {"now": float(int(time.time()))}
    now = lambda: clock["now"]  # noqa: E731 - the exporters' injected clock
    slicer = Slicer()
    registry, collector = build_registry(store, PRICES, now=now, max_series=900)
    try:
        moved = 0
        for seed in range(6):
            store.apply(fold(make_traces(400, seed=seed, now=clock["now"], spread_seconds=600, tenants=TENANTS),
                             slicer, clock["now"]))
            clock["now"] += 20
            fresh_registry, _fresh = build_registry(store, PRICES, now=now, max_series=900)
            assert body(registry) == body(fresh_registry), seed
            assert collector.folded_slices > 0
            moved += collector._folds.last["moved"]
        assert moved > 0
    finally:
        store.clear()


def test_a_sum_whose_models_came_in_another_order_costs_as_a_fresh_one(redis_client: redis.Redis):
    """Three models, the oldest window of the hour holding one that a newer window holds too: once that
    window slides out, the long-lived reader's hour sum keeps the model where it first came and a fresh
    sum lists it where its newest window has it. The cost (a sum over the models) must not depend on
    that order: the bodies are equal byte for byte (a left fold in counter order differed in the last
    digit for some of these slices)."""
    store = RedisStore(redis_client, prefix=f"fleetmon-inc-{uuid.uuid4().hex[:8]}")
    start = float(MINUTE.start(time.time()))
    clock = {"now": start + 1}
    now = lambda: clock["now"]  # noqa: E731 - the exporters' injected clock
    registry, _collector = build_registry(store, PRICES, now=now)
    try:
        delta = BatchDelta()
        for seed in range(20):
            sid = slice_id((("release", "r1"), ("arm", f"arm-{seed}")))
            total = Aggregate()
            for back, models in ((3600, ("m-a", "m-a")), (1800, ("m-b", "m-b")), (600, ("m-c", "m-a", "m-c"))):
                traces = make_traces(len(models), seed=100 * seed + back, now=start - back, spread_seconds=1)
                window = Aggregate.of(dataclasses.replace(t, ts=start - back, model_id=m)
                                      for t, m in zip(traces, models))
                delta.windows[(MINUTE.name, int(start) - back, sid)] = window
                delta.expire_at[(MINUTE.name, int(start) - back)] = MINUTE.expire_at(int(start) - back)
                total.merge(window)
            delta.totals[sid] = total
            delta.last_seen[sid] = start
        store.apply(delta)
        body(registry)  # the sums read cold, the oldest window in the hour
        clock["now"] += 60  # it slides out: the long-lived sums take it out, the fresh ones never saw it
        fresh_registry, _fresh = build_registry(store, PRICES, now=now)
        assert body(registry) == body(fresh_registry)
    finally:
        store.clear()
