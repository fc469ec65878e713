"""The figures' fast paths equal the sketch's own definitions on random sketches (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.exporter.figures import histogram_counts, sketch_quantiles
from monitor.sketch import LogSketch

values = st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1e-5), st.floats(1e-6, 1e5)), max_size=300)
levels = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6)


def sketch_of(data: list[float], accuracy: float, shuffle: st.DataObject) -> LogSketch:
    sketch = LogSketch(accuracy)
    sketch.extend(data)
    items = shuffle.draw(st.permutations(list(sketch.buckets.items())))  # merges leave buckets out of order
    sketch.buckets = dict(items)
    return sketch


@settings(max_examples=300, deadline=None)
@given(data=values, qs=levels, accuracy=st.sampled_from([0.01, 0.02, 0.05]), shuffle=st.data())
def test_sketch_quantiles_are_the_sketch_quantiles(data, qs, accuracy, shuffle):
    sketch = sketch_of(data, accuracy, shuffle)
    want = sketch.quantiles([*qs, 0.0, 0.5, 1.0])
    got = sketch_quantiles(sketch, [*qs, 0.0, 0.5, 1.0])
    assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(got, want)), (got, want)


@settings(max_examples=300, deadline=None)
@given(data=values, bounds=st.lists(st.one_of(st.sampled_from([-1.0, 0.0, 0.1, 2.5, math.inf]), st.floats(1e-7, 1e6)),
                                    min_size=1, max_size=12), shuffle=st.data())
def test_histogram_counts_are_count_below_for_unsorted_bounds(data, bounds, shuffle):
    sketch = sketch_of(data, 0.01, shuffle)
    assert histogram_counts(sketch, bounds) == [sketch.count_below(b) for b in bounds]


def test_a_level_outside_zero_one_is_refused():
    sketch = LogSketch()
    sketch.add(1.0)
    with pytest.raises(ValueError, match=r"q must be in \[0, 1\], got 1.5"):
        sketch_quantiles(sketch, [1.5])
