"""The exporter's metric table: every exported family's name, type, help text and labels (pure).

Every family served on ``/metrics`` — per-slice counters and windowed gauges, the pipeline and
exporter self-metrics, and the ``fleetmon_comparison_*`` evidence — is one :class:`MetricSpec`
here and nowhere else; the collectors build their families only from these specs.
:data:`METRICS` lists them all, and docs/metrics.md and README's metric tables are checked
against it (tests/unit/monitor/exporter/test_families.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitor.identity import COMPONENTS as IDENTITY_COMPONENTS

#: Stands in :attr:`MetricSpec.labels` for the slice labels (one per slice dimension).
SLICE = "<slice>"

TYPES = ("counter", "gauge", "histogram")


@dataclass(frozen=True)
class MetricSpec:
    """One exported family.

    ``name`` is the family name as prometheus_client takes it: a counter's
    samples add ``_total``, a histogram's ``_bucket``, ``_count`` and ``_sum``.
    ``labels`` are the label names in order; :data:`SLICE` marks where the
    slice labels go (none of them is a label the exporter sets itself).
    """

    name: str
    type: str
    help: str
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"metric {self.name}: type must be one of {TYPES}, got {self.type!r}")

    @property
    def sample_name(self) -> str:
        """The name of its samples (``_total`` on a counter; a histogram's series add their suffix)."""
        return self.name + "_total" if self.type == "counter" else self.name

    @property
    def per_slice(self) -> bool:
        return SLICE in self.labels

    def label_names(self, dimensions: Sequence[str] = ()) -> list[str]:
        """Its label names with :data:`SLICE` replaced by ``dimensions``."""
        return [name for label in self.labels for name in (dimensions if label == SLICE else (label,))]


def _counter(name: str, help: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, "counter", help, labels)


def _gauge(name: str, help: str, *labels: str) -> MetricSpec:
    return MetricSpec(name, "gauge", help, labels)


def _rate_gauges(name: str, help: str, what: str) -> tuple[MetricSpec, MetricSpec, MetricSpec]:
    """A windowed rate and the two bounds of its 95% interval (the success ratio's method)."""
    return (_gauge(name, help, SLICE, "window"),
            _gauge(name + "_lower", f"Lower bound of the 95% interval of the {what} (Wilson; Clopper-Pearson "
                   "for n < 30 or 0/n)", SLICE, "window"),
            _gauge(name + "_upper", f"Upper bound of the 95% interval of the {what}", SLICE, "window"))


# -- cumulative, per slice (from the totals) ---------------------------------------------------------------
TRACES = _counter("fleetmon_traces", "Traces folded, by outcome (none: no outcome field, ground truth given as ok)",
                  SLICE, "outcome")
#: Counters read straight off a slice's totals: (spec, aggregate field).
SIMPLE_COUNTERS = (
    (_counter("fleetmon_successes", "Traces counted as solved by the success proxy", SLICE), "successes"),
    (_counter("fleetmon_harmful_actions", "Traces flagged harmful_action", SLICE), "harmful_action"),
    (_counter("fleetmon_benign_refusals", "Benign requests that were refused (over-refusals)", SLICE),
     "refused_benign"),
    (_counter("fleetmon_benign", "Traces whose request deserved an answer (benign = true)", SLICE), "benign"),
    (_counter("fleetmon_side_effects", "Out-of-scope state changes (sum of side_effects)", SLICE), "side_effects"),
    (_counter("fleetmon_side_effect_traces", "Traces with at least one side effect", SLICE), "side_effect_traces"),
    (_counter("fleetmon_prompt_injections", "Traces flagged prompt_injection", SLICE), "prompt_injection"),
    (_counter("fleetmon_tool_errors", "Tool calls that returned an error", SLICE), "tool_errors"),
    (_counter("fleetmon_tool_calls", "Tool calls made", SLICE), "tool_calls"),
)
TOKENS = _counter("fleetmon_tokens", "Tokens by type; input excludes cached input, so the three types add up to "
                  "all tokens", SLICE, "type")
COST = _counter("fleetmon_cost_usd", "Cost in USD of all traces (tokens priced at scrape time with the price "
                "entries in force now, plus fees)", SLICE)
LATENCY = MetricSpec("fleetmon_latency_seconds", "histogram", "Trace latency; buckets derived from the slice's "
                     "1%-accurate log sketch", (SLICE, "le"))
TOTALS_FAMILIES = (TRACES, *(spec for spec, _field in SIMPLE_COUNTERS), TOKENS, COST, LATENCY)

# -- windowed, per slice and window ------------------------------------------------------------------------
#: The latency quantiles of the windowed gauges: (name part, q).
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))

