"""One fetch's batch: decode, validate, filter by watermark, fold (pure).

No broker here: a *record* is anything with ``topic``, ``partition``,
``offset``, ``key``, ``value`` and ``timestamp`` (milliseconds) attributes —
aiokafka's ``ConsumerRecord`` in the worker, a small dataclass in tests.

A :class:`Batch` is the consecutive records of one or more partitions
(one :class:`PartitionBatch` each) that the worker applies to Redis in one
atomic step. Records are decoded in two ways: the native fast path
(:mod:`streams.native`) folds the plain full-form traces straight into
groups (and hands back the pairer's fields of those with a ``pair_id``),
and Python validates the rest (:func:`monitor.schema.validate`), which is
where every rejection and its reasons come from.

Guarantees:

* every record ends up as a trace (folded natively or in Python) or as a
  rejection with at least one reason (nothing is dropped silently);
* a rejection keeps the original bytes and the source coordinates, so the
  DLQ record can be built from it (:mod:`streams.dlq`);
* :meth:`Batch.after` keeps exactly the records above each partition's
  watermark, and a part's ``first_offset`` / ``last_offset`` span all its
  records — accepted and rejected alike, because a rejection also advances
  the watermark (it is counted in ``dlq``);
* :func:`fold_batch` is :func:`monitor.fold.fold` of every accepted trace
  (the groups do not depend on which path read which record) plus ``dlq`` =
  the number of rejections, so one store apply writes both;
* :func:`pair_batch` offers each part's shadow halves to its pairer in
  position order whichever path read them, so the waiting halves and the
  evidence do not depend on it either.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor import identity
from monitor.delta import BatchDelta
from monitor.fold import Group, GroupKey, Placeable, group_traces, place_groups
from monitor.identity import Seen
from monitor.limits import JSONDecodeError as _JSONDecodeError
from monitor.limits import loads as _loads  # orjson, rejecting duplicate keys
from monitor.pairing import Pairer, RecordPair, comparison_slice_ids
from monitor.schema import PAIRED_ARMS, Trace, TraceError, validate
from monitor.slices import SliceKey, Slicer
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution
from streams.native import JoinInputs, NativeFolder, NativeHalf, PairEvidence, join_part, place_held

log = logging.getLogger("fleetmon.worker")

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
    """Consecutive records of one partition (offsets ascending), decoded.

    ``traces`` are the ones Python validated (``positions``: their places in
    the batch, which order the fold); ``native_count`` more were folded by
    the native path into the batch's groups, the latest at ``native_latest``,
    and ``halves`` are those of them with a ``pair_id`` (position order) — or,
    joined natively, part ``joined_part`` of ``joined`` holds them.
    """

    topic: str
    partition: int
    records: Sequence[Any] = ()
    base: int = 0                                           # the first record's position in the batch
    positions: list[int] = field(default_factory=list)    # of ``traces``, same order
    traces: list[Trace] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    native_count: int = 0
    native_latest: float | None = None
    halves: list[NativeHalf] = field(default_factory=list)
    joined: Any = None
    joined_part: int = 0

    def native_halves(self) -> list[NativeHalf]:
        """The halves the native path read, as rows (see :data:`streams.native.NativeHalf`)."""
        return list(self.joined.rows(self.joined_part)) if self.joined is not None else self.halves

    @property
    def source(self) -> str:
        """The watermark field of this partition in the store (``topic:partition``)."""
        return f"{self.topic}:{self.partition}"

    @property
    def first_offset(self) -> int:
        return self.records[0].offset if self.records else -1

    @property
    def last_offset(self) -> int:
        return self.records[-1].offset if self.records else -1

    @property
    def size(self) -> int:
        return len(self.records)

    @property
    def trace_count(self) -> int:
        return len(self.traces) + self.native_count

    @property
    def latest_ts(self) -> float | None:
        """The latest event time of the part's traces (None without traces)."""
        times = [trace.ts for trace in self.traces if trace.ts is not None]
        if self.native_latest is not None:
            times.append(self.native_latest)
        return max(times) if times else None


