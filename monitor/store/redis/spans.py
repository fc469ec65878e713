"""The exporter's per-slice read cache and its arithmetic (no I/O: :mod:`monitor.store.redis.reads` talks to Redis).

Per active slice: its windows of the longest span as the bytes Redis sent, their
trace counts, one running sum per span, and the version (the totals' ``traces``)
they were read at. A span's new sum is the old one minus the cached version of
every window that changed or slid out, plus the new version of every window that
changed or slid in. Integer counts and sketch buckets are added and subtracted
exactly; the float fields are re-summed over the cached windows in window order,
so a sum equals a fresh merge field for field. Whenever the cache does not add
up (a rebuild raced it) the sum is taken afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import add
from typing import Final, NamedTuple

from monitor.aggregate import Aggregate
from monitor.sketch import LogSketch
from monitor.store.redis.wire import FLOATS, decode_hash, text

#: A cached window: ``(count, bytes Redis sent, float fields in FLOATS order)``, None for an
#: absent float. A plain tuple of atoms on purpose: the garbage collector untracks exact tuples
#: only (a NamedTuple stays tracked), and tens of thousands would slow every full collection.
#: Read its parts with the ``ENTRY_*`` indices.
Entry = tuple[int, bytes, tuple["float | None", ...]]
ENTRY_COUNT: Final = 0
ENTRY_BYTES: Final = 1
ENTRY_FLOATS: Final = 2


def make_entry(raw: bytes) -> tuple[Entry, Aggregate]:
    """The cache entry of a window as the fetch script sent it, and its parsed form."""
    agg = decode_hash(raw)
    return (agg.traces, raw, tuple([agg.counts.get(key) for key in FLOATS])), agg


class CachedTotals(NamedTuple):
    """A slice's totals and the version they were read at."""

    version: str
    totals: Aggregate


@dataclass(slots=True)
class SliceSpans:
    """A slice's cached windows (count > 0 only), their counts, span sums, and their version.

    ``parsed`` holds the parsed form of the windows that changed in the slice's last
    update (likely to change again); the others are parsed again from their bytes when
    needed. ``version`` is '' when the windows are not all from one snapshot (a write
    landed between the scripts). ``suffixes``: per span, how many of ``starts`` (the
    last ones) it covers.
    """

    version: str
    starts: tuple[int, ...]
    suffixes: tuple[int, ...]
    windows: dict[int, Entry]
    counts: dict[int, int]
    parsed: dict[int, Aggregate]
    sums: list[Aggregate]


@dataclass(slots=True)
class Change:
    """One active slice to update this scrape: what the counts script said, and the plan.

    ``wanted``: the window starts to fetch; ``shortcut``: the totals can follow the
    windows' increments (only their float fields are fetched).
    """

    sid: str
    version: str
    counts: dict[int, int]
    wanted: list[int] = field(default_factory=list)
    shortcut: bool = False


def plan(sid: str, version: str, counts: dict[int, int], range_: tuple[int, ...], state: SliceSpans | None,
         totals_version: str | None) -> Change:
    """Which windows to fetch, and whether the totals can follow the windows.

    They can when every trace added since the cached version landed in a window the
    cache knew: the version grew by exactly those windows' count increases (the fold
    adds the same aggregate to a trace's window and to the totals, atomically). A
    count that went down (a rebuild) turns the shortcut off.
    """
    change = Change(sid, version, counts)
    if state is None:
        change.wanted = [start for start, count in counts.items() if count > 0]
        return change
    before = state.counts
    change.wanted = [start for start, count in counts.items() - before.items() if count > 0]
    if not (state.version and totals_version == state.version):
        return change
    first, last = range_[0], range_[-1]
    if any(first <= start <= last for start in before.keys() - counts.keys()):
        return change  # a count went down to 0: a rebuild
    known_first, known_last = state.starts[0], state.starts[-1]
    grown = 0
    for start in change.wanted:
        if known_first <= start <= known_last:
            step = counts[start] - before.get(start, 0)
            if step < 0:
                return change  # a count went down: a rebuild
            grown += step
    try:
        change.shortcut = int(version) - int(state.version) == grown
    except ValueError:
        pass
    return change


