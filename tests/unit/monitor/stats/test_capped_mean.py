"""The capped-mean e-process: sums give the per-pair wealth exactly, it is a supermartingale, the bound is its dual."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats import capped_mean
from monitor.stats.betting import BET_FRACTIONS, BET_WEIGHTS
from monitor.stats.capped_mean import CappedSums

Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
LAMBDA = np.asarray(BET_FRACTIONS)
PSI = -np.log1p(-LAMBDA) - LAMBDA


def _sums(b: np.ndarray, c: np.ndarray, cap: float) -> CappedSums:
    b, c = np.minimum(b, cap), np.minimum(c, cap)
    return CappedSums(b.size, b.sum(), c.sum(), (b * b).sum(), (c * c).sum(), (b * c).sum(), cap)


def _direct_log_wealth(b: np.ndarray, c: np.ndarray, cap: float, ratio: float, sign: float = 1.0) -> np.ndarray:
    b, c = np.minimum(b, cap), np.minimum(c, cap)
    rho = 1 + ratio
    xi = sign * (c - rho * b) / (max(1.0, rho) * cap)
    assert xi.min() >= -1 - 1e-12
    return np.array([(lam * xi - psi * xi * xi).sum() for lam, psi in zip(LAMBDA, PSI)])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("ratio", [-0.5, 0.0, 0.1, 0.7])
def test_sums_give_the_per_pair_wealth_exactly(seed: int, ratio: float) -> None:
    rng = np.random.default_rng(seed)
    b, c = rng.lognormal(-3, 2, 500), rng.pareto(1.8, 500) * 0.05
    for direction, sign in (("greater", 1.0), ("less", -1.0)):
        got = capped_mean.log_factors(_sums(b, c, 5.0), ratio, direction)
        np.testing.assert_allclose(got, _direct_log_wealth(b, c, 5.0, ratio, sign), rtol=1e-9, atol=1e-9)


@settings(max_examples=500, deadline=None)
@given(st.floats(-1.0, 1e6, allow_nan=False), st.sampled_from(BET_FRACTIONS))
def test_each_factor_is_at_most_one_plus_lambda_xi(xi: float, lam: float) -> None:
    """Fan, Grama & Liu's inequality, which makes every bet a supermartingale under H0 (xi >= -1)."""
    psi = -math.log1p(-lam) - lam
    assert lam * xi - psi * xi * xi <= math.log1p(lam * xi) + 1e-12


def test_expected_wealth_is_at_most_one_at_the_boundary_null_exactly() -> None:
    """A discrete pair distribution with E[c] = 1.1 E[b] exactly: E[M_n] = E[factor]^n <= 1 for every bet."""
    values_b = np.array([0.0, 0.01, 0.2, 5.0])
    probs = np.array([0.3, 0.4, 0.28, 0.02])
    mean_b = (values_b * probs).sum()
    values_c = np.array([0.0, 1.1 * mean_b / 0.5])  # c independent of b, two-point, mean 1.1 E[b]
    probs_c = np.array([0.5, 0.5])
    for lam, psi in zip(LAMBDA, PSI):
        expected = 0.0
        for vb, pb in zip(values_b, probs):
            for vc, pc in zip(values_c, probs_c):
                xi = (min(vc, 5.0) - 1.1 * vb) / (1.1 * 5.0)
                expected += pb * pc * math.exp(lam * xi - psi * xi * xi)
        assert expected <= 1.0 + 1e-12
        assert expected ** 10_000 <= 1.0 + 1e-8


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 400), st.sampled_from([0.05, 0.01]))
def test_the_bound_is_the_dual_of_the_test(seed: int, n: int, alpha: float) -> None:
    rng = np.random.default_rng(seed)
    b = rng.lognormal(-3, 1.5, n)
    c = b * rng.lognormal(rng.uniform(-0.5, 1.0), 0.5, n)
    s = _sums(b, c, 5.0)
    low = capped_mean.lower_bound(s, alpha)
    for r0 in (-0.5, 0.0, 0.1, 0.3, low - 1e-6, low + 1e-3):
        if r0 <= -0.99:
            continue
        rejected = capped_mean.e_value(s, r0) >= 1 / alpha
        assert rejected == (low >= r0), (r0, low)
    assert low <= capped_mean.point_ratio(s) + 1e-9 or low == -1.0


def _first_alarm_share(draw: Draw, runs: int, n: int, looks: int, ratio: float, cap: float, alpha: float,
                       seed: int) -> float:
    rng = np.random.default_rng(seed)
    fired = 0
    steps = np.unique(np.geomspace(20, n, looks).astype(int))
    for _ in range(runs):
        b, c = draw(rng, n)
        b, c = np.minimum(b, cap), np.minimum(c, cap)
        cum = [np.cumsum(v) for v in (b, c, b * b, c * c, b * c)]
        for t in steps:
            b_t, c_t, bb_t, cc_t, bc_t = (float(x[t - 1]) for x in cum)
            s = CappedSums(int(t), b_t, c_t, bb_t, cc_t, bc_t, cap)
            if capped_mean.e_value(s, ratio) >= 1 / alpha:
                fired += 1
                break
    return fired / runs


def _lognormal_pair(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Equal means, not exchangeable: baseline log-normal sigma 2, candidate sigma 1 (mean 0.02 USD)."""
    mean = 0.02
    return (rng.lognormal(math.log(mean) - 2.0, 2.0, n), rng.lognormal(math.log(mean) - 0.5, 1.0, n))


def _pareto_pair(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Equal means: baseline Pareto tail 1.8 (infinite variance), candidate exponential."""
    mean = 0.02
    scale = mean * 0.8  # Lomax (numpy pareto) mean = scale / (a - 1)
    return rng.pareto(1.8, n) * scale, rng.exponential(mean, n)


@pytest.mark.parametrize("draw", [_lognormal_pair, _pareto_pair], ids=["lognormal 2 vs 1", "pareto 1.8"])
def test_skewed_non_exchangeable_aa_rarely_alarms(draw: Draw) -> None:
    """The nulls the asymptotic test failed (41.5% and 37% alarms), at the 10% floor, alpha 0.05, 40 looks
    over 5,000 pairs, 200 runs (a cap 250x the mean: capping lowers the baseline's mean by about 2%)."""
    share = _first_alarm_share(draw, runs=200, n=5000, looks=40, ratio=0.10, cap=5.0, alpha=0.05, seed=3)
    assert share <= 0.05
    assert sum(BET_WEIGHTS) == pytest.approx(1.0)


def test_a_real_increase_is_found() -> None:
    def drift(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        b = rng.lognormal(math.log(0.05), 1.0, n)
        return b, 1.4 * b * rng.lognormal(0.0, 0.3, n)
    assert _first_alarm_share(drift, runs=20, n=5000, looks=40, ratio=0.10, cap=5.0, alpha=0.05, seed=4) == 1.0


def test_empty_and_invalid_input() -> None:
    empty = CappedSums(0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0)
    assert capped_mean.e_value(empty, 0.1) == 1.0 and capped_mean.lower_bound(empty, 0.05) == -1.0
    with pytest.raises(ValueError, match="cap"):
        capped_mean.e_value(CappedSums(1, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0), 0.1)
    with pytest.raises(ValueError, match="finite"):
        capped_mean.lower_bound(CappedSums(1, math.nan, 1.0, 1.0, 1.0, 1.0, 5.0), 0.05)
