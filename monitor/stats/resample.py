"""Shared-index bootstrap over units (tasks), as resample count matrices.

One draw of ``n_resamples`` resamples of ``n_units`` units is expressed as a
count matrix ``W`` (``W[r, i]`` = how often unit ``i`` appears in resample
``r``), so that any number of per-unit sums is resampled at once by a matrix
product ``W @ V``. Every statistic of one report then uses the *same*
resamples, which keeps paired comparisons paired and costs one random draw.

Chunks bound memory: each yields at most ``max_cells`` entries of ``W``.
The default (1M cells: 4 MB of int32 draws) keeps every temporary below
glibc's mmap threshold; chunks of 4M cells measured 4-5x slower on the first
calls of a process, from page faults on freshly mapped memory.
With the same seed the resamples are identical to drawing the indices chunk
by chunk with ``numpy.random.default_rng(seed).integers(0, n_units, (rows,
n_units), dtype=int32)``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

ResampleCache = dict[tuple[int, int, int], list[np.ndarray]]
"""Count matrices (float64) by ``(n_units, n_resamples, seed)``, shared across calls by one report."""

#: Largest count matrix a cache keeps (cells; 8 bytes each, so 400 MB). Beyond it every call
#: draws its chunks again (same seed, same resamples): memory stays bounded for any task count.
MAX_CACHED_CELLS = 50_000_000

#: Fewest resamples per drawn chunk (see :func:`resample_counts`).
MIN_ROWS_PER_CHUNK = 256


def resample_sums(values: np.ndarray, n_resamples: int = 10_000, seed: int | None = 0,
                  max_cells: int = 1_000_000, cache: ResampleCache | None = None) -> np.ndarray:
    """Bootstrap sums over units: returns ``(n_resamples, m)`` for ``values`` of shape ``(n_units, m)``.

    Row r holds the column sums of ``values`` over the units of resample r.
    Empty ``values`` (no units) returns zeros. ``cache`` (a dict the caller
    keeps for one report) reuses the count matrices of an earlier call with
    the same (n_units, n_resamples, seed), stored as float64 so no call
    converts them again (up to ``MAX_CACHED_CELLS``; larger draws are redone
    per call, identically), so several statistics over the same units cost
    one draw.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    n_units, m = values.shape
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    out = np.zeros((n_resamples, m))
    if n_units == 0:
        return out
    row = 0
    chunks: Iterable[np.ndarray]
    if cache is not None and seed is not None and n_units * n_resamples <= MAX_CACHED_CELLS:
        key = (n_units, n_resamples, seed)
        if key not in cache:
            cache[key] = list(resample_counts(n_units, n_resamples, seed, max_cells))
        chunks = cache[key]
    else:
        chunks = resample_counts(n_units, n_resamples, seed, max_cells)
    for counts in chunks:
        out[row:row + len(counts)] = counts @ values
        row += len(counts)
    return out


