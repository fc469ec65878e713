"""alerts.sequential against direct numerical integration, its formulas, and simulated coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from alerts import sequential as seq
from tests.support.paired_sim import discordant_counts, paired_outcomes

A, B = seq.DEFAULT_PRIOR_A, seq.DEFAULT_PRIOR_B


def _quad_log_e(b: int, c: int, a: float, beta: float, alternative: str) -> float:
    """log ∫ Π (2p)^x (2(1−p))^(1−x) dπ(p) by quadrature, prior truncated per the alternative."""
    lo, hi = {"less": (0.0, 0.5), "greater": (0.5, 1.0), "two-sided": (0.0, 1.0)}[alternative]

    def log_integrand(p: float) -> float:
        return (c * math.log(2 * p) + b * math.log(2 * (1 - p)) + (a - 1) * math.log(p)
                + (beta - 1) * math.log(1 - p))

    grid = np.linspace(lo + 1e-9, hi - 1e-9, 2001)
    shift = max(log_integrand(p) for p in grid)  # keep the integrand O(1)
    num, _ = integrate.quad(lambda p: math.exp(log_integrand(p) - shift), lo, hi, limit=200, epsabs=0, epsrel=1e-10)
    mass, _ = integrate.quad(lambda p: stats.beta.pdf(p, a, beta), lo, hi, epsabs=0, epsrel=1e-12)
    return float(math.log(num) + shift - special.betaln(a, beta) - math.log(mass))


@pytest.mark.parametrize("alternative", ["less", "greater", "two-sided"])
def test_e_value_matches_numerical_integration(alternative: str) -> None:
    rng = np.random.default_rng(7)
    for b, c in rng.integers(0, 250, size=(12, 2)):
        for a, beta in ((A, B), (1.0, 1.0), (2.0, 5.0)):
            got = seq.log_paired_mixture_e_value(int(b), int(c), a, beta, alternative)
            assert got == pytest.approx(_quad_log_e(int(b), int(c), a, beta, alternative), abs=1e-6), (b, c, a, beta)


def test_e_value_closed_form_and_edge_cases() -> None:
    assert seq.paired_mixture_e_value(0, 0) == 1.0
    for alt in seq.ALTERNATIVES:
        assert seq.log_paired_mixture_e_value(0, 0, alternative=alt) == pytest.approx(0.0, abs=1e-12)
    b, c = 40, 17
    two = 2.0 ** (b + c) * math.exp(special.betaln(A + c, B + b) - special.betaln(A, B))
    assert seq.paired_mixture_e_value(b, c, alternative="two-sided") == pytest.approx(two, rel=1e-10)
    # "greater" on (b, c) mirrors "less" on (c, b)
    assert seq.paired_mixture_e_value(b, c, alternative="greater") == pytest.approx(
        seq.paired_mixture_e_value(c, b, alternative="less"), rel=1e-12)
    with pytest.raises(ValueError, match="alternative"):
        seq.paired_mixture_e_value(1, 1, alternative="lower")
    with pytest.raises(ValueError, match="b and c must be >= 0"):
        seq.paired_mixture_e_value(-1, 1)


def test_e_value_vectorised_equals_scalar() -> None:
    b = np.array([[0, 5, 100], [3000, 20, 7]])
    c = np.array([[0, 9, 60], [10, 2000, 7]])
    vec = seq.log_paired_mixture_e_value(b, c)
    for i in np.ndindex(b.shape):
        assert vec[i] == pytest.approx(seq.log_paired_mixture_e_value(int(b[i]), int(c[i])), rel=1e-12, abs=1e-12)


def test_log_betainc_half_in_the_underflow_region() -> None:
    a, b = 3000.0, 10.0  # betainc underflows to 0 here
    assert special.betainc(a, b, 0.5) == 0.0

    def f(p: float) -> float:
        return (a - 1) * math.log(p) + (b - 1) * math.log1p(-p)

    num, _ = integrate.quad(lambda p: math.exp(f(p) - f(0.5)), 0.0, 0.5, epsabs=0, epsrel=1e-12, points=[0.499])
    expected = math.log(num) + f(0.5) - special.betaln(a, b)
    assert float(seq._log_betainc_half(a, b)) == pytest.approx(expected, rel=1e-9)
    # and it agrees with betainc where both work
    assert float(seq._log_betainc_half(30.0, 4.0)) == pytest.approx(math.log(special.betainc(30.0, 4.0, 0.5)))


@pytest.mark.parametrize("alternative", ["less", "greater", "two-sided"])
def test_martingale_under_the_null_and_supermartingale_under_the_composite_null(alternative: str) -> None:
    for b, c in ((0, 0), (3, 9), (40, 12), (250, 260)):
        m = seq.paired_mixture_e_value(b, c, alternative=alternative)
        m_b, m_c = seq.paired_mixture_e_value(b + 1, c, alternative=alternative), \
            seq.paired_mixture_e_value(b, c + 1, alternative=alternative)
        assert 0.5 * m_b + 0.5 * m_c == pytest.approx(m, rel=1e-9)  # p = 1/2: exact martingale
        if alternative != "two-sided":
            p_null = 0.7 if alternative == "less" else 0.3  # P(c pair) inside the composite null
            assert p_null * m_c + (1 - p_null) * m_b <= m * (1 + 1e-12)


def test_anytime_false_alarm_of_the_paired_e_value_is_below_alpha() -> None:
    b, c = discordant_counts(400, 500, 10, 0.7, 0.7, 0.5, seed=11)  # 5,000 pairs per path, 500 looks
    log_e = seq.log_paired_mixture_e_value(np.cumsum(b, 1), np.cumsum(c, 1))
    assert np.mean((log_e >= math.log(20)).any(axis=1)) <= 0.05 + 0.02
    b, c = discordant_counts(100, 100, 60, 0.7, 0.62, 0.5, seed=12)  # an 8-point drop is found
    log_e = seq.log_paired_mixture_e_value(np.cumsum(b, 1), np.cumsum(c, 1))
    assert np.mean((log_e >= math.log(20)).any(axis=1)) >= 0.95


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


def test_bernoulli_and_net_flip_cs() -> None:
    lo, hi = seq.bernoulli_cs(30, 100, 0.05)
    assert lo < 0.3 < hi
    for q in (lo, hi):  # the boundary is where the mixture crosses 1/alpha
        log_m = special.betaln(31, 71) - special.betaln(1, 1) - (30 * math.log(q) + 70 * math.log1p(-q))
        assert log_m == pytest.approx(math.log(20), abs=1e-6)
    assert seq.net_flip_cs(0, 0, 0) == (-1.0, 1.0)
    lo, hi = seq.net_flip_cs(1000, 120, 90)
    assert lo < (90 - 120) / 1000 < hi and -1 <= lo and hi <= 1
    with pytest.raises(ValueError, match="b \\+ c <= n_pairs"):
        seq.net_flip_cs(10, 8, 8)


def test_net_flip_cs_time_uniform_coverage() -> None:
    rng = np.random.default_rng(5)
    delta = 0.63 - 0.7
    checkpoints = np.unique(np.geomspace(10, 2000, 25).astype(int))
    covered = 0
    for _ in range(200):
        base, cand = paired_outcomes(2000, 0.7, 0.63, 0.5, rng)
        b_cum, c_cum = np.cumsum(base & ~cand), np.cumsum(cand & ~base)
        covered += all(lo <= delta <= hi for lo, hi in
                       (seq.net_flip_cs(int(t), int(b_cum[t - 1]), int(c_cum[t - 1])) for t in checkpoints))
    assert covered / 200 >= 0.95 - 0.02
