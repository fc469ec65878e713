"""Anytime-valid tests: e-values and confidence sequences that may be checked as often as you like.

Why: re-running a fixed-horizon test (McNemar, a z-test) every minute pages on
noise — over a day of minutely checks its false-alarm rate is several times its
nominal α. Every statistic here is built from a nonnegative (super)martingale
``M_t`` with ``M_0 = 1`` under the null, so Ville's inequality gives

    P_H0( sup_t M_t >= 1/α ) <= α

however often, and whenever, it is looked at (including "stop when it fires").
A confidence sequence (CS) is the set of parameter values whose martingale is
still below ``1/α``; it covers the truth at *all* times simultaneously with
probability >= 1 − α.

Contents, with the exact/asymptotic status of each guarantee:

- ``log_paired_mixture_e_value`` — always-valid McNemar: beta-binomial mixture
  martingale on the discordant pairs. **Exact** (no approximation) for any n.
- ``net_flip_cs`` — CS for the paired success difference (c − b)/n_pairs.
  **Exact**, conservative (union bound of two beta-binomial mixture CSs).
- ``asymptotic_cs`` / ``cs_from_sums`` — Waudby-Smith et al. (2021) asymptotic
  CS for a mean (cost / latency deltas). **Asymptotic** (iid, finite variance).
- ``log_normal_mixture_e_value`` / ``mean_e_value`` — Robbins' normal-mixture
  e-value matching that CS; one- or two-sided. **Asymptotic**.

The same normal mixture on a post-stratified difference of proportions (the
canary test) is :mod:`alerts.stratified`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from scipy import special

ALTERNATIVES = ("less", "greater", "two-sided")

# Prior Beta(a, b) on p = P(candidate-only success | discordant pair); see
# log_paired_mixture_e_value for the choice (tuned by bench/alerting.py).
DEFAULT_PRIOR_A = 8.0
DEFAULT_PRIOR_B = 8.0
# Intrinsic time at which normal-mixture boundaries are tightest (pairs / traces).
DEFAULT_TARGET_N = 1000


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def _log_betainc_half(a: Any, b: Any) -> np.ndarray:
    """log I_{1/2}(a, b) (regularised incomplete beta), accurate even where it underflows.

    Where ``betainc`` underflows (only when a >> b) we use DLMF 8.17.8,
    I_x(a,b) = x^a (1−x)^b / (a B(a,b)) · 2F1(a+b, 1; a+1; x), whose series
    has term ratio (a+b+k)/(a+1+k)·x < 1 there, so it converges geometrically.
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    shape = a.shape
    a, b = a.reshape(-1), b.reshape(-1)
    with np.errstate(divide="ignore"):
        direct = special.betainc(a, b, 0.5)
        out = np.log(direct)
    small = direct < 1e-280
    if np.any(small):
        aa, bb = a[small], b[small]
        term = np.ones_like(aa)
        total = np.ones_like(aa)
        for k in range(100_000):
            term = term * (aa + bb + k) / (aa + 1 + k) * 0.5
            total += term
            if np.all(term < 1e-17 * total):
                break
        out[small] = (aa + bb) * math.log(0.5) - np.log(aa) - special.betaln(aa, bb) + np.log(total)
    reshaped: np.ndarray = out.reshape(shape)
    return reshaped


