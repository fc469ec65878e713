"""The in-process store: the Redis store's semantics in a dict, for `fleetmon run` and tests."""

from __future__ import annotations

import json
from collections.abc import Sequence

from monitor import identity
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.store.base import (
    AlreadyApplied,
    Applied,
    ApplyOutcome,
    Expected,
    Generation,
    LostState,
    OffsetRange,
    PendingChanges,
    StoreError,
    new_generation_id,
)
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
        self._generation = Generation()
        self._identities: dict[str, dict[str, float]] = {}

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool:
        if source is not None and first_offset is not None:
            mark = self._offsets.get(source)
            if mark is not None and first_offset <= mark:
                return False
        self._merge(delta, {source or "": (delta.pending_set, delta.pending_del)})
        if source is not None and last_offset is not None:
            self._offsets[source] = max(last_offset, self._offsets.get(source, -1))
        if self._generation.id is None:  # the first apply starts the generation, as in Redis
            self._generation = Generation(new_generation_id(), self._generation.restores)
        return True

    def apply_ranges(self, delta: BatchDelta, ranges: Sequence[OffsetRange],
                     pending: PendingChanges | None = None) -> tuple[str, int] | None:
        outcome = self._apply_checked(delta, ranges, pending, None, new_generation_id())
        return (outcome.source, outcome.watermark) if isinstance(outcome, AlreadyApplied) else None

    def apply_verified(self, delta: BatchDelta, ranges: Sequence[OffsetRange], pending: PendingChanges | None,
                       expected: Expected, new_generation: str) -> ApplyOutcome:
        return self._apply_checked(delta, ranges, pending, expected, new_generation)

    def _apply_checked(self, delta: BatchDelta, ranges: Sequence[OffsetRange], pending: PendingChanges | None,
                       expected: Expected | None, new_generation: str) -> ApplyOutcome:
        generation = self._generation.id
        if expected is not None:
            behind = {source: self._offsets.get(source) for source, mark in expected.watermarks.items()
                      if self._offsets.get(source, -1) < mark}
            if behind or (expected.generation is not None and expected.generation != generation):
                return LostState(expected, generation, behind)
        for source, first, _last in ranges:
            mark = self._offsets.get(source)
            if mark is not None and first <= mark:
                return AlreadyApplied(source, mark)
        self._merge(delta, pending or {})
        for source, _first, last in ranges:
            self._offsets[source] = max(last, self._offsets.get(source, -1))
        if generation is None:
            generation = new_generation
            self._generation = Generation(generation, self._generation.restores)
        return Applied(generation)

    def generation(self) -> Generation:
        return self._generation

    def count_restore(self) -> None:
        self._generation = Generation(self._generation.id, self._generation.restores + 1)

    def lose_state(self) -> None:
        """Forget everything, as a Redis restarted without persistence would (for tests and ``fleetmon run``
        drills); the next apply starts a new generation."""
        vars(self).update(vars(MemoryStore(self.resolutions)))

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
        for release, fields in delta.identities.items():
            identity.apply_to(self._identities.setdefault(release, {}), fields)
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

    def release_identities(self) -> dict[str, dict[str, float]]:
        return {release: dict(fields) for release, fields in self._identities.items()}

    def get_state(self, name: str) -> dict | None:
        text = self._state.get(name)
        return None if text is None else json.loads(text)

    def put_state(self, name: str, state: dict) -> None:
        self._state[name] = json.dumps(state)  # a copy, as Redis would keep
