"""pass@k rises and pass^k falls with k; pass@k >= pass^k."""

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import mean_pass_at_k, mean_pass_hat_k, pass_at_k, pass_hat_k

SETTINGS = settings(max_examples=200, deadline=None)
ROUNDING = 1e-12  # the two product forms round differently; the math is exact


@st.composite
def task(draw, max_n=200):
    n = draw(st.integers(min_value=1, max_value=max_n))
    c = draw(st.integers(min_value=0, max_value=n))
    return n, c


@SETTINGS
@given(task())
def test_monotone_in_k_and_ordered(trials):
    n, c = trials
    previous_at, previous_hat = -1.0, 2.0
    for k in range(1, n + 1):
        at_k, hat_k = pass_at_k(n, c, k), pass_hat_k(n, c, k)
        assert 0.0 <= hat_k <= at_k + ROUNDING and at_k <= 1.0
        assert at_k >= previous_at - ROUNDING
        assert hat_k <= previous_hat + ROUNDING
        previous_at, previous_hat = at_k, hat_k
    assert abs(pass_at_k(n, c, 1) - c / n) <= ROUNDING
    assert abs(pass_hat_k(n, c, 1) - c / n) <= ROUNDING


@SETTINGS
@given(st.lists(task(max_n=30), min_size=1, max_size=20), st.integers(min_value=1, max_value=5))
def test_means_ordered_and_monotone(tasks, k):
    feasible = [(n, c) for n, c in tasks if n >= k + 1]
    if not feasible:
        return
    assert mean_pass_hat_k(feasible, k) <= mean_pass_at_k(feasible, k) + ROUNDING
    assert mean_pass_at_k(feasible, k + 1) >= mean_pass_at_k(feasible, k) - ROUNDING
    assert mean_pass_hat_k(feasible, k + 1) <= mean_pass_hat_k(feasible, k) + ROUNDING