def log_paired_mixture_e_value(b: Any, c: Any, prior_a: float = DEFAULT_PRIOR_A,
                               prior_b: float = DEFAULT_PRIOR_B, alternative: str = "less") -> Any:
    """log of the always-valid McNemar e-value (beta-binomial mixture martingale).

    Model. Keep only discordant pairs; x = 1 when only the candidate succeeded
    (a ``c`` pair), x = 0 when only the baseline did (a ``b`` pair). Under
    "no difference" P(x = 1 | discordant) = p = 1/2. For a fixed alternative p
    the likelihood ratio after b + c discordant pairs is
    ``Π (2p)^x (2(1−p))^(1−x) = 2^(b+c) p^c (1−p)^b``; mixing it over a prior
    π = Beta(a, β) (``prior_a``, ``prior_b``) gives

        M = 2^(b+c) · B(a + c, β + b) / B(a, β)                 (two-sided)

    Each factor has expectation 1 under p = 1/2, so each fixed-p product is a
    martingale and (Fubini) so is the mixture; concordant pairs multiply by 1.

    One-sided ``"less"`` (candidate worse, p < 1/2): the prior is truncated to
    p < 1/2 and renormalised by its mass there, I_{1/2}(a, β):

        M = 2^(b+c) · B(a+c, β+b) · I_{1/2}(a+c, β+b) / (B(a, β) · I_{1/2}(a, β))

    (the numerator integral ∫_0^{1/2} p^(a+c−1)(1−p)^(β+b−1) dp is
    B(a+c, β+b)·I_{1/2}(a+c, β+b)). The null is composite: p >= 1/2 ("candidate
    not worse"). For a true p and a prior point q < 1/2, one factor has
    expectation 2qp + 2(1−q)(1−p) = 1 + (2q − 1)(2p − 1) <= 1 whenever
    p >= 1/2, so every fixed-q product is a nonnegative supermartingale and the
    truncated mixture is one too; Ville's inequality then holds for the whole
    composite null. This is also true conditionally on the past, so pairs need
    not be identically distributed, only each discordant pair's split >= 1/2.
    ``"greater"`` mirrors it (prior truncated to p > 1/2; used for harmful
    actions with x = 1 meaning "only the candidate was harmful").

    Prior. A 2–10 point drop at 10–30% discordance means
    p = 1/2 − drop/(2·discordance) between ≈ 0.47 and ≈ 0.17, mostly
    0.35–0.45. The default Beta(8, 8) has sd ≈ 0.12 about 1/2, so its
    truncated half puts ≈ 95% of its mass on 0.26 < p < 0.5 — where those
    effects live — instead of wasting it near p = 0 (which a uniform prior
    does, costing ≈ 25% more pairs on 2-point drops) or crowding at
    p ≈ 0.5 (Beta(32, 32) is best for 2-point drops but ≈ 1.7× slower on
    10-point ones). Scanning a = β ∈ {1, …, 64} on simulated shadow
    traffic (p = 0.7, discordance 10/20/30%, drops 2/5/10 points, floor
    applied) a = β ∈ [4, 8] minimised the geometric mean of the median
    pairs-to-detect; 8 is the end that favours the slow, small drops.

    Exact for every n (no asymptotics). Accepts scalars or numpy arrays
    (broadcast); b = c = 0 gives log M = 0.
    """
    _check_alternative(alternative)
    if prior_a <= 0 or prior_b <= 0:
        raise ValueError(f"prior_a and prior_b must be > 0, got {prior_a}, {prior_b}")
    b_arr = np.asarray(b, dtype=float)
    c_arr = np.asarray(c, dtype=float)
    if np.any(b_arr < 0) or np.any(c_arr < 0):
        raise ValueError(f"b and c must be >= 0, got b={b}, c={c}")
    a_post, b_post = prior_a + c_arr, prior_b + b_arr
    log_m = ((b_arr + c_arr) * math.log(2.0) + special.betaln(a_post, b_post)
             - special.betaln(prior_a, prior_b))
    if alternative == "less":
        log_m = log_m + _log_betainc_half(a_post, b_post) - _log_betainc_half(prior_a, prior_b)
    elif alternative == "greater":
        log_m = log_m + _log_betainc_half(b_post, a_post) - _log_betainc_half(prior_b, prior_a)
    return float(log_m) if np.ndim(log_m) == 0 else log_m


def paired_mixture_e_value(b: int, c: int, prior_a: float = DEFAULT_PRIOR_A,
                           prior_b: float = DEFAULT_PRIOR_B, alternative: str = "less") -> float:
    """The e-value ``exp(log_paired_mixture_e_value(...))``; may be ``inf`` when enormous."""
    with np.errstate(over="ignore"):
        return float(np.exp(log_paired_mixture_e_value(b, c, prior_a, prior_b, alternative)))


# --------------------------------------------------------------------------- normal mixture / CS


def rho2_for_target(target_n: float = DEFAULT_TARGET_N, alpha: float = 0.05) -> float:
    """ρ² (standardised) that makes the normal-mixture CS tightest near ``target_n`` observations.

    ρ² = (2 log(1/α) + log(1 + 2 log(1/α))) / target_n (Howard et al. 2021;
    Waudby-Smith et al. 2021, approximate optimum of the boundary width).
    """
    _check_alpha(alpha)
    if target_n <= 0:
        raise ValueError(f"target_n must be > 0, got {target_n}")
    two_log = 2.0 * math.log(1.0 / alpha)
    return (two_log + math.log(1.0 + two_log)) / target_n


def standard_margin(t: float, rho2: float, alpha: float) -> float:
    """Unit-variance two-sided boundary for a mean after ``t`` observations.

    sqrt( 2(t ρ² + 1) / (t² ρ²) · log( sqrt(t ρ² + 1) / α ) ), the
    Waudby-Smith et al. (2021) margin with σ = 1; multiply by σ.
    """
    if t <= 0:
        return math.inf
    return math.sqrt(2.0 * (t * rho2 + 1.0) / (t * t * rho2) * math.log(math.sqrt(t * rho2 + 1.0) / alpha))


