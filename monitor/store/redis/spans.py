"""The exporter's per-slice read cache and its arithmetic (no I/O: :mod:`monitor.store.redis.reads` talks to Redis).

Per active slice it keeps no window content, only the edges: the trace count and
the float fields of every window of the longest span (two flat arrays), one running
sum per span, the content of the newest minutes (:data:`RECENT_WINDOWS`) and of
the windows that changed in the slice's last update (the ones the next writes
change) as the fetch sent it (~1 kB each; parsed only when needed: a changed
window's increment is read natively from its old and new text), and the version
(the totals' ``traces``) they were read at. About 2 kB a slice plus its sums and
those few windows, whatever the span length.

A span's new sum is the old one plus what each changed window gained (its new
content minus the cached one), minus every window that slid out, plus every
window that slid in. A window that slid out is fetched again for that (Redis
keeps it for the retention; its count says it is the content that was added). A
window whose old content is not cached, a count that went down (a rebuild), or a
sum that does not add up turns the slice's update into a fresh sum of its
windows (:mod:`monitor.store.redis.span_sums`). Integer counts and sketch buckets
are added and subtracted exactly; the float fields are re-summed over the cached
floats in window order, so a sum equals a fresh merge field for field. Every sum is
moved in place under a new object (``span_sums.moved_in_place``: nothing is copied, so a
scrape, the minute's slide included, never holds the old and the new sums at once): first
those whose windows only gained or came in (``span_sums.added``: nothing can fail once it
starts), then those a window left; if one of those does not add up, the slice's old sums are
left stale and it is summed afresh. The usual update (nothing slid; every window that changed only
gained, from a content the cache holds, or got its first traces) takes a shorter path,
``_only_gained``, to the same result (a test compares the two).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from monitor.aggregate import Aggregate
from monitor.store.redis.span_sums import (
    N_FLOATS,
    NAN,
    Ops,
    Windows,
    _sketched,
    added,
    changed,
    fresh_sums,
    moved_in_place,
    positions,
    resum_floats,
    same_sketch,
    shift_of,
    shifted,
    shifted_moves,
    span_of,
    steps_of,
    window_floats,
)
from monitor.store.redis.wire import CODEC, FLOATS, decode_interned, text

#: The newest window starts of the range (the next minute, the current one and two late ones) whose
#: content is kept; any other window's is kept only while it changed in the last update.
RECENT_WINDOWS = 4
_ABSENT = array("d", [NAN]) * N_FLOATS


#: A cached window: its count and its text as the fetch sent it.
Recent = tuple[int, bytes]


class CachedTotals(NamedTuple):
    """A slice's totals and the version they were read at."""

    version: str
    totals: Aggregate


@dataclass(slots=True)
class SliceSpans:
    """A slice's cached edges and span sums (see the module docstring).

    ``counts[i]`` is the trace count of window ``starts[i]`` (0: absent) and
    ``floats[i * len(FLOATS) + j]`` its float field ``FLOATS[j]`` (nan: absent).
    ``recent``: windows' contents as fetched, each ``(its count, its text)``, the count that of its start.
    ``version`` is '' when the windows are not all from one snapshot (a write
    landed between the scripts). ``suffixes``: per span, how many of ``starts``
    (the last ones) it covers.
    """

    version: str
    starts: tuple[int, ...]
    suffixes: tuple[int, ...]
    counts: array
    floats: array
    recent: dict[int, Recent]
    sums: list[Aggregate]

    def count(self, start: int) -> int:
        """The cached count of window ``start`` (0 when absent or outside :attr:`starts`)."""
        i = positions(self.starts).get(start)
        return 0 if i is None else self.counts[i]

    def cached(self, start: int) -> bool:
        """Whether window ``start``'s content is cached as counted."""
        entry = self.recent.get(start)
        return entry is not None and entry[0] == self.count(start)


