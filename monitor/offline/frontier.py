"""The cost–success Pareto frontier over many agents, with bootstrap frontier probabilities (pure).

Axes: cost per trial (USD, lower is better) and macro success (higher is
better), the HAL-style plane on which a release meeting weighs model ×
scaffold × effort configurations. ``frontier`` lists the agents no other
agent dominates (:func:`monitor.stats.pareto.pareto_frontier`), cheapest
first. ``frontier_probability`` is the share of bootstrap resamples in which
an agent is on the frontier: tasks are resampled over the union of all
agents' tasks (one draw for every agent, so resamples stay paired), each
agent's figures recomputed on the drawn tasks it ran (a resample holding
none of its tasks leaves it off the frontier). A probability near 1 means
"on the frontier whatever the task sample"; an agent on the point frontier
with probability ~0.5 is there by the luck of the task set.

``frontier_statements`` pairs each frontier agent with its next dearer
neighbour: the iso-cost and iso-success sentences of
:mod:`monitor.stats.pareto`, costs per trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from monitor.offline.summary import _safe_div
from monitor.offline.trials import AgentTrials
from monitor.stats.pareto import Point, frontier_mask, iso_cost_statement, iso_success_statement, pareto_frontier
from monitor.stats.resample import ResampleCache, Step, run_one


def frontier_block(agents: Sequence[AgentTrials], n_resamples: int, seed: int | None,
                   cache: ResampleCache | None = None) -> dict[str, Any]:
    """``{frontier, frontier_probability, frontier_statements}`` for the report."""
    return run_one(frontier_steps(agents), n_resamples, seed, cache)


def frontier_steps(agents: Sequence[AgentTrials]) -> Step[dict[str, Any]]:
    """:func:`frontier_block` as a step of :func:`monitor.stats.resample.run_batched`."""
    points = [Point(a.name, float(a.cost_usd.sum()) / a.n_trials, float((a.successes / a.trials).mean()))
              for a in agents]
    frontier = pareto_frontier(points)
    statements = [{"from": a.name, "to": b.name,
                   "iso_cost": iso_cost_statement(a, b, cost_unit="trial"),
                   "iso_success": iso_success_statement(a, b, cost_unit="trial")}
                  for a, b in pairwise(frontier)]
    probability = yield from frontier_probability_steps(agents)
    return {"frontier": [p.name for p in frontier], "frontier_probability": probability,
            "frontier_statements": statements}


def frontier_probability_steps(agents: Sequence[AgentTrials]) -> Step[dict[str, float]]:
    """Per agent, the share of task resamples (over the union of tasks) that put it on the frontier."""
    union: dict[str, int] = {}
    for agent in agents:
        for task in agent.task_ids:
            union.setdefault(task, len(union))
    columns = np.zeros((len(union), 4 * len(agents)))
    for j, agent in enumerate(agents):
        rows = np.array([union[t] for t in agent.task_ids], dtype=int)
        columns[rows, 4 * j] = agent.successes / agent.trials
        columns[rows, 4 * j + 1] = 1.0
        columns[rows, 4 * j + 2] = agent.cost_usd
        columns[rows, 4 * j + 3] = agent.trials
    sums = yield columns
    success = _safe_div(sums[:, 0::4], sums[:, 1::4])
    cost = _safe_div(sums[:, 2::4], sums[:, 3::4])
    on = frontier_mask(cost, success)
    return {agent.name: float(on[:, j].mean()) for j, agent in enumerate(agents)}
