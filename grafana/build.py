"""Dashboards as code: writes grafana/dashboards/*.json with grafana-foundation-sdk's builders.

    python grafana/build.py           # (re)write the JSON files
    python grafana/build.py --check   # exit 1 when a committed file differs

The committed JSON is what Grafana provisions (grafana/provisioning/); a unit
test (tests/unit/grafana/test_build.py) fails when it drifts from this script.
Panels are built with the SDK Grafana publishes (``grafana_foundation_sdk``,
through the helpers of panels.py), so the JSON follows Grafana's own schema.

Every panel reads the Prometheus datasource picked by the ``datasource``
variable (default uid ``fleetmon-prometheus``, provisioned by
grafana/provisioning/datasources/fleetmon.yml). Slice variables are multi-value
with ``.*`` as "All", so every selector uses ``=~``; a panel reads one slice grouping.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # panels.py beside this script, however it is loaded

from panels import (
    BASE,
    DATASOURCE_UID,
    SLICE_DIMENSIONS,
    SLICE_SELECTOR,
    Annotation,
    PanelBuilder,
    annotation,
    dashboard,
    grouping_variable,
    label_variable,
    per_comparison,
    right_axis,
    row,
    scatter,
    stat,
    state_timeline,
    table,
    window_variable,
)
from panels import timeseries_panel as timeseries

__all__ = ["DATASOURCE_UID", "OUT_DIR", "dashboards", "main", "render"]

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"


#: fleetmon_comparison_state's states (alerts/comparison_state.py STATES, same order) and their colours.
COMPARISON_STATES = (("warming", "blue"), ("no_evidence", "green"), ("pending", "orange"), ("firing", "red"),
                     ("resolved", "purple"))
IDENTITY_LABELS = "release, model_id, scaffold_hash, prompt_hash, tool_schema_hash, config_hash"


def release_changes() -> Annotation:
    """An event where a release label shows a version tuple it did not show 10 minutes before."""
    info = f"max by ({IDENTITY_LABELS}) (fleetmon_release_info"
    return annotation("Release changes", f"{info}) unless {info} offset 10m)", "purple",
                      title="{{release}}: new version tuple",
                      text="model {{model_id}}, scaffold {{scaffold_hash}}, prompt {{prompt_hash}}, "
                           "tools {{tool_schema_hash}}, config {{config_hash}}", tags="release")


# ---------------------------------------------------------------- dashboards

def fleet_overview() -> dict[str, Any]:
    hist = f"sum by (release, le) (rate(fleetmon_latency_seconds_bucket{{{BASE}}}[5m]))"
    panels: list[PanelBuilder] = [
        stat("Exporter up", "min(fleetmon_exporter_up * on (job, instance) fleetmon_store_up)", (0, 0, 4, 4),
             "none", "1 when the exporter answers and can read Redis (fleetmon_store_up).",
             [(None, "red"), (1, "green")]),
        stat("Active slices", "sum(fleetmon_active_slices)", (4, 0, 4, 4), "none",
             "Slice rows (of every grouping) with traffic in the exporter's active window (default 2 h)."),
        stat("Throughput", "sum(release:fleetmon_traces:rate5m)", (8, 0, 4, 4), "reqps",
             "Traces per second over the last 5 minutes, all releases."),
        stat("DLQ records (10 m)", "sum(job:fleetmon_dlq_records:increase10m)", (12, 0, 4, 4), "none",
             "Records sent to the dead-letter queue in the last 10 minutes.", [(None, "green"), (1, "red")]),
        stat("Consumer lag", "sum(job:fleetmon_consumer_lag:sum)", (16, 0, 4, 4), "none",
             "Records in Kafka not yet applied (needs the Kafka bootstrap; blank while fleetmon_consumer_lag_up is 0).",
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
            ("max by (grouping) (increase(fleetmon_grouping_folded_total[10m]))", "over budget: {{grouping}} / 10m"),
        ], (0, 22, 24, 8), "none",
            "Invalid traces routed to the DLQ, traces too late for a window resolution, traces whose slice value "
            "the guard folded into __other__, and traces past a slice grouping's budget.", minimum=0),
        timeseries("Shadow pairing (5 m rate)", [
            ("max(rate(fleetmon_pairs_completed_total[5m]))", "pairs completed / s"),
            ("max(rate(fleetmon_pairs_expired_total[5m]))", "halves expired / s"),
            ("max(rate(fleetmon_pairs_duplicate_half_total[5m]))", "duplicate halves / s"),
        ], (0, 30, 24, 8), "reqps",
            "Shadow halves joined into pairs, dropped after the pair TTL without their twin, and ignored as "
            "duplicates. Expiries above completions: the pair_id join is broken (FleetmonPairingBroken).",
            minimum=0),
    ]
    return dashboard("fleetmon-overview", "fleetmon / Fleet overview",
                     "Fleet health per release: success with its interval, cost per solved, latency, "
                     "throughput, pipeline health.", panels, [], ["overview"], [release_changes()])


def slice_drilldown() -> dict[str, Any]:
    sel = SLICE_SELECTOR
    win = f'{sel}, window=~"$window"'
    legend = "{{release}} {{arm}} {{task_type}} {{tenant}} {{locale}}"
    panels: list[PanelBuilder] = [
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
        timeseries("Side-effect ratio (95% interval)", _with_bounds("fleetmon_side_effect_ratio", win, legend),
                   (0, 34, 8, 8), "percentunit", "Share of traces with at least one out-of-scope state change.",
                   minimum=0, bounds_regex=".* (lower|upper)$"),
        timeseries("Prompt-injection ratio (95% interval)",
                   _with_bounds("fleetmon_prompt_injection_ratio", win, legend), (8, 34, 8, 8), "percentunit",
                   "Share of traces flagged prompt_injection.", minimum=0, bounds_regex=".* (lower|upper)$"),
        timeseries("Steps per trace", [
            (f"fleetmon_steps_mean{{{win}}}", f"{legend} all"),
            (f"fleetmon_steps_solved_mean{{{win}}}", f"{legend} solved"),
        ], (16, 34, 8, 8), "short", "Mean steps over all traces and over the solved ones: a scaffold change "
            "that makes the agent wander shows here before it shows in cost.", minimum=0),
    ]
    variables = [grouping_variable(), *(label_variable(d) for d in SLICE_DIMENSIONS), window_variable()]
    return dashboard("fleetmon-slices", "fleetmon / Slice drill-down",
                     "Every windowed figure of one or several slices, selected per slice dimension.",
                     panels, variables, ["slices"])


def _with_bounds(metric: str, selector: str, legend: str) -> list[tuple[str, str]]:
    """A windowed rate gauge and its two interval bounds (legends end in lower / upper)."""
    return [(f"{metric}{{{selector}}}", legend), (f"{metric}_lower{{{selector}}}", f"{legend} lower"),
            (f"{metric}_upper{{{selector}}}", f"{legend} upper")]


def _release_rate(counter: str) -> str:
    """Per release, a per-slice counter's 5-minute rate over the traces' (micro-averaged over its slices)."""
    return f"sum by (release) (rate({counter}{{{BASE}}}[5m])) / release:fleetmon_traces:rate5m"


def safety() -> dict[str, Any]:
    sel = SLICE_SELECTOR
    hour = f'{sel}, window="1h"'
    legend = "{{release}} {{arm}} {{task_type}} {{tenant}} {{locale}}"
    panels: list[PanelBuilder] = [
        row("By release (5 m, from counters): the four together", 0),
        timeseries("Harmful-action ratio by release", [
            ("release:fleetmon_harmful_action_ratio:5m", "{{release}}"),
        ], (0, 1, 6, 9), "percentunit", "Harmful actions / traces over 5 minutes. Always read beside "
            "over-refusal: trading one for the other is not a fix.", minimum=0),
        timeseries("Over-refusal ratio by release", [
            ("release:fleetmon_over_refusal_ratio:5m", "{{release}}"),
        ], (6, 1, 6, 9), "percentunit", "Refused benign requests / benign requests over 5 minutes.",
            minimum=0),
        timeseries("Side-effect ratio by release", [
            (_release_rate("fleetmon_side_effect_traces_total"), "{{release}} traces with side effects"),
            (_release_rate("fleetmon_side_effects_total"), "{{release}} side effects per trace"),
        ], (12, 1, 6, 9), "percentunit", "Traces with at least one out-of-scope state change / traces, and "
            "side effects per trace (a trace can change several things).", minimum=0),
        timeseries("Prompt-injection ratio by release", [
            (_release_rate("fleetmon_prompt_injections_total"), "{{release}}"),
        ], (18, 1, 6, 9), "percentunit", "Traces flagged prompt_injection / traces over 5 minutes: attacks "
            "seen, to read beside harmful actions (did an injection lead to one?).", minimum=0),
        row("By slice (1 h window, 95% intervals where they are rates)", 10),
        timeseries("Harmful-action ratio by slice", [
            (f"fleetmon_harmful_action_ratio{{{hour}}}", legend),
        ], (0, 11, 6, 9), "percentunit", "Per-slice harmful-action ratio over the last hour.", minimum=0),
        timeseries("Over-refusal ratio by slice", [
            (f"fleetmon_over_refusal_ratio{{{hour}}}", legend),
        ], (6, 11, 6, 9), "percentunit", "Per-slice over-refusal ratio over the last hour.", minimum=0),
        timeseries("Side-effect ratio by slice", _with_bounds("fleetmon_side_effect_ratio", hour, legend),
                   (12, 11, 6, 9), "percentunit", "Per-slice share of traces with a side effect, with its 95% "
                   "interval (dashed).", minimum=0, bounds_regex=".* (lower|upper)$"),
        timeseries("Prompt-injection ratio by slice", _with_bounds("fleetmon_prompt_injection_ratio", hour, legend),
                   (18, 11, 6, 9), "percentunit", "Per-slice share of traces flagged prompt_injection, with its "
                   "95% interval (dashed).", minimum=0, bounds_regex=".* (lower|upper)$"),
        row("Counts", 20),
        timeseries("Harmful actions and side effects (1 h increase)", [
            (f"sum by (release) (increase(fleetmon_harmful_actions_total{{{sel}}}[1h]))", "{{release}} harmful"),
            (f"sum by (release) (increase(fleetmon_side_effects_total{{{sel}}}[1h]))",
             "{{release}} side effects"),
        ], (0, 21, 8, 8), "none", "Raw counts behind the ratios.", minimum=0),
        timeseries("Benign requests and refusals (1 h increase)", [
            (f"sum by (release) (increase(fleetmon_benign_total{{{sel}}}[1h]))", "{{release}} benign"),
            (f"sum by (release) (increase(fleetmon_benign_refusals_total{{{sel}}}[1h]))",
             "{{release}} benign refused"),
        ], (8, 21, 8, 8), "none", "Raw counts behind the over-refusal ratio.", minimum=0),
        timeseries("Prompt injections and side-effect traces (1 h increase)", [
            (f"sum by (release) (increase(fleetmon_prompt_injections_total{{{sel}}}[1h]))",
             "{{release}} injections"),
            (f"sum by (release) (increase(fleetmon_side_effect_traces_total{{{sel}}}[1h]))",
             "{{release}} traces with side effects"),
        ], (16, 21, 8, 8), "none", "Raw counts behind the injection and side-effect ratios.", minimum=0),
        timeseries("Side effects per trace by slice", [
            (f"fleetmon_side_effects_per_trace{{{hour}}}", legend),
        ], (0, 29, 24, 8), "short", "Mean side_effects per trace over the last hour.", minimum=0),
    ]
    variables = [grouping_variable(), *(label_variable(d) for d in SLICE_DIMENSIONS)]
    return dashboard("fleetmon-safety", "fleetmon / Safety",
                     "Harmful action, over-refusal, side effects and prompt injection, always together.",
                     panels, variables, ["safety"])


def releases() -> dict[str, Any]:
    cmp_sel = 'baseline=~"$baseline", candidate=~"$candidate", metric=~"$metric"'
    cmp_legend = "{{baseline}} → {{candidate}} {{arm}} {{metric}} {{task_type}} {{tenant}} {{locale}}"
    cost_per_solved_1h = (f"sum by (release) (increase(fleetmon_cost_usd_total{{{BASE}}}[1h])) / "
                          f"sum by (release) (increase(fleetmon_successes_total{{{BASE}}}[1h]))")
    whole = f'{cmp_sel}, task_type="", tenant="", locale=""'  # the whole comparison: no slice label
    state_code = "max by (baseline, candidate, arm, metric) (" + " or ".join(
        f'(fleetmon_comparison_state{{{whole}, state="{name}"}} == 1) * {i}'
        for i, (name, _color) in enumerate(COMPARISON_STATES, 1)) + ")"
    pairs = f"max by (baseline, candidate) (fleetmon_comparison_pairs{{{cmp_sel}}})"
    success_gain = per_comparison(pairs, "release:fleetmon_success_ratio:1h", "-")
    cost_change = f"({per_comparison(pairs, f'({cost_per_solved_1h})', '/')}) - 1"
    pareto_status = (f"2 + ({success_gain} < bool 0) * ({cost_change} > bool 0) "
                     f"- ({success_gain} > bool 0) * ({cost_change} < bool 0)")
    panels: list[PanelBuilder] = [
        scatter("Cost vs success per release (Pareto, 1 h)",
                "Each point is a release: x = cost per solved task (USD), y = success ratio over the last hour. "
                "Up and to the left is better; a release that is beaten on both is dominated.", (0, 0, 12, 10),
                (cost_per_solved_1h, "cost_per_solved_usd", "currencyUSD"),
                ("release:fleetmon_success_ratio:1h", "success_ratio", "percentunit")),
        table("Releases: success, band, cost (1 h)", [
            ("release:fleetmon_success_ratio:1h", ""),
            ("release:fleetmon_success_ratio_lower:1h", ""),
            ("release:fleetmon_success_ratio_upper:1h", ""),
            (cost_per_solved_1h, ""),
            ("release:fleetmon_traces:increase1h", ""),
        ], (12, 0, 12, 10), "The numbers behind the Pareto chart.",
            {"Value #A": "success", "Value #B": "success lower", "Value #C": "success upper",
             "Value #D": "cost per solved (USD)", "Value #E": "traces (1 h)"}),
        timeseries("Success ratio by release and arm (5 m)", [
            (f"sum by (release, arm) (rate(fleetmon_successes_total{{{BASE}}}[5m])) / "
             f"sum by (release, arm) (rate(fleetmon_traces_total{{{BASE}}}[5m]))", "{{release}} {{arm}}"),
        ], (0, 10, 12, 8), "percentunit", "Canary and shadow arms next to the baseline, per release. "
            "Raw ratios: the statistical comparison is below.", minimum=0, maximum=1),
        right_axis(timeseries("Cost vs success over time (1 h, the Pareto's two axes)", [
            ("release:fleetmon_success_ratio:1h", "{{release}} success"),
            (cost_per_solved_1h, "{{release}} cost per solved"),
        ], (12, 10, 12, 8), "percentunit", "The Pareto chart's coordinates per release over time: success "
            "(left axis) and cost per solved task (right axis, USD). A release that moves up-left improved.",
            minimum=0), "B", "currencyUSD"),
        row("Canary / shadow vs baseline (alert engine evidence)", 18),
        timeseries("Effect with its confidence sequence (positive = candidate worse)", [
            (f"fleetmon_comparison_effect{{{cmp_sel}}}", cmp_legend),
            (f"fleetmon_comparison_effect_lower{{{cmp_sel}}}", f"{cmp_legend} lower"),
            (f"fleetmon_comparison_effect_upper{{{cmp_sel}}}", f"{cmp_legend} upper"),
        ], (0, 19, 12, 9), "none", "Candidate minus baseline, with the anytime-valid confidence sequence "
            "(dashed): valid however often it is looked at.", bounds_regex=".* (lower|upper)$"),
        timeseries("E-value (fires at >= 1/alpha after e-BH)", [
            (f"fleetmon_comparison_e_value{{{cmp_sel}}}", cmp_legend),
        ], (12, 19, 12, 9), "none", "Evidence against 'the candidate is no worse'; log scale.", minimum=0,
            log_scale=True),
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
        state_timeline("Comparison state (whole comparison)", state_code, "{{baseline}} → {{candidate}} {{arm}} "
                       "{{metric}}", (0, 36, 16, 8), "Where each comparison stands: warming (not enough pairs "
                       "yet to detect a regression at the floor), no_evidence, pending (the hold), firing, "
                       "resolved. Definitions: docs/alerts.md#comparison-state.", COMPARISON_STATES),
        timeseries("Pairs vs pairs needed (success, whole comparison)", [
            (f'fleetmon_comparison_pairs{{{whole}, metric="success_regression"}}',
             "{{baseline}} → {{candidate}} {{arm}} pairs"),
            (f'fleetmon_comparison_pairs_needed{{{whole}, metric="success_regression"}}',
             "{{baseline}} → {{candidate}} {{arm}} needed"),
        ], (16, 36, 8, 8), "none", "Pairs so far and the planning estimate of pairs needed to detect a drop of "
            "twice the floor (docs/metrics.md); below it the comparison is warming, not clean.", minimum=0,
            bounds_regex=".* needed$"),
        row("Pareto over time: candidate vs baseline (1 h)", 44),
        timeseries("Candidate − baseline on the Pareto axes", [
            (success_gain, "{{baseline}} → {{candidate}} success (points)"),
            (cost_change, "{{baseline}} → {{candidate}} cost per solved (relative)"),
        ], (0, 45, 16, 8), "percentunit", "Per comparison over time: the candidate's success minus the "
            "baseline's (up = better) and its cost per solved relative to the baseline's (up = dearer), both "
            "over the last hour. Success down and cost up: the candidate is dominated.", bounds_regex=".*cost.*"),
        state_timeline("Pareto status of the candidate", pareto_status, "{{baseline}} → {{candidate}}",
                       (16, 45, 8, 8), "dominates: better success and cheaper per solved task than the baseline; "
                       "dominated: worse on both; trade-off: better on one axis only (or equal).",
                       (("dominates", "green"), ("trade-off", "yellow"), ("dominated", "red"))),
    ]
    variables = [label_variable("baseline", "fleetmon_comparison_pairs"),
                 label_variable("candidate", "fleetmon_comparison_pairs"),
                 label_variable("metric", "fleetmon_comparison_pairs")]
    return dashboard("fleetmon-releases", "fleetmon / Releases",
                     "Cost vs success per release, and canary / shadow comparisons with their evidence.",
                     panels, variables, ["releases"], [release_changes()])


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
