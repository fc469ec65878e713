"""The canary test: a post-stratified difference of proportions with a normal-mixture e-value.

Canary traffic is disjoint from the baseline's, so the two arms are compared
within strata (task types) and weighted by the canary's own mix: a shift in
traffic mix alone cannot fake a regression. The e-value and confidence
sequence are the normal mixture of :mod:`alerts.sequential` applied to the
standardised stratified difference. **Asymptotic** (delta method and a
Gaussian approximation), checked under A/A with a mix shift in
``bench/alerting.py``. The engine feeds it the last hours of minute windows
(a sliding window), so as used it is *not* an e-process: outside the
per-comparison guarantee until canary evidence becomes cumulative.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from alerts.evidence import CanaryStrata
from alerts.sequential import DEFAULT_TARGET_N, log_normal_mixture_e_value, rho2_for_target, standard_margin


def stratified_difference(strata: CanaryStrata, outcome: str = "successes") -> dict[str, Any]:
    """Post-stratified difference Δ = Σ_s w_s (p̂_canary,s − p̂_baseline,s), w_s = canary share of s.

    Using the canary's own mix as the standard means a shift in traffic mix
    alone gives Δ ≈ 0. Variance (conditional on the canary mix):
    Σ_s w_s² (p̃_c(1−p̃_c)/n_c + p̃_b(1−p̃_b)/n_b) with p̃ = (x + 0.5)/(n + 1) so
    that 0 or n successes do not give a zero variance. Strata missing either
    arm cannot be compared and are dropped (listed in ``skipped``); weights are
    renormalised over the rest. ``outcome`` is ``"successes"`` or ``"harmful"``.
    Returns {delta, var, n_canary, n_baseline, strata, skipped}.
    """
    if outcome not in ("successes", "harmful"):
        raise ValueError(f"outcome must be 'successes' or 'harmful', got {outcome!r}")
    usable = {k: v for k, v in strata.strata.items() if v[0].n > 0 and v[1].n > 0}
    skipped = sorted(k for k in strata.strata if k not in usable)
    n_c = sum(c.n for _, c in usable.values())
    n_b = sum(b.n for b, _ in usable.values())
    delta, var = 0.0, 0.0
    for base, cand in usable.values():
        w = cand.n / n_c
        xb, xc = getattr(base, outcome), getattr(cand, outcome)
        delta += w * (xc / cand.n - xb / base.n)
        pb, pc = (xb + 0.5) / (base.n + 1), (xc + 0.5) / (cand.n + 1)
        var += w * w * (pc * (1 - pc) / cand.n + pb * (1 - pb) / base.n)
    return {"delta": delta, "var": var, "n_canary": n_c, "n_baseline": n_b,
            "strata": len(usable), "skipped": skipped}


def stratified_canary_e_value(strata: CanaryStrata, alternative: str = "less", outcome: str = "successes",
                              alpha: float = 0.05, target_n: float = DEFAULT_TARGET_N) -> float:
    """Normal-mixture e-value for H0: Δ >= 0 (``"less"``: canary worse) on the stratified difference.

    Construction: z = Δ̂ / sqrt(var̂) and intrinsic time t = canary traces used
    (with a stable arm allocation the information grows in proportion to it),
    fed to ``log_normal_mixture_e_value``; ``alpha`` only tunes ρ. Asymptotic
    (delta-method + Gaussian approximation), checked under A/A with a mix shift
    in bench/alerting.py. No usable stratum → 1.
    """
    est = stratified_difference(strata, outcome)
    if est["n_canary"] == 0 or est["var"] <= 0:
        return 1.0
    z = est["delta"] / math.sqrt(est["var"])
    with np.errstate(over="ignore"):
        return float(np.exp(log_normal_mixture_e_value(z, est["n_canary"], rho2_for_target(target_n, alpha),
                                                       alternative)))


def stratified_canary_cs(strata: CanaryStrata, alpha: float = 0.05, outcome: str = "successes",
                         target_n: float = DEFAULT_TARGET_N) -> tuple[float, float]:
    """Two-sided asymptotic (1 − α) CS for Δ: Δ̂ ± sqrt(var̂)·sqrt(t)·margin(t), t = canary traces.

    The same boundary as ``asymptotic_cs`` (σ̂/sqrt(t) replaced by the
    stratified standard error); it excludes 0 exactly when the two-sided
    normal-mixture e-value is >= 1/α. No usable stratum → (−1, 1).
    """
    est = stratified_difference(strata, outcome)
    t = est["n_canary"]
    if t == 0:
        return (-1.0, 1.0)
    half = math.sqrt(est["var"]) * math.sqrt(t) * standard_margin(t, rho2_for_target(target_n, alpha), alpha)
    return (max(-1.0, est["delta"] - half), min(1.0, est["delta"] + half))
