"""The exporter's series budget: what does not fit is folded into ``__other__`` rows, or left out by
whole grouping, so that every grouping served still sums to the fleet (pure).

A scrape exports a fixed number of series per slice row (its counters, and
per window its gauges when the row is active). Each trace is in one row of
every slice grouping (:mod:`monitor.groupings`), and a query reads one
grouping, so the budget keeps whole groupings exact. When the rows would need
more than ``max_series``:

1. the base grouping (``release × arm``) is served first: its busiest rows,
   and, only if they do not all fit, one ``release=__other__|arm=__other__``
   row for the rest (so the fleet's sum stays exact);
2. then the other groupings, fewest dimensions first: a grouping that fits
   whole is served whole; one that does not gets room for its ``__other__``
   row per release and arm (its dimensions other than release and arm read
   ``__other__``) and competes for the room left with its busiest rows; one
   whose ``__other__`` rows alone do not fit is left out of the scrape;
3. the rows of the groupings that compete are kept busiest first (totals'
   traces, ties by id) while they fit; the others merge into their release
   and arm's ``__other__`` row of their grouping.

So the slice series served never exceed ``max_series`` (given room for one
row), every sum over one served grouping by release or arm is exact, and
what was folded or left out is reported (``fleetmon_exporter_folded_slices``,
:attr:`Folded.dropped_groupings`).

The decision (:func:`plan_budget`) needs each row's trace count and the windows it is in, no
aggregate; :func:`apply_budget` then merges each served row from its members. The exporter keeps
its ``__other__`` rows from scrape to scrape instead (:mod:`monitor.exporter.folds`), equal to
that merge.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from monitor.aggregate import Aggregate
from monitor.groupings import grouping_name
from monitor.slices import parse_slice_id, slice_id

OTHER = "__other__"
_KEPT_DIMENSIONS = ("release", "arm")


@lru_cache(maxsize=65_536)  # the same few thousand active rows every scrape
def other_id(sid: str) -> str:
    """The ``__other__`` row a slice folds into: its release and arm, every other dimension ``__other__``."""
    return slice_id(tuple((dim, value if dim in _KEPT_DIMENSIONS else OTHER) for dim, value in parse_slice_id(sid)))


@lru_cache(maxsize=65_536)
def grouping_of(sid: str) -> str:
    """The name of the grouping a slice row belongs to (:func:`monitor.groupings.grouping_name`)."""
    return grouping_name(parse_slice_id(sid))


@dataclass(frozen=True)
class Plan:
    """Which rows are served: per row served, the stored rows it merges (in the order of the totals),
    how many rows were folded or left out, and the groupings left out whole."""

    members: dict[str, list[str]]
    folded_slices: int
    dropped_groupings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Folded:
    """The totals and window aggregates to export, how many rows were folded or left out, and the
    groupings left out of the scrape whole."""

    totals: dict[str, Aggregate]
    windows: list[dict[str, Aggregate]]
    folded_slices: int
    dropped_groupings: tuple[str, ...] = ()


#: The row the base grouping's rows fold into when even they do not fit.
FLEET_OTHER = slice_id((("release", OTHER), ("arm", OTHER)))


def apply_budget(totals: Mapping[str, Aggregate], windows: Sequence[Mapping[str, Aggregate]], max_series: int,
                 series_per_slice: int, series_per_window: int) -> Folded:
    """Serve at most ``max_series`` slice series (see the module docstring): :func:`plan_budget`, then
    each served row merged from its members (the totals in their order, then each window's)."""
    plan = plan_budget({sid: agg.traces for sid, agg in totals.items()}, windows, max_series,
                       series_per_slice, series_per_window)
    if plan is None:
        return Folded(dict(totals), [dict(w) for w in windows], 0)
    out_totals = {row: _merged(totals, sids) for row, sids in plan.members.items()}
    out_windows = []
    for w in windows:
        out: dict[str, Aggregate] = {}
        for row, sids in plan.members.items():
            present = [sid for sid in sids if sid in w]
            if present:
                out[row] = _merged(w, present)
        out_windows.append(out)
    return Folded(out_totals, out_windows, plan.folded_slices, plan.dropped_groupings)


def plan_budget(traces: Mapping[str, int], windows: Sequence[Container[str]], max_series: int,
                series_per_slice: int, series_per_window: int) -> Plan | None:
    """The rows to serve, from each stored row's trace count and the windows it is in alone (no
    aggregate is read); None when every row fits as it is.

    ``traces`` are the totals' trace counts per row (in the totals' order); ``windows`` the rows
    in each window (the active ones); a row costs ``series_per_slice`` plus ``series_per_window``
    per window it is in, an ``__other__`` row is counted as in every window.
    """
    costs = dict.fromkeys(traces, series_per_slice)  # what each row costs, counted once
    for w in windows:
        for sid in costs:
            if sid in w:
                costs[sid] += series_per_window
    needed = sum(costs.values())
    if needed <= max_series:
        return None
    # busiest first, ties by id: the same order as sorting by (-traces, id), from one sort by id (stable)
    busiest = sorted(sorted(traces), key=traces.__getitem__, reverse=True)
    by_grouping: dict[str, list[str]] = {}
    for sid in busiest:
        by_grouping.setdefault(grouping_of(sid), []).append(sid)
    full_row = series_per_slice + series_per_window * len(windows)
    room = max_series
    target: dict[str, str] = {}   # row -> the row it is served as (itself when kept)
    base = by_grouping.pop("", [])
    whole_base = sum(costs[sid] for sid in base)
    if whole_base <= room:
        target.update((sid, sid) for sid in base)
        room -= whole_base
    else:
        room -= full_row
        for sid in base:
            if sid != FLEET_OTHER and costs[sid] <= room:
                target[sid] = sid
                room -= costs[sid]
            else:
                target[sid] = FLEET_OTHER
        room = 0  # the fleet's rows did not all fit: no other grouping is served
    dropped: list[str] = []
    competing: set[str] = set()
    for name in sorted(by_grouping, key=lambda n: (n.count(","), n)):
        rows = by_grouping[name]
        whole = sum(costs[sid] for sid in rows)
        others = {other_id(sid) for sid in rows}
        if whole <= room:
            target.update((sid, sid) for sid in rows)
            room -= whole
        elif len(others) * full_row <= room:
            room -= len(others) * full_row
            target.update((sid, other_id(sid)) for sid in rows)
            competing.update(sid for sid in rows if sid not in others)
        else:
            dropped.append(name)
    for sid in busiest:  # the competing rows, busiest first
        if sid in competing and costs[sid] <= room:
            target[sid] = sid
            room -= costs[sid]
    members: dict[str, list[str]] = {}
    for sid in traces:
        if sid in target:
            members.setdefault(target[sid], []).append(sid)
    folded = sum(1 for sid in traces if target.get(sid) != sid)
    return Plan(members, folded, tuple(dropped))


def _merged(aggregates: Mapping[str, Aggregate], sids: Sequence[str]) -> Aggregate:
    """One row's aggregate: the reader's own object when the row is one stored row (never mutated)."""
    if len(sids) == 1:
        return aggregates[sids[0]]
    out = Aggregate()
    for sid in sids:
        out.merge(aggregates[sid])
    return out
