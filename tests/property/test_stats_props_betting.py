"""Invariants of the betting e-processes and their bounds, for any counts, levels and alpha.

The duality is exact: each test rejects a hypothesised mean iff its bound
excludes it. Bounds stay in range, bracket the sample mean, and move the way
the counts push them; histogram rounding never raises the wealth.
"""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from monitor.stats.betting import (
    BET_FRACTIONS,
    flip_e_value,
    flip_e_value_below,
    flip_lower_bound,
    flip_upper_bound,
    rate_e_value,
    rate_e_value_below,
    rate_lower_bound,
    rate_upper_bound,
)
from monitor.stats.betting_histogram import (
    HISTOGRAM_EDGES,
    bucket_index,
    histogram_e_value,
    histogram_e_value_below,
    histogram_edges,
    histogram_lower_bound,
    histogram_upper_bound,
)

SETTINGS = settings(max_examples=100, deadline=None)
FEW = settings(max_examples=50, deadline=None)  # for the tests that compute ten bounds an example
FRACTIONS = np.array(BET_FRACTIONS)

alphas = st.floats(min_value=1e-4, max_value=0.5)
means = st.floats(min_value=-0.999, max_value=0.999)
rates = st.floats(min_value=1e-4, max_value=0.999)


@st.composite
def flip_counts(draw, max_n=200_000):
    n = draw(st.integers(min_value=0, max_value=max_n))
    b = draw(st.integers(min_value=0, max_value=n))
    c = draw(st.integers(min_value=0, max_value=n - b))
    return b, c, n


@st.composite
def rate_counts(draw, max_n=200_000):
    n = draw(st.integers(min_value=0, max_value=max_n))
    return draw(st.integers(min_value=0, max_value=n)), n


