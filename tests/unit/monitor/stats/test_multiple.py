"""BH and Holm against statsmodels bit-for-bit; e-BH against brute force."""

import itertools
from typing import Any, cast  # cast(Any, ...): a wrong type on purpose, to test the runtime check

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from monitor.stats import benjamini_hochberg, e_benjamini_hochberg, holm


def _random_p_vectors(seed: int, count: int = 300):
    rng = np.random.default_rng(seed)
    yield np.array([0.01, 0.04, 0.03, 0.5])
    yield np.array([0.05, 0.05, 0.05])  # ties on the boundary
    yield np.array([0.0, 1.0, 0.0, 1.0])
    yield np.array([0.2])
    for _ in range(count):
        m = int(rng.integers(1, 60))
        nulls = rng.uniform(size=m)
        signals = rng.beta(0.2, 6.0, size=m)
        p = np.where(rng.uniform(size=m) < rng.uniform(), signals, nulls)
        if rng.uniform() < 0.3:
            p = np.round(p, 2)  # force ties
        yield p


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.2])
# statsmodels' Holm costs ~50 ms a call, so it gets fewer random vectors here and
# a textbook reference below covers many more.
@pytest.mark.parametrize(
    "ours, method, count", [(benjamini_hochberg, "fdr_bh", 300), (holm, "holm", 12)]
)
def test_matches_statsmodels(ours, method, count, alpha):
    for p in _random_p_vectors(seed=int(alpha * 1000), count=count):
        rejected, adjusted = ours(p, alpha=alpha)
        want_rejected, want_adjusted, _, _ = multipletests(p, alpha=alpha, method=method)
        assert rejected.dtype == bool
        np.testing.assert_array_equal(rejected, want_rejected)
        np.testing.assert_allclose(adjusted, want_adjusted, rtol=0, atol=1e-12)


def _holm_textbook(p: np.ndarray, alpha: float) -> tuple[list[bool], list[float]]:
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    rejected, adjusted = [False] * m, [0.0] * m
    running_max, still_rejecting = 0.0, True
    for rank, i in enumerate(order):
        still_rejecting = still_rejecting and p[i] <= alpha / (m - rank)
        rejected[i] = still_rejecting
        running_max = max(running_max, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running_max
    return rejected, adjusted


def test_holm_against_textbook_definition():
    for p in _random_p_vectors(seed=99):
        rejected, adjusted = holm(p, alpha=0.05)
        want_rejected, want_adjusted = _holm_textbook(p, 0.05)
        assert rejected.tolist() == want_rejected
        np.testing.assert_allclose(adjusted, want_adjusted, rtol=0, atol=1e-12)


def test_hand_example():
    rejected, adjusted = benjamini_hochberg([0.01, 0.04, 0.03, 0.5])
    assert rejected.tolist() == [True, False, False, False]
    np.testing.assert_allclose(adjusted, [0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5])
    rejected, adjusted = holm([0.01, 0.04, 0.03, 0.5])
    assert rejected.tolist() == [True, False, False, False]
    np.testing.assert_allclose(adjusted, [0.04, 0.09, 0.09, 0.5])


def _e_bh_brute_force(e: np.ndarray, alpha: float) -> np.ndarray:
    """Largest self-consistent set: every member has e_i >= m / (alpha |R|)."""
    m = len(e)
    best: set[int] = set()
    for size in range(1, m + 1):
        for subset in itertools.combinations(range(m), size):
            if all(e[i] >= m / (alpha * size) for i in subset):
                best |= set(subset)
    return np.array([i in best for i in range(m)], dtype=bool)


def test_e_bh_against_brute_force():
    rng = np.random.default_rng(7)
    for trial in range(300):
        m = int(rng.integers(1, 9))
        alpha = float(rng.choice([0.05, 0.1, 0.2]))
        thresholds = m / (alpha * np.arange(1, m + 1))
        e = rng.lognormal(mean=np.log(m / alpha) - 1.0, sigma=1.5, size=m)
        if trial % 3 == 0:
            # Land exactly on thresholds and tie values to probe the boundaries.
            picks = rng.integers(0, m, size=m)
            e = np.where(rng.uniform(size=m) < 0.5, thresholds[picks], e)
        np.testing.assert_array_equal(e_benjamini_hochberg(e, alpha), _e_bh_brute_force(e, alpha))


def test_e_bh_hand_example_and_infinity():
    assert e_benjamini_hochberg([100, 1, 50, 0.5], alpha=0.1).tolist() == [True, False, True, False]
    assert e_benjamini_hochberg([np.inf, 0.0, 3.0], alpha=0.05).tolist() == [True, False, False]


def test_empty_input_gives_empty_arrays():
    for procedure in (benjamini_hochberg, holm):
        rejected, adjusted = procedure([])
        assert rejected.shape == (0,) and rejected.dtype == bool
        assert adjusted.shape == (0,) and adjusted.dtype == np.float64
    empty = e_benjamini_hochberg([])
    assert empty.shape == (0,) and empty.dtype == bool


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: benjamini_hochberg([0.1, 1.2]), "p_values must be numbers in [0, 1], got 1.2 at index 1"),
        (lambda: holm([np.nan]), "p_values must be numbers in [0, 1], got nan at index 0"),
        (lambda: holm(cast(Any, [[0.1]])), "p_values must be 1-D, got shape (1, 1)"),
        (lambda: benjamini_hochberg([0.1], alpha=0), "alpha must be a number in (0, 1), got 0"),
        (lambda: e_benjamini_hochberg([1.0, -0.5]), "e_values must be numbers >= 0, got -0.5 at index 1"),
        (lambda: e_benjamini_hochberg([1.0], alpha=1.5), "alpha must be a number in (0, 1), got 1.5"),
    ],
)
def test_errors_name_the_argument_and_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