def resample_counts(n_units: int, n_resamples: int, seed: int | None = 0,
                    max_cells: int = 1_000_000) -> Iterator[np.ndarray]:
    """Yield count matrices (float64) of consecutive chunks of resamples.

    A chunk holds ``max_cells // n_units`` resamples, but never fewer than
    ``MIN_ROWS_PER_CHUNK`` (while rows x units stays below 2**31): with many
    units a thin chunk makes every ``counts @ values`` product stream the
    whole values matrix again (measured 10x slower per flop at 20,000 units).
    Task sets up to 1M / MIN_ROWS_PER_CHUNK units draw exactly as before.
    """
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, min(max_cells, 2**31 - 1) // max(n_units, 1))
    rows_per_chunk = max(rows_per_chunk, min(MIN_ROWS_PER_CHUNK, (2**31 - 1) // max(n_units, 1)))
    done = 0
    while done < n_resamples:
        rows = min(rows_per_chunk, n_resamples - done)
        # int32 draws halve memory traffic; rows * n_units < 2**31 by max_cells.
        index = rng.integers(0, n_units, size=(rows, n_units), dtype=np.int32)
        index += (np.arange(rows, dtype=np.int32) * n_units)[:, None]
        counts = np.bincount(index.ravel(), minlength=rows * n_units).reshape(rows, n_units)
        yield counts.astype(np.float64, copy=False)
        done += rows


def percentile_summary(point: float, draws: np.ndarray, confidence: float = 0.95) -> dict[str, object]:
    """Point, percentile CI and the two-sided percentile-inversion p of H0: 0.

    ``p = min(1, 2 min(P*(d <= 0), P*(d >= 0)))`` over the finite draws. With
    no finite draws the CI and p are nan.
    """
    finite = draws[np.isfinite(draws)]
    if finite.size == 0:
        return {"point": point, "ci": [float("nan"), float("nan")], "p": float("nan")}
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    p = min(1.0, 2.0 * min(float(np.mean(finite <= 0)), float(np.mean(finite >= 0))))
    return {"point": point, "ci": [float(low), float(high)], "p": p}


def resampled_quantiles(values: np.ndarray, units: np.ndarray, n_units: int, q: float,
                        n_resamples: int = 2_000, seed: int | None = 0, max_cells: int = 2_000_000) -> np.ndarray:
    """The q-quantile of pooled trial values in each bootstrap resample of their units (tasks).

    ``values[j]`` belongs to unit ``units[j]``; a resample draws units with
    replacement (as :func:`resample_counts` does, same seed, same draws) and
    keeps every value of a drawn unit as often as the unit was drawn. Each
    resample's quantile is numpy's default (linear interpolation) over that
    multiset, as ``np.quantile(np.repeat(values, weights), q)``; a resample
    that holds no value gives nan. Work: the values above the
    ``q - 0.1`` quantile are scanned per resample (a resample whose quantile
    falls below them, which takes a freak draw, is redone over all values),
    in chunks of at most ``max_cells``.
    """
    return resampled_quantiles_many([(values, units)], n_units, q, n_resamples, seed, max_cells)[0]


def resampled_quantiles_many(samples: Sequence[tuple[np.ndarray, np.ndarray]], n_units: int, q: float,
                             n_resamples: int = 2_000, seed: int | None = 0,
                             max_cells: int = 2_000_000) -> list[np.ndarray]:
    """:func:`resampled_quantiles` of several samples over the same units, on one shared draw (paired)."""
    prepared = []
    for values, units in samples:
        values = np.asarray(values, dtype=np.float64)
        units = np.asarray(units, dtype=np.int64)
        order = np.argsort(values, kind="stable")
        size = values.size
        tail_start = min(max(0, int(np.floor((q - 0.1) * size)) - 1), max(size - 1, 0))
        per_unit = np.bincount(units, minlength=n_units).astype(np.float64) if size else None
        prepared.append((values[order], units[order], per_unit, tail_start))
    outs = [np.full(n_resamples, np.nan) for _ in samples]
    if n_units == 0 or all(p[0].size == 0 for p in prepared):
        return outs
    row = 0
    for counts in resample_counts(n_units, n_resamples, seed):
        for (ordered, unit_of, per_unit, tail_start), out in zip(prepared, outs):
            if ordered.size == 0 or per_unit is None:
                continue
            size = ordered.size
            step = max(1, max_cells // max(size - tail_start, 1))
            for start in range(0, len(counts), step):
                chunk = counts[start:start + step]
                total = chunk @ per_unit
                cum = np.cumsum(chunk[:, unit_of[tail_start:]], axis=1)
                before = total - cum[:, -1]
                below = np.floor((total - 1.0) * q)
                result = _quantile_rows(ordered, cum, before, total, below, q, tail_start)
                outside = np.nonzero((below < before) & (total > 0))[0]
                if outside.size:  # the quantile lies below the scanned tail: scan every value
                    full = np.cumsum(chunk[outside][:, unit_of], axis=1)
                    result[outside] = _quantile_rows(ordered, full, np.zeros(outside.size), total[outside],
                                                     below[outside], q, 0)
                result[total == 0] = np.nan
                out[row + start:row + start + len(result)] = result
        row += len(counts)
    return outs


def _quantile_rows(ordered: np.ndarray, cum: np.ndarray, before: np.ndarray, total: np.ndarray,
                   below: np.ndarray, q: float, offset: int) -> np.ndarray:
    """Linear-interpolation quantile per row from cumulative weights of ``ordered[offset:]``."""
    last = ordered.size - 1
    frac = (total - 1.0) * q - below
    cum = cum + before[:, None]
    i_lo = np.minimum(offset + (cum <= below[:, None]).sum(axis=1), last)
    i_hi = np.minimum(offset + (cum <= below[:, None] + 1.0).sum(axis=1), last)
    lo, hi = ordered[i_lo], ordered[i_hi]
    result: np.ndarray = lo + (hi - lo) * frac
    return result


Step = Generator[np.ndarray, np.ndarray, T]
"""A statistic that needs bootstrap sums: it yields its per-unit columns ``(n_units, m)`` and is sent
back their ``(n_resamples, m)`` resampled sums (possibly several times), then returns its result."""


def run_batched(steps: Sequence[Step[T]], n_resamples: int = 10_000, seed: int | None = 0,
                cache: ResampleCache | None = None) -> list[T]:
    """Run statistics that share one bootstrap: every round, all columns with the same number of units
    go through one :func:`resample_sums` pass (the pass reads the whole count matrix, so its cost barely
    depends on how many columns ride along). Results are the same as running each step alone with
    the same seed; returns each step's result, in order.
    """
    results: list[Any] = [None] * len(steps)
    pending: dict[int, np.ndarray] = {}
    for i, step in enumerate(steps):
        try:
            pending[i] = np.asarray(next(step), dtype=float)
        except StopIteration as done:
            results[i] = done.value
    while pending:
        by_units: dict[int, list[int]] = {}
        for i, columns in pending.items():
            if columns.ndim == 1:
                columns = pending[i] = columns[:, None]
            by_units.setdefault(columns.shape[0], []).append(i)
        sent: dict[int, np.ndarray] = {}
        for ids in by_units.values():
            sums = resample_sums(np.hstack([pending[i] for i in ids]), n_resamples, seed, cache=cache)
            start = 0
            for i in ids:
                width = pending[i].shape[1]
                sent[i] = sums[:, start:start + width]
                start += width
        pending = {}
        for i, sums in sent.items():
            try:
                pending[i] = np.asarray(steps[i].send(sums), dtype=float)
            except StopIteration as done:
                results[i] = done.value
    return results


def run_one(step: Step[T], n_resamples: int = 10_000, seed: int | None = 0,
            cache: ResampleCache | None = None) -> T:
    """Run a single step (see :func:`run_batched`)."""
    return run_batched([step], n_resamples, seed, cache)[0]
