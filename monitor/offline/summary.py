"""The per-agent block of a compare report (pure: one agent's trials in, dict out).

Every interval is a percentile bootstrap over *tasks* (a task's trials stay
together), two-sided at ``confidence``; the draws are the report's shared
count matrices (:mod:`monitor.stats.resample`), so the same resamples serve
every statistic. Definitions beyond the module docstring of
:mod:`monitor.offline.compare`:

* ``success_micro`` — all successes / all trials (each trial weighs the same;
  ``success`` is the macro rate, each task weighs the same);
* ``score`` — macro mean of the graded outcome, beside strict success at the
  threshold; ``gap`` = mean score − strict success, the "almost worked" share;
* ``reliability.consistency`` — mean over tasks of (2p − 1)², p the task's
  success fraction: 1 when every task is always or never solved, 0 when every
  task is a coin flip;
* ``reliability.variance`` — :func:`monitor.stats.variance.random_effects_split`
  on per-trial success; ``pooled_trial_ci`` is the normal interval of the
  micro rate as if the N trials were independent, ``design_adjusted_ci`` the
  same interval widened by sqrt(design effect).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.offline.trials import AgentTrials
from monitor.stats.intervals import wilson_interval
from monitor.stats.passk import mean_pass_at_k, mean_pass_hat_k, pass_at_k_per_task, pass_hat_k_per_task
from monitor.stats.resample import ResampleCache, Step, run_one
from monitor.stats.variance import random_effects_split

FloatArray = npt.NDArray[np.float64]


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
                    seed: int | None, cache: ResampleCache | None = None,
                    success_threshold: float = 1.0) -> dict[str, Any]:
    """The per-agent block of the report (see the module docstring)."""
    return run_one(summary_steps(agent, ks, confidence, success_threshold), n_resamples, seed, cache)


def summary_steps(agent: AgentTrials, ks: Sequence[int], confidence: float,
                  success_threshold: float = 1.0) -> Step[dict[str, Any]]:
    """:func:`summarize_agent` as a step of :func:`monitor.stats.resample.run_batched` (one draw)."""
    n_tasks = len(agent.task_ids)
    rates = agent.successes / agent.trials
    extended_columns, finish_extended = extended_summary(agent, ks, confidence, success_threshold)
    all_draws = yield np.column_stack([rates, agent.cost_usd, agent.successes, extended_columns])
    draws = all_draws[:, :3]
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
        **finish_extended(all_draws[:, 3:]),
    }


def _point_ci(point: float, draws: np.ndarray, confidence: float) -> dict[str, Any]:
    return {"point": _nan_to_none(point), "ci": _ci(draws, confidence)}


def extended_summary(agent: AgentTrials, ks: Sequence[int], confidence: float, success_threshold: float = 1.0
                     ) -> tuple[np.ndarray, Callable[[np.ndarray], dict[str, Any]]]:
    """The keys issue 14 adds to an agent's block (micro success, score, reliability, over-refusal).

    Returns the per-task columns to resample and the function that turns
    their resampled sums into the keys.
    """
    trials = agent.trials.astype(float)
    rates = agent.successes / trials
    score_means = agent.scores / trials
    feasible = [k for k in ks if int(agent.trials.max()) >= k]
    columns = [agent.successes.astype(float), trials, score_means, score_means - rates, (2 * rates - 1) ** 2]
    for k in feasible:
        # over the tasks with at least k trials (zero elsewhere), with their count for the ratio
        has_k = agent.trials >= k
        n_k, c_k = np.where(has_k, agent.trials, k), np.where(has_k, agent.successes, 0)
        columns.append(np.where(has_k, pass_at_k_per_task(n_k, c_k, k), 0.0))
        columns.append(np.where(has_k, pass_hat_k_per_task(n_k, c_k, k), 0.0))
        columns.append(has_k.astype(float))
    values = np.column_stack(columns)
    return values, lambda draws: _extended_keys(agent, ks, feasible, values, draws, confidence, success_threshold)


def _extended_keys(agent: AgentTrials, ks: Sequence[int], feasible: Sequence[int], values: np.ndarray,
                   draws: np.ndarray, confidence: float, success_threshold: float) -> dict[str, Any]:
    n_tasks = len(agent.task_ids)
    trials = agent.trials.astype(float)
    rates = agent.successes / trials
    means = draws / n_tasks
    point = values.mean(axis=0)
    micro = float(agent.successes.sum() / trials.sum())
    pass_at: dict[str, Any] = {str(k): None for k in ks}
    pass_hat: dict[str, Any] = {str(k): None for k in ks}
    sums = values.sum(axis=0)
    for j, k in enumerate(feasible):
        at, hat, has = 5 + 3 * j, 6 + 3 * j, 7 + 3 * j
        count = int(sums[has])
        pass_at[str(k)] = {**_point_ci(float(sums[at] / count), _safe_div(draws[:, at], draws[:, has]), confidence),
                           "n_tasks": count}
        pass_hat[str(k)] = {**_point_ci(float(sums[hat] / count), _safe_div(draws[:, hat], draws[:, has]),
                                        confidence), "n_tasks": count}
    benign = int(agent.benign.sum()) if agent.benign is not None else 0
    over = int(agent.over_refusals.sum()) if agent.over_refusals is not None else 0
    out: dict[str, Any] = {
        "success_micro": {"rate": micro, "ci": _ci(_safe_div(draws[:, 0], draws[:, 1]), confidence),
                          "unit": "trial (micro)", "method": "bootstrap over tasks"},
        "over_refusal_rate": over / benign if benign else None,
        "score": None,
        "reliability": {
            "pass_at_k": pass_at,
            "pass_hat_k": pass_hat,
            "consistency": _point_ci(float(point[4]), means[:, 4], confidence),
            "variance": variance_block(agent, confidence),
        },
    }
    if agent.n_scored:
        out["score"] = {"mean": float(point[2]), "ci": _ci(means[:, 2], confidence), "unit": "task (macro)",
                        "threshold": success_threshold, "n_scored_trials": agent.n_scored,
                        "success_rate": float(rates.mean()),
                        "gap": _point_ci(float(point[3]), means[:, 3], confidence)}
    return out


def variance_block(agent: AgentTrials, confidence: float) -> dict[str, Any]:
    """Between-task vs between-trial split of per-trial success, and what it does to a pooled interval."""
    split = random_effects_split(agent.trials, agent.successes)
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p = split.grand_mean
    n = split.n_trials

    def normal_ci(inflation: float) -> list[float | None]:
        if not n or math.isnan(inflation):
            return [None, None]
        half = z * math.sqrt(max(p * (1 - p), 0.0) * inflation / n)
        return [max(0.0, p - half), min(1.0, p + half)]

    return {
        "method": "one-way random effects (ANOVA estimators), outcome = trial success",
        "between_task": _nan_to_none(split.between_task),
        "within_task": _nan_to_none(split.within_task),
        "icc": _nan_to_none(split.icc),
        "mean_trials_per_task": _nan_to_none(split.mean_trials_per_task),
        "design_effect": _nan_to_none(split.design_effect),
        "effective_n": _nan_to_none(split.effective_n),
        "pooled_trial_ci": normal_ci(1.0),
        "design_adjusted_ci": normal_ci(split.design_effect),
    }


