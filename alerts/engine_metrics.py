"""Exported evidence: the alert engine's latest findings as ``fleetmon_comparison_*`` gauges (edge).

An extra collector for :class:`monitor.exporter.FleetCollector`: on each
scrape it turns the engine's most recent findings into gauges labelled
``baseline``, ``candidate``, ``arm``, ``metric`` (the finding's kind:
``success_regression``, ``cost_regression``, ...) and one label per slice
dimension (empty for the whole comparison). It reads what the last tick
decided; it never evaluates anything itself.
"""

from __future__ import annotations

import math
from typing import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from alerts.engine import AlertEngine

SLICE_DIMENSIONS = ("task_type", "tenant", "locale")


class ComparisonCollector:
    def __init__(self, engine: AlertEngine, dimensions: Sequence[str] = SLICE_DIMENSIONS) -> None:
        self.engine = engine
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
        for f in self.engine.findings:
            dims = dict(f.slice_key)
            values = [f.comparison.baseline_release, f.comparison.candidate_release, f.comparison.arm, f.kind,
                      *(dims.get(d, "") for d in self.dimensions)]
            for name, value in (("effect", f.effect), ("effect_lower", f.effect_low), ("effect_upper", f.effect_high),
                                ("e_value", f.e_value), ("pairs", f.n_pairs), ("firing", 1.0 if f.fires else 0.0)):
                if isinstance(value, (int, float)) and math.isfinite(value):
                    families[name].add_metric(values, float(value))
            if f.comparison.arm == "shadow" and f.kind == "success_regression":
                discordant.add_metric([*values, "b"], f.b)
                discordant.add_metric([*values, "c"], f.c)
        yield from families.values()
        yield discordant
