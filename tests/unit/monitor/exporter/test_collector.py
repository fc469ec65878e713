"""The Prometheus collector over the in-memory store (no services needed)."""

from __future__ import annotations

import dataclasses
import gc
import math
import random
import urllib.request

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate import Aggregate, health
from monitor.cli.main import build_parser
from monitor.exporter.collector import LATENCY_BUCKETS_SECONDS, FleetCollector, build_registry, serve
from monitor.exporter.figures import histogram_counts
from monitor.exporter.labels import label_name
from monitor.fold import fold
from monitor.groupings import grouping_name
from monitor.schema import Trace
from monitor.sketch import LogSketch
from monitor.slices import CardinalityGuard, Slicer, parse_slice_id
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES, make_traces


def filled_store(traces: list[Trace], slicer: Slicer | None = None) -> MemoryStore:
    store = MemoryStore()
    store.apply(fold(traces, slicer or Slicer(), NOW), "fleetmon.traces:0", 0, len(traces) - 1)
    return store


def scrape(collector: FleetCollector) -> dict[str, list]:
    registry, _ = build_registry(collector.store, collector.prices, now=collector.now,
                                 extra_collectors=collector.extra_collectors,
                                 active_window_seconds=collector.active_window_seconds)
    text = generate_latest(registry).decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def by_labels(samples: list, **labels: str) -> list:
    return [s for s in samples if all(s.labels.get(k, "") == v for k, v in labels.items())]


def traces_of(traces: list[Trace], sid: str) -> list[Trace]:
    """The traces a stored row (of one grouping) holds: those whose full key has its values."""
    row = parse_slice_id(sid)
    slicer = Slicer()
    return [t for t in traces if set(row) <= set(slicer.key(t))]


def row_labels(sid: str) -> dict[str, str]:
    """A row's labels: its dimensions and its grouping (which tells it from the rows of other groupings)."""
    key = parse_slice_id(sid)
    return {**{label_name(d): v for d, v in key}, "grouping": grouping_name(key)}


def test_counters_match_the_totals_and_prices_at_now():
    traces = make_traces(600)
    store = filled_store(traces)
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW))
    totals = store.totals()
    # 2 releases: release × arm 2 rows, × task_type 2, × tenant 4, × locale 2, × task_type × tenant 4, × locale 2
    assert len(totals) == 16
    for sid, agg in totals.items():
        labels = row_labels(sid)
        for outcome in ("success", "failure", "escalated", "abandoned", "none"):
            (s,) = by_labels(samples["fleetmon_traces_total"], outcome=outcome, **labels)
            assert s.value == agg.get("outcome:" + outcome)
        (s,) = by_labels(samples["fleetmon_successes_total"], **labels)
        assert s.value == agg.successes
        (s,) = by_labels(samples["fleetmon_cost_usd_total"], **labels)
        assert s.value == pytest.approx(agg.cost_usd(PRICES, NOW), rel=1e-12)
        tokens = {t: by_labels(samples["fleetmon_tokens_total"], type=t, **labels)[0].value
                  for t in ("input", "cached_input", "output")}
        assert tokens["input"] + tokens["cached_input"] == agg.tokens("tokens_in")
        assert tokens["output"] == agg.tokens("tokens_out")
        for metric, field in (("fleetmon_harmful_actions_total", "harmful_action"),
                              ("fleetmon_benign_refusals_total", "refused_benign"),
                              ("fleetmon_benign_total", "benign"), ("fleetmon_side_effects_total", "side_effects"),
                              ("fleetmon_side_effect_traces_total", "side_effect_traces"),
                              ("fleetmon_prompt_injections_total", "prompt_injection"),
                              ("fleetmon_tool_errors_total", "tool_errors"),
                              ("fleetmon_tool_calls_total", "tool_calls")):
            (s,) = by_labels(samples[metric], **labels)
            assert s.value == agg.get(field), metric
        buckets = by_labels(samples["fleetmon_latency_seconds_bucket"], **labels)
        assert [b.labels["le"] for b in buckets][-1] == "+Inf"
        expected = [agg.latency.count_below(b) for b in LATENCY_BUCKETS_SECONDS] + [agg.get("latency_count")]
        assert [b.value for b in buckets] == expected
        (count,) = by_labels(samples["fleetmon_latency_seconds_count"], **labels)
        (total,) = by_labels(samples["fleetmon_latency_seconds_sum"], **labels)
        assert count.value == agg.get("latency_count") == agg.latency.count
        assert total.value == pytest.approx(agg.get("latency_sum_seconds"))


