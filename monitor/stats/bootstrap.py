"""Nonparametric bootstrap over tasks (or pairs): the unit of analysis is the row.

Everything here resamples *units* (tasks, or shadow pairs) with replacement,
never individual trials, so repeated trials of one task stay together. For
paired data one index draw is shared by both arms.

Guarantees and assumptions
--------------------------
* Percentile intervals, two-sided, equal-tailed: the (1 - confidence)/2 and
  (1 + confidence)/2 quantiles (linear interpolation) of the resampled
  statistic. Asymptotic: coverage approaches ``confidence`` as the number of
  units grows, assuming units are i.i.d.; with few units (say < 20) the
  interval is too narrow.
* Monte-Carlo error: results depend on ``n_resamples`` and ``seed``; a fixed
  integer seed makes them reproducible (None draws fresh OS entropy; a
  numpy Generator is also accepted and advanced).
* Memory: index matrices are drawn in chunks of at most ~4M entries
  (``_MAX_CHUNK_ENTRIES``), so memory stays bounded for any n_resamples.
* Empty input (zero units) returns nan for the point, the bounds and the p.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.stats.intervals import _require_int, _require_probability

__all__ = ["BootstrapResult", "bootstrap_mean_ci", "bootstrap_ratio_ci", "paired_bootstrap"]

# Entries of one (resamples x units) index chunk: 4M int64 = 32 MB, plus the
# gathered values of the same shape.
_MAX_CHUNK_ENTRIES = 4_000_000

Statistic = str | Callable[..., np.ndarray]


@dataclass(frozen=True)
class BootstrapResult:
    """Point estimate with a percentile interval and a two-sided bootstrap p.

    point/low/high/p_value are nan when there are no units.
    """

    point: float
    low: float
    high: float
    p_value: float
    n_units: int
    n_resamples: int
    confidence: float


def _as_unit_values(name: str, values: object) -> np.ndarray:
    """A 1-D float array of finite per-unit values, or ValueError naming `name`."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of finite numbers: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array (one value per unit), got shape {array.shape}")
    finite = np.isfinite(array)
    if not finite.all():
        index = int(np.argmin(finite))
        raise ValueError(f"{name} must be finite, got {array[index]} at index {index}")
    return array


def _make_rng(seed: object) -> np.random.Generator:
    if seed is None or isinstance(seed, np.random.Generator):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
    return np.random.default_rng(int(seed))


