"""Paired and one-sample bootstrap against scipy.stats.bootstrap, plus sanity anchors."""

import functools
import math

import numpy as np
import pytest
from scipy.stats import bootstrap as scipy_bootstrap

from monitor.stats import BootstrapResult, bootstrap_mean_ci, bootstrap_ratio_ci, paired_bootstrap
from monitor.stats import bootstrap as bootstrap_module

N_RESAMPLES = 10_000


def _paired_data(seed: int, n_tasks: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    baseline = rng.lognormal(mean=0.0, sigma=0.7, size=n_tasks)
    candidate = baseline * rng.lognormal(mean=0.0, sigma=0.3, size=n_tasks) + shift
    return baseline, candidate


def _assert_close_ci(got_low, got_high, want_low, want_high, share=0.05):
    """Two Monte-Carlo percentile intervals agree to a small share of their width."""
    tolerance = share * (want_high - want_low)
    assert abs(got_low - want_low) <= tolerance, (got_low, want_low)
    assert abs(got_high - want_high) <= tolerance, (got_high, want_high)


@pytest.mark.parametrize("seed, n_tasks, shift", [(1, 40, 0.0), (2, 150, 0.2), (3, 400, -0.1)])
def test_paired_mean_agrees_with_scipy(seed, n_tasks, shift):
    baseline, candidate = _paired_data(seed, n_tasks, shift)
    result = paired_bootstrap(baseline, candidate, n_resamples=N_RESAMPLES, seed=seed)
    reference = scipy_bootstrap(
        (baseline, candidate),
        lambda x, y, axis: np.mean(y - x, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=N_RESAMPLES,
        confidence_level=0.95,
        rng=np.random.default_rng(1000 + seed),
    )
    assert result.point == pytest.approx(np.mean(candidate) - np.mean(baseline), rel=1e-12, abs=1e-12)
    _assert_close_ci(result.low, result.high, *reference.confidence_interval)
    assert (result.n_units, result.n_resamples, result.confidence) == (n_tasks, N_RESAMPLES, 0.95)


def test_paired_median_of_differences_agrees_with_scipy():
    baseline, candidate = _paired_data(4, 101, 0.1)
    result = paired_bootstrap(baseline, candidate, statistic="median", n_resamples=N_RESAMPLES, seed=4)
    reference = scipy_bootstrap(
        (baseline, candidate),
        lambda x, y, axis: np.median(y - x, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=N_RESAMPLES,
        rng=np.random.default_rng(5),
    )
    assert result.point == np.median(candidate - baseline)
    _assert_close_ci(result.low, result.high, *reference.confidence_interval, share=0.08)


def test_callable_statistic_equals_named_one():
    baseline, candidate = _paired_data(5, 60, 0.05)
    named = paired_bootstrap(baseline, candidate, "mean", n_resamples=2000, seed=9)
    via_callable = paired_bootstrap(baseline, candidate, np.mean, n_resamples=2000, seed=9)
    assert named == via_callable
    quantile = paired_bootstrap(
        baseline, candidate, functools.partial(np.quantile, q=0.9), n_resamples=500, seed=9
    )
    assert quantile.point == pytest.approx(np.quantile(candidate - baseline, 0.9))


def test_huge_shift_gives_p_zero_and_identical_arms_give_zero_effect():
    baseline, _candidate = _paired_data(6, 80, 0.0)
    shifted = paired_bootstrap(baseline, baseline + 100.0, n_resamples=2000)
    assert shifted.p_value == 0.0
    assert shifted.low > 99.0
    same = paired_bootstrap(baseline, baseline.copy(), n_resamples=2000)
    assert (same.point, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)


def test_p_value_is_percentile_inversion():
    baseline, candidate = _paired_data(7, 50, 0.05)
    result = paired_bootstrap(baseline, candidate, n_resamples=4000, seed=11)
    # Rebuild the replicates with the same draw and check the documented formula.
    rng = np.random.default_rng(11)
    indices = rng.integers(0, 50, size=(4000, 50))
    replicates = np.mean((candidate - baseline)[indices], axis=1)
    expected = min(1.0, 2 * min(np.mean(replicates <= 0), np.mean(replicates >= 0)))
    assert 0.0 < expected < 1.0  # the data leave the sign in doubt, so the check bites
    assert result.p_value == expected
    assert (result.low, result.high) == pytest.approx(np.quantile(replicates, [0.025, 0.975]), rel=1e-12)


def test_chunking_does_not_change_the_result(monkeypatch):
    baseline, candidate = _paired_data(8, 30, 0.1)
    whole = paired_bootstrap(baseline, candidate, n_resamples=1000, seed=3)
    monkeypatch.setattr(bootstrap_module, "_MAX_CHUNK_ENTRIES", 7 * 30)  # 7 rows per chunk
    chunked = paired_bootstrap(baseline, candidate, n_resamples=1000, seed=3)
    assert chunked == whole


def test_seed_reproducibility():
    baseline, candidate = _paired_data(9, 25, 0.1)
    first = paired_bootstrap(baseline, candidate, n_resamples=500, seed=42)
    assert paired_bootstrap(baseline, candidate, n_resamples=500, seed=42) == first
    assert paired_bootstrap(baseline, candidate, n_resamples=500, seed=43) != first


def test_empty_input_is_nan():
    result = paired_bootstrap(np.array([]), np.array([]))
    assert isinstance(result, BootstrapResult)
    assert all(math.isnan(v) for v in (result.point, result.low, result.high, result.p_value))
    assert result.n_units == 0
    assert all(math.isnan(v) for v in bootstrap_mean_ci(np.array([])))
    assert all(math.isnan(v) for v in bootstrap_ratio_ci(np.array([]), np.array([])))


def test_mean_ci_agrees_with_scipy():
    values = np.random.default_rng(10).beta(2, 5, size=120)  # e.g. per-task success fractions
    point, low, high = bootstrap_mean_ci(values, n_resamples=N_RESAMPLES, seed=1)
    reference = scipy_bootstrap(
        (values,), np.mean, method="percentile", n_resamples=N_RESAMPLES, rng=np.random.default_rng(2)
    )
    assert point == pytest.approx(values.mean(), rel=1e-12)
    _assert_close_ci(low, high, *reference.confidence_interval)


def test_ratio_ci_agrees_with_scipy():
    rng = np.random.default_rng(11)
    solved = rng.binomial(4, 0.6, size=150).astype(float)  # successes per task
    cost = rng.gamma(2.0, 0.05, size=150) * 4  # USD per task
    point, low, high = bootstrap_ratio_ci(cost, solved, n_resamples=N_RESAMPLES, seed=1)
    reference = scipy_bootstrap(
        (cost, solved),
        lambda num, den, axis: np.sum(num, axis=axis) / np.sum(den, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=N_RESAMPLES,
        rng=np.random.default_rng(2),
    )
    assert point == pytest.approx(cost.sum() / solved.sum(), rel=1e-12)
    _assert_close_ci(low, high, *reference.confidence_interval)


def test_ratio_with_zero_denominators_is_infinite_not_nan():
    point, low, high = bootstrap_ratio_ci([1.0, 2.0, 3.0], [0.0, 1.0, 0.0], n_resamples=2000)
    assert point == 6.0
    assert 2.0 <= low <= 6.0
    assert high == math.inf  # 8/27 of resamples have no solved task
    assert bootstrap_ratio_ci([1.0, 2.0], [0.0, 0.0], n_resamples=200) == (math.inf, math.inf, math.inf)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: paired_bootstrap([1.0], [1.0, 2.0]), "equal lengths (aligned by unit), got 1 and 2"),
        (lambda: paired_bootstrap([1.0, np.nan], [1.0, 2.0]), "baseline must be finite, got nan at index 1"),
        (lambda: paired_bootstrap([[1.0]], [[1.0]]), "baseline must be a 1-D array"),
        (lambda: paired_bootstrap([1.0], [1.0], statistic="mode"),
         "statistic must be 'mean', 'median' or a callable, got 'mode'"),
        (lambda: paired_bootstrap([1.0], [1.0], n_resamples=0), "n_resamples must be an integer >= 1, got 0"),
        (lambda: paired_bootstrap([1.0], [1.0], confidence=0), "confidence must be a number in (0, 1), got 0"),
        (lambda: paired_bootstrap([1.0], [1.0], seed=-2), "seed must be an integer >= 0 or None, got -2"),
        (lambda: paired_bootstrap([1.0, 2.0], [1.0, 3.0], statistic=lambda x, axis: x),
         "statistic must reduce along `axis`"),
        (lambda: bootstrap_mean_ci([1.0, np.inf]), "values_per_task must be finite, got inf at index 1"),
        (lambda: bootstrap_ratio_ci([1.0, -1.0], [1.0, 1.0]), "numerators_per_task must be >= 0, got -1.0 at index 1"),
        (lambda: bootstrap_ratio_ci([1.0], [1.0, 1.0]), "must have equal lengths, got 1 and 2"),
    ],
)
def test_errors_name_the_argument_and_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
