"""The exporter's store reads, incremental: a scrape moves what changed since the last one.

A scrape of 1,000 active slices with an hour of minute windows covers about
61,000 window hashes; merging them all on every scrape costs seconds (see
bench/exporter_bench.py). In production every slice changes between two
scrapes, but only in a window or two, so :class:`SpanReader` keeps per slice
the minute windows of the longest span, one running sum per span (5 minutes,
1 hour) and the totals, and per scrape and group of active slices:

1. one script reads each slice's *version* (the ``traces`` field of its
   totals hash) and — only when the version moved or the spans slid — the
   trace count of every window in the span (the ``P:wc:...`` count hashes of
   :mod:`monitor.store.redis.store`);
2. one more script fetches the windows whose count differs from the cached
   one, with the version again and either the totals' two float fields or,
   when the shortcut of step 4 does not hold, the whole totals hash;
3. each span's sum becomes the old one minus the cached version of every
   window that changed or slid out, plus the new version of every window
   that changed or slid in (a changed window adds just what it gained);
4. the totals follow the same increments when every trace added since the
   cached version landed in a window the cache knew (the version grew by
   exactly those windows' count increases): :func:`monitor.fold.fold` adds
   the same aggregate to a trace's window and to the totals, atomically.

The groups' scripts are pipelined (:mod:`monitor.store.redis.wire`): Redis runs
the next group's while this process applies the previous group's replies.

Exactness: integer counts and sketch buckets are added and subtracted
exactly, so sums and totals equal a fresh read field for field; the two
float fields are re-summed over the cached windows in window order (spans)
or taken from Redis as they are (totals): no rounding drift, ever. Inactive
slices' totals are read whole when their version moves.

Why a count identifies a window's content: every write to a window is a fold
of at least one trace, and the same atomic apply adds the trace to the
window, its count field and the totals, so a count grows with every write to
its window and the version with every write to the slice (a cached window's
count is its own ``traces`` field). A write landing between a group's two
scripts changes the version the second one sees: that slice's totals are
read whole, its sums may show the write in the windows fetched and not yet
in the others, and its counts are read again next scrape. After a rebuild
(clear, then replay of the same topic) a window with the same count holds
the same traces; a count that went down turns the shortcut off. Spans must
be shorter than the retention of the store's resolution (48 h for minutes;
the exporter's store uses the defaults), else the store merges them afresh.

Unchanged sums and totals are returned as the *same objects* as on the
previous scrape (the exporter's caches hit by identity); a changed one is a
new object. Memory: every cached window as the bytes Redis sent (about 1 kB
each with its entry: 60 MB for 1,000 slices with an hour of windows), the
parsed form only of the windows that changed in the slice's last update,
one sum per span and the totals; about 110 MB in all with the exporter's
rendered samples (bench/exporter_bench.py's data).

Stores without a Redis client (the in-memory store) are read through the
plain :class:`~monitor.store.base.Store` methods, without caching.
"""

from __future__ import annotations

import logging
from functools import reduce
from operator import add, itemgetter
from typing import Any, Sequence

from monitor.aggregate import Aggregate
from monitor.store.redis.wire import FLOATS, Scripts, Wire, chunks, decode_hash, text
from monitor.sketch import LogSketch
from monitor.store.base import Store
from monitor.windows import MINUTE, Resolution

log = logging.getLogger("fleetmon.exporter")

#: Active slices per pair of round trips (counts, fetch); see :class:`~monitor.store.redis.wire.Wire`.
GROUP_SLICES = 250


#: A cached window: ``(count, bytes Redis sent, (fees_usd, latency_sum_seconds))``,
#: None for an absent float. A plain tuple of atoms, so the garbage collector
#: stops tracking it (tens of thousands would slow every full collection).
Entry = tuple[int, bytes, tuple["float | None", ...]]


def _entry(raw: bytes) -> tuple[Entry, Aggregate]:
    agg = decode_hash(raw)
    return (agg.traces, raw, tuple([agg.counts.get(key) for key in FLOATS])), agg