class Parsed:
    """Parsed old and new windows of one slice's update, and their differences, made once."""

    __slots__ = ("old", "new", "deltas")

    def __init__(self, old: SliceSpans | None, new: dict[int, Aggregate]) -> None:
        self.old: dict[int, Aggregate] = dict(old.parsed) if old is not None else {}
        self.new = new
        self.deltas: dict[int, Aggregate | None] = {}

    def before(self, start: int, entry: Entry) -> Aggregate:
        agg = self.old.get(start)
        if agg is None:
            agg = self.old[start] = decode_hash(entry[ENTRY_BYTES])
        return agg

    def after(self, start: int, entry: Entry) -> Aggregate:
        agg = self.new.get(start)
        if agg is None:
            agg = self.new[start] = decode_hash(entry[ENTRY_BYTES])
        return agg

    def delta(self, start: int, before: Entry, after: Entry) -> Aggregate | None:
        """``after - before`` (what the window gained), None if anything went down (a rebuild).

        Its float fields are approximate: the callers set those exactly.
        """
        if start in self.deltas:
            return self.deltas[start]
        new, old = self.after(start, after), self.before(start, before)
        (new_counts, new_buckets), (old_counts, old_buckets) = ((a.counts, a.latency.buckets) for a in (new, old))
        counts = {k: v - old_counts.get(k, 0) for k, v in new_counts.items()}
        buckets = {k: n - old_buckets.get(k, 0) for k, n in new_buckets.items()}
        zero = new.latency.zero_count - old.latency.zero_count
        delta = None
        if (zero >= 0 and min(counts.values(), default=0) >= 0 and min(buckets.values(), default=0) >= 0
                and not old_counts.keys() - new_counts.keys() and not old_buckets.keys() - new_buckets.keys()):
            sketch = LogSketch(new.latency.relative_accuracy, new.latency.min_value)
            sketch.buckets = {k: n for k, n in buckets.items() if n}
            sketch.zero_count, sketch.count = zero, new.latency.count - old.latency.count
            delta = Aggregate({k: v for k, v in counts.items() if v}, sketch)
        self.deltas[start] = delta
        return delta


def updated(change: Change, old: SliceSpans | None, fetched: dict[int, tuple[Entry, Aggregate]],
            range_: tuple[int, ...], suffixes: tuple[int, ...], same: bool) -> tuple[SliceSpans, Parsed]:
    """The slice's new windows and sums after ``fetched``, and the parsed windows it used.

    ``same``: the fetch saw the version the counts script saw (one snapshot).
    """
    cached = old.windows if old is not None else {}
    counts = change.counts
    new_parsed = {start: agg for start, (entry, agg) in fetched.items() if entry[ENTRY_COUNT] > 0}
    if old is not None and old.starts == range_:
        windows = dict(cached)
        for start in cached.keys() - counts.keys():
            del windows[start]  # down to 0: a rebuild
    else:
        windows = {start: cached[start] for start in counts.keys() & cached.keys()}
    counts = dict(counts)
    for start, (entry, _agg) in fetched.items():
        if entry[ENTRY_COUNT] > 0:
            windows[start] = entry
            counts[start] = entry[ENTRY_COUNT]  # the content's own count (a write may have raced the counts)
        else:
            windows.pop(start, None)
            counts.pop(start, None)
    parsed = Parsed(old, dict(new_parsed))
    changed = set(fetched).union([start for start in cached if start not in windows])
    comparable = old if old is not None and len(old.suffixes) == len(suffixes) else None  # else sum afresh
    sums = [slide(comparable, k, windows, parsed, changed, range_, length) for k, length in enumerate(suffixes)]
    keep = {start: agg for start, agg in new_parsed.items() if start in cached}  # changed, not new
    return SliceSpans(change.version if same else "", range_, suffixes, windows, counts, keep, sums), parsed


