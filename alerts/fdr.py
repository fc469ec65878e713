"""e-BH across the slices of each family, at the family's share of the comparison's α (pure).

A family is (comparison, kind[, metric]) — ``policy.family_name`` — and its
level α_kind is ``Policy.alpha_share``. With K findings in the family and
e-values sorted e_(1) >= … >= e_(K), k* = max{k : e_(k) >= 1/(α_kind k/K)}
(Wang & Ramdas 2022); the k* largest are rejected, i.e. each finding is
decided at α' = α_kind k*/K (α_kind/K when nothing is rejected), and its
interval is recomputed at that α'.

Guarantees: FDR <= α_kind within each family under any dependence between
slices. Time-uniform family-wise error under the family's global null
(A/A): a rejection at a look implies the mean of the K e-values is >= 1/α_kind,
and that mean is a nonnegative supermartingale, so P(e-BH ever rejects) <=
α_kind — assuming the family's set of K slices is fixed over its life (a slice
that appears later starts at e = 1 and makes the bound approximate).
Ineligible findings (e.g. a cost test whose cap does not match) count in K with e = 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from alerts.evidence import Comparison
from alerts.paired import conclude_betting
from alerts.policy import Finding, Policy, family_name


def e_bh_level(e_values: Sequence[float], alpha: float) -> tuple[float, int]:
    """(α', k*) of e-BH at level ``alpha`` over ``e_values``; reject exactly the e >= 1/α'."""
    k_total = len(e_values)
    ordered = sorted(e_values, reverse=True)
    k_star = max((k for k in range(1, k_total + 1) if ordered[k - 1] >= 1.0 / (alpha * k / k_total)), default=0)
    return alpha * max(k_star, 1) / k_total, k_star


def conclude(finding: Finding, alpha: float, compute_bound: bool = True) -> Finding:
    """The decision of one finding at level α': the e-process kinds recompute their bound at α'; a
    finding of another kind (none is produced today) keeps its interval and the floor on the estimate."""
    if finding.detail.get("counters_kind") in ("flip", "rate", "capped_mean"):
        return conclude_betting(finding, alpha, compute_bound)
    significant = bool(finding.detail.get("eligible", True)) and finding.e_value >= 1.0 / alpha
    fires = significant and (finding.kind == "safety_regression" or finding.beyond_floor)
    return replace(finding, significant=significant, fires=fires, alpha=alpha)


def fdr_across_slices(findings: Sequence[Finding], policy: Policy) -> list[Finding]:
    """Every finding decided at its α' (see the module docstring); order preserved."""
    families: dict[tuple[Comparison, str], list[int]] = {}
    for i, f in enumerate(findings):
        families.setdefault((f.comparison, family_name(f.kind, str(f.detail.get("metric", "")))), []).append(i)
    out = list(findings)
    for (_, name), idx in families.items():
        kind, _, metric = name.partition(":")
        alpha_kind = policy.alpha_share(kind, metric)
        e = [findings[i].e_value if findings[i].detail.get("eligible", True) else 1.0 for i in idx]
        alpha_prime, k_star = e_bh_level(e, alpha_kind)
        for i in idx:
            f = conclude(findings[i], alpha_prime, policy.bounds_for_all)
            out[i] = replace(f, detail={**f.detail, "alpha_family": alpha_kind, "family_size": len(idx),
                                        "rejections": k_star})
    return out
