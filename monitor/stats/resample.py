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

from collections.abc import Iterable, Iterator

import numpy as np

ResampleCache = dict[tuple[int, int, int], list[np.ndarray]]
"""Count matrices (float32) by ``(n_units, n_resamples, seed)``, shared across calls by one report."""


def resample_sums(values: np.ndarray, n_resamples: int = 10_000, seed: int | None = 0,
                  max_cells: int = 1_000_000, cache: ResampleCache | None = None) -> np.ndarray:
    """Bootstrap sums over units: returns ``(n_resamples, m)`` for ``values`` of shape ``(n_units, m)``.

    Row r holds the column sums of ``values`` over the units of resample r.
    Empty ``values`` (no units) returns zeros. ``cache`` (a dict the caller
    keeps for one report) reuses the count matrices of an earlier call with
    the same (n_units, n_resamples, seed), stored as float32 (exact for
    counts), so several statistics over the same units cost one draw.
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
    if cache is not None and seed is not None:
        key = (n_units, n_resamples, seed)
        if key not in cache:
            cache[key] = [c.astype(np.float32) for c in resample_counts(n_units, n_resamples, seed, max_cells)]
        chunks = cache[key]
    else:
        chunks = resample_counts(n_units, n_resamples, seed, max_cells)
    for counts in chunks:
        out[row:row + len(counts)] = counts @ values
        row += len(counts)
    return out


def resample_counts(n_units: int, n_resamples: int, seed: int | None = 0,
                    max_cells: int = 1_000_000) -> Iterator[np.ndarray]:
    """Yield count matrices (float64) of consecutive chunks of resamples."""
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, min(max_cells, 2**31 - 1) // max(n_units, 1))
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
