"""Anytime-valid betting tests on bounded real increments kept as a histogram (cost, latency).

Each pair gives an increment Y in [-1, 1]; the caller scales and caps it, e.g.
Y = (C_cand - (1 + f) C_base) / scale clipped to [-1, 1]. The caller keeps the
cumulative count of Y in each of B equal-width buckets over [-1, 1]
(``HISTOGRAM_EDGES`` for the default B = 256; bucket i holds
edges[i] <= Y < edges[i + 1], the last bucket also holds Y = 1, see
``bucket_index``). B is read from the length of the counts.

Guarantees
----------
* Conservative rounding: for H0: E[Y_t | past] <= shift every observation is
  rounded DOWN to its bucket's lower edge, so each bet's factor
  1 + lambda (edge - shift) is <= its factor at the true Y (lambda >= 0). The
  histogram wealth is <= the exact per-pair wealth of ``monitor.stats.betting``
  and is itself a nonnegative supermartingale under H0: by Ville's
  inequality P(e_t >= 1/alpha for some t) <= alpha, any looks, any stopping,
  any distribution on [-1, 1] (skewed, heavy-tailed up to the cap,
  non-exchangeable arms). The reverse test (H0: E[Y_t | past] >= shift) rounds
  UP to the upper edge. Rounding moves each Y by less than one bucket width
  (2 / B), which bounds what the tests and bounds lose to it.
* ``shift`` is the null's bound on E[Y]; it puts a floor inside the null when
  Y is linear in the quantity floored (Y = D / scale, H0: E[D] <= floor is
  shift = floor / scale; a floor already in Y, as above, is shift = 0).
* Bounds are the exact duals of the tests, as in ``monitor.stats.betting``:
  ``histogram_e_value(counts, m) >= 1/alpha`` iff ``histogram_lower_bound(counts, alpha) > m``.
  They bracket the sample mean of the raw Y (rounding only widens them).
* Empty input (all counts 0): e-value 1.0; bounds -1.0 and 1.0.
"""

from __future__ import annotations

import bisect
import functools
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.stats.betting import (
    BET_FRACTIONS,
    FloatArray,
    _e_above,
    _e_below,
    _lower_bound,
    _require_fractions,
    _require_level,
    _upper_bound,
)
from monitor.stats.intervals import _require_int, _require_probability

__all__ = [
    "HISTOGRAM_BUCKETS",
    "HISTOGRAM_EDGES",
    "HistogramCounts",
    "bucket_index",
    "histogram_e_value",
    "histogram_e_value_below",
    "histogram_edges",
    "histogram_lower_bound",
    "histogram_upper_bound",
]

HISTOGRAM_BUCKETS = 256

# Bucket counts: a sequence or an integer array (e.g. from np.bincount); validated when used.
HistogramCounts = Sequence[int] | NDArray[Any]


@functools.lru_cache(maxsize=16)
def histogram_edges(buckets: int = HISTOGRAM_BUCKETS) -> tuple[float, ...]:
    """The buckets + 1 edges of equal-width buckets over [-1, 1], from -1.0 to 1.0.

    Exact in binary floating point when buckets is a power of two.
    Raises ValueError unless buckets is an integer >= 1.
    """
    buckets = _require_int("buckets", buckets, minimum=1)
    return (*(-1.0 + 2.0 * k / buckets for k in range(buckets)), 1.0)


HISTOGRAM_EDGES: tuple[float, ...] = histogram_edges(HISTOGRAM_BUCKETS)


def bucket_index(y: float, buckets: int = HISTOGRAM_BUCKETS) -> int:
    """The bucket i with edges[i] <= y < edges[i + 1] (i = buckets - 1 for y = 1.0).

    Guarantees edges[i] <= y <= edges[i + 1] exactly, which the conservative
    rounding relies on. Raises ValueError unless y is a number in [-1, 1]
    (scale and cap before bucketing) and buckets an integer >= 1.
    """
    if isinstance(y, bool) or not isinstance(y, numbers.Real) or not -1.0 <= float(y) <= 1.0:
        raise ValueError(f"y must be a number in [-1, 1] (scaled and capped), got {y!r}")
    edges = histogram_edges(buckets)
    return min(bisect.bisect_right(edges, float(y)) - 1, len(edges) - 2)