def test_windowed_gauges_equal_health_of_the_merged_minutes():
    traces = make_traces(800, seed=3, spread_seconds=4000)
    store = filled_store(traces)
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW))
    for window, seconds in (("5m", 300), ("1h", 3600)):
        first = int(NOW - seconds) // 60 * 60
        for sid in store.totals():
            inside = [t for t in traces_of(traces, sid) if first <= t.ts < NOW + 60]
            agg = Aggregate.of(inside)
            h = health(agg, PRICES, first)
            labels = row_labels(sid)
            labels["window"] = window
            (n,) = by_labels(samples["fleetmon_window_traces"], **labels)
            assert n.value == len(inside)
            (rate,) = by_labels(samples["fleetmon_traces_per_second"], **labels)
            assert rate.value == pytest.approx(len(inside) / (NOW - first))
            (s,) = by_labels(samples["fleetmon_success_ratio"], **labels)
            (lo,) = by_labels(samples["fleetmon_success_ratio_lower"], **labels)
            (hi,) = by_labels(samples["fleetmon_success_ratio_upper"], **labels)
            assert (s.value, lo.value, hi.value) == pytest.approx(
                (h["success"]["rate"], h["success"]["low"], h["success"]["high"]))
            assert lo.value <= s.value <= hi.value
            (cps,) = by_labels(samples["fleetmon_cost_per_solved_usd"], **labels)
            assert cps.value == pytest.approx(h["cost_per_solved_usd"])
            for q in ("p50", "p95", "p99"):
                (lat,) = by_labels(samples[f"fleetmon_latency_{q}_seconds"], **labels)
                assert lat.value == pytest.approx(h["latency_seconds"][q])
            (harm,) = by_labels(samples["fleetmon_harmful_action_ratio"], **labels)
            (over,) = by_labels(samples["fleetmon_over_refusal_ratio"], **labels)
            assert harm.value == pytest.approx(h["safety"]["harmful_action_rate"])
            assert over.value == pytest.approx(h["safety"]["over_refusal_rate"])


def test_safety_and_steps_gauges_equal_health_with_intervals():
    rng = random.Random(11)
    traces = [dataclasses.replace(t, steps=rng.randint(1, 30), prompt_injection=rng.random() < 0.1,
                                  side_effects=rng.choice((0, 0, 0, 1, 3)))
              for t in make_traces(600, seed=9, spread_seconds=200)]
    samples = scrape(FleetCollector(filled_store(traces), PRICES, now=lambda: NOW))
    first = int(NOW - 300) // 60 * 60
    for sid in filled_store(traces).totals():
        inside = [t for t in traces_of(traces, sid) if first <= t.ts < NOW + 60]
        h = health(Aggregate.of(inside), PRICES, first)
        labels = {**row_labels(sid), "window": "5m"}

        def value(name: str, labels: dict[str, str] = labels) -> float:
            (sample,) = by_labels(samples[name], **labels)
            return sample.value

        safety = h["safety"]
        for metric, key in (("side_effect", "side_effect"), ("prompt_injection", "prompt_injection")):
            rate, low, high = (value(f"fleetmon_{metric}_ratio{part}") for part in ("", "_lower", "_upper"))
            assert (rate, low, high) == pytest.approx((safety[f"{key}_rate"], *safety[f"{key}_ci"]))
            assert low <= rate <= high
        assert value("fleetmon_side_effect_ratio") == sum(t.side_effects > 0 for t in inside) / len(inside)
        assert value("fleetmon_side_effects_per_trace") == pytest.approx(safety["side_effects_per_trace"])
        assert value("fleetmon_steps_mean") == pytest.approx(sum(t.steps for t in inside) / len(inside))
        solved = [t.steps for t in inside if t.success]
        assert value("fleetmon_steps_solved_mean") == pytest.approx(sum(solved) / len(solved))
        assert value("fleetmon_steps_solved_mean") == pytest.approx(h["steps"]["solved_mean"])
    unsolved = [t for t in traces if not t.success]
    quiet = scrape(FleetCollector(filled_store(unsolved), PRICES, now=lambda: NOW))
    assert "fleetmon_steps_solved_mean" not in quiet and quiet["fleetmon_steps_mean"]


