"""Cost/success trade-offs between releases: Pareto dominance and plain verdicts.

A release is a ``Point`` (name, cost per solved task in USD, success rate).
Lower cost is better, higher success is better. These are comparisons of
point estimates only: they say nothing about significance, which the paired
tests and bootstrap intervals supply. Cost may be +inf (nothing solved).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from monitor.fmt import fixed

__all__ = [
    "Point",
    "dominates",
    "frontier_mask",
    "iso_cost_statement",
    "iso_success_statement",
    "pareto_frontier",
    "pareto_verdict",
]

DEFAULT_SUCCESS_TOLERANCE = 0.02  # absolute, in success-rate units
DEFAULT_COST_REL_TOLERANCE = 0.05  # relative to the larger cost


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Point:
    """One release on the cost/success plane.

    cost     cost per solved task, USD, >= 0 (+inf when nothing was solved)
    success  success rate in [0, 1]
    """

    name: str
    cost: float
    success: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ValueError(f"name must be a str, got {self.name!r}")
        if not _is_real(self.cost) or math.isnan(self.cost) or self.cost < 0:
            raise ValueError(f"cost must be a number >= 0 or inf, got {self.cost!r} for {self.name!r}")
        if not _is_real(self.success) or not 0.0 <= self.success <= 1.0:
            raise ValueError(f"success must be a number in [0, 1], got {self.success!r} for {self.name!r}")


def dominates(a: Point, b: Point) -> bool:
    """True when a is no worse than b on both axes and strictly better on one.

    Irreflexive and asymmetric: identical points dominate neither way.
    """
    no_worse = a.cost <= b.cost and a.success >= b.success
    strictly_better = a.cost < b.cost or a.success > b.success
    return no_worse and strictly_better


def pareto_frontier(points: Iterable[Point]) -> list[Point]:
    """The points no other point dominates, sorted by cost then by success descending.

    Duplicates (same cost and success) are all kept: none dominates another.
    O(m^2) in the number of points, which is the number of releases compared.
    Empty input gives [].
    """
    candidates = list(points)
    frontier = [p for p in candidates if not any(dominates(q, p) for q in candidates)]
    return sorted(frontier, key=lambda p: (p.cost, -p.success, p.name))


def _usd(cost: float) -> str:
    return "$inf (none solved)" if math.isinf(cost) else f"${fixed(cost, 4)}"


def _rate(success: float) -> str:
    return fixed(success, 3)


def pareto_verdict(a: Point, b: Point) -> str:
    """One sentence: which release Pareto-dominates the other, or why neither does.

    E.g. "B Pareto-dominates A: cheaper per solved task ($0.1858 vs $0.2088)
    and more successful (0.900 vs 0.600)." or "Neither dominates: A is cheaper
    per solved task ($0.1000 vs $0.2000), B is more successful (0.900 vs
    0.600)." Costs print with 4 decimals, rates with 3; the comparison uses
    the exact values.
    """
    for winner, loser in ((a, b), (b, a)):
        if dominates(winner, loser):
            if winner.cost < loser.cost:
                cost_part = f"cheaper per solved task ({_usd(winner.cost)} vs {_usd(loser.cost)})"
            else:
                cost_part = f"as cheap per solved task ({_usd(winner.cost)})"
            if winner.success > loser.success:
                success_part = f"more successful ({_rate(winner.success)} vs {_rate(loser.success)})"
            else:
                success_part = f"as successful ({_rate(winner.success)})"
            return f"{winner.name} Pareto-dominates {loser.name}: {cost_part} and {success_part}."
    if a.cost == b.cost and a.success == b.success:
        return (
            f"Neither dominates: {a.name} and {b.name} are equal in cost per solved task"
            f" ({_usd(a.cost)}) and success ({_rate(a.success)})."
        )
    # Neither dominates and they differ: one is strictly cheaper, the other strictly more successful.
    cheaper, pricier = (a, b) if a.cost < b.cost else (b, a)
    return (
        f"Neither dominates: {cheaper.name} is cheaper per solved task"
        f" ({_usd(cheaper.cost)} vs {_usd(pricier.cost)}), {pricier.name} is more successful"
        f" ({_rate(pricier.success)} vs {_rate(cheaper.success)})."
    )


def _relative_saving(cheap: float, dear: float) -> str:
    if math.isinf(dear):
        return "finite vs unbounded"
    return f"{(dear - cheap) / dear:.1%} less" if dear > 0 else "0.0% less"


def iso_success_statement(
    a: Point, b: Point, *, success_tolerance: float = DEFAULT_SUCCESS_TOLERANCE,
    cost_unit: str = "solved task",
) -> str:
    """At (about) equal success, which release is cheaper per solved task, and by how much.

    Definition: the successes "match" when |a.success - b.success| <=
    success_tolerance (absolute, default 0.02). Then the costs per solved task
    are compared directly and the saving is reported relative to the dearer
    one. Otherwise no iso-success comparison is possible from two points: the
    sentence says so, unless the cheaper release also succeeds at least as
    often, in which case it wins outright and the sentence says that.
    ``cost_unit`` names what the cost is per in the sentence (the
    multi-agent frontier passes "trial").
    """
    gap = abs(a.success - b.success)
    if gap <= success_tolerance:
        matched = (
            f"At matched success ({a.name} {_rate(a.success)}, {b.name} {_rate(b.success)},"
            f" within {success_tolerance:g})"
        )
        if a.cost == b.cost:
            return f"{matched}, both cost {_usd(a.cost)} per {cost_unit}."
        cheap, dear = (a, b) if a.cost < b.cost else (b, a)
        return (
            f"{matched}, {cheap.name} is cheaper per {cost_unit}: {_usd(cheap.cost)} vs"
            f" {_usd(dear.cost)} ({_relative_saving(cheap.cost, dear.cost)})."
        )
    better, worse = (a, b) if a.success > b.success else (b, a)
    if better.cost <= worse.cost:
        return (
            f"{better.name} reaches more than the success of {worse.name}"
            f" ({_rate(better.success)} vs {_rate(worse.success)}) at no higher cost per"
            f" {cost_unit} ({_usd(better.cost)} vs {_usd(worse.cost)}): it needs no iso-success"
            f" comparison to win."
        )
    return (
        f"Success differs by {gap:.3f} ({a.name} {_rate(a.success)}, {b.name} {_rate(b.success)}),"
        f" more than {success_tolerance:g}, so there is no iso-success comparison: the cheaper"
        f" release ({worse.name}, {_usd(worse.cost)} vs {_usd(better.cost)}) also succeeds less often."
    )


def iso_cost_statement(
    a: Point, b: Point, *, cost_rel_tolerance: float = DEFAULT_COST_REL_TOLERANCE,
    cost_unit: str = "solved task",
) -> str:
    """At (about) equal cost per solved task, which release succeeds more, and by how much.

    Definition: the costs "match" when |a.cost - b.cost| <= cost_rel_tolerance
    * max(a.cost, b.cost) (relative, default 5%; two infinite costs match).
    Then the success rates are compared directly, difference in rate points.
    Otherwise no iso-cost comparison is possible from two points: the sentence
    says so, unless the more successful release is also no more expensive, in
    which case it wins outright and the sentence says that. ``cost_unit`` as
    in :func:`iso_success_statement`.
    """
    both_inf = math.isinf(a.cost) and math.isinf(b.cost)
    larger = max(a.cost, b.cost)
    if both_inf or (not math.isinf(larger) and abs(a.cost - b.cost) <= cost_rel_tolerance * larger):
        matched = (
            f"At matched cost per {cost_unit} ({a.name} {_usd(a.cost)}, {b.name} {_usd(b.cost)},"
            f" within {cost_rel_tolerance:.0%})"
        )
        if a.success == b.success:
            return f"{matched}, both succeed at {_rate(a.success)}."
        better, worse = (a, b) if a.success > b.success else (b, a)
        return (
            f"{matched}, {better.name} succeeds more: {_rate(better.success)} vs"
            f" {_rate(worse.success)} (+{better.success - worse.success:.3f})."
        )
    cheap, dear = (a, b) if a.cost < b.cost else (b, a)
    if cheap.success >= dear.success:
        return (
            f"{cheap.name} succeeds at least as often as {dear.name}"
            f" ({_rate(cheap.success)} vs {_rate(dear.success)}) at a lower cost per {cost_unit}"
            f" ({_usd(cheap.cost)} vs {_usd(dear.cost)}): it needs no iso-cost comparison to win."
        )
    return (
        f"Cost per {cost_unit} differs by more than {cost_rel_tolerance:.0%}"
        f" ({a.name} {_usd(a.cost)}, {b.name} {_usd(b.cost)}), so there is no iso-cost"
        f" comparison: the more successful release ({dear.name}, {_rate(dear.success)} vs"
        f" {_rate(cheap.success)}) also costs more."
    )


def frontier_mask(costs: object, successes: object) -> np.ndarray:
    """Which points are on the Pareto frontier, for many point sets at once.

    ``costs`` and ``successes`` have shape ``(r, m)``: r independent sets of m
    points (bootstrap resamples x agents). Returns a bool ``(r, m)`` array,
    True where no other point of the same row dominates (same rule as
    :func:`dominates`: no worse on both axes, strictly better on one). A point
    with a nan coordinate (an agent with no tasks in a resample) is never on
    the frontier and dominates nothing. Memory: ``r * m * m`` booleans, done
    in row chunks of about 4M.
    """
    cost = np.atleast_2d(np.asarray(costs, dtype=np.float64))
    success = np.atleast_2d(np.asarray(successes, dtype=np.float64))
    if cost.shape != success.shape:
        raise ValueError(f"costs and successes must have the same shape, got {cost.shape} and {success.shape}")
    rows, m = cost.shape
    valid = ~(np.isnan(cost) | np.isnan(success))
    out = np.zeros((rows, m), dtype=bool)
    step = max(1, 4_000_000 // max(m * m, 1))
    for start in range(0, rows, step):
        c = cost[start:start + step]
        s = success[start:start + step]
        v = valid[start:start + step]
        # dominated[r, j] = any_i valid_i and c_i <= c_j and s_i >= s_j and (c_i < c_j or s_i > s_j)
        ci, cj = c[:, :, None], c[:, None, :]
        si, sj = s[:, :, None], s[:, None, :]
        dom = (ci <= cj) & (si >= sj) & ((ci < cj) | (si > sj)) & v[:, :, None]
        out[start:start + step] = v & ~dom.any(axis=1)
    return out
