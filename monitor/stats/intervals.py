"""Confidence intervals for a binomial rate (successes out of n trials).

Guarantees
----------
* ``wilson_interval`` — Wilson score interval, no continuity correction.
  Asymptotic (normal approximation to the score test), two-sided, equal-tailed
  in the score statistic. Its coverage can dip below nominal for small n or
  rates near 0 or 1, which is why the house choice switches to the exact
  interval there.
* ``clopper_pearson_interval`` — exact (inverts two one-sided binomial tests,
  each at (1 - confidence) / 2). Coverage is >= confidence for every true rate
  and n; it is conservative.
* ``rate_interval`` / ``estimate_rate`` — the house choice: Clopper–Pearson
  when n < small_n or the count is 0 or n, else Wilson.

Empty input, decided once for the whole package: for n = 0 every interval is
(0.0, 1.0) (nothing is known) and the point rate is nan.

Bounds are clipped to [0, 1]; when successes == 0 the lower bound is exactly
0.0 and when successes == n the upper bound is exactly 1.0, so the interval
always contains the observed rate.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

# scipy is imported inside clopper_pearson_interval only: importing scipy.special
# costs ~0.25 s, a good part of a CI step that only needs Wilson intervals.

__all__ = [
    "METHOD_CLOPPER_PEARSON",
    "METHOD_WILSON",
    "RateEstimate",
    "clopper_pearson_interval",
    "estimate_rate",
    "rate_interval",
    "wilson_interval",
]

METHOD_WILSON = "wilson"
METHOD_CLOPPER_PEARSON = "clopper_pearson"

EMPTY_INTERVAL = (0.0, 1.0)
_STANDARD_NORMAL = NormalDist()


# --- validation helpers, shared (privately) by the sibling stats modules ---


def _require_int(name: str, value: object, minimum: int = 0, context: str = "") -> int:
    """Return ``value`` as an int if it is an integer >= minimum, else raise.

    bool is rejected on purpose: a True passed as a count is almost always a
    bug upstream (an outcome where a count was expected).
    """
    suffix = f" ({context})" if context else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"{name} must be an integer >= {minimum}, got {value!r}"
            f" of type {type(value).__name__}{suffix}"
        )
    as_int = int(value)
    if as_int < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {as_int}{suffix}")
    return as_int


def _require_count(successes: object, n: object) -> tuple[int, int]:
    """Validate a (successes, n) pair: n >= 0 and 0 <= successes <= n."""
    n_int = _require_int("n", n)
    if isinstance(successes, bool) or not isinstance(successes, numbers.Integral):
        raise ValueError(
            f"successes must be an integer in [0, n], got {successes!r}"
            f" of type {type(successes).__name__} with n={n_int}"
        )
    s_int = int(successes)
    if not 0 <= s_int <= n_int:
        raise ValueError(f"successes must be an integer in [0, n], got {s_int} with n={n_int}")
    return s_int, n_int


def _require_probability(name: str, value: object) -> float:
    """Validate a level such as confidence or alpha: a real number in (0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    as_float = float(value)
    if not 0.0 < as_float < 1.0:  # also rejects nan
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    return as_float


# --- intervals ---


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval for a binomial rate, no continuity correction.

    Asymptotic: built from the normal approximation to the score test, so
    coverage is approximately (not guaranteed) ``confidence``. The bounds equal
    statsmodels' ``proportion_confint(method="wilson")``, then are clipped to
    [0, 1]; the lower bound is exactly 0.0 when successes == 0 and the upper
    bound exactly 1.0 when successes == n.

    Returns (low, high). For n = 0 returns (0.0, 1.0).
    Raises ValueError unless n >= 0, 0 <= successes <= n (integers) and
    0 < confidence < 1.
    """
    successes, n = _require_count(successes, n)
    confidence = _require_probability("confidence", confidence)
    if n == 0:
        return EMPTY_INTERVAL
    return wilson_bounds(successes, n, two_sided_critical_value(confidence))


@lru_cache(maxsize=32)
def two_sided_critical_value(confidence: float) -> float:
    """The standard normal quantile at ``0.5 + confidence / 2`` (AS241, ~1e-16); ``0 < confidence < 1``."""
    return _STANDARD_NORMAL.inv_cdf(0.5 + confidence / 2.0)


def wilson_bounds(successes: int, n: int, z: float) -> tuple[float, float]:
    """:func:`wilson_interval`'s arithmetic, unchecked: ``0 <= successes <= n``, ``n >= 1`` and the
    critical value ``z`` are the caller's (the exporter's hot path checks once, not per window)."""
    z2 = z * z
    rate = successes / n
    denom = 1.0 + z2 / n
    center = (rate + z2 / (2.0 * n)) / denom
    half_width = z * math.sqrt(rate * (1.0 - rate) / n + z2 / (4.0 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, center - half_width)
    high = 1.0 if successes == n else min(1.0, center + half_width)
    return low, high


def clopper_pearson_interval(
    successes: int, n: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Two-sided exact (Clopper–Pearson) interval for a binomial rate.

    Exact: each tail has probability <= (1 - confidence) / 2, so coverage is at
    least ``confidence`` for every true rate. Bounds are beta quantiles
    (``Beta(s, n - s + 1)`` at alpha/2 and ``Beta(s + 1, n - s)`` at
    1 - alpha/2), matching statsmodels' ``proportion_confint(method="beta")``;
    low is exactly 0.0 when successes == 0 and high exactly 1.0 when
    successes == n.

    Returns (low, high). For n = 0 returns (0.0, 1.0).
    Raises ValueError unless n >= 0, 0 <= successes <= n (integers) and
    0 < confidence < 1.
    """
    successes, n = _require_count(successes, n)
    confidence = _require_probability("confidence", confidence)
    if n == 0:
        return EMPTY_INTERVAL
    from scipy.special import betainccinv, betaincinv

    tail = (1.0 - confidence) / 2.0
    low = 0.0 if successes == 0 else float(betaincinv(successes, n - successes + 1, tail))
    # Upper bound: the upper-tail inverse, not ppf(1 - tail), keeps full relative
    # precision when the bound is tiny (safety rates near 0 over large n).
    high = 1.0 if successes == n else float(betainccinv(successes + 1, n - successes, tail))
    return min(max(low, 0.0), 1.0), min(max(high, 0.0), 1.0)


