"""Anytime-valid betting tests on cumulative counts: paired net flip and binary rate.

Each observation X_t is bounded, X_t in [low, high]. For H0: E[X_t | past] <= m
at every t, the fixed bet lambda in [0, 1/(m - low)) gives the wealth
W_t = prod_s (1 + lambda (X_s - m)), a nonnegative supermartingale with W_0 = 1
under H0, whatever the dependence between observations. The e-process is a
fixed mixture over a geometric grid of bets, lambda_j = f_j / (m - low) with
the fractions f_j = ``BET_FRACTIONS`` (uniform weights), computed in log space.

Guarantees
----------
* Validity, by Ville's inequality: under H0, P(e_t >= 1/alpha for some t) <=
  alpha, for any schedule of looks (every pair, every minute, forever) and any
  stopping rule. Nonasymptotic and exact: no normal approximation, no
  exchangeability, any discordance.
* Counts only: X takes finitely many values, so the e-value is a function of
  the cumulative count of each value; a persisted counter suffices.
* Lower bound L_t = inf{m : e_t(m) < 1/alpha}: P(L_t > m for some t) <= alpha
  whenever E[X_t | past] <= m for every t. ``*_upper_bound`` is the dual of the
  reverse test (H0: E[X_t | past] >= m) the same way.
* Duality, exact in floating point: the bound is the smallest double the test
  does not reject, so e_value(m) >= 1/alpha iff lower_bound > m (and the
  reverse test rejects m iff upper_bound < m).
* The sample mean is never rejected (Jensen), so lower <= mean <= upper.
* Empty input (n = 0): e-value 1.0; bounds are the ends of the range.

Paired net flip (``flip_*``), for shadow pairs: X = +1 if only the baseline
succeeded (b pairs), -1 if only the candidate succeeded (c pairs), 0 if they
agree (n - b - c pairs). The effect E[X] is the net flip, positive when the
candidate is worse; ``floor`` puts the practical floor inside the null.
Binary rate (``rate_*``): X in {0, 1}, x events in n trials, H0: p <= threshold.

Per-bet log wealth (``flip_log_factors``, ``rate_log_factors``): the log of each
fixed bet's wealth factor over a batch of counts, on the same grid with the
weights ``BET_WEIGHTS``; the e-value is sum_j w_j exp(log factor_j) of the
cumulative counts, and the factors of consecutive batches add (the wealth is a
product over observations), so a caller can run its own process on increments
(e.g. a CUSUM e-detector for recovery).
"""

from __future__ import annotations

import math
import numbers
import struct
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from monitor.stats.intervals import _require_count, _require_int, _require_probability

__all__ = [
    "BET_FRACTIONS",
    "BET_WEIGHTS",
    "flip_e_value",
    "flip_e_value_below",
    "flip_log_factors",
    "flip_lower_bound",
    "flip_upper_bound",
    "rate_e_value",
    "rate_e_value_below",
    "rate_log_factors",
    "rate_lower_bound",
    "rate_upper_bound",
]

FloatArray = NDArray[np.float64]

# Fractions of the largest admissible bet, 1e-4 to 0.9, geometric: small bets win on small
# effects over long runs (a rate of 0.6% against 0.5% needs ~5e-4), large ones on large effects.
BET_FRACTIONS: tuple[float, ...] = tuple(float(f) for f in np.geomspace(1e-4, 0.9, 32))
_DEFAULT_FRACTIONS: FloatArray = np.array(BET_FRACTIONS, dtype=np.float64)
_DEFAULT_FRACTIONS.setflags(write=False)
#: The mixture weights of the bets in ``BET_FRACTIONS``: uniform, summing to 1.
BET_WEIGHTS: tuple[float, ...] = (1.0 / len(BET_FRACTIONS),) * len(BET_FRACTIONS)

_FLIP_VALUES: FloatArray = np.array([1.0, 0.0, -1.0])
_RATE_VALUES: FloatArray = np.array([1.0, 0.0])


# --- validation ---