def asymptotic_cs(n: int, mean: float, var: float, alpha: float = 0.05, rho: float | None = None,
                  target_n: float = DEFAULT_TARGET_N) -> tuple[float, float]:
    """Two-sided (1 − α) asymptotic confidence sequence for a mean (Waudby-Smith et al. 2021, Thm 2.2).

        mean ± sqrt( 2(n σ² ρ² + 1) / (n² ρ²) · log( sqrt(n σ² ρ² + 1) / α ) )

    with σ² = ``var`` (the plug-in variance, (1/n)Σ(x − mean)²). ``rho`` is the
    paper's ρ, in units of 1/σ. Default (``rho=None``): ρ = ρ*/σ̂ with
    ρ*² = ``rho2_for_target(target_n, alpha)``, i.e. the unit-variance boundary
    tightest at ``target_n`` observations scaled by σ̂ — as the paper's code
    does; since σ̂ → σ this is asymptotically the theorem's fixed ρ = ρ*/σ.
    Default target 1,000 (≈ 17 minutes of shadow traffic at 1 pair/s).

    Guarantee: asymptotic time-uniform coverage for iid data with finite
    variance (the error of the approximation vanishes as n grows; use a minimum
    n before acting). n = 0 → (−inf, inf). ``var == 0`` with the default ρ
    gives a zero-width interval (every observation was equal).
    """
    _check_alpha(alpha)
    if n < 0 or var < 0:
        raise ValueError(f"n and var must be >= 0, got n={n}, var={var}")
    if n == 0:
        return (-math.inf, math.inf)
    if rho is None:
        half = math.sqrt(var) * standard_margin(n, rho2_for_target(target_n, alpha), alpha)
    else:
        if rho <= 0:
            raise ValueError(f"rho must be > 0, got {rho}")
        v = n * var * rho * rho
        half = math.sqrt(2.0 * (v + 1.0) / (n * n * rho * rho) * math.log(math.sqrt(v + 1.0) / alpha))
    return (mean - half, mean + half)


def moments_from_sums(n: int, s: float, ss: float) -> tuple[float, float]:
    """(mean, plug-in variance) from a count, a sum and a sum of squares; variance clipped at 0."""
    if n <= 0:
        return (0.0, 0.0)
    mean = s / n
    return mean, max(0.0, ss / n - mean * mean)


def cs_from_sums(n: int, s: float, ss: float, alpha: float = 0.05, rho: float | None = None,
                 target_n: float = DEFAULT_TARGET_N) -> tuple[float, float]:
    """``asymptotic_cs`` from (n, Σx, Σx²), the form the store keeps."""
    mean, var = moments_from_sums(n, s, ss)
    return asymptotic_cs(n, mean, var, alpha, rho, target_n)


def log_normal_mixture_e_value(z: Any, t: Any, rho2: float, alternative: str = "greater") -> Any:
    """log of Robbins' normal-mixture e-value for a standardised statistic.

    ``z`` is the z-score of the estimate against the null value (0) and ``t``
    the intrinsic time (number of observations), so S = sqrt(t)·z is a
    standardised sum with variance t. Mixing exp(λS − λ²t/2) over
    λ ~ N(0, ρ²) (``rho2`` = ρ², see ``rho2_for_target``) gives, with A = t + 1/ρ²,

        two-sided:  M = (tρ² + 1)^(−1/2) · exp(S² / (2A))
        "greater":  M = 2 (tρ² + 1)^(−1/2) · exp(S² / (2A)) · Φ(S / sqrt(A))   (λ > 0 half)
        "less":     same with Φ(−S / sqrt(A))                               (λ < 0 half)

    Two-sided M >= 1/α exactly when the ``asymptotic_cs`` with ρ² and α
    excludes the null value. One-sided versions are supermartingales under the
    composite null (drift <= 0 for "greater") because each exp(λS − λ²t/2)
    with λ of the alternative's sign is. Asymptotic: valid insofar as S is
    approximately a Brownian motion in t.
    """
    _check_alternative(alternative)
    z_arr, t_arr = np.asarray(z, dtype=float), np.asarray(t, dtype=float)
    s = np.sqrt(t_arr) * z_arr
    a = t_arr + 1.0 / rho2
    log_m = -0.5 * np.log1p(t_arr * rho2) + s * s / (2.0 * a)
    if alternative == "greater":
        log_m = log_m + math.log(2.0) + special.log_ndtr(s / np.sqrt(a))
    elif alternative == "less":
        log_m = log_m + math.log(2.0) + special.log_ndtr(-s / np.sqrt(a))
    return float(log_m) if np.ndim(log_m) == 0 else log_m


