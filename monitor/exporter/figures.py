"""What the exporter's per-slice samples are worth, computed from aggregates (pure arithmetic).

:func:`window_figures` values the :data:`~monitor.exporter.families.HEALTH_GAUGES` of one
(slice, window), exactly as :func:`monitor.aggregate.health` would; :func:`histogram_counts`
gives the cumulative bucket counts of the latency histogram from a slice's sketch. Both run
for every changed slice on every scrape, so they skip what no family exports.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from monitor.aggregate import Aggregate, cost_per_solved
from monitor.exporter.families import QUANTILES
from monitor.exporter.rates import rate_figures
from monitor.pricing import PriceMap
from monitor.sketch import LogSketch


def window_figures(agg: Aggregate, prices: PriceMap, at: float | None) -> list[float | None]:
    """The values of the ``HEALTH_GAUGES`` of a window with traces, None where one is left out.

    The figures :func:`monitor.aggregate.health` gives (same functions, same
    arithmetic, but for the exact rate intervals: :mod:`monitor.exporter.rates`,
    equal to scipy's to a relative 1e-12; a test compares them), without the
    parts of the health vector no gauge exports (the harmful-action and
    over-refusal intervals, the latency mean, the tool error rate). ``n`` must be > 0.
    """
    n = agg.traces
    successes = agg.successes
    success = rate_figures(successes, n)
    per_solved = cost_per_solved(agg.cost_usd(prices, at), successes)
    benign = int(agg.get("benign"))
    side_effect = rate_figures(int(agg.get("side_effect_traces")), n)
    injection = rate_figures(int(agg.get("prompt_injection")), n)
    return [*success, per_solved if math.isfinite(per_solved) else None,
            *(q if math.isfinite(q) else None for q in sketch_quantiles(agg.latency, _QUANTILE_LEVELS)),
            int(agg.get("harmful_action")) / n, int(agg.get("refused_benign")) / benign if benign else None,
            *side_effect, agg.get("side_effects") / n, *injection,
            agg.get("steps") / n, agg.get("steps_solved") / successes if successes else None]


_QUANTILE_LEVELS = tuple(q for _key, q in QUANTILES)


def _cumulative(sketch: Any) -> tuple[list[int], list[int]]:
    """The sketch's bucket indices in order, and the running count of its buckets up to each."""
    buckets = sketch.buckets
    keys = sorted(buckets)  # nearly sorted already (decoded in order, merges append): cheap
    return keys, list(accumulate(map(buckets.__getitem__, keys)))


def sketch_quantiles(sketch: Any, qs: Sequence[float]) -> list[float]:
    """``sketch.quantiles(qs)`` (:meth:`~monitor.sketch.LogSketch.quantiles`), by bisection of the running counts.

    The same lower quantiles, bucket for bucket (a test compares them): rank
    ``floor(q (n - 1))``, 0.0 below the zero count, else the representative of the
    first bucket whose running count passes the rank.
    """
    count, zero = sketch.count, sketch.zero_count
    if count == 0:
        return [math.nan] * len(qs)
    keys, running = _cumulative(sketch)
    out = []
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        rank = math.floor(q * (count - 1))
        if rank < zero:
            out.append(0.0)
        elif not keys:
            out.append(math.nan)  # counts that do not add up; the sketch's own loop would fail here
        else:
            out.append(sketch.value_of(keys[min(bisect.bisect_right(running, rank - zero), len(keys) - 1)]))
    return out


def histogram_counts(sketch: Any, bounds: Sequence[float]) -> list[int]:
    """Cumulative counts per upper bound: ``sketch.count_below(b)`` for each ``b``.

    Same definition as :meth:`~monitor.sketch.LogSketch.count_below` (a value
    counts below ``b`` when its bucket's representative is ``<= b``, so a
    count is exact up to the sketch's relative accuracy around ``b``), by
    bisection: representatives grow with the bucket index, so each bound is a
    largest index (found once per sketch layout and bounds) and its count is the
    running count of the buckets up to that index.
    """
    limits = _index_limits(sketch.relative_accuracy, sketch.min_value, tuple(bounds))
    keys, running = _cumulative(sketch)
    zero = sketch.zero_count
    result = []
    for bound, limit in zip(bounds, limits):
        below = bisect.bisect_right(keys, limit)
        result.append(zero + (running[below - 1] if below else 0) if bound >= 0.0 else 0)
    return result


_INDEX_LIMITS: dict[tuple[float, float, tuple[float, ...]], list[float]] = {}


def _index_limits(relative_accuracy: float, min_value: float, bounds: tuple[float, ...]) -> list[float]:
    """Per bound, the largest bucket index whose representative is ``<= bound``."""
    key = (relative_accuracy, min_value, bounds)
    limits = _INDEX_LIMITS.get(key)
    if limits is None:
        probe = LogSketch(relative_accuracy, min_value)

        def value(index: int) -> float:
            try:
                return probe.value_of(index)
            except OverflowError:
                return math.inf

        limits = []
        for bound in bounds:
            if not bound > 0.0:
                limits.append(-math.inf)  # representatives are > 0
            elif math.isinf(bound):
                limits.append(math.inf)
            else:
                index = math.floor(math.log(bound * (probe.gamma + 1.0) / 2.0) / math.log(probe.gamma))
                while value(index + 1) <= bound:
                    index += 1
                while value(index) > bound:
                    index -= 1
                limits.append(index)
        if len(_INDEX_LIMITS) > 64:
            _INDEX_LIMITS.clear()
        _INDEX_LIMITS[key] = limits
    return limits
