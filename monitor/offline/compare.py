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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.pricing import PriceMap
from monitor.schema import Trace
from monitor.stats.intervals import wilson_interval
from monitor.stats.paired import mcnemar
from monitor.stats.pareto import Point, iso_cost_statement, iso_success_statement, pareto_verdict
from monitor.stats.passk import mean_pass_at_k, mean_pass_hat_k
from monitor.stats.resample import ResampleCache, percentile_summary, resample_sums

FloatArray = npt.NDArray[np.float64]


@dataclass
class AgentTrials:
    """One agent's trials grouped by task, in first-seen task order."""

    name: str
    task_ids: list[str]
    trials: np.ndarray          # per task
    successes: np.ndarray       # per task
    cost_usd: np.ndarray        # per task, summed over trials
    harmful: np.ndarray         # per task
    task_tags: list[Mapping[str, str]]
    trial_latency_seconds: np.ndarray
    trial_steps_solved: np.ndarray
    trial_tokens_solved: np.ndarray
    index: dict[str, int] = field(default_factory=dict)

    @property
    def n_trials(self) -> int:
        return int(self.trials.sum())


def group_trials(name: str, traces: Sequence[Trace], prices: PriceMap) -> AgentTrials:
    """Group traces by ``task_id`` (a trace without one is a task of its own)."""
    index: dict[str, int] = {}
    trials: list[int] = []
    successes: list[int] = []
    cost: list[float] = []
    harmful: list[int] = []
    tags: list[Mapping[str, str]] = []
    latency: list[float] = []
    steps_solved: list[float] = []
    tokens_solved: list[float] = []
    for trace in traces:
        task = trace.task_id if trace.task_id is not None else trace.trace_id
        i = index.get(task)
        if i is None:
            i = index[task] = len(trials)
            trials.append(0)
            successes.append(0)
            cost.append(0.0)
            harmful.append(0)
            tags.append(_slice_values(trace))
        trials[i] += 1
        successes[i] += trace.success
        harmful[i] += trace.harmful_action
        cost[i] += prices.cost_usd(trace.model_id, trace.ts, trace.tokens_in, trace.tokens_cached_in,
                                   trace.tokens_out, trace.fees_usd)
        if trace.latency_seconds is not None:
            latency.append(trace.latency_seconds)
        if trace.success:
            steps_solved.append(trace.steps)
            tokens_solved.append(trace.tokens_in + trace.tokens_out)
    return AgentTrials(name, list(index), np.array(trials), np.array(successes), np.array(cost),
                       np.array(harmful), tags, np.array(latency), np.array(steps_solved),
                       np.array(tokens_solved), index)


def _slice_values(trace: Trace) -> dict[str, str]:
    values = dict(trace.tags)
    for name in ("task_type", "tenant", "locale"):
        value = getattr(trace, name)
        if value is not None:
            values[name] = value
    return values


def _nan_to_none(value: float) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _mean_or_none(values: np.ndarray) -> float | None:
    """The mean, or None when there are no values or the mean is nan."""
    return _nan_to_none(float(values.mean())) if values.size else None