def _require_fractions(bet_fractions: Sequence[float]) -> FloatArray:
    """The bet grid as an array: a non-empty 1-D sequence of numbers in (0, 1)."""
    if bet_fractions is BET_FRACTIONS:
        return _DEFAULT_FRACTIONS
    try:
        array = np.asarray(bet_fractions, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bet_fractions must be a 1-D sequence of numbers in (0, 1): {exc}") from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"bet_fractions must be a non-empty 1-D sequence, got shape {array.shape}")
    valid = (array > 0.0) & (array < 1.0)  # nan fails both
    if not valid.all():
        index = int(np.argmin(valid))
        raise ValueError(f"bet_fractions must be numbers in (0, 1), got {array[index]} at index {index}")
    return array


def _require_level(name: str, value: object, low: float, high: float) -> float:
    """A hypothesised mean: a real number strictly inside (low, high)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in ({low:g}, {high:g}), got {value!r}")
    as_float = float(value)
    if not low < as_float < high:  # also rejects nan
        raise ValueError(f"{name} must be a number in ({low:g}, {high:g}), got {value!r}")
    return as_float


def _require_flip_counts(b: object, c: object, n: object) -> FloatArray:
    """Counts of (+1, 0, -1) from b, c, n: integers >= 0 with b + c <= n."""
    b_int = _require_int("b", b)
    c_int = _require_int("c", c)
    n_int = _require_int("n", n)
    if b_int + c_int > n_int:
        raise ValueError(f"b + c must be <= n, got b={b_int}, c={c_int}, n={n_int}")
    return np.array([b_int, n_int - b_int - c_int, c_int], dtype=np.float64)


def _require_rate_counts(x: object, n: object) -> FloatArray:
    """Counts of (1, 0) from x events in n trials."""
    x_int, n_int = _require_count(x, n)
    return np.array([x_int, n_int - x_int], dtype=np.float64)


# --- the mixture e-process on a finite support, shared with the sibling modules ---


def _log_wealth(values: FloatArray, counts: FloatArray, mean: float, low: float, fractions: FloatArray) -> FloatArray:
    """log wealth of each bet f_j / (mean - low) for H0: E[X] <= mean, X in [low, ...]: shape (J,)."""
    # A span floored at 1e-300 keeps the bets finite when mean is within 1e-300 of low; it only
    # shrinks them there (still valid) and keeps the e-value monotone in mean.
    scaled = (values - mean) / max(mean - low, 1e-300)  # >= -1, so every factor is >= 1 - f_j > 0
    log_wealth: FloatArray = np.log1p(np.multiply.outer(fractions, scaled)) @ counts
    return log_wealth


def _log_e_value(values: FloatArray, counts: FloatArray, mean: float, low: float, fractions: FloatArray) -> float:
    """log e for H0: E[X] <= mean, X in [low, ...], bets f_j / (mean - low), uniform weights.

    ``values`` may be any lower bounds of the observations they count (values
    >= low): rounding an observation down only lowers every bet's wealth.
    """
    log_wealth = _log_wealth(values, counts, mean, low, fractions)
    peak = float(log_wealth.max())
    return peak + math.log(float(np.exp(log_wealth - peak).sum()) / fractions.size)


def _exp(log_value: float) -> float:
    """exp that returns inf instead of raising: an e-value may prove the null impossible."""
    try:
        return math.exp(log_value)
    except OverflowError:
        return math.inf


def _e_above(values: FloatArray, counts: FloatArray, mean: float, low: float, fractions: FloatArray) -> float:
    """e-value for H0: E[X] <= mean, observations in [low, ...]."""
    return _exp(_log_e_value(values, counts, mean, low, fractions))


def _e_below(values: FloatArray, counts: FloatArray, mean: float, high: float, fractions: FloatArray) -> float:
    """e-value for H0: E[X] >= mean, observations in [..., high]: the test above on -X."""
    return _exp(_log_e_value(-values, counts, -mean, -high, fractions))


def _ordered(value: float) -> int:
    """An integer key that orders doubles like the reals (adjacent doubles differ by 1)."""
    bits: int = struct.unpack("<q", struct.pack("<d", value))[0]
    return bits if bits >= 0 else -(bits & 0x7FFFFFFFFFFFFFFF)


def _from_ordered(key: int) -> float:
    bits = key if key >= 0 else (-key) | (1 << 63)
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


def _lower_bound(
    values: FloatArray, counts: FloatArray, low: float, high: float, alpha: float, fractions: FloatArray
) -> float:
    """The smallest double m in (low, high] with e_above(m) < 1/alpha, or low if that is next to low.

    Bisection over the ordering of doubles (at most 64 steps): ``rejected`` is
    always a rejected m (or the sentinel ``low``) and ``kept`` a kept one, and
    they end adjacent, so the bound brackets the exact crossing.
    """
    threshold = 1.0 / alpha
    rejected, kept = _ordered(low), _ordered(high)  # e_above(high) <= 1 < 1/alpha: all bets lose there
    start = rejected
    while kept - rejected > 1:
        middle = (rejected + kept) // 2
        if _e_above(values, counts, _from_ordered(middle), low, fractions) >= threshold:
            rejected = middle
        else:
            kept = middle
    return low if rejected == start else _from_ordered(kept)


def _upper_bound(
    values: FloatArray, counts: FloatArray, low: float, high: float, alpha: float, fractions: FloatArray
) -> float:
    """The largest double m in [low, high) with e_below(m) < 1/alpha: the lower bound of -X, negated."""
    return -_lower_bound(-values, counts, -high, -low, alpha, fractions)


def _directed_log_wealth(values: FloatArray, counts: FloatArray, level: float, low: float, high: float,
                         direction: str, fractions: FloatArray) -> FloatArray:
    if direction == "greater":  # H0: E[X] <= level, the bets win when the mean is above it
        return _log_wealth(values, counts, level, low, fractions)
    if direction == "less":  # H0: E[X] >= level: the same bets on -X
        return _log_wealth(-values, counts, -level, -high, fractions)
    raise ValueError(f"direction must be 'greater' (H0: mean <= level) or 'less' (H0: mean >= level), "
                     f"got {direction!r}")


# --- paired net flip ---


def flip_e_value(b: int, c: int, n: int, floor: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """e-value for H0: net flip E[X | past] <= floor ("the candidate is not worse by more than floor").

    Anytime-valid under H0 for any discordance and dependence (module notes).
    Rejecting at e >= 1/alpha is equivalent to ``flip_lower_bound(...) > floor``.
    Returns 1.0 for n = 0, inf if the wealth overflows a double.
    Raises ValueError unless b, c, n are integers >= 0 with b + c <= n and
    -1 < floor < 1.
    """
    counts = _require_flip_counts(b, c, n)
    floor = _require_level("floor", floor, -1.0, 1.0)
    return _e_above(_FLIP_VALUES, counts, floor, -1.0, _require_fractions(bet_fractions))


def flip_e_value_below(b: int, c: int, n: int, ceiling: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """e-value for H0: net flip E[X | past] >= ceiling: evidence the effect is now under ceiling.

    For alert recovery, on counts started at the fix. Anytime-valid like
    ``flip_e_value``; rejecting at e >= 1/alpha is equivalent to
    ``flip_upper_bound(...) < ceiling``. Returns 1.0 for n = 0.
    Raises ValueError on invalid counts or ceiling outside (-1, 1).
    """
    counts = _require_flip_counts(b, c, n)
    ceiling = _require_level("ceiling", ceiling, -1.0, 1.0)
    return _e_below(_FLIP_VALUES, counts, ceiling, 1.0, _require_fractions(bet_fractions))


def flip_lower_bound(b: int, c: int, n: int, alpha: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """One-sided anytime-valid lower confidence sequence for the net flip, at level alpha.

    The dual of ``flip_e_value``: P(bound > true flip at some t) <= alpha, and
    ``flip_e_value(b, c, n, m) >= 1/alpha`` iff bound > m, for every m.
    In [-1, 1] and <= (b - c) / n; -1.0 for n = 0.
    Raises ValueError on invalid counts or alpha outside (0, 1).
    """
    counts = _require_flip_counts(b, c, n)
    alpha = _require_probability("alpha", alpha)
    return _lower_bound(_FLIP_VALUES, counts, -1.0, 1.0, alpha, _require_fractions(bet_fractions))


def flip_upper_bound(b: int, c: int, n: int, alpha: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """One-sided anytime-valid upper confidence sequence for the net flip, at level alpha.

    The dual of ``flip_e_value_below``: P(bound < true flip at some t) <= alpha,
    and ``flip_e_value_below(b, c, n, m) >= 1/alpha`` iff bound < m.
    In [-1, 1] and >= (b - c) / n; 1.0 for n = 0.
    Raises ValueError on invalid counts or alpha outside (0, 1).
    """
    counts = _require_flip_counts(b, c, n)
    alpha = _require_probability("alpha", alpha)
    return _upper_bound(_FLIP_VALUES, counts, -1.0, 1.0, alpha, _require_fractions(bet_fractions))


def flip_log_factors(worse: int, better: int, n: int, level: float, direction: str,
                     bet_fractions: Sequence[float] = BET_FRACTIONS) -> FloatArray:
    """log wealth factor of each bet over a batch of n pairs (worse: X = +1, better: X = -1), shape (J,).

    ``direction="greater"``: the bets of ``flip_e_value`` (H0: net flip <= level);
    ``"less"``: those of ``flip_e_value_below`` (H0: net flip >= level). Under
    H0 each bet's exp(sum of the factors of consecutive batches) is a
    nonnegative supermartingale, and sum_j BET_WEIGHTS[j] * exp(factors_j) of
    the cumulative counts is the e-value. Zeros for n = 0.
    Raises ValueError on invalid counts, level outside (-1, 1) or another direction.
    """
    counts = _require_flip_counts(worse, better, n)
    level = _require_level("level", level, -1.0, 1.0)
    return _directed_log_wealth(_FLIP_VALUES, counts, level, -1.0, 1.0, direction, _require_fractions(bet_fractions))


# --- binary rate ---


def rate_e_value(x: int, n: int, threshold: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """e-value for H0: rate p <= threshold (x events in n trials), e.g. a harmful-action rate.

    Exact and anytime-valid (module notes); rejecting at e >= 1/alpha is
    equivalent to ``rate_lower_bound(x, n, alpha) > threshold``.
    Returns 1.0 for n = 0. Raises ValueError unless 0 <= x <= n (integers) and
    0 < threshold < 1.
    """
    counts = _require_rate_counts(x, n)
    threshold = _require_level("threshold", threshold, 0.0, 1.0)
    return _e_above(_RATE_VALUES, counts, threshold, 0.0, _require_fractions(bet_fractions))


def rate_e_value_below(x: int, n: int, threshold: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """e-value for H0: rate p >= threshold: evidence the rate is now under threshold.

    Rejecting at e >= 1/alpha is equivalent to ``rate_upper_bound(x, n, alpha) < threshold``.
    Returns 1.0 for n = 0. Raises ValueError on invalid counts or threshold outside (0, 1).
    """
    counts = _require_rate_counts(x, n)
    threshold = _require_level("threshold", threshold, 0.0, 1.0)
    return _e_below(_RATE_VALUES, counts, threshold, 1.0, _require_fractions(bet_fractions))


def rate_lower_bound(x: int, n: int, alpha: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """One-sided anytime-valid lower confidence sequence for a rate: the dual of ``rate_e_value``.

    In [0, x / n]; 0.0 for n = 0 or x = 0.
    Raises ValueError on invalid counts or alpha outside (0, 1).
    """
    counts = _require_rate_counts(x, n)
    alpha = _require_probability("alpha", alpha)
    return _lower_bound(_RATE_VALUES, counts, 0.0, 1.0, alpha, _require_fractions(bet_fractions))


def rate_upper_bound(x: int, n: int, alpha: float, bet_fractions: Sequence[float] = BET_FRACTIONS) -> float:
    """One-sided anytime-valid upper confidence sequence for a rate: the dual of ``rate_e_value_below``.

    In [x / n, 1]; 1.0 for n = 0 or x = n.
    Raises ValueError on invalid counts or alpha outside (0, 1).
    """
    counts = _require_rate_counts(x, n)
    alpha = _require_probability("alpha", alpha)
    return _upper_bound(_RATE_VALUES, counts, 0.0, 1.0, alpha, _require_fractions(bet_fractions))


def rate_log_factors(x: int, n: int, level: float, direction: str,
                     bet_fractions: Sequence[float] = BET_FRACTIONS) -> FloatArray:
    """log wealth factor of each bet over a batch of x events in n trials, shape (J,).

    ``direction="greater"``: the bets of ``rate_e_value`` (H0: p <= level);
    ``"less"``: those of ``rate_e_value_below`` (H0: p >= level); the factors
    of consecutive batches add, as for ``flip_log_factors``. Zeros for n = 0.
    Raises ValueError on invalid counts, level outside (0, 1) or another direction.
    """
    counts = _require_rate_counts(x, n)
    level = _require_level("level", level, 0.0, 1.0)
    return _directed_log_wealth(_RATE_VALUES, counts, level, 0.0, 1.0, direction, _require_fractions(bet_fractions))
