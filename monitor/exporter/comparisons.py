"""The release comparisons' evidence as ``fleetmon_comparison_*`` gauges (an extra collector).

:class:`ComparisonCollector` turns the finding snapshots its ``source`` returns (rows as
``alerts.engine.findings_snapshot`` writes them) into the comparison families of the metric
table, on every scrape. It evaluates nothing: the source decides what is current (the engine
in the same process, or the snapshot the engine saved in the store, empty once stale), and the
composition roots pick it. A NaN value is left out; ``+Inf`` is a valid sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client.core import Metric

from monitor.exporter.exposition import metric_family
from monitor.exporter.families import (
    COMPARISON_DISCORDANT,
    COMPARISON_E_VALUE,
    COMPARISON_EFFECT,
    COMPARISON_EFFECT_LOWER,
    COMPARISON_EFFECT_UPPER,
    COMPARISON_FIRING,
    COMPARISON_PAIRS,
    COMPARISON_PAIRS_NEEDED,
    COMPARISON_STATE,
    MetricSpec,
)
from monitor.slices import COMPARISON_EXCLUDED_DIMENSIONS

#: ``fleetmon_comparison_state``'s ``state`` values (alerts.comparison_state.STATES; one-hot per comparison).
STATES = ("warming", "no_evidence", "pending", "firing", "resolved")

#: The slice dimensions a comparison is labelled with by default.
SLICE_DIMENSIONS = ("task_type", "tenant", "locale")

#: The valued gauges and the snapshot field each one reads, in exposition order.
_VALUED: tuple[tuple[MetricSpec, str], ...] = (
    (COMPARISON_EFFECT, "effect"), (COMPARISON_EFFECT_LOWER, "effect_lower"),
    (COMPARISON_EFFECT_UPPER, "effect_upper"), (COMPARISON_E_VALUE, "e_value"), (COMPARISON_PAIRS, "pairs"),
    (COMPARISON_PAIRS_NEEDED, "pairs_needed"),
)

FindingsSource = Callable[[], list[dict[str, Any]]]


class ComparisonCollector:
    """Collector of the latest findings; ``dimensions`` the comparison's slice labels."""

    def __init__(self, source: FindingsSource, dimensions: Sequence[str] = SLICE_DIMENSIONS) -> None:
        self.source = source
        self.dimensions = tuple(d for d in dimensions if d not in COMPARISON_EXCLUDED_DIMENSIONS)

    def collect(self) -> Iterator[Metric]:
        valued = [(metric_family(spec, self.dimensions), field) for spec, field in _VALUED]
        firing = metric_family(COMPARISON_FIRING, self.dimensions)
        discordant = metric_family(COMPARISON_DISCORDANT, self.dimensions)
        state = metric_family(COMPARISON_STATE, self.dimensions)
        for row in self.source():
            dims = dict(row["slice"])
            values = [row["baseline"], row["candidate"], row["arm"], row["metric"],
                      *(dims.get(d, "") for d in self.dimensions)]
            for family, field in valued:
                value = row.get(field)  # pairs_needed: None for kinds without an estimate
                if isinstance(value, (int, float)) and not math.isnan(value):
                    family.add_metric(values, float(value))
            firing.add_metric(values, 1.0 if row["firing"] else 0.0)
            if row.get("state") in STATES:  # a snapshot from before the states has none
                for name in STATES:
                    state.add_metric([*values, name], 1.0 if row["state"] == name else 0.0)
            if row["arm"] == "shadow" and row["metric"] == "success_regression":
                discordant.add_metric([*values, "b"], row["b"])
                discordant.add_metric([*values, "c"], row["c"])
        yield from (family for family, _field in valued)
        yield firing
        yield discordant
        yield state