def _index_chunks(
    rng: np.random.Generator, n_units: int, n_resamples: int
) -> Iterator[np.ndarray]:
    """Yield (rows, n_units) index matrices until n_resamples rows were drawn."""
    rows_per_chunk = max(1, _MAX_CHUNK_ENTRIES // n_units)
    remaining = n_resamples
    while remaining > 0:
        rows = min(rows_per_chunk, remaining)
        yield rng.integers(0, n_units, size=(rows, n_units))
        remaining -= rows


def _resolve_statistic(statistic: Statistic) -> Callable[[np.ndarray], np.ndarray]:
    """Map the ``statistic`` argument to f(matrix) -> one value per row."""
    if isinstance(statistic, str):
        if statistic == "mean":
            return lambda x: np.mean(x, axis=-1)
        if statistic == "median":
            return lambda x: np.median(x, axis=-1)
        raise ValueError(f"statistic must be 'mean', 'median' or a callable, got {statistic!r}")
    if not callable(statistic):
        raise ValueError(f"statistic must be 'mean', 'median' or a callable, got {statistic!r}")

    def reduce_rows(x: np.ndarray) -> np.ndarray:
        out = np.asarray(statistic(x, axis=-1), dtype=np.float64)
        if out.shape != x.shape[:-1]:
            raise ValueError(
                "statistic must reduce along `axis` like np.mean(x, axis=-1);"
                f" for input shape {x.shape} it returned shape {out.shape}"
            )
        return out

    return reduce_rows


def _percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """Equal-tailed percentile interval, linear interpolation (numpy's default).

    Unlike np.quantile it is safe with +inf replicates: interpolating towards
    +inf gives +inf, never inf - inf = nan.
    """
    ordered = np.sort(replicates)
    tail = (1.0 - confidence) / 2.0
    bounds = []
    for q in (tail, 1.0 - tail):
        position = q * (ordered.size - 1)
        below = math.floor(position)
        above = min(below + 1, ordered.size - 1)
        weight = position - below
        lo_value, hi_value = float(ordered[below]), float(ordered[above])
        if weight == 0.0 or lo_value == hi_value:
            bounds.append(lo_value)
        elif math.isinf(hi_value):
            bounds.append(hi_value)
        else:
            bounds.append(lo_value + (hi_value - lo_value) * weight)
    return bounds[0], bounds[1]


def _check_settings(n_resamples: object, confidence: object) -> tuple[int, float]:
    return (
        _require_int("n_resamples", n_resamples, minimum=1),
        _require_probability("confidence", confidence),
    )


def paired_bootstrap(
    baseline: npt.ArrayLike,
    candidate: npt.ArrayLike,
    statistic: Statistic = "mean",
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> BootstrapResult:
    """Paired bootstrap of a statistic of the per-unit differences candidate - baseline.

    ``baseline[i]`` and ``candidate[i]`` belong to the same unit (task or
    shadow pair). The statistic is applied to d = candidate - baseline; for
    "mean" that is mean(candidate) - mean(baseline), for "median" the median
    of the paired differences (not the difference of medians). A callable
    must be a numpy-style reduction ``f(x, axis=-1)`` (e.g. np.mean,
    functools.partial(np.quantile, q=0.9)) and is called on 2-D blocks of
    resampled differences, one resample per row.

    Resampling draws unit indices with replacement, shared by both arms. The
    interval is the two-sided percentile interval (asymptotic). The p-value
    is the percentile-inversion p for H0: difference = 0,
        min(1, 2 * min(mean(d* <= 0), mean(d* >= 0))),
    i.e. twice the smaller share of resampled statistics on either side of 0;
    it is two-sided and approximate, can be 0.0 (resolution 1/n_resamples),
    and with identical arms it is 1.0 (every d* is 0).

    Empty arrays: point, low, high and p_value are nan, n_units = 0.
    Raises ValueError for arrays that are not 1-D, of unequal length or not
    finite, for n_resamples < 1, confidence outside (0, 1), or an unknown
    statistic.
    """
    n_resamples, confidence = _check_settings(n_resamples, confidence)
    base = _as_unit_values("baseline", baseline)
    cand = _as_unit_values("candidate", candidate)
    if base.size != cand.size:
        raise ValueError(
            "baseline and candidate must have equal lengths (aligned by unit),"
            f" got {base.size} and {cand.size}"
        )
    reduce_rows = _resolve_statistic(statistic)
    n_units = int(base.size)
    if n_units == 0:
        return BootstrapResult(math.nan, math.nan, math.nan, math.nan, 0, n_resamples, confidence)
    differences = cand - base
    point = float(reduce_rows(differences[None, :])[0])
    rng = _make_rng(seed)
    replicates = np.concatenate(
        [
            reduce_rows(np.take(differences, indices))
            for indices in _index_chunks(rng, n_units, n_resamples)
        ]
    )
    low, high = _percentile_interval(replicates, confidence)
    share_at_or_below = float(np.mean(replicates <= 0.0))
    share_at_or_above = float(np.mean(replicates >= 0.0))
    p_value = min(1.0, 2.0 * min(share_at_or_below, share_at_or_above))
    return BootstrapResult(point, low, high, p_value, n_units, n_resamples, confidence)


def bootstrap_mean_ci(
    values_per_task: npt.ArrayLike,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """Mean over tasks with a two-sided percentile bootstrap interval.

    The task is the unit: for a success rate when trials repeat tasks, pass
    the per-task success fractions (the result is then the macro success
    rate, each task weighing the same). Asymptotic; see the module docstring.

    Returns (point, low, high); (nan, nan, nan) for an empty array.
    Raises ValueError for non-1-D or non-finite input, n_resamples < 1 or
    confidence outside (0, 1).
    """
    n_resamples, confidence = _check_settings(n_resamples, confidence)
    values = _as_unit_values("values_per_task", values_per_task)
    if values.size == 0:
        return math.nan, math.nan, math.nan
    rng = _make_rng(seed)
    replicates = np.concatenate(
        [
            np.mean(np.take(values, indices), axis=-1)
            for indices in _index_chunks(rng, int(values.size), n_resamples)
        ]
    )
    low, high = _percentile_interval(replicates, confidence)
    return float(np.mean(values)), low, high


def bootstrap_ratio_ci(
    numerators_per_task: npt.ArrayLike,
    denominators_per_task: npt.ArrayLike,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int | None = 0,
) -> tuple[float, float, float]:
    """Ratio of sums, sum(num) / sum(den), with a percentile bootstrap over tasks.

    Meant for cost per solved task: numerators are per-task costs (USD),
    denominators per-task success counts. Tasks are resampled whole (both
    sums use the same draw), so the micro ratio is weighted by each task's
    volume. Both arrays must be >= 0 and finite.

    Zero denominator: following "cost per solved = inf when none solved", a
    ratio whose denominator sum is 0 is +inf (whatever the numerator). Such
    resamples stay in the replicate set, so when they are more common than
    the upper tail the high bound is +inf (meaning: with this data the cost
    per solved task is unbounded at this confidence); interpolation towards
    +inf yields +inf, never nan.

    Returns (point, low, high); (nan, nan, nan) when there are no tasks.
    Two-sided, asymptotic (see the module docstring). Raises ValueError for
    unequal lengths, negative or non-finite values, n_resamples < 1 or
    confidence outside (0, 1).
    """
    n_resamples, confidence = _check_settings(n_resamples, confidence)
    numerators = _as_unit_values("numerators_per_task", numerators_per_task)
    denominators = _as_unit_values("denominators_per_task", denominators_per_task)
    if numerators.size != denominators.size:
        raise ValueError(
            "numerators_per_task and denominators_per_task must have equal lengths,"
            f" got {numerators.size} and {denominators.size}"
        )
    for name, array in (("numerators_per_task", numerators), ("denominators_per_task", denominators)):
        if array.size and array.min() < 0.0:
            index = int(np.argmin(array))
            raise ValueError(f"{name} must be >= 0, got {array[index]} at index {index}")
    if numerators.size == 0:
        return math.nan, math.nan, math.nan

    def ratio(num_sums: np.ndarray, den_sums: np.ndarray) -> np.ndarray:
        safe = np.where(den_sums > 0.0, den_sums, 1.0)
        return np.where(den_sums > 0.0, num_sums / safe, math.inf)

    point = float(ratio(np.array([numerators.sum()]), np.array([denominators.sum()]))[0])
    rng = _make_rng(seed)
    replicates = np.concatenate(
        [
            ratio(
                np.sum(np.take(numerators, indices), axis=-1),
                np.sum(np.take(denominators, indices), axis=-1),
            )
            for indices in _index_chunks(rng, int(numerators.size), n_resamples)
        ]
    )
    low, high = _percentile_interval(replicates, confidence)
    return point, low, high
