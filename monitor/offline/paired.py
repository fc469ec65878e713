"""One candidate against the baseline on the tasks both ran (pure).

McNemar on per-task outcomes (a task solved when its success fraction is
>= 0.5) and paired bootstraps over the common tasks, one shared draw of task
indices for every difference (candidate − baseline). Added by issue 14:

* ``score_diff`` — difference of macro mean scores (present when either side
  carries scores);
* ``over_refusal_diff`` — difference of over-refusal rates (refused among
  benign trials, pooled over the resampled tasks' trials; present when both
  sides mark benign trials);
* ``p95_latency_diff`` — difference of pooled-trial p95 latencies (seconds),
  each resample keeping all trials of a drawn task; also the ratio. Its own
  draw of ``min(n_resamples, LATENCY_RESAMPLES)`` resamples (a quantile
  cannot be resampled by the sums trick), seeded like the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.offline.summary import _ci, _safe_div
from monitor.offline.trials import AgentTrials
from monitor.stats.paired import mcnemar
from monitor.stats.resample import ResampleCache, Step, percentile_summary, resampled_quantiles_many, run_one

FloatArray = npt.NDArray[np.float64]

#: Resamples behind the p95 latency difference (each costs a pass over all trials).
LATENCY_RESAMPLES = 1_000


def common_tasks(base: AgentTrials, cand: AgentTrials) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The tasks both ran (baseline order) and their row indices on each side."""
    common = [t for t in base.task_ids if t in cand.index]
    bi = np.array([base.index[t] for t in common], dtype=int)
    ci = np.array([cand.index[t] for t in common], dtype=int)
    return common, bi, ci


def paired_block(base: AgentTrials, cand: AgentTrials, confidence: float, n_resamples: int,
                 seed: int | None, cache: ResampleCache | None = None) -> dict[str, Any]:
    """McNemar and the paired bootstraps over the tasks both agents ran."""
    return run_one(paired_steps(base, cand, confidence, n_resamples, seed), n_resamples, seed, cache)


def paired_steps(base: AgentTrials, cand: AgentTrials, confidence: float, n_resamples: int,
                 seed: int | None) -> Step[dict[str, Any]]:
    """:func:`paired_block` as a step of :func:`monitor.stats.resample.run_batched`."""
    common, bi, ci = common_tasks(base, cand)
    out: dict[str, Any] = {"n_common_tasks": len(common),
                           "only_baseline_tasks": len(base.task_ids) - len(common),
                           "only_candidate_tasks": len(cand.task_ids) - len(common)}
    if not common:
        out["mcnemar"] = None
        out["bootstrap"] = None
        return out
        yield  # a generator even when there is nothing to resample
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
    extra_columns = _extra_columns(base, cand, bi, ci)
    all_sums = yield np.column_stack([columns, extra_columns])
    sums = all_sums[:, :columns.shape[1]]
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
    out["bootstrap"].update(_extra_diffs(base, cand, bi, ci, extra_columns, all_sums[:, columns.shape[1]:],
                                         confidence, n_resamples, seed))
    return out


def _extra_columns(base: AgentTrials, cand: AgentTrials, bi: np.ndarray, ci: np.ndarray) -> np.ndarray:
    zeros = np.zeros(len(bi))
    score_b = base.scores[bi] / base.trials[bi]
    score_c = cand.scores[ci] / cand.trials[ci]
    benign_b = base.benign[bi] if base.benign is not None else zeros
    benign_c = cand.benign[ci] if cand.benign is not None else zeros
    over_b = base.over_refusals[bi] if base.over_refusals is not None else zeros
    over_c = cand.over_refusals[ci] if cand.over_refusals is not None else zeros
    return np.column_stack([score_c - score_b, over_b, benign_b, over_c, benign_c])


def _extra_diffs(base: AgentTrials, cand: AgentTrials, bi: np.ndarray, ci: np.ndarray, columns: np.ndarray,
                 sums: np.ndarray, confidence: float, n_resamples: int, seed: int | None) -> dict[str, Any]:
    n = len(bi)
    out: dict[str, Any] = {}
    point = columns.sum(axis=0)
    if base.n_scored or cand.n_scored:
        out["score_diff"] = percentile_summary(float(point[0] / n), sums[:, 0] / n, confidence)
    if point[2] > 0 and point[4] > 0:
        def over_diff(s: FloatArray) -> FloatArray:
            return _safe_div(s[..., 3], s[..., 4]) - _safe_div(s[..., 1], s[..., 2])
        out["over_refusal_diff"] = percentile_summary(float(over_diff(point)), over_diff(sums), confidence)
    out["p95_latency_diff"] = p95_latency_diff(base, cand, bi, ci, confidence, min(n_resamples, LATENCY_RESAMPLES),
                                               seed)
    return out


def _trials_on(agent: AgentTrials, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latencies of the trials of tasks ``rows`` and their position in ``rows``."""
    where = np.full(len(agent.task_ids), -1, dtype=np.int64)
    where[rows] = np.arange(len(rows))
    unit = where[agent.latency_task]
    keep = unit >= 0
    return agent.trial_latency_seconds[keep], unit[keep]


def p95_latency_diff(base: AgentTrials, cand: AgentTrials, bi: np.ndarray, ci: np.ndarray, confidence: float,
                     n_resamples: int, seed: int | None) -> dict[str, Any] | None:
    """Paired bootstrap over common tasks of p95(candidate trials) − p95(baseline trials), seconds.

    None when either side has no latency on the common tasks.
    """
    lat_b, unit_b = _trials_on(base, bi)
    lat_c, unit_c = _trials_on(cand, ci)
    if lat_b.size == 0 or lat_c.size == 0:
        return None
    n = len(bi)
    draws_b, draws_c = resampled_quantiles_many([(lat_b, unit_b), (lat_c, unit_c)], n, 0.95, n_resamples, seed)
    p95_b, p95_c = float(np.percentile(lat_b, 95)), float(np.percentile(lat_c, 95))
    summary = percentile_summary(p95_c - p95_b, draws_c - draws_b, confidence)
    summary["n_resamples"] = n_resamples
    summary["ratio"] = p95_c / p95_b if p95_b > 0 else None
    summary["ratio_ci"] = _ci(_safe_div(draws_c, draws_b), confidence)
    return summary


