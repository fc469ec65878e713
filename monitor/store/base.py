"""Where aggregates live: one interface, an in-memory and a Redis implementation.

Both stores apply :class:`~monitor.delta.BatchDelta` objects *exactly once per
source offset range*: ``apply_ranges(delta, [(source, first, last), ...])``
applies the delta and advances every source's watermark to its ``last``
atomically, and refuses (writes nothing) when some ``first`` is not beyond its
source's watermark — the batch, or part of it, was already applied. Callers that
may see a partly applied batch re-read :meth:`Store.applied_offsets` and drop the
records at or below the watermarks before folding again. ``apply`` is the
one-source form.

``apply_verified`` adds what a long-running writer needs to notice a store that lost
its state (restarted empty, rolled back, flushed): it also refuses, and reports
:class:`LostState`, when the store's generation is not the one the writer
expects or a source's watermark is missing or below the one the writer last
applied. The generation (:class:`Generation`) is written by the first apply into
a store that has none, so it changes when the state is lost; the writer's
restore from Kafka is counted in it (``count_restore``).

Small JSON documents (the alert engine's lifecycle state) are kept with
``get_state`` / ``put_state`` so a restarted engine neither re-pages nor forgets.

Reads: the active slices (with their last event time), the merged aggregate
per slice over the windows of a resolution overlapping ``[start, end)``, the
cumulative per-slice totals, the pipeline counters and each release label's
version tuples (:mod:`monitor.identity`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.windows import Resolution

#: ``(source, first offset, last offset)``: a run of consecutive records of one source.
OffsetRange = tuple[str, int, int]

#: Per source, the pair halves that start waiting (``{pair_id: half}``) and stop waiting (pair ids).
PendingChanges = Mapping[str, tuple[Mapping[str, str], Iterable[str]]]


class StoreError(RuntimeError):
    """The store could not be read or written; wraps the backend's error."""


@dataclass(frozen=True)
class Generation:
    """The store's state lineage: ``id`` (None before the first apply) and the restores counted in it."""

    id: str | None = None
    restores: int = 0

    @property
    def number(self) -> int:
        """``id`` as a number for a gauge (the creation time in ms for ids the worker writes; 0 for none)."""
        try:
            return int(self.id) if self.id is not None else 0
        except ValueError:
            return 0


@dataclass(frozen=True)
class Expected:
    """What a writer believes the store holds: the generation (None: none seen yet) and, per
    source it has applied, the watermark it last applied (a source it has not applied is absent)."""

    generation: str | None = None
    watermarks: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Applied:
    """``apply_verified`` wrote the batch; ``generation`` is the store's (new if it had none)."""

    generation: str


@dataclass(frozen=True)
class AlreadyApplied:
    """``apply_verified`` wrote nothing: ``source``'s watermark is at or past its first offset."""

    source: str
    watermark: int


@dataclass(frozen=True)
class LostState:
    """``apply_verified`` wrote nothing: the store does not hold what the writer applied.

    ``generation`` is the store's (None: none), ``behind`` the sources whose stored
    watermark is missing (None) or below the expected one, with the stored value.
    """

    expected: Expected
    generation: str | None
    behind: Mapping[str, int | None]

    def describe(self) -> str:
        """One line naming the generations and each source's expected and stored watermark."""
        parts = []
        if self.expected.generation is not None and self.expected.generation != self.generation:
            parts.append(f"generation {self.expected.generation} expected, the store has "
                         f"{self.generation if self.generation is not None else 'none'}")
        for source, stored in sorted(self.behind.items()):
            parts.append(f"{source} applied through offset {self.expected.watermarks.get(source)}, the store holds "
                         f"{'no watermark' if stored is None else f'offset {stored}'}")
        return "; ".join(parts) or "the store's state differs from what was applied"


ApplyOutcome = Applied | AlreadyApplied | LostState


def new_generation_id(now: float | None = None) -> str:
    """A generation id: the creation time in milliseconds since the epoch (so it grows with each loss)."""
    return str(int((time.time() if now is None else now) * 1000))


class Store(Protocol):
    """What the worker, the exporter, the alert engine and the CLI use of a store."""

    @property
    def resolutions(self) -> Sequence[Resolution]: ...

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool:
        """Apply ``delta``; with a source and offsets only when ``first_offset`` is beyond its watermark."""
        ...

    def apply_ranges(self, delta: BatchDelta, ranges: Sequence[OffsetRange],
                     pending: PendingChanges | None = None) -> tuple[str, int] | None:
        """Apply ``delta`` and advance every range's watermark, atomically; the refusal
        ``(source, watermark)`` instead when one range is already (partly) applied."""
        ...

    def apply_verified(self, delta: BatchDelta, ranges: Sequence[OffsetRange], pending: PendingChanges | None,
                       expected: Expected, new_generation: str) -> ApplyOutcome:
        """``apply_ranges`` that also refuses (:class:`LostState`) when the store lost what
        ``expected`` says was applied; ``new_generation`` is written when the store has none."""
        ...

    def generation(self) -> Generation:
        """The store's generation (``Generation()`` before the first apply)."""
        ...

    def count_restore(self) -> None:
        """Count one restore from Kafka in the store's generation."""
        ...

    def expire(self, now: float) -> int:
        """Drop windows past retention at ``now`` (a no-op where the backend expires them itself)."""
        ...

    def applied_offset(self, source: str) -> int | None: ...

    def applied_offsets(self) -> dict[str, int]: ...

    def active_slices(self, since: float | None = None) -> dict[str, float]: ...

    def window_aggregates(self, resolution: str, start: float, end: float,
                          slice_ids: Sequence[str]) -> dict[str, Aggregate]: ...

    def totals(self, slice_ids: Sequence[str] | None = None) -> dict[str, Aggregate]: ...

    def counters(self) -> dict[str, float]: ...

    def paired_evidence(self, prefix: str = "") -> dict[str, dict[str, float]]: ...

    def pending(self, source: str) -> dict[str, str]: ...

    def release_identities(self) -> dict[str, dict[str, float]]:
        """Per release label its identity hash: encoded version tuple → latest event time, plus
        ``monitor.identity.OVERFLOW_FIELD`` (read with :func:`monitor.identity.summarize`)."""
        ...

    def get_state(self, name: str) -> dict | None: ...

    def put_state(self, name: str, state: dict) -> None: ...


class ScriptClient(Protocol):
    """The part of a Redis client that server-side reads use (redis-py's ``Redis`` has it)."""

    def register_script(self, script: str) -> Any: ...

    def script_load(self, script: str) -> Any: ...


@runtime_checkable
class ScriptableStore(Store, Protocol):
    """A store whose keys a reader may read itself with its own scripts: the Redis store.

    The exporter's incremental reads (:class:`~monitor.store.redis.reads.SpanReader`)
    use it; keys are named by :class:`~monitor.store.redis.layout.KeyLayout` under ``prefix``.
    """

    @property
    def prefix(self) -> str: ...

    @property
    def client(self) -> ScriptClient: ...


def merged(aggregates: Mapping[str, Aggregate]) -> Aggregate:
    """The merge of every aggregate (an empty :class:`Aggregate` for none)."""
    out = Aggregate()
    for agg in aggregates.values():
        out.merge(agg)
    return out
