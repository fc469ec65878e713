"""The exporter's rate gauges and their intervals, without scipy (pure arithmetic).

:func:`rate_figures` gives what :func:`monitor.stats.intervals.estimate_rate` gives (the house
interval, two-sided): Clopper–Pearson when ``n < 30`` or the count is 0 or ``n``, else Wilson
(:func:`wilson`: :func:`monitor.stats.intervals.wilson_interval`'s arithmetic, to the bit, without
its argument checks and with the critical value computed once). The Clopper–Pearson bounds are computed
here instead of by scipy's ``betaincinv`` / ``betainccinv``, which would load scipy (+15 MB of
resident memory, ~0.25 s) into the exporter and cost ~20 µs a call on every changed window:

* count 0: the upper bound is ``1 - (alpha/2)^(1/n)`` (the Beta(1, n) quantile in closed form,
  computed as ``-expm1(log(alpha/2) / n)`` to keep its relative precision when it is tiny); count
  ``n``: the lower bound is ``(alpha/2)^(1/n)``; the other bound is exactly 0.0 or 1.0;
* otherwise (``0 < k < n < 30``): the root in ``p`` of the binomial tail ``P(Bin(n, p) >= k) =
  alpha/2`` (lower) or ``P(Bin(n, p) <= k) = alpha/2`` (upper), each a sum of positive terms
  (no cancellation), found by bisection down to adjacent floats; cached per ``(k, n,
  confidence)`` (435 pairs at one confidence).

Guarantee: the bounds equal scipy's to a relative 1e-12 (tests compare them on random counts);
the rate is ``k / n``; ``n = 0`` gives nan and (0.0, 1.0) as in :mod:`monitor.stats.intervals`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from monitor.stats.intervals import two_sided_critical_value, wilson_bounds

#: Below this many trials (or at a count of 0 or n) the exact interval is used (rate_interval's small_n).
SMALL_N = 30


def rate_figures(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(rate, low, high)`` of ``successes`` out of ``n`` (see the module docstring).

    Raises ValueError unless ``0 <= successes <= n`` and ``0 < confidence < 1``.
    """
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be an integer in [0, n], got {successes} with n={n}")
    if n == 0:
        return math.nan, 0.0, 1.0
    if n < SMALL_N or successes == 0 or successes == n:
        low, high = clopper_pearson(successes, n, confidence)
    else:  # wilson(), its one call saved (every changed window asks for three rates)
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
        low, high = wilson_bounds(successes, n, two_sided_critical_value(confidence))
    return successes / n, low, high


def wilson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """:func:`monitor.stats.intervals.wilson_interval` for ``0 <= successes <= n``, ``n >= 1`` (checked by the
    caller): its own arithmetic (``wilson_bounds``), the critical value cached per confidence."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    return wilson_bounds(successes, n, two_sided_critical_value(confidence))


def clopper_pearson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided exact interval (as :func:`monitor.stats.intervals.clopper_pearson_interval`), ``n >= 1``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    tail = (1.0 - confidence) / 2.0
    if successes == 0:
        return 0.0, min(max(-math.expm1(math.log(tail) / n), 0.0), 1.0)
    if successes == n:
        return min(max(math.exp(math.log(tail) / n), 0.0), 1.0), 1.0
    return _inner(successes, n, tail)


@lru_cache(maxsize=4096)
def _inner(successes: int, n: int, tail: float) -> tuple[float, float]:
    """Both bounds for ``0 < successes < n``: the roots of the two binomial tails (module docstring)."""
    coefficients = [math.comb(n, j) for j in range(n + 1)]

    def at_least(p: float) -> float:  # P(Bin(n, p) >= successes), rising in p
        q = 1.0 - p
        return sum(coefficients[j] * p ** j * q ** (n - j) for j in range(successes, n + 1))

    def at_most(p: float) -> float:  # P(Bin(n, p) <= successes), falling in p
        q = 1.0 - p
        return sum(coefficients[j] * p ** j * q ** (n - j) for j in range(successes + 1))

    low = _root(lambda p: at_least(p) < tail)
    high = _root(lambda p: at_most(p) > tail)
    return min(max(low, 0.0), 1.0), min(max(high, 0.0), 1.0)


def _root(below: Callable[[float], bool]) -> float:
    """The float where ``below(p)`` turns from True to False on [0, 1], by bisection to adjacent floats."""
    lo, hi = 0.0, 1.0
    while True:
        mid = (lo + hi) / 2.0
        if mid <= lo or mid >= hi:
            return mid
        if below(mid):
            lo = mid
        else:
            hi = mid
