"""Aggregate.subtract and LogSketch.subtract: the exact inverse of merge, never below zero."""

import math

import pytest

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.schema import validate
from monitor.sketch import LogSketch


def trace(i, **kw):
    base = {"trace_id": f"t{i}", "ts": 1_750_000_000 + i, "model_id": ["m1", "m2"][i % 2],
            "outcome": ["success", "failure", "abandoned"][i % 3], "tokens_in": 100 * i, "tokens_out": 7 * i,
            "latency_ms": 50.0 * (i % 13), "fees_usd": 0.1 * (i % 4), "benign": i % 5 != 0,
            "refused": i % 7 == 0, "harmful_action": i % 11 == 0}
    base.update(kw)
    return validate(base)


def test_sketch_subtract_undoes_merge_and_drops_empty_buckets():
    a, b = LogSketch(), LogSketch()
    a.extend([0.0, 0.1, 1.0, 1.0, 5.0])
    b.extend([0.0, 1.0, 300.0])
    both = a + b
    assert both.subtract(b) == a
    assert both.buckets == a.buckets  # the 300 s bucket is gone, not left at 0
    assert both.count == a.count and both.zero_count == a.zero_count
    assert both.quantiles([0.5, 0.99]) == a.quantiles([0.5, 0.99])
    assert a.copy().subtract(a).buckets == {} and a.copy().subtract(a).count == 0


def test_sketch_subtract_refuses_to_go_negative_and_changes_nothing():
    a, b = LogSketch(), LogSketch()
    a.extend([1.0, 2.0])
    b.extend([1.0, 1.0])
    before = a.copy()
    with pytest.raises(ValueError, match=r"cannot subtract 2 from sketch bucket \d+, which holds 1"):
        a.subtract(b)
    assert a == before and a.count == before.count
    zeros = LogSketch()
    zeros.add(0.0, 3)
    with pytest.raises(ValueError, match="zero bucket"):
        LogSketch().subtract(zeros)
    with pytest.raises(ValueError, match="different parameters"):
        a.subtract(LogSketch(relative_accuracy=0.02))


def test_aggregate_subtract_undoes_merge_exactly():
    left = Aggregate.of(trace(i) for i in range(40))
    right = Aggregate.of(trace(i, release="r2", model_id="m3") for i in range(40, 75))
    both = left + right
    back = both.copy().subtract(right)
    assert back == left
    # integer counts field for field, with no zero left behind
    def ints(agg):
        return {k: v for k, v in agg.counts.items() if k not in FLOAT_FIELDS and v}

    assert ints(back) == ints(left)
    assert not any(k.endswith(":m3") for k in back.counts)
    for key in FLOAT_FIELDS:
        assert math.isclose(back.get(key), left.get(key), rel_tol=1e-12, abs_tol=1e-12)
    assert back.latency == left.latency
    assert both.subtract(both).counts == {} and both.latency.count == 0


def test_float_fields_left_at_rounding_residue_are_removed():
    # 0.1 + 0.2 - 0.3 is 5.6e-17 in floating point, not 0
    agg = Aggregate({"fees_usd": 0.1 + 0.2, "traces": 2})
    agg.subtract(Aggregate({"fees_usd": 0.30000000000000004 - 0.1, "traces": 1}))
    agg.subtract(Aggregate({"fees_usd": 0.1, "traces": 1}))
    assert agg.counts == {}


def test_aggregate_subtract_refuses_to_go_negative_and_changes_nothing():
    agg = Aggregate.of(trace(i) for i in range(5))
    before = agg.copy()
    more = Aggregate.of(trace(i) for i in range(6))
    with pytest.raises(ValueError, match=r"cannot subtract \S+=\d+ from \d+: counts must stay >= 0"):
        agg.subtract(more)
    with pytest.raises(ValueError, match=r"cannot subtract traces=1 from 0"):
        Aggregate().subtract(Aggregate({"traces": 1}))
    assert agg == before and agg.counts == before.counts
    # a float sum is not exact: taking out more than it holds leaves 0, never less
    fees = Aggregate({"fees_usd": 0.3, "traces": 1})
    assert fees.subtract(Aggregate({"fees_usd": 0.30000000000000004})).counts == {"traces": 1}
    # the sketch is checked before the counts change
    other = Aggregate.of([trace(99, latency_ms=123456.0)])
    other.counts = {}
    with pytest.raises(ValueError, match="sketch bucket"):
        agg.subtract(other)
    assert agg.counts == before.counts and agg.latency == before.latency
