"""The Prometheus collector: reads the store at scrape time and builds the families of the metric table.

:class:`FleetCollector` implements prometheus_client's collector protocol; nothing polls in the
background and no metric lives in a global registry (:func:`build_registry` makes a fresh one,
:func:`serve` puts it behind HTTP). Every family it yields is built from
:mod:`monitor.exporter.families`; what each one means, the windows, pricing and scrape cost are in
docs/metrics.md. Guarantees: a ratio with a zero denominator, a non-finite cost per solved and a
quantile without latencies are left out (no NaN samples); a failing store read exports
``fleetmon_store_up 0`` instead of failing the scrape; an extra collector that raises is logged and
skipped; a slice's samples are re-rendered only when its aggregates change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from itertools import repeat
from operator import itemgetter
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from monitor.aggregate import Aggregate
from monitor.exporter import families as table
from monitor.exporter.budget import Folded, plan_budget
from monitor.exporter.exposition import (
    Block,
    SliceFamily,
    SliceLabels,
    make_app,
    metric_family,
    sample_lines,
    start_server,
)
from monitor.exporter.figures import cost_of
from monitor.exporter.folds import RowFolds
from monitor.exporter.heap import collection_paused
from monitor.exporter.labels import SliceLabeller, grouping_folded
from monitor.exporter.lag import KafkaLag
from monitor.exporter.rows import RowRenderer, TotalsEntry, WindowEntry
from monitor.identity import summarize
from monitor.pricing import PriceMap
from monitor.schema import OUTCOMES
from monitor.store.base import Store
from monitor.store.redis.cluster_reads import span_reader
from monitor.windows import MINUTE, parse_duration

log = logging.getLogger("fleetmon.exporter")

DEFAULT_WINDOWS = ("5m", "1h")
DEFAULT_ACTIVE_WINDOW_SECONDS = 2 * 3600.0
#: Upper bounds (seconds) of the classic latency histogram; +Inf is added.
LATENCY_BUCKETS_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Minutes past ``now`` a windowed read includes (events stamped slightly ahead).
WINDOW_LOOKAHEAD_SECONDS = 60
#: Series the slices may take per scrape (exporter.max_series); past it the smallest are folded (budget.py).
DEFAULT_MAX_SERIES = 20_000
ExtraCollector = Any  # an object with collect(), or a callable returning metric families

@dataclass(frozen=True, slots=True)
class WindowRead:
    """One window's sums of one scrape: its name, first minute, span in seconds (>= 1) and aggregates."""

    name: str
    first_start: int
    span_seconds: float
    aggregates: Mapping[str, Aggregate]


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
                 latency_buckets: Sequence[float] = LATENCY_BUCKETS_SECONDS,
                 max_series: int = DEFAULT_MAX_SERIES) -> None:
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
        if max_series < 1:
            raise ValueError(f"max_series must be >= 1, got {max_series!r}")
        self.max_series = int(max_series)
        self.folded_slices = 0
        self._rows = RowRenderer(prices, self.latency_buckets)  # a changed row's blocks (rows.py)
        self._reader = span_reader(store, MINUTE)  # one SpanReader per partition view on a Redis Cluster
        # Rendered samples reused while the reader returns the very same aggregate
        # object (it does for every slice that did not change).
        self._labeller = SliceLabeller()
        self._total_blocks: dict[str, TotalsEntry] = {}
        self._window_blocks: dict[tuple[str, str], WindowEntry] = {}
        self._folds = RowFolds()  # the __other__ rows, moved by their members' changes (folds.py)
        self._lock = threading.Lock()  # concurrent scrapes share the caches
        self._overflow_logged: set[str] = set()  # releases past monitor.identity's cap, logged once each

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
            with self._lock, collection_paused():
                families.extend(self._collect_store(now))
        except Exception:
            log.exception("reading the store failed; exporting fleetmon_store_up 0")
            store_up = 0
            families = []
        families.append(metric_family(table.STORE_UP, value=store_up))
        families.append(metric_family(table.EXPORTER_UP, value=1))
        families.append(metric_family(table.SCRAPE_DURATION, value=time.perf_counter() - started))
        yield from families
        for extra in self.extra_collectors:
            source = getattr(extra, "collect", extra)
            try:
                yield from list(source())
            except Exception:
                log.exception("extra collector %r failed; its metrics are left out of this scrape", extra)

    def _collect_store(self, now: float) -> list[Metric]:
        all_slices = self.store.active_slices()
        ids = sorted(all_slices)
        active = [sid for sid in ids if all_slices[sid] >= now - self.active_window_seconds]
        spans = [(now - seconds, now + WINDOW_LOOKAHEAD_SECONDS) for _name, seconds in self.windows]
        totals, sums = self._reader.read(spans, active, ids)
        folded = self._budget(totals, sums)
        if folded.folded_slices and not self.folded_slices:
            log.warning("%d of %d slices folded into __other__ rows or left out to stay within exporter.max_series "
                        "= %d (fleetmon_exporter_folded_slices); groupings left out whole: %s", folded.folded_slices,
                        len(totals), self.max_series, ", ".join(folded.dropped_groupings) or "none")
        self.folded_slices = folded.folded_slices
        totals, sums = folded.totals, folded.windows
        windowed = []
        for (name, seconds), aggs in zip(self.windows, sums):
            first_start = MINUTE.start(now - seconds)
            windowed.append(WindowRead(name, first_start, max(now - first_start, 1.0), aggs))
        labels, dims = self._labeller.labels([totals, *(read.aggregates for read in windowed)])
        out = self._counters(totals, labels, now)
        out.extend(self._gauges(windowed, labels))
        out.extend(self._pipeline(len(active), dims))
        out.extend(self._releases())
        return out

    def _budget(self, totals: dict[str, Aggregate], sums: list[dict[str, Aggregate]]) -> Folded:
        """:func:`monitor.exporter.budget.apply_budget`'s rows, each ``__other__`` row kept from the
        previous scrape and moved by its members' changes only (:class:`RowFolds`, equal to a fresh merge).

        The plan needs the rows' trace counts and windows alone; a row served as itself is the
        reader's own object.
        """
        steps = self._reader.take_steps()  # dropped after this scrape: they hold the previous aggregates
        plan = plan_budget({sid: agg.traces for sid, agg in totals.items()}, sums, self.max_series,
                           self._series_per_slice(), 2 + len(table.HEALTH_GAUGES))
        if plan is None:
            self._folds.start()
            self._folds.finish()
            return Folded(totals, sums, 0)
        folds = self._folds
        folds.start()
        out_totals = {row: folds.row((-1, row), sids, totals, steps) for row, sids in plan.members.items()}
        out_windows = []
        for k, w in enumerate(sums):
            out: dict[str, Aggregate] = {}
            for row, sids in plan.members.items():
                present = [sid for sid in sids if sid in w]
                if present:
                    out[row] = folds.row((k, row), present, w, steps)
            out_windows.append(out)
        folds.finish()
        return Folded(out_totals, out_windows, plan.folded_slices, plan.dropped_groupings)

    def _series_per_slice(self) -> int:
        """Series of one slice's totals: outcomes, simple counters, cost, token types, the latency histogram."""
        return len(OUTCOMES) + 1 + len(table.SIMPLE_COUNTERS) + 1 + 3 + len(self.latency_buckets) + 3

    def _releases(self) -> list[Metric]:
        """``fleetmon_release_info`` and ``_identity_changes_total`` per release label the guard admitted."""
        info = metric_family(table.RELEASE_INFO)
        changes = metric_family(table.RELEASE_IDENTITY_CHANGES)
        for release, found in sorted(summarize(self.store.release_identities()).items()):
            info.add_metric([release, *found.current], 1.0)
            changes.add_metric([release], found.changes)
            if found.overflow and release not in self._overflow_logged:
                self._overflow_logged.add(release)
                log.warning("release %r has more than %d version tuples (%d more offered): its label is reused "
                            "across deploys; fleetmon_release_identity_changes_total keeps counting", release,
                            found.tuples, found.overflow)
        return [info, changes]

    def _counters(self, totals: Mapping[str, Aggregate], labels: Mapping[str, SliceLabels],
                  now: float) -> list[Metric]:
        traces = SliceFamily.of(table.TRACES)
        simple = [SliceFamily.of(spec) for spec, _field in table.SIMPLE_COUNTERS]
        tokens = SliceFamily.of(table.TOKENS)
        cost = SliceFamily.of(table.COST)
        latency = SliceFamily.of(table.LATENCY)
        cached_families = [traces, *simple, tokens, latency]
        cost_name, prices = table.COST.sample_name, self.prices
        previous, kept = self._total_blocks, {}
        rows: list[list[Block]] = []
        texts: list[str] = []
        costs: list[float] = []
        for sid, agg in totals.items():
            lv = labels[sid]
            entry = previous.get(sid)
            if entry is None or entry.aggregate is not agg or entry.labels is not lv:
                entry = self._rows.totals(agg, lv)
            kept[sid] = entry
            rows.append(entry.blocks)
            texts.append(lv.text())
            costs.append(cost_of(entry.models, entry.fees_usd, prices, now))
        for k, family in enumerate(cached_families):
            family.add_blocks(map(itemgetter(k), rows))
        cost.add_blocks(sample_lines(repeat(cost_name), texts, costs))
        self._total_blocks = kept
        return [traces, *simple, tokens, cost, latency]

    def _gauges(self, windowed: Sequence[WindowRead], labels: Mapping[str, SliceLabels]) -> list[Metric]:
        n_traces = SliceFamily.of(table.WINDOW_TRACES)
        per_second = SliceFamily.of(table.TRACES_PER_SECOND)
        derived = [SliceFamily.of(spec) for spec in table.HEALTH_GAUGES]
        per_second_name = table.TRACES_PER_SECOND.sample_name
        previous, kept = self._window_blocks, {}
        rows: list[list[Block | None]] = []
        texts: list[str] = []
        rates: list[float] = []
        for read in windowed:
            name, first_start, span_seconds = read.name, read.first_start, read.span_seconds
            price_of = cache(partial(self.prices.price_for, at=first_start))  # the window's prices, once a model
            for sid, agg in read.aggregates.items():
                lv = labels[sid]
                entry = previous.get((name, sid))
                if (entry is None or entry.aggregate is not agg or entry.first_start != first_start
                        or entry.labels is not lv):
                    entry = self._rows.window(agg, first_start, lv, name, price_of)
                kept[(name, sid)] = entry
                rows.append(entry.blocks)
                texts.append(entry.label_text)
                rates.append(agg.traces / span_seconds)
        n_traces.add_blocks(map(itemgetter(0), rows))
        per_second.add_blocks(sample_lines(repeat(per_second_name), texts, rates))
        for k, family in enumerate(derived, start=1):
            family.add_blocks(map(itemgetter(k), rows))
        self._window_blocks = kept
        return [n_traces, per_second, *derived]

    def _pipeline(self, n_active: int, dimensions: Sequence[str]) -> list[Metric]:
        counters = self.store.counters()
        out: list[Metric] = [
            metric_family(table.DLQ_RECORDS, value=counters.get("dlq", 0)),
            metric_family(table.LATE_EVENTS, value=counters.get("late", 0)),
        ]
        folded = metric_family(table.FOLDED_LABEL_VALUES)
        folded_counts = {d: 0.0 for d in dimensions}  # zeros first, so rate() has a series from the start
        for name, value in counters.items():
            if name.startswith("folded:"):
                folded_counts[name[len("folded:"):]] = value
        for dim, value in sorted(folded_counts.items()):
            folded.add_metric([dim], value)
        out.append(folded)
        out.append(grouping_folded(counters, self._labeller.grouping_names))
        applied = self.store.applied_offsets()
        offsets = metric_family(table.APPLIED_OFFSET)
        for source, offset in sorted(applied.items()):
            offsets.add_metric([source], offset)
        out.append(offsets)
        if self.consumer_lag is not None:
            # An unknown lag leaves fleetmon_consumer_lag out, and the alerts built on it (worker stalled,
            # lag high) cannot fire: fleetmon_consumer_lag_up 0 says so (alert FleetmonConsumerLagUnknown).
            lag = self.consumer_lag.lag(applied)
            if lag is not None:
                family = metric_family(table.CONSUMER_LAG)
                for source, value in sorted(lag.items()):
                    family.add_metric([source], value)
                out.append(family)
            out.append(metric_family(table.CONSUMER_LAG_UP, value=0 if lag is None else 1))
        out.append(metric_family(table.ACTIVE_SLICES, value=n_active))
        out.extend(metric_family(spec, value=counters.get(name, 0)) for spec, name in table.PAIRING_COUNTERS)
        generation = self.store.generation()
        out.append(metric_family(table.STATE_RESTORES, value=generation.restores))
        out.append(metric_family(table.STATE_GENERATION, value=generation.number))
        out.append(metric_family(table.MAX_SERIES, value=self.max_series))
        out.append(metric_family(table.FOLDED_SLICES, value=self.folded_slices))
        return out


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
    server.registry = registry
    server.collector = collector
    return server
