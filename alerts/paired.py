"""Shadow (paired) findings and absolute thresholds, on exact betting e-values (pure).

Tests (:mod:`monitor.stats.betting`), each H0: effect <= floor with the floor
inside the null:

- **success_regression**: net flip (b − c)/n_pairs ("candidate worse" = only
  the baseline succeeded), floor ``Floors.success_points``.
- **safety_regression**: harmful-action rise (harm_c − harm_b)/n_pairs, floor 0.
- **over_refusal_regression**: over-refusal rise (refusal_c − refusal_b)/benign_pairs,
  floor 0 (benign requests only).
- **safety_threshold**: the candidate's harmful-action rate (over all its
  pairs or traces) or over-refusal rate (over its benign ones) vs the
  configured threshold (the floor).

Assumed: under H0 every new pair (trace) has a conditional mean effect <= the
floor given the past — no iid, exchangeability or normality; counts are
cumulative from the comparison's first pair. Guaranteed: P(e_t >= 1/α' at any
look, ever) <= α' (Ville), exact at every n, so no minimum sample.

Decision at the level α' (the family's share after e-BH):
``significant = fires = e >= 1/α'`` and ``beyond_floor = effect_low > floor``,
which are equal by duality (``effect_low`` is the one-sided anytime-valid
lower confidence bound at α', ``effect_high`` the end of the scale, 1.0).
``detail["counters"]`` is ``{"n", "worse", "better"}`` ("flip") or ``{"n", "x"}`` ("rate").
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Any

from alerts.evidence import Comparison
from alerts.policy import SAFETY_KINDS, Finding, Policy
from monitor.pairing import PairedCounts
from monitor.slices import SliceKey
from monitor.stats import betting, capped_mean

TEST_FLIP = "betting e-process on the paired net flip, floor in the null (exact, anytime-valid)"
TEST_RATE = "betting e-process on the rate vs the threshold (exact, anytime-valid)"
TEST_CAPPED = ("empirical-Bernstein e-process on the relative increase of the capped means, floor in the null "
               "(nonasymptotic, anytime-valid; values over the cap count as the cap)")
SCALE_END = 1.0


@functools.lru_cache(maxsize=1 << 14)  # pure; unchanged slices are asked again every tick
def _flip_low(worse: int, better: int, n: int, alpha: float) -> float:
    return betting.flip_lower_bound(worse, better, n, alpha)


@functools.lru_cache(maxsize=1 << 14)
def _rate_low(x: int, n: int, alpha: float) -> float:
    return betting.rate_lower_bound(x, n, alpha)


def rate_e_value(x: int, n: int, threshold: float) -> float:
    """``betting.rate_e_value`` extended to the closed range: threshold 0 is rejected by any event
    (inf), threshold 1 by nothing (1.0)."""
    if threshold <= 0.0:
        return math.inf if x > 0 else 1.0
    if threshold >= 1.0:
        return 1.0
    return betting.rate_e_value(x, n, threshold)


def interval_text(alpha: float) -> str:
    return (f"one-sided lower {100 * (1 - alpha):.4g}% anytime-valid confidence bound (dual of the test); "
            f"upper end {SCALE_END:g} is the end of the scale")


def conclude_betting(finding: Finding, alpha: float, compute_bound: bool = True) -> Finding:
    """The decision at level ``alpha`` (α') for a finding whose counters are "flip" or "rate".

    ``compute_bound`` False skips the bisected lower bound of findings that are not
    significant (the validity bench's speed-up; decisions are unchanged)."""
    counters = finding.detail["counters"]
    eligible = bool(finding.detail.get("eligible", True))
    significant = eligible and finding.e_value >= 1.0 / alpha
    kind = finding.detail["counters_kind"]
    flip = kind == "flip"
    interval = interval_text(alpha)
    end = math.inf if kind == "capped_mean" else SCALE_END
    if kind == "capped_mean":
        interval = interval.replace(f"upper end {SCALE_END:g} is the end of the scale", "no upper end (one-sided)")
    if not significant and not compute_bound:
        # The start of the scale is a (trivially) valid lower bound, and by duality the
        # bisected one would not clear the floor either: the decision is the same.
        low, interval = (-1.0 if kind != "rate" else 0.0), "not computed (not significant); " + interval
    elif kind == "capped_mean":
        low = capped_mean.lower_bound(capped_mean.CappedSums.of(counters), alpha) if finding.n_pairs else -1.0
    elif flip:
        low = _flip_low(int(counters["worse"]), int(counters["better"]), int(counters["n"]), alpha)
    else:
        low = _rate_low(int(counters["x"]), int(counters["n"]), alpha)
    severity = "critical" if finding.kind in SAFETY_KINDS or significant else "warning"
    return replace(finding, significant=significant, beyond_floor=low > finding.floor, fires=significant,
                   effect_low=low, effect_high=end, alpha=alpha, severity=severity,
                   detail={**finding.detail, "interval": interval})


def capped_mean_finding(kind: str, comparison: Comparison, slice_key: SliceKey, policy: Policy,
                        sums: capped_mean.CappedSums, *, over_cap: int, n_pairs: int, expected_cap: float,
                        unit: str) -> Finding:
    """cost_regression / latency_regression: H0 relative increase of the capped means <= the floor.

    A cap recorded by the workers that is not ``expected_cap`` (changed without a rebuild, or another
    configuration) leaves the test out (e-value 1, marked in the detail): its bound would not hold."""
    floor = policy.floors.cost_relative if kind == "cost_regression" else policy.floors.latency_relative
    same_cap = sums.n == 0 or math.isclose(sums.cap, expected_cap, rel_tol=1e-9)
    e = capped_mean.e_value(sums, floor) if same_cap else 1.0
    f = _unconcluded(kind, comparison, slice_key, e_value=e, effect=capped_mean.point_ratio(sums), floor=floor,
                     n=sums.n, b=0, c=0,
                     detail={"test": TEST_CAPPED, "counters_kind": "capped_mean", "unit": "relative",
                             "counters": sums._asdict(), "cap": expected_cap, "cap_unit": unit,
                             "over_cap": over_cap, "pairs": n_pairs,
                             "mean_capped_baseline": sums.b / sums.n if sums.n else None,
                             **({} if same_cap else {"eligible": False, "cap_mismatch": sums.cap})})
    return conclude_betting(f, policy.alpha_share(kind), compute_bound=False)


def _unconcluded(kind: str, comparison: Comparison, slice_key: SliceKey, *, e_value: float, effect: float,
                 floor: float, n: int, b: int, c: int, detail: dict[str, Any]) -> Finding:
    return Finding(kind, comparison, slice_key, "warning", False, False, False, float(e_value), float(effect),
                   -SCALE_END, SCALE_END, float(floor), math.nan, int(n), int(b), int(c),
                   {"eligible": True, **detail})


def flip_finding(kind: str, comparison: Comparison, slice_key: SliceKey, policy: Policy, *, n: int, worse: int,
                 better: int, floor: float, b: int, c: int) -> Finding:
    """A paired finding at the kind's α share (K = 1); ``b``/``c`` keep the baseline-only / candidate-only cells."""
    f = _unconcluded(kind, comparison, slice_key, e_value=betting.flip_e_value(worse, better, n, floor),
                     effect=(worse - better) / n if n else 0.0, floor=floor, n=n, b=b, c=c,
                     detail={"test": TEST_FLIP, "counters_kind": "flip",
                             "counters": {"n": n, "worse": worse, "better": better}})
    return conclude_betting(f, policy.alpha_share(kind), compute_bound=False)  # e-BH concludes it


def threshold_finding(comparison: Comparison, slice_key: SliceKey, policy: Policy, metric: str, x: int,
                      n: int) -> Finding:
    """The candidate's rate ``x / n`` of ``metric`` vs its configured threshold, at the metric's α share."""
    threshold = policy.thresholds()[metric]
    f = _unconcluded("safety_threshold", comparison, slice_key, e_value=rate_e_value(x, n, threshold),
                     effect=x / n if n else 0.0, floor=threshold, n=n, b=0, c=0,
                     detail={"test": TEST_RATE, "metric": metric, "counters_kind": "rate",
                             "counters": {"n": n, "x": x}})
    return conclude_betting(f, policy.alpha_share("safety_threshold", metric), compute_bound=False)


def shadow_betting_findings(comparison: Comparison, slice_key: SliceKey, counts: PairedCounts,
                            policy: Policy) -> list[Finding]:
    """success, safety and over-refusal regressions, then one threshold finding per configured metric."""
    n = counts.n_pairs
    out = [flip_finding("success_regression", comparison, slice_key, policy, n=n, worse=counts.b,
                        better=counts.c, floor=policy.floors.success_points, b=counts.b, c=counts.c),
           flip_finding("safety_regression", comparison, slice_key, policy, n=n, worse=counts.harm_c,
                        better=counts.harm_b, floor=0.0, b=counts.harm_b, c=counts.harm_c),
           flip_finding("over_refusal_regression", comparison, slice_key, policy, n=counts.benign_pairs,
                        worse=counts.refusal_c, better=counts.refusal_b, floor=0.0, b=counts.refusal_b,
                        c=counts.refusal_c)]
    thresholds = policy.thresholds()
    if "harmful_action" in thresholds:
        out.append(threshold_finding(comparison, slice_key, policy, "harmful_action", counts.candidate_harmful, n))
    if "over_refusal" in thresholds:
        out.append(threshold_finding(comparison, slice_key, policy, "over_refusal", counts.candidate_over_refusals,
                                     counts.candidate_benign))
    return out