def rate_interval(
    successes: int, n: int, confidence: float = 0.95, small_n: int = 30
) -> tuple[float, float, str]:
    """The house interval for a rate: exact where the asymptotics are weak.

    Uses Clopper–Pearson (exact, conservative) when n < small_n or successes is
    0 or n, and Wilson (asymptotic) otherwise. Two-sided.

    Returns (low, high, method) where method is ``"clopper_pearson"`` or
    ``"wilson"`` (module constants METHOD_CLOPPER_PEARSON, METHOD_WILSON).
    For n = 0 returns (0.0, 1.0, "clopper_pearson").
    Raises ValueError on invalid counts, confidence outside (0, 1), or
    small_n not an integer >= 0.
    """
    successes, n = _require_count(successes, n)
    small_n = _require_int("small_n", small_n)
    if n < small_n or successes == 0 or successes == n:
        low, high = clopper_pearson_interval(successes, n, confidence)
        return low, high, METHOD_CLOPPER_PEARSON
    low, high = wilson_interval(successes, n, confidence)
    return low, high, METHOD_WILSON


@dataclass(frozen=True)
class RateEstimate:
    """A rate never travels alone: point, interval, counts and interval method.

    ``rate`` is successes / n, or nan when n == 0 (then low, high = 0.0, 1.0).
    """

    rate: float
    low: float
    high: float
    n: int
    successes: int
    method: str


def estimate_rate(successes: int, n: int, confidence: float = 0.95) -> RateEstimate:
    """Point rate with the house interval (see ``rate_interval``, default small_n).

    The interval is two-sided at ``confidence``; exact (Clopper–Pearson) for
    n < 30 or a count of 0 or n, Wilson otherwise. For n = 0 the rate is nan
    and the interval (0.0, 1.0).
    Raises ValueError on invalid counts or confidence.
    """
    low, high, method = rate_interval(successes, n, confidence)
    successes, n = int(successes), int(n)
    rate = successes / n if n > 0 else math.nan
    return RateEstimate(rate=rate, low=low, high=high, n=n, successes=successes, method=method)
