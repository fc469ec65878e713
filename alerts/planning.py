"""Planning the live shadow test: how many pairs until the engine's success e-process pages (pure, seeded).

The test is the engine's own (:mod:`alerts.paired`): the betting e-process of
:func:`monitor.stats.betting.flip_e_value` on the cumulative paired counts,
H0: net flip <= floor, deciding ``e >= 1/α'`` where α' is the success family's
share of the comparison's α (``Policy.alpha_share("success_regression")``),
divided by the number of slices sharing it when e-BH must reject one slice
alone (the worst case; with one slice, the whole fleet, e-BH is the plain test).

Simulation: each run is an iid stream of pairs, baseline-only with probability
p10 (X = +1), candidate-only with p01 (X = −1), concordant otherwise; the run
records the first look (every ``look_every`` pairs) at which the engine's test
rejects, or none within ``max_pairs``. Run ``r`` of seed ``s`` draws from
``SeedSequence([s, r])``: the same on every machine and whatever the number of
runs. Figures are order statistics (the ceil(q·runs)-th smallest, a run that
never paged counting as +inf) with a distribution-free 95% interval for each
quantile from the binomial law of order statistics (the Monte Carlo error).

Exactness and speed: every bet's log wealth is linear in the counts, with the
per-pair log factors of :func:`monitor.stats.betting.flip_log_factors`; with
a floor >= 0 a +1 only raises it and a 0 or −1 only lowers it, so over a chunk
of pairs the e-value is at most its value at (b at the chunk's end, the other
counts at its start). Chunks whose bound stays under 1/α' are skipped; the
others are scanned look by look, and a crossing is confirmed with
``flip_e_value`` itself, the call the engine makes. The answer equals a scan
of every look with ``flip_e_value`` (a unit test checks this).

Not modelled: the engine evaluates every ``alerts.interval`` and pages after
``alerts.hold`` of further evidence, so real pages come at the next look after
these figures plus the hold's pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import bdtr

from alerts.policy import Policy
from monitor.stats import betting

__all__ = ["LivePlan", "first_crossing", "live_level", "simulate_live_test"]

IntArray = NDArray[np.int64]
_SLACK = 1e-9          # log-space margin so a float rounding never skips a crossing (confirmed exactly anyway)
_FIRST_SEGMENT = 4096  # pairs drawn at first per run; doubled per segment up to _MAX_SEGMENT
_MAX_SEGMENT = 1 << 17


def live_level(policy: Policy, slices: int = 1) -> float:
    """α' of the success test: the success family's share of ``policy.alpha``, over ``slices`` (>= 1)."""
    if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:
        raise ValueError(f"slices must be an integer >= 1, got {slices!r}")
    return policy.alpha_share("success_regression") / slices


def _factors(floor: float) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per-bet log factors of one +1, one 0 and one −1 observation (the engine's bets)."""
    return (betting.flip_log_factors(1, 0, 1, floor, "greater"), betting.flip_log_factors(0, 0, 1, floor, "greater"),
            betting.flip_log_factors(0, 1, 1, floor, "greater"))


def _log_e(b: IntArray, z: IntArray, c: IntArray, factors: tuple[NDArray[np.float64], ...]) -> NDArray[np.float64]:
    """log e-value (uniform mixture of the bets) at each (b, zeros, c), vectorised."""
    up, zero, down = factors
    wealth = np.multiply.outer(b, up) + np.multiply.outer(z, zero) + np.multiply.outer(c, down)
    peak = wealth.max(axis=-1)
    out: NDArray[np.float64] = peak + np.log(np.exp(wealth - peak[..., None]).mean(axis=-1))
    return out


def first_crossing(steps: NDArray[np.int8], floor: float, alpha: float, look_every: int = 1,
                   start: tuple[int, int, int] = (0, 0, 0), chunk: int = 64) -> int | None:
    """The first look n (pairs, counted from 0 before ``start``) at which the engine's test rejects, or None.

    ``steps`` holds one pair per entry: +1 baseline only, −1 candidate only, 0
    concordant; ``start`` = (b, c, n) before them, n a multiple of ``look_every``.
    Rejects = ``flip_e_value(b, c, n, floor) >= 1/alpha`` (module notes). ``floor``
    in [0, 1).
    """
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"floor must be in [0, 1) for the live plan, got {floor!r}")
    if look_every < 1 or start[2] % look_every:
        raise ValueError(f"look_every must be >= 1 and divide the start count, got {look_every}, start {start}")
    factors = _factors(floor)
    threshold = math.log(1.0 / alpha) - _SLACK
    size = chunk * look_every
    b0, c0, n0 = start
    b = b0 + np.cumsum(steps == 1, dtype=np.int64)
    c = c0 + np.cumsum(steps == -1, dtype=np.int64)
    n = n0 + np.arange(1, steps.size + 1, dtype=np.int64)
    starts = np.arange(0, steps.size, size)
    ends = np.minimum(starts + size, steps.size) - 1
    before = starts - 1  # index of the count just before each chunk (-1: the start counts)
    b_start = np.where(before >= 0, b[np.maximum(before, 0)], b0)
    c_start = np.where(before >= 0, c[np.maximum(before, 0)], c0)
    z_start = np.where(before >= 0, n[np.maximum(before, 0)], n0) - b_start - c_start
    bound = _log_e(b[ends], z_start, c_start, factors)
    for i in np.nonzero(bound >= threshold)[0].tolist():
        looks = np.arange(starts[i], ends[i] + 1)
        looks = looks[n[looks] % look_every == 0]
        if looks.size == 0:
            continue
        log_e = _log_e(b[looks], n[looks] - b[looks] - c[looks], c[looks], factors)
        for j in looks[log_e >= threshold].tolist():
            if betting.flip_e_value(int(b[j]), int(c[j]), int(n[j]), floor) >= 1.0 / alpha:
                return int(n[j])
    return None


