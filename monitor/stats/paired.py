"""McNemar's test for paired success/failure outcomes (shadow traffic).

Each pair is one request served by the baseline and by the candidate. Only the
discordant pairs carry information about a difference:

* b  = pairs where only the baseline succeeded,
* c  = pairs where only the candidate succeeded.

Under H0 (equal success probability) b ~ Binomial(b + c, 1/2) given b + c.

This is a fixed-horizon test: evaluating it repeatedly on a growing stream
inflates false alarms. Continuous monitoring uses the anytime-valid tests in
``alerts/``; this module is for offline comparisons and for evidence shown
alongside an alert.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitor.stats.intervals import _require_int

__all__ = ["McNemarResult", "mcnemar", "mcnemar_from_outcomes"]


@dataclass(frozen=True)
class McNemarResult:
    """Evidence of a paired comparison of success rates.

    b             pairs where only the baseline succeeded
    c             pairs where only the candidate succeeded
    n             all pairs (concordant ones included)
    n_discordant  b + c
    p_exact       two-sided exact binomial p of b vs b + c at 1/2 (1.0 if b + c == 0)
    chi2          continuity-corrected statistic max(|b - c| - 1, 0)^2 / (b + c)
                  (0.0 if b + c == 0)
    p_chi2        upper tail of chi-square with 1 df at chi2 (asymptotic)
    net_flip      (c - b) / n: candidate-minus-baseline success rate (nan if n == 0)
    """

    b: int
    c: int
    n: int
    n_discordant: int
    p_exact: float
    chi2: float
    p_chi2: float
    net_flip: float


def mcnemar(b: int, c: int, n: int) -> McNemarResult:
    """McNemar's test from discordant counts b, c and the total number of pairs n.

    p_exact is the exact two-sided binomial p-value (doubling the smaller tail,
    which for p = 1/2 equals scipy.stats.binomtest's two-sided p), capped at 1.
    p_chi2 is the asymptotic p of the continuity-corrected statistic with one
    degree of freedom; the correction term |b - c| - 1 is floored at 0, so
    b == c gives chi2 = 0 and p_chi2 = 1 (statsmodels instead reports
    1 / (b + c) there). Prefer p_exact when b + c is small (say < 25).
    net_flip = (c - b) / n is the paired difference in success rate,
    candidate minus baseline.

    With no discordant pairs: p_exact = 1.0, chi2 = 0.0, p_chi2 = 1.0.
    With n == 0: additionally net_flip = nan.
    Raises ValueError unless b, c, n are integers >= 0 with b + c <= n.
    """
    b = _require_int("b", b)
    c = _require_int("c", c)
    n = _require_int("n", n)
    discordant = b + c
    if discordant > n:
        raise ValueError(
            f"n must be an integer >= b + c, got n={n} with b={b}, c={c}"
        )
    if discordant == 0:
        p_exact, chi2, p_chi2 = 1.0, 0.0, 1.0
    else:
        p_exact = min(1.0, 2.0 * _binomial_half_cdf(min(b, c), discordant))
        chi2 = max(abs(b - c) - 1, 0) ** 2 / discordant
        # Chi-square with 1 df is Z^2: P(chi2_1 > x) = P(|Z| > sqrt(x)).
        p_chi2 = math.erfc(math.sqrt(chi2 / 2.0))
    net_flip = (c - b) / n if n > 0 else math.nan
    return McNemarResult(
        b=b,
        c=c,
        n=n,
        n_discordant=discordant,
        p_exact=p_exact,
        chi2=chi2,
        p_chi2=p_chi2,
        net_flip=net_flip,
    )


#: Up to this many discordant pairs the tail is summed exactly in integers (well under 10 ms).
_EXACT_TAIL_MAX_N = 20_000


def _binomial_half_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2): sum_{i<=k} C(n, i) / 2^n.

    Exact integer sum, correctly rounded by int / int, for n up to
    _EXACT_TAIL_MAX_N (no scipy import on the usual path); beyond, scipy's
    ``bdtr`` (imported here only).
    """
    if n > _EXACT_TAIL_MAX_N:
        from scipy.special import bdtr

        return float(bdtr(k, n, 0.5))
    term = total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return total / (1 << n)


def _as_outcomes(name: str, values: Sequence[bool]) -> np.ndarray:
    """Coerce a sequence of outcomes to a 1-D bool array; only 0/1/True/False pass."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of booleans, got shape {array.shape}")
    if array.size == 0 or array.dtype == np.bool_:
        return array.astype(np.bool_)
    if array.dtype.kind in "iuf" and bool(np.all((array == 0) | (array == 1))):
        return array.astype(np.bool_)
    bad = next(
        (i for i, v in enumerate(values) if not (isinstance(v, (bool, np.bool_)) or v in (0, 1))),
        None,
    )
    shown = f"{values[bad]!r} at index {bad}" if bad is not None else f"dtype {array.dtype}"
    raise ValueError(f"{name} must contain only booleans (or 0/1), got {shown}")


def mcnemar_from_outcomes(
    baseline: Sequence[bool], candidate: Sequence[bool]
) -> McNemarResult:
    """McNemar's test from aligned per-pair outcomes (index i = pair i).

    Same guarantees as ``mcnemar``. Empty sequences give n = 0 (p_exact 1.0,
    net_flip nan). Raises ValueError when the lengths differ or an element is
    not a boolean (0/1 accepted).
    """
    base = _as_outcomes("baseline", baseline)
    cand = _as_outcomes("candidate", candidate)
    if base.size != cand.size:
        raise ValueError(
            "baseline and candidate must have equal lengths (one entry per pair),"
            f" got {base.size} and {cand.size}"
        )
    b = int(np.count_nonzero(base & ~cand))
    c = int(np.count_nonzero(cand & ~base))
    return mcnemar(b, c, int(base.size))