@dataclass(slots=True)
class Change:
    """One active slice to update this scrape: what the counts script said, and the plan
    (:func:`monitor.store.redis.span_plan.plan`).

    ``counts``: per start of the range, its count. ``wanted``: the window starts to
    fetch (``leaving``: those outside the range, with the count they were added at);
    ``fresh``: sum the spans afresh from all their windows; ``shortcut``: the totals
    can follow the windows' increments (only their float fields are fetched).
    """

    sid: str
    version: str
    counts: Sequence[int]
    wanted: list[int] = field(default_factory=list)
    leaving: dict[int, int] = field(default_factory=dict)
    fresh: bool = False
    shortcut: bool = False


class Update(NamedTuple):
    """A slice's new cache entry, per changed window of the known range what it gained (None: unknown),
    and per span the ops that made its new sum of the old one (None: the same object; () unknown)."""

    spans: SliceSpans
    gained: dict[int, Aggregate | None]
    ops: tuple[Ops | None, ...] = ()


def updated(change: Change, old: SliceSpans | None, fetched: Mapping[int, bytes], range_: tuple[int, ...],
            suffixes: tuple[int, ...], same: bool) -> Update | None:
    """The slice's new cache entry after ``fetched`` (start → the window as the fetch script sent it).

    ``same``: the fetch saw the version the counts script saw (one snapshot). None
    when the cache does not add up (a window that left a span changed since it was
    added, or a rebuild raced it): the caller sums the slice afresh.
    """
    version = change.version if same else ""
    if change.fresh or old is None:
        return Update(fresh_spans(version, fetched, range_, suffixes), {})
    if not change.leaving and old.starts == range_ and old.suffixes == suffixes:
        only_gained = _only_gained(change, old, fetched, range_, suffixes, version)
        if only_gained is not None:
            return only_gained
    windows = Windows(fetched, old.recent)
    heads = windows.heads
    for start, count in change.leaving.items():
        if heads[start][0] != count:
            return None
    new_pos = positions(range_)
    old_counts = old.counts
    counts = array("q", change.counts)
    d = shift_of(old.starts, range_) if old.suffixes == suffixes else None
    if d == 0:  # nothing slid
        before, floats = old_counts, array("d", old.floats)
    elif d is not None:  # the range moved on by d minutes: the cache moves along
        before, floats = shifted(old_counts, old.floats, d)
        for i in changed(counts, before):
            floats[i * N_FLOATS:(i + 1) * N_FLOATS] = _ABSENT  # not the content the cache knew
    else:  # the spans changed otherwise: realign the cached floats on the new range
        old_pos = positions(old.starts)
        before = array("q", [old_counts[j] if (j := old_pos.get(start)) is not None else 0 for start in range_])
        floats = array("d", [NAN]) * (len(range_) * N_FLOATS)
        for i, start in enumerate(range_):
            j = old_pos.get(start)
            if j is not None and old_counts[j] == counts[i]:
                floats[i * N_FLOATS:(i + 1) * N_FLOATS] = old.floats[j * N_FLOATS:(j + 1) * N_FLOATS]
    for start, (traces, window) in heads.items():
        at = new_pos.get(start)
        if at is not None:
            counts[at] = traces  # the content's own count (a write may have raced the counts)
            floats[at * N_FLOATS:(at + 1) * N_FLOATS] = array("d", window)
    differ = changed(counts, before)  # before: the cached count of each start of the range (0: none)
    has = windows.has
    gained: dict[int, Aggregate | None] = {}  # what the changed windows of the known range gained
    first_known, last_known = old.starts[0], old.starts[-1]
    for i in differ:
        start = range_[i]
        if first_known <= start <= last_known:
            was = before[i]
            if not has(start, counts[i]) or (was and not has(start, was)):
                return None
            gained[start] = windows.gained(start, counts[i], was) if was else windows.content(start, counts[i])
    planned: list[list[tuple[int, int, int]]] = []  # per span, its windows' moves (all checked first)
    for k, length in enumerate(suffixes):
        if d == 0:  # only the windows that changed moved
            first = len(range_) - length
            moves = [(range_[i], before[i], counts[i]) for i in differ if i >= first]
        elif d is not None:  # and those that left or came in
            moves = shifted_moves(length, d, old.starts, old_counts, range_, before, counts, differ)
        else:
            moves = []
            in_span, in_old = set(span_of(range_, length)), set(span_of(old.starts, old.suffixes[k]))
            old_at = positions(old.starts)
            for start in sorted(in_span | in_old):
                c_old = old_counts[old_at[start]] if start in in_old else 0
                c_new = counts[new_pos[start]] if start in in_span else 0
                if c_old != c_new:  # else the same content (a count identifies it), or absent on both sides
                    moves.append((start, c_old, c_new))
        for start, c_old, c_new in moves:
            if (c_old and not has(start, c_old)) or (c_new and not has(start, c_new)):
                return None
        planned.append(moves)
    parts = [steps_of(old.sums[k], moves, gained, windows) for k, moves in enumerate(planned)]
    sums: list[Aggregate] = list(old.sums)
    ops: list[Ops | None] = [None] * len(suffixes)
    # the spans that only gain first (nothing can fail there), then those a window left (that can)
    for k in sorted(range(len(suffixes)), key=lambda k: parts[k] is None):
        if planned[k]:
            known = parts[k]
            moved = _moved(sums[k], planned[k], gained, windows) if known is None else added(sums[k], known)
            if moved is None:
                return None  # the slice is summed afresh; its sums moved so far are left stale
            sums[k], ops[k] = resum_floats(moved[0], floats, range_, span_of(range_, suffixes[k])), moved[1]
    recent = _recent(range_, counts, {start: head[0] for start, head in windows.heads.items()}, windows.raw, old)
    return Update(SliceSpans(version, range_, suffixes, counts, floats, recent, sums), gained, tuple(ops))


