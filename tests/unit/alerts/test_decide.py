"""alerts.decide: floors inside the null, the dual bound, the α split, e-BH, the safety veto, the environment label."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from alerts.decide import (
    AlphaWeights,
    Finding,
    Floors,
    Policy,
    decide_comparison,
    decide_paired,
    effect_since_epoch,
    fdr_across_slices,
    label_environment,
    still_beyond_floor,
    trailing_drop,
    uniform_drop,
)
from alerts.evidence import ArmCounts, Comparison
from monitor.pairing import Caps, PairedCounts
from monitor.slices import SliceKey, slice_key
from monitor.stats import betting, capped_mean
from tests.support.paired_sim import capped_fields

SHADOW = Comparison("v1", "v2", "shadow")
CANARY = Comparison("v1", "v2", "canary")
CODE = slice_key({"task_type": "code"})
BETTING = ("success_regression", "safety_regression", "over_refusal_regression", "safety_threshold")


def by_kind(findings: list[Finding]) -> dict[str, Finding]:
    return {f.kind + f.detail.get("metric", ""): f for f in findings}


def test_clear_success_regression_fires_with_its_dual_bound() -> None:
    policy = Policy()
    alpha = policy.alpha_share("success_regression")
    f = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=2000, b=300, c=150), policy))["success_regression"]
    assert f.fires and f.significant and f.beyond_floor and f.severity == "critical"
    assert f.e_value == pytest.approx(betting.flip_e_value(300, 150, 2000, 0.02))
    assert f.effect == pytest.approx(0.075)
    assert f.effect_low == betting.flip_lower_bound(300, 150, 2000, alpha) and 0.02 < f.effect_low < 0.075
    assert f.effect_high == 1.0
    assert (f.n_pairs, f.b, f.c, f.floor, f.alpha) == (2000, 300, 150, 0.02, alpha)
    assert f.detail["counters_kind"] == "flip" and f.detail["counters"] == {"n": 2000, "worse": 300, "better": 150}
    assert f.detail["interval"].startswith("one-sided lower 98.06% anytime-valid confidence bound (dual of the test)")
    assert f.detail["test"].startswith("betting e-process")


def test_sub_floor_drop_does_not_fire_however_strong_the_evidence() -> None:
    counts = PairedCounts(n_pairs=400_000, b=42_000, c=40_000)  # 0.5-point drop, overwhelming evidence of a drop
    f = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["success_regression"]
    assert not f.significant and not f.beyond_floor and not f.fires and f.effect_low < 0.02


def test_noise_and_improvement_do_not_fire() -> None:
    for counts in (PairedCounts(), PairedCounts(n_pairs=50, b=6, c=4), PairedCounts(n_pairs=3000, b=200, c=400)):
        f = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["success_regression"]
        assert not f.fires and not f.significant


def test_a_10_point_drop_fires_and_a_3_point_drop_needs_the_bound_past_the_floor() -> None:
    ten = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=1000, b=155, c=55), Policy()))
    assert ten["success_regression"].fires  # 10 points at 21% discordance, 1,000 pairs
    three = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=3000, b=330, c=240), Policy()))
    assert not three["success_regression"].fires  # estimate 3 points, but the lower bound is under 2


@pytest.mark.parametrize("n", [1, 2, 5, 10, 30, 100, 300])
def test_at_floor_null_fires_at_the_first_look_with_probability_at_most_alpha(n: int) -> None:
    """Exact over every (worse, better) outcome of n pairs whose mean effect is exactly the floor."""
    policy = Policy()
    alpha = policy.alpha_share("success_regression")
    floor = policy.floors.success_points
    for discordance in (0.03, 0.2, 0.6):
        p_worse, p_better = (discordance + floor) / 2, (discordance - floor) / 2
        total = 0.0
        for w in range(n + 1):
            for v in range(n + 1 - w):
                if betting.flip_e_value(w, v, n, floor) >= 1 / alpha:
                    total += stats.multinomial.pmf([w, v, n - w - v], n, [p_worse, p_better, 1 - discordance])
        assert total <= alpha, (n, discordance, total)
        if n <= 10:
            assert total == 0.0  # too few pairs to ever reach 1/alpha at the floor


@pytest.mark.parametrize("counts", [PairedCounts(n_pairs=n, b=b, c=c, harm_b=c // 7, harm_c=b // 5,
                                                 benign_pairs=n // 2, refusal_b=c // 9, refusal_c=b // 4,
                                                 candidate_harmful=b // 5, candidate_benign=n // 2,
                                                 candidate_over_refusals=b // 4)
                                    for n, b, c in ((0, 0, 0), (10, 3, 0), (200, 30, 10), (1000, 120, 80),
                                                    (2000, 300, 150), (5000, 700, 500), (20000, 2400, 1900))])
def test_decision_is_the_bound_clearing_the_floor(counts: PairedCounts) -> None:
    policy = Policy(harmful_threshold=0.02, over_refusal_threshold=0.1)
    evidence = {CODE: counts, slice_key({"task_type": "chat"}): replace(counts, b=counts.b // 2)}
    for f in decide_paired(SHADOW, CODE, counts, policy) + decide_comparison(SHADOW, evidence, policy):
        if f.kind in BETTING:
            assert f.fires == f.significant == f.beyond_floor == (f.effect_low > f.floor)
            assert f.effect_low <= f.effect + 1e-12 and f.effect_high == 1.0


def test_alpha_shares_sum_to_alpha_and_follow_the_weights() -> None:
    for policy in (Policy(), Policy(alpha=0.01, harmful_threshold=0.01),
                   Policy(harmful_threshold=0.01, over_refusal_threshold=0.05),
                   Policy(weights=AlphaWeights(success_regression=1.0, cost_regression=0.5))):
        shares = policy.alpha_shares()
        assert math.fsum(shares.values()) == pytest.approx(policy.alpha, rel=1e-12)
        assert all(s > 0 for s in shares.values())
    both = Policy(harmful_threshold=0.01, over_refusal_threshold=0.05)
    assert both.alpha_share("success_regression") == pytest.approx(0.35 * 0.05)
    assert both.alpha_share("safety_threshold", "over_refusal") == pytest.approx(0.05 * 0.05)
    with pytest.raises(KeyError, match="safety_threshold:harmful_action"):
        Policy().alpha_share("safety_threshold", "harmful_action")
    with pytest.raises(ValueError, match=r"AlphaWeights\.cost_regression"):
        AlphaWeights(cost_regression=0)


def test_safety_regression_is_a_hard_veto() -> None:
    # the candidate is *better* at the task but more harmful: the safety alert fires anyway, floor 0
    counts = PairedCounts(n_pairs=5000, b=100, c=400, harm_b=2, harm_c=30, candidate_harmful=31, baseline_harmful=3)
    got = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))
    assert not got["success_regression"].fires
    safety = got["safety_regression"]
    assert safety.fires and safety.severity == "critical" and safety.floor == 0.0
    assert safety.effect == pytest.approx(28 / 5000)
    assert safety.e_value == pytest.approx(betting.flip_e_value(30, 2, 5000, 0.0))
    assert (safety.b, safety.c) == (2, 30) and safety.detail["counters"] == {"n": 5000, "worse": 30, "better": 2}


def test_over_refusal_regression_on_benign_pairs() -> None:
    counts = PairedCounts(n_pairs=3000, benign_pairs=2000, refusal_b=5, refusal_c=60)
    f = by_kind(decide_paired(SHADOW, CODE, counts, Policy()))["over_refusal_regression"]
    assert f.fires and f.severity == "critical" and f.floor == 0.0 and f.n_pairs == 2000
    assert f.effect == pytest.approx(55 / 2000) and (f.b, f.c) == (5, 60)
    assert f.effect_low == betting.flip_lower_bound(60, 5, 2000, Policy().alpha_share("over_refusal_regression"))
    quiet = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=100), Policy()))["over_refusal_regression"]
    assert not quiet.fires and quiet.e_value == 1.0 and quiet.n_pairs == 0


def test_absolute_thresholds_page_on_the_exact_lower_bound() -> None:
    policy = Policy(harmful_threshold=0.01, over_refusal_threshold=0.05)
    counts = PairedCounts(n_pairs=1000, b=10, c=200, candidate_harmful=40, candidate_benign=800,
                          candidate_over_refusals=120)
    got = by_kind(decide_paired(SHADOW, CODE, counts, policy))
    harmful = got["safety_thresholdharmful_action"]
    assert harmful.fires and harmful.severity == "critical" and harmful.detail["counters"] == {"n": 1000, "x": 40}
    assert harmful.effect_low == betting.rate_lower_bound(40, 1000, policy.alpha_share("safety_threshold",
                                                                                       "harmful_action"))
    assert got["safety_thresholdover_refusal"].fires
    assert got["safety_thresholdover_refusal"].effect == pytest.approx(120 / 800)
    # a rate whose estimate is over the threshold but not its lower bound does not page
    above = by_kind(decide_paired(SHADOW, CODE, replace(counts, candidate_harmful=11), policy))
    assert above["safety_thresholdharmful_action"].effect > 0.01
    assert not above["safety_thresholdharmful_action"].fires
    # exact from the first trace: no minimum sample
    tiny = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=10, candidate_harmful=5), policy))
    tiny_harm = tiny["safety_thresholdharmful_action"]
    assert tiny_harm.fires and not math.isnan(tiny_harm.e_value)


def test_cost_and_latency_regressions_test_capped_means_at_their_share() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(np.log(0.05), 1.0, 4000)
    lat = rng.lognormal(np.log(20.0), 0.8, 4000)
    counts = PairedCounts(n_pairs=4000, **capped_fields("cost", base, 1.4 * base * rng.lognormal(0, 0.3, 4000), 5.0),
                          **capped_fields("latency", lat, 1.05 * lat, 600.0))
    policy = Policy()
    got = by_kind(decide_paired(SHADOW, CODE, counts, policy))
    cost, latency = got["cost_regression"], got["latency_regression"]
    assert cost.fires and cost.detail["counters_kind"] == "capped_mean" and cost.alpha == policy.alpha_share(
        "cost_regression")
    assert cost.effect == pytest.approx(counts.capped_cost_c / counts.capped_cost_b - 1)
    assert policy.floors.cost_relative < cost.effect_low < cost.effect and cost.effect_high == math.inf
    assert not latency.fires and latency.effect == pytest.approx(0.05)  # +5% < 10% floor
    other_cap = by_kind(decide_paired(SHADOW, CODE, counts, replace(policy, caps=Caps(2.0, 600.0))))
    assert not other_cap["cost_regression"].fires and other_cap["cost_regression"].detail["cap_mismatch"] == 5.0


def _with_e(values: list[float]) -> list[Finding]:
    f = by_kind(decide_paired(SHADOW, (), PairedCounts(n_pairs=10_000, b=1000, c=700), Policy()))[
        "success_regression"]
    return [replace(f, slice_key=slice_key({"tenant": f"t{i}"}), e_value=e) for i, e in enumerate(values)]


def test_e_bh_by_hand_at_the_kind_share() -> None:
    policy = Policy()
    share = policy.alpha_share("success_regression")
    unit = 1 / (20 * share)  # the old by-hand thresholds (alpha 0.05) rescaled to this share
    out = fdr_across_slices(_with_e([100 * unit, 30 * unit, 5 * unit, 1 * unit]), policy)
    # K = 4: thresholds K/(share k) are 80, 40, 26.7, 20 in old units
    assert [f.significant for f in out] == [True, False, False, False]
    assert out[0].alpha == pytest.approx(share / 4) and out[0].detail["alpha_family"] == share
    out = fdr_across_slices(_with_e([1 * unit, 45 * unit, 100 * unit, 30 * unit]), policy)
    assert [f.significant for f in out] == [False, True, True, True]
    assert out[1].alpha == pytest.approx(share * 3 / 4) and out[1].detail["rejections"] == 3
    assert not any(f.significant for f in fdr_across_slices(_with_e([19 * unit, 19 * unit]), policy))
    assert fdr_across_slices(_with_e([20 * unit * 1.0000001]), policy)[0].significant  # one slice: the single test


def test_e_bh_families_are_per_comparison_kind_and_metric() -> None:
    policy = Policy(harmful_threshold=0.001, over_refusal_threshold=0.5)
    counts = PairedCounts(n_pairs=2000, b=300, c=150, candidate_harmful=20)
    evidence = {CODE: counts, slice_key({"task_type": "chat"}): counts}
    findings = decide_comparison(SHADOW, evidence, policy) + decide_comparison(
        Comparison("v1", "v3", "shadow"), evidence, policy)
    assert all(f.detail["family_size"] == 2 for f in findings)
    for f in findings:
        assert f.detail["alpha_family"] == policy.alpha_share(f.kind, f.detail.get("metric", ""))
    assert all(f.fires for f in findings if f.detail.get("metric") == "harmful_action")


def test_uniform_drop() -> None:
    t = {slice_key({"task_type": v}): (0.05, True) for v in ("code", "chat", "search", "sql")}
    assert uniform_drop(t)
    assert not uniform_drop({**t, slice_key({"task_type": "x"}): (0.0, False),
                             slice_key({"task_type": "y"}): (0.0, False)})  # 4/6 < 0.8
    assert not uniform_drop(dict(list(t.items())[:2]))  # fewer than min_slices
    related = {(): (0.05, True), slice_key({"task_type": "code"}): (0.05, True),
               slice_key({"tenant": "acme"}): (0.05, True),
               slice_key({"task_type": "code", "tenant": "acme"}): (0.05, True)}
    assert not uniform_drop(related)


def test_uniform_drop_needs_every_dimension_to_drop() -> None:
    effects: dict[SliceKey, tuple[float, bool]] = {(("task_type", t),): (0.1, t in ("refund", "exchange"))
               for t in ("refund", "exchange", "faq", "billing")}
    effects.update({(("tenant", t),): (0.05, True) for t in ("a", "b", "c")})
    assert not uniform_drop(effects)
    effects.update({(("task_type", t),): (0.1, True) for t in ("faq", "billing")})
    assert uniform_drop(effects)


def test_environment_label_on_shadow_comes_only_from_the_baseline() -> None:
    evidence = {slice_key({"task_type": v}): PairedCounts(n_pairs=2000, b=300, c=150) for v in ("a", "b", "c")}
    findings = decide_comparison(SHADOW, evidence, Policy())
    success = [f for f in findings if f.kind == "success_regression"]
    assert all(f.fires and "cause" not in f.detail for f in success)  # candidate-only uniform drop: a model regression
    drop, dropped = trailing_drop(ArmCounts(5000, 3000, 0), ArmCounts(20000, 14000, 0))
    assert drop == pytest.approx(0.1) and dropped
    assert trailing_drop(ArmCounts(0, 0, 0), ArmCounts(10, 5, 0)) == (0.0, False)
    uniform = {slice_key({"task_type": v}): (0.1, True) for v in ("a", "b", "c")}
    assert all(f.detail["cause"] == "environment" for f in label_environment(success, uniform))
    one = {slice_key({"task_type": "a"}): (0.1, True), slice_key({"task_type": "b"}): (0.0, False),
           slice_key({"task_type": "c"}): (0.0, False)}
    wired = decide_comparison(SHADOW, evidence, Policy(), baseline_drops=one)
    assert [f.detail.get("cause") for f in wired if f.kind == "success_regression"] == ["environment", None, None]


def test_canary_comparisons_are_tested_like_shadow_pairs_and_say_how_pairs_were_made() -> None:
    dropped = PairedCounts(n_pairs=4000, b=700, c=450)
    evidence = {slice_key({"task_type": v}): dropped for v in ("a", "b", "c")}
    found = [f for f in decide_comparison(CANARY, evidence, Policy()) if f.kind == "success_regression"]
    assert all(f.fires and f.detail["pairs"].startswith("matched pairs") for f in found)
    assert all(f.detail["cause"] == "environment" for f in found)  # canary keeps the candidate-uniform rule
    assert "pairs" not in decide_comparison(SHADOW, evidence, Policy())[0].detail


def test_effect_since_epoch_for_each_counter_kind() -> None:
    policy = Policy(harmful_threshold=0.01)
    first = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=2000, b=300, c=150, candidate_harmful=30),
                                  policy))
    later = by_kind(decide_paired(SHADOW, CODE, PairedCounts(n_pairs=3000, b=400, c=240, candidate_harmful=32),
                                  policy))
    for kind, expected in (("success_regression", (1000, (100 - 90) / 1000)),
                           ("safety_thresholdharmful_action", (1000, 2 / 1000))):
        n, effect = effect_since_epoch(later[kind], first[kind].detail["counters"])
        assert (n, effect) == pytest.approx(expected)
    assert not still_beyond_floor(later["success_regression"], 0.01)
    assert still_beyond_floor(later["success_regression"], 0.03)
    assert effect_since_epoch(first["success_regression"], later["success_regression"].detail["counters"])[0] == -1
    assert effect_since_epoch(later["success_regression"], {"n": 2000, "b": 300, "c": 150})[0] == -1  # old names


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="alpha"):
        Policy(alpha=0)
    with pytest.raises(ValueError, match="harmful_threshold"):
        Policy(harmful_threshold=1.5)
    assert Floors().success_points == 0.02


def test_cost_bound_after_e_bh_is_at_the_level_used() -> None:
    rng = np.random.default_rng(7)
    evidence = {}
    for v in ("a", "b", "c"):
        base = rng.lognormal(np.log(0.05), 1.0, 3000)
        evidence[slice_key({"task_type": v})] = PairedCounts(
            n_pairs=3000, **capped_fields("cost", base, 1.5 * base, 5.0))
    found = [f for f in decide_comparison(SHADOW, evidence, Policy()) if f.kind == "cost_regression"]
    assert found and all(f.fires for f in found)
    for f in found:
        counts = evidence[f.slice_key].capped("cost")
        assert f.effect_low == pytest.approx(capped_mean.lower_bound(counts, f.alpha))
