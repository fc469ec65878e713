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


def fold(traces: Iterable[Trace], slicer: Slicer, now: float,
         resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS, delta: BatchDelta | None = None,
         pairer: "Pairer | None" = None) -> BatchDelta:
    """Fold validated traces (each with a ``ts``) into ``delta`` (a new one by default).

    With a :class:`~monitor.pairing.Pairer`, shadow pairs are joined too and
    halves waiting past its TTL at ``now`` are expired.
    """
    delta = delta if delta is not None else BatchDelta()
    windows, totals, last_seen = delta.windows, delta.totals, delta.last_seen
    # Traces of one slice that share their window at every resolution are
    # folded into one group aggregate, which is then merged into each of its
    # destinations: one Aggregate.update per trace instead of one per window
    # and total (the fold's cost). Same result: merge is addition.
    dimensions = tuple(slicer.dimensions)
    keys: dict[tuple, tuple] = {}   # raw dimension values -> (guarded key, slice id, folded dims)
    groups: dict[tuple, list] = {}  # (slice id, window start per resolution...) -> [aggregate, latest ts]
    count = 0
    for trace in traces:
        ts = trace.ts
        if ts is None:
            raise ValueError(f"trace {trace.trace_id!r} has no ts; streaming needs event time")
        raw = tuple([trace.dimension(dim) for dim in dimensions])
        cached = keys.get(raw)
        if cached is None:
            # the guard's answer for a value never changes once given, so one
            # lookup per distinct tuple of values is the same as one per trace
            key = slicer.key(trace)
            folded_dims = tuple(dim for dim, value in key
                                if value == OTHER and (trace.dimension(dim) or UNKNOWN) != OTHER)
            cached = keys[raw] = (key, slice_id(key), folded_dims)
        key, sid, folded_dims = cached
        for dim in folded_dims:
            delta.count("folded:" + dim)
        group_key = (sid, *[res.start(ts) for res in resolutions])
        group = groups.get(group_key)
        if group is None:
            group = groups[group_key] = [Aggregate(), ts]
        elif ts > group[1]:
            group[1] = ts
        group[0].update(trace)
        count += 1
        if pairer is not None:
            pairer.offer(trace, key, delta)
    for group_key, (agg, latest) in groups.items():
        sid = group_key[0]
        owned = True  # the group aggregate is stored once without a copy, merged elsewhere
        late = False
        for res, start in zip(resolutions, group_key[1:]):
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
            delta.count("late", agg.traces)
        if latest > last_seen.get(sid, 0.0):
            last_seen[sid] = latest
    if count:
        delta.count("traces", count)
    if pairer is not None:
        pairer.expire(now, delta)
    return delta
