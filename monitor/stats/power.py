"""Power and sample size of the offline paired test: the exact McNemar test of ``fleetmon compare``.

The test (:func:`monitor.stats.paired.mcnemar`, ``p_exact``): two-sided, exact,
conditional on the d = b + c discordant tasks, rejecting at level α when
``min(1, 2 · P(Bin(d, 1/2) <= min(b, c))) <= α``. **Power** here is the
probability that it rejects *in the direction of the effect* (b > c for a drop:
more tasks solved by the baseline only), computed exactly, with no normal
approximation: d ~ Bin(n, ψ) with ψ the discordance, and given d the
candidate-only count c ~ Bin(d, p01 / ψ), so

    power(n) = Σ_d P(d) · P(c <= k(d) | d),   k(d) = max{k : 2 · P(Bin(d, 1/2) <= k) <= α}.

The terms of d more than 12 standard deviations from its mean are dropped (a
mass below 1e-30).

Model of a task pair (the unit of the test): the baseline solves it with
probability ``baseline_rate`` (P), the candidate with P − ``effect`` (D > 0: a
drop of D points), and the two disagree with probability ``discordance`` (ψ),
so the baseline-only and candidate-only cells are p10 = (ψ + D)/2 and
p01 = (ψ − D)/2. When ψ is not known the outcomes are taken as independent,
ψ = P(1 − P + D) + (1 − P)(P − D); agents run on the same tasks are usually
positively correlated (lower ψ), so that default overstates the tasks needed.
The test is symmetric: with a given ψ, a gain of D needs the same n.

Discreteness makes power(n) non-monotone in n (a saw-tooth at small n).
``tasks_needed`` returns the first n whose power reaches the target, searched
exactly below the point where a bisection finds the crossing (down to
max(64, min(n/100, 500)) tasks below it: the saw-tooth is damped by the
random d, and the unit tests check the answer against a scan from n = 1).
Cost: about 40 exact power evaluations of O(√n) terms each — milliseconds for
hundreds of tasks, a second near 40,000, half a minute near 4 million (a drop of
0.1 point), where ``bdtr`` at large d dominates.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.typing import NDArray
from scipy.special import bdtr, gammaln, ndtri, xlog1py, xlogy

from monitor.stats.intervals import _require_int, _require_probability

__all__ = ["mcnemar_power", "minimum_detectable_effect", "paired_cells", "tasks_needed"]

FloatArray = NDArray[np.float64]
_TAIL_SDS = 12.0
_MAX_TASKS = 100_000_000
_SCAN_MAX = 500  # at most this many n below the bisection's crossing are scanned exactly


def _require_real(name: str, value: object, low: float, high: float, closed_high: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in ({low:g}, {high:g}{']' if closed_high else ')'}, got {value!r}")
    as_float = float(value)
    if not (low < as_float <= high if closed_high else low < as_float < high):  # rejects nan too
        raise ValueError(f"{name} must be a number in ({low:g}, {high:g}{']' if closed_high else ')'}, got {value!r}")
    return as_float


def paired_cells(baseline_rate: float, effect: float, discordance: float | None = None) -> tuple[float, float]:
    """(p10, p01): the baseline-only and candidate-only cell probabilities of a task pair (module notes).

    ``baseline_rate`` P in (0, 1), ``effect`` D in (0, P] (the candidate's rate is
    P − D), ``discordance`` ψ in [D, 1] or None (independent outcomes). Raises
    ValueError naming the value when the table is infeasible (a cell outside [0, 1]).
    """
    p = _require_real("baseline_rate", baseline_rate, 0.0, 1.0, closed_high=False)
    d = _require_real("effect", effect, 0.0, 1.0)
    if d > p:
        raise ValueError(f"effect must be <= baseline_rate (the candidate's rate is baseline_rate - effect), "
                         f"got effect={d:g} with baseline_rate={p:g}")
    if discordance is None:
        q = p * (1.0 - p + d) + (1.0 - p) * (p - d)
    else:
        q = _require_real("discordance", discordance, 0.0, 1.0)
    p10, p01 = (q + d) / 2.0, (q - d) / 2.0
    if p01 < -1e-12 or p10 > p + 1e-12 or p01 > 1.0 - p + 1e-12:
        low, high = d, min(2.0 * p - d, 2.0 * (1.0 - p) + d)
        raise ValueError(f"discordance={q:g} is infeasible for baseline_rate={p:g}, effect={d:g}; "
                         f"allowed: [{low:g}, {high:g}] (share of tasks exactly one agent solves)")
    return p10, max(p01, 0.0)


def _critical(d: NDArray[np.int64], alpha: float) -> NDArray[np.int64]:
    """k(d) = max{k : min(1, 2 P(Bin(d, 1/2) <= k)) <= alpha}, −1 where no k qualifies (vectorised over d).

    A normal-approximation start, then exact steps with ``bdtr`` until every k is the largest that
    rejects: the approximation is off by a few units at most, so a few passes suffice."""
    k = np.floor(d / 2.0 + ndtri(alpha / 2.0) * np.sqrt(d) / 2.0).astype(np.int64)
    k = np.clip(k, -1, d)

    def rejects(x: NDArray[np.int64]) -> NDArray[np.bool_]:
        ok: NDArray[np.bool_] = (x >= 0) & (np.minimum(1.0, 2.0 * bdtr(np.maximum(x, 0), d, 0.5)) <= alpha)
        return ok

    for _ in range(64):
        down = (k >= 0) & ~rejects(k)
        up = (k + 1 <= d) & rejects(k + 1)
        if not (down.any() or up.any()):
            break
        k = k - down + up
    return k


def _binom_pmf(k: NDArray[np.int64], n: int, p: float) -> FloatArray:
    """Bin(n, p) probabilities at k, through log-gamma (scipy.stats.binom.pmf costs ~30x more per call)."""
    log_pmf = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0) + xlogy(k, p) + xlog1py(n - k, -p)
    out: FloatArray = np.exp(log_pmf)
    return out


def _power_many(ns: NDArray[np.int64], p10: float, p01: float, alpha: float) -> FloatArray:
    """Exact power at each n of ``ns`` (module notes)."""
    q = p10 + p01
    out = np.zeros(ns.size)
    if q <= 0.0:
        return out
    share_c = p01 / q
    n_max = int(ns.max())
    sd = math.sqrt(n_max * q * (1.0 - q))
    d_low = max(0, math.floor(float(ns.min()) * q - _TAIL_SDS * sd - 1))
    d_high = min(n_max, math.ceil(n_max * q + _TAIL_SDS * sd + 1))
    d = np.arange(d_low, d_high + 1, dtype=np.int64)
    k = _critical(d, alpha)
    # P(c <= k(d) | d); k = -1 -> 0. Clip share into [0, 1] for bdtr.
    reject = np.where(k >= 0, bdtr(np.maximum(k, 0), d, min(max(share_c, 0.0), 1.0)), 0.0)
    for i, n in enumerate(ns.tolist()):
        width = math.sqrt(n * q * (1.0 - q))
        lo = max(d_low, math.floor(n * q - _TAIL_SDS * width - 1))
        hi = min(n, math.ceil(n * q + _TAIL_SDS * width + 1))
        if hi < lo:
            continue
        idx = slice(lo - d_low, hi - d_low + 1)
        out[i] = float(np.dot(_binom_pmf(d[idx], n, q), reject[idx]))
    clipped: FloatArray = np.clip(out, 0.0, 1.0)  # a sum of rounded terms may pass 1 by ~1e-12
    return clipped


def mcnemar_power(n_tasks: int, p10: float, p01: float, alpha: float = 0.05) -> float:
    """Exact power of the two-sided exact McNemar test at level ``alpha`` on ``n_tasks`` pairs (module notes).

    ``p10`` / ``p01``: probabilities of a baseline-only / candidate-only pair;
    rejections count when b > c (p10 > p01) — the effect's direction. n = 0 → 0.
    """
    n = _require_int("n_tasks", n_tasks)
    alpha = _require_probability("alpha", alpha)
    for name, value in (("p10", p10), ("p01", p01)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    if p10 + p01 > 1.0 + 1e-12:
        raise ValueError(f"p10 + p01 must be <= 1, got p10={p10}, p01={p01}")
    if n == 0:
        return 0.0
    return float(_power_many(np.array([n], dtype=np.int64), p10, p01, alpha)[0])


#: Float slack when comparing a power with its target: an exact tie (e.g. P(Bin(9, 1/2) >= 5) = 1/2)
#: counts as reaching it, as it does in exact arithmetic.
_TIE = 1e-12


def _first_reaching(p10: float, p01: float, alpha: float, power: float, n_max: int) -> int | None:
    power -= _TIE

    def power_at(n: int) -> float:
        return float(_power_many(np.array([n], dtype=np.int64), p10, p01, alpha)[0])

    high = 8
    while power_at(high) < power:
        if high >= n_max:
            return None
        high = min(2 * high, n_max)
    low = high // 2  # power(low) < power, unless low is small
    while high - low > 1:  # the crossing, as if power were monotone
        middle = (low + high) // 2
        if power_at(middle) >= power:
            high = middle
        else:
            low = middle
    start = max(1, high - max(64, min(high // 100, _SCAN_MAX)))
    ns = np.arange(start, high + 1, dtype=np.int64)
    reached = np.nonzero(_power_many(ns, p10, p01, alpha) >= power)[0]
    return int(ns[reached[0]]) if reached.size else high


def tasks_needed(baseline_rate: float, effect: float, discordance: float | None = None, alpha: float = 0.05,
                 power: float = 0.8, n_max: int = _MAX_TASKS) -> int | None:
    """The first number of tasks at which the exact McNemar test has ``power`` for the effect (module notes).

    None when ``n_max`` tasks do not reach it. Raises ValueError naming the value
    on an infeasible table or a level outside (0, 1).
    """
    p10, p01 = paired_cells(baseline_rate, effect, discordance)
    alpha = _require_probability("alpha", alpha)
    power = _require_probability("power", power)
    return _first_reaching(p10, p01, alpha, power, _require_int("n_max", n_max, minimum=1))


def minimum_detectable_effect(n_tasks: int, baseline_rate: float, discordance: float | None = None,
                              alpha: float = 0.05, power: float = 0.8, tolerance: float = 1e-4) -> float | None:
    """The smallest drop D the exact McNemar test on ``n_tasks`` tasks detects with ``power`` (module notes).

    ``baseline_rate`` is P (the baseline's share of solved tasks); ``discordance``
    ψ the share of tasks exactly one agent solves (e.g. the observed
    (b + c) / n), or None for independent outcomes. Power rises with D at a
    fixed n, so D is found by bisection to within ``tolerance`` (rounded up: the
    returned D has at least that power). None when no feasible D reaches it
    (e.g. too few tasks, or ψ so small that even D = ψ is not enough), or n = 0.
    """
    n = _require_int("n_tasks", n_tasks)
    p = _require_real("baseline_rate", baseline_rate, 0.0, 1.0, closed_high=False)
    alpha = _require_probability("alpha", alpha)
    power = _require_probability("power", power)
    if discordance is not None:
        _require_real("discordance", discordance, 0.0, 1.0)
    if n == 0:
        return None
    # The largest feasible drop: D <= P always; with a fixed ψ also D <= ψ and p10 = (ψ + D)/2 <= P.
    if discordance is None:
        d_min, d_max = 0.0, p
    else:
        q = float(discordance)
        d_min, d_max = max(0.0, q - 2.0 * (1.0 - p)), min(p, q, 2.0 * p - q)
    if d_max <= d_min or d_max <= 0.0:
        return None

    def power_of(d: float) -> float:
        p10, p01 = paired_cells(p, d, discordance)
        return mcnemar_power(n, p10, p01, alpha)

    if power_of(d_max) < power:
        return None
    low, high = d_min, d_max
    while high - low > tolerance:
        middle = (low + high) / 2.0
        if power_of(middle) >= power:
            high = middle
        else:
            low = middle
    return high
