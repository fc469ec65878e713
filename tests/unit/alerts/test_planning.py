"""The live plan runs the engine's test: equal to a scan with ``flip_e_value`` and to the real engine's first page."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alerts.planning import first_crossing, live_level, simulate_live_test
from alerts.policy import Policy
from monitor.stats import betting
from monitor.stats.power import paired_cells
from tests.support.paired_sim import correlation_for_discordance
from tests.support.validity import Scenario, Segment, _draw_segment, run_seed, simulate

LEVEL = live_level(Policy())


def scan(steps: np.ndarray, floor: float, alpha: float, look_every: int = 1,
         start: tuple[int, int, int] = (0, 0, 0)) -> int | None:
    """The reference: the engine's e-value at every look, in order."""
    b, c, n = start
    for x in steps.tolist():
        b, c, n = b + (x == 1), c + (x == -1), n + 1
        if n % look_every == 0 and betting.flip_e_value(b, c, n, floor) >= 1.0 / alpha:
            return n
    return None


@pytest.mark.parametrize(("p10", "p01", "floor", "look_every", "start"), [
    (0.15, 0.05, 0.02, 1, (0, 0, 0)),
    (0.14, 0.06, 0.02, 1, (30, 20, 400)),
    (0.30, 0.02, 0.10, 3, (0, 0, 0)),
    (0.10, 0.06, 0.0, 7, (14, 7, 210)),
    (0.05, 0.05, 0.02, 1, (0, 0, 0)),  # no effect: no crossing expected, but the answers must agree
])
def test_first_crossing_equals_a_scan_of_every_look(p10, p01, floor, look_every, start):
    for seed in range(4):
        u = np.random.default_rng(seed).random(3000)
        steps = np.where(u < p10, 1, np.where(u < p10 + p01, -1, 0)).astype(np.int8)
        assert first_crossing(steps, floor, LEVEL, look_every, start) == scan(steps, floor, LEVEL, look_every, start)


def test_the_plan_pages_where_the_real_engine_pages():
    """Same minute counts through ``AlertEngine.tick`` (no hold, the whole fleet only) and through the plan."""
    p, drop, corr, ppm = 0.7, 0.08, correlation_for_discordance(0.7, 0.21), 25
    segment = Segment(200, p, p - drop, corr)
    scenario = Scenario("plan_vs_engine", (segment,), ppm, task_types=0, lifecycle=(("for_seconds", 0.0),),
                        stop_at_first=("success_regression",))
    engine_pairs, plan_pairs = [], []
    for run in range(6):
        page = simulate(scenario, seed=2, run=run).first_page("success_regression")
        draws = _draw_segment(segment, ppm, 0, np.random.default_rng(run_seed(scenario.name, 2, run)))[:, 0, :]
        steps = np.concatenate([np.array([1] * int(row[2]) + [-1] * int(row[3]) + [0] * int(row[0] - row[2] - row[3]),
                                         dtype=np.int8) for row in draws])
        engine_pairs.append(page.pairs if page else None)
        plan_pairs.append(first_crossing(steps, Policy().floors.success_points, LEVEL, look_every=ppm))
    assert engine_pairs == plan_pairs
    assert all(x is not None for x in engine_pairs)  # the comparison is not vacuous


def test_runs_are_seeded_and_the_quantiles_ordered():
    p10, p01 = paired_cells(0.7, 0.1, 0.21)
    small = simulate_live_test(p10, p01, 0.02, LEVEL, runs=20, seed=4)
    again = simulate_live_test(p10, p01, 0.02, LEVEL, runs=20, seed=4)
    other = simulate_live_test(p10, p01, 0.02, LEVEL, runs=20, seed=5)
    assert small == again and small != other
    assert small.median_ci[0] <= small.median_pairs <= small.median_ci[1]
    assert small.p80_ci[0] <= small.p80_pairs <= small.p80_ci[1]
    assert small.median_pairs <= small.p80_pairs


def test_a_larger_drop_pages_sooner_and_a_short_horizon_reports_inf():
    big = simulate_live_test(*paired_cells(0.7, 0.12, 0.25), 0.02, LEVEL, runs=30)
    small = simulate_live_test(*paired_cells(0.7, 0.06, 0.25), 0.02, LEVEL, runs=30)
    assert big.median_pairs < small.median_pairs
    cut = simulate_live_test(*paired_cells(0.7, 0.06, 0.25), 0.02, LEVEL, runs=30, max_pairs=50)
    assert cut.detected_share < 0.5 and math.isinf(cut.median_pairs)


def test_at_the_floor_pages_are_rare():
    """A drop equal to the floor is in the null: at most a few of 40 runs may page (level ~0.019)."""
    plan = simulate_live_test(*paired_cells(0.7, 0.02, 0.21), 0.02, LEVEL, runs=40, max_pairs=20_000)
    assert plan.detected_share <= 0.1


def test_level_is_the_success_share_over_slices():
    policy = Policy(alpha=0.1, harmful_threshold=0.01)
    assert live_level(policy, 4) == pytest.approx(policy.alpha_share("success_regression") / 4)
    with pytest.raises(ValueError, match="slices must be an integer >= 1, got 0"):
        live_level(policy, 0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"p10": 1.5}, "p10 must be a probability in [0, 1], got 1.5"),
    ({"runs": 0}, "runs must be an integer >= 1, got 0"),
    ({"alpha": 0.0}, "alpha must be in (0, 1), got 0.0"),
    ({"floor": -0.1}, "floor must be in [0, 1) for the live plan, got -0.1"),
])
def test_bad_input_names_the_value(kwargs, message):
    args = {"p10": 0.2, "p01": 0.05, "floor": 0.02, "alpha": LEVEL, "runs": 2, **kwargs}
    with pytest.raises(ValueError) as info:
        simulate_live_test(args.pop("p10"), args.pop("p01"), args.pop("floor"), args.pop("alpha"), **args)
    assert message in str(info.value)
