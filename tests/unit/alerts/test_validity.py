"""Validity in CI: seeded scenarios through the real engine and lifecycle, and exact e-value checks.

Fast versions of ``bench/validity.py`` (same harness, :mod:`tests.support.validity`).
Bounds are loose enough to hold for any valid implementation with these seeds
and tight enough that a point-estimate or sliding-window rule fails them; each
test says why.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from alerts.decide import decide_paired
from alerts.evidence import Comparison
from alerts.policy import Policy
from monitor.pairing import PairedCounts
from monitor.slices import WHOLE_FLEET
from monitor.stats import betting
from tests.support.paired_sim import paired_cell_probs
from tests.support.validity import Scenario, Segment, clopper_pearson, mcnemar_fixed_n, simulate

P, CORR = 0.7, 0.5  # 21% discordant pairs
FLOOR = Policy().floors.success_points
SHADOW = Comparison("v1", "v2", "shadow")


def test_a_drop_at_the_floor_rarely_pages() -> None:
    """A true drop of exactly the floor (2 points) over 60,000 pairs, 100 looks: at most 2 of 12 runs page.

    The success test's level is its α share (~0.02), so P(>= 3 of 12) is below 1e-3.
    A point-estimate floor rule (significant against 0 AND estimate >= floor)
    pages whenever the estimate wanders above 2 points once the drop is
    significant against 0, which is about half the runs; a sliding-window
    test re-tests fresh windows, so its false alarms grow with the looks.
    Either fails this.
    """
    scenario = Scenario("ci_at_floor", (Segment(100, P, P - FLOOR, CORR),), 600, task_types=0,
                        stop_at_first=("*",))
    paged = sum(1 for run in range(12) if simulate(scenario, seed=11, run=run).pages)
    assert paged <= 2


def test_a_persistent_drop_is_one_incident() -> None:
    """A 5-point drop for 24 h at 2 pairs/s: exactly one page per alert and no resolution.

    A point-estimate recovery rule (resolve when the estimate over the last
    1,000 pairs is under the floor) resolves a 5-point drop in ~2% of its
    epochs (SE 1.45 points), i.e. ~3 times in the 173 epochs of the day, and
    re-pages after each; a sliding window behaves the same. The e-detector's
    false resolutions are <= 0.01 a day, so one run suffices.
    """
    scenario = Scenario("ci_persistent5", (Segment(1440, P, P - 0.05, CORR),), 120, task_types=0)
    result = simulate(scenario, seed=5)
    assert [p.kind for p in result.pages] == ["success_regression"]
    assert result.pages[0].minute < 120  # detected within two hours (it is not a silent engine)
    assert result.resolutions == []


def test_a_fixed_regression_resolves_on_post_fix_evidence_and_does_not_refire() -> None:
    """A 5-point drop fixed after 30 min (10 pairs/s): one page, one "recovered" resolution, no re-fire.

    The resolution must rest on at least 4,000 post-fix pairs: at 21%
    discordance no anytime-valid test of "effect >= 2 points" can reject that
    fast at ARL 144,000, while a point-estimate epoch rule resolves within two
    1,000-pair epochs. A rule that re-arms on the cumulative finding (still
    significant for hours after the fix) pages again at once.
    """
    fix = 30
    scenario = Scenario("ci_recovery", (Segment(fix, P, P - 0.05, CORR), Segment(270, P, P, CORR)), 600,
                        task_types=0)
    result = simulate(scenario, seed=3)
    assert len(result.pages) == 1 and result.pages[0].minute <= fix
    assert [r.reason for r in result.resolutions] == ["recovered"]
    post_fix_pairs = (result.resolutions[0].minute - fix) * 600
    assert post_fix_pairs >= 4000
    assert result.resolutions[0].minute - fix <= 120


def _null_cells(n: int, worse: float, better: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (w, v) with w + v <= n and its trinomial probability."""
    w, v = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = w + v <= n
    w, v = w[keep], v[keep]
    log_pmf = (stats.binom.logpmf(w, n, worse) + stats.binom.logpmf(v, n - w, better / (1.0 - worse)))
    return w, v, np.exp(log_pmf)


@pytest.mark.parametrize("discordance", [0.05, 0.21, 0.6])
def test_the_success_e_value_has_mean_at_most_one_at_the_floor(discordance: float) -> None:
    """E[e_n] <= 1 exactly (enumeration over every outcome at n = 40) when the net flip is the floor.

    The e-value is the engine's: it equals ``decide_paired``'s success finding's e-value (checked
    on a sample of counts), then the expectation is summed exactly over the trinomial.
    """
    n = 40
    worse, better = (discordance + FLOOR) / 2, (discordance - FLOOR) / 2
    w, v, pmf = _null_cells(n, worse, better)
    for wi, vi in [(0, 0), (10, 1), (3, 3), (25, 2)]:
        found = next(f for f in decide_paired(SHADOW, WHOLE_FLEET, PairedCounts(n_pairs=n, b=wi, c=vi), Policy())
                     if f.kind == "success_regression")
        assert found.e_value == betting.flip_e_value(wi, vi, n, FLOOR)
    e = np.array([betting.flip_e_value(int(a), int(b), n, FLOOR) for a, b in zip(w, v)])
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    assert float(pmf @ e) <= 1.0 + 1e-9


