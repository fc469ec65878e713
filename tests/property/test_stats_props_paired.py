"""McNemar is symmetric in the two arms."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import mcnemar, mcnemar_from_outcomes

SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(
    st.integers(min_value=0, max_value=5000),
    st.integers(min_value=0, max_value=5000),
    st.integers(min_value=0, max_value=5000),
)
def test_swapping_arms_keeps_p_and_negates_net_flip(b, c, concordant):
    n = b + c + concordant
    forward, backward = mcnemar(b, c, n), mcnemar(c, b, n)
    assert (forward.p_exact, forward.chi2, forward.p_chi2) == (
        backward.p_exact,
        backward.chi2,
        backward.p_chi2,
    )
    if n == 0:
        assert math.isnan(forward.net_flip) and math.isnan(backward.net_flip)
    else:
        assert forward.net_flip == -backward.net_flip
    for p in (forward.p_exact, forward.p_chi2):
        assert 0.0 <= p <= 1.0
    assert forward.chi2 >= 0.0


@SETTINGS
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=200))
def test_outcomes_swap_to_swapped_counts(pairs):
    baseline = [base for base, _ in pairs]
    candidate = [cand for _, cand in pairs]
    forward = mcnemar_from_outcomes(baseline, candidate)
    backward = mcnemar_from_outcomes(candidate, baseline)
    assert (forward.b, forward.c, forward.n) == (backward.c, backward.b, backward.n)
    assert forward.p_exact == backward.p_exact
