"""The decision: from evidence to findings, one per (comparison, slice, kind[, metric]) (pure).

``effect`` is signed so that **positive = candidate worse**: a success drop in
points, a rise in harmful-action or over-refusal rate, a relative cost /
latency increase, or (thresholds) the candidate's absolute rate.

α: ``Policy.alpha`` is the level of a whole comparison, split across its
families by fixed weights (:mod:`alerts.policy`), then shared across slices
by e-BH within each family (:mod:`alerts.fdr`); ``Finding.alpha`` is the
level α' the decision used.

What each kind assumes and guarantees:

- **Success / safety (harmful action) / over-refusal regressions and
  absolute thresholds**, shadow and canary (:mod:`alerts.paired`): exact
  betting e-processes on cumulative counts with the floor inside the null
  (success floor 2 points, safety and over-refusal 0, thresholds their
  value). Valid at every look, nonasymptotic, for any discordance and
  dependence; ``fires`` ⇔ e >= 1/α' ⇔ the one-sided lower bound at α' is
  above the floor. Shadow pairs are the traffic's own; canary pairs are
  matched within task type and time block (:mod:`alerts.canary`, which states
  what that assumes).
- **Cost / latency** (shadow): the relative increase of capped means, an
  empirical-Bernstein e-process with the floor in the null
  (:mod:`monitor.stats.capped_mean`; nonasymptotic for any distribution in
  [0, cap]); decision and bound as above.

Severity (the vocabulary of the Prometheus rules too, see docs/alerts.md): ``"critical"`` (page a
human now) for safety kinds and when the inner bound clears the floor, ``"warning"`` (a ticket) otherwise.

Environment label (``cause="environment"``): on shadow traffic only from the
baseline's own drop against its trailing level (``baseline_drops``, see
``trailing_drop``) — in the finding's slice, or uniform across unrelated
slices; a candidate-only drop across every slice is a model regression. On
canary traffic, also when the candidate's significant drops are uniform.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from alerts.evidence import ArmCounts, Comparison
from alerts.fdr import fdr_across_slices
from alerts.paired import capped_mean_finding, shadow_betting_findings
from alerts.policy import KINDS, REGRESSION_KINDS, SAFETY_KINDS, AlphaWeights, Finding, Floors, Policy
from monitor.pairing import PairedCounts
from monitor.slices import WHOLE_FLEET, SliceKey

__all__ = ["KINDS", "REGRESSION_KINDS", "SAFETY_KINDS", "AlphaWeights", "Finding", "Floors", "Policy",
           "decide_comparison", "decide_paired", "effect_since_epoch", "fdr_across_slices",
           "label_environment", "still_beyond_floor", "trailing_drop", "uniform_drop"]

CANARY_PAIRS = ("matched pairs: canary traces matched at random with baseline traces of the same task type "
                "and time block (alerts.canary)")
BaselineDrops = Mapping[SliceKey, tuple[float, bool]]


def decide_paired(comparison: Comparison, slice_key: SliceKey, counts: PairedCounts, policy: Policy) -> list[Finding]:
    """Findings for one slice of paired counts, each at its family's α share *before* e-BH across slices.

    Always success, safety and over-refusal regressions; cost / latency when
    any pair reported them (capped-mean tests, :mod:`monitor.stats.capped_mean`);
    one safety_threshold per configured threshold.
    """
    betting = shadow_betting_findings(comparison, slice_key, counts, policy)
    means: list[Finding] = []
    for kind, quantity, cap, unit in (("cost_regression", "cost", policy.caps.cost_usd, "usd"),
                                      ("latency_regression", "latency", policy.caps.latency_seconds, "seconds")):
        sums = counts.capped(quantity)
        if sums.n:
            means.append(capped_mean_finding(kind, comparison, slice_key, policy, sums,
                                             over_cap=int(getattr(counts, f"{quantity}_over_cap")),
                                             n_pairs=counts.n_pairs, expected_cap=cap, unit=unit))
    return betting[:3] + means + betting[3:]


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


def label_environment(findings: list[Finding], baseline_drops: BaselineDrops | None = None, min_slices: int = 3,
                      share: float = 0.8) -> list[Finding]:
    """Label significant success drops ``cause="environment"`` (see the module docstring).

    ``baseline_drops`` (slice -> ``trailing_drop`` of the comparison's baseline)
    labels a finding whose slice's baseline dropped, or every finding when the
    baseline's drop is uniform (``uniform_drop``). Canary comparisons are also
    labelled when the candidate's own significant drops are uniform; shadow
    comparisons never are (there a uniform candidate-only drop is a model
    regression). Alerts still fire: the label routes them to the environment owners.
    """
    drops = baseline_drops or {}
    baseline_uniform = bool(drops) and uniform_drop(drops, min_slices, share)
    candidate: dict[Comparison, dict[SliceKey, tuple[float, bool]]] = {}
    for f in findings:
        if f.kind == "success_regression" and f.comparison.arm != "shadow":
            candidate.setdefault(f.comparison, {})[f.slice_key] = (f.effect, f.significant and f.effect > 0)
    out = []
    for f in findings:
        reason = ""
        if f.kind == "success_regression" and f.significant:
            if baseline_uniform:
                reason = "baseline dropped too, across unrelated slices"
            elif drops.get(f.slice_key, (0.0, False))[1]:
                reason = "baseline dropped too in this slice"
            elif f.comparison in candidate and uniform_drop(candidate[f.comparison], min_slices, share):
                reason = "uniform drop across unrelated slices"
        out.append(replace(f, detail={**f.detail, "cause": "environment", "cause_reason": reason}) if reason else f)
    return out


def decide_comparison(comparison: Comparison, evidence: Mapping[SliceKey, PairedCounts], policy: Policy,
                      baseline_drops: BaselineDrops | None = None) -> list[Finding]:
    """All slices of one comparison: per-slice findings, e-BH per family at its α share, the environment label.

    Shadow and canary evidence are both paired counts (canary: the matched pairs of :mod:`alerts.canary`).
    """
    findings: list[Finding] = []
    for key, counts in evidence.items():
        found = decide_paired(comparison, key, counts, policy)
        if comparison.arm == "canary":
            found = [replace(f, detail={**f.detail, "pairs": CANARY_PAIRS}) for f in found]
        findings += found
    return label_environment(fdr_across_slices(findings, policy), baseline_drops)


def effect_since_epoch(finding: Finding, epoch_counters: Mapping[str, Any]) -> tuple[int, float]:
    """(pairs since the epoch, effect on the evidence since the epoch), same sign and scale as ``effect``.

    The epoch is ``finding.detail["counters"]`` as recorded earlier; counters
    are cumulative, so "since" is a difference. If a counter went backwards
    (store rebuilt) or the epoch has other counter names (state from an older
    version), returns (-1, nan) and the caller re-bases. A point estimate:
    for the epoch rule of the asymptotic kinds, not an anytime-valid test.
    """
    now = finding.detail.get("counters", {})
    kind = finding.detail.get("counters_kind")
    if set(now) != set(epoch_counters):
        return -1, math.nan
    diff = {k: now.get(k, 0) - epoch_counters.get(k, 0) for k in set(now) | set(epoch_counters)}
    n = diff.get("n", 0)
    if n < 0 or any(v < 0 for k, v in diff.items() if k in ("worse", "better", "x")):
        return -1, math.nan
    if n == 0:
        return 0, math.nan
    if kind == "flip":
        return n, (diff["worse"] - diff["better"]) / n
    if kind == "mean":
        base = finding.detail.get("baseline_mean")
        return n, diff.get("sum", 0.0) / n / (base if base else 1.0)
    return n, diff.get("x", 0) / n  # rate


def still_beyond_floor(finding: Finding, effect: float) -> bool:
    """Is an effect (e.g. since the epoch) still bad? Safety kinds: above the floor; others: >= floor."""
    if math.isnan(effect):
        return True
    return effect > finding.floor if finding.kind in SAFETY_KINDS else effect >= finding.floor
