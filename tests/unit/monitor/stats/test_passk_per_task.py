"""Vectorised per-task pass@k / pass^k against the scalar functions and exact binomials."""

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats.passk import mean_pass_at_k, mean_pass_hat_k, pass_at_k_per_task, pass_hat_k_per_task


def test_against_exact_binomials():
    rng = np.random.default_rng(2)
    n = rng.integers(1, 40, size=300)
    c = np.array([rng.integers(0, x + 1) for x in n])
    for k in (1, 2, 3, 5, 8):
        keep = n >= k
        at = pass_at_k_per_task(n[keep], c[keep], k)
        hat = pass_hat_k_per_task(n[keep], c[keep], k)
        for i, (ni, ci) in enumerate(zip(n[keep].tolist(), c[keep].tolist())):
            assert at[i] == pytest.approx(1 - comb(ni - ci, k) / comb(ni, k), rel=1e-12, abs=1e-15)
            assert hat[i] == pytest.approx(comb(ci, k) / comb(ni, k), rel=1e-12, abs=1e-15)
        pairs = list(zip(n[keep].tolist(), c[keep].tolist()))
        assert float(np.mean(at)) == pytest.approx(mean_pass_at_k(pairs, k), rel=1e-12)
        assert float(np.mean(hat)) == pytest.approx(mean_pass_hat_k(pairs, k), rel=1e-12)


def test_errors_name_the_task():
    with pytest.raises(ValueError, match="task 1: need integers k <= n"):
        pass_at_k_per_task([4, 2], [1, 1], 3)
    with pytest.raises(ValueError, match="task 0"):
        pass_hat_k_per_task([4], [5], 1)
    with pytest.raises(ValueError, match="equal lengths"):
        pass_hat_k_per_task([4, 4], [1], 1)


def test_mean_fast_path_keeps_the_slow_paths_errors():
    with pytest.raises(ValueError, match=r"n must be >= k, got n=2 with k=3 \(task 1\)"):
        mean_pass_at_k([(4, 1), (2, 1)], 3)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
                min_size=1, max_size=30))
def test_monotone_in_k(tasks):
    n = np.array([t[0] for t in tasks])
    c = np.array([t[1] for t in tasks])
    previous_at, previous_hat = np.zeros(len(n)) - 1, np.ones(len(n)) + 1
    for k in range(1, int(n.min()) + 1):
        at, hat = pass_at_k_per_task(n, c, k), pass_hat_k_per_task(n, c, k)
        assert np.all(hat <= at + 1e-12) and np.all(at >= previous_at - 1e-12) and np.all(hat <= previous_hat + 1e-12)
        previous_at, previous_hat = at, hat
