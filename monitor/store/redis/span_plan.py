"""Which windows a scrape fetches for one active slice, from its counts and its cache entry (pure).

The first half of a slice's update (:mod:`monitor.store.redis.spans` applies what was fetched):
given the trace count of every window start of the range (the counts script) and the slice's
:class:`~monitor.store.redis.spans.SliceSpans`, :func:`plan` names the windows whose content the
update needs (those that changed, came into a span, or left one without their content cached)
and says whether the totals can follow the windows' increments instead of being read whole.
A count that went down (a rebuild) or an old content that is not cached plans a fresh sum.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.store.redis.span_sums import changed, shift_of, shifted_counts, span_of
from monitor.store.redis.spans import Change, SliceSpans


def plan(sid: str, version: str, counts: Sequence[int], range_: tuple[int, ...], suffixes: tuple[int, ...],
         state: SliceSpans | None, totals_version: str | None) -> Change:
    """Which windows to fetch, and whether the totals can follow the windows.

    Fetched: every window whose count changed or that came into a span (its new
    content) and every window that left a span whose content is not cached (to
    take it out). The totals can follow when every trace added since the cached
    version landed in a window the cache knew: the version grew by exactly those
    windows' count increases (the fold adds the same aggregate to a trace's window
    and to the totals, atomically).
    """
    change = Change(sid, version, counts)
    if state is None or len(state.suffixes) != len(suffixes):
        return _fresh(change, range_)
    d = shift_of(state.starts, range_) if state.suffixes == suffixes else None
    if d is not None:  # nothing slid (0), or the range moved on by d windows (the minute's slide)
        n, grown = len(range_), 0
        fetch: list[int] = []
        before = shifted_counts(state.counts, d) if d else state.counts  # the cached counts, moved on
        for i in changed(counts, before):
            start, count, was = range_[i], counts[i], before[i]
            if count < was or (was and not state.cached(start)):
                return _fresh(change, range_)  # a rebuild, or the old content to take out is not cached
            fetch.append(start)
            if i < n - d:  # a window the cache knew
                grown += count - was
        if d:
            moved: set[int] = set()
            for length in suffixes:
                first = n - length
                for j in range(first, min(n, first + d)):  # leaving the span: the content added is taken out
                    count, start = state.counts[j], state.starts[j]
                    if count and (j < d or counts[j - d] == count) and not state.cached(start):
                        moved.add(start)
                        if j < d:
                            change.leaving[start] = count
                moved.update(range_[i] for i in range(max(first, n - d), n)  # coming in: its content is added
                             if counts[i] and not state.cached(range_[i]))
            fetch = sorted(moved.union(fetch))
        change.wanted = fetch
        return _shortcut(change, state, totals_version, grown)
    new = dict(zip(range_, counts))
    old = dict(zip(state.starts, state.counts))
    wanted: set[int] = set()
    grown = 0
    for start, count in new.items():
        before = old.get(start, 0)
        if count == before:
            continue
        if count < before or (before and not state.cached(start)):
            return _fresh(change, range_)  # a rebuild, or the old content to take out is not cached
        wanted.add(start)
        if start in old:
            grown += count - before
    for k, length in enumerate(suffixes):
        new_span, old_span = set(span_of(range_, length)), span_of(state.starts, state.suffixes[k])
        for start in old_span:  # leaving: the content that was added must be taken out
            count = old[start]
            if count and start not in new_span and new.get(start, count) == count and not state.cached(start):
                wanted.add(start)
                if start not in new:
                    change.leaving[start] = count
        for start in new_span.difference(old_span):  # coming in: its content is added
            if new[start] and not state.cached(start):
                wanted.add(start)
    change.wanted = sorted(wanted)
    return _shortcut(change, state, totals_version, grown)


def _shortcut(change: Change, state: SliceSpans, totals_version: str | None, grown: int) -> Change:
    """Whether the totals follow: the version grew by exactly the known windows' count increases."""
    if state.version and totals_version == state.version:
        try:
            change.shortcut = int(change.version) - int(state.version) == grown
        except ValueError:
            pass
    return change


def _fresh(change: Change, range_: tuple[int, ...]) -> Change:
    change.fresh = True
    change.wanted = [start for start, count in zip(range_, change.counts) if count > 0]
    return change