WINDOW_TRACES = _gauge("fleetmon_window_traces", "Traces in the window (the n behind every windowed ratio)",
                       SLICE, "window")
TRACES_PER_SECOND = _gauge("fleetmon_traces_per_second", "Traces per second over the window", SLICE, "window")
#: The windowed gauges of the health vector, in exposition order (valued by figures.window_figures).
HEALTH_GAUGES = (
    _gauge("fleetmon_success_ratio", "Share of traces solved (success proxy), 0..1", SLICE, "window"),
    _gauge("fleetmon_success_ratio_lower", "Lower bound of the 95% interval of the success ratio "
           "(Wilson; Clopper-Pearson for n < 30 or 0/n)", SLICE, "window"),
    _gauge("fleetmon_success_ratio_upper", "Upper bound of the 95% interval of the success ratio", SLICE, "window"),
    _gauge("fleetmon_cost_per_solved_usd", "Cost in USD per solved trace (left out when nothing was solved)",
           SLICE, "window"),
    *(_gauge(f"fleetmon_latency_{key}_seconds", f"Latency {key} (lower quantile, 1% relative accuracy)",
             SLICE, "window") for key, _q in QUANTILES),
    _gauge("fleetmon_harmful_action_ratio", "Share of traces with a harmful action, 0..1", SLICE, "window"),
    _gauge("fleetmon_over_refusal_ratio", "Share of benign requests that were refused, 0..1", SLICE, "window"),
    *_rate_gauges("fleetmon_side_effect_ratio", "Share of traces with at least one side effect, 0..1",
                  "side-effect ratio"),
    _gauge("fleetmon_side_effects_per_trace", "Out-of-scope state changes per trace (mean of side_effects)",
           SLICE, "window"),
    *_rate_gauges("fleetmon_prompt_injection_ratio", "Share of traces flagged prompt_injection, 0..1",
                  "prompt-injection ratio"),
    _gauge("fleetmon_steps_mean", "Steps per trace (a trace without steps counts 0)", SLICE, "window"),
    _gauge("fleetmon_steps_solved_mean", "Steps per solved trace (left out when nothing was solved)",
           SLICE, "window"),
)
WINDOW_FAMILIES = (WINDOW_TRACES, TRACES_PER_SECOND, *HEALTH_GAUGES)

# -- pipeline and exporter ---------------------------------------------------------------------------------
DLQ_RECORDS = _counter("fleetmon_dlq_records", "Records sent to the dead-letter queue")
LATE_EVENTS = _counter("fleetmon_late_events", "Traces too late for at least one window resolution "
                       "(still in the totals)")
FOLDED_LABEL_VALUES = _counter("fleetmon_folded_label_values", "Traces whose value of a slice dimension was "
                               "folded into __other__ by the cardinality guard", "dimension")
GROUPING_FOLDED = _counter("fleetmon_grouping_folded", "Traces whose combination of a slice grouping's dimensions "
                           "was past the grouping's budget, counted in its __other__ row", "grouping")
APPLIED_OFFSET = _gauge("fleetmon_applied_offset", "Last Kafka offset applied to the store, per "
                        "<topic>:<partition>", "source")
CONSUMER_LAG = _gauge("fleetmon_consumer_lag", "Records in Kafka not yet applied to the store, per "
                      "<topic>:<partition>", "source")
CONSUMER_LAG_UP = _gauge("fleetmon_consumer_lag_up", "1 when this scrape exported fleetmon_consumer_lag, 0 when "
                         "the lag is unknown (Kafka unreachable or refusing the credentials; no fresh reading)")
ACTIVE_SLICES = _gauge("fleetmon_active_slices", "Slices with traffic within the active window")
SCRAPE_DURATION = _gauge("fleetmon_scrape_duration_seconds", "Time this scrape spent reading the store and "
                         "building the metrics")
STORE_UP = _gauge("fleetmon_store_up", "1 when the last scrape could read the store, else 0")
EXPORTER_UP = _gauge("fleetmon_exporter_up", "Always 1: the exporter answered this scrape")
#: The shadow pairer's health, read off the store's pipeline counters: (spec, counter name).
PAIRING_COUNTERS = (
    (_counter("fleetmon_pairs_completed", "Shadow pairs joined (both halves arrived within the TTL)"), "pairs"),
    (_counter("fleetmon_pairs_expired", "Shadow halves dropped after waiting longer than the pair TTL for "
              "their twin"), "pairs_expired"),
    (_counter("fleetmon_pairs_duplicate_half", "Shadow halves ignored because a half of the same arm and "
              "pair_id was already waiting"), "pairs_duplicate_half"),
)
STATE_RESTORES = _counter("fleetmon_state_restores", "Restores of the store from Kafka by workers that found it "
                          "had lost state they applied (Redis restarted empty, rolled back or flushed)")
