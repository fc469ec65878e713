"""Prometheus exporter: a collector that reads the store at scrape time (an edge: thin).

:class:`FleetCollector` implements prometheus_client's collector protocol
(``collect() -> Iterable[Metric]``). Nothing polls in the background and no
metric lives in a module-level registry: every scrape reads the store once
and turns what it read into metric families; :func:`build_registry` makes a
fresh :class:`~prometheus_client.CollectorRegistry` holding one collector,
and :func:`serve` puts that registry behind an HTTP server (the ``fleetmon
exporter`` command, or a worker that mounts the exporter in its own process).

What is exported (every name, type and label is listed in docs/metrics.md):

* cumulative per-slice counters from the store's totals, for every slice the
  store knows (``fleetmon_traces_total{outcome}``, tokens, dollars priced at
  scrape time with the price entries in force *now*, safety counts and a
  classic latency histogram derived from the slice's sketch);
* windowed per-slice gauges for the slices active within ``active_window``
  (default 2 h), one sample per ``window`` label (``5m``, ``1h``): success
  ratio with its 95% interval (Wilson, or Clopper–Pearson for small n or 0/n,
  as :func:`monitor.aggregate.health` decides), cost per solved, latency
  p50/p95/p99 as three gauges (names carry the quantile, so a rule reads
  ``fleetmon_latency_p95_seconds`` without a label matcher), safety ratios,
  throughput and the trace count behind every ratio;
* pipeline self-metrics: DLQ and late counts, folded label values per
  dimension, applied offsets, the consumer lag when a Kafka bootstrap is
  configured, the active slice count, the scrape duration, ``store_up`` and
  ``exporter_up``.

Labels: the slice labels are the slice id's dimensions (guarded by the
cardinality guard: at most ``cap`` values per dimension plus ``__other__``),
nothing else carries a free-form value. A dimension whose name is not a valid
Prometheus label name is sanitised (``[^A-Za-z0-9_]`` → ``_``), and one that
collides with a label this exporter uses itself (``window``, ``outcome``,
``type``, ``le``, …) is prefixed with ``slice_``. A slice that lacks a
dimension other slices have gets the empty value (Prometheus: label absent).

A windowed window is the union of the 1-minute windows overlapping
``[now - window, now + 60)`` — the last ``window`` seconds aligned down to
the minute, the current (partial) minute and the next one (for events
stamped slightly ahead). It is priced with the entries in force at its first
minute's start; ``traces_per_second`` divides by ``now`` minus that start.
A ratio whose denominator is 0 in the window is *not* exported (no NaN
samples), nor is a cost per solved that is not finite (no success), nor a
latency quantile without latencies; ``fleetmon_window_traces`` is always
exported so a dashboard can tell "no traffic" from "no data".

Cost: a scrape moves only what changed since the previous one. The store
reads are incremental (:mod:`monitor.store.redis.reads`), and each slice's
samples are rendered to text once per change of its aggregates and handed
out again while they stay the same (:class:`~monitor.exporter.exposition.SliceFamily`;
:func:`serve` writes that text without rebuilding every sample).

A failing store read does not fail the scrape: the exporter logs it and
exports ``fleetmon_store_up 0`` (with ``fleetmon_exporter_up 1``), so the
outage is an alert rather than a gap.

Extension hook: ``extra_collectors`` takes collectors (objects with
``collect()``) or zero-argument callables yielding metric families; they run
on every scrape after the built-in families, and one that raises is logged
and skipped. The release-comparison metrics (``fleetmon_comparison_*``) are
added that way, without editing this module.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from monitor.aggregate import Aggregate
from monitor.exporter.exposition import (Block, SliceFamily, SliceLabels, make_app, make_block, sample_line,
                                     start_server)
from monitor.exporter.families import HEALTH_GAUGES, SIMPLE_COUNTERS, histogram_counts, window_figures
from monitor.store.redis.reads import SpanReader
from monitor.pricing import PriceMap
from monitor.schema import OUTCOMES
from monitor.slices import DEFAULT_DIMENSIONS, parse_slice_id
from monitor.store.base import Store
from monitor.windows import MINUTE, parse_duration

log = logging.getLogger("fleetmon.exporter")

DEFAULT_WINDOWS = ("5m", "1h")
DEFAULT_ACTIVE_WINDOW_SECONDS = 2 * 3600.0
#: Upper bounds (seconds) of the classic latency histogram; +Inf is added.
LATENCY_BUCKETS_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Minutes past ``now`` a windowed read includes (events stamped slightly ahead).
WINDOW_LOOKAHEAD_SECONDS = 60
#: Labels this exporter sets itself; a slice dimension of the same name is prefixed.
OWN_LABELS = frozenset(("window", "outcome", "type", "le", "quantile", "source", "dimension",
                        "job", "instance"))

ExtraCollector = Any  # an object with collect(), or a callable returning metric families

_LABEL_BAD = re.compile(r"[^A-Za-z0-9_]")


def label_name(dimension: str) -> str:
    """The Prometheus label for a slice dimension (see the module docstring)."""
    name = _LABEL_BAD.sub("_", dimension) or "_"
    if name[0].isdigit():
        name = "_" + name
    if name in OWN_LABELS or name.startswith("__"):
        name = "slice_" + name.lstrip("_")
    return name


class KafkaLag:
    """Consumer lag per ``<topic>:<partition>``: end offset − (applied offset + 1).

    End offsets come from the broker (kafka-python), cached for
    ``cache_seconds`` so that a fast scrape loop does not hammer the broker;
    applied offsets come from the store on every scrape. A partition with no
    applied offset lags by everything it holds (end − beginning). When the
    broker cannot be reached the lag is unknown (``None``), logged once per
    cache period, and the metric is simply not exported.
    """

    def __init__(self, bootstrap: str, topics: Sequence[str], cache_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, timeout_ms: int = 3000) -> None:
        self.bootstrap = bootstrap
        self.topics = [t for t in topics if t]
        self.cache_seconds = cache_seconds
        self.clock = clock
        self.timeout_ms = timeout_ms
        self._cached: tuple[float, dict[str, tuple[int, int]] | None] | None = None
        self._consumer: Any = None
        self._lock = threading.Lock()

    def _offsets(self) -> dict[str, tuple[int, int]] | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import-time warnings
            from kafka import KafkaConsumer, TopicPartition
        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                           enable_auto_commit=False, client_id="fleetmon-exporter-lag",
                                           request_timeout_ms=max(self.timeout_ms, 1000) + 1000)
        parts = []
        for topic in self.topics:
            for partition in sorted(self._consumer.partitions_for_topic(topic) or ()):
                parts.append(TopicPartition(topic, partition))
        if not parts:
            return {}
        ends = self._consumer.end_offsets(parts)
        begins = self._consumer.beginning_offsets(parts)
        return {f"{tp.topic}:{tp.partition}": (begins[tp], ends[tp]) for tp in parts}

    def lag(self, applied: Mapping[str, int]) -> dict[str, int] | None:
        with self._lock:
            now = self.clock()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                try:
                    offsets = self._offsets()
                except Exception as exc:  # noqa: BLE001 - an unreachable broker must not fail a scrape
                    log.warning("consumer lag unknown: cannot read offsets from Kafka %s: %s", self.bootstrap, exc)
                    self.close()
                    offsets = None
                self._cached = (now, offsets)
            offsets = self._cached[1]
        if offsets is None:
            return None
        out = {}
        for source, (begin, end) in offsets.items():
            mark = applied.get(source)
            out[source] = max(end - begin if mark is None else end - (mark + 1), 0)
        return out

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
            self._consumer = None


class FleetCollector:
    """Collector over a :class:`~monitor.store.base.Store` (see the module docstring).

    ``now`` is the clock (epoch seconds) read once per scrape; ``windows``
    the windowed gauges' spans (``"5m"``, ``"1h"``, any ``parse_duration``
    text); ``active_window_seconds`` which slices get windowed gauges;
    ``consumer_lag`` an optional :class:`KafkaLag`; ``extra_collectors`` the
    extension hook.
    """

    def __init__(self, store: Store, prices: PriceMap, now: Callable[[], float] = time.time,
                 windows: Sequence[str] = DEFAULT_WINDOWS, *,
                 active_window_seconds: float = DEFAULT_ACTIVE_WINDOW_SECONDS,
                 extra_collectors: Iterable[ExtraCollector] = (),
                 consumer_lag: KafkaLag | None = None,
                 latency_buckets: Sequence[float] = LATENCY_BUCKETS_SECONDS) -> None:
        self.store = store
        self.prices = prices
        self.now = now
        self.windows = [(name, parse_duration(name)) for name in windows]
        if active_window_seconds <= 0:
            raise ValueError(f"active_window_seconds must be > 0, got {active_window_seconds!r}")
        self.active_window_seconds = float(active_window_seconds)
        self.extra_collectors = list(extra_collectors)
        self.consumer_lag = consumer_lag
        self.latency_buckets = tuple(sorted(float(b) for b in latency_buckets))
        self._bucket_names = [floatToGoString(b) for b in self.latency_buckets] + ["+Inf"]
        self._reader = SpanReader(store, MINUTE)
        # Rendered samples reused while the reader returns the very same aggregate
        # object (it does for every slice that did not change): per slice its
        # parsed id and labels, its totals' blocks, and per (window, slice) the
        # blocks of the health gauges (the costly part).
        self._slice_keys: dict[str, tuple[tuple[str, str], ...]] = {}
        self._label_names: tuple[str, ...] = ()
        self._labels: dict[str, SliceLabels] = {}
        self._total_blocks: dict[str, tuple[Aggregate, SliceLabels, list[Block]]] = {}
        self._window_blocks: dict[tuple[str, str], tuple[Aggregate, int, SliceLabels, list[Block | None]]] = {}
        self._lock = threading.Lock()  # concurrent scrapes share the caches

    def add_extra(self, collector: ExtraCollector) -> None:
        """Register one more extra collector (see the module docstring)."""
        self.extra_collectors.append(collector)

    def describe(self) -> list[Metric]:
        # Registering must not trigger a store read (the registry calls
        # describe() to check for duplicate names; an empty list skips that).
        return []

    # -- collection --------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        now = self.now()
        families: list[Metric] = []
        store_up = 1
        try:
            with self._lock:
                families.extend(self._collect_store(now))
        except Exception:  # noqa: BLE001 - a failed read is reported as store_up 0, not a failed scrape
            log.exception("reading the store failed; exporting fleetmon_store_up 0")
            store_up = 0
            families = []
        families.append(_gauge("fleetmon_store_up", "1 when the last scrape could read the store, else 0",
                               store_up))
        families.append(_gauge("fleetmon_exporter_up", "Always 1: the exporter answered this scrape", 1))
        families.append(_gauge("fleetmon_scrape_duration_seconds",
                               "Time this scrape spent reading the store and building the metrics",
                               time.perf_counter() - started))
        yield from families
        for extra in self.extra_collectors:
            source = getattr(extra, "collect", extra)
            try:
                yield from list(source())
            except Exception:  # noqa: BLE001 - one broken extension must not break the scrape
                log.exception("extra collector %r failed; its metrics are left out of this scrape", extra)

    def _collect_store(self, now: float) -> list[Metric]:
        all_slices = self.store.active_slices()
        ids = sorted(all_slices)
        active = [sid for sid in ids if all_slices[sid] >= now - self.active_window_seconds]
        spans = [(now - seconds, now + WINDOW_LOOKAHEAD_SECONDS) for _name, seconds in self.windows]
        totals, sums = self._reader.read(spans, active, ids)
        windowed = []
        for (name, seconds), aggs in zip(self.windows, sums):
            first_start = MINUTE.start(now - seconds)
            windowed.append((name, first_start, max(now - first_start, 1.0), aggs))
        labels, dims = self._slice_labels([totals, *(aggs for *_, aggs in windowed)])
        out = self._counters(totals, labels, now)
        out.extend(self._gauges(windowed, labels))
        out.extend(self._pipeline(len(active), dims))
        return out

    def _slice_labels(self, groups: Sequence[Mapping[str, Aggregate]]) -> tuple[dict[str, SliceLabels], list[str]]:
        """Per slice its :class:`SliceLabels` (kept while the label names stay), and the dimensions."""
        keys = self._slice_keys
        keys = self._slice_keys = {sid: keys[sid] if sid in keys else parse_slice_id(sid)
                                   for group in groups for sid in group}
        present = {dim for key in keys.values() for dim, _ in key}
        dims = [d for d in DEFAULT_DIMENSIONS if d in present]
        dims.extend(sorted(present - set(dims)))
        names = tuple(label_name(d) for d in dims)
        if len(set(names)) != len(names):
            raise ValueError(f"slice dimensions {dims} map to clashing Prometheus labels {list(names)}")
        cached = self._labels if names == self._label_names else {}
        self._label_names = names
        self._labels = {sid: cached[sid] if sid in cached else SliceLabels(names, _label_values(key, dims))
                        for sid, key in keys.items()}
        return self._labels, dims

    def _counters(self, totals: Mapping[str, Aggregate], labels: Mapping[str, SliceLabels],
                  now: float) -> list[Metric]:
        traces = SliceFamily("fleetmon_traces", "Traces folded, by outcome (none: no outcome field, "
                             "ground truth given as ok)", "counter")
        simple = [SliceFamily(name, doc, "counter") for name, doc, _field in SIMPLE_COUNTERS]
        tokens = SliceFamily("fleetmon_tokens", "Tokens by type; input excludes cached input, so the "
                             "three types add up to all tokens", "counter")
        cost = SliceFamily("fleetmon_cost_usd", "Cost in USD of all traces (tokens priced at scrape "
                           "time with the price entries in force now, plus fees)", "counter")
        latency = SliceFamily("fleetmon_latency_seconds", "Trace latency; buckets derived from the "
                              "slice's 1%-accurate log sketch", "histogram")
        cached_families = [traces, *simple, tokens, latency]
        previous, kept = self._total_blocks, {}
        for sid, agg in totals.items():
            lv = labels[sid]
            entry = previous.get(sid)
            if entry is None or entry[0] is not agg or entry[1] is not lv:
                entry = (agg, lv, self._total_blocks_of(agg, lv))
            kept[sid] = entry
            for family, block in zip(cached_families, entry[2]):
                family.add_block(block)
            cost.add_block(sample_line("fleetmon_cost_usd_total", lv.text(), agg.cost_usd(self.prices, now)))
        self._total_blocks = kept
        return [traces, *simple, tokens, cost, latency]

    def _total_blocks_of(self, agg: Aggregate, lv: SliceLabels) -> list[Block]:
        """The blocks that depend on the totals alone (not on ``now``), in family order."""
        counts = agg.counts
        blocks = [make_block(lv, [("fleetmon_traces_total", outcome, counts.get("outcome:" + outcome, 0))
                             for outcome in (*OUTCOMES, "none")], "outcome")]
        plain = lv.text()
        blocks.extend(sample_line(name + "_total", plain, counts.get(field, 0)) for name, _doc, field in SIMPLE_COUNTERS)
        cached_tokens = agg.tokens("tokens_cached_in")
        blocks.append(make_block(lv, [("fleetmon_tokens_total", "input", agg.tokens("tokens_in") - cached_tokens),
                                 ("fleetmon_tokens_total", "cached_input", cached_tokens),
                                 ("fleetmon_tokens_total", "output", agg.tokens("tokens_out"))], "type"))
        count = int(counts.get("latency_count", 0))
        cumulative = [min(c, count) for c in histogram_counts(agg.latency, self.latency_buckets)] + [count]
        rows = [("fleetmon_latency_seconds_bucket", le, c) for le, c in zip(self._bucket_names, cumulative)]
        if float(self._bucket_names[0]) >= 0:  # as HistogramMetricFamily: no count/sum with negative buckets
            rows.append(("fleetmon_latency_seconds_count", None, count))
            rows.append(("fleetmon_latency_seconds_sum", None, float(counts.get("latency_sum_seconds", 0.0))))
        blocks.append(make_block(lv, rows, "le"))
        return blocks

    def _gauges(self, windowed: list[tuple[str, int, float, Mapping[str, Aggregate]]],
                labels: Mapping[str, SliceLabels]) -> list[Metric]:
        n_traces = SliceFamily("fleetmon_window_traces", "Traces in the window (the n behind every windowed "
                               "ratio)", "gauge")
        per_second = SliceFamily("fleetmon_traces_per_second", "Traces per second over the window", "gauge")
        derived = [SliceFamily(name, doc, "gauge") for name, doc in HEALTH_GAUGES]
        previous, kept = self._window_blocks, {}
        for name, first_start, span, aggs in windowed:
            for sid, agg in aggs.items():
                lv = labels[sid]
                entry = previous.get((name, sid))
                if entry is None or entry[0] is not agg or entry[1] != first_start or entry[2] is not lv:
                    entry = (agg, first_start, lv, self._window_blocks_of(agg, first_start, lv, name))
                kept[(name, sid)] = entry
                blocks = entry[3]
                n_traces.add_block(blocks[0])
                per_second.add_block(sample_line("fleetmon_traces_per_second", lv.text("window", name),
                                                 agg.traces / span))
                for family, block in zip(derived, blocks[1:]):
                    family.add_block(block)
        self._window_blocks = kept
        return [n_traces, per_second, *derived]

    def _window_blocks_of(self, agg: Aggregate, first_start: int, lv: SliceLabels, window: str
                          ) -> list[Block | None]:
        """``fleetmon_window_traces`` then one block (or None) per :data:`HEALTH_GAUGES` family."""
        n = agg.traces
        label_text = lv.text("window", window)
        blocks: list[Block | None] = [sample_line("fleetmon_window_traces", label_text, n)]
        if n == 0:
            return blocks + [None] * len(HEALTH_GAUGES)
        for (name, _doc), value in zip(HEALTH_GAUGES, window_figures(agg, self.prices, first_start)):
            blocks.append(None if value is None else sample_line(name, label_text, value))
        return blocks

    def _pipeline(self, n_active: int, dimensions: Sequence[str]) -> list[Metric]:
        counters = self.store.counters()
        out: list[Metric] = [
            _counter("fleetmon_dlq_records", "Records sent to the dead-letter queue", counters.get("dlq", 0)),
            _counter("fleetmon_late_events", "Traces too late for at least one window resolution "
                     "(still in the totals)", counters.get("late", 0)),
        ]
        folded = CounterMetricFamily("fleetmon_folded_label_values", "Traces whose value of a slice "
                                     "dimension was folded into __other__ by the cardinality guard",
                                     labels=["dimension"])
        folded_counts = {d: 0.0 for d in dimensions}  # zeros first, so rate() has a series from the start
        for name, value in counters.items():
            if name.startswith("folded:"):
                folded_counts[name[len("folded:"):]] = value
        for dim, value in sorted(folded_counts.items()):
            folded.add_metric([dim], value)
        out.append(folded)
        applied = self.store.applied_offsets()
        offsets = GaugeMetricFamily("fleetmon_applied_offset", "Last Kafka offset applied to the store, per "
                                    "<topic>:<partition>", labels=["source"])
        for source, offset in sorted(applied.items()):
            offsets.add_metric([source], offset)
        out.append(offsets)
        if self.consumer_lag is not None:
            lag = self.consumer_lag.lag(applied)
            if lag is not None:
                family = GaugeMetricFamily("fleetmon_consumer_lag", "Records in Kafka not yet applied to the "
                                           "store, per <topic>:<partition>", labels=["source"])
                for source, value in sorted(lag.items()):
                    family.add_metric([source], value)
                out.append(family)
        out.append(_gauge("fleetmon_active_slices", "Slices with traffic within the active window", n_active))
        return out


def _label_values(key: Sequence[tuple[str, str]], dims: Sequence[str]) -> list[str]:
    found = dict(key)
    return [found.get(d, "") for d in dims]


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def build_registry(store: Store, prices: PriceMap, **options: Any) -> tuple[CollectorRegistry, FleetCollector]:
    """A fresh registry holding one :class:`FleetCollector` (``options`` go to it)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = FleetCollector(store, prices, **options)
    registry.register(collector)
    return registry, collector


def serve(store: Store, prices: PriceMap, port: int = 9464, host: str = "127.0.0.1", **options: Any) -> Any:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns the server.

    The body is :func:`monitor.exporter.exposition.render` of the registry — what
    prometheus_client would serve, with the per-slice samples rendered once
    per change instead of once per scrape. The caller stops it with
    ``server.shutdown(); server.server_close()``. ``server.collector`` is the
    :class:`FleetCollector` (e.g. to ``add_extra``) and ``server.registry``
    its registry. Port 0 picks a free port (``server.server_address[1]``).
    """
    registry, collector = build_registry(store, prices, **options)
    server, _thread = start_server(make_app(registry), port, host)
    server.registry = registry  # type: ignore[attr-defined]
    server.collector = collector  # type: ignore[attr-defined]
    return server
