"""Invariants of the aggregates and the fold (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.fold import fold
from monitor.groupings import grouping_name, grouping_set
from monitor.schema import validate
from monitor.slices import CardinalityGuard, Slicer, parse_slice_id
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

NOW = 1_800_000_000.0

trace_records = st.fixed_dictionaries({
    "trace_id": st.text(min_size=1, max_size=5),
    "ts": st.floats(min_value=NOW - 40 * 86400, max_value=NOW),
    "model_id": st.sampled_from(["m1", "m2", "m3"]),
    "release": st.sampled_from(["r1", "r2"]),
    "tenant": st.sampled_from(["a", "b", "c", "d"]),
    "ok": st.booleans(),
    "tokens_in": st.integers(0, 10_000),
    "tokens_out": st.integers(0, 10_000),
    "steps": st.integers(0, 50),
    "fees_usd": st.floats(min_value=0, max_value=1),
    "latency_ms": st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
    "harmful_action": st.booleans(),
}).map(lambda r: validate({k: v for k, v in r.items() if v is not None}))

trace_lists = st.lists(trace_records, max_size=25)


@settings(max_examples=100, deadline=None)
@given(trace_lists, trace_lists, trace_lists)
def test_merge_is_associative_and_commutative_with_empty_identity(a, b, c):
    x, y, z = Aggregate.of(a), Aggregate.of(b), Aggregate.of(c)
    assert x + y == y + x
    assert (x + y) + z == x + (y + z)
    assert x + Aggregate() == x
    assert x + y + z == Aggregate.of(a + b + c)


@settings(max_examples=100, deadline=None)
@given(trace_lists, trace_lists)
def test_serial_form_merges_like_the_aggregate(a, b):
    x, y = Aggregate.of(a), Aggregate.of(b)
    flat = dict(x.to_dict())
    for key, value in y.to_dict().items():
        flat[key] = flat.get(key, 0) + value
    assert Aggregate.from_dict(flat) == x + y


def _same_delta(left: BatchDelta, right: BatchDelta) -> None:
    assert left.windows == right.windows
    assert left.totals == right.totals
    assert left.counters == right.counters
    assert left.last_seen == right.last_seen
    assert left.expire_at == right.expire_at


@settings(max_examples=100, deadline=None)
@given(trace_lists, trace_lists, st.integers(1, 4))
def test_fold_of_union_equals_merge_of_folds(a, b, cap):
    # The guard admits first-seen values, so both sides see the traces in the same order.
    union = fold(a + b, Slicer(dimensions=("release", "tenant"), guard=CardinalityGuard(cap)), NOW)
    slicer = Slicer(dimensions=("release", "tenant"), guard=CardinalityGuard(cap))
    parts = fold(a, slicer, NOW).merge(fold(b, slicer, NOW))
    _same_delta(union, parts)
    # and folding into an existing delta is the same as merging
    slicer = Slicer(dimensions=("release", "tenant"), guard=CardinalityGuard(cap))
    _same_delta(union, fold(b, slicer, NOW, delta=fold(a, slicer, NOW)))


@settings(max_examples=100, deadline=None)
@given(trace_lists)
def test_every_counted_trace_is_in_one_window_per_retained_resolution(traces):
    delta = fold(traces, Slicer(), NOW)
    names = grouping_set(Slicer().dimensions).names()
    assert sum(agg.traces for agg in delta.totals.values()) == len(names) * len(traces)  # once per grouping
    for name in names:
        total = sum(agg.traces for sid, agg in delta.totals.items() if grouping_name(parse_slice_id(sid)) == name)
        assert total == len(traces) == delta.counters.get("traces", 0)
        for res in DEFAULT_RESOLUTIONS:
            kept = [t for t in traces if not res.expired(res.start(t.ts), NOW)]
            in_windows = sum(agg.traces for (res_name, _, sid), agg in delta.windows.items()
                             if res_name == res.name and grouping_name(parse_slice_id(sid)) == name)
            assert in_windows == len(kept)
    late = sum(any(res.expired(res.start(t.ts), NOW) for res in DEFAULT_RESOLUTIONS) for t in traces)
    assert delta.counters.get("late", 0) == late


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0, max_value=4e9, allow_nan=False),
       st.sampled_from([1, 60, 300, 3600, 86400]))
def test_each_timestamp_falls_in_exactly_one_window(ts, size):
    res = Resolution("w", size, size)
    start, end = res.ranges(ts)
    assert start <= ts < end and end - start == size
    assert start % size == 0
    # neighbouring windows do not contain it (half-open intervals)
    assert not (start - size <= ts < start) and not (end <= ts < end + size)
    assert res.starts_between(ts, end) == [start]