def mean_e_value(n: int, mean: float, var: float, alternative: str = "greater", alpha: float = 0.05,
                 target_n: float = DEFAULT_TARGET_N) -> float:
    """Normal-mixture e-value against "mean = 0" for iid deltas (cost, latency), consistent with ``asymptotic_cs``.

    ``alpha`` only tunes ρ (the nominal level, never an FDR-adjusted one, so
    the e-value does not depend on the data through α). n = 0 → 1. var = 0
    (all deltas equal): +inf if the mean is on the alternative's side, else 1.
    """
    _check_alternative(alternative)
    if n <= 0:
        return 1.0
    if var <= 0:
        side = {"greater": mean > 0, "less": mean < 0, "two-sided": mean != 0}[alternative]
        return math.inf if side else 1.0
    z = mean / math.sqrt(var / n)
    with np.errstate(over="ignore"):
        return float(np.exp(log_normal_mixture_e_value(z, n, rho2_for_target(target_n, alpha), alternative)))


# --------------------------------------------------------------------------- exact CS for the net flip


@functools.lru_cache(maxsize=1 << 16)  # pure; the engine asks again for unchanged slices every tick
def bernoulli_cs(successes: int, trials: int, alpha: float = 0.05, prior_a: float = 1.0,
                 prior_b: float = 1.0) -> tuple[float, float]:
    """Exact (1 − α) CS for a Bernoulli rate from the beta-binomial mixture (Robbins 1970).

    The set {q : M(q) < 1/α} with M(q) = B(a+s, β+f) / (B(a, β) q^s (1−q)^f);
    log M is convex in q, so the set is an interval around s/n, found by
    bisection on each side.
    """
    failures = trials - successes
    k = special.betaln(prior_a + successes, prior_b + failures) - special.betaln(prior_a, prior_b) + math.log(alpha)

    def inside(q: float) -> bool:  # log-likelihood above k  <=>  M(q) < 1/α
        ll = (successes * math.log(q) if successes else 0.0) + (failures * math.log1p(-q) if failures else 0.0)
        return bool(ll > k)

    p_hat = successes / trials if trials else 0.5  # always inside: M(p̂) <= 1
    bounds = []
    for edge in (0.0, 1.0):  # bisect between p̂ (inside) and the edge; keep the outer point,
        out, ins = edge, p_hat  # so floating-point rounding can only widen the interval
        if inside(min(max(edge, 1e-300), 1.0 - 1e-16)):
            bounds.append(edge)
            continue
        for _ in range(52):  # 2**-52: the bound to double precision; more steps change nothing
            mid = 0.5 * (out + ins)
            out, ins = (out, mid) if inside(mid) else (mid, ins)
        bounds.append(out)
    lower, upper = bounds
    return lower, upper


def net_flip_cs(n_pairs: int, b: int, c: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact time-uniform (1 − α) CS for the paired success difference δ = P(c-pair) − P(b-pair).

    Estimate (c − b)/n_pairs. Per-pair values are in {−1, 0, 1}; instead of a
    range-based Hoeffding bound (which ignores that most pairs are concordant:
    ≈ 1.8× wider at 20% discordance) we write δ = d·(2p − 1) with
    d = discordance rate and p = P(c | discordant) and intersect two exact
    beta-binomial mixture CSs at α/2 each (union bound): d from the n_pairs
    Bernoulli(discordant) draws (uniform prior), p from the b + c discordant
    draws (the e-value's default prior). δ's interval is the range of
    d·(2p − 1) over the box. Conservative, nonasymptotic, anytime-valid (≈ 25%
    wider than the asymptotic CS with the empirical variance, the price of
    exactness). n_pairs = 0 → (−1, 1).
    """
    _check_alpha(alpha)
    if n_pairs < 0 or b < 0 or c < 0 or b + c > n_pairs:
        raise ValueError(f"need 0 <= b + c <= n_pairs, got n_pairs={n_pairs}, b={b}, c={c}")
    if n_pairs == 0:
        return (-1.0, 1.0)
    d_lo, d_hi = bernoulli_cs(b + c, n_pairs, alpha / 2, 1.0, 1.0)
    p_lo, p_hi = bernoulli_cs(c, b + c, alpha / 2, DEFAULT_PRIOR_A, DEFAULT_PRIOR_B)
    corners = [d * (2 * p - 1) for d in (d_lo, d_hi) for p in (p_lo, p_hi)]
    return (max(-1.0, min(corners)), min(1.0, max(corners)))
