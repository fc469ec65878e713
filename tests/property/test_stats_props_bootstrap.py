"""Bootstrap intervals contain their point estimate and mirror under arm swap."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import bootstrap_mean_ci, bootstrap_ratio_ci, paired_bootstrap

SETTINGS = settings(max_examples=60, deadline=None)
RESAMPLES = 400

values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def paired_arrays(draw):
    n = draw(st.integers(min_value=1, max_value=60))
    baseline = draw(st.lists(values, min_size=n, max_size=n))
    candidate = draw(st.lists(values, min_size=n, max_size=n))
    return np.array(baseline), np.array(candidate)


@SETTINGS
@given(paired_arrays(), st.integers(min_value=0, max_value=2**32))
def test_paired_ci_contains_point_and_mirrors(arrays, seed):
    baseline, candidate = arrays
    result = paired_bootstrap(baseline, candidate, n_resamples=RESAMPLES, seed=seed)
    assert result.low <= result.point <= result.high
    assert 0.0 <= result.p_value <= 1.0
    swapped = paired_bootstrap(candidate, baseline, n_resamples=RESAMPLES, seed=seed)
    assert swapped.point == -result.point
    assert swapped.p_value == result.p_value
    scale = 1e-9 * max(1.0, abs(result.low), abs(result.high))
    assert math.isclose(swapped.low, -result.high, abs_tol=scale)
    assert math.isclose(swapped.high, -result.low, abs_tol=scale)


@SETTINGS
@given(st.lists(values, min_size=1, max_size=60), st.integers(min_value=0, max_value=2**32))
def test_mean_ci_contains_point(sample, seed):
    point, low, high = bootstrap_mean_ci(np.array(sample), n_resamples=RESAMPLES, seed=seed)
    assert low <= point <= high


@SETTINGS
@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=10.0), st.integers(min_value=0, max_value=5)),
        min_size=1,
        max_size=40,
    ),
    st.integers(min_value=0, max_value=2**32),
)
def test_ratio_ci_is_ordered_and_never_nan(rows, seed):
    cost = np.array([row[0] for row in rows])
    solved = np.array([float(row[1]) for row in rows])
    point, low, high = bootstrap_ratio_ci(cost, solved, n_resamples=RESAMPLES, seed=seed)
    assert not any(math.isnan(v) for v in (point, low, high))
    assert 0.0 <= low <= high
    if solved.sum() == 0:
        assert (point, low, high) == (math.inf, math.inf, math.inf)
