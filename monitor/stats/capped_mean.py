"""Anytime-valid tests and bounds on the relative increase of a capped mean, from five additive sums (pure).

For cost and latency. Each pair gives the baseline's and the candidate's value,
each capped at ``cap`` (b, c in [0, cap]); the quantity is the relative
increase of the capped means, r = E[c] / E[b] - 1. For a ratio rho = 1 + r0,
H0: E[c_i - rho b_i | past] <= 0 is tested with the increments

    xi_i = (c_i - rho b_i) / K,   K = max(1, rho) cap,   so xi_i >= -1,

and the empirical-Bernstein supermartingale of Fan, Grama & Liu (2015) /
Howard et al. (2021): for xi >= -1 and 0 <= lambda < 1,
exp(lambda xi - psi(lambda) xi^2) <= 1 + lambda xi with
psi(lambda) = -log(1 - lambda) - lambda, so

    M_t(lambda) = exp(lambda S1 - psi(lambda) S2),  S1 = sum xi_i,  S2 = sum xi_i^2,

has E[M_t] <= 1 under H0, whatever the distributions (skewed, heavy-tailed up
to the cap, baseline and candidate not exchangeable, any dependence on the
past). S1 and S2 are functions of n, sum b, sum c, sum b^2, sum c^2 and
sum bc alone, for every rho, so the store keeps those sums and the ratio is
chosen when the test is read. The e-value is the mixture over the fixed bets
``monitor.stats.betting.BET_FRACTIONS`` with ``BET_WEIGHTS``; Ville's
inequality makes P(ever >= 1/alpha) <= alpha. The reverse direction
(H0: E[rho b_i - c_i | past] <= 0, for recovery) uses -xi.

The e-value at r0 is valid for the whole composite null r <= r0 (b >= 0, so
E[c - rho0 b] <= E[c - rho b] for rho <= rho0). ``e_value`` reports the
smallest e-value over r0 and the ratios of a fixed grid under it — at most the
one at r0, so still valid — and ``lower_bound`` is the largest ratio r such
that r and every grid ratio under it are rejected; so ``e_value(s, r0) >=
1/alpha`` iff ``lower_bound(s, alpha) >= r0``, up to the bisection's last step.

Assumed, and stated on every page: values above the cap count as the cap
(the functional is the capped mean; the number of pairs over the cap is
kept), and the pairs are the ones the counters count, each once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from monitor.stats.betting import BET_FRACTIONS, BET_WEIGHTS

__all__ = ["CappedSums", "e_value", "log_factors", "lower_bound", "point_ratio"]

_LAMBDA = np.asarray(BET_FRACTIONS, dtype=np.float64)
_PSI = -np.log1p(-_LAMBDA) - _LAMBDA
_LOG_W = np.log(np.asarray(BET_WEIGHTS, dtype=np.float64))
#: Relative increases r of the fixed grid (1 + r log-spaced from 0.01 to 21).
GRID = np.expm1(np.linspace(math.log(0.01), math.log(21.0), 241))


class CappedSums(NamedTuple):
    """n pairs, and over them the sums of the capped baseline b, candidate c, b^2, c^2 and b c."""

    n: int
    b: float
    c: float
    bb: float
    cc: float
    bc: float
    cap: float

    @classmethod
    def of(cls, counters: Mapping[str, Any]) -> CappedSums:
        """From a mapping with these field names (a finding's ``counters``, or a difference of two: a
        tiny negative left by float rounding in a sum of non-negative values reads as 0)."""
        b, c, bb, cc = (max(0.0, float(counters[k])) for k in ("b", "c", "bb", "cc"))
        return cls(int(counters["n"]), b, c, bb, cc, float(counters["bc"]), float(counters["cap"]))


def _moments(s: CappedSums, ratios: NDArray[np.float64], sign: float) -> tuple[NDArray[np.float64],
                                                                               NDArray[np.float64]]:
    rho = 1.0 + ratios
    k = np.maximum(1.0, rho) * s.cap
    s1 = sign * (s.c - rho * s.b) / k
    s2 = np.maximum((s.cc - 2.0 * rho * s.bc + rho * rho * s.bb) / (k * k), 0.0)
    return s1, s2


def _log_wealth(s: CappedSums, ratios: NDArray[np.float64], sign: float) -> NDArray[np.float64]:
    """log M(lambda_j) per ratio (rows) and bet (columns)."""
    s1, s2 = _moments(s, ratios, sign)
    return s1[:, None] * _LAMBDA[None, :] - s2[:, None] * _PSI[None, :]


def _log_mix(log_wealth: NDArray[np.float64]) -> NDArray[np.float64]:
    terms = log_wealth + _LOG_W[None, :]
    peak = terms.max(axis=1)
    out: NDArray[np.float64] = peak + np.log(np.exp(terms - peak[:, None]).sum(axis=1))
    return out


def _check(s: CappedSums) -> None:
    if s.n < 0 or not s.cap > 0 or not all(math.isfinite(v) for v in s):
        raise ValueError(f"capped sums need n >= 0, a finite cap > 0 and finite sums, got {s!r}")


def log_factors(s: CappedSums, ratio: float, direction: str = "greater") -> NDArray[np.float64]:
    """Per-bet log wealth of the pairs in ``s`` against ``ratio``: "greater" tests H0 r <= ratio,
    "less" H0 r >= ratio (the e-detector of recovery adds these over new pairs)."""
    _check(s)
    sign = 1.0 if direction == "greater" else -1.0
    out: NDArray[np.float64] = _log_wealth(s, np.array([float(ratio)]), sign)[0]
    return out


def _e_at(s: CappedSums, ratios: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.exp(np.minimum(_log_mix(_log_wealth(s, ratios, 1.0)), 700.0))


def e_value(s: CappedSums, ratio: float) -> float:
    """e-value of the composite H0: relative increase of the capped means <= ``ratio`` (module notes)."""
    _check(s)
    if s.n == 0:
        return 1.0
    ratios = np.append(GRID[GRID < ratio], float(ratio))
    return float(_e_at(s, ratios).min())


def lower_bound(s: CappedSums, alpha: float) -> float:
    """Largest r such that every grid ratio under r and r itself are rejected at ``alpha``; -1 if none is."""
    _check(s)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if s.n == 0:
        return -1.0
    rejected = _e_at(s, GRID) >= 1.0 / alpha
    if not rejected[0]:
        return -1.0
    if rejected.all():
        return float(GRID[-1])
    first = int(np.argmin(rejected))  # the first grid ratio not rejected
    lo, hi = float(GRID[first - 1]), float(GRID[first])
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _e_at(s, np.array([mid]))[0] >= 1.0 / alpha:
            lo = mid
        else:
            hi = mid
    return lo


def point_ratio(s: CappedSums) -> float:
    """The estimate c/b - 1 of the capped means (0 when there are no pairs; inf for a zero baseline)."""
    if s.n == 0 or s.c == 0:
        return 0.0 if s.n == 0 or s.b == 0 else -1.0
    return s.c / s.b - 1.0 if s.b > 0 else math.inf
