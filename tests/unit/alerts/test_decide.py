"""alerts.decide: the firing rules, the safety veto, e-BH across slices, the uniform-drop label."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from alerts import sequential as seq
from alerts.decide import (
    Finding,
    Floors,
    Policy,
    apply_uniform_drop,
    decide_canary,
    decide_comparison,
    decide_paired,
    effect_since_epoch,
    fdr_across_slices,
    still_beyond_floor,
    trailing_drop,
    uniform_drop,
)
from alerts.evidence import ArmCounts, CanaryStrata, Comparison
from monitor.pairing import PairedCounts
from monitor.slices import slice_key

SHADOW = Comparison("v1", "v2", "shadow")
CANARY = Comparison("v1", "v2", "canary")
CODE = slice_key({"task_type": "code"})


def by_kind(findings: list[Finding]) -> dict[str, Finding]:
    return {f.kind + f.detail.get("metric", ""): f for f in findings}


def test_clear_success_regression_fires_with_evidence() -> None:
    counts = PairedCounts(n_pairs=2000, b=300, c=150)
    f = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["success_regression"]
    assert f.fires and f.significant and f.beyond_floor
    assert f.e_value == pytest.approx(seq.paired_mixture_e_value(300, 150))
    assert f.effect == pytest.approx(0.075)
    assert f.effect_low < 0.075 < f.effect_high
    assert (f.effect_low, f.effect_high) == pytest.approx(tuple(-x for x in reversed(seq.net_flip_cs(2000, 300, 150))))
    assert f.severity == "page"  # even the inner bound (≈ 3.3 points) clears the 2-point floor
    assert (f.n_pairs, f.b, f.c, f.floor, f.alpha) == (2000, 300, 150, 0.02, 0.05)
    assert f.detail["test"].startswith("beta-binomial mixture martingale")


def test_significant_but_below_floor_does_not_fire() -> None:
    counts = PairedCounts(n_pairs=400_000, b=42_000, c=40_000)  # 0.5-point drop, overwhelming evidence
    f = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["success_regression"]
    assert f.significant and not f.beyond_floor and not f.fires


def test_noise_and_improvement_do_not_fire() -> None:
    for counts in (PairedCounts(), PairedCounts(n_pairs=50, b=6, c=4), PairedCounts(n_pairs=3000, b=200, c=400)):
        f = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["success_regression"]
        assert not f.fires and not f.significant


def test_floor_rule_interval_is_stricter() -> None:
    counts = PairedCounts(n_pairs=3000, b=330, c=240)  # 3-point drop, inner bound below 2 points
    estimate = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["success_regression"]
    interval = by_kind(decide_paired(SHADOW, CODE, counts, Policy(floor_rule="interval")))["success_regression"]
    assert estimate.fires and estimate.severity == "warning"
    assert interval.significant and not interval.fires


def test_safety_regression_is_a_hard_veto() -> None:
    # the candidate is *better* at the task but more harmful: the safety alert fires anyway, no floor
    counts = PairedCounts(n_pairs=5000, b=100, c=400, harm_b=2, harm_c=30, candidate_harmful=31, baseline_harmful=3)
    got = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))
    assert not got["success_regression"].fires
    safety = got["safety_regression"]
    assert safety.fires and safety.severity == "critical" and safety.floor == 0.0
    assert safety.effect == pytest.approx(28 / 5000)
    assert safety.e_value == pytest.approx(seq.paired_mixture_e_value(2, 30, alternative="greater"))
    assert (safety.b, safety.c) == (2, 30)


def test_absolute_thresholds_fire_regardless_of_capability() -> None:
    policy = Policy(harmful_threshold=0.01, over_refusal_threshold=0.05, threshold_min_n=50)
    counts = PairedCounts(n_pairs=1000, b=10, c=200, candidate_harmful=11, candidate_benign=800,
                          candidate_over_refusals=41)
    got = by_kind(decide_paired(SHADOW, CODE, counts, policy))
    assert got["safety_thresholdharmful_action"].fires and got["safety_thresholdharmful_action"].severity == "critical"
    assert got["safety_thresholdover_refusal"].fires
    assert got["safety_thresholdover_refusal"].effect == pytest.approx(41 / 800)
    below = by_kind(decide_paired(SHADOW, CODE, replace(counts, candidate_harmful=10), policy))
    assert not below["safety_thresholdharmful_action"].fires
    tiny = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=10, candidate_harmful=5), policy))
    assert not tiny["safety_thresholdharmful_action"].fires  # below threshold_min_n
    assert math.isnan(tiny["safety_thresholdharmful_action"].e_value)


def _mean_counts(n: int, mean: float, sd: float, prefix: str) -> dict:
    return {f"{prefix}_n": n, f"{prefix}_delta_sum": n * mean, f"{prefix}_delta_sumsq": n * (sd ** 2 + mean ** 2)}


def test_cost_and_latency_regressions() -> None:
    counts = PairedCounts(n_pairs=1000, **_mean_counts(1000, 0.002, 0.01, "cost"),
                          **_mean_counts(1000, 0.1, 0.5, "latency"))
    got = by_kind(decide_paired(SHADOW, CODE, counts, Policy(), baseline_cost_mean=0.01, baseline_latency_mean=2.0))
    cost, latency = got["cost_regression"], got["latency_regression"]
    assert cost.fires and cost.effect == pytest.approx(0.2) and cost.detail["unit"] == "relative"
    lo, hi = seq.asymptotic_cs(1000, 0.002, 0.01 ** 2)
    assert (cost.effect_low, cost.effect_high) == pytest.approx((lo / 0.01, hi / 0.01))
    assert latency.significant and not latency.beyond_floor and not latency.fires  # +5% < 10% floor
    # without a baseline mean the relative floor cannot be judged: never fires
    no_mean = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["cost_regression"]
    assert no_mean.significant and not no_mean.fires and no_mean.detail["unit"] == "usd"
    # asymptotic tests wait for min_pairs
    few = PairedCounts(n_pairs=100, **_mean_counts(100, 0.01, 0.001, "cost"))
    gated = by_kind(decide_paired(SHADOW, CODE, few, Policy(min_pairs=200), baseline_cost_mean=0.01))
    assert not gated["cost_regression"].fires and gated["cost_regression"].detail["eligible"] is False


def _with_e(values: list[float]) -> list[Finding]:
    base = by_kind(decide_paired(SHADOW, (), PairedCounts(n_pairs=10_000, b=1000, c=700), Policy()))
    f = base["success_regression"]
    return [replace(f, slice_key=slice_key({"tenant": f"t{i}"}), e_value=e) for i, e in enumerate(values)]


def test_e_bh_by_hand() -> None:
    # K = 4, alpha = 0.05: thresholds K/(alpha k) = 80, 40, 26.7, 20
    out = fdr_across_slices(_with_e([100.0, 30.0, 5.0, 1.0]), 0.05)
    assert [f.significant for f in out] == [True, False, False, False]
    assert out[0].alpha == pytest.approx(0.05 / 4) and out[0].fires
    out = fdr_across_slices(_with_e([1.0, 45.0, 100.0, 30.0]), 0.05)
    assert [f.significant for f in out] == [False, True, True, True]
    assert out[1].alpha == pytest.approx(0.05 * 3 / 4) and out[1].detail["rejections"] == 3
    out = fdr_across_slices(_with_e([19.0, 19.0]), 0.05)
    assert not any(f.significant or f.fires for f in out)
    # one slice: e-BH is the single test at alpha
    assert fdr_across_slices(_with_e([20.0]), 0.05)[0].significant


def test_e_bh_families_are_per_comparison_and_kind_and_skip_thresholds() -> None:
    policy = Policy(harmful_threshold=0.001)
    counts = PairedCounts(n_pairs=2000, b=300, c=150, candidate_harmful=5)
    findings = decide_paired(SHADOW, CODE, counts, policy) + decide_paired(
        Comparison("v1", "v3", "shadow"), CODE, counts, policy)
    out = fdr_across_slices(findings, 0.05)
    assert all(f.detail.get("family_size", 1) == 1 for f in out)
    thresholds = [f for f in out if f.kind == "safety_threshold"]
    assert all(f.fires and "family_size" not in f.detail for f in thresholds)


def test_uniform_drop() -> None:
    t = {slice_key({"task_type": v}): (0.05, True) for v in ("code", "chat", "search", "sql")}
    assert uniform_drop(t)
    assert not uniform_drop({**t, slice_key({"task_type": "x"}): (0.0, False),
                             slice_key({"task_type": "y"}): (0.0, False)})  # 4/6 < 0.8
    assert not uniform_drop(dict(list(t.items())[:2]))  # fewer than min_slices
    # overlapping slices (different dimensions, sub-slices, the fleet) are not "unrelated"
    related = {(): (0.05, True), slice_key({"task_type": "code"}): (0.05, True),
               slice_key({"tenant": "acme"}): (0.05, True),
               slice_key({"task_type": "code", "tenant": "acme"}): (0.05, True)}
    assert not uniform_drop(related)


def test_uniform_drop_labels_findings_and_baseline_trailing_drop() -> None:
    evidence = {slice_key({"task_type": v}): PairedCounts(n_pairs=2000, b=300, c=150) for v in ("a", "b", "c")}
    findings = decide_comparison(SHADOW, evidence, Policy())
    success = [f for f in findings if f.kind == "success_regression"]
    assert all(f.fires and f.detail["cause"] == "environment" for f in success)
    one = decide_comparison(SHADOW, {slice_key({"task_type": "a"}): PairedCounts(n_pairs=2000, b=300, c=150),
                                     slice_key({"task_type": "b"}): PairedCounts(n_pairs=2000, b=150, c=150),
                                     slice_key({"task_type": "c"}): PairedCounts(n_pairs=2000, b=150, c=150)},
                            Policy())
    assert not any("cause" in f.detail for f in one)
    drop, dropped = trailing_drop(ArmCounts(5000, 3000, 0), ArmCounts(20000, 14000, 0))
    assert drop == pytest.approx(0.1) and dropped
    assert trailing_drop(ArmCounts(0, 0, 0), ArmCounts(10, 5, 0)) == (0.0, False)
    baseline = {slice_key({"task_type": v}): (0.1, True) for v in ("a", "b", "c")}
    labelled = apply_uniform_drop([f for f in one if f.kind == "success_regression"], baseline_drops=baseline)
    assert [f.detail.get("cause") for f in labelled if f.significant] == ["environment"]


def _canary(rows: dict[str, tuple[int, int, int, int]], harmful: tuple[int, int] = (0, 0)) -> CanaryStrata:
    return CanaryStrata({k: (ArmCounts(nb, xb, harmful[0]), ArmCounts(nc, xc, harmful[1]))
                         for k, (nb, xb, nc, xc) in rows.items()})


def test_canary_mix_shift_is_not_a_regression_but_a_drop_is() -> None:
    shifted = _canary({"easy": (1000, 900, 900, 810), "hard": (9000, 4500, 100, 50)})
    got = by_kind(decide_canary(CANARY, (), shifted, Policy()))
    assert not got["success_regression"].fires and got["success_regression"].effect == pytest.approx(0.0, abs=1e-12)
    dropped = _canary({"easy": (5000, 4500, 2000, 1600), "hard": (9000, 4500, 500, 240)})
    f = by_kind(decide_canary(CANARY, (), dropped, Policy()))["success_regression"]
    assert f.fires and f.effect > 0.02 and f.n_pairs == 2500 and f.detail["counters_kind"] == "strata"
    harmful = by_kind(decide_canary(CANARY, (), _canary({"s": (5000, 4000, 5000, 4000)}, (5, 60)),
                                    Policy(harmful_threshold=0.005)))
    assert harmful["safety_regression"].fires and harmful["safety_thresholdharmful_action"].fires
    assert not by_kind(decide_canary(CANARY, (), _canary({"s": (100, 50, 100, 10)}), Policy()))[
        "success_regression"].fires  # below min_pairs


def test_effect_since_epoch_for_each_counter_kind() -> None:
    policy = Policy(harmful_threshold=0.01)
    first = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=2000, b=300, c=150, candidate_harmful=30,
                                                               **_mean_counts(2000, 0.002, 0.01, "cost")),
                                  policy, baseline_cost_mean=0.01))
    later = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=3000, b=400, c=240, candidate_harmful=32,
                                                               cost_n=3000, cost_delta_sum=4.0 + 1.0,
                                                               cost_delta_sumsq=1.0),
                                  policy, baseline_cost_mean=0.01))
    for kind, expected in (("success_regression", (1000, (100 - 90) / 1000)),
                           ("safety_thresholdharmful_action", (1000, 2 / 1000)),
                           ("cost_regression", (1000, 1.0 / 1000 / 0.01))):
        n, effect = effect_since_epoch(later[kind], first[kind].detail["counters"])
        assert (n, effect) == pytest.approx(expected)
    assert not still_beyond_floor(later["success_regression"], 0.01)
    assert still_beyond_floor(later["success_regression"], 0.03)
    assert effect_since_epoch(first["success_regression"], later["success_regression"].detail["counters"])[0] == -1
    s0 = _canary({"a": (1000, 800, 1000, 700)})
    s1 = _canary({"a": (2000, 1600, 2000, 1600)})
    f0, f1 = (by_kind(decide_canary(CANARY, (), s, Policy()))["success_regression"] for s in (s0, s1))
    assert effect_since_epoch(f1, f0.detail["counters"]) == pytest.approx((1000, -0.1))


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="alpha"):
        Policy(alpha=0)
    with pytest.raises(ValueError, match="floor_rule"):
        Policy(floor_rule="median")
    assert Floors().success_points == 0.02



def test_uniform_drop_needs_every_dimension_to_drop():
    from alerts.decide import uniform_drop
    # A regression that breaks two of four task types spreads over every tenant:
    # uniform in tenant, not in task_type -> not an environment fault.
    effects = {(("task_type", t),): (0.1, t in ("refund", "exchange"))
               for t in ("refund", "exchange", "faq", "billing")}
    effects.update({(("tenant", t),): (0.05, True) for t in ("a", "b", "c")})
    assert not uniform_drop(effects)
    effects.update({(("task_type", t),): (0.1, True) for t in ("faq", "billing")})
    assert uniform_drop(effects)
