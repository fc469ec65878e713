"""pass@k and pass^k against brute-force enumeration and exact binomials."""

import itertools
import math
from fractions import Fraction
from typing import Any, cast  # cast(Any, ...): a wrong type on purpose, to test the runtime check

import pytest

from monitor.stats import mean_pass_at_k, mean_pass_hat_k, pass_at_k, pass_hat_k


def _brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """Share of k-subsets with any success / with only successes."""
    trials = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    any_success = sum(any(trials[i] for i in s) for s in subsets)
    all_success = sum(all(trials[i] for i in s) for s in subsets)
    return any_success / len(subsets), all_success / len(subsets)


def _small_cases():
    for n in range(1, 10):
        for c in range(n + 1):
            for k in range(1, n + 1):
                yield n, c, k


def test_against_brute_force_enumeration():
    for n, c, k in _small_cases():
        expected_at, expected_hat = _brute_force(n, c, k)
        assert pass_at_k(n, c, k) == pytest.approx(expected_at, abs=1e-12), (n, c, k)
        assert pass_hat_k(n, c, k) == pytest.approx(expected_hat, abs=1e-12), (n, c, k)


@pytest.mark.parametrize(
    "n, c, k",
    [(10, 3, 2), (50, 25, 10), (200, 150, 40), (1000, 999, 500), (5000, 10, 100), (300, 299, 299), (7, 7, 7)],
)
def test_against_math_comb(n, c, k):
    exact_hat = Fraction(math.comb(c, k), math.comb(n, k))
    exact_at = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_hat_k(n, c, k) == pytest.approx(float(exact_hat), rel=1e-12, abs=1e-300)
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_at), rel=1e-12, abs=1e-15)


def test_large_n_is_stable_and_fast():
    # C(10^6, 1000) overflows any float; the product form does not.
    value = pass_at_k(1_000_000, 1, 1000)
    assert value == pytest.approx(1000 / 1_000_000, rel=1e-9)
    assert pass_hat_k(1_000_000, 999_999, 1000) == pytest.approx(1 - 1000 / 1_000_000, rel=1e-9)


def test_known_values():
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(5, 2, 4) == 1.0  # only 3 failures: every 4-subset has a success
    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_hat_k(4, 1, 2) == 0.0
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)


def test_means_are_macro_averages():
    tasks = [(10, 3), (5, 5), (8, 0), (20, 7)]
    for k in (1, 2, 5):
        assert mean_pass_at_k(tasks, k) == pytest.approx(
            sum(pass_at_k(n, c, k) for n, c in tasks) / len(tasks), abs=1e-14
        )
        assert mean_pass_hat_k(tasks, k) == pytest.approx(
            sum(pass_hat_k(n, c, k) for n, c in tasks) / len(tasks), abs=1e-14
        )
    # k = 1: pass@1 = pass^1 = per-task success fraction.
    assert mean_pass_at_k(tasks, 1) == pytest.approx((0.3 + 1 + 0 + 0.35) / 4)
    assert mean_pass_hat_k(tasks, 1) == pytest.approx((0.3 + 1 + 0 + 0.35) / 4)


def test_empty_task_set_is_nan():
    assert math.isnan(mean_pass_at_k([], 3))
    assert math.isnan(mean_pass_hat_k([], 3))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pass_at_k(3, 1, 5), "n must be >= k, got n=3 with k=5"),
        (lambda: pass_hat_k(3, 4, 2), "c must be an integer in [0, n], got 4 with n=3"),
        (lambda: pass_at_k(3, -1, 2), "c must be an integer >= 0, got -1"),
        (lambda: pass_at_k(3, 1, 0), "k must be an integer >= 1, got 0"),
        (lambda: pass_hat_k(cast(Any, 3.0), 1, 1), "n must be an integer >= 0, got 3.0"),
        (lambda: mean_pass_at_k([(10, 2), (2, 1), (9, 9)], 3), "n must be >= k, got n=2 with k=3 (task 1)"),
        (lambda: mean_pass_hat_k([(10, 2), (9, 11)], 3), "c must be an integer in [0, n], got 11 with n=9 (task 1)"),
        (lambda: mean_pass_hat_k(cast(Any, [(10, 2), 5]), 3), "per_task[1] must be a pair (n, c), got 5"),
        (lambda: mean_pass_at_k([], 0), "k must be an integer >= 1, got 0"),
    ],
)
def test_errors_name_the_argument_and_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
