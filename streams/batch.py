"""One partition's batch: decode, validate, filter by watermark, fold (pure).

No broker here: a *record* is anything with ``topic``, ``partition``,
``offset``, ``key``, ``value`` and ``timestamp`` (milliseconds) attributes —
aiokafka's ``ConsumerRecord`` in the worker, a small dataclass in tests.

Guarantees:

* every record of a batch ends up either as a trace or as a rejection with
  at least one reason (nothing is dropped silently);
* a rejection keeps the original bytes and the source coordinates, so the
  DLQ record can be built from it (:mod:`streams.dlq`);
* :meth:`PartitionBatch.after` keeps exactly the records whose offset is
  above a watermark, and :attr:`PartitionBatch.first_offset` /
  :attr:`PartitionBatch.last_offset` span the records kept — accepted and
  rejected alike, because a rejection also advances the watermark (it is
  counted in ``dlq``);
* :func:`fold_batch` is :func:`monitor.fold.fold` of the accepted traces plus
  ``dlq`` = the number of rejections, so one store apply writes both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from monitor.fold import BatchDelta, fold
from monitor.schema import Trace, TraceError, validate
from monitor.slices import Slicer
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

try:  # orjson is ~5x faster than json on trace-sized objects
    from orjson import JSONDecodeError as _JSONDecodeError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a declared dependency
    from json import JSONDecodeError as _JSONDecodeError  # type: ignore[assignment]
    from json import loads as _loads  # type: ignore[assignment]

#: Default largest value accepted as a trace (bytes); larger ones go to the DLQ.
DEFAULT_MAX_RECORD_BYTES = 1024 * 1024


@dataclass(slots=True)
class Rejection:
    """A source record that is not a countable trace, with every reason."""

    offset: int
    reasons: list[str]
    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int | None = None


@dataclass(slots=True)
class PartitionBatch:
    """Consecutive records of one partition, decoded (offsets ascending)."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)      # of ``traces``, same order
    traces: list[Trace] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    first_offset: int = -1
    last_offset: int = -1

    @property
    def source(self) -> str:
        """The watermark field of this partition in the store (``topic:partition``)."""
        return f"{self.topic}:{self.partition}"

    @property
    def size(self) -> int:
        return len(self.traces) + len(self.rejections)

    def __bool__(self) -> bool:
        return self.size > 0

    def after(self, watermark: int | None) -> "PartitionBatch":
        """The records with offset > ``watermark`` (all of them when None)."""
        if watermark is None or watermark < self.first_offset:
            return self
        kept = PartitionBatch(self.topic, self.partition)
        if watermark >= self.last_offset:
            return kept
        for offset, trace in zip(self.offsets, self.traces):
            if offset > watermark:
                kept.offsets.append(offset)
                kept.traces.append(trace)
        kept.rejections = [r for r in self.rejections if r.offset > watermark]
        # both lists ascend; the last record is kept since watermark < last_offset
        kept.first_offset = min(kept.offsets[:1] + [r.offset for r in kept.rejections[:1]])
        kept.last_offset = self.last_offset
        return kept


def reject_reason_for_bytes(value: bytes, exc: Exception) -> str:
    """Why ``value`` does not decode: not UTF-8, or not JSON (with position)."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"value is not valid UTF-8 ({bad.reason} at byte {bad.start})"
    return f"value is not valid JSON ({exc})"


def decode_records(topic: str, partition: int, records: Sequence[Any], now: float, *,
                   max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                   loads: Callable[[bytes], Any] = _loads) -> PartitionBatch:
    """Decode and validate ``records`` (one partition, offsets ascending).

    ``now`` (epoch seconds) is passed to :func:`monitor.schema.validate`, so
    traces stamped too far in the future are rejected. Never raises for bad
    input: an unexpected exception from validation becomes a rejection too.
    """
    batch = PartitionBatch(topic, partition)
    if not records:
        return batch
    offsets, traces, rejections = batch.offsets, batch.traces, batch.rejections
    for record in records:
        value = record.value
        reasons: list[str]
        if value is None:
            reasons = ["value is empty (a tombstone), expected a JSON trace"]
        elif len(value) > max_record_bytes:
            reasons = [f"value is {len(value)} bytes, over the {max_record_bytes}-byte limit "
                       "(FLEETMON_MAX_RECORD_BYTES)"]
        else:
            try:
                data = loads(value)
            except _JSONDecodeError as exc:
                reasons = [reject_reason_for_bytes(value, exc)]
            else:
                try:
                    trace = validate(data, now=now)
                except TraceError as exc:
                    reasons = list(exc.problems)
                except Exception as exc:  # noqa: BLE001 - bad input must never stop the worker
                    reasons = [f"validation failed unexpectedly: {type(exc).__name__}: {exc}"]
                else:
                    if trace.ts is not None:
                        offsets.append(record.offset)
                        traces.append(trace)
                        continue
                    reasons = ["ts is required for streaming (event time decides the window); "
                               "`fleetmon replay` stamps compact records that lack it"]
        rejections.append(Rejection(record.offset, reasons, value, record.key, record.timestamp))
    batch.first_offset = records[0].offset
    batch.last_offset = records[-1].offset
    return batch


def fold_batch(batch: PartitionBatch, slicer: Slicer, now: float,
               resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> BatchDelta:
    """The delta of one batch: the fold of its traces plus its ``dlq`` count."""
    delta = fold(batch.traces, slicer, now, resolutions)
    if batch.rejections:
        delta.count("dlq", len(batch.rejections))
    return delta


def group_by_partition(records: Iterable[Any]) -> dict[tuple[str, int], list[Any]]:
    """Split records by ``(topic, partition)``, keeping each partition's order."""
    out: dict[tuple[str, int], list[Any]] = {}
    for record in records:
        key = (record.topic, record.partition)
        part = out.get(key)
        if part is None:
            out[key] = [record]
        else:
            part.append(record)
    return out


def merge_fetches(into: dict[Any, list[Any]], fetched: dict[Any, list[Any]]) -> int:
    """Append a fetch (partition → records) to an accumulating one; returns how many were added."""
    added = 0
    for tp, records in fetched.items():
        if records:
            into.setdefault(tp, []).extend(records)
            added += len(records)
    return added
