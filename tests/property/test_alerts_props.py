"""Invariants of the alert core: e-values, confidence sequences, e-BH, evidence merge, state serialisation."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.decide import AlphaWeights, Policy, decide_paired, fdr_across_slices
from alerts.evidence import Comparison
from alerts.lifecycle import AlertState, LifecycleConfig, evaluate
from monitor.pairing import PairedCounts
from monitor.slices import slice_key

SETTINGS = settings(deadline=None, max_examples=60)
counts = st.integers(min_value=0, max_value=5000)


@SETTINGS
@given(n=st.integers(0, 3000), data=st.data(), alpha=st.sampled_from([0.001, 0.01, 0.05]))
def test_paired_findings_decide_exactly_when_the_bound_clears_the_floor(n: int, data, alpha: float) -> None:
    b = data.draw(st.integers(0, n))
    c = data.draw(st.integers(0, n - b))
    benign = data.draw(st.integers(0, n))
    rc = data.draw(st.integers(0, benign))
    counts = PairedCounts(n_pairs=n, b=b, c=c, harm_b=c, harm_c=b, benign_pairs=benign, refusal_c=rc,
                          candidate_harmful=b, candidate_benign=benign, candidate_over_refusals=rc)
    policy = Policy(alpha=alpha, harmful_threshold=0.05, over_refusal_threshold=0.2)
    for f in decide_paired(Comparison("a", "b", "shadow"), (), counts, policy):
        assert f.fires == f.significant == f.beyond_floor == (f.effect_low > f.floor)
        assert f.fires == (f.e_value >= 1 / f.alpha)
        assert -1.0 <= f.effect_low <= f.effect + 1e-12 and f.effect_high == 1.0


@SETTINGS
@given(weights=st.lists(st.floats(0.001, 10), min_size=6, max_size=6), harmful=st.booleans(), refusal=st.booleans(),
       alpha=st.floats(0.001, 0.2))
def test_alpha_shares_sum_to_alpha(weights: list[float], harmful: bool, refusal: bool, alpha: float) -> None:
    policy = Policy(alpha=alpha, weights=AlphaWeights(*weights), harmful_threshold=0.01 if harmful else None,
                    over_refusal_threshold=0.01 if refusal else None)
    shares = policy.alpha_shares()
    assert len(shares) == 5 + harmful + refusal
    assert math.isclose(math.fsum(shares.values()), alpha, rel_tol=1e-12)


@SETTINGS
@given(e=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=30),
       alpha=st.sampled_from([0.01, 0.05, 0.1]))
def test_e_bh_invariants(e: list[float], alpha: float) -> None:
    policy = Policy(alpha=alpha, weights=AlphaWeights(success_regression=1e9))  # success share ~ alpha
    template = next(f for f in decide_paired(Comparison("a", "b", "shadow"), (), PairedCounts(n_pairs=1), Policy())
                    if f.kind == "success_regression")
    findings = [replace(template, slice_key=slice_key({"s": str(i)}), e_value=x, beyond_floor=True)
                for i, x in enumerate(e)]
    share = policy.alpha_share("success_regression")
    out = fdr_across_slices(findings, policy)
    rejected = {i for i, f in enumerate(out) if f.significant}
    k = len(e)
    if all(x < 1 / share for x in e):
        assert not rejected
    assert {i for i, x in enumerate(e) if x >= k / share * (1 + 1e-12)} <= rejected  # at least Bonferroni
    if rejected:  # a top set: every rejected e-value beats every kept one
        assert min(e[i] for i in rejected) >= max((e[i] for i in range(k) if i not in rejected), default=0)
        assert min(e[i] for i in rejected) >= k / (share * len(rejected)) * (1 - 1e-12)
    looser_policy = replace(policy, alpha=min(0.5, 2 * alpha))
    looser = {i for i, f in enumerate(fdr_across_slices(findings, looser_policy)) if f.significant}
    assert rejected <= looser


paired = st.builds(
    lambda n, b, c, hb, hc, x, y: PairedCounts(n_pairs=n + b + c + hb + hc, b=b, c=c, harm_b=hb, harm_c=hc,
                                               cost_n=n, cost_delta_sum=x, cost_delta_sumsq=y * y,
                                               candidate_harmful=hc, benign_pairs=b + c, refusal_b=c // 2,
                                               refusal_c=b // 3),
    st.integers(0, 1000), st.integers(0, 100), st.integers(0, 100), st.integers(0, 10), st.integers(0, 10),
    st.integers(-1000, 1000).map(float), st.integers(0, 1000).map(float))


@SETTINGS
@given(x=paired, y=paired, z=paired)
def test_paired_counts_merge_is_associative_commutative_and_round_trips(x, y, z) -> None:
    assert x.merge(y) == y.merge(x)
    assert x.merge(y).merge(z) == x.merge(y.merge(z))
    assert x.merge(PairedCounts()) == x
    assert PairedCounts.from_dict(x.to_dict()) == x
    as_redis = {k.encode(): str(v).encode() for k, v in x.to_dict().items()}
    assert PairedCounts.from_dict(as_redis) == x


@settings(deadline=None, max_examples=25)
@given(steps=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60), st.integers(0, 60),
                                st.integers(1, 4000)), min_size=1, max_size=12))
def test_alert_state_survives_json_at_every_step(steps) -> None:
    state, now, total = AlertState(), 0.0, PairedCounts()
    config = LifecycleConfig(for_seconds=60, stale_seconds=900, recovery_min_pairs=200)
    for n, b, c, dt in steps:
        now += dt
        total = total.merge(PairedCounts(n_pairs=n + b + c, b=b, c=c, harm_c=c // 10))
        findings = decide_paired(Comparison("a", "b", "shadow"), (), total, Policy(harmful_threshold=0.01))
        state, events = evaluate(state, findings, now, config)
        restored = AlertState.from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
        assert restored == state
        for e in events:
            json.dumps(e.evidence, allow_nan=False)