def _quantiles(values: np.ndarray) -> dict[str, float | None]:
    if values.size == 0:
        return {"p50": None, "p95": None, "p99": None}
    p50, p95, p99 = np.percentile(values, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def _ci(draws: np.ndarray, confidence: float) -> list[float]:
    tail = (1 - confidence) / 2
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return [math.nan, math.nan]
    return [float(x) for x in np.quantile(finite, [tail, 1 - tail])]


def _safe_div(a: FloatArray, b: FloatArray) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def summarize_agent(agent: AgentTrials, ks: Sequence[int], confidence: float, n_resamples: int,
                    seed: int | None, cache: ResampleCache | None = None) -> dict[str, Any]:
    """The per-agent block of the report (see the module docstring)."""
    n_tasks = len(agent.task_ids)
    rates = agent.successes / agent.trials
    draws = resample_sums(np.column_stack([rates, agent.cost_usd, agent.successes]), n_resamples, seed,
                          cache=cache)
    any_pass = int((agent.successes > 0).sum())
    any_low, any_high = wilson_interval(any_pass, n_tasks, confidence)
    per_task = list(zip(agent.trials.tolist(), agent.successes.tolist()))
    pass_at, pass_hat = {}, {}
    for k in ks:
        feasible = all(n >= k for n, _ in per_task)
        pass_at[str(k)] = float(mean_pass_at_k(per_task, k)) if feasible else None
        pass_hat[str(k)] = float(mean_pass_hat_k(per_task, k)) if feasible else None
    total_cost = float(agent.cost_usd.sum())
    total_successes = int(agent.successes.sum())
    cost_per_solved = total_cost / total_successes if total_successes else math.inf
    return {
        "n_tasks": n_tasks,
        "n_trials": agent.n_trials,
        "success": {"rate": float(rates.mean()), "ci": _ci(draws[:, 0] / n_tasks, confidence),
                    "unit": "task (macro)", "method": "bootstrap over tasks"},
        "any_pass": {"rate": any_pass / n_tasks, "ci": [any_low, any_high], "method": "wilson"},
        "pass_at_k": pass_at,
        "pass_hat_k": pass_hat,
        "cost_usd": total_cost,
        "cost_per_trial_usd": total_cost / agent.n_trials,
        "cost_per_solved_usd": cost_per_solved,
        "cost_per_solved_ci": _ci(_safe_div(draws[:, 1], draws[:, 2]), confidence),
        "latency_s": _quantiles(agent.trial_latency_seconds),
        "steps_solved_mean": _mean_or_none(agent.trial_steps_solved),
        "tokens_solved_mean": _mean_or_none(agent.trial_tokens_solved),
        "harmful_action_rate": float(agent.harmful.sum() / agent.n_trials),
    }


def paired_block(base: AgentTrials, cand: AgentTrials, confidence: float, n_resamples: int,
                 seed: int | None, cache: ResampleCache | None = None) -> dict[str, Any]:
    """McNemar and the paired bootstraps over the tasks both agents ran."""
    common = [t for t in base.task_ids if t in cand.index]
    bi = np.array([base.index[t] for t in common], dtype=int)
    ci = np.array([cand.index[t] for t in common], dtype=int)
    out: dict[str, Any] = {"n_common_tasks": len(common),
                           "only_baseline_tasks": len(base.task_ids) - len(common),
                           "only_candidate_tasks": len(cand.task_ids) - len(common)}
    if not common:
        out["mcnemar"] = None
        out["bootstrap"] = None
        return out
    rate_b = base.successes[bi] / base.trials[bi]
    rate_c = cand.successes[ci] / cand.trials[ci]
    solved_b, solved_c = rate_b >= 0.5, rate_c >= 0.5
    result = mcnemar(int((solved_b & ~solved_c).sum()), int((~solved_b & solved_c).sum()), len(common))
    out["mcnemar"] = {"b": result.b, "c": result.c, "n": result.n, "n_discordant": result.n_discordant,
                      "p_exact": result.p_exact, "chi2": result.chi2, "p_chi2": result.p_chi2,
                      "net_flip": result.net_flip, "solved_threshold": 0.5}
    columns = np.column_stack([
        rate_b, rate_c,
        base.cost_usd[bi], base.trials[bi], cand.cost_usd[ci], cand.trials[ci],
        base.successes[bi], cand.successes[ci],
        base.harmful[bi] / base.trials[bi], cand.harmful[ci] / cand.trials[ci],
    ])
    sums = resample_sums(columns, n_resamples, seed, cache=cache)
    point = columns.sum(axis=0)
    n = len(common)

    def success_diff(s: FloatArray) -> FloatArray:
        return (s[..., 1] - s[..., 0]) / n

    def cost_diff(s: FloatArray) -> FloatArray:
        return _safe_div(s[..., 4], s[..., 5]) - _safe_div(s[..., 2], s[..., 3])

    def cost_per_solved_ratio(s: FloatArray) -> FloatArray:
        return _safe_div(_safe_div(s[..., 4], s[..., 7]), _safe_div(s[..., 2], s[..., 6]))

    def harmful_diff(s: FloatArray) -> FloatArray:
        return (s[..., 9] - s[..., 8]) / n

    out["bootstrap"] = {
        "unit": "task", "n_resamples": n_resamples, "seed": seed, "confidence": confidence,
        "success_diff": percentile_summary(float(success_diff(point)), success_diff(sums), confidence),
        "cost_diff": percentile_summary(float(cost_diff(point)), cost_diff(sums), confidence),
        "harmful_diff": percentile_summary(float(harmful_diff(point)), harmful_diff(sums), confidence),
    }
    ratio_point = float(cost_per_solved_ratio(point))
    ratio_draws = cost_per_solved_ratio(sums)
    out["bootstrap"]["cost_per_solved_ratio"] = {"point": ratio_point, "ci": _ci(ratio_draws, confidence)}
    return out


def slice_table(agents: Sequence[AgentTrials], slice_by: Sequence[str]) -> dict[str, Any]:
    """``{tag: {value: {agent: {rate, n_tasks}}}}`` — macro success within each slice."""
    table: dict[str, Any] = {}
    for tag in slice_by:
        per_value: dict[str, dict[str, Any]] = {}
        for agent in agents:
            groups: dict[str, list[int]] = {}
            for i, tags in enumerate(agent.task_tags):
                groups.setdefault(tags.get(tag, "(none)"), []).append(i)
            for value, idx in groups.items():
                rates = agent.successes[idx] / agent.trials[idx]
                per_value.setdefault(value, {})[agent.name] = {"rate": float(rates.mean()),
                                                               "n_tasks": len(idx)}
        table[tag] = dict(sorted(per_value.items()))
    return table


def compare(baseline: AgentTrials, candidate: AgentTrials, *, ks: Sequence[int] = (1, 2, 4),
            slice_by: Sequence[str] = (), confidence: float = 0.95, n_resamples: int = 10_000,
            seed: int | None = 0) -> dict[str, Any]:
    """The whole comparison report as a JSON-able dict."""
    if baseline.name == candidate.name:
        raise ValueError(f"baseline and candidate are both named {baseline.name!r}; "
                         "name them apart (records' agent field or file names)")
    cache: ResampleCache = {}  # one bootstrap draw per distinct number of tasks
    agents = {a.name: summarize_agent(a, ks, confidence, n_resamples, seed, cache) for a in (baseline, candidate)}
    paired = paired_block(baseline, candidate, confidence, n_resamples, seed, cache)
    a, b = agents[baseline.name], agents[candidate.name]
    point_a = Point(baseline.name, a["cost_per_solved_usd"], a["success"]["rate"])
    point_b = Point(candidate.name, b["cost_per_solved_usd"], b["success"]["rate"])
    return {
        "baseline": baseline.name,
        "candidate": candidate.name,
        "agents": agents,
        "n_common_tasks": paired["n_common_tasks"],
        "only_baseline_tasks": paired["only_baseline_tasks"],
        "only_candidate_tasks": paired["only_candidate_tasks"],
        "mcnemar": paired["mcnemar"],
        "bootstrap": paired["bootstrap"],
        "pareto": pareto_verdict(point_a, point_b),
        "iso_cost": iso_cost_statement(point_a, point_b),
        "iso_success": iso_success_statement(point_a, point_b),
        "slices": slice_table((baseline, candidate), slice_by),
    }