def _only_gained(change: Change, old: SliceSpans, fetched: Mapping[int, bytes], range_: tuple[int, ...],
                 suffixes: tuple[int, ...], version: str) -> Update | None:
    """:func:`updated` when nothing slid and every window that changed only gained, from contents the
    cache holds (the usual scrape: traces landed in the newest minutes); None otherwise, nothing
    changed (the general path then decides). The same sums, counts, floats, kept windows and ops as
    the general path: each span's sum moved in place by the windows' increments in window order."""
    if CODEC is None:
        return None
    where = positions(range_)
    counts = array("q", change.counts)
    floats = array("d", old.floats)
    raws: dict[int, bytes] = {}
    heads: dict[int, int] = {}
    gained: dict[int, Aggregate] = {}
    for start, raw in fetched.items():
        i = where.get(start)
        if i is None:
            return None
        was = old.counts[i]
        raw = raw.encode() if isinstance(raw, str) else raw
        if was:  # what it gained since the content the cache holds
            entry = old.recent.get(start)
            got = None if entry is None or entry[0] != was else CODEC.delta(raw, entry[1])
            if got is None or got[2] is None:
                return None  # its old content is not cached as counted, it did not only gain, or it reads in Python
            traces, window, step = got
            part = _sketched(*step)
        else:  # a window with its first traces: its content
            part = decode_interned(raw)
            traces, window = part.traces, window_floats(part)
        if traces <= was:
            return None
        counts[i] = traces
        floats[i * N_FLOATS:(i + 1) * N_FLOATS] = array("d", window)
        raws[start], heads[start], gained[start] = raw, traces, part
    differ = changed(counts, old.counts)
    if [range_[i] for i in differ] != sorted(fetched):
        return None  # a window changed that was not fetched, or a fetched one did not
    if any(not same_sketch(total.latency, part) for total in old.sums for part in gained.values()):
        return None
    sums: list[Aggregate] = list(old.sums)
    ops: list[Ops | None] = [None] * len(suffixes)
    n = len(range_)
    for k, length in enumerate(suffixes):
        parts = [gained[range_[i]] for i in differ if i >= n - length]
        if parts:
            moved, ops[k] = added(sums[k], parts)
            sums[k] = resum_floats(moved, floats, range_, span_of(range_, length))
    recent = _recent(range_, counts, heads, raws, old)
    return Update(SliceSpans(version, range_, suffixes, counts, floats, recent, sums), dict(gained), tuple(ops))