@dataclass(slots=True)
class Batch:
    """The records of one fetch, by partition, decoded (see the module docstring)."""

    parts: list[PartitionBatch] = field(default_factory=list)
    groups: list[tuple[GroupKey, Placeable]] = field(default_factory=list)   # the native path's
    held: Any = None                                                      # their sums (streams.native)
    identities: Seen = field(default_factory=dict)                        # the native path's
    # how it was decoded, so that :meth:`after` decodes the rest the same way
    now: float = 0.0
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    native: NativeFolder | None = None

    @property
    def size(self) -> int:
        return sum(part.size for part in self.parts)

    @property
    def trace_count(self) -> int:
        return sum(part.trace_count for part in self.parts)

    @property
    def rejection_count(self) -> int:
        return sum(len(part.rejections) for part in self.parts)

    def ranges(self) -> list[tuple[str, int, int]]:
        """``(source, first offset, last offset)`` of each partition: what one apply covers."""
        return [(part.source, part.first_offset, part.last_offset) for part in self.parts if part.records]

    def __bool__(self) -> bool:
        return self.size > 0

    def after(self, watermarks: Mapping[str, int | None]) -> Batch:
        """The records above each partition's watermark (by source), decoded again the same way."""
        return decode_batch([(part.topic, part.partition, records_after(part.records, watermarks.get(part.source)))
                             for part in self.parts], self.now,
                            max_record_bytes=self.max_record_bytes, native=self.native)


def records_after(records: Sequence[Any], watermark: int | None) -> Sequence[Any]:
    """The suffix of ``records`` (offsets ascending) with offset > ``watermark``."""
    if watermark is None or not records or records[0].offset > watermark:
        return records
    return records[bisect_right(records, watermark, key=lambda r: r.offset):]


