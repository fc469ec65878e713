"""alerts.sequential (the asymptotic mean tests) against direct numerical integration, its formulas, and coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from alerts import sequential as seq


def test_asymptotic_cs_matches_the_formula() -> None:
    n, mean, var, alpha, rho = 500, 0.3, 2.0, 0.05, 0.07
    half = math.sqrt(2 * (n * var * rho ** 2 + 1) / (n ** 2 * rho ** 2)
                     * math.log(math.sqrt(n * var * rho ** 2 + 1) / alpha))
    assert seq.asymptotic_cs(n, mean, var, alpha, rho) == pytest.approx((mean - half, mean + half))
    # default rho = rho*/sigma_hat
    rho_star = math.sqrt(seq.rho2_for_target(seq.DEFAULT_TARGET_N, alpha))
    assert seq.asymptotic_cs(n, mean, var, alpha) == pytest.approx(
        seq.asymptotic_cs(n, mean, var, alpha, rho_star / math.sqrt(var)))
    assert seq.asymptotic_cs(0, 0.0, 1.0) == (-math.inf, math.inf)
    assert seq.cs_from_sums(4, 2.0, 1.5, alpha) == pytest.approx(seq.asymptotic_cs(4, 0.5, 0.125, alpha))
    assert seq.rho2_for_target(100, 0.05) == pytest.approx(
        (2 * math.log(20) + math.log(1 + 2 * math.log(20))) / 100)
    with pytest.raises(ValueError, match="alpha"):
        seq.asymptotic_cs(10, 0.0, 1.0, alpha=1.5)


@pytest.mark.parametrize("shape, start", [("laplace", 30), ("lognormal", 200)])
def test_asymptotic_cs_time_uniform_coverage(shape: str, start: int) -> None:
    """200 paths x 2,000 steps, checked every 7th step from `start` (decide.py waits for min_pairs)."""
    rng = np.random.default_rng(3)
    paths, steps, alpha = 200, 2000, 0.05
    if shape == "laplace":
        true_mean = 0.5
        x = rng.exponential(0.5, (paths, steps)) - rng.exponential(0.5, (paths, steps)) + true_mean
    else:  # skewed, like a cost delta
        true_mean = math.exp(0.5)
        x = rng.lognormal(0.0, 1.0, (paths, steps))
    n = np.arange(1, steps + 1)
    mean = np.cumsum(x, 1) / n
    var = np.maximum(np.cumsum(x * x, 1) / n - mean ** 2, 0)
    missed = np.zeros(paths, dtype=bool)
    for t in range(start, steps, 7):
        for i in range(paths):
            lo, hi = seq.asymptotic_cs(t + 1, mean[i, t], var[i, t], alpha)
            missed[i] |= not (lo <= true_mean <= hi)
    assert 1 - missed.mean() >= 1 - alpha - 0.03


def test_normal_mixture_e_value_matches_integral_and_cs() -> None:
    z, t, rho2 = -2.7, 400, seq.rho2_for_target(1000)
    s = math.sqrt(t) * z
    for alt, (lo, hi, w) in {"two-sided": (-np.inf, np.inf, 1.0), "less": (-np.inf, 0, 2.0),
                             "greater": (0, np.inf, 2.0)}.items():
        val, _ = integrate.quad(lambda lam: math.exp(lam * s - lam * lam * t / 2)
                                * stats.norm.pdf(lam, 0, math.sqrt(rho2)), lo, hi, epsabs=0, epsrel=1e-10)
        assert seq.log_normal_mixture_e_value(z, t, rho2, alt) == pytest.approx(math.log(w * val), rel=1e-8)
    # two-sided e >= 1/alpha  <=>  the CS excludes 0
    for mean in np.linspace(-0.3, 0.3, 61):
        n, var = 300, 1.0
        e = seq.mean_e_value(n, mean, var, "two-sided")
        lo, hi = seq.asymptotic_cs(n, mean, var)
        assert (e >= 20) == (lo > 0 or hi < 0)
