"""Per-slice statistics of a compare report (pure).

A slice is the set of tasks whose tag (or ``task_type`` / ``tenant`` /
``locale`` field) has one value, taken from a task's first trial; tasks
without the tag form the slice ``(none)``. Within a slice:

* ``slices.<tag>.<value>.<agent>`` — macro success ``rate`` over the slice's
  tasks, ``n_tasks``, and ``ci``: percentile bootstrap over the agent's tasks
  (the report's shared draw; the slice mean of a resample is the mean over
  the drawn tasks that fall in the slice, so its size varies as it would in
  a new task set; a resample without any of its tasks is dropped);
* ``slice_comparisons.<tag>.<candidate>.<value>`` — the paired success
  difference (candidate − baseline) over the slice's common tasks, with CI
  and the percentile-inversion p (two-sided); ``p_adjusted`` across the
  values of that tag (one family per tag and candidate, ``--adjust``);
  ``opposite_sign`` flags a slice whose point difference has the sign
  opposite to the overall paired difference (over all common tasks) (the Simpson's-paradox check: a drop in
  one slice hidden by a rise overall, or the reverse). Slice tags come from
  the baseline's trials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from monitor.offline.paired import common_tasks
from monitor.offline.summary import _ci, _safe_div
from monitor.offline.trials import AgentTrials
from monitor.stats.multiple import adjust_p_values
from monitor.stats.resample import ResampleCache, Step, percentile_summary, run_batched

NONE_VALUE = "(none)"


def _groups(task_tags: Sequence[Mapping[str, str]], rows: Sequence[int], tag: str) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        groups.setdefault(task_tags[row].get(tag, NONE_VALUE), []).append(position)
    return groups


def _group_columns(per_task: np.ndarray, groups: Mapping[str, list[int]]) -> np.ndarray:
    """Per group two columns: the value on the group's tasks (else 0) and the group's indicator."""
    columns = np.zeros((per_task.size, 2 * len(groups)))
    for j, idx in enumerate(groups.values()):
        columns[idx, 2 * j] = per_task[idx]
        columns[idx, 2 * j + 1] = 1.0
    return columns


def _group_draws(groups: Mapping[str, list[int]], sums: np.ndarray) -> dict[str, np.ndarray]:
    """Resampled group means (nan where a resample drew none of the group's tasks)."""
    return {name: _safe_div(sums[:, 2 * j], sums[:, 2 * j + 1]) for j, name in enumerate(groups)}


def _agent_slice_steps(agent: AgentTrials, slice_by: Sequence[str],
                       confidence: float) -> Step[dict[str, dict[str, dict[str, Any]]]]:
    """``{tag: {value: cell}}`` for one agent; one draw for all tags."""
    rates = agent.successes / agent.trials
    grouped = [_groups(agent.task_tags, range(len(agent.task_ids)), tag) for tag in slice_by]
    widths = [2 * len(g) for g in grouped]
    sums = yield np.hstack([_group_columns(rates, g) for g in grouped])
    out: dict[str, dict[str, dict[str, Any]]] = {}
    start = 0
    for tag, groups, width in zip(slice_by, grouped, widths):
        draws = _group_draws(groups, sums[:, start:start + width])
        start += width
        out[tag] = {value: {"rate": float(rates[idx].mean()), "n_tasks": len(idx),
                            "ci": _ci(draws[value], confidence)} for value, idx in groups.items()}
    return out


def slice_table_steps(agents: Sequence[AgentTrials], slice_by: Sequence[str],
                      confidence: float = 0.95) -> list[Step[dict[str, Any]]]:
    """One step per agent; :func:`assemble_slice_table` turns their results into the table."""
    return [_agent_slice_steps(agent, slice_by, confidence) for agent in agents]


def assemble_slice_table(agents: Sequence[AgentTrials], slice_by: Sequence[str],
                         per_agent: Sequence[dict[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for tag in slice_by:
        per_value: dict[str, dict[str, Any]] = {}
        for agent, cells in zip(agents, per_agent):
            for value, cell in cells[tag].items():
                per_value.setdefault(value, {})[agent.name] = cell
        table[tag] = dict(sorted(per_value.items()))
    return table


def slice_table(agents: Sequence[AgentTrials], slice_by: Sequence[str], confidence: float = 0.95,
                n_resamples: int = 10_000, seed: int | None = 0,
                cache: ResampleCache | None = None) -> dict[str, Any]:
    """``{tag: {value: {agent: {rate, n_tasks, ci}}}}`` — macro success within each slice."""
    if not slice_by:
        return {}
    results = run_batched(slice_table_steps(agents, slice_by, confidence), n_resamples, seed, cache)
    return assemble_slice_table(agents, slice_by, results)


def candidate_slice_steps(base: AgentTrials, cand: AgentTrials, slice_by: Sequence[str], confidence: float = 0.95,
                          adjust: str = "bh") -> Step[dict[str, Any]]:
    """``{tag: {value: SliceTest}}`` for one candidate (see the module docstring); one draw for all tags."""
    common, bi, ci = common_tasks(base, cand)
    if not common:
        return {tag: {} for tag in slice_by}
        yield  # a generator even when there is nothing to resample
    diff = cand.successes[ci] / cand.trials[ci] - base.successes[bi] / base.trials[bi]
    reference = float(diff.mean())
    grouped = [_groups(base.task_tags, bi.tolist(), tag) for tag in slice_by]
    widths = [2 * len(g) for g in grouped]
    sums = yield np.hstack([_group_columns(diff, g) for g in grouped])
    out: dict[str, Any] = {}
    start = 0
    for tag, groups, width in zip(slice_by, grouped, widths):
        draws = _group_draws(groups, sums[:, start:start + width])
        start += width
        rows: dict[str, Any] = {}
        for value in sorted(groups):
            idx = groups[value]
            point = float(diff[idx].mean())
            rows[value] = {"n_common_tasks": len(idx),
                           "diff": percentile_summary(point, draws[value], confidence),
                           "p_adjusted": None, "opposite_sign": bool(point * reference < 0)}
        adjusted = adjust_p_values([row["diff"]["p"] for row in rows.values()], adjust)
        for row, p in zip(rows.values(), adjusted):
            row["p_adjusted"] = p
        out[tag] = rows
    return out


def slice_comparisons(base: AgentTrials, candidates: Sequence[AgentTrials], slice_by: Sequence[str],
                      confidence: float = 0.95, n_resamples: int = 10_000, seed: int | None = 0,
                      cache: ResampleCache | None = None, adjust: str = "bh") -> dict[str, Any]:
    """``{tag: {candidate: {value: {n_common_tasks, diff, p_adjusted, opposite_sign}}}}``."""
    if not slice_by:
        return {}
    steps = [candidate_slice_steps(base, cand, slice_by, confidence, adjust) for cand in candidates]
    return assemble_slice_comparisons(candidates, slice_by, run_batched(steps, n_resamples, seed, cache))


def assemble_slice_comparisons(candidates: Sequence[AgentTrials], slice_by: Sequence[str],
                               per_candidate: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {tag: {cand.name: rows[tag] for cand, rows in zip(candidates, per_candidate)} for tag in slice_by}