def test_inactive_slices_keep_counters_but_get_no_window_gauges_and_no_nan():
    old = make_traces(50, seed=1, now=NOW - 3 * 3600, spread_seconds=60, releases=("old",), tenants=("t",))
    fresh = make_traces(50, seed=2, spread_seconds=100, releases=("new",), tenants=("t",))
    # a slice active 1.5 h ago: inside the 2 h active window, nothing in the last hour
    quiet = make_traces(20, seed=4, now=NOW - 5400, spread_seconds=60, releases=("quiet",), tenants=("t",))
    store = filled_store(old + fresh + quiet)
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW))
    releases = {s.labels["release"] for s in samples["fleetmon_successes_total"]}
    assert releases == {"old", "new", "quiet"}
    assert {s.labels["release"] for s in samples["fleetmon_window_traces"]} == {"new", "quiet"}
    assert {s.value for s in by_labels(samples["fleetmon_window_traces"], release="quiet")} == {0}
    assert not by_labels(samples["fleetmon_success_ratio"], release="quiet")
    assert not by_labels(samples["fleetmon_success_ratio"], release="old")
    for name, rows in samples.items():
        for s in rows:
            assert math.isfinite(s.value), (name, s)
    (active,) = samples["fleetmon_active_slices"]
    assert active.value == 2 * 6  # two releases, one row in each of the six default groupings


def test_no_success_leaves_out_cost_per_solved_but_keeps_the_ratio():
    traces = [t for t in make_traces(200, seed=5, spread_seconds=200) if not t.success]
    samples = scrape(FleetCollector(filled_store(traces), PRICES, now=lambda: NOW))
    assert samples["fleetmon_success_ratio"] and all(s.value == 0 for s in samples["fleetmon_success_ratio"])
    assert "fleetmon_cost_per_solved_usd" not in samples


def test_pipeline_metrics_and_self_metrics():
    slicer = Slicer(guard=CardinalityGuard(max_values=3))
    traces = make_traces(300, seed=6, tenants=tuple(f"tenant{i}" for i in range(10)))
    store = filled_store(traces, slicer)
    store.apply(_counters_delta(dlq=7))
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW))
    assert samples["fleetmon_dlq_records_total"][0].value == 7
    assert samples["fleetmon_late_events_total"][0].value == 0
    folded = {s.labels["dimension"]: s.value for s in samples["fleetmon_folded_label_values_total"]}
    admitted = slicer.guard.admitted["tenant"]
    assert folded == {"release": 0, "arm": 0, "task_type": 0, "locale": 0,
                      "tenant": sum(1 for t in traces if t.tenant not in admitted)}
    # no grouping past its budget here: zeros for every grouping but release × arm
    assert {s.labels["grouping"]: s.value for s in samples["fleetmon_grouping_folded_total"]} == {
        "task_type": 0, "tenant": 0, "locale": 0, "task_type,tenant": 0, "task_type,locale": 0}
    assert {s.labels["tenant"] for s in samples["fleetmon_successes_total"]} <= admitted | {"__other__", ""}
    (offset,) = samples["fleetmon_applied_offset"]
    assert offset.labels == {"source": "fleetmon.traces:0"} and offset.value == 299
    assert samples["fleetmon_exporter_up"][0].value == 1
    assert samples["fleetmon_store_up"][0].value == 1
    scrape_cost = samples["fleetmon_scrape_duration_seconds"][0].value  # reported, not a timing bar
    assert 0 < scrape_cost
    assert "fleetmon_consumer_lag" not in samples  # no Kafka configured
    for name in ("completed", "expired", "duplicate_half"):  # zeros before any pairing, so rate() has a series
        assert samples[f"fleetmon_pairs_{name}_total"][0].value == 0
    store.apply(_counters_delta(pairs=40, pairs_expired=3, pairs_duplicate_half=2))
    store.apply(_counters_delta(pairs=2, pairs_expired=1))
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW))
    assert [samples[f"fleetmon_pairs_{name}_total"][0].value for name in ("completed", "expired", "duplicate_half")
            ] == [42, 4, 2]


def _counters_delta(**counters: int):
    from monitor.delta import BatchDelta
    return BatchDelta(counters=dict(counters))


def test_a_failing_store_is_store_up_0_not_a_failed_scrape():
    class Broken(MemoryStore):
        def active_slices(self, since=None):
            raise ConnectionError("redis is down")

    samples = scrape(FleetCollector(Broken(), PRICES, now=lambda: NOW))
    assert samples["fleetmon_store_up"][0].value == 0
    assert samples["fleetmon_exporter_up"][0].value == 1
    assert "fleetmon_traces_total" not in samples