def test_ville_exact_for_the_success_e_process() -> None:
    """P(e_t >= 1/α at some t <= 60) <= α exactly, by dynamic programming over the counts at the floor.

    The e-value is a function of the cumulative counts, so the probability of
    never having crossed is carried per (worse, better) state, pair by pair.
    A point-estimate or fixed-n test looked at every pair would exceed α here.
    """
    n_max, alpha = 60, 0.05
    worse, better = (0.21 + FLOOR) / 2, (0.21 - FLOOR) / 2
    alive = {(0, 0): 1.0}
    crossed = 0.0
    for t in range(1, n_max + 1):
        nxt: dict[tuple[int, int], float] = {}
        for (a, b), mass in alive.items():
            for state, p in (((a + 1, b), worse), ((a, b + 1), better), ((a, b), 1.0 - worse - better)):
                nxt[state] = nxt.get(state, 0.0) + mass * p
        alive = {}
        for (a, b), mass in nxt.items():
            if betting.flip_e_value(a, b, t, FLOOR) >= 1.0 / alpha:
                crossed += mass
            else:
                alive[(a, b)] = mass
    assert crossed <= alpha
    assert crossed > 0.0  # the test can reject at all within 60 pairs (a dead test would pass trivially)


@pytest.mark.parametrize("threshold", [0.01, 0.2])
def test_the_threshold_e_value_has_mean_at_most_one_at_the_threshold(threshold: float) -> None:
    """E[e_n] <= 1 exactly for the candidate's rate at its threshold (n = 120, every x), via the engine's finding.

    n = 120 keeps every e-value finite (the largest bet multiplies wealth by at most 1 + 0.9 (1 - m) / m
    per event), so the sum has no inf * 0 term.
    """
    n = 120
    policy = Policy(harmful_threshold=threshold)
    found = next(f for f in decide_paired(SHADOW, WHOLE_FLEET, PairedCounts(n_pairs=n, candidate_harmful=7), policy)
                 if f.kind == "safety_threshold")
    assert found.e_value == betting.rate_e_value(7, n, threshold)
    x = np.arange(n + 1)
    e = np.array([betting.rate_e_value(int(k), n, threshold) for k in x])
    assert np.isfinite(e).all()
    assert float(stats.binom.pmf(x, n, threshold) @ e) <= 1.0 + 1e-9


def test_fixed_horizon_mcnemar_n_is_exact() -> None:
    """The bench's fixed-horizon n: power at n reaches the target, at n - 1 it does not (exact binomial)."""
    _, worse, better, _ = paired_cell_probs(P, P - 0.05, CORR)
    n = mcnemar_fixed_n(worse, better, 0.05, 0.5)
    assert 200 < n < 350  # ~275 at 21% discordance, one-sided 0.05
    assert clopper_pearson(0, 100)[1] == pytest.approx(1 - 0.025 ** (1 / 100))
    assert math.isclose(clopper_pearson(100, 100)[0], 0.025 ** (1 / 100))


@pytest.mark.parametrize("model", ["lognormal2v1", "pareto18"])
def test_skewed_non_exchangeable_cost_and_latency_aa_does_not_page(model: str) -> None:
    """Equal means, different shapes (the nulls where the asymptotic test paged in 41.5% / 37% of runs):
    60,000 pairs, 100 looks, 8 runs through the engine: at most 1 run pages (cost/latency share 0.0075 each).
    A test that pages in 41.5% of runs (the asymptotic one on log-normal 2 vs 1) fails this 91% of the time."""
    scenario = Scenario(f"ci_values_{model}", (Segment(100, P, P, CORR, values=model),), 600, task_types=0,
                        stop_at_first=("*",))
    paged = [simulate(scenario, seed=13, run=run).pages for run in range(8)]
    assert sum(1 for p in paged if p) <= 1, [p[0].kind for p in paged if p]


def test_a_cost_increase_pages_and_its_bound_is_under_the_effect() -> None:
    scenario = Scenario("ci_cost_up", (Segment(60, P, P, CORR, values="increase30"),), 600, task_types=0,
                        stop_at_first=("cost_regression",))
    page = simulate(scenario, seed=2).first_page("cost_regression")
    assert page is not None and Policy().floors.cost_relative < page.effect_low < page.effect
