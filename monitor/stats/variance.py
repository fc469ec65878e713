"""Between-task vs between-trial variance: why pooling trials overstates precision.

Trials repeat tasks, so outcomes are clustered: two trials of one task are
more alike than two trials of different tasks. The one-way random-effects
model ``y_ij = mu + a_i + e_ij`` (task effect ``a_i`` with variance
``between_task``, trial noise ``e_ij`` with variance ``within_task``) is fitted
by the ANOVA (method-of-moments) estimators, which need no iteration and
handle unequal trials per task:

* ``MSB = sum_i n_i (ybar_i - ybar)^2 / (k - 1)``, ``MSW = sum_ij (y_ij - ybar_i)^2 / (N - k)``
  (``ybar`` the trial-weighted grand mean; ``MSB / MSW`` is the one-way ANOVA F,
  the same as ``scipy.stats.f_oneway`` on the per-task groups);
* ``n0 = (N - sum_i n_i^2 / N) / (k - 1)`` (= n when every task has n trials);
* ``between_task = max(0, (MSB - MSW) / n0)`` (truncated at 0: an estimate
  below 0 means no detectable task effect), ``within_task = MSW``;
* ``icc = between_task / (between_task + within_task)`` — the intraclass
  correlation, the share of outcome variance that is the task's;
* ``design_effect = 1 + (m - 1) * icc`` with ``m = N / k`` the mean trials per
  task (Kish): the factor by which clustering inflates the variance of the
  pooled (micro) mean over what N independent trials would give, so the
  effective sample size is ``N / design_effect``.

Needs k >= 2 tasks and N > k trials; otherwise every figure is nan (with one
trial per task the two variances cannot be told apart). When both variances
are 0 (every outcome identical) the icc is nan and the design effect 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["VarianceSplit", "random_effects_split"]


@dataclass(frozen=True)
class VarianceSplit:
    """The ANOVA estimates of the one-way random-effects model (see the module docstring)."""

    n_tasks: int
    n_trials: int
    grand_mean: float
    ms_between: float
    ms_within: float
    between_task: float
    within_task: float
    icc: float
    mean_trials_per_task: float
    design_effect: float

    @property
    def effective_n(self) -> float:
        """``N / design_effect``: how many independent trials the clustered ones are worth."""
        return self.n_trials / self.design_effect if self.design_effect > 0 else math.nan


def random_effects_split(trials: object, sums: object, sums_of_squares: object | None = None) -> VarianceSplit:
    """Fit the one-way random-effects model from per-task summaries.

    ``trials[i]`` = n_i, ``sums[i]`` = sum of task i's outcomes, and
    ``sums_of_squares[i]`` = sum of their squares (omit for 0/1 outcomes, where
    it equals ``sums``). Raises ValueError for unequal lengths, n_i < 1 or
    non-finite values.
    """
    n = np.asarray(trials, dtype=np.float64).ravel()
    s = np.asarray(sums, dtype=np.float64).ravel()
    ss = s if sums_of_squares is None else np.asarray(sums_of_squares, dtype=np.float64).ravel()
    if not n.size == s.size == ss.size:
        raise ValueError(f"trials, sums and sums_of_squares must have equal lengths, got {n.size}, {s.size}, {ss.size}")
    if n.size and (not np.isfinite(n).all() or n.min() < 1):
        raise ValueError(f"trials must be finite counts >= 1 per task, got {n.min()}")
    if not (np.isfinite(s).all() and np.isfinite(ss).all()):
        raise ValueError("sums and sums_of_squares must be finite")
    k = int(n.size)
    total = float(n.sum())
    nan = math.nan
    if k < 2 or total <= k:
        mean = float(s.sum() / total) if total else nan
        return VarianceSplit(k, int(total), mean, nan, nan, nan, nan, nan, total / k if k else nan, nan)
    means = s / n
    grand = float(s.sum() / total)
    ms_between = float(np.sum(n * (means - grand) ** 2) / (k - 1))
    # sum_j (y_ij - ybar_i)^2 = sum y^2 - (sum y)^2 / n, floored at 0 against rounding
    ms_within = float(np.maximum(ss - s * s / n, 0.0).sum() / (total - k))
    n0 = (total - float(np.sum(n * n)) / total) / (k - 1)
    between = max(0.0, (ms_between - ms_within) / n0)
    within = ms_within
    icc = between / (between + within) if between + within > 0 else nan
    mean_trials = total / k
    design_effect = 1.0 + (mean_trials - 1.0) * icc if not math.isnan(icc) else 1.0
    return VarianceSplit(k, int(total), grand, ms_between, ms_within, between, within, icc, mean_trials,
                         design_effect)
