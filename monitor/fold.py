"""Folding a batch of validated traces into additive deltas (pure).

A :class:`BatchDelta` is everything one batch changes: per-(resolution,
window, slice) aggregates, per-slice cumulative totals, pipeline counters
(``traces``, ``dlq``, ``late``, ``folded:<dim>``) and each slice's latest
event time. Deltas are additive, so a store applies them with increments,
and applying the deltas of two batches equals applying the delta of their
union. Time is passed in (``now``, epoch seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from monitor.aggregate import Aggregate
from monitor.schema import Trace
from monitor.slices import OTHER, UNKNOWN, Slicer, slice_id
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

if TYPE_CHECKING:
    from monitor.pairing import Pairer


@dataclass
class BatchDelta:
    windows: dict[tuple[str, int, str], Aggregate] = field(default_factory=dict)
    totals: dict[str, Aggregate] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    last_seen: dict[str, float] = field(default_factory=dict)
    expire_at: dict[tuple[str, int], int] = field(default_factory=dict)
    extra: dict[str, dict[str, float]] = field(default_factory=dict)  # key suffix -> additive fields
    # Shadow pairing: halves that start / stop waiting, stored per source partition.
    pending_set: dict[str, str] = field(default_factory=dict)
    pending_del: set[str] = field(default_factory=set)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def merge(self, other: "BatchDelta") -> "BatchDelta":
        for key, agg in other.windows.items():
            self.windows.setdefault(key, Aggregate()).merge(agg)
        for key, agg in other.totals.items():
            self.totals.setdefault(key, Aggregate()).merge(agg)
        for name, n in other.counters.items():
            self.count(name, n)
        for key, ts in other.last_seen.items():
            self.last_seen[key] = max(ts, self.last_seen.get(key, ts))
        self.expire_at.update(other.expire_at)
        for key, fields in other.extra.items():
            mine = self.extra.setdefault(key, {})
            for name, value in fields.items():
                mine[name] = mine.get(name, 0) + value
        for pair_id in other.pending_del:
            self.pending_set.pop(pair_id, None)
        self.pending_del |= other.pending_del
        for pair_id, text in other.pending_set.items():
            self.pending_set[pair_id] = text
            self.pending_del.discard(pair_id)
        return self

    @property
    def empty(self) -> bool:
        return not (self.windows or self.totals or self.counters or self.extra
                    or self.pending_set or self.pending_del)


#: A group's key: the slice dimensions' raw values (``unknown`` when missing)
#: and its window start at each resolution.
GroupKey = tuple[tuple[str, ...], tuple[int, ...]]


@dataclass(slots=True)
class Group:
    """Traces of one raw slice that share their window at every resolution."""

    aggregate: Aggregate
    latest: float          # latest event time
    first: int             # position of the first trace (offset or index): the order groups are placed in


def group_traces(traces: Iterable[Trace], dimensions: Sequence[str], resolutions: Sequence[Resolution],
                 positions: Iterable[int] | None = None,
                 groups: dict[GroupKey, Group] | None = None) -> dict[GroupKey, Group]:
    """Fold traces (each with a ``ts``) into one aggregate per group, in order of first position.

    One ``Aggregate.update`` per trace; the group is then merged into each of
    its destinations by :func:`place_groups`. ``positions`` (default 0, 1, ...)
    orders groups from several sources (the native fold's and Python's) as
    if one pass had seen every trace. :mod:`fleetmon_native` builds the same
    groups with the same arithmetic.
    """
    groups = groups if groups is not None else {}
    dimensions = tuple(dimensions)
    for position, trace in zip(range(10**18) if positions is None else positions, traces):
        ts = trace.ts
        if ts is None:
            raise ValueError(f"trace {trace.trace_id!r} has no ts; streaming needs event time")
        key = (tuple([trace.dimension(dim) or UNKNOWN for dim in dimensions]),
               tuple([res.start(ts) for res in resolutions]))
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(Aggregate(), ts, position)
        elif ts > group.latest:
            group.latest = ts
        group.aggregate.update(trace)
    return groups


def place_groups(groups: Iterable[tuple[GroupKey, Group]], slicer: Slicer, now: float,
                 resolutions: Sequence[Resolution], delta: BatchDelta) -> int:
    """Merge groups (in order of first position) into ``delta``'s windows and
    totals, through the cardinality guard; returns how many traces they hold.

    The guard is asked once per distinct raw slice, in order of first
    appearance (its answer for a value never changes once given); a window
    already past retention at ``now`` is skipped and its traces counted late.
    """
    windows, totals, last_seen = delta.windows, delta.totals, delta.last_seen
    keys: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {}   # raw values -> (slice id, folded dims)
    count = 0
    for (values, starts), group in groups:
        agg = group.aggregate
        cached = keys.get(values)
        if cached is None:
            key = slicer.key_for(values)
            folded_dims = tuple(dim for (dim, value), raw in zip(key, values) if value == OTHER and raw != OTHER)
            cached = keys[values] = (slice_id(key), folded_dims)
        sid, folded_dims = cached
        n = agg.traces
        count += n
        for dim in folded_dims:
            delta.count("folded:" + dim, n)
        owned = True  # the group aggregate is stored once without a copy, merged elsewhere
        late = False
        for res, start in zip(resolutions, starts):
            if res.expired(start, now):
                late = True
                continue
            window_key = (res.name, start, sid)
            existing = windows.get(window_key)
            if existing is not None:
                existing.merge(agg)
            elif owned:
                windows[window_key] = agg
                owned = False
            else:
                windows[window_key] = agg.copy()
            delta.expire_at[(res.name, start)] = res.expire_at(start)
        total = totals.get(sid)
        if total is not None:
            total.merge(agg)
        else:
            totals[sid] = agg if owned else agg.copy()
        if late:
            delta.count("late", n)
        if group.latest > last_seen.get(sid, 0.0):
            last_seen[sid] = group.latest
    if count:
        delta.count("traces", count)
    return count


def fold(traces: Iterable[Trace], slicer: Slicer, now: float,
         resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS, delta: BatchDelta | None = None,
         pairer: "Pairer | None" = None) -> BatchDelta:
    """Fold validated traces (each with a ``ts``) into ``delta`` (a new one by default).

    With a :class:`~monitor.pairing.Pairer`, shadow pairs are joined too and
    halves waiting past its TTL at ``now`` are expired.
    """
    delta = delta if delta is not None else BatchDelta()
    traces = traces if isinstance(traces, (list, tuple)) else list(traces)
    place_groups(group_traces(traces, slicer.dimensions, resolutions).items(), slicer, now, resolutions, delta)
    if pairer is not None:
        for trace in traces:
            if trace.pair_id is not None:
                pairer.offer(trace, slicer.key(trace), delta)
        pairer.expire(now, delta)
    return delta
