"""The exporter's incremental reads on a Redis Cluster store: one :class:`SpanReader` per partition view.

Each partition view is a plain Redis layout in one slot, so the single-node reader
(:mod:`monitor.store.redis.reads`, with its per-slice cache and its two scripts per group of
slices) reads it unchanged; :class:`ClusterSpanReader` asks each view only for the slices that
view indexes and sums the views' results per slice. A slice whose every part is the same object
as on the previous scrape gets the same merged object back, so the exporter's caches still hit by
identity. Cost: one reader's round trips per view (no pipelining across views), the read of the view's
rebuild count included: a per-slot rebuild swap increments it in the view's generation hash (its own
slot), so only that view's reader drops its caches.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.aggregate import Aggregate
from monitor.store.base import Store
from monitor.store.redis.cluster import ClusterStore
from monitor.store.redis.reads import SpanReader, Steps
from monitor.windows import MINUTE, Resolution

Parts = tuple[Aggregate, ...]


class _Memo:
    """Per slice the parts last merged and their merge (reused while every part is the same object)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Parts, Aggregate]] = {}

    def merge(self, sid: str, parts: Parts) -> Aggregate:
        entry = self.entries.get(sid)
        if entry is not None and len(entry[0]) == len(parts) and all(a is b for a, b in zip(entry[0], parts)):
            return entry[1]
        merged = parts[0] if len(parts) == 1 else parts[0].copy()
        for part in parts[1:]:
            merged.merge(part)
        self.entries[sid] = (parts, merged)
        return merged

    def keep(self, sids: set[str]) -> None:
        self.entries = {sid: entry for sid, entry in self.entries.items() if sid in sids}


class ClusterSpanReader:
    """:class:`SpanReader`'s ``read`` over every partition view of a :class:`ClusterStore`, merged."""

    def __init__(self, store: ClusterStore, resolution: Resolution = MINUTE) -> None:
        self.store = store
        self.resolution = resolution
        self._readers: dict[str, SpanReader] = {}
        self._totals = _Memo()
        self._sums: list[_Memo] = []
        self.last_read = {"changed": 0, "windows_fetched": 0, "totals_followed": 0, "totals_read": 0, "views": 0}
        #: The views' :attr:`SpanReader.steps` (valid for a slice held by one view: its merge is that part).
        self.steps: Steps = {}

    @property
    def incremental(self) -> bool:
        return True

    def take_steps(self) -> Steps:
        """As :meth:`SpanReader.take_steps`."""
        steps, self.steps = self.steps, {}
        return steps

    def read(self, spans: Sequence[tuple[float, float]], active: Sequence[str], slice_ids: Sequence[str]
             ) -> tuple[dict[str, Aggregate], list[dict[str, Aggregate]]]:
        """As :meth:`SpanReader.read`: the totals of ``slice_ids`` and per span the sums of ``active``."""
        per_view = self.store.view_slices()
        total_parts: dict[str, list[Aggregate]] = {}
        span_parts: list[dict[str, list[Aggregate]]] = [{} for _ in spans]
        last = dict.fromkeys(self.last_read, 0)
        steps: Steps = {}
        for view, indexed in per_view:
            reader = self._readers.get(view.prefix)
            if reader is None:
                reader = self._readers[view.prefix] = SpanReader(view, self.resolution)
            mine_active = [sid for sid in active if sid in indexed]
            mine_ids = [sid for sid in slice_ids if sid in indexed]
            totals, sums = reader.read(spans, mine_active, mine_ids)
            for sid, agg in totals.items():
                total_parts.setdefault(sid, []).append(agg)
            for k, by_slice in enumerate(sums):
                for sid, agg in by_slice.items():
                    span_parts[k].setdefault(sid, []).append(agg)
            steps.update(reader.take_steps())  # the view's last read's: held here until the collector takes them
            for name, value in reader.last_read.items():
                last[name] = last.get(name, 0) + value
        last["views"] = len(per_view)
        self.last_read = last
        self.steps = steps
        self._readers = {prefix: r for prefix, r in self._readers.items()
                         if prefix in {view.prefix for view, _ in per_view}}
        if len(self._sums) != len(spans):
            self._sums = [_Memo() for _ in spans]
        empty = Aggregate()
        totals_out = {sid: self._totals.merge(sid, tuple(total_parts[sid])) if sid in total_parts else empty.copy()
                      for sid in slice_ids}
        self._totals.keep(set(slice_ids))
        sums_out = []
        for memo, parts in zip(self._sums, span_parts):
            sums_out.append({sid: memo.merge(sid, tuple(parts[sid])) if sid in parts else empty.copy()
                             for sid in active})
            memo.keep(set(active))
        return totals_out, sums_out


def span_reader(store: Store, resolution: Resolution = MINUTE) -> SpanReader | ClusterSpanReader:
    """The exporter's reader for ``store``: per view on a Redis Cluster store, else :class:`SpanReader`."""
    if isinstance(store, ClusterStore):
        return ClusterSpanReader(store, resolution)
    return SpanReader(store, resolution)
