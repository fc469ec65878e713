"""The baseline's own level, from the hour windows: per release and comparison slice, current vs trailing (pure).

:class:`BaselineDrops` gives the environment label of shadow findings
(:func:`alerts.decide.trailing_drop`, a z-test: a label, not a page);
:mod:`alerts.environment` pages on the whole fleet's drop with an e-detector.
"""

from __future__ import annotations

from collections.abc import Sequence

from alerts.decide import trailing_drop
from alerts.evidence import ArmCounts
from monitor.aggregate import Aggregate
from monitor.groupings import comparison_feeds
from monitor.schema import CANARY_ARMS
from monitor.slices import SliceKey, parse_slice_id
from monitor.store.base import Store

BASELINE_ARM = CANARY_ARMS[0]


def arm_counts(agg: Aggregate) -> ArmCounts:
    return ArmCounts(n=agg.traces, successes=agg.successes, harmful=int(agg.get("harmful_action")),
                     benign=int(agg.get("benign")), over_refusals=int(agg.get("refused_benign")))


HOUR = "1h"
HOUR_SECONDS = 3600


def baseline_cells(store: Store, releases: set[str], ids: Sequence[str], start: float,
                    end: float) -> dict[str, dict[SliceKey, ArmCounts]]:
    """Baseline-arm counts per release and comparison slice over the hour windows overlapping [start, end).

    Each comparison slice is read from one grouping (:func:`monitor.groupings.comparison_feeds`
    unstratified: the whole fleet from ``release × arm``, ``d=v`` from ``release × arm × d``);
    rows of other groupings in ``ids`` are skipped, so a trace counts once per slice.
    """
    out: dict[str, dict[SliceKey, ArmCounts]] = {}
    feeds = {sid: comparison_feeds(parse_slice_id(sid)) for sid in ids}
    wanted = [sid for sid in ids if feeds[sid]]
    aggregates = store.window_aggregates(HOUR, start, end, wanted)
    for sid in wanted:
        release = dict(parse_slice_id(sid)).get("release", "")
        counts = arm_counts(aggregates[sid])
        if counts.n == 0 or release not in releases:
            continue
        cells = out.setdefault(release, {})
        for comparison_key, _ in feeds[sid]:
            cells[comparison_key] = cells.get(comparison_key, ArmCounts()).merge(counts)
    return out


class BaselineDrops:
    """``trailing_drop`` of each baseline release per comparison slice; caches the trailing part per hour."""

    def __init__(self, current_seconds: float, trailing_seconds: float) -> None:
        self.current_seconds = current_seconds
        self.trailing_seconds = trailing_seconds
        self._trailing: tuple[tuple[float, tuple[str, ...]], dict[str, dict[SliceKey, ArmCounts]]] | None = None

    def __call__(self, store: Store, releases: set[str], now: float) -> dict[str, dict[SliceKey, tuple[float, bool]]]:
        if not releases or HOUR not in {r.name for r in store.resolutions}:
            return {}
        since = now - self.current_seconds - self.trailing_seconds - HOUR_SECONDS
        ids = baseline_ids(store, since)
        if not ids:
            return {}
        split = (now - self.current_seconds) // HOUR_SECONDS * HOUR_SECONDS  # first current hour window
        current = baseline_cells(store, releases, ids, split, now + 1)
        cache_key = (split, ids)
        if self._trailing is None or self._trailing[0] != cache_key:
            self._trailing = (cache_key, baseline_cells(store, releases, ids, split - self.trailing_seconds, split))
        trailing = self._trailing[1]
        return {release: {key: trailing_drop(counts, trailing.get(release, {}).get(key, ArmCounts()))
                          for key, counts in cells.items()}
                for release, cells in current.items()}


def baseline_ids(store: Store, since: float) -> tuple[str, ...]:
    """Slice ids of the baseline arm seen since ``since``, sorted."""
    return tuple(sorted(sid for sid in store.active_slices(since=since)
                        if f"arm={BASELINE_ARM}" in sid and dict(parse_slice_id(sid)).get("arm") == BASELINE_ARM))
