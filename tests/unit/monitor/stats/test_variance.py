"""The random-effects variance split against scipy's one-way ANOVA and a direct loop computation."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import f_oneway

from monitor.stats.variance import random_effects_split


def _groups(rng, k, binary):
    sizes = rng.integers(1, 12, size=k)
    sizes[0] = max(sizes[0], 2)  # at least one task with two trials: N > k
    effects = rng.normal(0, 1.0, size=k)
    groups = []
    for size, effect in zip(sizes, effects):
        if binary:
            p = 1 / (1 + math.exp(-effect))
            groups.append((rng.uniform(size=size) < p).astype(float))
        else:
            groups.append(effect + rng.normal(0, 0.7, size=size))
    return groups


def _direct(groups):
    """Textbook ANOVA estimators, written out with loops."""
    k = len(groups)
    total = sum(len(g) for g in groups)
    grand = sum(sum(g) for g in groups) / total
    ssb = sum(len(g) * (sum(g) / len(g) - grand) ** 2 for g in groups)
    ssw = sum(sum((y - sum(g) / len(g)) ** 2 for y in g) for g in groups)
    msb, msw = ssb / (k - 1), ssw / (total - k)
    n0 = (total - sum(len(g) ** 2 for g in groups) / total) / (k - 1)
    between = max(0.0, (msb - msw) / n0)
    icc = between / (between + msw)
    return msb, msw, between, icc, 1 + (total / k - 1) * icc


@pytest.mark.parametrize("binary", [True, False])
def test_against_scipy_f_oneway_and_direct_loops(binary):
    rng = np.random.default_rng(7 if binary else 8)
    for _ in range(200):
        groups = _groups(rng, int(rng.integers(2, 30)), binary)
        n = [len(g) for g in groups]
        sums = [float(np.sum(g)) for g in groups]
        squares = [float(np.sum(np.square(g))) for g in groups]
        split = random_effects_split(n, sums, None if binary else squares)
        msb, msw, between, icc, deff = _direct(groups)
        if msw == 0:
            continue  # every task constant: F undefined
        reference = f_oneway(*groups)
        assert split.ms_between / split.ms_within == pytest.approx(reference.statistic, rel=1e-9)
        assert split.ms_between == pytest.approx(msb, rel=1e-9, abs=1e-15)
        assert split.ms_within == pytest.approx(msw, rel=1e-9)
        assert split.between_task == pytest.approx(between, rel=1e-9, abs=1e-15)
        assert split.icc == pytest.approx(icc, rel=1e-9, abs=1e-15)
        assert split.design_effect == pytest.approx(deff, rel=1e-9)
        assert split.effective_n == pytest.approx(sum(n) / deff, rel=1e-9)


def test_design_effect_predicts_the_spread_of_the_pooled_mean():
    """Simulated clustered outcomes (a new task set each time): var(pooled mean) = deff x the binomial one."""
    rng = np.random.default_rng(3)
    k, n = 200, 8
    means, deffs = [], []
    for _ in range(400):
        task_p = rng.beta(0.6, 0.6, size=k)  # strongly task-dependent success
        successes = rng.binomial(n, task_p)
        means.append(successes.sum() / (k * n))
        deffs.append(random_effects_split(np.full(k, n), successes).design_effect)
    p = float(np.mean(means))
    naive = p * (1 - p) / (k * n)
    assert np.var(means) / naive == pytest.approx(np.mean(deffs), rel=0.2)


def test_balanced_and_degenerate_cases():
    split = random_effects_split([4, 4, 4], [4, 0, 2])
    assert split.mean_trials_per_task == 4 and 0 < split.icc <= 1
    same = random_effects_split([3, 3], [3, 3])  # every outcome 1: no variance at all
    assert math.isnan(same.icc) and same.design_effect == 1.0
    one_trial = random_effects_split([1, 1, 1], [1, 0, 1])  # between and within cannot be told apart
    assert math.isnan(one_trial.icc) and math.isnan(one_trial.design_effect)
    one_task = random_effects_split([5], [2])
    assert one_task.grand_mean == 0.4 and math.isnan(one_task.between_task)
    assert math.isnan(random_effects_split([], []).grand_mean)
    with pytest.raises(ValueError, match="equal lengths"):
        random_effects_split([1, 2], [1])
    with pytest.raises(ValueError, match="counts >= 1"):
        random_effects_split([0, 2], [0, 1])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10), st.floats(0, 1)), min_size=2, max_size=40), st.randoms())
def test_invariants(tasks, rnd):
    n = [size for size, _ in tasks]
    c = [round(size * share) for size, share in tasks]
    split = random_effects_split(n, c)
    if math.isnan(split.icc):
        return
    assert 0.0 <= split.icc <= 1.0
    assert split.between_task >= 0 and split.within_task >= 0
    assert split.design_effect >= 1.0
    assert split.design_effect <= split.mean_trials_per_task + 1e-9  # deff = 1 + (m - 1) icc <= m
    order = list(range(len(n)))
    rnd.shuffle(order)
    shuffled = random_effects_split([n[i] for i in order], [c[i] for i in order])
    assert shuffled.icc == pytest.approx(split.icc, rel=1e-9, abs=1e-12)  # tasks are exchangeable
    flipped = random_effects_split(n, [a - b for a, b in zip(n, c)])  # success <-> failure
    assert flipped.icc == pytest.approx(split.icc, rel=1e-9, abs=1e-12)
