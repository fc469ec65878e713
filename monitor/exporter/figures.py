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
from typing import Any

from monitor.aggregate import Aggregate, cost_per_solved
from monitor.exporter.families import QUANTILES
from monitor.pricing import PriceMap
from monitor.sketch import LogSketch
from monitor.stats.intervals import estimate_rate


def window_figures(agg: Aggregate, prices: PriceMap, at: float | None) -> list[float | None]:
    """The values of the ``HEALTH_GAUGES`` of a window with traces, None where one is left out.

    Exactly the figures :func:`monitor.aggregate.health` gives (same
    functions, same arithmetic; a test compares them), without the parts of
    the health vector no gauge exports (the harmful-action and over-refusal
    intervals, the latency mean, the tool error rate). ``n`` must be > 0.
    """
    n = agg.traces
    successes = agg.successes
    success = estimate_rate(successes, n)
    per_solved = cost_per_solved(agg.cost_usd(prices, at), successes)
    benign = int(agg.get("benign"))
    side_effect = estimate_rate(int(agg.get("side_effect_traces")), n)
    injection = estimate_rate(int(agg.get("prompt_injection")), n)
    return [success.rate, success.low, success.high, per_solved if math.isfinite(per_solved) else None,
            *(q if math.isfinite(q) else None for q in agg.latency.quantiles([q for _key, q in QUANTILES])),
            int(agg.get("harmful_action")) / n, int(agg.get("refused_benign")) / benign if benign else None,
            side_effect.rate, side_effect.low, side_effect.high, agg.get("side_effects") / n,
            injection.rate, injection.low, injection.high,
            agg.get("steps") / n, agg.get("steps_solved") / successes if successes else None]


def histogram_counts(sketch: Any, bounds: Sequence[float]) -> list[int]:
    """Cumulative counts per upper bound: ``sketch.count_below(b)`` for each ``b``.

    Same definition as :meth:`~monitor.sketch.LogSketch.count_below` (a value
    counts below ``b`` when its bucket's representative is ``<= b``, so a
    count is exact up to the sketch's relative accuracy around ``b``), in one
    pass over the buckets: representatives grow with the bucket index, so
    each bound is a largest index (found once per sketch layout and bounds)
    and each bucket is placed with one bisection.
    """
    order = sorted(range(len(bounds)), key=lambda i: bounds[i])
    limits = _index_limits(sketch.relative_accuracy, sketch.min_value, tuple(bounds[i] for i in order))
    added = [0] * (len(order) + 1)
    for index, n in sketch.buckets.items():
        added[bisect.bisect_left(limits, index)] += n
    result = [0] * len(bounds)
    seen = sketch.zero_count
    for rank, i in enumerate(order):
        seen += added[rank]
        result[i] = seen if bounds[i] >= 0.0 else 0
    return result


_INDEX_LIMITS: dict[tuple[float, float, tuple[float, ...]], list[float]] = {}


def _index_limits(relative_accuracy: float, min_value: float, bounds: tuple[float, ...]) -> list[float]:
    """Per sorted bound, the largest bucket index whose representative is ``<= bound``."""
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