def _moved(total: Aggregate, moves: Iterable[tuple[int, int, int]], gained: Mapping[int, Aggregate | None],
           windows: Windows) -> tuple[Aggregate, Ops] | None:
    """``total`` with every window moved from its ``before`` to its ``after`` count's content (0: absent),
    in place under a new object (:func:`moved_in_place`: no copy, the slide of every minute holds no
    second set of sums), and the ops; None when a window does not take out (the cache does not add
    up): ``total`` is then left stale and the new object half moved, and the caller sums the slice
    afresh (the exporter's ``__other__`` rows merge a stale member afresh)."""
    total = moved_in_place(total)
    ops: list[tuple[bool, Aggregate]] = []
    try:
        for start, before, after in moves:
            if before and after:
                step = gained.get(start)
                if step is not None:
                    total.merge(step)
                    ops.append((True, step))
                    continue
            if before:
                part = windows.content(start, before)
                total.subtract(part)
                ops.append((False, part))
            if after:
                part = windows.content(start, after)
                total.merge(part)
                ops.append((True, part))
    except ValueError:
        return None  # the cache does not add up: a rebuild raced it
    return total, tuple(ops)


def _recent(range_: tuple[int, ...], counts: array, heads: Mapping[int, int], raws: Mapping[int, bytes],
            old: SliceSpans | None) -> dict[int, Recent]:
    """The windows to keep: those among the newest :data:`RECENT_WINDOWS` starts and those that
    changed in this update, each still as counted (``heads``: each fetched window's own count,
    ``raws`` its text)."""
    keep: dict[int, Recent] = {}
    newest = max(0, len(range_) - RECENT_WINDOWS)
    where = positions(range_)
    for start, traces in heads.items():
        i = where.get(start)
        if i is not None and i < newest and counts[i] and traces == counts[i] and (
                old is None or old.count(start) != counts[i]):
            keep[start] = (traces, raws[start])
    for i in range(newest, len(range_)):
        start, count = range_[i], counts[i]
        if not count:
            continue
        if heads.get(start) == count:
            keep[start] = (count, raws[start])
        elif old is not None and (entry := old.recent.get(start)) is not None and entry[0] == count:
            keep[start] = entry
    return keep


def fresh_spans(version: str, fetched: Mapping[int, bytes], range_: tuple[int, ...],
                suffixes: tuple[int, ...]) -> SliceSpans:
    """The cache entry of a slice whose every window of ``range_`` with traces is in ``fetched``."""
    fresh = fresh_sums(fetched, range_, suffixes)
    newest = len(range_) - RECENT_WINDOWS
    recent = {start: (fresh.counts[i], _as_bytes(fetched[start])) for i, start in enumerate(range_)
              if i >= newest and fresh.counts[i]}
    return SliceSpans(version, range_, suffixes, fresh.counts, fresh.floats, recent, fresh.sums)


def _as_bytes(raw: bytes | str) -> bytes:
    return raw.encode() if isinstance(raw, str) else raw


def followed_totals(cached: Aggregate, change: Change, old: SliceSpans, gained: Mapping[int, Aggregate | None],
                    floats: bytes | str) -> tuple[Aggregate, Ops] | None:
    """The ``cached`` totals moved by the changed windows' increments; floats as Redis holds them.

    Only windows the cache knew count: a window that came into the span is already in
    the totals (the version says no trace reached it). None when the increments do not
    fit (then the totals are read whole). With them, the ops that made them of ``cached``.
    """
    if change.version == old.version:
        return cached, ()
    first, last = old.starts[0], old.starts[-1]
    steps = [step for start, step in gained.items() if first <= start <= last]
    if any(step is None or not same_sketch(cached.latency, step) for step in steps):
        return None
    values = [(key, float(value) if value else None) for key, value in zip(FLOATS, text(floats).split(" "))]
    total, ops = added(cached, [step for step in steps if step is not None])  # checked: nothing fails now
    for key, number in values:
        if number is not None:
            total.counts[key] = number
        else:
            total.counts.pop(key, None)
    return total, ops