def _one_run(p10: float, p01: float, floor: float, alpha: float, seed: int, run: int, max_pairs: int,
             look_every: int) -> float:
    rng = np.random.default_rng(np.random.SeedSequence([seed, run]))
    b = c = n = 0
    segment = _FIRST_SEGMENT - _FIRST_SEGMENT % look_every or look_every
    while n < max_pairs:
        size = min(segment, max_pairs - n)
        u = rng.random(size)
        steps = np.where(u < p10, 1, np.where(u < p10 + p01, -1, 0)).astype(np.int8)
        hit = first_crossing(steps, floor, alpha, look_every, (b, c, n))
        if hit is not None:
            return float(hit)
        b, c, n = b + int((steps == 1).sum()), c + int((steps == -1).sum()), n + size
        segment = min(2 * segment, _MAX_SEGMENT - _MAX_SEGMENT % look_every or look_every)
        if n % look_every:  # the horizon ended between looks
            break
    return math.inf


def _order_statistic(sorted_values: NDArray[np.float64], q: float) -> float:
    return float(sorted_values[max(0, math.ceil(q * sorted_values.size) - 1)])


def _quantile_ci(sorted_values: NDArray[np.float64], q: float, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the q-quantile: the order statistics at the (1 ± level)/2 quantiles of
    Bin(runs, q), the law of how many runs fall below the true quantile."""
    size = sorted_values.size
    cdf = bdtr(np.arange(size + 1), size, q)  # P(Bin(size, q) <= k), k = 0..size
    low = int(np.searchsorted(cdf, (1 - level) / 2))  # the smallest k with cdf >= (1 - level) / 2: binom.ppf
    high = int(np.searchsorted(cdf, 1 - (1 - level) / 2)) + 1
    return float(sorted_values[max(0, low - 1)]), float(sorted_values[min(size, high) - 1])


@dataclass(frozen=True)
class LivePlan:
    """Pairs until the engine's success test pages, over ``runs`` seeded runs (module notes).

    Quantiles are +inf when that share of runs did not page within ``max_pairs``.
    """

    floor: float
    alpha: float
    runs: int
    seed: int
    max_pairs: int
    look_every: int
    detected_share: float
    median_pairs: float
    median_ci: tuple[float, float]
    p80_pairs: float
    p80_ci: tuple[float, float]
    pairs_at_power: float
    power: float


def simulate_live_test(p10: float, p01: float, floor: float, alpha: float, *, runs: int = 200, seed: int = 0,
                       max_pairs: int = 1_000_000, look_every: int = 1, power: float = 0.8) -> LivePlan:
    """Seeded runs of the live test on pairs with baseline-only / candidate-only probabilities p10 / p01.

    ``alpha`` is the level α' the engine decides at (see :func:`live_level`);
    ``pairs_at_power`` is the ``power``-quantile: the pairs by which that share of
    runs paged. Raises ValueError naming the value on bad input.
    """
    for name, value in (("p10", p10), ("p01", p01)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    if p10 + p01 > 1.0 + 1e-12:
        raise ValueError(f"p10 + p01 must be <= 1, got p10={p10}, p01={p01}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    for name, value, minimum in (("runs", runs, 1), ("max_pairs", max_pairs, 1), ("look_every", look_every, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    pairs = np.sort(np.array([_one_run(p10, p01, floor, alpha, seed, r, max_pairs, look_every)
                              for r in range(runs)]))
    return LivePlan(floor=floor, alpha=alpha, runs=runs, seed=seed, max_pairs=max_pairs, look_every=look_every,
                    detected_share=float(np.isfinite(pairs).mean()),
                    median_pairs=_order_statistic(pairs, 0.5), median_ci=_quantile_ci(pairs, 0.5),
                    p80_pairs=_order_statistic(pairs, 0.8), p80_ci=_quantile_ci(pairs, 0.8),
                    pairs_at_power=_order_statistic(pairs, power), power=power)
