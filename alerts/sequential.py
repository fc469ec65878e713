"""Asymptotic sequential tests (cost, latency, canary): normal-mixture e-values and confidence sequences.

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

- ``asymptotic_cs`` / ``cs_from_sums`` — Waudby-Smith et al. (2021) asymptotic
  CS for a mean (cost / latency deltas). **Asymptotic** (iid, finite variance).
- ``log_normal_mixture_e_value`` / ``mean_e_value`` — Robbins' normal-mixture
  e-value matching that CS; one- or two-sided. **Asymptotic**.

The same normal mixture on a post-stratified difference of proportions (the
canary test) is :mod:`alerts.stratified`. The exact paired and rate tests of
shadow traffic are the betting e-processes of :mod:`monitor.stats.betting`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

ALTERNATIVES = ("less", "greater", "two-sided")

# Intrinsic time at which normal-mixture boundaries are tightest (pairs / traces).
DEFAULT_TARGET_N = 1000


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


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
