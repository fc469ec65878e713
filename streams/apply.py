"""One batch into the store, verified: fold → pair → one atomic apply (runs in the worker's apply thread).

Guarantees (the store's contract is :mod:`monitor.store.base`):

* a batch is applied by one ``apply_verified`` that checks, in the same atomic step, that the store
  still holds what this worker applied: the generation it last saw and, per partition it holds, the
  watermark it last applied. When the store has lost that (restarted empty, rolled back, flushed)
  nothing is written and :meth:`BatchApplier.apply` returns the :class:`~monitor.store.base.LostState`;
  the loop then restores (:mod:`streams.restore`);
* an apply refused because part of the batch is already applied (a zombie, a rebuild's swap) re-reads
  the watermarks and applies only what lies above them, after reloading from the store the pairers of
  every partition of the batch (they ran ahead over records the store already holds) and dropping
  the values the cardinality guard remembers (a rebuild's swap replaces the admitted values too);
* infrastructure errors are retried with backoff (the fold too: the cardinality guard may need Redis)
  until the worker stops; a retried apply that did reach Redis before its reply was lost is then
  refused as already applied, so it counts once. A retry decodes the batch afresh: the Python
  placement merges into the groups it places, so folding the same decode twice could count some
  traces twice (the native sums leave their groups as they were, but any batch may fall back to
  the Python placement).

Overlap (:meth:`BatchApplier.submit`, for a store that applies a prebuilt payload: the single Redis):
the apply thread folds, pairs and serializes batch N + 1 while a sender thread waits for Redis to
apply batch N; N + 1 is sent only once N is settled, so there is one apply at a time, in offset order,
and N + 1 is checked against the generation and watermarks that N's apply left. What was prepared for
N + 1 assumed that N applied on its first try (its pairers ran on from N's); when N did not — an
error retried, a refusal, a lost store — that preparation is thrown away: on a loss N + 1 is dropped
with the fetch (the restore re-reads it), otherwise, once N is settled, N + 1 is decoded afresh, its
pairers reloaded from the store and it is applied as above. A store that applies one partition at a
time (the Redis Cluster store) gets no overlap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, cast

import redis
from aiokafka import TopicPartition

from monitor.delta import BatchDelta
from monitor.pairing import DEFAULT_CAPS, Caps, Pairer
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import (
    AlreadyApplied,
    Applied,
    ApplyOutcome,
    Expected,
    LostState,
    OffsetRange,
    PendingChanges,
    Store,
    StoreError,
    new_generation_id,
)
from monitor.windows import Resolution
from streams.batch import Batch, decode_batch, fold_batch, pair_batch

log = logging.getLogger("fleetmon.worker")

RETRY_MAX_SECONDS = 10.0


def retry_delay(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): exponential from 0.4 s, capped."""
    return min(RETRY_MAX_SECONDS, 0.2 * 2 ** min(attempt, 6))


def describe(batch: Batch) -> str:
    return ", ".join(f"{source} offsets {first}..{last}" for source, first, last in batch.ranges())


def split_by_source(batch: Batch) -> list[Batch]:
    """One batch per partition of ``batch``, in order, with the same records. A batch the native path
    folded holds groups that mix its partitions: its parts are decoded again one by one."""
    if batch.native is not None:
        return [decode_batch([(part.topic, part.partition, part.records)], batch.now,
                             max_record_bytes=batch.max_record_bytes, native=batch.native) for part in batch.parts]
    return [Batch(parts=[part], now=batch.now, max_record_bytes=batch.max_record_bytes) for part in batch.parts]


class PayloadStore(Protocol):
    """A store whose ``apply_verified`` is split in two: building the payload (CPU) and applying it
    (:class:`monitor.store.redis.store.RedisStore`), so the next batch's is built while one applies."""

    def payload(self, delta: BatchDelta, pending: PendingChanges | None = None) -> str | bytes: ...

    def apply_payload(self, payload: str | bytes, ranges: Sequence[OffsetRange], expected: Expected,
                      new_generation: str) -> ApplyOutcome: ...


@dataclass
class Prepared:
    """A batch folded and paired (its decode used up: see the module docstring), with the store's
    payload when the store takes one; ``tps`` maps its sources to their partitions."""

    tps: dict[str, TopicPartition]
    batch: Batch
    now: float
    delta: BatchDelta
    pending: dict[str, tuple[dict[str, str], set[str]]]
    payload: str | bytes | None = None


@dataclass
class Sending:
    """A prepared batch whose apply runs in the sender thread, checked against ``watermarks``."""

    prepared: Prepared
    watermarks: dict[str, int]
    reply: Future[ApplyOutcome]


def source_watermarks(marks: dict[TopicPartition, int]) -> dict[str, int]:
    """Watermarks by partition as the store names their sources (``topic:partition``)."""
    return {f"{tp.topic}:{tp.partition}": mark for tp, mark in marks.items()}


class StopRequested(Exception):
    """Raised inside a retry loop when the worker is stopping."""