def followed_totals(cached: Aggregate, change: Change, old: SliceSpans, parsed: Parsed,
                    fetched: dict[int, tuple[Entry, Aggregate]], floats: bytes | str) -> Aggregate | None:
    """The ``cached`` totals moved by the changed windows' increments; floats as Redis holds them.

    Only windows the cache knew count: a window that came into the span is already in
    the totals (the version says no trace reached it). None when the increments do not
    fit (then the totals are read whole).
    """
    if change.version == old.version:
        return cached
    total = cached.copy()
    first, last = old.starts[0], old.starts[-1]
    try:
        for start, (entry, agg) in fetched.items():
            if first <= start <= last:
                before = old.windows.get(start)
                if before is None:
                    total.merge(agg)
                    continue
                delta = parsed.delta(start, before, entry)
                if delta is None:
                    total.subtract(parsed.before(start, before)).merge(agg)
                else:
                    total.merge(delta)
    except ValueError:
        return None
    for key, value in zip(FLOATS, text(floats).split(" ")):
        if value:
            total.counts[key] = float(value)
        else:
            total.counts.pop(key, None)
    return total


def slide(old: SliceSpans | None, k: int, windows: dict[int, Entry], parsed: Parsed, changed: set[int],
          range_: tuple[int, ...], length: int) -> Aggregate:
    """Span ``k``'s new sum: the old one minus what left or changed, plus what came or changed.

    ``changed``: the starts whose window differs from the cached one.
    """
    span = range_[len(range_) - length:]
    if old is not None:
        old_span = old.starts[len(old.starts) - old.suffixes[k]:]
        if old_span == span:  # only the changed windows differ
            moves = [(start, old.windows.get(start), windows.get(start)) for start in changed
                     if span and span[0] <= start <= span[-1]]
        else:
            old_set, new_set = set(old_span), set(span)
            moves = [(start, old.windows.get(start) if start in old_set else None,
                      windows.get(start) if start in new_set else None) for start in old_set | new_set]
            moves = [move for move in moves if move[1] is not move[2]]
        if not moves:
            return old.sums[k]
        if 2 * len(moves) < length:
            total = old.sums[k].copy()
            try:
                for start, before, after in moves:
                    delta = None
                    if before is not None and after is not None:
                        delta = parsed.delta(start, before, after)
                    if delta is not None:
                        total.merge(delta)
                        continue
                    if before is not None:
                        total.subtract(parsed.before(start, before))
                    if after is not None:
                        total.merge(parsed.after(start, after))
                return resum_floats(total, windows, span)
            except ValueError:
                pass  # the cache does not add up (a rebuild raced it): sum afresh
    total = Aggregate()
    for start in span:
        entry = windows.get(start)
        if entry is not None:
            total.merge(parsed.after(start, entry))
    total.latency.buckets = dict(sorted(total.latency.buckets.items()))  # see decode_hash
    return resum_floats(total, windows, span)


def resum_floats(total: Aggregate, windows: dict[int, Entry], span: Sequence[int]) -> Aggregate:
    """Set the float fields of ``total`` to their sum over ``span``'s windows, in window order.

    The same additions, in the same order, as a fresh merge of the windows
    (a left fold: not ``sum()``, which compensates from Python 3.12 on), so
    subtracting never leaves rounding residue behind.
    """
    entries = [entry[ENTRY_FLOATS] for entry in map(windows.get, span) if entry is not None]
    counts = total.counts
    for i, key in enumerate(FLOATS):
        values = [value for floats in entries if (value := floats[i]) is not None]
        if values:
            counts[key] = reduce(add, values)
        else:
            counts.pop(key, None)
    return total