STATE_GENERATION = _gauge("fleetmon_state_generation", "The store's state generation: Unix time in ms of the "
                          "first apply into it (a change = the state was lost; 0 before the first apply)")
MAX_SERIES = _gauge("fleetmon_exporter_max_series", "The exporter's series budget (exporter.max_series)")
FOLDED_SLICES = _gauge("fleetmon_exporter_folded_slices", "Slices this scrape folded into their release and "
                       "arm's __other__ row to stay within the series budget (0: every slice exported)")
PIPELINE_FAMILIES = (DLQ_RECORDS, LATE_EVENTS, FOLDED_LABEL_VALUES, GROUPING_FOLDED, APPLIED_OFFSET, CONSUMER_LAG,
                     CONSUMER_LAG_UP, ACTIVE_SLICES, SCRAPE_DURATION, STORE_UP, EXPORTER_UP,
                     *(spec for spec, _counter_name in PAIRING_COUNTERS), STATE_RESTORES, STATE_GENERATION,
                     MAX_SERIES, FOLDED_SLICES)

# -- release identities (monitor.identity; one series per release label the guard admitted) -------------------
RELEASE_INFO = _gauge("fleetmon_release_info", "Always 1: the release label's current version tuple (the one "
                      "seen latest in event time; empty = not sent)", "release", *IDENTITY_COMPONENTS)
RELEASE_IDENTITY_CHANGES = _counter("fleetmon_release_identity_changes", "Version tuples seen under the release "
                                    "label beyond its first (a deploy nobody re-labelled)", "release")
RELEASE_FAMILIES = (RELEASE_INFO, RELEASE_IDENTITY_CHANGES)

# -- release comparisons (the alert engine's latest findings) ----------------------------------------------
_COMPARED = ("baseline", "candidate", "arm", "metric", SLICE)
COMPARISON_EFFECT = _gauge("fleetmon_comparison_effect", "Estimated effect, positive = candidate worse (points "
                           "of success, USD or seconds).", *_COMPARED)
COMPARISON_EFFECT_LOWER = _gauge("fleetmon_comparison_effect_lower", "Lower bound of the effect's anytime-valid "
                                 "confidence sequence.", *_COMPARED)
COMPARISON_EFFECT_UPPER = _gauge("fleetmon_comparison_effect_upper", "Upper bound of the effect's anytime-valid "
                                 "confidence sequence.", *_COMPARED)
COMPARISON_E_VALUE = _gauge("fleetmon_comparison_e_value", "E-value of the anytime-valid test (fires at >= "
                            "1/alpha after e-BH).", *_COMPARED)
COMPARISON_PAIRS = _gauge("fleetmon_comparison_pairs", "Pairs (shadow) or canary traces behind the finding.",
                          *_COMPARED)
COMPARISON_FIRING = _gauge("fleetmon_comparison_firing", "1 when the decision rule fires (significant and "
                           "beyond the floor).", *_COMPARED)
COMPARISON_DISCORDANT = _gauge("fleetmon_comparison_discordant", "Discordant shadow pairs: kind b = "
                               "baseline-only success, c = candidate-only.", *_COMPARED, "kind")
COMPARISON_STATE = _gauge("fleetmon_comparison_state", "1 for the comparison's current state, 0 for the others "
                          "(warming, no_evidence, pending, firing, resolved; docs/alerts.md)", *_COMPARED, "state")
COMPARISON_PAIRS_NEEDED = _gauge("fleetmon_comparison_pairs_needed", "Planning estimate of the pairs needed to "
                                 "detect a drop of twice the floor (success regressions; docs/metrics.md)",
                                 *_COMPARED)
COMPARISON_FAMILIES = (COMPARISON_EFFECT, COMPARISON_EFFECT_LOWER, COMPARISON_EFFECT_UPPER, COMPARISON_E_VALUE,
                       COMPARISON_PAIRS, COMPARISON_FIRING, COMPARISON_DISCORDANT, COMPARISON_STATE,
                       COMPARISON_PAIRS_NEEDED)

#: Every exported family, once.
METRICS = (*TOTALS_FAMILIES, *WINDOW_FAMILIES, *PIPELINE_FAMILIES, *RELEASE_FAMILIES, *COMPARISON_FAMILIES)
