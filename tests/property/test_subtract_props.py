"""Subtract is the inverse of merge (hypothesis): a sliding sum never drifts and never goes negative."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.schema import validate
from monitor.sketch import LogSketch

NOW = 1_800_000_000.0

trace_records = st.fixed_dictionaries({
    "trace_id": st.text(min_size=1, max_size=5),
    "ts": st.floats(min_value=NOW - 3600, max_value=NOW),
    "model_id": st.sampled_from(["m1", "m2", "m3"]),
    "ok": st.booleans(),
    "tokens_in": st.integers(0, 10_000),
    "tokens_out": st.integers(0, 10_000),
    "fees_usd": st.floats(min_value=0, max_value=1),
    "latency_ms": st.one_of(st.none(), st.floats(min_value=0, max_value=1e6)),
    "harmful_action": st.booleans(),
    "benign": st.booleans(),
    "refused": st.booleans(),
}).map(lambda r: validate({k: v for k, v in r.items() if v is not None}))

trace_lists = st.lists(trace_records, max_size=20)
values = st.lists(st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e6)), max_size=60)


def sketch_of(xs):
    s = LogSketch()
    s.extend(xs)
    return s


def _ints(agg):
    """The nonzero integer counts (Aggregate.update may write a 0; subtract removes them)."""
    return {k: v for k, v in agg.counts.items() if k not in FLOAT_FIELDS and v}


@settings(max_examples=150, deadline=None)
@given(values, values)
def test_sketch_subtract_inverts_merge(a, b):
    sa, sb = sketch_of(a), sketch_of(b)
    back = (sa + sb).subtract(sb)
    assert back == sa and back.buckets == sa.buckets and back.count == sa.count
    assert all(n > 0 for n in back.buckets.values())


@settings(max_examples=100, deadline=None)
@given(trace_lists, trace_lists)
def test_aggregate_subtract_inverts_merge(a, b):
    x, y = Aggregate.of(a), Aggregate.of(b)
    back = (x + y).subtract(y)
    assert _ints(back) == _ints(x) and back.latency == x.latency
    for key in FLOAT_FIELDS:  # as exact as float sums are: within 1e-9 of what was taken out
        tolerance = 1e-9 * (abs(x.get(key)) + abs(y.get(key))) + 1e-12
        assert abs(back.get(key) - x.get(key)) <= tolerance, key
    assert all(v >= 0 for v in back.counts.values())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(trace_records, max_size=8), min_size=2, max_size=8), st.integers(1, 4))
def test_a_sliding_sum_equals_the_sum_of_its_windows(windows, span):
    """Slide a span over windows by subtracting what leaves and adding what comes.

    Integer counts and sketch buckets stay exact; the float fields only up to
    rounding, which is why the exporter's reader re-sums those from the parts.
    """
    aggs = [Aggregate.of(w) for w in windows]
    running = Aggregate()
    for i, agg in enumerate(aggs):
        running.merge(agg)
        if i >= span:
            running.subtract(aggs[i - span])
        fresh = Aggregate()
        for part in aggs[max(0, i - span + 1):i + 1]:
            fresh.merge(part)
        assert _ints(running) == _ints(fresh)
        assert running.latency == fresh.latency
        for key in FLOAT_FIELDS:
            # a running float sum carries the rounding of the largest value it ever held, and subtract
            # zeroes a residue within 1e-9 of what it takes out (its documented contract)
            largest = max(abs(a.get(key)) for a in aggs[:i + 1]) * span
            assert math.isclose(running.get(key), fresh.get(key), rel_tol=1e-9, abs_tol=1e-9 * largest + 1e-300)
