"""The whole pipeline in one process — what ``fleetmon run`` drives.

Same core as the workers and the alert service, no second implementation:
records are validated (:func:`monitor.schema.validate`), folded with shadow
pairing (:func:`monitor.fold.fold`, :class:`monitor.pairing.Pairer`) into a
store (in memory by default, or Redis), and the :class:`~alerts.engine.AlertEngine`
evaluates every ``tick_seconds`` of the clock it is given. The clock is
whatever the caller passes as ``now``: wall time for live traffic, the
traces' event time for a replayed file (so a day replays in seconds).

Invalid records are never dropped silently: each is counted in the store's
``dlq`` counter and handed to ``on_invalid`` with its reasons (``fleetmon
run`` prints them to stderr with the line number).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from alerts.engine import AlertEngine
from alerts.lifecycle import AlertEvent
from alerts.notifiers import Notifier
from alerts.wiring import engine_config
from monitor.aggregate import Aggregate, health
from monitor.config import Config
from monitor.fold import fold
from monitor.groupings import of_slicer, rows_of
from monitor.pairing import Pairer
from monitor.pricing import PriceMap
from monitor.schema import Trace, TraceError, validate
from monitor.slices import CardinalityGuard, Slicer, parse_slice_id
from monitor.store.base import Store
from monitor.windows import resolutions_for
from monitor.worker_settings import pair_caps


@dataclass(frozen=True)
class NotJson:
    """A record that did not decode; it is rejected with this reason."""

    reason: str


@dataclass
class RunStats:
    traces: int = 0
    invalid: int = 0
    ticks: int = 0
    events: list[AlertEvent] = field(default_factory=list)
    first_ts: float | None = None
    last_ts: float | None = None


class Pipeline:
    def __init__(self, config: Config, store: Store, notifier: Notifier, *, guard: CardinalityGuard | None = None,
                 tick_seconds: float | None = None,
                 on_invalid: Callable[[str, TraceError], None] | None = None) -> None:
        self.config = config
        self.store = store
        self.prices = PriceMap.load(config.pricing.price_map or None)
        self.slicer = Slicer(config.slices.dimensions, guard or CardinalityGuard(config.slices.max_values),
                             config.slices.grouping_set())
        self.resolutions = resolutions_for(config.seconds("windows", "minute_retention"),
                                           config.seconds("windows", "hour_retention"))
        self.pairer = Pairer(self.prices, config.seconds("alerts", "pair_ttl"), pair_caps(config))
        self.engine = AlertEngine(store, notifier, engine_config(config))
        self.tick_seconds = tick_seconds or config.seconds("alerts", "interval")
        self.on_invalid = on_invalid
        self.stats = RunStats()
        self._next_tick: float | None = None
        self._next_expiry: float | None = None

    def feed(self, records: Iterable[tuple[str, Any]], now: float, event_time: bool = False) -> list[AlertEvent]:
        """Validate and fold ``(where, record)`` pairs, ticking the engine when its time has come.

        With ``event_time`` the clock is the records' own ``ts``: the batch is
        split at every tick boundary so a replay evaluates exactly as often as
        a live run would (``now`` is then only the clock for records without
        a usable ``ts``).
        """
        events: list[AlertEvent] = []
        chunk: list[tuple[str, Any]] = []
        clock = now
        for item in records:
            record = item[1]
            ts = record.get("ts") if isinstance(record, dict) else None
            if event_time and isinstance(ts, (int, float)) and not isinstance(ts, bool):
                if self._next_tick is not None and ts >= self._next_tick and chunk:
                    self._fold(chunk, clock)
                    chunk = []
                    events += self.advance(self._next_tick)
                clock = max(clock, ts)
            chunk.append(item)
        self._fold(chunk, clock)
        return events + self.advance(clock)

    def _fold(self, records: Sequence[tuple[str, Any]], now: float) -> None:
        traces: list[Trace] = []
        invalid = 0
        for where, record in records:
            try:
                if isinstance(record, NotJson):
                    raise TraceError([f"not valid JSON ({record.reason})"], where)
                trace = validate(record, now=now, where=where)
                if trace.ts is None:
                    raise TraceError(["ts is required to place a trace in a time window"], where)
                traces.append(trace)
            except TraceError as exc:
                invalid += 1
                if self.on_invalid is not None:
                    self.on_invalid(where, exc)
        delta = self.pairer.join(traces, self.slicer, now, fold(traces, self.slicer, now, self.resolutions))
        if invalid:
            delta.count("dlq", invalid)
        self.store.apply(delta)
        self.stats.traces += len(traces)
        self.stats.invalid += invalid
        if traces:
            stamps = [t.ts for t in traces if t.ts is not None]
            self.stats.first_ts = min([*stamps, *([self.stats.first_ts] if self.stats.first_ts is not None else [])])
            self.stats.last_ts = max([*stamps, *([self.stats.last_ts] if self.stats.last_ts is not None else [])])

    def advance(self, now: float) -> list[AlertEvent]:
        """Tick the engine at ``now`` if a tick is due (at most one per call)."""
        if self._next_tick is None:
            self._next_tick = now + self.tick_seconds
        if now < self._next_tick:
            return []
        self._next_tick = now + self.tick_seconds
        if self._next_expiry is None or now >= self._next_expiry:
            self.store.expire(now)
            self._next_expiry = now + 600
        events = self.engine.tick(now)
        self.stats.ticks += 1
        self.stats.events += events
        return events

    def flush(self, now: float) -> list[AlertEvent]:
        """A final evaluation at ``now`` (end of input)."""
        self._next_tick = now
        return self.advance(now)

    # -- views ---------------------------------------------------------------------
    def release_health(self, now: float, span_seconds: float = 300.0,
                       group_by: Sequence[str] = ("release", "arm")) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """Health vectors of the last ``span_seconds`` grouped by ``group_by`` (merged micro).

        Read from the one slice grouping with the fewest dimensions that holds every
        dimension of ``group_by`` (each trace counts once in it); ValueError when none does.
        """
        grouping = self._grouping_for(group_by)
        ids = list(rows_of(self.store.active_slices(since=now - span_seconds), grouping, parse_slice_id))
        if not ids:
            return []
        aggregates = self.store.window_aggregates("1m", now - span_seconds, now + 60, ids)
        groups: dict[tuple[str, ...], Aggregate] = {}
        for sid, agg in aggregates.items():
            dims = dict(parse_slice_id(sid))
            key = tuple(dims.get(d, "") for d in group_by)
            groups.setdefault(key, Aggregate()).merge(agg)
        start = now - span_seconds
        return [(dict(zip(group_by, key)), health(agg, self.prices, start))
                for key, agg in sorted(groups.items()) if agg.traces]

    def _grouping_for(self, group_by: Sequence[str]) -> str:
        candidates = [g for g in of_slicer(self.slicer).groupings if set(group_by) <= set(g.dimensions)]
        if not candidates:
            raise ValueError(f"group_by {list(group_by)} is not within any slice grouping; groupings: "
                             f"{[list(g.dimensions) for g in of_slicer(self.slicer).groupings]}")
        return min(candidates, key=lambda g: len(g.dimensions)).name