def test_extra_collectors_hook_adds_families_and_a_broken_one_is_skipped():
    def comparison():
        family = GaugeMetricFamily("fleetmon_comparison_effect", "effect", labels=["baseline", "candidate"])
        family.add_metric(["r1", "r2"], -0.03)
        yield family

    class Broken:
        def collect(self):
            raise RuntimeError("boom")

    class AsObject:
        def collect(self):
            yield GaugeMetricFamily("fleetmon_comparison_pairs", "pairs", value=12)

    store = filled_store(make_traces(50))
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW,
                                    extra_collectors=[comparison, Broken(), AsObject()]))
    assert samples["fleetmon_comparison_effect"][0].value == -0.03
    assert samples["fleetmon_comparison_pairs"][0].value == 12
    assert samples["fleetmon_exporter_up"][0].value == 1


def test_label_names_are_sanitised_and_do_not_collide():
    assert label_name("tenant") == "tenant"
    assert label_name("team-name") == "team_name"
    assert label_name("window") == "slice_window"
    assert label_name("le") == "slice_le"
    assert label_name("__name__") == "slice_name__"
    assert label_name("9lives") == "_9lives"


def test_tag_dimensions_become_labels():
    traces = [Trace(trace_id=f"x{i}", ts=NOW - 10, model_id="m", release="r", success=True, ok=True,
                    tags={"team-name": "blue"}) for i in range(5)]
    store = filled_store(traces, Slicer(dimensions=("release", "team-name")))
    samples = scrape(FleetCollector(store, PRICES, now=lambda: NOW))
    assert [s.labels for s in samples["fleetmon_successes_total"]] == [
        {"release": "r", "team_name": "", "grouping": ""},   # the release × arm row: no team_name
        {"release": "r", "team_name": "blue", "grouping": "team-name"}]


@pytest.mark.parametrize("seed", range(5))
def test_histogram_counts_equal_count_below(seed):
    rng = random.Random(seed)
    sketch = LogSketch()
    for _ in range(rng.randint(0, 500)):
        sketch.add(rng.choice((0.0, rng.lognormvariate(0, 2))))
    bounds = (5.0, 0.1, 1e-7, 0.0, 30.0, 1e9)
    assert histogram_counts(sketch, bounds) == [sketch.count_below(b) for b in bounds]


def test_registry_is_fresh_and_global_registry_untouched():
    before = set(REGISTRY._names_to_collectors)
    store = filled_store(make_traces(20))
    registry_a, _ = build_registry(store, PRICES, now=lambda: NOW)
    registry_b, _ = build_registry(store, PRICES, now=lambda: NOW)
    assert registry_a is not registry_b
    assert generate_latest(registry_a) .count(b"fleetmon_traces_total") > 0
    assert set(REGISTRY._names_to_collectors) == before


def test_serve_answers_over_http():
    store = filled_store(make_traces(30))
    server = serve(store, PRICES, port=0, host="127.0.0.1", now=lambda: NOW)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"fleetmon_traces", "fleetmon_success_ratio", "fleetmon_exporter_up"} <= names


def test_cli_registers_the_exporter_command():
    args = build_parser().parse_args(["exporter", "--port", "9999", "--redis", "redis://x:1/2"])
    # host left to fleetmon.toml / its default (exporter.host) when the flag is absent
    assert (args.command, args.port, args.host, args.redis, args.active_window) == (
        "exporter", 9999, None, "redis://x:1/2", "2h")


def test_the_garbage_collector_is_held_off_during_the_store_read_and_restored_after_it():
    seen: list[bool] = []

    class Watching(MemoryStore):
        def active_slices(self, since=None):
            seen.append(gc.isenabled())
            return super().active_slices(since)

    class Broken(MemoryStore):
        def active_slices(self, since=None):
            seen.append(gc.isenabled())
            raise ConnectionError("redis is down")

    store = Watching()
    store.apply(fold(make_traces(50, seed=3), Slicer(), NOW), "fleetmon.traces:0", 0, 49)
    assert gc.isenabled()
    try:
        scrape(FleetCollector(store, PRICES, now=lambda: NOW))
        assert seen == [False] and gc.isenabled()  # off while the store was read, on again after
        assert scrape(FleetCollector(Broken(), PRICES, now=lambda: NOW))["fleetmon_store_up"][0].value == 0
        assert seen == [False, False] and gc.isenabled()  # on again after a failed read too
        gc.disable()  # an embedding process that turned it off keeps it off
        scrape(FleetCollector(store, PRICES, now=lambda: NOW))
        assert seen == [False, False, False] and not gc.isenabled()
    finally:
        gc.enable()
