"""Where aggregates live: one interface, an in-memory and a Redis implementation.

Both stores apply :class:`~monitor.fold.BatchDelta` objects *exactly once per
source offset range*: ``apply(delta, source, first_offset, last_offset)``
applies the delta and advances the source's watermark to ``last_offset``
atomically, and skips (returns False) when ``first_offset`` is not beyond the
watermark — the batch, or part of it, was already applied. Callers that may
see a partly applied batch re-read :meth:`Store.applied_offset` and drop the
records at or below it before folding again.

Small JSON documents (the alert engine's lifecycle state) are kept with
``get_state`` / ``put_state`` so a restarted engine neither re-pages nor forgets.

Reads: the active slices (with their last event time), the merged aggregate
per slice over the windows of a resolution overlapping ``[start, end)``, the
cumulative per-slice totals and the pipeline counters.
"""

from __future__ import annotations

import json
from typing import Mapping, Protocol, Sequence

from monitor.aggregate import Aggregate
from monitor.fold import BatchDelta
from monitor.slices import matches, parse_slice_id
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution


class StoreError(RuntimeError):
    """The store could not be read or written; wraps the backend's error."""


class Store(Protocol):
    resolutions: Sequence[Resolution]

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool: ...

    def applied_offset(self, source: str) -> int | None: ...

    def applied_offsets(self) -> dict[str, int]: ...

    def active_slices(self, since: float | None = None) -> dict[str, float]: ...

    def window_aggregates(self, resolution: str, start: float, end: float,
                          slice_ids: Sequence[str]) -> dict[str, Aggregate]: ...

    def totals(self, slice_ids: Sequence[str] | None = None) -> dict[str, Aggregate]: ...

    def counters(self) -> dict[str, float]: ...

    def extra(self, prefix: str) -> dict[str, dict[str, float]]: ...

    def pending(self, source: str) -> dict[str, str]: ...

    def get_state(self, name: str) -> dict | None: ...

    def put_state(self, name: str, state: dict) -> None: ...


def select(slice_ids: Sequence[str], selector: Mapping[str, str] | None) -> list[str]:
    """The ids whose slice matches every ``dim: value`` of ``selector``."""
    if not selector:
        return list(slice_ids)
    return [sid for sid in slice_ids if matches(parse_slice_id(sid), selector)]


def merged(aggregates: Mapping[str, Aggregate]) -> Aggregate:
    out = Aggregate()
    for agg in aggregates.values():
        out.merge(agg)
    return out
