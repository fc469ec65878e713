"""The decision: from evidence to findings (significant? beyond the practical floor? fires?).

A finding answers one question for one (comparison, slice). ``effect`` is
always signed so that **positive = candidate worse**: a success *drop* in
points, a *relative* cost / latency increase, a *rise* in harmful-action rate,
or (thresholds) the candidate's absolute rate. ``effect_low``/``effect_high``
is the two-sided (1 − α) confidence sequence on that scale (time-uniform, so
it stays valid at every check).

Rules (DESIGN "Comparisons and alerts"):

- **success_regression** fires when the always-valid McNemar e-value (one-sided, "candidate
  worse") is >= 1/α' AND the drop is beyond the floor (default 2 points). α' is α after e-BH
  across the slices of the comparison. "Beyond the floor" uses the *point estimate*
  (b − c)/n_pairs by default: significance already guards against noise; requiring the interval's
  inner bound to clear the floor would make a true drop of exactly the floor undetectable. Set
  ``Policy(floor_rule="interval")`` for the stricter rule.
- **cost_regression / latency_regression** fire when the one-sided normal-mixture e-value is
  >= 1/α' — equivalently the one-sided (1 − α') confidence sequence lies above 0 — AND the relative
  increase vs the baseline mean is beyond the floor (default 10%). These tests are asymptotic,
  so they wait for ``min_pairs`` pairs; with no baseline mean the relative floor cannot be
  evaluated and they never fire (the effect is then absolute).
- **Safety is a hard veto.** safety_regression (paired e-value on harm_b vs harm_c, "candidate
  more harmful") fires when significant, with no floor and whatever capability did;
  safety_threshold fires whenever the candidate's harmful-action (or over-refusal) rate exceeds
  a configured absolute threshold — no test, no FDR — once ``threshold_min_n`` traces exist.

Severity: safety kinds are ``"critical"``; others are ``"page"`` when even the interval's inner
bound is beyond the floor (confidently material) and ``"warning"`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from alerts import sequential as seq
from alerts import stratified
from alerts.evidence import ArmCounts, CanaryStrata, Comparison
from monitor.pairing import PairedCounts
from monitor.slices import WHOLE_FLEET, SliceKey

FDR_KINDS = ("success_regression", "cost_regression", "latency_regression", "safety_regression")
KINDS = (*FDR_KINDS, "safety_threshold")
SAFETY_KINDS = ("safety_regression", "safety_threshold")

TEST_PAIRED = "beta-binomial mixture martingale (always-valid McNemar)"
TEST_MEAN = "normal-mixture e-value, asymptotic confidence sequence (Waudby-Smith et al. 2021)"
TEST_STRATIFIED = "stratified normal-mixture e-value (asymptotic), canary mix as standard"
TEST_THRESHOLD = "absolute threshold (no test)"


@dataclass(frozen=True)
class Floors:
    """Practical floors: success drop in points (0.02 = 2 points), relative cost/latency increase."""

    success_points: float = 0.02
    cost_relative: float = 0.10
    latency_relative: float = 0.10


@dataclass(frozen=True)
class Policy:
    """Decision policy. ``min_pairs`` gates the asymptotic tests only (cost, latency, canary);
    the exact paired tests (success, safety) run from the first pair."""

    alpha: float = 0.05
    floors: Floors = field(default_factory=Floors)
    harmful_threshold: float | None = None
    over_refusal_threshold: float | None = None
    min_pairs: int = 200
    floor_rule: str = "estimate"  # or "interval": the CS inner bound must clear the floor
    threshold_min_n: int = 50
    prior_a: float = seq.DEFAULT_PRIOR_A
    prior_b: float = seq.DEFAULT_PRIOR_B
    target_n: float = seq.DEFAULT_TARGET_N

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"Policy.alpha must be in (0, 1), got {self.alpha}")
        if self.floor_rule not in ("estimate", "interval"):
            raise ValueError(f"Policy.floor_rule must be 'estimate' or 'interval', got {self.floor_rule!r}")


@dataclass(frozen=True)
class Finding:
    """One test's outcome for one (comparison, slice). ``detail`` carries the counters the
    lifecycle needs for epochs (``counters``, ``counters_kind``), ``test``, ``cause`` etc."""

    kind: str
    comparison: Comparison
    slice_key: SliceKey
    severity: str
    significant: bool
    beyond_floor: bool
    fires: bool
    e_value: float
    effect: float
    effect_low: float
    effect_high: float
    floor: float
    alpha: float
    n_pairs: int
    b: int
    c: int
    detail: dict[str, Any] = field(default_factory=dict)


def _severity(kind: str, effect_low: float, floor: float) -> str:
    if kind in SAFETY_KINDS:
        return "critical"
    return "page" if effect_low >= floor else "warning"


def _beyond(effect: float, low: float, floor: float, policy: Policy) -> bool:
    return (low if policy.floor_rule == "interval" else effect) >= floor


def _finding(kind: str, comparison: Comparison, slice_key: SliceKey, policy: Policy, *, e_value: float,
             effect: float, low: float, high: float, floor: float, n: int, b: int = 0, c: int = 0,
             eligible: bool = True, beyond: bool | None = None, detail: dict[str, Any]) -> Finding:
    if kind == "safety_threshold":
        significant, beyond_floor = effect > floor, effect > floor
        fires = eligible and significant
    else:
        significant = eligible and e_value >= 1.0 / policy.alpha
        beyond_floor = _beyond(effect, low, floor, policy) if beyond is None else beyond
        fires = significant and (kind == "safety_regression" or beyond_floor)
    detail = {"eligible": eligible, **detail}
    return Finding(kind, comparison, slice_key, _severity(kind, low, floor), significant, beyond_floor, fires,
                   float(e_value), float(effect), float(low), float(high), float(floor), policy.alpha,
                   int(n), int(b), int(c), detail)


def _paired_finding(kind: str, comparison: Comparison, slice_key: SliceKey, policy: Policy, n: int, b: int,
                    c: int) -> Finding:
    """Shadow test on the discordant cells b (baseline-only) and c (candidate-only) of an outcome.

    success: candidate worse ⇔ more b; effect = drop (b − c)/n, e-value "less".
    safety (b = harm_b, c = harm_c): candidate worse ⇔ more c; effect = rise
    (c − b)/n, e-value "greater", floor 0.
    """
    lo, hi = seq.net_flip_cs(n, b, c, policy.alpha)  # CS for (c − b)/n
    if kind == "success_regression":
        e = seq.paired_mixture_e_value(b, c, policy.prior_a, policy.prior_b, "less")
        effect, lo, hi, floor = ((b - c) / n if n else 0.0), -hi, -lo, policy.floors.success_points
    else:
        e = seq.paired_mixture_e_value(b, c, policy.prior_a, policy.prior_b, "greater")
        effect, floor = ((c - b) / n if n else 0.0), 0.0
    return _finding(kind, comparison, slice_key, policy, e_value=e, effect=effect, low=lo, high=hi, floor=floor,
                    n=n, b=b, c=c, detail={"test": TEST_PAIRED, "counters_kind": "paired",
                                           "counters": {"n": n, "b": b, "c": c}})


def _mean_finding(kind: str, comparison: Comparison, slice_key: SliceKey, policy: Policy, n: int, s: float,
                  ss: float, baseline_mean: float | None, n_pairs: int, unit: str) -> Finding:
    mean, var = seq.moments_from_sums(n, s, ss)
    e = seq.mean_e_value(n, mean, var, "greater", policy.alpha, policy.target_n)
    lo, hi = seq.asymptotic_cs(n, mean, var, policy.alpha, target_n=policy.target_n)
    floor = policy.floors.cost_relative if kind == "cost_regression" else policy.floors.latency_relative
    relative = baseline_mean is not None and baseline_mean > 0
    scale = baseline_mean if baseline_mean is not None and relative else 1.0
    detail: dict[str, Any] = {"test": TEST_MEAN, "counters_kind": "mean", "unit": "relative" if relative else unit,
              "mean_delta": mean, "baseline_mean": baseline_mean,
              "counters": {"n": n, "sum": s, "sumsq": ss}}
    f = _finding(kind, comparison, slice_key, policy, e_value=e, effect=mean / scale, low=lo / scale,
                 high=hi / scale, floor=floor, n=n_pairs, eligible=n >= policy.min_pairs,
                 beyond=None if relative else False, detail=detail)
    return f if relative else replace(f, severity="warning")  # absolute units: not comparable to the floor


def _threshold_finding(comparison: Comparison, slice_key: SliceKey, policy: Policy, metric: str, x: int, n: int,
                       threshold: float) -> Finding:
    rate = x / n if n else 0.0
    lo, hi = seq.bernoulli_cs(x, n, policy.alpha, 1.0, 1.0) if n else (0.0, 1.0)
    return _finding("safety_threshold", comparison, slice_key, policy, e_value=math.nan, effect=rate, low=lo,
                    high=hi, floor=threshold, n=n, eligible=n >= policy.threshold_min_n,
                    detail={"test": TEST_THRESHOLD, "metric": metric, "counters_kind": "ratio",
                            "counters": {"n": n, "x": x}})


def decide_paired(comparison: Comparison, slice_key: SliceKey, counts: PairedCounts, policy: Policy,
                  baseline_cost_mean: float | None = None,
                  baseline_latency_mean: float | None = None) -> list[Finding]:
    """Findings for one shadow (paired) slice, *before* cross-slice FDR control (α' = α).

    Always returns success_regression and safety_regression; cost/latency when
    any pair reported them; one safety_threshold per configured threshold.
    ``baseline_*_mean`` (USD, seconds) turn deltas into relative increases.
    """
    n = counts.n_pairs
    out = [_paired_finding("success_regression", comparison, slice_key, policy, n, counts.b, counts.c),
           _paired_finding("safety_regression", comparison, slice_key, policy, n, counts.harm_b, counts.harm_c)]
    if counts.cost_n:
        out.append(_mean_finding("cost_regression", comparison, slice_key, policy, counts.cost_n,
                                 counts.cost_delta_sum, counts.cost_delta_sumsq, baseline_cost_mean, n, "usd"))
    if counts.latency_n:
        out.append(_mean_finding("latency_regression", comparison, slice_key, policy, counts.latency_n,
                                 counts.latency_delta_sum, counts.latency_delta_sumsq, baseline_latency_mean, n,
                                 "seconds"))
    if policy.harmful_threshold is not None:
        out.append(_threshold_finding(comparison, slice_key, policy, "harmful_action", counts.candidate_harmful,
                                      n, policy.harmful_threshold))
    if policy.over_refusal_threshold is not None:
        out.append(_threshold_finding(comparison, slice_key, policy, "over_refusal", counts.candidate_over_refusals,
                                      counts.candidate_benign, policy.over_refusal_threshold))
    return out


def _canary_finding(kind: str, comparison: Comparison, slice_key: SliceKey, policy: Policy,
                    strata: CanaryStrata) -> Finding:
    outcome, alternative = ("successes", "less") if kind == "success_regression" else ("harmful", "greater")
    est = stratified.stratified_difference(strata, outcome)
    e = stratified.stratified_canary_e_value(strata, alternative, outcome, policy.alpha, policy.target_n)
    lo, hi = stratified.stratified_canary_cs(strata, policy.alpha, outcome, policy.target_n)
    effect = est["delta"]
    if kind == "success_regression":
        effect, lo, hi, floor = -effect, -hi, -lo, policy.floors.success_points
    else:
        floor = 0.0
    eligible = est["n_canary"] >= policy.min_pairs and est["n_baseline"] >= policy.min_pairs
    return _finding(kind, comparison, slice_key, policy, e_value=e, effect=effect, low=lo, high=hi, floor=floor,
                    n=est["n_canary"], eligible=eligible,
                    detail={"test": TEST_STRATIFIED, "counters_kind": "strata", "outcome": outcome,
                            "n_baseline": est["n_baseline"], "strata": est["strata"],
                            "strata_skipped": est["skipped"], "counters": strata.to_dict()})


def decide_canary(comparison: Comparison, slice_key: SliceKey, strata: CanaryStrata,
                  policy: Policy) -> list[Finding]:
    """Findings for one canary slice whose traffic is split into ``strata`` (e.g. by task_type).

    success_regression and safety_regression use the stratified difference
    (canary mix as standard; asymptotic, gated by ``min_pairs`` traces in each
    arm); thresholds use the canary's pooled rates. ``n_pairs`` holds the
    canary trace count; ``b``/``c`` are 0 (they are shadow-only).
    """
    out = [_canary_finding("success_regression", comparison, slice_key, policy, strata),
           _canary_finding("safety_regression", comparison, slice_key, policy, strata)]
    _, cand = strata.totals()
    if policy.harmful_threshold is not None:
        out.append(_threshold_finding(comparison, slice_key, policy, "harmful_action", cand.harmful, cand.n,
                                      policy.harmful_threshold))
    if policy.over_refusal_threshold is not None:
        out.append(_threshold_finding(comparison, slice_key, policy, "over_refusal", cand.over_refusals,
                                      cand.benign, policy.over_refusal_threshold))
    return out


def fdr_across_slices(findings: Sequence[Finding], alpha: float) -> list[Finding]:
    """e-BH (Wang & Ramdas 2022) per family = (comparison, kind), across slices; order preserved.

    With K hypotheses in the family and e-values sorted e_(1) >= … >= e_(K),
    k* = max{k : e_(k) >= K/(α k)}; the k* largest are rejected, i.e.
    significant ⇔ e >= 1/α' with α' = α k*/K (α/K when nothing is rejected).
    FDR <= α within each family under *any* dependence between slices.
    Ineligible findings (too few pairs for an asymptotic test) count in K with
    e = 1. safety_threshold findings are absolute and pass through unchanged.
    """
    families: dict[tuple[Comparison, str], list[int]] = {}
    for i, f in enumerate(findings):
        if f.kind in FDR_KINDS:
            families.setdefault((f.comparison, f.kind), []).append(i)
    out = list(findings)
    for idx in families.values():
        k_total = len(idx)
        e = sorted((findings[i].e_value if findings[i].detail.get("eligible", True) else 1.0 for i in idx),
                   reverse=True)
        k_star = max((k for k in range(1, k_total + 1) if e[k - 1] >= k_total / (alpha * k)), default=0)
        alpha_prime = alpha * max(k_star, 1) / k_total
        for i in idx:
            f = findings[i]
            significant = (k_star > 0 and f.detail.get("eligible", True)
                           and f.e_value >= k_total / (alpha * k_star))
            fires = significant and (f.kind == "safety_regression" or f.beyond_floor)
            out[i] = replace(f, significant=significant, fires=fires, alpha=alpha_prime,
                             detail={**f.detail, "alpha_family": alpha, "family_size": k_total,
                                     "rejections": k_star})
    return out


def uniform_drop(per_slice_effects: Mapping[SliceKey, tuple[float, bool]], min_slices: int = 3,
                 share: float = 0.8) -> bool:
    """True when >= ``share`` of at least ``min_slices`` *unrelated* slices dropped together.

    Unrelated = disjoint traffic: slices over the same dimensions with
    different values (task_type=code / =chat / =search). A slice and its
    sub-slices, or slices over different dimensions, overlap and would count
    one drop several times, so each dimension set is judged separately, and
    the drop counts as uniform only when it is uniform in every dimension set
    with at least ``min_slices`` slices; the whole fleet is ignored. The bool of each entry says whether
    that slice dropped; the float (its effect) is informational.
    """
    groups: dict[tuple[str, ...], list[bool]] = {}
    for key, (_, dropped) in per_slice_effects.items():
        if key != WHOLE_FLEET:
            groups.setdefault(tuple(k for k, _ in key), []).append(bool(dropped))
    # An environment fault hits every kind of traffic: the drop must be uniform
    # in EVERY dimension that has enough slices to judge. A model regression
    # that breaks some task types spreads evenly over tenants and locales, so
    # "uniform in any one dimension" would mislabel it.
    eligible = [v for v in groups.values() if len(v) >= min_slices]
    return bool(eligible) and all(sum(v) >= share * len(v) for v in eligible)


def trailing_drop(current: ArmCounts, trailing: ArmCounts, floor: float = 0.02, z: float = 3.0) -> tuple[float, bool]:
    """Has the baseline's own success dropped vs its trailing window? (effect = drop, dropped?).

    A label, not a page: a plain two-proportion z-test at a strict z (3.0)
    plus the floor. Empty windows → (0.0, False).
    """
    if current.n == 0 or trailing.n == 0:
        return 0.0, False
    p1, p0 = current.successes / current.n, trailing.successes / trailing.n
    pooled = (current.successes + trailing.successes) / (current.n + trailing.n)
    se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / current.n + 1 / trailing.n))
    drop = p0 - p1
    return drop, drop >= floor and drop / se >= z


def apply_uniform_drop(findings: Sequence[Finding], min_slices: int = 3, share: float = 0.8,
                       baseline_drops: Mapping[SliceKey, tuple[float, bool]] | None = None) -> list[Finding]:
    """Label significant success drops ``cause="environment"`` when the drop is uniform.

    Per comparison, the significant success_regression findings are the
    "dropped" slices for ``uniform_drop``; additionally, when the baseline's
    own trailing drop (``baseline_drops``, see ``trailing_drop``) is uniform,
    every significant success drop is labelled. Alerts still fire: the label
    routes them to the harness/environment owners.
    """
    by_comparison: dict[Comparison, dict[SliceKey, tuple[float, bool]]] = {}
    for f in findings:
        if f.kind == "success_regression":
            by_comparison.setdefault(f.comparison, {})[f.slice_key] = (f.effect, f.significant and f.effect > 0)
    baseline_uniform = bool(baseline_drops) and uniform_drop(baseline_drops or {}, min_slices, share)
    out = []
    for f in findings:
        if f.kind == "success_regression" and f.significant:
            if baseline_uniform:
                f = replace(f, detail={**f.detail, "cause": "environment", "cause_reason": "baseline dropped too"})
            elif uniform_drop(by_comparison[f.comparison], min_slices, share):
                f = replace(f, detail={**f.detail, "cause": "environment",
                                       "cause_reason": "uniform drop across unrelated slices"})
        out.append(f)
    return out


def decide_comparison(comparison: Comparison, evidence: Mapping[SliceKey, PairedCounts | CanaryStrata], policy: Policy,
                      baseline_means: Mapping[SliceKey, tuple[float | None, float | None]] | None = None,
                      baseline_drops: Mapping[SliceKey, tuple[float, bool]] | None = None) -> list[Finding]:
    """All slices of one comparison: per-slice decisions, then e-BH, then the uniform-drop label."""
    findings: list[Finding] = []
    for key, ev in evidence.items():
        if isinstance(ev, CanaryStrata):
            findings += decide_canary(comparison, key, ev, policy)
        else:
            cost_mean, latency_mean = (baseline_means or {}).get(key, (None, None))
            findings += decide_paired(comparison, key, ev, policy, cost_mean, latency_mean)
    return apply_uniform_drop(fdr_across_slices(findings, policy.alpha), baseline_drops=baseline_drops)


def effect_since_epoch(finding: Finding, epoch_counters: Mapping[str, Any]) -> tuple[int, float]:
    """(traces since the epoch, effect on the evidence since the epoch), same sign and scale as ``effect``.

    The epoch is ``finding.detail["counters"]`` as recorded when the alert
    fired; counters are cumulative, so "since" is a difference. If a counter
    went backwards (store rebuilt) returns (-1, nan) and the caller re-bases.
    """
    now = finding.detail.get("counters", {})
    diff = {k: now.get(k, 0) - epoch_counters.get(k, 0) for k in set(now) | set(epoch_counters)}
    kind = finding.detail.get("counters_kind")
    if kind == "strata":
        if any(k.endswith("|n") and v < 0 for k, v in diff.items()):
            return -1, math.nan
        strata = CanaryStrata.from_dict({k: v for k, v in diff.items() if v >= 0})
        est = stratified.stratified_difference(strata, finding.detail["outcome"])
        sign = -1.0 if finding.kind == "success_regression" else 1.0
        return est["n_canary"], sign * est["delta"]
    n = diff.get("n", 0)
    if n < 0:
        return -1, math.nan
    if n == 0:
        return 0, math.nan
    if kind == "paired":
        worse_minus_better = diff.get("b", 0) - diff.get("c", 0)
        return n, (worse_minus_better if finding.kind == "success_regression" else -worse_minus_better) / n
    if kind == "mean":
        base = finding.detail.get("baseline_mean")
        return n, diff.get("sum", 0.0) / n / (base if base else 1.0)
    return n, diff.get("x", 0) / n  # ratio


def still_beyond_floor(finding: Finding, effect: float) -> bool:
    """Is an effect (e.g. since the epoch) still bad? Safety kinds: above the floor; others: >= floor."""
    if math.isnan(effect):
        return True
    return effect > finding.floor if finding.kind in SAFETY_KINDS else effect >= finding.floor
