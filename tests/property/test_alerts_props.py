"""Invariants of the alert core: e-values, confidence sequences, e-BH, evidence merge, state serialisation."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts import sequential as seq
from alerts.decide import Policy, decide_paired, fdr_across_slices
from alerts.evidence import Comparison
from alerts.lifecycle import AlertState, LifecycleConfig, evaluate
from monitor.pairing import PairedCounts
from monitor.slices import slice_key

SETTINGS = settings(deadline=None, max_examples=60)
counts = st.integers(min_value=0, max_value=5000)


@SETTINGS
@given(b=counts, c=counts, alternative=st.sampled_from(seq.ALTERNATIVES))
def test_e_value_is_nonnegative_and_log_consistent(b: int, c: int, alternative: str) -> None:
    log_e = seq.log_paired_mixture_e_value(b, c, alternative=alternative)
    assert not math.isnan(log_e)
    e = seq.paired_mixture_e_value(b, c, alternative=alternative)
    assert e >= 0
    if -700 < log_e < 700:
        assert math.isclose(e, math.exp(log_e), rel_tol=1e-9)


@SETTINGS
@given(b=counts, c=counts)
def test_less_e_value_is_monotone(b: int, c: int) -> None:
    e = seq.log_paired_mixture_e_value(b, c)
    assert seq.log_paired_mixture_e_value(b, c + 1) <= e + 1e-9  # more candidate-only wins: less evidence
    assert seq.log_paired_mixture_e_value(b + 1, c) >= e - 1e-9  # more baseline-only wins: more evidence
    g = seq.log_paired_mixture_e_value(b, c, alternative="greater")
    assert seq.log_paired_mixture_e_value(b, c + 1, alternative="greater") >= g - 1e-9


@SETTINGS
@given(b=st.integers(0, 400), c=st.integers(0, 400), alternative=st.sampled_from(seq.ALTERNATIVES))
def test_e_value_is_a_martingale_at_one_half(b: int, c: int, alternative: str) -> None:
    m = seq.log_paired_mixture_e_value(b, c, alternative=alternative)
    up = seq.log_paired_mixture_e_value(b, c + 1, alternative=alternative)
    down = seq.log_paired_mixture_e_value(b + 1, c, alternative=alternative)
    assert math.isclose(np.logaddexp(up, down) - math.log(2), m, rel_tol=1e-9, abs_tol=1e-9)


@SETTINGS
@given(e=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=30),
       alpha=st.sampled_from([0.01, 0.05, 0.1]))
def test_e_bh_invariants(e: list[float], alpha: float) -> None:
    template = next(f for f in decide_paired(Comparison("a", "b", "shadow"), (), PairedCounts(n_pairs=1), Policy())
                    if f.kind == "success_regression")
    findings = [replace(template, slice_key=slice_key({"s": str(i)}), e_value=x, beyond_floor=True)
                for i, x in enumerate(e)]
    out = fdr_across_slices(findings, alpha)
    rejected = {i for i, f in enumerate(out) if f.significant}
    k = len(e)
    if all(x < 1 / alpha for x in e):
        assert not rejected
    assert {i for i, x in enumerate(e) if x >= k / alpha} <= rejected  # at least Bonferroni
    if rejected:  # a top set: every rejected e-value beats every kept one
        assert min(e[i] for i in rejected) >= max((e[i] for i in range(k) if i not in rejected), default=0)
        assert min(e[i] for i in rejected) >= k / (alpha * len(rejected))
    looser = {i for i, f in enumerate(fdr_across_slices(findings, min(0.5, 2 * alpha))) if f.significant}
    assert rejected <= looser


paired = st.builds(
    lambda n, b, c, hb, hc, x, y: PairedCounts(n_pairs=n + b + c + hb + hc, b=b, c=c, harm_b=hb, harm_c=hc,
                                               cost_n=n, cost_delta_sum=x, cost_delta_sumsq=y * y,
                                               candidate_harmful=hc),
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


@SETTINGS
@given(n=st.integers(1, 100_000), data=st.data())
def test_net_flip_cs_contains_the_estimate(n: int, data) -> None:
    b = data.draw(st.integers(0, n))
    c = data.draw(st.integers(0, n - b))
    lo, hi = seq.net_flip_cs(n, b, c)
    assert -1 <= lo <= (c - b) / n <= hi <= 1


@SETTINGS
@given(n=st.integers(1, 10**6), mean=st.floats(-10, 10), var=st.floats(0, 100),
       alpha=st.sampled_from([0.01, 0.05, 0.2]))
def test_asymptotic_cs_is_centred_and_shrinks_with_alpha(n: int, mean: float, var: float, alpha: float) -> None:
    lo, hi = seq.asymptotic_cs(n, mean, var, alpha)
    assert lo <= mean <= hi and math.isclose(mean - lo, hi - mean, rel_tol=1e-9, abs_tol=1e-12)
    lo2, hi2 = seq.asymptotic_cs(n, mean, var, alpha / 2)
    assert hi2 - lo2 >= hi - lo - 1e-12


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