@dataclass
class LoopCounters:
    """What this process did (for logs and the benchmark; Redis holds the truth)."""

    records: int = 0
    traces: int = 0
    rejected: int = 0
    batches: int = 0
    applies_refused: int = 0
    records_already_applied: int = 0
    state_restores: int = 0


class BatchApplier:
    """Folds, pairs and applies batches for one worker (its methods run in the apply thread only).

    ``pairers`` holds each assigned partition's shadow pairer (none when pairing is off);
    ``generation`` the store generation this worker applies into (None until its first apply);
    ``sending`` is true while a batch :meth:`submit` sent is not settled yet.
    """

    def __init__(self, store: Store, slicer: Slicer, resolutions: tuple[Resolution, ...],
                 counters: LoopCounters, prices: PriceMap | None, pair_ttl_seconds: float | None,
                 stopping: Callable[[], bool], pair_caps: Caps = DEFAULT_CAPS) -> None:
        self.store = store
        self.slicer = slicer
        self.resolutions = resolutions
        self.counters = counters
        self.prices = prices
        self.pair_ttl_seconds = pair_ttl_seconds
        self.pair_caps = pair_caps
        self.stopping = stopping
        self.pairers: dict[TopicPartition, Pairer] = {}
        self.generation: str | None = None
        self.payloads: PayloadStore | None = None
        if callable(getattr(store, "apply_payload", None)) and not getattr(store, "applies_per_source", False):
            self.payloads = cast("PayloadStore", store)
        self._sender: ThreadPoolExecutor | None = None
        self._sending: Sending | None = None

    @property
    def sending(self) -> bool:
        return self._sending is not None

    def load_pairer(self, source: str) -> Pairer:
        """A pairer holding the waiting halves the store has for ``source``."""
        assert self.prices is not None and self.pair_ttl_seconds is not None
        pairer = Pairer(self.prices, self.pair_ttl_seconds, self.pair_caps)
        pairer.load(self.store.pending(source))
        return pairer

    def prepare(self, tps: dict[str, TopicPartition], batch: Batch, now: float) -> Prepared:
        """Fold and pair ``batch`` (its pairers move on past it) and build the store's payload."""
        delta = fold_batch(batch, self.slicer, now, self.resolutions)
        pairers = {source: self.pairers[tp] for source, tp in tps.items() if tp in self.pairers}
        pending = pair_batch(batch, pairers, self.slicer.key, now, delta, self.slicer.key_for)
        payload = self.payloads.payload(delta, pending) if self.payloads is not None else None
        return Prepared(tps, batch, now, delta, pending, payload)

    def _send(self, prepared: Prepared, expected: Expected) -> ApplyOutcome:
        ranges, generation = prepared.batch.ranges(), new_generation_id(prepared.now)
        if prepared.payload is not None:
            assert self.payloads is not None
            return self.payloads.apply_payload(prepared.payload, ranges, expected, generation)
        return self.store.apply_verified(prepared.delta, ranges, prepared.pending, expected, generation)

    def _applied(self, outcome: Applied, batch: Batch, tps: dict[str, TopicPartition],
                 marks: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        self.generation = outcome.generation
        self.counters.batches += 1
        self.counters.traces += batch.trace_count
        self.counters.rejected += batch.rejection_count
        for part in batch.parts:
            marks[tps[part.source]] = part.last_offset
        return marks

    # -- overlapped: the next batch is prepared while Redis applies this one --------------
    def submit(self, tps: dict[str, TopicPartition], batch: Batch, now: float,
               watermarks: dict[str, int]) -> dict[TopicPartition, int] | LostState:
        """Prepare ``batch``, settle the batch sent before it, then send this one without waiting for
        Redis (see the module docstring); returns the watermarks settled by this call (the batch
        before's, and this one's when it had to be redone), or the lost state (``batch`` dropped).

        ``watermarks`` as in :meth:`apply`: the ones this worker holds, before the batch sent earlier.
        Stores without a payload step are applied at once, as :meth:`apply` does.
        """
        if self.payloads is None:
            return self.apply(tps, batch, now, watermarks)
        prepared: Prepared | None = None
        try:
            prepared = self.prepare(tps, batch, now)
        except (StoreError, redis.RedisError) as exc:
            log.warning("folding %s failed, retried once the apply before it is settled: %s: %s",
                        describe(batch), type(exc).__name__, exc)
        settled, clean = self._settle()
        if isinstance(settled, LostState):
            return settled
        expected = {**watermarks, **source_watermarks(settled)}
        if prepared is not None and clean:
            check = Expected(self.generation, expected)
            if self._sender is None:
                self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleetmon-send")
            self._sending = Sending(prepared, expected, self._sender.submit(self._send, prepared, check))
            return settled
        # prepared on pairers that ran ahead of what the store holds, or not at all: from the start
        redone = self.apply(tps, batch.after({}), now, expected, reload_pairers=True)
        return redone if isinstance(redone, LostState) else {**settled, **redone}

    def settle(self) -> dict[TopicPartition, int] | LostState:
        """Wait for the batch :meth:`submit` sent (retrying, refolding as :meth:`apply` does); its
        watermarks, or the lost state ({} when none was sent)."""
        return self._settle()[0]

    def _settle(self) -> tuple[dict[TopicPartition, int] | LostState, bool]:
        """As :meth:`settle`, and whether the batch applied on its first try."""
        sending, self._sending = self._sending, None
        if sending is None:
            return {}, True
        prepared = sending.prepared
        try:
            outcome: ApplyOutcome | StoreError | redis.RedisError = sending.reply.result()
        except (StoreError, redis.RedisError) as exc:
            outcome = exc
        if isinstance(outcome, Applied):
            return self._applied(outcome, prepared.batch, prepared.tps, {}), True
        return self.apply(prepared.tps, prepared.batch, prepared.now, sending.watermarks,
                          sent=(prepared, outcome)), False

    def close(self) -> None:
        """Stop the sender thread (after the batch in flight, if any, is answered)."""
        if self._sender is not None:
            self._sender.shutdown(wait=True)

    # -- one batch, start to end ------------------------------------------------------------
    def apply(self, tps: dict[str, TopicPartition], batch: Batch, now: float, watermarks: dict[str, int], *,
              sent: tuple[Prepared, ApplyOutcome | StoreError | redis.RedisError] | None = None,
              reload_pairers: bool = False) -> dict[TopicPartition, int] | LostState:
        """Apply ``batch`` (sources → partitions in ``tps``); returns the new watermarks, or the lost state.

        ``watermarks`` are the ones this worker last applied, per source it holds (see the module docstring).
        A store that applies one partition at a time (``applies_per_source``: the Redis Cluster store)
        gets each partition of the batch folded and applied on its own, in order. ``sent``: the batch
        as prepared and the outcome of its first try (made by :meth:`submit`'s sender), continued here;
        ``reload_pairers``: the batch's pairers ran ahead of the store, take the store's first.
        """
        if len(batch.parts) > 1 and getattr(self.store, "applies_per_source", False):
            marks: dict[TopicPartition, int] = {}
            for piece in split_by_source(batch):
                source = piece.parts[0].source
                result = self.apply({source: tps[source]}, piece, now, watermarks, reload_pairers=reload_pairers)
                if isinstance(result, LostState):
                    return result  # the partitions applied before it are in the store's watermarks
                marks.update(result)
            return marks
        attempt = 0
        marks = {}
        expected = dict(watermarks)
        prepared: Prepared | None = None
        folded = False   # the batch's decode is used up (a Python placement merged into its groups)
        stale = dict(tps) if reload_pairers else {}   # the sources whose pairers ran ahead of the store
        while True:
            if self.stopping() and attempt:
                raise StopRequested()
            try:
                if sent is not None:  # the first try ran in the sender thread
                    (prepared, first), sent = sent, None
                    folded = True
                    if isinstance(first, Exception):
                        raise first
                    outcome: ApplyOutcome = first
                else:
                    for source, tp in stale.items():  # they ran ahead of what was applied: take the store's
                        if tp in self.pairers:
                            self.pairers[tp] = self.load_pairer(source)
                    stale = {}
                    if marks and not batch:  # refused, and the store held all of it
                        return marks
                    if prepared is None:
                        folded = True
                        prepared = self.prepare(tps, batch, now)
                    outcome = self._send(prepared, Expected(self.generation, expected))
                if isinstance(outcome, Applied):
                    return self._applied(outcome, batch, tps, marks)
                if isinstance(outcome, LostState):
                    return outcome  # nothing written; the pairers ran ahead, the restore reloads them
                refused: AlreadyApplied = outcome
                stored = self.store.applied_offsets()
            except (StoreError, redis.RedisError) as exc:
                attempt += 1
                delay = retry_delay(attempt)
                log.warning("Redis apply of %s failed (attempt %d), retrying in %.1f s: %s: %s",
                            describe(batch), attempt, delay, type(exc).__name__, exc)
                if folded:  # a Python placement may have merged into the batch's groups: decode afresh
                    batch = batch.after({})
                    stale.update(tps)
                prepared, folded = None, False
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not self.stopping():
                    time.sleep(0.1)
                continue
            # Refused: part of the range is already applied by someone else.
            self.counters.applies_refused += 1
            stale.update(tps)   # all of them: also those of the parts the store holds whole
            forget = getattr(self.slicer.guard, "forget", None)   # (a guard backed by the store)
            if forget is not None:   # a rebuild's swap replaces the admitted values too: ask again
                forget()
            rest = batch.after(stored)
            self.counters.records_already_applied += batch.size - rest.size
            log.info("apply of %s refused (%s at watermark %s); refolding the %d records above the watermarks",
                     describe(batch), refused.source, refused.watermark, rest.size)
            for source, mark in stored.items():  # a watermark below what we applied is caught next time
                if source in expected:
                    expected[source] = max(expected[source], mark)
            left = {part.source for part in rest.parts}
            for part in batch.parts:
                if part.source not in left:  # the store holds all of it already
                    marks[tps[part.source]] = stored[part.source]
            tps = {source: tp for source, tp in tps.items() if source in left}
            batch, prepared, folded = rest, None, False