@st.composite
def histograms(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    concentration = draw(st.floats(min_value=0.01, max_value=10.0))  # small: a few spiky buckets
    total = draw(st.integers(min_value=0, max_value=100_000))
    return rng.multinomial(total, rng.dirichlet(np.full(256, concentration)))


def _at_the_bound(e_value, bound, toward, alpha):
    """The bound itself is kept, the next double toward the rejected side is rejected."""
    assert e_value(bound) < 1 / alpha
    beyond = math.nextafter(bound, toward)
    if -1.0 < beyond < 1.0:
        assert e_value(beyond) >= 1 / alpha


@SETTINGS
@given(flip_counts(), means, alphas)
def test_flip_decision_is_its_bound_against_the_level(counts, level, alpha):
    b, c, n = counts
    lower, upper = flip_lower_bound(b, c, n, alpha), flip_upper_bound(b, c, n, alpha)
    assert (flip_e_value(b, c, n, level) >= 1 / alpha) == (lower > level)
    assert (flip_e_value_below(b, c, n, level) >= 1 / alpha) == (upper < level)
    if lower > -1.0:
        _at_the_bound(lambda m: flip_e_value(b, c, n, m), lower, -math.inf, alpha)
    if upper < 1.0:
        _at_the_bound(lambda m: flip_e_value_below(b, c, n, m), upper, math.inf, alpha)


@SETTINGS
@given(rate_counts(), rates, alphas)
def test_rate_decision_is_its_bound_against_the_threshold(counts, threshold, alpha):
    x, n = counts
    assert (rate_e_value(x, n, threshold) >= 1 / alpha) == (rate_lower_bound(x, n, alpha) > threshold)
    assert (rate_e_value_below(x, n, threshold) >= 1 / alpha) == (rate_upper_bound(x, n, alpha) < threshold)


@FEW
@given(histograms(), means, alphas)
def test_histogram_decision_is_its_bound_against_the_shift(counts, shift, alpha):
    assert (histogram_e_value(counts, shift) >= 1 / alpha) == (histogram_lower_bound(counts, alpha) > shift)
    assert (histogram_e_value_below(counts, shift) >= 1 / alpha) == (histogram_upper_bound(counts, alpha) < shift)


@SETTINGS
@given(flip_counts(), alphas)
def test_flip_bounds_in_range_and_around_the_estimate(counts, alpha):
    b, c, n = counts
    lower, upper = flip_lower_bound(b, c, n, alpha), flip_upper_bound(b, c, n, alpha)
    assert -1.0 <= lower <= upper <= 1.0
    if n > 0:
        assert lower <= (b - c) / n <= upper


@SETTINGS
@given(rate_counts(), alphas)
def test_rate_bounds_in_range_around_the_estimate_and_mirrored(counts, alpha):
    x, n = counts
    lower, upper = rate_lower_bound(x, n, alpha), rate_upper_bound(x, n, alpha)
    assert 0.0 <= lower <= upper <= 1.0
    if n > 0:
        assert lower <= x / n <= upper
    assert abs(upper - (1.0 - rate_lower_bound(n - x, n, alpha))) <= 1e-9


@FEW
@given(flip_counts(max_n=20_000), alphas, alphas)
def test_flip_bounds_move_with_the_counts_and_alpha(counts, alpha, other_alpha):
    b, c, n = counts
    lower, upper = flip_lower_bound(b, c, n, alpha), flip_upper_bound(b, c, n, alpha)
    if b + c < n:  # one concordant pair becomes candidate-worse
        assert flip_lower_bound(b + 1, c, n, alpha) >= lower
        assert flip_upper_bound(b + 1, c, n, alpha) >= upper
    if c > 0:  # one candidate-better pair becomes concordant
        assert flip_lower_bound(b, c - 1, n, alpha) >= lower
        assert flip_upper_bound(b, c - 1, n, alpha) >= upper
    strict, loose = sorted((alpha, other_alpha))
    assert flip_lower_bound(b, c, n, strict) <= flip_lower_bound(b, c, n, loose)
    assert flip_upper_bound(b, c, n, strict) >= flip_upper_bound(b, c, n, loose)
    assert abs(upper + flip_lower_bound(c, b, n, alpha)) <= 1e-9  # X -> -X mirrors the bounds


@SETTINGS
@given(rate_counts(max_n=20_000), alphas)
def test_rate_bounds_rise_with_the_events(counts, alpha):
    x, n = counts
    if x < n:
        assert rate_lower_bound(x + 1, n, alpha) >= rate_lower_bound(x, n, alpha)
        assert rate_upper_bound(x + 1, n, alpha) >= rate_upper_bound(x, n, alpha)


@SETTINGS
@given(flip_counts(), means, means)
def test_e_values_fall_as_the_null_widens(counts, first, second):
    b, c, n = counts
    small, large = sorted((first, second))
    assert flip_e_value(b, c, n, large) <= flip_e_value(b, c, n, small)
    assert flip_e_value_below(b, c, n, small) <= flip_e_value_below(b, c, n, large)
    assert math.isclose(flip_e_value_below(b, c, n, small), flip_e_value(c, b, n, -small), rel_tol=1e-9)


def _exact_log_e(y, shift, sign):
    """log of the mixture wealth on the raw values: sign +1 for H0: E[Y] <= shift, -1 for E[Y] >= shift."""
    scaled = sign * (np.asarray(y) - shift) / (1.0 + sign * shift)
    return float(logsumexp(np.log1p(np.outer(FRACTIONS, scaled)).sum(axis=1))) - math.log(FRACTIONS.size)


def _histogram(y):
    return np.bincount([bucket_index(float(v)) for v in y], minlength=256)


@SETTINGS
@given(st.lists(st.floats(min_value=-1.0, max_value=1.0), max_size=200), st.floats(-0.9, 0.9))
def test_histogram_rounding_never_raises_the_wealth(y, shift):
    counts = _histogram(y)
    for e_value, sign in ((histogram_e_value, 1.0), (histogram_e_value_below, -1.0)):
        rounded = e_value(counts, shift)
        exact = _exact_log_e(y, shift, sign)
        assert rounded == 0.0 or math.log(rounded) <= exact + 1e-9
    if y:
        assert histogram_lower_bound(counts, 0.05) <= float(np.mean(y)) <= histogram_upper_bound(counts, 0.05)


@SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=255), max_size=300), st.floats(-0.9, 0.9))
def test_histogram_is_exact_when_every_y_sits_on_a_lower_edge(indices, shift):
    y = [HISTOGRAM_EDGES[i] for i in indices]
    assert math.isclose(math.log(histogram_e_value(_histogram(y), shift)), _exact_log_e(y, shift, 1.0), abs_tol=1e-9)


@SETTINGS
@given(st.floats(min_value=-1.0, max_value=1.0), st.integers(min_value=1, max_value=1024))
def test_bucket_holds_its_value(y, buckets):
    edges = histogram_edges(buckets)
    index = bucket_index(y, buckets)
    assert 0 <= index < buckets
    assert edges[index] <= y <= edges[index + 1]
    assert y < edges[index + 1] or index == buckets - 1