def _require_histogram(counts: HistogramCounts) -> FloatArray:
    """Bucket counts as floats: a non-empty 1-D sequence of integers >= 0."""
    try:
        array = np.asarray(counts)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"counts must be a 1-D sequence of integers >= 0: {exc}") from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D sequence of bucket counts, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        for index, value in enumerate(array.tolist()):
            _require_int("counts", value, context=f"bucket {index}")
    negative = array < 0
    if negative.any():
        index = int(np.argmax(negative))
        raise ValueError(f"counts must be integers >= 0, got {array[index]} at bucket {index}")
    return array.astype(np.float64)


@functools.lru_cache(maxsize=16)
def _lower_edges(buckets: int) -> FloatArray:
    edges = np.array(histogram_edges(buckets)[:-1], dtype=np.float64)
    edges.setflags(write=False)
    return edges


@functools.lru_cache(maxsize=16)
def _upper_edges(buckets: int) -> FloatArray:
    edges = np.array(histogram_edges(buckets)[1:], dtype=np.float64)
    edges.setflags(write=False)
    return edges


def histogram_e_value(
    counts: HistogramCounts, shift: float = 0.0, bet_fractions: Sequence[float] = BET_FRACTIONS
) -> float:
    """e-value for H0: E[Y | past] <= shift, from bucket counts, each Y rounded down to its lower edge.

    Anytime-valid for any distribution on [-1, 1] (module notes); rejecting at
    e >= 1/alpha is equivalent to ``histogram_lower_bound(counts, alpha) > shift``.
    Returns 1.0 when every count is 0.
    Raises ValueError for counts that are not integers >= 0 or shift outside (-1, 1).
    """
    array = _require_histogram(counts)
    shift = _require_level("shift", shift, -1.0, 1.0)
    return _e_above(_lower_edges(array.size), array, shift, -1.0, _require_fractions(bet_fractions))


def histogram_e_value_below(
    counts: HistogramCounts, shift: float = 0.0, bet_fractions: Sequence[float] = BET_FRACTIONS
) -> float:
    """e-value for H0: E[Y | past] >= shift, each Y rounded up to its bucket's upper edge.

    Evidence the mean is now under shift (recovery). Rejecting at e >= 1/alpha
    is equivalent to ``histogram_upper_bound(counts, alpha) < shift``.
    Returns 1.0 when every count is 0. Raises ValueError as ``histogram_e_value``.
    """
    array = _require_histogram(counts)
    shift = _require_level("shift", shift, -1.0, 1.0)
    return _e_below(_upper_edges(array.size), array, shift, 1.0, _require_fractions(bet_fractions))


def histogram_lower_bound(
    counts: HistogramCounts, alpha: float, bet_fractions: Sequence[float] = BET_FRACTIONS
) -> float:
    """One-sided anytime-valid lower confidence sequence for E[Y]: the dual of ``histogram_e_value``.

    In [-1, 1], at most the mean of the lower edges; -1.0 when every count is 0.
    Raises ValueError on invalid counts or alpha outside (0, 1).
    """
    array = _require_histogram(counts)
    alpha = _require_probability("alpha", alpha)
    return _lower_bound(_lower_edges(array.size), array, -1.0, 1.0, alpha, _require_fractions(bet_fractions))


def histogram_upper_bound(
    counts: HistogramCounts, alpha: float, bet_fractions: Sequence[float] = BET_FRACTIONS
) -> float:
    """One-sided anytime-valid upper confidence sequence for E[Y]: the dual of ``histogram_e_value_below``.

    In [-1, 1], at least the mean of the upper edges; 1.0 when every count is 0.
    Raises ValueError on invalid counts or alpha outside (0, 1).
    """
    array = _require_histogram(counts)
    alpha = _require_probability("alpha", alpha)
    return _upper_bound(_upper_edges(array.size), array, -1.0, 1.0, alpha, _require_fractions(bet_fractions))
