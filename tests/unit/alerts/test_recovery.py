"""alerts.recovery: the e-detector's increments, re-basing, its run length under H0, the fresh re-arm test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alerts import recovery
from alerts.decide import Finding
from alerts.evidence import Comparison
from monitor.slices import slice_key
from monitor.stats.betting import BET_FRACTIONS, BET_WEIGHTS, flip_e_value, flip_log_factors, rate_e_value

SHADOW = Comparison("v1", "v2", "shadow")
CODE = slice_key({"task_type": "code"})
FRACTIONS = np.array(BET_FRACTIONS)
J = FRACTIONS.size


def flip(n: int, worse: int, better: int, floor: float = 0.02, kind: str = "success_regression") -> Finding:
    effect = (worse - better) / n if n else 0.0
    return Finding(kind, SHADOW, CODE, "critical", True, True, True, flip_e_value(worse, better, n, floor), effect,
                   effect, 1.0, floor, 0.05, n, worse, better,
                   {"counters_kind": "flip", "counters": {"n": n, "worse": worse, "better": better}})


def rate(n: int, x: int, threshold: float = 0.01) -> Finding:
    return Finding("safety_threshold", SHADOW, CODE, "critical", True, True, True, rate_e_value(x, n, threshold),
                   x / n if n else 0.0, 0.0, 1.0, threshold, 0.05, n, 0, 0,
                   {"counters_kind": "rate", "metric": "harmful_action", "counters": {"n": n, "x": x}})


def pair_log_factor(value: int, floor: float) -> np.ndarray:
    """log(1 + lambda_j (floor - X)), lambda_j = f_j / (1 - floor): one pair of the reverse (recovery) bets."""
    return np.log1p(FRACTIONS / (1.0 - floor) * (floor - value))


def test_a_batch_factor_is_the_exact_product_over_its_pairs() -> None:
    rng = np.random.default_rng(5)
    pairs = rng.choice([1, 0, -1], size=500, p=[0.1, 0.82, 0.08])
    exact = sum(pair_log_factor(int(v), 0.02) for v in pairs)  # log of the product of per-pair factors
    batch = flip_log_factors(int((pairs == 1).sum()), int((pairs == -1).sum()), pairs.size, 0.02, "less")
    np.testing.assert_allclose(batch, exact, rtol=1e-10)


def test_detector_steps_are_the_cusum_recursion_over_exact_batch_products() -> None:
    rng = np.random.default_rng(6)
    reference = np.zeros(J)
    log_wealth, last = None, {"n": 0, "worse": 0, "better": 0}
    n = worse = better = 0
    for _ in range(40):
        pairs = rng.choice([1, 0, -1], size=int(rng.integers(0, 60)), p=[0.05, 0.85, 0.1])
        n, worse, better = n + pairs.size, worse + int((pairs == 1).sum()), better + int((pairs == -1).sum())
        reference = np.maximum(reference, 0.0) + sum((pair_log_factor(int(v), 0.02) for v in pairs), np.zeros(J))
        step = recovery.detector_step(flip(n, worse, better), log_wealth, last)
        log_wealth, last = step.log_wealth, step.counters
        assert not step.rebased
        np.testing.assert_allclose(step.log_wealth, reference, rtol=1e-9, atol=1e-9)
        assert step.log_statistic == pytest.approx(math.log(np.dot(BET_WEIGHTS, np.exp(reference))), rel=1e-9)
    assert last == {"n": n, "worse": worse, "better": better}


@pytest.mark.parametrize("last", [{"n": 900, "worse": 10, "better": 5},  # n went backwards
                                  {"n": 100, "worse": 60, "better": 5},  # worse went backwards
                                  {"n": 100},  # a key is missing
                                  None])
def test_counters_that_go_backwards_re_base(last) -> None:
    step = recovery.detector_step(flip(500, 40, 20), [3.0] * J, last)
    assert step.rebased and step.log_wealth == [0.0] * J and step.counters == {"n": 500, "worse": 40, "better": 20}
    assert step.log_statistic == pytest.approx(0.0, abs=1e-12)


def test_inconsistent_increments_and_a_state_of_the_wrong_length_re_base() -> None:
    assert recovery.increment(flip(500, 40, 20), {"n": 499, "worse": 30, "better": 15}) is None  # 15 > 1
    assert recovery.detector_step(flip(500, 40, 20), [1.0, 2.0], {"n": 400, "worse": 30, "better": 15}).rebased
    assert recovery.increment(rate(500, 9), {"n": 400, "x": 2}) == {"n": 100, "x": 7}


def test_under_h0_the_expected_run_to_a_false_resolution_is_at_least_a() -> None:
    # At the null's boundary (net flip exactly the floor), batches of 10 pairs, A = 20: E[tau] >= A, so
    # the censored mean E[min(tau, T)] (a lower bound of E[tau]) must exceed A too.
    per_pair = np.stack([pair_log_factor(v, 0.02) for v in (1, 0, -1)])
    rng = np.random.default_rng(7)
    runs, horizon, arl = 1000, 200, 20.0
    log_wealth = np.zeros((runs, J))
    tau = np.full(runs, horizon)
    alive = np.ones(runs, dtype=bool)
    for t in range(1, horizon + 1):
        log_wealth = np.maximum(log_wealth, 0.0) + rng.multinomial(10, [0.16, 0.70, 0.14], size=runs) @ per_pair
        hit = alive & (np.log(np.exp(log_wealth) @ np.array(BET_WEIGHTS)) >= math.log(arl))
        tau[hit], alive = t, alive & ~hit
    assert tau.mean() >= 2 * arl  # 175 in this seed: the bound is conservative


def test_a_fixed_regression_resolves_from_the_evidence_since_firing() -> None:
    rng = np.random.default_rng(8)
    n, worse, better = 5000, 800, 550  # the regression's history: 5 points
    step = recovery.detector_step(flip(n, worse, better), None, {"n": n, "worse": worse, "better": better})
    minutes = 0
    while not step.recovered(144_000):
        minutes += 1
        w, _, v = rng.multinomial(120, [0.105, 0.79, 0.105])  # fixed: no net flip, 2 pairs/s
        n, worse, better = n + 120, worse + int(w), better + int(v)
        step = recovery.detector_step(flip(n, worse, better), step.log_wealth, step.counters)
    assert 30 <= minutes <= 300  # 2 h in this seed: log(A) nats at ~0.001 nats a pair


def test_rearm_uses_only_the_counts_since_the_resolution() -> None:
    since = {"n": 10_000, "worse": 1500, "better": 1000}
    assert recovery.rearm_e_value(flip(12_000, 1700, 1200), since) == pytest.approx(flip_e_value(200, 200, 2000, 0.02))
    assert recovery.rearm_e_value(flip(9_000, 1400, 900), since) is None
    assert recovery.rearm_e_value(rate(3000, 40), {"n": 1000, "x": 30}) == pytest.approx(rate_e_value(10, 2000, 0.01))


def test_v1_paired_epochs_are_renamed_by_kind() -> None:
    old = {"n": 100, "b": 9, "c": 4}
    assert recovery.upgrade_v1_counters("success_regression", old) == {"n": 100, "worse": 9, "better": 4}
    assert recovery.upgrade_v1_counters("safety_regression", old) == {"n": 100, "worse": 4, "better": 9}
    assert recovery.upgrade_v1_counters("safety_threshold", {"n": 5, "x": 1}) == {"n": 5, "x": 1}
    assert recovery.upgrade_v1_counters("cost_regression", None) is None


def test_only_flip_and_rate_counters_are_covered() -> None:
    assert recovery.covered(flip(10, 1, 0)) and recovery.covered(rate(10, 1))
    mean = Finding("cost_regression", SHADOW, CODE, "critical", True, True, True, 50.0, 0.2, 0.1, 0.3, 0.1, 0.05, 300,
                   0, 0, {"counters_kind": "mean", "counters": {"n": 300, "sum": 6.0, "sumsq": 1.0}})
    assert not recovery.covered(mean)
