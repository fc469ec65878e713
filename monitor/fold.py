"""Folding a batch of validated traces into the fold's part of a :class:`~monitor.delta.BatchDelta` (pure).

Traces are grouped by raw slice and window (:func:`group_traces`), then
placed through the cardinality guard into one row per slice grouping
(:mod:`monitor.groupings`): per-(resolution, window, row) aggregates, per-row
totals, latest event times and the counters ``traces``, ``late``,
``folded:<dim>`` and ``grouping_folded:<grouping>`` (:func:`place_groups`), and each
release label's version tuples (:mod:`monitor.identity`). The fold
knows nothing of shadow pairs: :meth:`monitor.pairing.Pairer.join` adds
those to the same delta. Time is passed in (``now``, epoch seconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from monitor import groupings, identity
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.schema import Trace
from monitor.slices import OTHER, UNKNOWN, Slicer, slice_id
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

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
    totals — one row per slice grouping (:mod:`monitor.groupings`), through the
    cardinality guard; returns how many traces they hold.

    The guard is asked once per distinct raw slice, in order of first
    appearance (its answer for a value or a combination never changes once
    given); a window already past retention at ``now`` is skipped and its
    traces counted late (once per trace, not per grouping).
    """
    windows, totals, last_seen = delta.windows, delta.totals, delta.last_seen
    grouping_set = groupings.of_slicer(slicer)
    admit = groupings.guard_admit(slicer.guard)
    # raw values -> (row ids, folded dims, folded groupings)
    keys: dict[tuple[str, ...], tuple[list[str], tuple[str, ...], tuple[str, ...]]] = {}
    count = 0
    for (values, starts), group in groups:
        agg = group.aggregate
        cached = keys.get(values)
        if cached is None:
            key = slicer.key_for(values)
            folded_dims = tuple(dim for (dim, value), raw in zip(key, values) if value == OTHER and raw != OTHER)
            rows = grouping_set.rows(key, admit)
            cached = keys[values] = ([slice_id(row) for _, row, _ in rows], folded_dims,
                                     tuple(g.name for g, _, folded in rows if folded))
        sids, folded_dims, folded_groupings = cached
        n = agg.traces
        count += n
        for dim in folded_dims:
            delta.count("folded:" + dim, n)
        for name in folded_groupings:
            delta.count(groupings.FOLDED_COUNTER_PREFIX + name, n)
        owned = True  # the group aggregate is stored once without a copy, merged elsewhere
        late = False
        for sid in sids:
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
            elif owned:
                totals[sid] = agg
                owned = False
            else:
                totals[sid] = agg.copy()
            if group.latest > last_seen.get(sid, 0.0):
                last_seen[sid] = group.latest
        if late:
            delta.count("late", n)
    if count:
        delta.count("traces", count)
    return count


def fold(traces: Iterable[Trace], slicer: Slicer, now: float,
         resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS, delta: BatchDelta | None = None) -> BatchDelta:
    """Fold validated traces (each with a ``ts``) into ``delta`` (a new one by default); returns it."""
    delta = delta if delta is not None else BatchDelta()
    traces = list(traces)
    place_groups(group_traces(traces, slicer.dimensions, resolutions).items(), slicer, now, resolutions, delta)
    # after the groups: the guard has answered for every release label already, in their order
    identity.place(identity.collect(traces), slicer.guard.admit, delta.identities)
    return delta
