"""Multiple-testing corrections across slices.

* ``benjamini_hochberg`` — step-up FDR control at ``alpha`` for independent or
  positively dependent (PRDS) p-values.
* ``holm`` — step-down family-wise error control at ``alpha`` under any
  dependence.
* ``e_benjamini_hochberg`` — e-BH (Wang & Ramdas 2022): FDR control at
  ``alpha`` under *arbitrary* dependence, from e-values. It is the natural
  partner of anytime-valid tests, whose stopped test martingales are e-values.

The p-value procedures reproduce
``statsmodels.stats.multitest.multipletests(method="fdr_bh" | "holm")``
bit-for-bit (same operations in the same order), including the adjusted
p-values. Empty input returns empty arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monitor.stats.intervals import _require_probability

__all__ = ["ADJUST_METHODS", "adjust_p_values", "benjamini_hochberg", "e_benjamini_hochberg", "holm"]

#: The corrections ``adjust_p_values`` knows (``fleetmon compare --adjust``).
ADJUST_METHODS = ("bh", "holm", "none")


def _as_p_values(p_values: Sequence[float]) -> np.ndarray:
    try:
        array = np.asarray(p_values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"p_values must be a 1-D sequence of numbers in [0, 1]: {exc}") from None
    if array.ndim != 1:
        raise ValueError(f"p_values must be 1-D, got shape {array.shape}")
    valid = (array >= 0.0) & (array <= 1.0)  # nan fails both
    if not valid.all():
        index = int(np.argmin(valid))
        raise ValueError(f"p_values must be numbers in [0, 1], got {array[index]} at index {index}")
    return array


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.float64)


def benjamini_hochberg(
    p_values: Sequence[float], alpha: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini–Hochberg step-up procedure.

    Rejects the k smallest p-values, k = max{i : p_(i) <= alpha * i / m}.
    Guarantees FDR <= alpha (exactly m0/m * alpha) when the p-values are
    independent or PRDS; under arbitrary dependence use e-BH or Holm.

    Returns (rejected, adjusted) in input order: a bool array and the BH
    adjusted p-values min_{j >= i} (m / j) p_(j), capped at 1. Equal to
    statsmodels' multipletests(method="fdr_bh"). Empty input gives two empty
    arrays. Raises ValueError for p-values outside [0, 1] (nan included) or
    alpha outside (0, 1).
    """
    alpha = _require_probability("alpha", alpha)
    p = _as_p_values(p_values)
    if p.size == 0:
        return _empty()
    order = np.argsort(p)
    p_sorted = p[order]
    ecdf_factor = np.arange(1, p.size + 1) / float(p.size)  # i / m
    reject_sorted = p_sorted <= ecdf_factor * alpha
    if reject_sorted.any():
        reject_sorted[: int(np.nonzero(reject_sorted)[0].max())] = True
    adjusted_sorted = np.minimum.accumulate((p_sorted / ecdf_factor)[::-1])[::-1]
    adjusted_sorted[adjusted_sorted > 1] = 1
    return _unsort(order, reject_sorted, adjusted_sorted)


