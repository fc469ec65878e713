"""resampled_quantiles against np.quantile of the expanded resample; run_batched against separate calls."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats.paired import _binomial_half_cdf
from monitor.stats.resample import resample_counts, resample_sums, resampled_quantiles, run_batched


def _expanded_quantiles(values, units, n_units, q, n_resamples, seed):
    out = []
    for counts in resample_counts(n_units, n_resamples, seed):
        for row in counts:
            weights = row[units].astype(int)
            out.append(np.quantile(np.repeat(values, weights), q) if weights.sum() else np.nan)
    return np.array(out)


@pytest.mark.parametrize(("n_units", "per_unit", "q"), [(1, 3, 0.95), (6, 2, 0.95), (50, 5, 0.5), (400, 8, 0.95),
                                                          (30, 1, 0.99)])
def test_quantiles_equal_the_expanded_resample(n_units, per_unit, q):
    rng = np.random.default_rng(n_units)
    units = np.repeat(np.arange(n_units), per_unit)
    rng.shuffle(units)
    values = np.round(rng.lognormal(2, 0.8, size=units.size), 1)  # ties included
    got = resampled_quantiles(values, units, n_units, q, 150, 3, max_cells=5_000)
    np.testing.assert_allclose(got, _expanded_quantiles(values, units, n_units, q, 150, 3), rtol=1e-12)


def test_units_without_values_and_empty_input():
    values, units = np.array([1.0, 2.0]), np.array([0, 0])  # units 1 and 2 hold no trial
    got = resampled_quantiles(values, units, 3, 0.95, 200, 1)
    expected = _expanded_quantiles(values, units, 3, 0.95, 200, 1)
    assert np.isnan(got).sum() == np.isnan(expected).sum() > 0
    np.testing.assert_allclose(got[~np.isnan(got)], expected[~np.isnan(expected)])
    assert np.isnan(resampled_quantiles(np.zeros(0), np.zeros(0, int), 3, 0.5, 5, 0)).all()


def _step(columns):
    first = yield columns
    second = yield columns * 2.0
    return first, second


def test_run_batched_equals_separate_calls():
    rng = np.random.default_rng(4)
    a, b, c = rng.uniform(size=(40, 3)), rng.uniform(size=(40, 2)), rng.uniform(size=(25, 4))
    results = run_batched([_step(a), _step(b), _step(c)], 300, 9, {})
    for (first, second), columns in zip(results, (a, b, c)):
        np.testing.assert_allclose(first, resample_sums(columns, 300, 9), rtol=1e-12)
        np.testing.assert_allclose(second, resample_sums(columns * 2.0, 300, 9), rtol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3000).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_exact_binomial_tail_matches_scipy(case):
    from scipy.stats import binom

    n, k = case
    assert _binomial_half_cdf(k, n) == pytest.approx(float(binom.cdf(k, n, 0.5)), rel=1e-10, abs=1e-300)


def test_binomial_tail_beyond_the_exact_range_uses_scipy():
    from scipy.special import bdtr

    assert _binomial_half_cdf(10_000, 25_000) == pytest.approx(float(bdtr(10_000, 25_000, 0.5)), rel=1e-12,
                                                               abs=1e-300)


def test_quantiles_of_several_samples_share_one_draw():
    from monitor.stats.resample import resampled_quantiles_many

    rng = np.random.default_rng(8)
    samples = []
    for size in (40, 25, 0):
        units = rng.integers(0, 12, size=size)
        samples.append((rng.lognormal(1, 1, size=size), units))
    together = resampled_quantiles_many(samples, 12, 0.9, 120, 5, max_cells=300)
    for (values, units), got in zip(samples, together):
        np.testing.assert_array_equal(got, resampled_quantiles(values, units, 12, 0.9, 120, 5))
    assert np.isnan(together[2]).all()
