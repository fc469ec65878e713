"""fold + MemoryStore (no Redis): counts, late, folded values, exactly-once skip."""

import random

import pytest

from monitor.aggregate import Aggregate
from monitor.fold import fold
from monitor.groupings import grouping_name
from monitor.schema import validate
from monitor.slices import OTHER, CardinalityGuard, Slicer, parse_slice_id
from monitor.store.memory import MemoryStore
from monitor.windows import DEFAULT_RESOLUTIONS, HOUR, MINUTE

NOW = 1_800_000_000.0


def by_grouping(aggregates):
    """``{grouping: merged rows}``: each grouping's rows hold every trace once."""
    out = {}
    for sid, agg in aggregates.items():
        out.setdefault(grouping_name(parse_slice_id(sid)), Aggregate()).merge(agg)
    return out


def make_traces(n, seed=3, age_seconds=3000.0, tenants=4):
    rng = random.Random(seed)
    return [validate({
        "trace_id": f"t{i}", "ts": NOW - rng.random() * age_seconds, "model_id": rng.choice(["m1", "m2"]),
        "release": rng.choice(["r1", "r2"]), "tenant": f"tenant-{rng.randrange(tenants)}",
        "ok": rng.random() < 0.6, "tokens_in": rng.randrange(1000), "tokens_out": rng.randrange(100),
        "latency_ms": rng.random() * 4000}) for i in range(n)]


def test_counts_equal_the_input_in_totals_and_windows():
    traces = make_traces(500)
    store = MemoryStore()
    assert store.apply(fold(traces, Slicer(), NOW), "t:0", 0, 499)
    groupings = by_grouping(store.totals())
    assert sorted(groupings) == ["", "locale", "task_type", "task_type,locale", "task_type,tenant", "tenant"]
    for totals in groupings.values():  # every trace once in each grouping
        assert totals.traces == 500
        assert totals.successes == sum(t.success for t in traces)
        assert totals.tokens("tokens_in") == sum(t.tokens_in for t in traces)
        assert totals.tokens("tokens_out") == sum(t.tokens_out for t in traces)
    ids = list(store.active_slices())
    for res in DEFAULT_RESOLUTIONS:
        windows = by_grouping(store.window_aggregates(res.name, NOW - 4000, NOW + 1, ids))
        assert windows == groupings  # every trace is in exactly one window of each resolution, per grouping
    assert store.counters() == {"traces": 500}


def test_per_slice_totals_match_a_direct_count():
    traces = make_traces(300)
    store = MemoryStore()
    store.apply(fold(traces, Slicer(dimensions=("release", "tenant")), NOW))
    rows = store.totals()
    assert {grouping_name(parse_slice_id(sid)) for sid in rows} == {"", "tenant"}
    for sid, agg in rows.items():
        values = dict(parse_slice_id(sid))
        mine = [t for t in traces if t.release == values["release"] and t.tenant == values.get("tenant", t.tenant)]
        assert agg == Aggregate.of(mine)


def test_traces_older_than_retention_are_late_but_still_in_totals():
    fresh = make_traces(10, age_seconds=60)
    stale_minute = [validate({"trace_id": "old1", "ts": NOW - MINUTE.retention_seconds - 120, "model_id": "m",
                              "ok": True})]
    stale_both = [validate({"trace_id": "old2", "ts": NOW - HOUR.retention_seconds - 7200, "model_id": "m",
                            "ok": True})]
    delta = fold(fresh + stale_minute + stale_both, Slicer(), NOW)
    assert delta.counters["late"] == 2
    assert delta.counters["traces"] == 12
    base = {key: a.traces for key, a in delta.windows.items() if grouping_name(parse_slice_id(key[2])) == ""}
    assert sum(n for (res, _, _), n in base.items() if res == "1m") == 10
    assert sum(n for (res, _, _), n in base.items() if res == "1h") == 11
    assert {g: a.traces for g, a in by_grouping(delta.totals).items()} == dict.fromkeys(
        ["", "task_type", "tenant", "locale", "task_type,tenant", "task_type,locale"], 12)


def test_values_past_the_cap_fold_into_other_and_are_counted():
    traces = make_traces(400, tenants=10)
    delta = fold(traces, Slicer(dimensions=("tenant",), guard=CardinalityGuard(3)), NOW)
    tenants = {dict(parse_slice_id(sid))["tenant"] for sid in delta.totals if sid}  # "": the whole fleet
    assert len(tenants - {OTHER}) == 3 and OTHER in tenants
    admitted = tenants - {OTHER}
    assert delta.counters["folded:tenant"] == sum(t.tenant not in admitted for t in traces)
    assert delta.totals[f"tenant={OTHER}"].traces == delta.counters["folded:tenant"]


def test_a_literal_other_value_is_not_counted_as_folded():
    traces = [validate({"trace_id": "a", "ts": NOW, "model_id": "m", "ok": True, "tenant": OTHER})]
    delta = fold(traces, Slicer(dimensions=("tenant",), guard=CardinalityGuard(1)), NOW)
    assert "folded:tenant" not in delta.counters


def test_redelivered_batch_is_skipped_and_counts_stay_exact():
    traces = make_traces(200)
    store = MemoryStore()
    slicer = Slicer()
    assert store.apply(fold(traces[:100], slicer, NOW), "t:0", 0, 99)
    assert store.apply(fold(traces[100:], slicer, NOW), "t:0", 100, 199)
    # at-least-once delivery: the second batch again, then an overlapping one
    assert not store.apply(fold(traces[100:], slicer, NOW), "t:0", 100, 199)
    assert not store.apply(fold(traces[150:], slicer, NOW), "t:0", 150, 199)
    assert store.applied_offset("t:0") == 199
    assert list(by_grouping(store.totals()).values()) == [Aggregate.of(traces)] * 6
    assert store.counters()["traces"] == 200


def test_overlap_refused_then_refolded_after_the_watermark():
    """What the worker does when another consumer applied part of its batch."""
    traces = make_traces(100)
    store = MemoryStore()
    slicer = Slicer()
    store.apply(fold(traces[:60], slicer, NOW), "t:0", 0, 59)          # the other consumer
    assert not store.apply(fold(traces[:100], slicer, NOW), "t:0", 0, 99)
    mark = store.applied_offset("t:0")
    rest = [t for offset, t in enumerate(traces) if offset > mark]
    assert store.apply(fold(rest, slicer, NOW), "t:0", mark + 1, 99)
    assert list(by_grouping(store.totals()).values()) == [Aggregate.of(traces)] * 6


def test_sources_have_independent_watermarks():
    traces = make_traces(20)
    store = MemoryStore()
    assert store.apply(fold(traces[:10], Slicer(), NOW), "t:0", 0, 9)
    assert store.apply(fold(traces[10:], Slicer(), NOW), "t:1", 0, 9)
    assert store.applied_offsets() == {"t:0": 9, "t:1": 9}
    assert store.counters()["traces"] == 20


def test_fold_needs_event_time():
    compact = validate({"agent": "a", "task": "x", "ok": True})
    with pytest.raises(ValueError, match="has no ts"):
        fold([compact], Slicer(), NOW)
