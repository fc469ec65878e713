"""BH rejects at least what Holm rejects; e-BH never rejects an e-value below 1."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import benjamini_hochberg, e_benjamini_hochberg, holm

SETTINGS = settings(max_examples=300, deadline=None)

p_vectors = st.lists(
    st.one_of(st.floats(min_value=0.0, max_value=1.0), st.sampled_from([0.0, 0.001, 0.01, 0.05, 1.0])),
    max_size=40,
)
alphas = st.sampled_from([0.01, 0.05, 0.1, 0.2])
# 1 + 1e-12: see test_bh_vs_holm_rounding_edge for why BH gets one part in 10^12 of slack.
ROUNDING_SLACK = 1.0 + 1e-12


@SETTINGS
@given(p_vectors, alphas)
def test_bh_rejections_contain_holm_rejections(p_values, alpha):
    holm_rejected, holm_adjusted = holm(p_values, alpha)
    bh_rejected, bh_adjusted = benjamini_hochberg(p_values, alpha * ROUNDING_SLACK)
    assert not np.any(holm_rejected & ~bh_rejected)
    _, bh_adjusted = benjamini_hochberg(p_values, alpha)
    assert np.all(bh_adjusted <= holm_adjusted + 1e-12)
    assert np.all(np.asarray(p_values) <= bh_adjusted + 1e-15)


def test_bh_vs_holm_rounding_edge():
    """The one place where bit-exactness with statsmodels beats the property.

    BH compares p <= (1/m) * alpha, Holm p <= alpha / m; in floating point
    (1/3) * 0.01 < 0.01 / 3, so p = 0.01 / 3 is rejected by Holm only. Both
    match statsmodels' multipletests here (see the unit tests).
    """
    p_values = [0.01 / 3, 0.5, 0.9]
    assert holm(p_values, 0.01)[0].tolist() == [True, False, False]
    assert benjamini_hochberg(p_values, 0.01)[0].tolist() == [False, False, False]


@SETTINGS
@given(st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_max=True), max_size=40), alphas)
def test_e_bh_with_all_e_values_below_one_rejects_nothing(e_values, alpha):
    assert not e_benjamini_hochberg(e_values, alpha).any()


@SETTINGS
@given(st.lists(st.floats(min_value=0.0, max_value=1e6), max_size=40), alphas)
def test_e_bh_rejects_only_large_e_values_and_is_monotone(e_values, alpha):
    e = np.asarray(e_values)
    rejected = e_benjamini_hochberg(e, alpha)
    assert np.all(e[rejected] >= 1.0 / alpha)
    # Raising an e-value never shrinks the rejection set.
    if e.size:
        boosted = e.copy()
        boosted[int(np.argmin(e))] *= 10.0
        assert not np.any(rejected & ~e_benjamini_hochberg(boosted, alpha))
