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

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Protocol, TypeVar

from monitor import groupings, identity
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta, WindowKey
from monitor.schema import Trace
from monitor.slices import OTHER, UNKNOWN, SliceKey, Slicer, slice_id
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

#: A group's key: the slice dimensions' raw values (``unknown`` when missing)
#: and its window start at each resolution.
GroupKey = tuple[tuple[str, ...], tuple[int, ...]]
_K = TypeVar("_K")


@dataclass(slots=True)
class Group:
    """Traces of one raw slice that share their window at every resolution."""

    aggregate: Aggregate
    latest: float          # latest event time
    first: int             # position of the first trace (offset or index): the order groups are placed in

    @property
    def traces(self) -> int:
        return self.aggregate.traces


class Placeable(Protocol):
    """What :func:`place_groups` reads of a group: :class:`Group`, or a group whose sums are held
    elsewhere (the native fold's, :class:`streams.native.HeldGroup`)."""

    @property
    def traces(self) -> int: ...
    @property
    def latest(self) -> float: ...
    @property
    def first(self) -> int: ...
    @property
    def aggregate(self) -> Aggregate: ...


class Summing(Protocol):
    """Where :func:`place_groups` makes its sums and places them, by id: :class:`AggregateSums` in
    Python, or natively over the native fold's groups (:class:`streams.native.NativeSums`).

    ``part`` gives a group's aggregate an id; ``add`` the id of the sum of ``parts`` (two or more
    ids, the first copied and the others added in order: :meth:`Aggregate.copy` and
    :meth:`Aggregate.merge`), every ``part`` call coming before the first ``add``; ``place`` puts
    ids into ``delta``'s windows and totals in the order given (a slot's first copied, the others
    added into it). Each one must give what :class:`AggregateSums` gives, to the bit and to the order
    of every dict.
    """

    def part(self, group: Placeable) -> int: ...
    def add(self, parts: list[int]) -> int: ...
    def place(self, delta: BatchDelta, windows: list[tuple[WindowKey, int]],
              totals: list[tuple[str, int]]) -> None: ...


class AggregateSums:
    """:class:`Summing` with :class:`Aggregate` objects: an aggregate goes into the delta without a
    copy when no placement after it reads it."""

    def __init__(self) -> None:
        self.aggregates: list[Aggregate] = []

    def part(self, group: Placeable) -> int:
        self.aggregates.append(group.aggregate)
        return len(self.aggregates) - 1

    def add(self, parts: list[int]) -> int:
        aggregates = self.aggregates
        total = aggregates[parts[0]].copy()
        for part in parts[1:]:
            total.merge(aggregates[part])
        aggregates.append(total)
        return len(aggregates) - 1

    def place(self, delta: BatchDelta, windows: list[tuple[WindowKey, int]], totals: list[tuple[str, int]]) -> None:
        aggregates = self.aggregates
        readers = [0] * len(aggregates)
        for _, held in windows:
            readers[held] += 1
        for _, held in totals:
            readers[held] += 1
        into = delta.windows
        for key, held in windows:
            _place(into, key, held, aggregates, readers)
        by_slice = delta.totals
        for sid, held in totals:
            _place(by_slice, sid, held, aggregates, readers)


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


def _lattice(grouping_set: groupings.GroupingSet, dimensions: Sequence[str],
             ) -> tuple[list[Callable[[tuple[str, ...]], Hashable]], list[int], list[int]]:
    """Per grouping, a function of the raw values giving its projection (a key: equal for equal
    projections); the grouping it is summed from (its narrowest wider grouping; -1 for the widest, summed
    from the groups and from their own sums a level below); and an order that visits a grouping after
    its source."""
    dims = [frozenset(g.dimensions) for g in grouping_set.groupings]
    projections: list[Callable[[tuple[str, ...]], Hashable]] = []
    for g in grouping_set.groupings:
        where = [dimensions.index(d) for d in g.dimensions]
        projections.append(itemgetter(*where) if where else _nothing)   # (one position: the value itself)
    sources = []
    for mine in dims:
        wider = [k for k, theirs in enumerate(dims) if theirs > mine]
        sources.append(min(wider, key=lambda k: len(dims[k])) if wider else -1)
    return projections, sources, sorted(range(len(dims)), key=lambda j: -len(dims[j]))


def _nothing(values: tuple[str, ...]) -> Hashable:
    return ()


