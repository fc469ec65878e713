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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from monitor.aggregate import Aggregate

#: A window aggregate's place: (resolution name, window start in epoch seconds, slice id).
WindowKey = tuple[str, int, str]


@dataclass
class BatchDelta:
    """Everything one batch changes; see the module docstring. An empty delta changes nothing."""

    windows: dict[WindowKey, Aggregate] = field(default_factory=dict)
    totals: dict[str, Aggregate] = field(default_factory=dict)           # slice id -> cumulative aggregate
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
        return not (self.windows or self.totals or self.counters or self.paired_evidence
                    or self.pending_set or self.pending_del or self.identities)
