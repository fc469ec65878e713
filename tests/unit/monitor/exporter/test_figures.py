"""The figures' fast paths equal the sketch's own definitions on random sketches (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import Aggregate
from monitor.exporter import figures
from monitor.exporter.figures import histogram_counts, sketch_quantiles
from monitor.pricing import PriceMap
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


bucket_dicts = st.dictionaries(st.integers(-300, 300), st.integers(0, 10**6), max_size=60)


@settings(max_examples=300, deadline=None)
@given(buckets=bucket_dicts, zero=st.integers(0, 50), qs=levels,
       bounds=st.lists(st.one_of(st.sampled_from([-1.0, 0.0, math.inf]), st.floats(1e-7, 1e6)), max_size=12))
def test_the_native_bisection_is_the_python_one(buckets, zero, qs, bounds):
    """The running counts sorted and bisected natively equal the Python lists' (any order, gaps, zeros)."""
    assert figures._bucket_at_ranks is not None and figures._counts_up_to is not None
    sketch = LogSketch()
    sketch.buckets, sketch.zero_count = buckets, zero
    sketch.count = zero + sum(buckets.values())
    assert sketch_quantiles(sketch, qs) == sketch_quantiles(sketch, qs, native=False) or sketch.count == 0
    assert histogram_counts(sketch, bounds) == histogram_counts(sketch, bounds, native=False)


def test_the_native_bisection_hands_back_what_it_cannot_read():
    """Negative counts, non-int indices or counts and sums past 64 bits are left to Python (None)."""
    assert figures._counts_up_to({3: 2, 1: 5}, [0.0, 1.0, 2.5, math.inf]) == [0, 5, 5, 7]
    assert figures._bucket_at_ranks({3: 2, 1: 5}, [0, 4, 5, 6, 99]) == [1, 1, 3, 3, 3]
    for odd in ({1: -1}, {1.5: 2}, {1: 2.0}, {1: 2**63}, {1: 2**62, 2: 2**62}, {2**60: 1}):
        assert figures._counts_up_to(odd, [math.inf]) is None
        assert figures._bucket_at_ranks(odd, [0]) is None
    assert figures._bucket_at_ranks({}, [0]) is None
    sketch = LogSketch()
    sketch.buckets, sketch.count = {5: -1, 7: 3}, 2  # not a sketch the store writes: the Python loop decides
    assert sketch_quantiles(sketch, [0.0, 1.0]) == sketch_quantiles(sketch, [0.0, 1.0], native=False)


PRICES = PriceMap.from_toml("""
[[price]]
model = "*"
effective_from = 2025-01-01
input = 3.0
output = 15.0
cached_input = 0.30

[[price]]
model = "m:b"
effective_from = 2025-01-01
input = 0.7
output = 2.9
cached_input = 0.07

[[price]]
model = "m:b"
effective_from = 2026-01-01
input = 1.1
output = 4.4
cached_input = 0.11
""")
token_field = st.tuples(st.sampled_from(["tokens_in:", "tokens_cached_in:", "tokens_out:", "tokens_solved:", "x"]),
                        st.sampled_from(["a", "m:b", "", "c", "d", "e"])).map("".join)
token_value = st.one_of(st.integers(0, 10**9), st.floats(0.0, 1e9, allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(fields=st.dictionaries(st.one_of(token_field, st.sampled_from(["traces", "fees_usd"])), token_value,
                              max_size=20),
       at=st.one_of(st.none(), st.sampled_from([1.7e9, 1.8e9])), shuffle=st.data())
def test_the_cost_is_the_aggregates_own_in_any_counter_order(fields, at, shuffle):
    """Several models (whose order would decide a left fold's additions), fees, float tokens, odd model
    names: Aggregate.cost_usd's own figure to the bit and type, the same for the counters in any order,
    and the exactly rounded sum of its terms."""
    agg = Aggregate(dict(fields))
    got, want = figures.cost_usd(agg, PRICES, at), agg.cost_usd(PRICES, at)
    assert got == want and type(got) is type(want), (got, want)
    permuted = Aggregate(dict(shuffle.draw(st.permutations(list(fields.items())))))
    assert figures.cost_usd(permuted, PRICES, at) == got
    assert permuted.cost_usd(PRICES, at) == got
    terms = [fields.get("fees_usd", 0.0), *(PRICES.price_for(model, at).cost_usd(
        t["tokens_in"], t["tokens_cached_in"], t["tokens_out"]) for model, t in agg.tokens_by_model().items())]
    assert got == math.fsum(terms)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.one_of(token_field, st.sampled_from(["traces", "fees_usd"])), token_value,
                              max_size=20),
       at=st.one_of(st.none(), st.sampled_from([1.7e9, 1.8e9])))
def test_token_sums_are_the_aggregates_tokens_and_price_the_same_cost(fields, at):
    """Each kind's total is Aggregate.tokens to the bit and type (float tokens summed in counter order),
    and the models' tokens priced by cost_of (or cost_usd with a memo of price_for) give its cost."""
    agg = Aggregate(dict(fields))
    models, kinds = figures.token_sums(agg)
    want = [agg.tokens(kind) for kind in ("tokens_in", "tokens_cached_in", "tokens_out")]
    assert list(kinds) == want and [type(k) for k in kinds] == [type(w) for w in want]
    cost = agg.cost_usd(PRICES, at)
    assert figures.cost_of(models, fields.get("fees_usd", 0.0), PRICES, at) == cost
    assert figures.cost_usd(agg, PRICES, at, lambda model: PRICES.price_for(model, at)) == cost


def test_the_cost_parses_past_the_cap_of_remembered_names(monkeypatch):
    monkeypatch.setattr(figures, "_TOKEN_FIELDS_CACHED", len(figures._TOKEN_FIELDS))  # remembers nothing new
    agg = Aggregate({"tokens_in:never-seen": 1_000_000, "tokens_out:never-seen": 10, "fees_usd": 0.5, "x-new": 1})
    assert figures.cost_usd(agg, PRICES, 1.8e9) == agg.cost_usd(PRICES, 1.8e9)
    assert "x-new" not in figures._CLASSIFIED


@settings(max_examples=300, deadline=None)
@given(data=values, accuracy=st.sampled_from([0.01, 0.02]), shuffle=st.data())
def test_the_windows_latency_quantiles_are_sketch_quantiles(data, accuracy, shuffle):
    """Zero counts or not, empty or not: the window's quantiles are sketch_quantiles', None where not finite."""
    sketch = sketch_of(data, accuracy, shuffle)
    want = [q if math.isfinite(q) else None for q in sketch_quantiles(sketch, figures._QUANTILE_LEVELS)]
    assert figures._latency_quantiles(sketch) == want


def test_the_windows_rates_are_rate_figures_to_the_bit():
    for n in [*range(0, 80), 99, 100, 1000, 10**6 + 7]:
        for k in sorted({*range(0, min(n, 80) + 1), n // 3, n - 1, n} - {-1}):
            assert figures._rates(k, n) == figures.rate_figures(k, n) or n == 0, (k, n)
    assert math.isnan(figures._rates(0, 0)[0]) and figures._rates(0, 0)[1:] == (0.0, 1.0)