def holm(p_values: Sequence[float], alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm step-down procedure.

    Walks the sorted p-values and rejects p_(i) while p_(i) <= alpha / (m - i + 1),
    stopping at the first acceptance. Guarantees family-wise error <= alpha
    under any dependence between the p-values.

    Returns (rejected, adjusted) in input order; adjusted p-values are
    max_{j <= i} (m - j + 1) p_(j), capped at 1. Equal to statsmodels'
    multipletests(method="holm"). Empty input gives two empty arrays.
    Raises ValueError for p-values outside [0, 1] or alpha outside (0, 1).
    """
    alpha = _require_probability("alpha", alpha)
    p = _as_p_values(p_values)
    if p.size == 0:
        return _empty()
    order = np.argsort(p)
    p_sorted = p[order]
    remaining = np.arange(p.size, 0, -1)  # m - i + 1 for i = 1..m
    not_reject = p_sorted > alpha / remaining
    first_acceptance = np.nonzero(not_reject)[0]
    if first_acceptance.size:
        not_reject[int(first_acceptance.min()) :] = True
    adjusted_sorted = np.maximum.accumulate(p_sorted * remaining)
    adjusted_sorted[adjusted_sorted > 1] = 1
    return _unsort(order, ~not_reject, adjusted_sorted)


def _unsort(
    order: np.ndarray, reject_sorted: np.ndarray, adjusted_sorted: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    rejected = np.empty_like(reject_sorted)
    adjusted = np.empty_like(adjusted_sorted)
    rejected[order] = reject_sorted
    adjusted[order] = adjusted_sorted
    return rejected, adjusted


def e_benjamini_hochberg(e_values: Sequence[float], alpha: float = 0.05) -> np.ndarray:
    """e-BH procedure (Wang & Ramdas 2022, "False discovery rate control with e-values").

    With m e-values sorted decreasingly e_[1] >= ... >= e_[m], let
    k* = max{k : e_[k] >= m / (alpha * k)} (0 if none). Rejects the k*
    hypotheses with the largest e-values; equivalently every i with
    e_i >= m / (alpha * k*), which has exactly k* members even with ties.
    Guarantees FDR <= alpha under arbitrary dependence, provided each null
    e-value has expectation <= 1. An e-value < 1 can never be rejected
    (m / (alpha k) >= 1/alpha > 1).

    Returns a bool array in input order; empty input gives an empty array.
    Raises ValueError for e-values that are negative or nan (+inf allowed:
    a test martingale may have proved the null impossible) or alpha outside
    (0, 1).
    """
    alpha = _require_probability("alpha", alpha)
    try:
        e = np.asarray(e_values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"e_values must be a 1-D sequence of numbers >= 0: {exc}") from None
    if e.ndim != 1:
        raise ValueError(f"e_values must be 1-D, got shape {e.shape}")
    valid = e >= 0.0  # nan fails
    if not valid.all():
        index = int(np.argmin(valid))
        raise ValueError(f"e_values must be numbers >= 0, got {e[index]} at index {index}")
    m = e.size
    if m == 0:
        return np.zeros(0, dtype=bool)
    e_descending = -np.sort(-e)
    ranks = np.arange(1, m + 1)
    thresholds = m / (alpha * ranks)
    passing = np.nonzero(e_descending >= thresholds)[0]
    if passing.size == 0:
        return np.zeros(m, dtype=bool)
    k_star = int(passing.max()) + 1
    rejected: np.ndarray = e >= thresholds[k_star - 1]
    return rejected


def adjust_p_values(p_values: Sequence[float | None], method: str = "bh") -> list[float | None]:
    """Adjusted p-values for one family of tests: ``"bh"`` (FDR), ``"holm"`` (FWER) or ``"none"``.

    Missing tests (None or nan: a comparison with no data) stay None and are
    not counted in the family size m. The rest are adjusted with
    :func:`benjamini_hochberg` or :func:`holm` (the adjusted values do not
    depend on ``alpha``); ``"none"`` returns them unchanged. Order is kept.
    Raises ValueError for an unknown method or a p-value outside [0, 1].
    """
    if method not in ADJUST_METHODS:
        raise ValueError(f"adjust must be one of {', '.join(ADJUST_METHODS)}, got {method!r}")
    present = [i for i, p in enumerate(p_values) if p is not None and p == p]
    out: list[float | None] = [None] * len(p_values)
    if not present:
        return out
    values = _as_p_values([float(p_values[i]) for i in present])  # type: ignore[arg-type]
    if method == "bh":
        adjusted = benjamini_hochberg(values.tolist())[1]
    elif method == "holm":
        adjusted = holm(values.tolist())[1]
    else:
        adjusted = values
    for i, value in zip(present, adjusted.tolist()):
        out[i] = float(value)
    return out
