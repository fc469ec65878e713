"""frontier_mask (many point sets at once) against pareto_frontier point by point."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.stats.pareto import Point, dominates, frontier_mask, pareto_frontier


def test_against_pareto_frontier_on_random_rows():
    rng = np.random.default_rng(5)
    costs = np.round(rng.uniform(0, 1, size=(500, 7)), 1)  # rounding makes ties common
    success = np.round(rng.uniform(0, 1, size=(500, 7)), 1)
    costs[rng.uniform(size=costs.shape) < 0.05] = math.nan
    mask = frontier_mask(costs, success)
    for row in range(500):
        points = [Point(str(j), float(costs[row, j]), float(success[row, j]))
                  for j in range(7) if not math.isnan(costs[row, j])]
        expected = {p.name for p in pareto_frontier(points)}
        assert {str(j) for j in np.nonzero(mask[row])[0]} == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 1)), min_size=1, max_size=12))
def test_invariants(points):
    cost = np.array([[c for c, _ in points]])
    success = np.array([[s for _, s in points]])
    mask = frontier_mask(cost, success)[0]
    assert mask.any()  # a finite set always has an undominated point
    chosen = [Point(str(i), c, s) for i, ((c, s), on) in enumerate(zip(points, mask)) if on]
    others = [Point(str(i), c, s) for i, ((c, s), on) in enumerate(zip(points, mask)) if not on]
    assert not any(dominates(a, b) for a in chosen for b in chosen)
    assert all(any(dominates(a, b) for a in chosen) for b in others)  # everything off it is dominated
