"""Pareto dominance, frontier and the plain-language verdicts, on hand examples."""

import math

import pytest

from monitor.stats import (
    Point,
    dominates,
    iso_cost_statement,
    iso_success_statement,
    pareto_frontier,
    pareto_verdict,
)

A = Point("A", cost=0.2088, success=0.600)
B = Point("B", cost=0.1858, success=0.900)


def test_dominates():
    assert dominates(B, A)
    assert not dominates(A, B)
    assert not dominates(A, A)  # irreflexive
    assert dominates(Point("x", 1.0, 0.5), Point("y", 1.0, 0.4))  # equal cost, more success
    assert dominates(Point("x", 0.9, 0.5), Point("y", 1.0, 0.5))  # equal success, cheaper
    assert not dominates(Point("x", 0.9, 0.4), Point("y", 1.0, 0.5))  # a trade-off
    assert dominates(Point("x", 5.0, 0.1), Point("y", math.inf, 0.0))


def test_frontier_sorted_by_cost_keeps_duplicates():
    points = [
        Point("dear-best", 0.30, 0.95),
        A,
        B,
        Point("cheap-weak", 0.10, 0.50),
        Point("twin", 0.10, 0.50),
        Point("none-solved", math.inf, 0.0),
    ]
    frontier = pareto_frontier(points)
    assert [p.name for p in frontier] == ["cheap-weak", "twin", "B", "dear-best"]
    assert pareto_frontier([]) == []
    assert pareto_frontier([A]) == [A]


def test_verdict_dominance_sentence_from_the_spec():
    expected = (
        "B Pareto-dominates A: cheaper per solved task ($0.1858 vs $0.2088)"
        " and more successful (0.900 vs 0.600)."
    )
    assert pareto_verdict(A, B) == expected
    assert pareto_verdict(B, A) == expected


def test_verdict_trade_off_and_ties():
    cheap = Point("A", 0.10, 0.60)
    good = Point("B", 0.20, 0.90)
    assert pareto_verdict(cheap, good) == (
        "Neither dominates: A is cheaper per solved task ($0.1000 vs $0.2000),"
        " B is more successful (0.900 vs 0.600)."
    )
    assert pareto_verdict(good, cheap) == pareto_verdict(cheap, good)
    assert pareto_verdict(cheap, Point("C", 0.10, 0.60)) == (
        "Neither dominates: A and C are equal in cost per solved task ($0.1000) and success (0.600)."
    )
    assert pareto_verdict(Point("A", 0.10, 0.6), Point("B", 0.10, 0.7)) == (
        "B Pareto-dominates A: as cheap per solved task ($0.1000) and more successful (0.700 vs 0.600)."
    )
    assert "$inf (none solved)" in pareto_verdict(Point("A", math.inf, 0.0), cheap)


def test_iso_success():
    near_a = Point("A", 0.10, 0.60)
    near_b = Point("B", 0.20, 0.61)
    assert iso_success_statement(near_a, near_b) == (
        "At matched success (A 0.600, B 0.610, within 0.02), A is cheaper per solved task:"
        " $0.1000 vs $0.2000 (50.0% less)."
    )
    assert iso_success_statement(Point("A", 0.2, 0.6), Point("B", 0.2, 0.6)).endswith(
        "both cost $0.2000 per solved task."
    )
    assert iso_success_statement(A, B).startswith("B reaches more than the success of A (0.900 vs 0.600)")
    trade_off = iso_success_statement(Point("A", 0.10, 0.60), Point("B", 0.20, 0.90))
    assert trade_off.startswith("Success differs by 0.300 (A 0.600, B 0.900), more than 0.02")
    assert "cheaper release (A, $0.1000 vs $0.2000) also succeeds less often" in trade_off
    # The tolerance is a parameter.
    assert iso_success_statement(near_a, near_b, success_tolerance=0.001).startswith("Success differs")


def test_iso_cost():
    matched = iso_cost_statement(Point("A", 0.100, 0.60), Point("B", 0.102, 0.90))
    assert matched == (
        "At matched cost per solved task (A $0.1000, B $0.1020, within 5%), B succeeds more:"
        " 0.900 vs 0.600 (+0.300)."
    )
    assert iso_cost_statement(A, B).startswith("B succeeds at least as often as A (0.900 vs 0.600)")
    trade_off = iso_cost_statement(Point("A", 0.10, 0.60), Point("B", 0.20, 0.90))
    assert trade_off.startswith("Cost per solved task differs by more than 5% (A $0.1000, B $0.2000)")
    assert "more successful release (B, 0.900 vs 0.600) also costs more" in trade_off
    both_unsolved = iso_cost_statement(Point("A", math.inf, 0.0), Point("B", math.inf, 0.0))
    assert both_unsolved.endswith("both succeed at 0.000.")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "x", "cost": -1.0, "success": 0.5}, "cost must be a number >= 0 or inf, got -1.0 for 'x'"),
        ({"name": "x", "cost": math.nan, "success": 0.5}, "cost must be a number >= 0 or inf, got nan"),
        ({"name": "x", "cost": 1.0, "success": 1.5}, "success must be a number in [0, 1], got 1.5 for 'x'"),
        ({"name": 3, "cost": 1.0, "success": 0.5}, "name must be a str, got 3"),
    ],
)
def test_point_validation(kwargs, message):
    with pytest.raises(ValueError) as info:
        Point(**kwargs)
    assert message in str(info.value)
