"""Power of the offline paired test: a probability, rising with the effect, reached at the tasks it reports."""

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats.power import mcnemar_power, paired_cells, tasks_needed

SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(n=st.integers(0, 3000), psi=st.floats(0.01, 1.0), share=st.floats(0.0, 1.0),
       alpha=st.floats(0.001, 0.2))
def test_power_is_a_probability(n, psi, share, alpha):
    power = mcnemar_power(n, psi * share, psi * (1 - share), alpha)
    assert 0.0 <= power <= 1.0 + 1e-12


@SETTINGS
@given(n=st.integers(1, 3000), psi=st.floats(0.02, 1.0), low=st.floats(0.0, 1.0), high=st.floats(0.0, 1.0),
       alpha=st.sampled_from([0.01, 0.05, 0.1]))
def test_moving_discordance_to_the_baseline_side_raises_power(n, psi, low, high, alpha):
    """At fixed n and ψ, a larger share of baseline-only pairs (a larger drop) is never harder to detect."""
    low, high = sorted((low, high))
    assert mcnemar_power(n, psi * low, psi * (1 - low), alpha) <= mcnemar_power(n, psi * high, psi * (1 - high),
                                                                                 alpha) + 1e-12


@SETTINGS
@given(p=st.floats(0.1, 0.9), d=st.floats(0.05, 0.3), power=st.sampled_from([0.5, 0.8, 0.95]))
def test_the_reported_tasks_reach_the_power_and_the_one_before_does_not(p, d, power):
    d = min(d, p)
    n = tasks_needed(p, d, None, 0.05, power)
    p10, p01 = paired_cells(p, d)
    assert n is not None and mcnemar_power(n, p10, p01) >= power
    assert n == 1 or mcnemar_power(n - 1, p10, p01) < power  # the first n: the one before falls short
