"""Power of the offline paired test, checked against brute force: every 2×2 table enumerated, scipy's exact test.

The reference never shares code with :mod:`monitor.stats.power`: it sums the
multinomial probability of every (b, c, concordant) table whose
``scipy.stats.binomtest`` two-sided p is <= α with b > c, and it scans n from 1.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from monitor.stats.paired import mcnemar
from monitor.stats.power import mcnemar_power, minimum_detectable_effect, paired_cells, tasks_needed


@functools.cache
def _rejects(b: int, c: int, alpha: float) -> bool:
    return b > c and stats.binomtest(b, b + c, 0.5).pvalue <= alpha


def brute_force_power(n: int, p10: float, p01: float, alpha: float) -> float:
    tables = np.array([(b, c, n - b - c) for b in range(n + 1) for c in range(n - b + 1) if _rejects(b, c, alpha)])
    if tables.size == 0:
        return 0.0
    return float(stats.multinomial.pmf(tables, n, [p10, p01, 1.0 - p10 - p01]).sum())


def brute_force_tasks(p10: float, p01: float, alpha: float, power: float, n_max: int = 200) -> int | None:
    return next((n for n in range(1, n_max + 1) if brute_force_power(n, p10, p01, alpha) >= power), None)


@pytest.mark.parametrize(("n", "p10", "p01", "alpha"), [
    (10, 0.3, 0.05, 0.05), (25, 0.2, 0.1, 0.05), (40, 0.15, 0.05, 0.01), (33, 0.5, 0.5, 0.1), (7, 0.9, 0.0, 0.2),
])
def test_power_equals_the_enumeration_of_every_table(n, p10, p01, alpha):
    assert mcnemar_power(n, p10, p01, alpha) == pytest.approx(brute_force_power(n, p10, p01, alpha), abs=1e-12)


def test_the_rejection_rule_is_the_one_compare_uses():
    """Power counts exactly the tables where ``mcnemar(b, c, n).p_exact <= alpha`` and b > c."""
    n, p10, p01, alpha = 30, 0.25, 0.1, 0.05
    total = sum(stats.multinomial.pmf([b, c, n - b - c], n, [p10, p01, 1 - p10 - p01])
                for b in range(n + 1) for c in range(n - b + 1) if b > c and mcnemar(b, c, n).p_exact <= alpha)
    assert mcnemar_power(n, p10, p01, alpha) == pytest.approx(total, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(p=st.floats(0.2, 0.8), d=st.floats(0.15, 0.5), extra=st.floats(0.0, 0.3),
       alpha=st.sampled_from([0.01, 0.05, 0.1]), power=st.sampled_from([0.5, 0.8, 0.9]))
def test_tasks_needed_is_the_first_n_of_a_brute_force_scan(p, d, extra, alpha, power):
    d = min(d, p)
    q = min(d + extra, 2 * p - d, 2 * (1 - p) + d)
    p10, p01 = paired_cells(p, d, q)
    expected = brute_force_tasks(p10, p01, alpha, power, n_max=60)
    if expected is None:  # beyond what enumeration affords: the answer must be beyond too
        assert tasks_needed(p, d, q, alpha, power) > 60
    else:
        assert tasks_needed(p, d, q, alpha, power) == expected


@pytest.mark.parametrize(("p", "d", "q"), [(0.7, 0.05, 0.21), (0.5, 0.1, None), (0.3, 0.08, 0.2)])
def test_tasks_needed_is_the_first_n_of_an_exact_scan_at_larger_n(p, d, q):
    """No earlier n in the saw-tooth reaches the power (the search's window is wide enough)."""
    p10, p01 = paired_cells(p, d, q)
    n = tasks_needed(p, d, q)
    assert mcnemar_power(n, p10, p01) >= 0.8
    assert all(mcnemar_power(m, p10, p01) < 0.8 for m in range(1, n))


def test_power_agrees_with_simulation_of_the_test():
    rng = np.random.default_rng(3)
    n, p10, p01 = 400, 0.12, 0.07
    tables = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=4000)
    hits = np.mean([b > c and mcnemar(int(b), int(c), n).p_exact <= 0.05 for b, c, _ in tables])
    exact = mcnemar_power(n, p10, p01)
    assert abs(hits - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000)


def test_independent_outcomes_are_the_default_discordance():
    p10, p01 = paired_cells(0.6, 0.1)
    assert p10 == pytest.approx(0.6 * 0.5) and p01 == pytest.approx(0.4 * 0.5)


def test_minimum_detectable_effect_inverts_tasks_needed():
    n = tasks_needed(0.7, 0.05, 0.21)
    mde = minimum_detectable_effect(n, 0.7, 0.21)
    assert mde is not None and mde <= 0.05 + 1e-4
    p10, p01 = paired_cells(0.7, mde, 0.21)
    assert mcnemar_power(n, p10, p01) >= 0.8
    below = paired_cells(0.7, mde - 2e-4, 0.21)
    assert mcnemar_power(n, *below) < 0.8


@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 3000), p=st.floats(0.05, 0.95), q=st.one_of(st.none(), st.floats(0.02, 1.0)))
def test_minimum_detectable_effect_has_the_power_and_shrinks_with_n(n, p, q):
    mde = minimum_detectable_effect(n, p, q)
    more = minimum_detectable_effect(4 * n, p, q)
    if mde is not None:
        assert mcnemar_power(n, *paired_cells(p, mde, q)) >= 0.8
        assert more is not None and more <= mde + 1e-4


def test_too_few_tasks_detect_nothing():
    assert minimum_detectable_effect(3, 0.5) is None
    assert minimum_detectable_effect(0, 0.5) is None
    assert tasks_needed(0.5, 0.001, 0.002, n_max=100) is None


@pytest.mark.parametrize(("call", "message"), [
    (lambda: paired_cells(1.2, 0.1), "baseline_rate must be a number in (0, 1), got 1.2"),
    (lambda: paired_cells(0.5, 0.6), "effect must be <= baseline_rate"),
    (lambda: paired_cells(0.5, 0.1, 0.05), "discordance=0.05 is infeasible for baseline_rate=0.5, effect=0.1; "
                                           "allowed: [0.1, 0.9]"),
    (lambda: tasks_needed(0.5, 0.1, alpha=0.0), "alpha must be a number in (0, 1), got 0.0"),
    (lambda: mcnemar_power(-1, 0.1, 0.1), "n_tasks must be an integer >= 0, got -1"),
    (lambda: mcnemar_power(5, 0.7, 0.7), "p10 + p01 must be <= 1"),
])
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
