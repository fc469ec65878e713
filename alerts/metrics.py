"""Exported evidence: the alert engine's latest findings as ``fleetmon_comparison_*`` gauges (edge).

An extra collector for :class:`monitor.exporter.collector.FleetCollector`: on each
scrape it turns the most recent findings into gauges labelled ``baseline``,
``candidate``, ``arm``, ``metric`` (the finding's kind:
``success_regression``, ``cost_regression``, ...) and one label per slice
dimension (empty for the whole comparison). It reads what the last
evaluation decided — from the engine in the same process (``fleetmon run``)
or from the snapshot the engine saves in the store (``fleetmon exporter``
next to ``fleetmon alerts``); it never evaluates anything itself. A snapshot
older than ``max_age_seconds`` is not exported (the engine is down: the
gauges disappear rather than freeze).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from alerts.engine import FINDINGS_STATE_NAME, AlertEngine, findings_snapshot
from monitor.store.base import Store

SLICE_DIMENSIONS = ("task_type", "tenant", "locale")


def from_engine(engine: AlertEngine) -> Callable[[], list[dict[str, Any]]]:
    return lambda: findings_snapshot(engine.findings)


def from_store(store: Store, max_age_seconds: float = 300.0,
               clock: Callable[[], float] = time.time) -> Callable[[], list[dict[str, Any]]]:
    def read() -> list[dict[str, Any]]:
        saved = store.get_state(FINDINGS_STATE_NAME) or {}
        if clock() - saved.get("ts", float("-inf")) > max_age_seconds:
            return []
        return saved.get("findings", [])
    return read


class ComparisonCollector:
    def __init__(self, source: Callable[[], list[dict[str, Any]]],
                 dimensions: Sequence[str] = SLICE_DIMENSIONS) -> None:
        self.source = source
        self.dimensions = tuple(d for d in dimensions if d not in ("release", "arm", "model_id"))

    def collect(self) -> Iterator[Metric]:
        labels = ["baseline", "candidate", "arm", "metric", *self.dimensions]
        families = {
            "effect": GaugeMetricFamily("fleetmon_comparison_effect",
                                        "Estimated effect, positive = candidate worse (points of success, USD or seconds).",
                                        labels=labels),
            "effect_lower": GaugeMetricFamily("fleetmon_comparison_effect_lower",
                                              "Lower bound of the effect's anytime-valid confidence sequence.", labels=labels),
            "effect_upper": GaugeMetricFamily("fleetmon_comparison_effect_upper",
                                              "Upper bound of the effect's anytime-valid confidence sequence.", labels=labels),
            "e_value": GaugeMetricFamily("fleetmon_comparison_e_value",
                                         "E-value of the anytime-valid test (fires at >= 1/alpha after e-BH).", labels=labels),
            "pairs": GaugeMetricFamily("fleetmon_comparison_pairs",
                                       "Pairs (shadow) or canary traces behind the finding.", labels=labels),
            "firing": GaugeMetricFamily("fleetmon_comparison_firing",
                                        "1 when the decision rule fires (significant and beyond the floor).", labels=labels),
        }
        discordant = GaugeMetricFamily("fleetmon_comparison_discordant",
                                       "Discordant shadow pairs: kind b = baseline-only success, c = candidate-only.",
                                       labels=[*labels, "kind"])
        for row in self.source():
            dims = {d: v for d, v in row["slice"]}
            values = [row["baseline"], row["candidate"], row["arm"], row["metric"],
                      *(dims.get(d, "") for d in self.dimensions)]
            for name in ("effect", "effect_lower", "effect_upper", "e_value", "pairs"):
                value = row[name]
                if isinstance(value, (int, float)) and not math.isnan(value):  # +Inf is a valid sample
                    families[name].add_metric(values, float(value))
            families["firing"].add_metric(values, 1.0 if row["firing"] else 0.0)
            if row["arm"] == "shadow" and row["metric"] == "success_regression":
                discordant.add_metric([*values, "b"], row["b"])
                discordant.add_metric([*values, "c"], row["c"])
        yield from families.values()
        yield discordant