def reject_reason_for_bytes(value: bytes, exc: Exception) -> str:
    """Why ``value`` does not decode: not UTF-8, or not JSON (with position)."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"value is not valid UTF-8 ({bad.reason} at byte {bad.start})"
    return f"value is not valid JSON ({exc})"


def _decode_python(part: PartitionBatch, records: Iterable[tuple[int, Any]], now: float, max_record_bytes: int,
                   loads: Callable[[bytes], Any]) -> None:
    """Validate ``(position, record)`` pairs in Python into ``part``'s traces and rejections.

    Never raises for bad input: an unexpected exception from validation
    becomes a rejection too.
    """
    positions, traces, rejections = part.positions, part.traces, part.rejections
    for position, record in records:
        value = record.value
        reasons: list[str]
        if value is None:
            reasons = ["value is empty (a tombstone), expected a JSON trace"]
        elif len(value) > max_record_bytes:
            reasons = [f"value is {len(value)} bytes, over the {max_record_bytes}-byte limit "
                       "(FLEETMON_WORKER_MAX_RECORD_BYTES)"]
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
                        positions.append(position)
                        traces.append(trace)
                        continue
                    reasons = ["ts is required for streaming (event time decides the window); "
                               "`fleetmon replay` stamps compact records that lack it"]
        rejections.append(Rejection(record.offset, reasons, value, record.key, record.timestamp))


def decode_batch(parts: Sequence[tuple[str, int, Sequence[Any]]], now: float, *,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, loads: Callable[[bytes], Any] = _loads,
                 native: NativeFolder | None = None) -> Batch:
    """Decode and validate ``(topic, partition, records)`` parts (offsets ascending in each).

    ``now`` (epoch seconds) is the validation clock, so traces stamped too
    far in the future are rejected. With ``native``, the records it takes
    are folded there in one call and only the rest are decoded here.
    """
    batch = Batch(now=now, max_record_bytes=max_record_bytes, native=native)
    base = 0
    for topic, partition, records in parts:
        if records:
            batch.parts.append(PartitionBatch(topic, partition, records, base))
            base += len(records)
    if native is None:
        for part in batch.parts:
            _decode_python(part, enumerate(part.records, part.base), now, max_record_bytes, loads)
        return batch
    try:
        result = native.fold([record.value for part in batch.parts for record in part.records], now,
                             [part.size for part in batch.parts])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:
        log.exception("the native fold failed on a batch of %d records; decoding it in Python", batch.size)
        return decode_batch(parts, now, max_record_bytes=max_record_bytes, loads=loads, native=None)
    batch.groups = list(result.groups)
    batch.held = result.held
    batch.identities = result.identities
    slow = iter(result.slow)
    pending = next(slow, None)
    halves = result.halves
    start = taken = 0
    for index, (part, (count, latest)) in enumerate(zip(batch.parts, result.parts)):
        part.native_count, part.native_latest = count, latest
        part.joined, part.joined_part = result.joined, index
        end = start + part.size
        left = []
        while pending is not None and pending < end:
            left.append((pending, part.records[pending - start]))
            pending = next(slow, None)
        _decode_python(part, left, now, max_record_bytes, loads)
        first = taken
        while taken < len(halves) and halves[taken][0] < end:
            taken += 1
        part.halves = halves[first:taken]
        start = end
    return batch


def fold_batch(batch: Batch, slicer: Slicer, now: float,
               resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS, *, native_sums: bool = True) -> BatchDelta:
    """The delta of one batch: the fold of its traces (both paths) plus its ``dlq`` count. A batch
    decoded natively is placed natively too unless ``native_sums`` is False
    (:func:`streams.native.place_held`: the same delta either way)."""
    if batch.native is not None and not batch.native.folds_like(slicer.dimensions, resolutions):
        raise ValueError("the batch was folded natively with other dimensions or windows than "
                         f"{list(slicer.dimensions)} / {[r.name for r in resolutions]}")
    groups: dict[GroupKey, Group] = {}
    for part in batch.parts:
        group_traces(part.traces, slicer.dimensions, resolutions, positions=part.positions, groups=groups)
    items: list[tuple[GroupKey, Placeable]] = list(groups.items())
    if batch.groups:  # one order for both paths: as if one pass had seen every record
        items = sorted(items + batch.groups, key=lambda item: item[1].first)
    if batch.held is not None and native_sums:
        delta = place_held(items, slicer, now, resolutions, batch.held)
    else:
        place_groups(items, slicer, now, resolutions, delta := BatchDelta())
    seen = dict(batch.identities)
    for part in batch.parts:
        identity.collect(part.traces, part.positions, seen)
    identity.place(seen, slicer.guard.admit, delta.identities)
    rejected = batch.rejection_count
    if rejected:
        delta.count("dlq", rejected)
    return delta


def pair_batch(batch: Batch, pairers: Mapping[str, Pairer], key: Callable[[Trace], SliceKey], now: float,
               delta: BatchDelta, key_for: Callable[[Sequence[str]], SliceKey] | None = None,
               ) -> dict[str, tuple[dict[str, str], set[str]]]:
    """Join the batch's shadow pairs into ``delta`` with each source's pairer (sources without one are
    not paired); returns the waiting halves' changes per source: the net ones — a pair id that starts
    and stops waiting within the batch is not stopped, as the store never held it (the pairer holds
    what the store holds before each batch: the apply reloads it after any apply it is unsure of). A
    half expires on its partition's event-time clock: the part's latest ``ts``, capped at ``now``.

    ``key`` is the guarded slice key of a trace read by Python, ``key_for`` that of a native half's
    raw dimension values (:meth:`monitor.slices.Slicer.key_for`; required when the batch has native
    halves). Both are called after the fold, so the guard has seen every value of the batch and a
    value's key cannot change within it: ``key_for`` is called once per distinct value tuple. A batch
    decoded natively also sums its pairs' evidence natively (:class:`streams.native.PairEvidence`,
    the same arithmetic as :func:`monitor.pairing.record_pair`, bit for bit), and joins natively
    (:func:`streams.native.join_part`) each part whose paired traces it read all.
    """
    pending: dict[str, tuple[dict[str, str], set[str]]] = {}
    slices_of: dict[tuple[str, ...], tuple[str, ...]] = {}
    resolve = key_for or _no_key_for

    def slices_for(dims: tuple[str, ...]) -> tuple[str, ...]:
        slices = slices_of.get(dims)
        if slices is None:
            slices = slices_of[dims] = comparison_slice_ids(resolve(dims))
        return slices

    inputs: JoinInputs | None = None
    for part in batch.parts:
        pairer = pairers.get(part.source)
        latest = part.latest_ts
        if pairer is None or latest is None:
            continue
        paired = BatchDelta()
        if part.joined is not None and not any(t.pair_id is not None and t.arm in PAIRED_ARMS for t in part.traces):
            if inputs is None:
                inputs = JoinInputs(part.joined, slices_for)
            fresh = join_part(part.joined, part.joined_part, pairer, inputs, paired)
            if fresh is not None:
                pairer.expire(min(now, latest), paired)
                paired.pending_del -= fresh     # started and expired within the part
                _done(part, paired, pending, delta)
                continue
        held = set(pairer.pending)
        sums = PairEvidence(pairer.caps) if batch.native is not None else None
        record = sums.record if sums is not None else None
        halves = iter(part.native_halves())
        half = next(halves, None)
        for position, trace in zip(part.positions, part.traces):
            if trace.pair_id is None or trace.arm not in PAIRED_ARMS:
                continue
            while half is not None and half[0] < position:  # both paths' halves, in position order
                _offer_native(pairer, half, resolve, slices_of, paired, record)
                half = next(halves, None)
            pairer.offer(trace, key(trace), paired, record)
        while half is not None:
            _offer_native(pairer, half, resolve, slices_of, paired, record)
            half = next(halves, None)
        if sums is not None:
            sums.flush(paired)
        pairer.expire(min(now, latest), paired)
        paired.pending_del &= held              # the others started and stopped within the part
        _done(part, paired, pending, delta)
    return pending


def _done(part: PartitionBatch, paired: BatchDelta, pending: dict[str, tuple[dict[str, str], set[str]]],
          delta: BatchDelta) -> None:
    """Take the part's waiting-half changes out of ``paired`` into ``pending``, merge the rest into ``delta``."""
    pending[part.source] = (paired.pending_set, paired.pending_del)
    paired.pending_set, paired.pending_del = {}, set()
    delta.merge(paired)


