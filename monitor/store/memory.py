"""The in-process store: the Redis store's semantics in a dict, for `fleetmon run` and tests."""

from __future__ import annotations

import json
from collections.abc import Sequence

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.store.base import OffsetRange, PendingChanges, StoreError
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution


class MemoryStore:
    """In-process store with the Redis store's semantics (no TTL clock: expiry is by ``now`` on read)."""

    def __init__(self, resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> None:
        self.resolutions = tuple(resolutions)
        self._windows: dict[tuple[str, int, str], Aggregate] = {}
        self._totals: dict[str, Aggregate] = {}
        self._counters: dict[str, float] = {}
        self._last_seen: dict[str, float] = {}
        self._offsets: dict[str, int] = {}
        self._extra: dict[str, dict[str, float]] = {}
        self._pending: dict[str, dict[str, str]] = {}
        self._state: dict[str, str] = {}

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool:
        if source is not None and first_offset is not None:
            mark = self._offsets.get(source)
            if mark is not None and first_offset <= mark:
                return False
        self._merge(delta, {source or "": (delta.pending_set, delta.pending_del)})
        if source is not None and last_offset is not None:
            self._offsets[source] = max(last_offset, self._offsets.get(source, -1))
        return True

    def apply_ranges(self, delta: BatchDelta, ranges: Sequence[OffsetRange],
                     pending: PendingChanges | None = None) -> tuple[str, int] | None:
        for source, first, _last in ranges:
            mark = self._offsets.get(source)
            if mark is not None and first <= mark:
                return source, mark
        self._merge(delta, pending or {})
        for source, _first, last in ranges:
            self._offsets[source] = max(last, self._offsets.get(source, -1))
        return None

    def _merge(self, delta: BatchDelta, pending: PendingChanges) -> None:
        for key, agg in delta.windows.items():
            self._windows.setdefault(key, Aggregate()).merge(agg)
        for sid, agg in delta.totals.items():
            self._totals.setdefault(sid, Aggregate()).merge(agg)
        for name, n in delta.counters.items():
            self._counters[name] = self._counters.get(name, 0) + n
        for sid, ts in delta.last_seen.items():
            self._last_seen[sid] = max(ts, self._last_seen.get(sid, ts))
        for pair_key, fields in delta.paired_evidence.items():
            mine = self._extra.setdefault(pair_key, {})
            for name, value in fields.items():
                mine[name] = mine.get(name, 0) + value
        for source, (starts, stops) in pending.items():
            gone = list(stops)
            if starts or gone:
                waiting = self._pending.setdefault(source, {})
                for pair_id in gone:
                    waiting.pop(pair_id, None)
                waiting.update(starts)

    def expire(self, now: float) -> int:
        """Drop windows past retention at ``now``; returns how many were dropped."""
        by_name = {r.name: r for r in self.resolutions}
        dead = [k for k in self._windows if k[0] in by_name and by_name[k[0]].expired(k[1], now)]
        for key in dead:
            del self._windows[key]
        return len(dead)

    def applied_offset(self, source: str) -> int | None:
        return self._offsets.get(source)

    def applied_offsets(self) -> dict[str, int]:
        return dict(self._offsets)

    def active_slices(self, since: float | None = None) -> dict[str, float]:
        return {sid: ts for sid, ts in self._last_seen.items() if since is None or ts >= since}

    def window_aggregates(self, resolution: str, start: float, end: float,
                          slice_ids: Sequence[str]) -> dict[str, Aggregate]:
        res = {r.name: r for r in self.resolutions}.get(resolution)
        if res is None:
            raise StoreError(f"unknown resolution {resolution!r}; configured: {[r.name for r in self.resolutions]}")
        out: dict[str, Aggregate] = {}
        for sid in slice_ids:
            agg = Aggregate()
            for window_start in res.starts_between(start, end):
                part = self._windows.get((resolution, window_start, sid))
                if part is not None:
                    agg.merge(part)
            out[sid] = agg
        return out

    def totals(self, slice_ids: Sequence[str] | None = None) -> dict[str, Aggregate]:
        ids = self._totals.keys() if slice_ids is None else slice_ids
        return {sid: self._totals[sid].copy() if sid in self._totals else Aggregate() for sid in ids}

    def counters(self) -> dict[str, float]:
        return dict(self._counters)

    def paired_evidence(self, prefix: str = "") -> dict[str, dict[str, float]]:
        return {k: dict(v) for k, v in self._extra.items() if k.startswith(prefix)}

    def pending(self, source: str) -> dict[str, str]:
        return dict(self._pending.get(source, {}))

    def get_state(self, name: str) -> dict | None:
        text = self._state.get(name)
        return None if text is None else json.loads(text)

    def put_state(self, name: str, state: dict) -> None:
        self._state[name] = json.dumps(state)  # a copy, as Redis would keep