class _Spans:
    """A slice's cached windows (count > 0 only), their counts, span sums, and their version.

    ``parsed`` holds the parsed form of the windows that changed in the
    slice's last update (likely to change again); the others are parsed
    again from their bytes when needed. ``version`` is '' when the windows
    are not all from one snapshot (a write landed between the scripts).
    """

    __slots__ = ("version", "starts", "suffixes", "windows", "counts", "parsed", "sums")

    def __init__(self, version: str, starts: tuple[int, ...], suffixes: tuple[int, ...],
                 windows: dict[int, Entry], counts: dict[int, int], parsed: dict[int, Aggregate],
                 sums: list[Aggregate]) -> None:
        self.version, self.starts, self.suffixes = version, starts, suffixes
        self.windows, self.counts, self.parsed, self.sums = windows, counts, parsed, sums


class _Change:
    """One active slice to update this scrape: what the counts script said."""

    __slots__ = ("sid", "version", "counts", "wanted", "shortcut")

    def __init__(self, sid: str, version: str, counts: dict[int, int]) -> None:
        self.sid, self.version, self.counts = sid, version, counts
        self.wanted: list[int] = []
        self.shortcut = False


class _Parsed:
    """Parsed old and new windows of one slice's update, and their differences, made once."""

    __slots__ = ("old", "new", "deltas")

    def __init__(self, old: _Spans | None, new: dict[int, Aggregate]) -> None:
        self.old: dict[int, Aggregate] = dict(old.parsed) if old is not None else {}
        self.new = new
        self.deltas: dict[int, Aggregate | None] = {}

    def before(self, start: int, entry: Entry) -> Aggregate:
        agg = self.old.get(start)
        if agg is None:
            agg = self.old[start] = decode_hash(entry[1])
        return agg

    def after(self, start: int, entry: Entry) -> Aggregate:
        agg = self.new.get(start)
        if agg is None:
            agg = self.new[start] = decode_hash(entry[1])
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