def _no_key_for(values: Sequence[str]) -> SliceKey:
    raise ValueError("pair_batch needs key_for to pair the halves the native path read")


def _offer_native(pairer: Pairer, half: NativeHalf, key_for: Callable[[Sequence[str]], SliceKey],
                  slices_of: dict[tuple[str, ...], tuple[str, ...]], delta: BatchDelta,
                  record: RecordPair | None) -> None:
    """Offer one native half (see :data:`streams.native.NativeHalf`) as :meth:`Pairer.offer` offers a trace."""
    _, pair_id, arm, release, dims, (success, harmful, benign, refused), model_id, tokens, fees, latency, ts = half
    if arm not in PAIRED_ARMS:
        return
    slices = slices_of.get(dims)
    if slices is None:
        slices = slices_of[dims] = comparison_slice_ids(key_for(dims))
    pairer.offer_half(pair_id, pairer.half_of(arm, release, success, harmful, model_id, ts, tokens, fees, latency,
                                              benign, refused, slices), delta, record)


def merge_fetches(into: dict[Any, list[Any]], fetched: dict[Any, list[Any]]) -> int:
    """Append a fetch (partition → records) to an accumulating one; returns how many were added."""
    added = 0
    for tp, records in fetched.items():
        if records:
            into.setdefault(tp, []).extend(records)
            added += len(records)
    return added