def _place(store: dict[_K, Aggregate], slot: _K, held: int, aggs: list[Aggregate], readers: list[int]) -> None:
    """Merge aggregate ``aggs[held]`` into ``store[slot]``: stored without a copy by its last reader."""
    agg = aggs[held]
    existing = store.get(slot)
    if existing is not None:
        existing.merge(agg)
    elif readers[held] == 1:    # nothing reads it after this
        store[slot] = agg
    else:
        store[slot] = agg.copy()
    readers[held] -= 1


def place_groups(groups: Iterable[tuple[GroupKey, Placeable]], slicer: Slicer, now: float,
                 resolutions: Sequence[Resolution], delta: BatchDelta, summing: Summing | None = None) -> int:
    """Merge groups (in order of first position) into ``delta``'s windows and
    totals — one row per slice grouping (:mod:`monitor.groupings`), through the
    cardinality guard; returns how many traces they hold.

    The guard is asked once per distinct raw slice, in order of first
    appearance (its answer for a value or a combination never changes once
    given); a window already past retention at ``now`` is skipped and its
    traces counted late (once per trace, not per grouping) — they still
    count in the coarser windows and the totals.

    Sums first, then placement, rather than every group merged into each
    row's window at every resolution and into each row's total. A sum is
    of one grouping's *projection* (the raw values of its dimensions: a
    row is a function of them, as the guard's answers do not change within
    a batch) at one level (level ``i`` < the number of resolutions: the
    windows of resolution ``i``, then the totals), and is merged once, into
    its row's window or total. It is built

    * for the widest groupings (no other holds all their dimensions), from
      the groups at level 0 and from its level-below sums above that (an
      hour window holds whole minute windows, the totals whole hours);
    * for every other grouping, from the same level's sums of the
      narrowest grouping with all its dimensions and more (e.g.
      ``release,arm,task_type`` from ``release,arm,task_type,tenant``).

    Per 200,000-record batch of the bench's 360 slices and 6 groupings
    (``bench/throughput.py``) that is 59,000 merges and 17,000 copies
    instead of 372,000 and 8,500 on an hour's replay (4.4x fewer dict
    operations), and 3.7x fewer on live traffic.

    Order: each sum adds its children in order of first position and each
    window or total takes its sums in that order, so the delta depends on
    the ordered groups alone, not on which path read which trace. Integer
    fields and sketch buckets are exact in any order; the two float fields
    (:data:`monitor.aggregate.FLOAT_FIELDS`) are the same terms added in
    another association than trace by trace (``tests/unit/monitor/
    test_fold.py`` checks them against the error bound of any order, and
    the whole delta to the bit against these sums spelt out).

    Cost: a sum is an id into flat lists (its first part, its row, its
    window start; the parts after the first, when there are any) until
    it is built, not an object: in a burst of new raw slices every group
    is its own sum at every level of the groupings that hold the new
    value, and objects per sum (about six per group) kept the garbage
    collector walking the batch over and over — 100,000 new tenants cost
    more than the group-by-group placement did (``bench/fold_placement.py``).
    A sum of one part is that part's aggregate (no copy, no merge); every
    sum is built before anything is placed, and an aggregate is stored in
    the delta without a copy only by the last of the placed sums that hold
    it, so no aggregate that a sum still reads is merged into.

    ``summing`` makes the sums and places them (:class:`Summing`; default
    :class:`AggregateSums`, in Python): this function decides which parts
    each sum adds and in what order, so the delta is the same whichever
    makes them.
    """
    summing = summing if summing is not None else AggregateSums()
    grouping_set = groupings.of_slicer(slicer)
    admit = groupings.guard_admit(slicer.guard)
    project, sources, order = _lattice(grouping_set, slicer.dimensions)
    width, depth = len(sources), len(resolutions)
    plan = [(j, sources[j]) for j in order]
    # raw values -> (row ids, folded dims, folded groupings, each grouping's projection id)
    keys: dict[tuple[str, ...], tuple[list[str], tuple[str, ...], tuple[str, ...], list[int]]] = {}
    row_ids: dict[SliceKey, str] = {}
    projection_ids: list[dict[Hashable, int]] = [{} for _ in sources]
    # window starts -> per level, the id of its starts from that level on (shifted past any projection id),
    # and whether a window of the group is late
    starts_ids: dict[tuple[int, ...], tuple[list[int], bool]] = {}
    level_ids: list[dict[tuple[int, ...], int]] = [{} for _ in range(depth + 1)]
    # The sums and the groups, by id (a group first, then the sums it starts): each one's first part
    # (-1 for a group), aggregate's id in ``summing`` (a sum's once built), row and window start; the
    # parts after the first.
    first: list[int] = []
    held: list[int] = []
    row_of: list[str] = []
    start_of: list[int] = []
    more: dict[int, list[int]] = {}
    index: list[list[dict[int, int]]] = [[{} for _ in sources] for _ in range(depth + 1)]   # key -> sum id
    sums_at: list[list[list[int]]] = [[[] for _ in sources] for _ in range(depth + 1)]   # first position order
    latest_of: dict[tuple[str, ...], float] = {}
    count = late = 0
    new, below = [-1] * width, [-1] * width   # per grouping, the sum this group started (-1: none)
    for (values, starts), group in groups:
        cached = keys.get(values)
        if cached is None:
            key = slicer.key_for(values)
            folded_dims = tuple(dim for (dim, value), raw in zip(key, values) if value == OTHER and raw != OTHER)
            rows = grouping_set.rows(key, admit)
            sids = []
            for _, row, _ in rows:   # (many raw slices share a row: a burst of new values folds into one)
                sid = row_ids.get(row)
                if sid is None:
                    sid = row_ids[row] = slice_id(row)
                sids.append(sid)
            cached = keys[values] = (sids, folded_dims, tuple(g.name for g, _, folded in rows if folded),
                                     [ids.setdefault(of(values), len(ids)) for ids, of in zip(projection_ids, project)])
        sids, folded_dims, folded_groupings, pids = cached
        n = group.traces
        count += n
        for dim in folded_dims:
            delta.count("folded:" + dim, n)
        for name in folded_groupings:
            delta.count(groupings.FOLDED_COUNTER_PREFIX + name, n)
        if not sids:
            continue
        found = starts_ids.get(starts)
        if found is None:
            found = starts_ids[starts] = (
                [ids.setdefault(starts[level:], len(ids)) << 40 for level, ids in enumerate(level_ids)],
                any(res.expired(start, now) for res, start in zip(resolutions, starts)))
        shifted, is_late = found
        if is_late:
            late += n
        if group.latest > latest_of.get(values, 0.0):
            latest_of[values] = group.latest
        part = len(first)
        first.append(-1)
        held.append(summing.part(group))
        row_of.append("")
        start_of.append(0)
        for level in range(depth + 1):
            # the sums this group adds a part to: a new sum of a widest grouping reaches on up a level,
            # a new sum of any grouping reaches those summed from it
            where, index_at, start = shifted[level], index[level], starts[level] if level < depth else 0
            reaches = False
            for j, source in plan:
                if source >= 0:
                    child = new[source]
                elif level:
                    child = below[j]
                else:
                    child = part
                if child < 0:
                    new[j] = -1
                    continue
                key_at = where + pids[j]
                sum_id = index_at[j].get(key_at)
                if sum_id is None:
                    sum_id = index_at[j][key_at] = len(first)
                    first.append(child)
                    held.append(-1)
                    row_of.append(sids[j])
                    start_of.append(start)
                    sums_at[level][j].append(sum_id)
                    new[j] = sum_id
                    reaches = reaches or source < 0
                else:
                    others = more.get(sum_id)
                    if others is None:
                        more[sum_id] = [child]
                    else:
                        others.append(child)
                    new[j] = -1
            if not reaches:
                break
            new, below = below, new
    # the sums, finest first, a grouping after its source; a sum of one part is that part's aggregate
    for level in range(depth + 1):
        for j in order:
            for sum_id in sums_at[level][j]:
                child = first[sum_id]
                others = more.get(sum_id)
                if others is None:
                    held[sum_id] = held[child]
                else:
                    held[sum_id] = summing.add([held[child], *[held[other] for other in others]])
    # the sums placed (a late window's only feed the coarser levels)
    windows: list[tuple[WindowKey, int]] = []
    for level, res in enumerate(resolutions):
        expiring: set[int] = set()
        for sums in sums_at[level]:
            for sum_id in sums:
                start = start_of[sum_id]
                if res.expired(start, now):
                    continue
                if start not in expiring:
                    delta.expire_at[(res.name, start)] = res.expire_at(start)
                    expiring.add(start)
                windows.append(((res.name, start, row_of[sum_id]), held[sum_id]))
    summing.place(delta, windows, [(row_of[sum_id], held[sum_id]) for sums in sums_at[depth] for sum_id in sums])
    last_seen = delta.last_seen
    for values, latest in latest_of.items():
        for sid in keys[values][0]:
            if latest > last_seen.get(sid, 0.0):
                last_seen[sid] = latest
    if late:
        delta.count("late", late)
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
