"""Invariants of the rate intervals, for any counts and confidence."""

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import clopper_pearson_interval, estimate_rate, rate_interval, wilson_interval

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def counts(draw, max_n=100_000):
    n = draw(st.integers(min_value=0, max_value=max_n))
    successes = draw(st.integers(min_value=0, max_value=n))
    return successes, n


confidences = st.floats(min_value=0.5, max_value=0.9999)


@SETTINGS
@given(counts(), confidences)
def test_bounds_in_unit_interval_and_contain_the_rate(count, confidence):
    successes, n = count
    for interval in (wilson_interval, clopper_pearson_interval):
        low, high = interval(successes, n, confidence)
        assert 0.0 <= low <= high <= 1.0
        if n > 0:
            assert low <= successes / n <= high


@SETTINGS
@given(counts(max_n=5000), confidences, confidences)
def test_higher_confidence_gives_a_wider_interval(count, first, second):
    successes, n = count
    narrow_level, wide_level = sorted((first, second))
    for interval in (wilson_interval, clopper_pearson_interval):
        narrow = interval(successes, n, narrow_level)
        wide = interval(successes, n, wide_level)
        assert wide[0] <= narrow[0] + 1e-12 and narrow[1] <= wide[1] + 1e-12


@SETTINGS
@given(counts(max_n=5000), confidences)
def test_swapping_success_and_failure_mirrors_the_interval(count, confidence):
    successes, n = count
    for interval in (wilson_interval, clopper_pearson_interval):
        low, high = interval(successes, n, confidence)
        mirrored_low, mirrored_high = interval(n - successes, n, confidence)
        assert abs(low - (1.0 - mirrored_high)) <= 1e-9
        assert abs(high - (1.0 - mirrored_low)) <= 1e-9


@SETTINGS
@given(counts(max_n=500), st.integers(min_value=0, max_value=100))
def test_house_interval_is_one_of_the_two(count, small_n):
    successes, n = count
    low, high, method = rate_interval(successes, n, small_n=small_n)
    expected = wilson_interval if method == "wilson" else clopper_pearson_interval
    assert (low, high) == expected(successes, n)
    estimate = estimate_rate(successes, n)
    assert estimate.n == n and estimate.successes == successes
    if n > 0:
        assert estimate.low <= estimate.rate <= estimate.high
