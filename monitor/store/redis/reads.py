"""The exporter's store reads, incremental: a scrape moves what changed since the last one.

:class:`SpanReader` returns per slice the totals and the merged aggregate of each
span of minute windows (5 minutes, 1 hour, all ending together). Over the Redis
store it keeps a cache (:mod:`monitor.store.redis.spans`; which windows to fetch:
:mod:`~monitor.store.redis.span_plan`) and per group of active slices runs two
scripts: ``counts`` reads each slice's version and, when it moved or the spans
slid, the trace count of every window in the span; ``fetch`` reads the windows
whose count changed and those that slid out of a span (the cache keeps no window
content but the newest minutes'). The groups' scripts are pipelined
(:mod:`monitor.store.redis.wire`). A slice whose cache does not add up (a window
that slid out changed since it was added) is read again and summed afresh.

Guarantees: sums and totals equal a fresh read of the store field for field; a
write landing between a group's two scripts is caught up on the next scrape, and so
is a ``fleetmon rebuild`` swap (which may keep a repaired hash's count: every read
first reads the generation's rebuild count and drops the caches when it moved). The
cache holds the active slices only (a slice that stops being active is dropped).
Unchanged sums and totals are the *same objects* as on the previous scrape (the
exporter's caches hit by identity); a changed one is a new object, and when its windows
only gained it is the previous one's dicts moved in place (no copy: a scrape does not hold
both), the previous object then :func:`~monitor.store.redis.span_sums.stale` (reading it
raises; :attr:`SpanReader.steps` say how the new one was made of it). Spans as long as the resolution's retention,
and stores without scripts (the in-memory store), are read through the plain
:class:`~monitor.store.base.Store` methods, without caching. Why a count
identifies a window's content, and the cost figures: docs/metrics.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from monitor.aggregate import Aggregate
from monitor.store.base import ScriptableStore, Store, StoreError
from monitor.store.redis.layout import KeyLayout, count_bucket
from monitor.store.redis.scripts import REBUILDS, TOTALS_FLOATS, WHOLE_TOTALS
from monitor.store.redis.span_plan import plan
from monitor.store.redis.spans import CachedTotals, Change, Ops, SliceSpans, followed_totals, updated
from monitor.store.redis.wire import Scripts, Wire, chunks, counts_of, decode_interned, text
from monitor.windows import MINUTE, Resolution

log = logging.getLogger("fleetmon.exporter")

#: Active slices per pair of round trips (counts, fetch); see :class:`~monitor.store.redis.wire.Wire`.
GROUP_SLICES = 250
#: Windows a group may expect to fetch: a slice without a cache entry counts every start of the range
#: (its fresh sum), one with an entry a single window. On a cold read this makes the groups small
#: (about 50 slices of an hour's minutes), so that Redis runs one group's fetch while the exporter
#: sums the one before (250 slices a group: ~1.07 s in-process at 1,000 slices, 50: ~0.9 s).
GROUP_WINDOWS = 3_000

#: The counts script's leading arguments, and the count buckets they cover in order.
CountsHead = tuple[list[Any], list[int]]

#: ``(span index, or -1 for the totals; slice id)`` → (the aggregate the previous read returned, the one
#: this read returns, the ops that made the second of the first): see :attr:`SpanReader.steps`.
Steps = dict[tuple[int, str], tuple[Aggregate, Aggregate, Ops]]


class SpanReader:
    """Windowed sums and totals per slice, re-read only where the slice changed."""

    def __init__(self, store: Store, resolution: Resolution = MINUTE) -> None:
        self.store = store
        # the store's own definition of the resolution (its retention) when it has one
        self.resolution = {r.name: r for r in store.resolutions}.get(resolution.name, resolution)
        self._scripts: Scripts | None = None
        self._keys = KeyLayout()
        self._rebuilds: Any = None  # reads the generation and its rebuild count (the stamp)
        self._stamp: str | None = None  # the stamp the caches were filled under (None: not read yet)
        if isinstance(store, ScriptableStore):
            self._scripts = Scripts(store.client)
            self._keys = KeyLayout(store.prefix)
            self._rebuilds = store.client.register_script(REBUILDS)
        self._spans: dict[str, SliceSpans] = {}
        self._totals: dict[str, CachedTotals] = {}
        #: What the last read did: slices whose windows changed, windows fetched,
        #: totals that followed their windows, totals read whole.
        self.last_read = {"changed": 0, "windows_fetched": 0, "totals_followed": 0, "totals_read": 0}
        #: How the last read moved the sums and totals it changed incrementally (the exporter's
        #: ``__other__`` rows apply the same ops instead of merging their members again).
        self.steps: Steps = {}

    @property
    def incremental(self) -> bool:
        return self._scripts is not None

    def take_steps(self) -> Steps:
        """:attr:`steps` of the last read, handed over once (they hold the previous read's aggregates)."""
        steps, self.steps = self.steps, {}
        return steps

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
        store, scripts = self.store, self._scripts
        self.last_read = dict.fromkeys(self.last_read, 0)
        self.steps = {}
        if scripts is None:
            return (store.totals(slice_ids),
                    [store.window_aggregates(res.name, start, end, active) for start, end in spans])
        self._check_rebuilds()
        if not longest or len(longest) * res.size_seconds >= res.retention_seconds:  # windows may expire inside
            self._spans = {}
            windowed = [store.window_aggregates(res.name, start, end, active) for start, end in spans]
            return self._read_totals(scripts, slice_ids, {}), windowed
        range_, suffixes = tuple(longest), tuple(len(s) for s in starts)
        ids = list(dict.fromkeys(active))
        self._spans = {sid: self._spans[sid] for sid in ids if sid in self._spans}
        totals: dict[str, Aggregate] = {}
        repair = self._read_and_update(scripts, ids, range_, suffixes, totals)
        if repair:  # the cache did not add up for these: sum them afresh
            for sid in repair:
                self._spans.pop(sid, None)
            log.info("%d slices' cached windows did not add up (a late write or a rebuild raced the read); "
                     "summed afresh", len(repair))
            self._read_and_update(scripts, repair, range_, suffixes, totals)  # a fresh sum always adds up
        wanted = [sid for sid in slice_ids if sid not in totals]
        totals = self._read_totals(scripts, wanted, totals)
        return ({sid: totals[sid] for sid in slice_ids},
                [{sid: self._spans[sid].sums[k] for sid in active} for k in range(len(spans))])

    def _check_rebuilds(self) -> None:
        """Drop the caches when a rebuild swapped state in since the last read: a repaired hash may keep
        its ``traces``, which the caches take as its version. The stamp: the generation's id and its
        rebuild count (a Redis flushed then rebuilt between two reads has another id; layout.py)."""
        try:
            stamp = text(self._rebuilds(keys=[self._keys.generation()]))
        except Exception as exc:  # the client's errors, re-raised with context (as Scripts.call does)
            raise StoreError(f"reading the generation from Redis failed ({self._keys.generation()}): {exc}") from exc
        if stamp != self._stamp:
            if self._stamp is not None and (self._spans or self._totals):
                log.info("a rebuild swapped state into %s (generation and rebuilds %r → %r): cached windows "
                         "and totals dropped", self._keys.prefix, self._stamp, stamp)
            self._spans, self._totals, self._stamp = {}, {}, stamp

    def _read_and_update(self, scripts: Scripts, ids: list[str], range_: tuple[int, ...],
                         suffixes: tuple[int, ...], totals: dict[str, Aggregate]) -> list[str]:
        """Both round trips per group of slices, then the cache updates; returns the slices to sum afresh.

        Pipelined on a :class:`~monitor.store.redis.wire.Wire` when the client
        allows it (Redis runs a group's scripts while the previous group is
        applied); on any error there, or without one, one call at a time.
        """
        groups = self._groups(ids, len(range_))
        repair: list[str] = []
        if not groups:
            return repair
        counts_head = self._counts_head(range_)
        wire = scripts.wire()
        if wire is not None:
            try:
                self._pipelined(wire, groups, counts_head, range_, suffixes, totals, repair)
                wire.close(ok=True)
                return repair
            except Exception as exc:  # noqa: BLE001 - e.g. NOSCRIPT after a Redis restart: the plain path reloads
                wire.close(ok=False)
                log.warning("pipelined store read failed (%s: %s); reading again one call at a time",
                            type(exc).__name__, exc)
            repair.clear()
        for group in groups:
            changes = self._counts_reply(group, scripts.call("counts", *self._counts_request(
                group, counts_head, range_, suffixes)), range_, suffixes, totals)
            replies = [reply for keys, args in self._fetch_requests(changes)
                       for reply in scripts.call("fetch", keys, args)]
            self._update(changes, replies, range_, suffixes, totals, repair)
        return repair

    def _groups(self, ids: list[str], n_starts: int) -> list[list[str]]:
        """``ids`` in runs of at most :data:`GROUP_SLICES` slices and about :data:`GROUP_WINDOWS`
        windows expected to be fetched (every start for a slice not cached, else one)."""
        groups: list[list[str]] = []
        group: list[str] = []
        expected = 0
        cached = self._spans
        for sid in ids:
            cost = 1 if sid in cached else n_starts
            if group and (len(group) >= GROUP_SLICES or expected + cost > GROUP_WINDOWS):
                groups.append(group)
                group, expected = [], 0
            group.append(sid)
            expected += cost
        if group:
            groups.append(group)
        return groups

    def _pipelined(self, wire: Wire, groups: list[list[str]], counts_head: CountsHead, range_: tuple[int, ...],
                   suffixes: tuple[int, ...], totals: dict[str, Aggregate], repair: list[str]) -> None:
        """Send each group's scripts ahead, so Redis runs them while the previous group is applied."""
        def counts(index: int) -> None:
            if index < len(groups):
                wire.send("counts", *self._counts_request(groups[index], counts_head, range_, suffixes))

        def plan_group(index: int) -> tuple[list[Change], int]:
            changes = self._counts_reply(groups[index], wire.take(), range_, suffixes, totals)
            requests = self._fetch_requests(changes)
            for keys, args in requests:
                wire.send("fetch", keys, args)
            return changes, len(requests)

        counts(0)
        changes, pending = plan_group(0)
        counts(1)
        for index in range(len(groups)):
            replies = [reply for _ in range(pending) for reply in wire.take()]
            following = None
            if index + 1 < len(groups):
                following = plan_group(index + 1)
                counts(index + 2)
            self._update(changes, replies, range_, suffixes, totals, repair)
            if following is not None:
                changes, pending = following

    def _counts_head(self, range_: tuple[int, ...]) -> CountsHead:
        """The counts script's leading arguments, and the count buckets they cover in order."""
        by_bucket: dict[int, list[int]] = {}
        for start in range_:  # in order, so the counts come back in range order
            by_bucket.setdefault(count_bucket(self.resolution, start), []).append(start)
        return [len(by_bucket), *(len(starts) for starts in by_bucket.values()), *range_], list(by_bucket)

    def _counts_request(self, ids: list[str], head: CountsHead, range_: tuple[int, ...],
                        suffixes: tuple[int, ...]) -> tuple[list[str], list[Any]]:
        layout = self._keys
        name = self.resolution.name
        args, buckets = list(head[0]), head[1]
        keys: list[str] = []
        for sid in ids:
            keys.append(layout.totals(sid))
            keys.extend(layout.window_counts(name, bucket, sid) for bucket in buckets)
            state = self._spans.get(sid)
            fresh = state is not None and state.starts == range_ and state.suffixes == suffixes
            args.append(state.version if fresh and state is not None else "")
        return keys, args

    def _counts_reply(self, ids: list[str], replies: list[Any], range_: tuple[int, ...],
                      suffixes: tuple[int, ...], totals: dict[str, Aggregate]) -> list[Change]:
        """The slices to update; fills ``totals`` for the unchanged ones (changes no cache)."""
        changes = []
        for sid, reply in zip(ids, replies):
            if reply == 0:
                cached = self._totals.get(sid)
                if cached is not None and cached.version == self._spans[sid].version:
                    totals[sid] = cached.totals
                continue
            counts = counts_of(reply[1], len(range_))
            if len(counts) != len(range_):
                raise StoreError(f"the counts script sent {len(counts)} counts for slice {sid!r}, "
                                 f"expected one per window start ({len(range_)})")
            changes.append(self._plan(sid, text(reply[0]), counts, range_, suffixes))
        self.last_read["changed"] += len(changes)
        return changes

    def _fetch_requests(self, changes: list[Change]) -> list[tuple[list[str], list[Any]]]:
        layout = self._keys
        name = self.resolution.name
        requests = []
        for chunk in chunks(changes, 1 + max((len(c.wanted) for c in changes), default=0)):
            keys: list[str] = []
            args: list[Any] = []
            for change in chunk:
                keys.append(layout.totals(change.sid))
                keys.extend(layout.window(name, start, change.sid) for start in change.wanted)
                args.extend((len(change.wanted), TOTALS_FLOATS if change.shortcut else WHOLE_TOTALS))
            requests.append((keys, args))
        return requests

    def _plan(self, sid: str, version: str, counts: Sequence[int], range_: tuple[int, ...],
              suffixes: tuple[int, ...]) -> Change:
        """Which windows of ``sid`` to fetch (between a group's two scripts); see :func:`plan`."""
        cached = self._totals.get(sid)
        return plan(sid, version, counts, range_, suffixes, self._spans.get(sid),
                    None if cached is None else cached.version)

    def _update(self, changes: list[Change], replies: list[Any], range_: tuple[int, ...],
                suffixes: tuple[int, ...], totals: dict[str, Aggregate], repair: list[str]) -> None:
        """Apply one group's fetch replies to the caches; adds its totals to ``totals``.

        A slice whose cache does not add up goes to ``repair`` (its entry dropped).
        """
        for change, reply in zip(changes, replies):
            version = text(reply[0])
            same = version == change.version  # nothing landed between the two scripts
            fetched = dict(zip(change.wanted, reply[2:]))
            self.last_read["windows_fetched"] += len(fetched)
            old = self._spans.get(change.sid)
            update = updated(change, old, fetched, range_, suffixes, same)
            if update is None:
                self._spans.pop(change.sid, None)
                repair.append(change.sid)
                continue
            self._spans[change.sid] = update.spans
            if old is not None:
                for k, span_ops in enumerate(update.ops):
                    if span_ops:
                        self.steps[(k, change.sid)] = (old.sums[k], update.spans.sums[k], span_ops)
            total = None
            if not change.shortcut:
                total = decode_interned(reply[1])
            elif same and old is not None:
                cached = self._totals[change.sid].totals
                followed = followed_totals(cached, change, old, update.gained, reply[1])
                if followed is not None:
                    total = followed[0]
                    if followed[1]:
                        self.steps[(-1, change.sid)] = (cached, total, followed[1])
            if total is not None:  # else a write raced the shortcut: read the totals whole below
                totals[change.sid] = total
                self._totals[change.sid] = CachedTotals(version, total)
                self.last_read["totals_followed" if change.shortcut else "totals_read"] += 1

    def _read_totals(self, scripts: Scripts, ids: Sequence[str], totals: dict[str, Aggregate]
                     ) -> dict[str, Aggregate]:
        """``totals`` plus the totals of ``ids``, each re-read whole when its version moved."""
        cache = self._totals
        for chunk in chunks(list(ids), 1):
            keys = [self._keys.totals(sid) for sid in chunk]
            args = [cache[sid].version if sid in cache else "" for sid in chunk]
            for sid, reply in zip(chunk, scripts.call("totals", keys, args)):
                if reply != 0:
                    cache[sid] = CachedTotals(text(reply[0]), decode_interned(reply[1]))
                    self.last_read["totals_read"] += 1
                totals[sid] = cache[sid].totals
        for stale in [sid for sid in cache if sid not in totals]:
            del cache[stale]
        return totals
