"""What the exporter's per-slice samples are, computed from aggregates (pure).

The families built from a slice's totals (:data:`SIMPLE_COUNTERS`, the
latency histogram of :func:`histogram_counts`) and from its windowed sums
(:data:`HEALTH_GAUGES`, valued by :func:`window_figures`). Kept apart from
:mod:`monitor.exporter.collector` (the collector, an edge) because they are plain
arithmetic on aggregates, and fast: they run for every changed slice on
every scrape.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Sequence

from monitor.aggregate import Aggregate, cost_per_solved
from monitor.pricing import PriceMap
from monitor.sketch import LogSketch
from monitor.stats.intervals import estimate_rate

#: The latency quantiles of the windowed gauges: (name part, q).
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

#: Counter families read straight off a slice's totals: (name, help, aggregate field).
SIMPLE_COUNTERS = (
    ("fleetmon_successes", "Traces counted as solved by the success proxy", "successes"),
    ("fleetmon_harmful_actions", "Traces flagged harmful_action", "harmful_action"),
    ("fleetmon_benign_refusals", "Benign requests that were refused (over-refusals)", "refused_benign"),
    ("fleetmon_benign", "Traces whose request deserved an answer (benign = true)", "benign"),
    ("fleetmon_side_effects", "Out-of-scope state changes (sum of side_effects)", "side_effects"),
    ("fleetmon_tool_errors", "Tool calls that returned an error", "tool_errors"),
    ("fleetmon_tool_calls", "Tool calls made", "tool_calls"),
)

#: The windowed gauges of the health vector, in exposition order: (name, help), valued by window_figures.
HEALTH_GAUGES = (
    ("fleetmon_success_ratio", "Share of traces solved (success proxy), 0..1"),
    ("fleetmon_success_ratio_lower", "Lower bound of the 95% interval of the success ratio "
     "(Wilson; Clopper-Pearson for n < 30 or 0/n)"),
    ("fleetmon_success_ratio_upper", "Upper bound of the 95% interval of the success ratio"),
    ("fleetmon_cost_per_solved_usd", "Cost in USD per solved trace (left out when nothing was solved)"),
    *((f"fleetmon_latency_{key}_seconds", f"Latency {key} (lower quantile, 1% relative accuracy)")
      for key, _q in QUANTILES),
    ("fleetmon_harmful_action_ratio", "Share of traces with a harmful action, 0..1"),
    ("fleetmon_over_refusal_ratio", "Share of benign requests that were refused, 0..1"),
)


def window_figures(agg: Aggregate, prices: PriceMap, at: float | None) -> list[float | None]:
    """The :data:`HEALTH_GAUGES` values of a window with traces, None where one is left out.

    Exactly the figures :func:`monitor.aggregate.health` gives (same
    functions, same arithmetic; a test compares them), without the parts of
    the health vector no gauge exports (the intervals of the safety rates,
    the means): this runs for every changed (slice, window) on every scrape.
    """
    n = agg.traces
    successes = agg.successes
    success = estimate_rate(successes, n)
    per_solved = cost_per_solved(agg.cost_usd(prices, at), successes)
    benign = int(agg.get("benign"))
    return [success.rate, success.low, success.high, per_solved if math.isfinite(per_solved) else None,
            *(q if math.isfinite(q) else None for q in agg.latency.quantiles([q for _key, q in QUANTILES])),
            int(agg.get("harmful_action")) / n, int(agg.get("refused_benign")) / benign if benign else None]


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


_INDEX_LIMITS: dict[tuple, list[float]] = {}


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
