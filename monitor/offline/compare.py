"""The offline release comparison behind ``fleetmon compare`` (pure: traces in, dict out).

Unit of analysis: the *task*. Trials repeating a task are summarised per
task first; intervals come from a bootstrap over tasks that resamples the
same task indices for every statistic (paired across the two agents, on the
tasks both ran). Definitions:

* success rate — macro: the mean over tasks of each task's success fraction;
* any-pass — share of tasks with at least one success, Wilson interval;
* pass@k / pass^k — unbiased per-task estimators averaged over tasks (null
  when some task has fewer than k trials);
* cost — priced per trace at its own time (newest entry when a trace has no
  time); cost per trial = total / trials; cost per solved = total / successes;
* latency quantiles — linear interpolation over trial values;
* McNemar — on per-task outcomes, a task counting as solved when its success
  fraction is >= 0.5, over the tasks both agents ran;
* bootstrap differences are candidate − baseline.

Many agents (issue 14): every agent gets the full summary
(:mod:`monitor.offline.summary`); every other agent is compared with the
baseline (:mod:`monitor.offline.paired`) and the McNemar and success p-values
are adjusted across those comparisons (``adjust``: Benjamini–Hochberg by
default, Holm, or none); the cost–success frontier comes from
:mod:`monitor.offline.frontier` and the per-slice tests from
:mod:`monitor.offline.slicing`. With exactly two agents the report also
carries the two-agent keys of the original report, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.identity import identity_changes
from monitor.offline.frontier import frontier_steps
from monitor.offline.paired import paired_block, paired_steps
from monitor.offline.slicing import (
    assemble_slice_comparisons,
    assemble_slice_table,
    candidate_slice_steps,
    slice_table,
    slice_table_steps,
)
from monitor.offline.summary import summarize_agent, summary_steps
from monitor.offline.trials import AgentTrials, group_trials
from monitor.stats.multiple import ADJUST_METHODS, adjust_p_values
from monitor.stats.pareto import Point, iso_cost_statement, iso_success_statement, pareto_verdict
from monitor.stats.power import minimum_detectable_effect
from monitor.stats.resample import ResampleCache, Step, run_batched

__all__ = ["AgentTrials", "compare", "compare_many", "group_trials", "paired_block", "slice_table",
           "summarize_agent"]


def compare(baseline: AgentTrials, candidate: AgentTrials, *, ks: Sequence[int] = (1, 2, 4),
            slice_by: Sequence[str] = (), confidence: float = 0.95, n_resamples: int = 10_000,
            seed: int | None = 0, adjust: str = "bh", success_threshold: float = 1.0) -> dict[str, Any]:
    """The two-agent report (the original form) as a JSON-able dict; see :func:`compare_many`."""
    return compare_many([baseline, candidate], ks=ks, slice_by=slice_by, confidence=confidence,
                        n_resamples=n_resamples, seed=seed, adjust=adjust, success_threshold=success_threshold)


def compare_many(agents: Sequence[AgentTrials], *, ks: Sequence[int] = (1, 2, 4), slice_by: Sequence[str] = (),
                 confidence: float = 0.95, n_resamples: int = 10_000, seed: int | None = 0, adjust: str = "bh",
                 success_threshold: float = 1.0) -> dict[str, Any]:
    """The whole comparison report; ``agents[0]`` is the baseline.

    Raises ValueError for fewer than two agents, two agents of one name or an
    unknown ``adjust``.
    """
    if adjust not in ADJUST_METHODS:
        raise ValueError(f"adjust must be one of {', '.join(ADJUST_METHODS)}, got {adjust!r}")
    if len(agents) < 2:
        raise ValueError(f"compare needs at least two agents, got {len(agents)}"
                         + (f" ({agents[0].name})" if agents else ""))
    names = [a.name for a in agents]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        if len(agents) == 2:
            raise ValueError(f"baseline and candidate are both named {twice[0]!r}; "
                             "name them apart (records' agent field or file names)")
        raise ValueError(f"agents named more than once: {', '.join(map(repr, twice))}; name them apart")
    baseline, candidates = agents[0], list(agents[1:])
    cache: ResampleCache = {}  # one bootstrap draw per distinct number of tasks
    steps: list[Step[Any]] = [summary_steps(a, ks, confidence, success_threshold) for a in agents]
    steps += [paired_steps(baseline, c, confidence, n_resamples, seed) for c in candidates]
    if slice_by:
        steps += slice_table_steps(agents, slice_by, confidence)
        steps += [candidate_slice_steps(baseline, c, slice_by, confidence, adjust) for c in candidates]
    steps.append(frontier_steps(agents))
    results = iter(run_batched(steps, n_resamples, seed, cache))  # every statistic, one pass per task set
    summaries = {a.name: next(results) for a in agents}
    comparisons = {c.name: next(results) for c in candidates}
    slices: dict[str, Any] = {}
    per_slice: dict[str, Any] = {}
    if slice_by:
        slices = assemble_slice_table(agents, slice_by, [next(results) for _ in agents])
        per_slice = assemble_slice_comparisons(candidates, slice_by, [next(results) for _ in candidates])
    frontier = next(results)
    for family in ("mcnemar", "success"):
        adjusted = adjust_p_values([_raw_p(block, family) for block in comparisons.values()], adjust)
        for block, p in zip(comparisons.values(), adjusted):
            block.setdefault("p_adjusted", {})[family] = p
    for c in candidates:
        block = comparisons[c.name]
        block["changed"] = identity_changes(baseline.identity, c.identity)
        block["minimum_detectable_effect"] = detectable_effect(baseline, c, block["mcnemar"])
    report: dict[str, Any] = {"baseline": baseline.name}
    if len(agents) == 2:
        report.update(_two_agent_keys(baseline, candidates[0], summaries, comparisons[candidates[0].name]))
        block = comparisons[candidates[0].name]
        report.update({"baseline_identity": baseline.identity, "candidate_identity": candidates[0].identity,
                       "changed": block["changed"], "minimum_detectable_effect": block["minimum_detectable_effect"]})
    else:
        report["agents"] = summaries
    report.update({
        "slices": slices,
        "agent_order": names,
        "adjust": adjust,
        "confidence": confidence,
        "success_threshold": success_threshold,
        "comparisons": comparisons,
        **frontier,
        "slice_comparisons": per_slice,
        "task_outcomes": task_outcomes(agents),
        "identities": {a.name: {"current": a.identity, "tuples": a.identity_tuples} for a in agents},
    })
    return report


def detectable_effect(baseline: AgentTrials, candidate: AgentTrials, mcnemar: dict[str, Any] | None,
                      power: float = 0.8, alpha: float = 0.05) -> dict[str, Any] | None:
    """The smallest success drop (points) the common tasks could detect with the exact McNemar test.

    ``monitor.stats.power.minimum_detectable_effect`` at the observed discordance; None without
    common tasks or when no drop reaches ``power``."""
    n = int((mcnemar or {}).get("n", 0))
    if n == 0:
        return None
    common = [baseline.index[t] for t in candidate.task_ids if t in baseline.index]
    rate = sum(1 for i in common if baseline.successes[i] >= 0.5 * baseline.trials[i]) / len(common)
    discordance = int(mcnemar["n_discordant"]) / n if mcnemar and mcnemar.get("n_discordant") else None
    try:
        effect = minimum_detectable_effect(n, rate, discordance=discordance, alpha=alpha, power=power)
    except ValueError:
        effect = None
    return {"effect": effect, "power": power, "alpha": alpha, "discordance": discordance, "n_tasks": n,
            "baseline_rate": rate, "test": "exact two-sided McNemar on the common tasks"}


def task_outcomes(agents: Sequence[AgentTrials]) -> dict[str, Any]:
    """The task x agent grid: each agent's success fraction per task (None: not run) and the flips.

    ``task_ids`` is the union of tasks in first-seen order; ``flipped[candidate]`` lists the common
    tasks whose solved status (success fraction >= 0.5, as McNemar counts it) differs from the
    baseline's.
    """
    union = list(dict.fromkeys(t for a in agents for t in a.task_ids))
    success: dict[str, list[float | None]] = {}
    for agent in agents:
        rates = (agent.successes / agent.trials).tolist()
        success[agent.name] = [rates[agent.index[t]] if t in agent.index else None for t in union]
    base = success[agents[0].name]
    flipped = {a.name: [t for t, b, c in zip(union, base, success[a.name])
                        if b is not None and c is not None and (b >= 0.5) != (c >= 0.5)] for a in agents[1:]}
    return {"task_ids": union, "success": success, "flipped": flipped}


def _raw_p(block: dict[str, Any], family: str) -> float | None:
    """The unadjusted p of a comparison: McNemar's exact p, or the paired success bootstrap's p."""
    if family == "mcnemar":
        return (block["mcnemar"] or {}).get("p_exact")
    p: float | None = ((block["bootstrap"] or {}).get("success_diff") or {}).get("p")
    return p


def _two_agent_keys(baseline: AgentTrials, candidate: AgentTrials, summaries: dict[str, Any],
                    paired: dict[str, Any]) -> dict[str, Any]:
    """The original two-agent report's keys, in their original order and with their original values."""
    a, b = summaries[baseline.name], summaries[candidate.name]
    point_a = Point(baseline.name, a["cost_per_solved_usd"], a["success"]["rate"])
    point_b = Point(candidate.name, b["cost_per_solved_usd"], b["success"]["rate"])
    return {
        "candidate": candidate.name,
        "agents": summaries,
        "n_common_tasks": paired["n_common_tasks"],
        "only_baseline_tasks": paired["only_baseline_tasks"],
        "only_candidate_tasks": paired["only_candidate_tasks"],
        "mcnemar": paired["mcnemar"],
        "bootstrap": paired["bootstrap"],
        "pareto": pareto_verdict(point_a, point_b),
        "iso_cost": iso_cost_statement(point_a, point_b),
        "iso_success": iso_success_statement(point_a, point_b),
    }
