"""Rate intervals against statsmodels' proportion_confint, plus the house rules."""

import math
from typing import Any, cast  # cast(Any, ...): a wrong type on purpose, to test the runtime check

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from monitor.stats import (
    METHOD_CLOPPER_PEARSON,
    METHOD_WILSON,
    RateEstimate,
    clopper_pearson_interval,
    estimate_rate,
    rate_interval,
    wilson_interval,
)


def _random_counts(seed: int, size: int = 300) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    cases = [(0, 1), (1, 1), (0, 7), (7, 7), (0, 1000), (1000, 1000), (1, 2), (3, 10_000)]
    for _ in range(size):
        n = int(rng.choice([int(rng.integers(1, 30)), int(rng.integers(30, 5000))]))
        successes = int(rng.choice([0, n, int(rng.integers(0, n + 1))]))
        cases.append((successes, n))
    return cases


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_wilson_matches_statsmodels(confidence):
    for successes, n in _random_counts(1):
        expected = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
        expected = (max(0.0, expected[0]), min(1.0, expected[1]))
        got = wilson_interval(successes, n, confidence)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-14), (successes, n)


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_clopper_pearson_matches_statsmodels_beta(confidence):
    for successes, n in _random_counts(2):
        expected = proportion_confint(successes, n, alpha=1 - confidence, method="beta")
        got = clopper_pearson_interval(successes, n, confidence)
        assert got == pytest.approx(expected, rel=1e-11, abs=1e-300), (successes, n)


def test_acceptance_wilson_five_of_five():
    low, high = wilson_interval(5, 5)
    assert round(low, 3) == 0.566
    assert round(high, 3) == 1.000


def test_edges_are_exact():
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    assert clopper_pearson_interval(0, 10)[0] == 0.0
    assert clopper_pearson_interval(10, 10)[1] == 1.0
    # Exact CP bound for 0/n has a closed form: 1 - (alpha/2)^(1/n).
    assert clopper_pearson_interval(0, 10)[1] == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-12)


def test_empty_input_is_the_whole_unit_interval():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert clopper_pearson_interval(0, 0) == (0.0, 1.0)
    assert rate_interval(0, 0) == (0.0, 1.0, METHOD_CLOPPER_PEARSON)
    estimate = estimate_rate(0, 0)
    assert math.isnan(estimate.rate)
    assert (estimate.low, estimate.high, estimate.n, estimate.successes) == (0.0, 1.0, 0, 0)


def test_rate_interval_house_choice():
    assert rate_interval(10, 29)[2] == METHOD_CLOPPER_PEARSON
    assert rate_interval(10, 30)[2] == METHOD_WILSON
    assert rate_interval(0, 500)[2] == METHOD_CLOPPER_PEARSON
    assert rate_interval(500, 500)[2] == METHOD_CLOPPER_PEARSON
    assert rate_interval(10, 20, small_n=10)[2] == METHOD_WILSON
    assert rate_interval(40, 100)[:2] == wilson_interval(40, 100)
    assert rate_interval(4, 10)[:2] == clopper_pearson_interval(4, 10)


def test_estimate_rate_fields():
    estimate = estimate_rate(40, 100, confidence=0.9)
    assert isinstance(estimate, RateEstimate)
    assert estimate.rate == 0.4
    assert (estimate.low, estimate.high) == wilson_interval(40, 100, 0.9)
    assert (estimate.n, estimate.successes, estimate.method) == (100, 40, METHOD_WILSON)
    with pytest.raises(AttributeError):
        estimate.rate = 0.5  # frozen


def test_numpy_integers_are_accepted():
    assert wilson_interval(np.int64(3), np.int32(10)) == wilson_interval(3, 10)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: wilson_interval(7, 5), "successes must be an integer in [0, n], got 7 with n=5"),
        (lambda: wilson_interval(-1, 5), "successes must be an integer in [0, n], got -1 with n=5"),
        (lambda: wilson_interval(1, -5), "n must be an integer >= 0, got -5"),
        (lambda: wilson_interval(cast(Any, 1.5), 5), "successes must be an integer in [0, n], got 1.5"),
        (lambda: clopper_pearson_interval(True, 5), "successes must be an integer"),
        (lambda: wilson_interval(1, 5, confidence=1.0), "confidence must be a number in (0, 1), got 1.0"),
        (lambda: clopper_pearson_interval(1, 5, confidence=95), "confidence must be a number in (0, 1), got 95"),
        (lambda: wilson_interval(1, 5, confidence=float("nan")), "confidence must be a number in (0, 1)"),
        (lambda: rate_interval(1, 5, small_n=-1), "small_n must be an integer >= 0, got -1"),
        (lambda: estimate_rate(6, 5), "successes must be an integer in [0, n], got 6 with n=5"),
    ],
)
def test_errors_name_the_argument_and_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
