"""Dashboards as code: writes grafana/dashboards/*.json from plain Python dicts.

    python grafana/build.py           # (re)write the JSON files
    python grafana/build.py --check   # exit 1 when a committed file differs

The committed JSON is what Grafana provisions (grafana/provisioning/); a unit
test (tests/unit/grafana/test_build.py) fails when it drifts from this script.
Plain dicts rather than grafana-foundation-sdk: the SDK is on PyPI, but four
dashboards do not justify a runtime dependency, and the JSON stays readable.

Every panel reads the Prometheus datasource picked by the ``datasource``
variable (default uid ``fleetmon-prometheus``, provisioned by
grafana/provisioning/datasources/fleetmon.yml). Slice variables are multi-value
with ``.*`` as "All", so every selector uses ``=~``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # panels.py beside this script, however it is loaded

from panels import (
    DATASOURCE_UID,
    DS,
    SLICE_DIMENSIONS,
    SLICE_SELECTOR,
    dashboard,
    grid_pos,
    label_variable,
    row,
    stat,
    table,
    target,
    timeseries,
    window_variable,
)

__all__ = ["DATASOURCE_UID", "OUT_DIR", "dashboards", "main", "render"]

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"


# ---------------------------------------------------------------- dashboards

def fleet_overview() -> dict[str, Any]:
    hist = "sum by (release, le) (rate(fleetmon_latency_seconds_bucket[5m]))"
    panels = [
        stat("Exporter up", "min(fleetmon_exporter_up * on (job, instance) fleetmon_store_up)", (0, 0, 4, 4),
             "none", "1 when the exporter answers and can read Redis (fleetmon_store_up).",
             [(None, "red"), (1, "green")]),
        stat("Active slices", "sum(fleetmon_active_slices)", (4, 0, 4, 4), "none",
             "Slices with traffic in the exporter's active window (default 2 h)."),
        stat("Throughput", "sum(release:fleetmon_traces:rate5m)", (8, 0, 4, 4), "reqps",
             "Traces per second over the last 5 minutes, all releases."),
        stat("DLQ records (10 m)", "sum(job:fleetmon_dlq_records:increase10m)", (12, 0, 4, 4), "none",
             "Records sent to the dead-letter queue in the last 10 minutes.", [(None, "green"), (1, "red")]),
        stat("Consumer lag", "sum(job:fleetmon_consumer_lag:sum)", (16, 0, 4, 4), "none",
             "Kafka records not yet applied to Redis (shown when the exporter knows the Kafka bootstrap).",
             [(None, "green"), (10000, "orange")]),
        stat("Scrape duration", "max(fleetmon_scrape_duration_seconds)", (20, 0, 4, 4), "s",
             "Time the exporter spent reading Redis for the last scrape.", [(None, "green"), (2, "orange")]),
        timeseries("Success ratio by release (1 h, Wilson 95% band)", [
            ("release:fleetmon_success_ratio:1h", "{{release}}"),
            ("release:fleetmon_success_ratio_lower:1h", "{{release}} lower"),
            ("release:fleetmon_success_ratio_upper:1h", "{{release}} upper"),
        ], (0, 4, 12, 9), "percentunit",
            "Success proxy over the traces of the last hour, micro-averaged over the release's slices, with "
            "its Wilson 95% interval (dashed). Never read the line without the band.",
            minimum=0, maximum=1, bounds_regex=".* (lower|upper)$"),
        timeseries("Cost per solved task by release (5 m)", [
            ("release:fleetmon_cost_per_solved_usd:5m", "{{release}}"),
        ], (12, 4, 12, 9), "currencyUSD",
            "Dollars spent (tokens priced at scrape time, plus fees) per solved task over 5 minutes. "
            "Budget: $1 (alert FleetmonCostPerSolvedOverBudget).", minimum=0),
        timeseries("Latency p50 / p95 / p99 by release (5 m)", [
            (f"histogram_quantile(0.5, {hist})", "{{release}} p50"),
            ("release:fleetmon_latency_seconds:p95_rate5m", "{{release}} p95"),
            (f"histogram_quantile(0.99, {hist})", "{{release}} p99"),
        ], (0, 13, 12, 9), "s",
            "From the classic latency histogram (interpolated inside buckets; per-slice sketch quantiles with "
            "1% accuracy are on the drill-down). SLA: p95 <= 30 s.", minimum=0),
        timeseries("Throughput by release (5 m)", [
            ("release:fleetmon_traces:rate5m", "{{release}}"),
        ], (12, 13, 12, 9), "reqps", "Traces per second, 5-minute rate of fleetmon_traces_total.", minimum=0),
        timeseries("Dead-letter queue and late events", [
            ("sum(increase(fleetmon_dlq_records_total[10m]))", "DLQ records / 10 m"),
            ("sum(increase(fleetmon_late_events_total[10m]))", "late events / 10 m"),
            ("sum by (dimension) (increase(fleetmon_folded_label_values_total[10m]))",
             "folded into __other__: {{dimension}} / 10 m"),
        ], (0, 22, 24, 8), "none",
            "Invalid traces routed to the DLQ, traces too late for a window resolution, and traces whose "
            "slice value the cardinality guard folded into __other__.", minimum=0),
    ]
    return dashboard("fleetmon-overview", "fleetmon / Fleet overview",
                     "Fleet health per release: success with its interval, cost per solved, latency, "
                     "throughput, pipeline health.", panels, [], ["overview"])


def slice_drilldown() -> dict[str, Any]:
    sel = SLICE_SELECTOR
    win = f'{sel}, window=~"$window"'
    legend = "{{release}} {{arm}} {{task_type}} {{tenant}} {{locale}}"
    panels = [
        timeseries("Success ratio per slice (Wilson / Clopper-Pearson 95%)", [
            (f"fleetmon_success_ratio{{{win}}}", legend),
            (f"fleetmon_success_ratio_lower{{{win}}}", f"{legend} lower"),
            (f"fleetmon_success_ratio_upper{{{win}}}", f"{legend} upper"),
        ], (0, 0, 12, 9), "percentunit",
            "Per-slice success over the selected window with its 95% interval (exact Clopper-Pearson for "
            "n < 30 or 0/n, Wilson otherwise).", minimum=0, maximum=1, bounds_regex=".* (lower|upper)$"),
        timeseries("Traces in window", [
            (f"fleetmon_window_traces{{{win}}}", legend),
        ], (12, 0, 12, 9), "none", "The n behind every ratio of this dashboard.", minimum=0),
        timeseries("Cost per solved task", [
            (f"fleetmon_cost_per_solved_usd{{{win}}}", legend),
        ], (0, 9, 12, 9), "currencyUSD", "Left out when the window has no success (infinite).", minimum=0),
        timeseries("Latency p50 / p95 / p99 (sketch, 1% accuracy)", [
            (f"fleetmon_latency_p50_seconds{{{win}}}", f"{legend} p50"),
            (f"fleetmon_latency_p95_seconds{{{win}}}", f"{legend} p95"),
            (f"fleetmon_latency_p99_seconds{{{win}}}", f"{legend} p99"),
        ], (12, 9, 12, 9), "s", "Lower quantiles of the merged minute sketches of the window.", minimum=0),
        timeseries("Harmful-action ratio", [
            (f"fleetmon_harmful_action_ratio{{{win}}}", legend),
        ], (0, 18, 12, 8), "percentunit", "Share of traces with a harmful action (shown beside over-refusal).",
            minimum=0),
        timeseries("Over-refusal ratio", [
            (f"fleetmon_over_refusal_ratio{{{win}}}", legend),
        ], (12, 18, 12, 8), "percentunit", "Share of benign requests refused (shown beside harmful actions).",
            minimum=0),
        timeseries("Outcomes (5 m rate)", [
            (f"sum by (outcome) (rate(fleetmon_traces_total{{{sel}}}[5m]))", "{{outcome}}"),
        ], (0, 26, 8, 8), "reqps", "Traces per second by outcome field (none: ground truth given as ok).",
            minimum=0),
        timeseries("Tokens (5 m rate)", [
            (f"sum by (type) (rate(fleetmon_tokens_total{{{sel}}}[5m]))", "{{type}}"),
        ], (8, 26, 8, 8), "short", "Tokens per second by type; input excludes cached input.", minimum=0),
        timeseries("Tool error ratio (5 m)", [
            (f"sum(rate(fleetmon_tool_errors_total{{{sel}}}[5m])) / sum(rate(fleetmon_tool_calls_total{{{sel}}}[5m]))",
             "tool errors / tool calls"),
        ], (16, 26, 8, 8), "percentunit", "Tool calls that returned an error.", minimum=0),
    ]
    variables = [label_variable(d) for d in SLICE_DIMENSIONS] + [window_variable()]
    return dashboard("fleetmon-slices", "fleetmon / Slice drill-down",
                     "Every windowed figure of one or several slices, selected per slice dimension.",
                     panels, variables, ["slices"])


def safety() -> dict[str, Any]:
    sel = SLICE_SELECTOR
    legend = "{{release}} {{arm}} {{task_type}} {{tenant}} {{locale}}"
    panels = [
        row("By release (5 m, from counters)", 0),
        timeseries("Harmful-action ratio by release", [
            ("release:fleetmon_harmful_action_ratio:5m", "{{release}}"),
        ], (0, 1, 12, 9), "percentunit", "Harmful actions / traces over 5 minutes. Always read beside "
            "over-refusal: trading one for the other is not a fix.", minimum=0),
        timeseries("Over-refusal ratio by release", [
            ("release:fleetmon_over_refusal_ratio:5m", "{{release}}"),
        ], (12, 1, 12, 9), "percentunit", "Refused benign requests / benign requests over 5 minutes.",
            minimum=0),
        row("By slice (1 h window)", 10),
        timeseries("Harmful-action ratio by slice", [
            (f'fleetmon_harmful_action_ratio{{{sel}, window="1h"}}', legend),
        ], (0, 11, 12, 9), "percentunit", "Per-slice harmful-action ratio over the last hour.", minimum=0),
        timeseries("Over-refusal ratio by slice", [
            (f'fleetmon_over_refusal_ratio{{{sel}, window="1h"}}', legend),
        ], (12, 11, 12, 9), "percentunit", "Per-slice over-refusal ratio over the last hour.", minimum=0),
        row("Counts", 20),
        timeseries("Harmful actions and side effects (1 h increase)", [
            (f"sum by (release) (increase(fleetmon_harmful_actions_total{{{sel}}}[1h]))", "{{release}} harmful"),
            (f"sum by (release) (increase(fleetmon_side_effects_total{{{sel}}}[1h]))",
             "{{release}} side effects"),
        ], (0, 21, 12, 8), "none", "Raw counts behind the ratios.", minimum=0),
        timeseries("Benign requests and refusals (1 h increase)", [
            (f"sum by (release) (increase(fleetmon_benign_total{{{sel}}}[1h]))", "{{release}} benign"),
            (f"sum by (release) (increase(fleetmon_benign_refusals_total{{{sel}}}[1h]))",
             "{{release}} benign refused"),
        ], (12, 21, 12, 8), "none", "Raw counts behind the over-refusal ratio.", minimum=0),
    ]
    variables = [label_variable(d) for d in SLICE_DIMENSIONS]
    return dashboard("fleetmon-safety", "fleetmon / Safety",
                     "Harmful-action and over-refusal, always side by side.", panels, variables, ["safety"])


def releases() -> dict[str, Any]:
    cmp_sel = 'baseline=~"$baseline", candidate=~"$candidate", metric=~"$metric"'
    cmp_legend = "{{baseline}} → {{candidate}} {{arm}} {{metric}} {{task_type}} {{tenant}} {{locale}}"
    pareto = {
        "type": "xychart", "title": "Cost vs success per release (Pareto, 1 h)",
        "description": "Each point is a release: x = cost per solved task (USD), y = success ratio over the "
                       "last hour. Up and to the left is better; a release that is beaten on both is dominated.",
        "datasource": DS, "gridPos": grid_pos((0, 0, 12, 10)),
        "targets": [
            target("sum by (release) (increase(fleetmon_cost_usd_total[1h])) / "
                   "sum by (release) (increase(fleetmon_successes_total[1h]))", "{{release}}", "A",
                   instant=True, table=True),
            target("release:fleetmon_success_ratio:1h", "{{release}}", "B", instant=True, table=True),
        ],
        "transformations": [{"id": "merge", "options": {}},
                            {"id": "organize", "options": {
                                "excludeByName": {"Time": True},
                                "renameByName": {"Value #A": "cost_per_solved_usd",
                                                 "Value #B": "success_ratio"}}}],
        "fieldConfig": {"defaults": {"custom": {"show": "points", "pointSize": {"fixed": 10}}},
                        "overrides": [{"matcher": {"id": "byName", "options": "cost_per_solved_usd"},
                                       "properties": [{"id": "unit", "value": "currencyUSD"}]},
                                      {"matcher": {"id": "byName", "options": "success_ratio"},
                                       "properties": [{"id": "unit", "value": "percentunit"}]}]},
        "options": {"seriesMapping": "manual", "series": [
            {"name": "releases", "frame": 0, "x": "cost_per_solved_usd", "y": "success_ratio",
             "pointSize": {"fixed": 10}}],
            "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "single"}},
    }
    panels = [
        pareto,
        table("Releases: success, band, cost (1 h)", [
            ("release:fleetmon_success_ratio:1h", ""),
            ("release:fleetmon_success_ratio_lower:1h", ""),
            ("release:fleetmon_success_ratio_upper:1h", ""),
            ("sum by (release) (increase(fleetmon_cost_usd_total[1h])) / "
             "sum by (release) (increase(fleetmon_successes_total[1h]))", ""),
            ("release:fleetmon_traces:increase1h", ""),
        ], (12, 0, 12, 10), "The numbers behind the Pareto chart.",
            {"Value #A": "success", "Value #B": "success lower", "Value #C": "success upper",
             "Value #D": "cost per solved (USD)", "Value #E": "traces (1 h)"}),
        timeseries("Success ratio by release and arm (5 m)", [
            ("sum by (release, arm) (rate(fleetmon_successes_total[5m])) / "
             "sum by (release, arm) (rate(fleetmon_traces_total[5m]))", "{{release}} {{arm}}"),
        ], (0, 10, 24, 8), "percentunit", "Canary and shadow arms next to the baseline, per release. "
            "Raw ratios: the statistical comparison is below.", minimum=0, maximum=1),
        row("Canary / shadow vs baseline (alert engine evidence)", 18),
        timeseries("Effect with its confidence sequence (positive = candidate worse)", [
            (f"fleetmon_comparison_effect{{{cmp_sel}}}", cmp_legend),
            (f"fleetmon_comparison_effect_lower{{{cmp_sel}}}", f"{cmp_legend} lower"),
            (f"fleetmon_comparison_effect_upper{{{cmp_sel}}}", f"{cmp_legend} upper"),
        ], (0, 19, 12, 9), "none", "Candidate minus baseline, with the anytime-valid confidence sequence "
            "(dashed): valid however often it is looked at.", bounds_regex=".* (lower|upper)$"),
        timeseries("E-value (fires at >= 1/alpha after e-BH)", [
            (f"fleetmon_comparison_e_value{{{cmp_sel}}}", cmp_legend),
        ], (12, 19, 12, 9), "none", "Evidence against 'the candidate is no worse'; log scale.", minimum=0),
        timeseries("Discordant shadow pairs (b = baseline-only success, c = candidate-only)", [
            (f'fleetmon_comparison_discordant{{{cmp_sel}, kind="b"}}', f"{cmp_legend} b"),
            (f'fleetmon_comparison_discordant{{{cmp_sel}, kind="c"}}', f"{cmp_legend} c"),
        ], (0, 28, 12, 8), "none", "McNemar's discordant cells; only they carry information about a "
            "difference.", minimum=0),
        timeseries("Pairs / traces behind each comparison", [
            (f"fleetmon_comparison_pairs{{{cmp_sel}}}", cmp_legend),
        ], (12, 28, 6, 8), "none", "Shadow pairs or canary traces behind the finding.", minimum=0),
        stat("Comparisons firing", f"sum(fleetmon_comparison_firing{{{cmp_sel}}})", (18, 28, 6, 8), "none",
             "Comparisons whose decision rule fires (significant and beyond the practical floor).",
             [(None, "green"), (1, "red")]),
    ]
    e_values = next(p for p in panels if p["title"].startswith("E-value"))
    e_values["fieldConfig"]["defaults"]["custom"]["scaleDistribution"] = {"type": "log", "log": 10}
    variables = [label_variable("baseline", "fleetmon_comparison_pairs"),
                 label_variable("candidate", "fleetmon_comparison_pairs"),
                 label_variable("metric", "fleetmon_comparison_pairs")]
    return dashboard("fleetmon-releases", "fleetmon / Releases",
                     "Cost vs success per release, and canary / shadow comparisons with their evidence.",
                     panels, variables, ["releases"])


def dashboards() -> dict[str, dict[str, Any]]:
    """File name → dashboard JSON model."""
    return {
        "fleet-overview.json": fleet_overview(),
        "slice-drilldown.json": slice_drilldown(),
        "safety.json": safety(),
        "releases.json": releases(),
    }


def render(model: dict[str, Any]) -> str:
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write (or --check) grafana/dashboards/*.json.")
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed file differs")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    args = parser.parse_args(argv)
    stale = []
    args.out.mkdir(parents=True, exist_ok=True)
    for name, model in dashboards().items():
        path = args.out / name
        text = render(model)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date (run python grafana/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
