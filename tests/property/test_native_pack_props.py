"""The worker's native window packing and dict arithmetic (native/src/pack.rs, window.rs's ``add_into``)
give exactly what the Python code gives, on any aggregate a fold or a hand could build."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.sketch import LogSketch, add_counts
from monitor.store.redis import packed
from monitor.store.redis.packed import pack, pack_python

native = pytest.mark.skipif(packed._PACKER is None, reason="fleetmon_native is not built (`make install`)")

names = st.one_of(
    st.sampled_from(["traces", "successes", "steps", "tokens_in:model-a", "outcome:success", *sorted(FLOAT_FIELDS)]),
    st.text(min_size=1, max_size=12),   # control characters, quotes, backslashes, non-ASCII: escaped or not
)
ints = st.one_of(st.integers(-5, 10**6), st.integers(-(2**70), 2**70), st.booleans())
floats = st.floats(allow_nan=True, allow_infinity=True)
values = st.one_of(ints, floats)


def sketch_of(buckets: dict[int, int], zero: int | float) -> LogSketch:
    sketch: Any = LogSketch()   # a hand can put any number where a fold puts ints
    sketch.buckets = dict(buckets)
    sketch.zero_count = zero
    sketch.count = sum(buckets.values()) + zero
    return sketch


@st.composite
def aggregates(draw: st.DrawFn) -> Aggregate:
    counts = draw(st.dictionaries(names, values, max_size=25))
    buckets = draw(st.dictionaries(st.one_of(st.integers(-3000, 3000), st.integers(-(2**70), 2**70)),
                                   st.one_of(st.integers(0, 10**9), st.integers(2**63, 2**64), st.booleans()),
                                   max_size=60))
    zero = draw(st.one_of(st.integers(0, 10**6), st.just(0), st.booleans(), st.integers(2**63, 2**64)))
    return Aggregate(counts, sketch_of(buckets, zero))


def python_text(agg: Aggregate) -> str | Exception:
    try:
        return pack_python(agg)
    except Exception as exc:  # noqa: BLE001 - the native path must fail (or fall back) alike
        return exc


@native
@settings(max_examples=400, deadline=None)
@given(aggregates())
def test_native_packing_writes_what_python_writes(agg):
    expected = python_text(agg)
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)):
            pack(agg)
        return
    assert pack(agg) == expected
    # and when the native packer answers at all, its answer is that text
    text = packed._PACKER.pack(agg.counts, agg.latency.buckets, agg.latency.zero_count)
    assert text is None or text == expected


@native
def test_native_packing_answers_for_what_a_fold_builds():
    from tests.support.traces import make_traces
    traces = make_traces(400, seed=3)
    agg = Aggregate.of(traces)
    agg.counts["fees_usd"] = 0.1 + 0.2
    agg.counts["latency_sum_seconds"] = 1e-7
    agg.latency.add(0.0)
    text = packed._PACKER.pack(agg.counts, agg.latency.buckets, agg.latency.zero_count)
    assert text is not None and text == pack_python(agg)  # the common case is not left to Python
    assert '"fees_usd","0.30000000000000004"' in text and '"latency_sum_seconds","1e-07"' in text


def add_counts_reference(dst: dict, src: dict) -> dict:
    out = dict(dst)
    for key, value in src.items():
        out[key] = out.get(key, 0) + value
    return out


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(names, values, max_size=20), st.dictionaries(names, values, max_size=20))
def test_add_counts_is_the_python_loop(dst, src):
    expected = add_counts_reference(dst, src)
    got = dict(dst)
    add_counts(got, src)
    assert list(got) == list(expected)   # new keys appended in src's order
    for key in expected:
        a, b = got[key], expected[key]
        assert type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))
        if isinstance(a, float):
            assert math.copysign(1.0, a) == math.copysign(1.0, b)   # -0.0 stays what Python makes of it


def test_add_counts_into_itself_doubles_like_the_loop():
    counts = {"a": 1, "b": 2.5}
    add_counts(counts, counts)
    assert counts == {"a": 2, "b": 5.0}
