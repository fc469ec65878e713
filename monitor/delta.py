"""What one batch changes in the store: an additive :class:`BatchDelta` (pure).

A delta has three parts, each applied by a store with increments or set
operations, so applying the deltas of two batches equals applying the delta
of their union (:meth:`BatchDelta.merge`):

* the fold's part (:mod:`monitor.fold`): per-(resolution, window start, slice
  id) aggregates, per-slice cumulative totals, each slice's latest event time
  and each window's expiry;
* pipeline counters (``traces``, ``dlq``, ``late``, ``folded:<dim>``,
  ``pairs``, ...);
* the release identities (:mod:`monitor.identity`): per guarded release
  label, each version tuple seen and its latest event time (merged by max);
* the pairing's part (:mod:`monitor.pairing`): paired evidence as flat
  additive hash fields per pair key, and the shadow halves that start or stop
  waiting for their twin.

The delta knows neither how traces are folded nor how pairs are joined.

A fold may leave its windows and totals *held* (:class:`HeldSums`, the
native fold's: :meth:`BatchDelta.hold`) rather than as :class:`Aggregate`
objects: reading :attr:`BatchDelta.windows` or :attr:`BatchDelta.totals`
then makes them (the same values, in the same order), and a store that can
read them held (:attr:`BatchDelta.held_windows`) skips that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from monitor.aggregate import Aggregate

#: A window aggregate's place: (resolution name, window start in epoch seconds, slice id).
WindowKey = tuple[str, int, str]


class HeldSums(Protocol):
    """A fold's windows and totals held outside Python objects: ``window_keys`` and ``total_keys`` (slice
    ids) name them in order, and :meth:`windows` and :meth:`totals` make their aggregates, in that order."""

    @property
    def window_keys(self) -> Sequence[WindowKey]: ...
    @property
    def total_keys(self) -> Sequence[str]: ...
    def windows(self) -> list[Aggregate]: ...
    def totals(self) -> list[Aggregate]: ...


@dataclass
class BatchDelta:
    """Everything one batch changes; see the module docstring. An empty delta changes nothing."""

    _windows: dict[WindowKey, Aggregate] = field(default_factory=dict, init=False, repr=False)
    _totals: dict[str, Aggregate] = field(default_factory=dict, init=False, repr=False)   # slice id -> cumulative
    #: windows and totals held (:meth:`hold`), until :attr:`windows` / :attr:`totals` makes them
    _held: HeldSums | None = field(default=None, init=False, repr=False, compare=False)
    _held_windows: bool = field(default=False, init=False, repr=False, compare=False)
    _held_totals: bool = field(default=False, init=False, repr=False, compare=False)
    counters: dict[str, int] = field(default_factory=dict)
    last_seen: dict[str, float] = field(default_factory=dict)            # slice id -> latest event time
    expire_at: dict[tuple[str, int], int] = field(default_factory=dict)  # (resolution, start) -> epoch seconds
    #: pair key -> additive hash fields (written by :class:`monitor.pairing.PairedCounts`, never by hand).
    paired_evidence: dict[str, dict[str, float]] = field(default_factory=dict)
    #: shadow halves that start waiting (pair_id -> the half's JSON) or stop waiting, per source partition.
    pending_set: dict[str, str] = field(default_factory=dict)
    pending_del: set[str] = field(default_factory=set)
    #: release -> encoded version tuple -> latest event time (written by :func:`monitor.identity.place`).
    identities: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def windows(self) -> dict[WindowKey, Aggregate]:
        """Per-(resolution, window start, slice id) aggregates (made now if they were held)."""
        if self._held_windows:
            assert self._held is not None
            self._windows.update(zip(self._held.window_keys, self._held.windows(), strict=True))
            self._held_windows = False
        return self._windows

    @property
    def totals(self) -> dict[str, Aggregate]:
        """Slice id -> cumulative aggregate (made now if they were held)."""
        if self._held_totals:
            assert self._held is not None
            self._totals.update(zip(self._held.total_keys, self._held.totals(), strict=True))
            self._held_totals = False
        return self._totals

    @property
    def held_windows(self) -> HeldSums | None:
        """The held sums while their windows are still held (:attr:`windows` not read since), else None."""
        return self._held if self._held_windows else None

    def hold(self, held: HeldSums) -> None:
        """Take ``held`` as this delta's windows and totals (it must have none yet)."""
        if self._windows or self._totals or self._held_windows or self._held_totals:
            raise ValueError("hold needs a delta without windows or totals (held sums are not merged)")
        self._held, self._held_windows, self._held_totals = held, True, True

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def add_paired_evidence(self, key: str, fields: Mapping[str, float]) -> None:
        """Add hash ``fields`` to the paired evidence under ``key`` (field by field)."""
        mine = self.paired_evidence.setdefault(key, {})
        for name, value in fields.items():
            mine[name] = mine.get(name, 0) + value

    def start_waiting(self, pair_id: str, half_json: str) -> None:
        self.pending_set[pair_id] = half_json
        self.pending_del.discard(pair_id)

    def stop_waiting(self, pair_id: str) -> None:
        self.pending_set.pop(pair_id, None)
        self.pending_del.add(pair_id)

    def merge(self, other: BatchDelta) -> BatchDelta:
        """Add ``other`` (a later batch) into this delta; returns self."""
        for key, agg in other.windows.items():
            self.windows.setdefault(key, Aggregate()).merge(agg)
        for sid, agg in other.totals.items():
            self.totals.setdefault(sid, Aggregate()).merge(agg)
        for name, n in other.counters.items():
            self.count(name, n)
        for sid, ts in other.last_seen.items():
            self.last_seen[sid] = max(ts, self.last_seen.get(sid, ts))
        self.expire_at.update(other.expire_at)
        for pair_key, fields in other.paired_evidence.items():
            self.add_paired_evidence(pair_key, fields)
        for release, fields in other.identities.items():
            mine_ids = self.identities.setdefault(release, {})
            for name, ts in fields.items():
                mine_ids[name] = max(ts, mine_ids.get(name, ts))
        for pair_id in other.pending_del:  # later stops and starts win over earlier ones
            self.stop_waiting(pair_id)
        for pair_id, text in other.pending_set.items():
            self.start_waiting(pair_id, text)
        return self

    @property
    def empty(self) -> bool:
        held = self._held
        held_any = held is not None and ((self._held_windows and len(held.window_keys) > 0)
                                         or (self._held_totals and len(held.total_keys) > 0))
        return not (held_any or self._windows or self._totals or self.counters or self.paired_evidence
                    or self.pending_set or self.pending_del or self.identities)
