"""Where aggregates live: one interface, an in-memory and a Redis implementation.

Both stores apply :class:`~monitor.delta.BatchDelta` objects *exactly once per
source offset range*: ``apply_ranges(delta, [(source, first, last), ...])``
applies the delta and advances every source's watermark to its ``last``
atomically, and refuses (writes nothing) when some ``first`` is not beyond its
source's watermark — the batch, or part of it, was already applied. Callers that
may see a partly applied batch re-read :meth:`Store.applied_offsets` and drop the
records at or below the watermarks before folding again. ``apply`` is the
one-source form.

Small JSON documents (the alert engine's lifecycle state) are kept with
``get_state`` / ``put_state`` so a restarted engine neither re-pages nor forgets.

Reads: the active slices (with their last event time), the merged aggregate
per slice over the windows of a resolution overlapping ``[start, end)``, the
cumulative per-slice totals and the pipeline counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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