class SpanReader:
    """Windowed sums and totals per slice, re-read only where the slice changed."""

    def __init__(self, store: Store, resolution: Resolution = MINUTE) -> None:
        self.store = store
        # the store's own definition of the resolution (its retention) when it has one
        self.resolution = {r.name: r for r in getattr(store, "resolutions", ())}.get(resolution.name, resolution)
        client = getattr(store, "client", None)
        self._scripts: Scripts | None = None
        if client is not None and all(hasattr(store, name) for name in
                                      ("window_key", "total_key", "count_key", "count_bucket")):
            self._scripts = Scripts(client)
        self._spans: dict[str, _Spans] = {}
        self._totals: dict[str, tuple[str, Aggregate]] = {}  # slice id -> (version, totals)
        #: What the last read did: slices whose windows changed, windows fetched,
        #: totals that followed their windows, totals read whole.
        self.last_read = {"changed": 0, "windows_fetched": 0, "totals_followed": 0, "totals_read": 0}

    @property
    def incremental(self) -> bool:
        return self._scripts is not None

    def read(self, spans: Sequence[tuple[float, float]], active: Sequence[str], slice_ids: Sequence[str]
             ) -> tuple[dict[str, Aggregate], list[dict[str, Aggregate]]]:
        """The totals of ``slice_ids`` and, per ``(start, end)`` span, ``{slice id: merged
        aggregate}`` over its windows for the ``active`` slices.

        Every span must end at the same time (the shorter ones start later),
        as the exporter's windows do.
        """
        res = self.resolution
        starts = [res.starts_between(start, end) for start, end in spans]
        longest = max(starts, key=len) if starts else []
        for s in starts:
            if s and s != longest[len(longest) - len(s):]:
                raise ValueError(f"spans {spans} do not end together; cannot read them in one pass")
        store: Any = self.store
        self.last_read = dict.fromkeys(self.last_read, 0)
        if self._scripts is None:
            return (store.totals(slice_ids),
                    [store.window_aggregates(res.name, start, end, active) for start, end in spans])
        if not longest or len(longest) * res.size_seconds >= res.retention_seconds:  # windows may expire inside
            self._spans = {}
            windowed = [store.window_aggregates(res.name, start, end, active) for start, end in spans]
            return self._read_totals(slice_ids, {}), windowed
        range_, suffixes = tuple(longest), tuple(len(s) for s in starts)
        ids = list(dict.fromkeys(active))
        self._spans = {sid: self._spans[sid] for sid in ids if sid in self._spans}
        totals: dict[str, Aggregate] = {}
        self._read_and_update(ids, range_, suffixes, totals)
        wanted = [sid for sid in slice_ids if sid not in totals]
        totals = self._read_totals(wanted, totals)
        return ({sid: totals[sid] for sid in slice_ids},
                [{sid: self._spans[sid].sums[k] for sid in active} for k in range(len(spans))])

    def _read_and_update(self, ids: list[str], range_: tuple[int, ...], suffixes: tuple[int, ...],
                         totals: dict[str, Aggregate]) -> None:
        """Both round trips per group of slices, then the cache updates.

        Pipelined on a :class:`~monitor.store.redis.wire.Wire` when the client
        allows it (Redis runs a group's scripts while the previous group is
        applied); on any error there, or without one, one call at a time.
        """
        scripts: Any = self._scripts
        groups = [ids[i:i + GROUP_SLICES] for i in range(0, len(ids), GROUP_SLICES)]
        if not groups:
            return
        counts_head = self._counts_head(range_)
        wire = scripts.wire()
        if wire is not None:
            try:
                self._pipelined(wire, groups, counts_head, range_, suffixes, totals)
                wire.close(ok=True)
                return
            except Exception as exc:  # noqa: BLE001 - e.g. NOSCRIPT after a Redis restart: the plain path reloads
                wire.close(ok=False)
                log.warning("pipelined store read failed (%s: %s); reading again one call at a time",
                            type(exc).__name__, exc)
        for group in groups:
            changes = self._counts_reply(group, scripts.call("counts", *self._counts_request(
                group, counts_head, range_, suffixes)), range_, totals)
            replies = [reply for keys, args in self._fetch_requests(changes)
                       for reply in scripts.call("fetch", keys, args)]
            self._update(changes, replies, range_, suffixes, totals)

    def _pipelined(self, wire: Wire, groups: list[list[str]], counts_head: tuple[list[Any], list[int]],
                   range_: tuple[int, ...], suffixes: tuple[int, ...], totals: dict[str, Aggregate]) -> None:
        """Send each group's scripts ahead, so Redis runs them while the previous group is applied."""
        def counts(index: int) -> None:
            if index < len(groups):
                wire.send("counts", *self._counts_request(groups[index], counts_head, range_, suffixes))

        def plan(index: int) -> tuple[list[_Change], int]:
            changes = self._counts_reply(groups[index], wire.take(), range_, totals)
            requests = self._fetch_requests(changes)
            for keys, args in requests:
                wire.send("fetch", keys, args)
            return changes, len(requests)

        counts(0)
        changes, pending = plan(0)
        counts(1)
        for index in range(len(groups)):
            replies = [reply for _ in range(pending) for reply in wire.take()]
            following = None
            if index + 1 < len(groups):
                following = plan(index + 1)
                counts(index + 2)
            self._update(changes, replies, range_, suffixes, totals)
            if following is not None:
                changes, pending = following

    def _counts_head(self, range_: tuple[int, ...]) -> tuple[list[Any], list[int]]:
        """The counts script's leading arguments, and the count buckets they cover in order."""
        store: Any = self.store
        by_bucket: dict[int, list[int]] = {}
        for start in range_:  # in order, so the counts come back in range order
            by_bucket.setdefault(store.count_bucket(self.resolution, start), []).append(start)
        return [len(by_bucket), *(len(starts) for starts in by_bucket.values()), *range_], list(by_bucket)

    def _counts_request(self, ids: list[str], head: tuple[list[Any], list[int]], range_: tuple[int, ...],
                        suffixes: tuple[int, ...]) -> tuple[list[str], list[Any]]:
        store: Any = self.store
        name = self.resolution.name
        args, buckets = list(head[0]), head[1]
        keys: list[str] = []
        for sid in ids:
            keys.append(store.total_key(sid))
            keys.extend(store.count_key(name, bucket, sid) for bucket in buckets)
            state = self._spans.get(sid)
            fresh = state is not None and state.starts == range_ and state.suffixes == suffixes
            args.append(state.version if fresh else "")
        return keys, args

    def _counts_reply(self, ids: list[str], replies: list[Any], range_: tuple[int, ...],
                      totals: dict[str, Aggregate]) -> list[_Change]:
        """The slices to update; fills ``totals`` for the unchanged ones (changes no cache)."""
        changes = []
        for sid, reply in zip(ids, replies):
            if reply == 0:
                cached = self._totals.get(sid)
                if cached is not None and cached[0] == self._spans[sid].version:
                    totals[sid] = cached[1]
                continue
            counts = dict(filter(itemgetter(1), zip(range_, map(int, text(reply[1]).split()))))
            changes.append(self._plan(sid, text(reply[0]), counts, range_))
        self.last_read["changed"] += len(changes)
        return changes

    def _fetch_requests(self, changes: list[_Change]) -> list[tuple[list[str], list[Any]]]:
        store: Any = self.store
        name = self.resolution.name
        requests = []
        for chunk in chunks(changes, 1 + max((len(c.wanted) for c in changes), default=0)):
            keys: list[str] = []
            args: list[Any] = []
            for change in chunk:
                keys.append(store.total_key(change.sid))
                keys.extend(store.window_key(name, start, change.sid) for start in change.wanted)
                args.extend((len(change.wanted), "s" if change.shortcut else "f"))
            requests.append((keys, args))
        return requests

    def _plan(self, sid: str, version: str, counts: dict[int, int], range_: tuple[int, ...]) -> _Change:
        """Which windows to fetch, and whether the totals can follow the windows (module docstring)."""
        change = _Change(sid, version, counts)
        state = self._spans.get(sid)
        if state is None:
            change.wanted = [start for start, count in counts.items() if count > 0]
            return change
        before = state.counts
        change.wanted = [start for start, count in counts.items() - before.items() if count > 0]
        if not (state.version and self._totals.get(sid, ("",))[0] == state.version):
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

    def _update(self, changes: list[_Change], replies: list[Any], range_: tuple[int, ...],
                suffixes: tuple[int, ...], totals: dict[str, Aggregate]) -> None:
        """Apply one group's fetch replies to the caches; adds its totals to ``totals``."""
        for change, reply in zip(changes, replies):
            version = text(reply[0])
            same = version == change.version  # nothing landed between the two scripts
            fetched = dict(zip(change.wanted, map(_entry, reply[2:])))
            self.last_read["windows_fetched"] += len(fetched)
            old = self._spans.get(change.sid)
            parsed = self._apply(change, old, fetched, range_, suffixes, same)
            total = None
            if not change.shortcut:
                total = decode_hash(reply[1])
            elif same and old is not None:
                total = self._follow(change, old, parsed, fetched, reply[1])
            if total is not None:  # else a write raced the shortcut: read the totals whole below
                totals[change.sid] = total
                self._totals[change.sid] = (version, total)
                self.last_read["totals_followed" if change.shortcut else "totals_read"] += 1

    def _apply(self, change: _Change, old: _Spans | None, fetched: dict[int, tuple[Entry, Aggregate]],
               range_: tuple[int, ...], suffixes: tuple[int, ...], same: bool) -> _Parsed:
        """Update the slice's windows and sums; returns the parsed windows it used."""
        cached = old.windows if old is not None else {}
        counts = change.counts
        new_parsed = {start: agg for start, (entry, agg) in fetched.items() if entry[0] > 0}
        if old is not None and old.starts == range_:
            windows = dict(cached)
            for start in cached.keys() - counts.keys():
                del windows[start]  # down to 0: a rebuild
        else:
            windows = {start: cached[start] for start in counts.keys() & cached.keys()}
        counts = dict(counts)
        for start, (entry, _agg) in fetched.items():
            if entry[0] > 0:
                windows[start] = entry
                counts[start] = entry[0]  # the content's own count (a write may have raced the counts)
            else:
                windows.pop(start, None)
                counts.pop(start, None)
        parsed = _Parsed(old, dict(new_parsed))
        changed = set(fetched).union([start for start in cached if start not in windows])
        comparable = old if old is not None and len(old.suffixes) == len(suffixes) else None  # else sum afresh
        sums = [_slide(comparable, k, windows, parsed, changed, range_, length) for k, length in enumerate(suffixes)]
        keep = {start: agg for start, agg in new_parsed.items() if start in cached}  # changed, not new
        self._spans[change.sid] = _Spans(change.version if same else "", range_, suffixes, windows, counts, keep,
                                         sums)
        return parsed

    def _follow(self, change: _Change, old: _Spans, parsed: _Parsed,
                fetched: dict[int, tuple[Entry, Aggregate]], floats: Any) -> Aggregate | None:
        """The totals moved by the changed windows' increments; floats as Redis holds them.

        Only windows the cache knew count: a window that came into the span
        is already in the totals (the version says no trace reached it).
        None when the increments do not fit (then the totals are read whole).
        """
        cached = self._totals[change.sid][1]
        if change.version == old.version:
            return cached
        total = cached.copy()
        first, last = old.starts[0], old.starts[-1]
        try:
            for start, (entry, agg) in fetched.items():
                if first <= start <= last:
                    before = old.windows.get(start)
                    delta = agg if before is None else parsed.delta(start, before, entry)
                    if delta is None:
                        total.subtract(parsed.before(start, before)).merge(agg)  # type: ignore[arg-type]
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

    def _read_totals(self, ids: Sequence[str], totals: dict[str, Aggregate]) -> dict[str, Aggregate]:
        """``totals`` plus the totals of ``ids``, each re-read whole when its version moved."""
        store: Any = self.store
        cache = self._totals
        scripts: Any = self._scripts
        for chunk in chunks(list(ids), 1):
            keys = [store.total_key(sid) for sid in chunk]
            args = [cache[sid][0] if sid in cache else "" for sid in chunk]
            for sid, reply in zip(chunk, scripts.call("totals", keys, args)):
                if reply != 0:
                    cache[sid] = (text(reply[0]), decode_hash(reply[1]))
                    self.last_read["totals_read"] += 1
                totals[sid] = cache[sid][1]
        for stale in [sid for sid in cache if sid not in totals]:
            del cache[stale]
        return totals


def _slide(old: _Spans | None, k: int, windows: dict[int, Entry], parsed: _Parsed, changed: set[int],
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
                return _resum_floats(total, windows, span)
            except ValueError:
                pass  # the cache does not add up (a rebuild raced it): sum afresh
    total = Aggregate()
    for start in span:
        entry = windows.get(start)
        if entry is not None:
            total.merge(parsed.after(start, entry))
    total.latency.buckets = dict(sorted(total.latency.buckets.items()))  # see decode_hash
    return _resum_floats(total, windows, span)


def _resum_floats(total: Aggregate, windows: dict[int, Entry], span: Sequence[int]) -> Aggregate:
    """Set the float fields of ``total`` to their sum over ``span``'s windows, in window order.

    The same additions, in the same order, as a fresh merge of the windows
    (a left fold: not ``sum()``, which compensates from Python 3.12 on), so
    subtracting never leaves rounding residue behind.
    """
    entries = [entry[2] for entry in map(windows.get, span) if entry is not None]
    counts = total.counts
    for i, key in enumerate(FLOATS):
        values = [floats[i] for floats in entries if floats[i] is not None]
        if values:
            counts[key] = reduce(add, values)
        else:
            counts.pop(key, None)
    return total
