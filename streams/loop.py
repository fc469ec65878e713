"""The consume loop: Kafka fetches → decode + validate → fold + pair → one atomic Redis apply per fetch → commit.

Guarantees (Kafka delivers at least once; the effect on Redis is exactly once):

* a fetch (one or more partitions) is one :class:`streams.batch.Batch`, written by one atomic
  ``RedisStore.apply_ranges`` that also advances each partition's watermark and is refused when any
  range starts at or below it; the loop then re-reads the watermarks and applies only what lies above;
* a partition resumes at its Redis watermark + 1, not at the committed offset; offsets are committed
  only after the apply; shadow pairs' waiting halves are persisted by the same apply;
* every apply also checks that the store still holds what this worker applied (generation and
  watermarks); when it does not (Redis restarted empty, rolled back, flushed) the worker stops
  applying, logs an error, and rebuilds from the retained topic (:mod:`streams.restore`); a
  partition without a watermark whose group has committed an offset is read from the earliest
  retained offset, not from the commit (the store lost it while no worker ran);
* rejected records reach the DLQ (acknowledged) before the apply that counts them; infrastructure
  failures are retried with backoff and nothing is committed meanwhile (the worker stalls rather than
  drops); bad input never raises out of the loop.

The apply thread decodes, folds, pairs and serializes fetch N + 1 while Redis applies fetch N and the
event loop fetches N + 2; applies stay one at a time, in offset order (:meth:`streams.apply.BatchApplier.submit`).
Why the loop owns its consumer, and its cost: docs/operating.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from monitor.pairing import Pairer
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import Expected, LostState, StoreError
from monitor.store.redis.open import AnyRedisStore
from monitor.store.redis.store import RedisGuard
from monitor.worker_settings import WorkerSettings
from streams.apply import BatchApplier, LoopCounters, StopRequested, retry_delay
from streams.batch import Batch, PartitionBatch, decode_batch, records_after
from streams.consumer import RebalanceListener, make_consumer, take
from streams.dlq import DlqSink, part_records
from streams.native import NativeFolder
from streams.native import available as native_available
from streams.restore import IDLE_CHECK_SECONDS, Restorer, committed_offset, find_loss, seek_to_watermark, source_of

__all__ = ["ConsumeLoop", "LoopCounters", "StopRequested", "retry_delay", "tune_gc"]

log = logging.getLogger("fleetmon.worker")

COMMIT_INTERVAL_SECONDS = 1.0
PROGRESS_LOG_INTERVAL_SECONDS = 10.0


def tune_gc() -> None:
    """Fewer garbage-collector passes (a batch allocates ~10 objects per record, all freed together);
    startup objects are frozen out of every pass. Gain measured in docs/operating.md."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


class ConsumeLoop:
    """One consumer's loop into one store (guarantees in the module docstring). ``dlq`` may be None
    (``fleetmon rebuild`` re-reads records dead-lettered when first seen): rejections are then counted, not sent."""

    def __init__(self, settings: WorkerSettings, store: AnyRedisStore, *, dlq: DlqSink | None,
                 consumer: AIOKafkaConsumer | None = None, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.dlq = dlq
        self.clock = clock
        guard = RedisGuard(store, settings.max_slice_values)
        self.slicer = Slicer(settings.dimensions, guard, settings.groupings)
        self.prices = PriceMap.load(settings.price_map or None) if settings.pair_ttl_seconds else None
        self.native: NativeFolder | None = None
        if settings.native and native_available():
            self.native = NativeFolder(settings.dimensions, settings.resolutions,
                                       max_record_bytes=settings.max_record_bytes, threads=settings.native_threads)
        elif settings.native:
            log.warning("the native fold (fleetmon_native) is not installed: folding in Python, "
                        "several times slower; `make install` builds it")
        self.consumer = consumer or make_consumer(settings)
        self.counters = LoopCounters()
        self.applier = BatchApplier(store, self.slicer, tuple(settings.resolutions), self.counters, self.prices,
                                    settings.pair_ttl_seconds, lambda: self._stop, settings.pair_caps)
        # pairers: touched by the apply thread only, once assigned
        self.pairers: dict[TopicPartition, Pairer] = self.applier.pairers
        self.restorer = Restorer(self.consumer, store, self.applier, guard, self._retry_redis)
        self.assigned: set[TopicPartition] = set()
        self.watermarks: dict[TopicPartition, int | None] = {}
        self._lost: LostState | None = None   # set when an apply found the store lost our state; restored by run()
        self._dlq_through: dict[TopicPartition, int] = {}   # the last offset sent to the DLQ
        self._checked_at = time.monotonic()
        self._to_commit: dict[TopicPartition, int] = {}
        self._last_commit = 0.0
        self._inflight: asyncio.Future | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleetmon-apply")
        self._stop = False
        self._started = False
        self._closing: asyncio.Future | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        self.consumer.subscribe([self.settings.topic], listener=RebalanceListener(self))
        await self.consumer.start()
        self._event_loop = asyncio.get_running_loop()
        self._started = True

    def request_stop(self) -> None:
        self._stop = True

    async def run(self, until: Callable[[ConsumeLoop], Awaitable[bool]] | None = None) -> None:
        """Consume until :meth:`request_stop` (or until ``until(self)`` is true
        after a fetch that left the buffer empty), then drain and close."""
        if not self._started:
            await self.start()
        progress_at = time.monotonic() + PROGRESS_LOG_INTERVAL_SECONDS
        try:
            while not self._stop:
                if self._lost is not None:
                    await self._restore()
                fetched, full = await take(self.consumer, self.settings.batch_max_records,
                                           self.settings.batch_within_seconds, lambda: self._stop)
                if fetched:
                    await self._process(fetched)
                else:
                    await self._when_idle()
                await self._commit_ready()
                if until is not None and not full:
                    await self._finish_inflight()
                    if await until(self):
                        break
                if time.monotonic() >= progress_at:
                    progress_at = time.monotonic() + PROGRESS_LOG_INTERVAL_SECONDS
                    log.info("progress: %s", self.counters)
        finally:
            await self.close()

    async def close(self) -> None:
        """Finish the apply in flight, commit, leave the group. Idempotent: the
        service's stop and the loop's own exit may both call it."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if not self._started:
            return
        try:
            await self._finish_inflight()
            await self._commit_ready(force=True)
        except StopRequested:
            pass
        finally:
            await self.consumer.stop()
            self._executor.shutdown(wait=True)
            self.applier.close()

    # -- processing ---------------------------------------------------------------
    async def _process(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Hand a fetch to the apply thread (after the previous one is done), without waiting for it:
        the next fetch overlaps this one's decode, fold and apply."""
        parts: list[tuple[TopicPartition, Sequence[Any]]] = []
        for tp, records in fetched.items():
            if tp not in self.assigned or not records:
                continue  # revoked while the fetch was in our hands: the new owner reads it
            self.counters.records += len(records)
            # records at or below the watermark are dropped before decoding: they are applied already
            fresh = records_after(records, self.watermarks.get(tp))
            self.counters.records_already_applied += len(records) - len(fresh)
            if fresh:
                parts.append((tp, fresh))
            else:
                self._mark_committable(tp, records[-1].offset)
        if not parts:
            return
        while self._inflight is not None:  # (a rebalance callback may have started one meanwhile)
            await self._finish_inflight(flush=False)
        if self._lost is not None:  # what we hold was filtered by watermarks the store no longer has
            await self._restore()
            return
        parts = [(tp, records) for tp, records in parts if tp in self.assigned]  # revoked while we awaited
        if parts:
            expected = {source_of(tp): mark for tp, mark in self.watermarks.items()
                        if mark is not None and tp in self.assigned}
            self._inflight = asyncio.get_running_loop().run_in_executor(
                self._executor, self._handle_blocking, parts, self.clock(), expected)

    def _mark_committable(self, tp: TopicPartition, applied: int) -> None:
        if tp in self.assigned:
            self._to_commit[tp] = max(self._to_commit.get(tp, 0), applied + 1)

    async def _finish_inflight(self, flush: bool = True) -> None:
        """Record what the apply thread returned; with ``flush`` also settle the batch it sent last. The rebalance
        callback may await the same apply as the loop: both record the same result, only completion clears the slot."""
        while self._inflight is not None or (flush and self.applier.sending):
            future = self._inflight or self._start_settle()
            try:
                marks = await future
            finally:
                if self._inflight is future:
                    self._inflight = None
            if isinstance(marks, LostState):
                self._lost = self._lost or marks  # run() or _process() restores, between fetches
            else:
                self._checked_at = time.monotonic()
                for tp, mark in marks.items():
                    if tp in self.assigned:
                        self.watermarks[tp] = mark
                        self._mark_committable(tp, mark)
            if not flush:
                return

    def _start_settle(self) -> asyncio.Future:
        self._inflight = asyncio.get_running_loop().run_in_executor(self._executor, self.applier.settle)
        return self._inflight

    def _handle_blocking(self, parts: list[tuple[TopicPartition, Sequence[Any]]], now: float,
                         expected: dict[str, int]) -> dict[TopicPartition, int] | LostState:
        """Decode, dead-letter and submit one fetch (runs in the apply thread); returns the watermarks settled."""
        batch = decode_batch([(tp.topic, tp.partition, records) for tp, records in parts], now,
                             max_record_bytes=self.settings.max_record_bytes, native=self.native)
        tps = {part.source: tp for part, (tp, _) in zip(batch.parts, parts)}
        if batch.rejection_count and self.dlq is not None:
            assert self._event_loop is not None  # set by start(), before any fetch
            for part in batch.parts:  # a record re-read after a restore is dead-lettered once
                tp = tps[part.source]
                fresh = [rejection for rejection in part.rejections if rejection.offset > self._dlq_through.get(tp, -1)]
                if fresh:  # written (and acknowledged) before the apply that counts them
                    part = dataclasses.replace(part, rejections=fresh)
                    asyncio.run_coroutine_threadsafe(self._send_dlq(part, now), self._event_loop).result()
                    self._dlq_through[tp] = fresh[-1].offset
        return self.applier.submit(tps, batch, now, expected)

    def _apply_blocking(self, tps: dict[str, TopicPartition], batch: Batch,
                        now: float) -> dict[TopicPartition, int] | LostState:
        """Apply one batch in this thread (``BatchApplier.apply``), checked against the loop's watermarks."""
        expected = {source: mark for source, tp in tps.items() if (mark := self.watermarks.get(tp)) is not None}
        return self.applier.apply(tps, batch, now, expected)

    async def _send_dlq(self, part: PartitionBatch, now: float) -> None:
        assert self.dlq is not None
        records = part_records(part, now)
        attempt = 0
        while True:
            try:
                await self.dlq.send(records)
                return
            except (TimeoutError, KafkaError, OSError) as exc:
                attempt += 1
                if self._stop:
                    raise StopRequested() from exc
                delay = retry_delay(attempt)
                log.warning("writing %d records of %s to the DLQ failed (attempt %d), retrying in %.1f s: %s: %s",
                            len(records), part.source, attempt, delay, type(exc).__name__, exc)
                await self._pause(delay)

    async def _commit_ready(self, force: bool = False, also: set[TopicPartition] | None = None) -> None:
        if not self._to_commit:
            return
        now = time.monotonic()
        if not force and now - self._last_commit < COMMIT_INTERVAL_SECONDS:
            return
        offsets = {tp: offset for tp, offset in self._to_commit.items() if tp in self.assigned or (also and tp in also)}
        self._to_commit.clear()
        self._last_commit = now
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except KafkaError as exc:
            # harmless for correctness: the Redis watermark decides the position
            log.warning("offset commit failed (Redis watermarks still hold): %r", exc)

    # -- rebalancing --------------------------------------------------------------
    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        # Unassigned first, before any await: a fetch of theirs that _process holds must not start an
        # apply while this callback waits, or that apply would find their pairers gone and count the
        # traces without pairing their halves (the halves lost for good).
        held = set(revoked) & self.assigned
        self.assigned -= held
        try:
            await self._finish_inflight()
        except StopRequested:
            pass
        await self._commit_ready(force=True, also=held)
        for tp in revoked:
            self.pairers.pop(tp, None)
            self.watermarks.pop(tp, None)
            self._to_commit.pop(tp, None)
            self._dlq_through.pop(tp, None)
        if revoked:
            log.info("partitions revoked: %s", sorted(f"{tp.topic}:{tp.partition}" for tp in revoked))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        lost = []
        for tp in sorted(assigned):
            source = source_of(tp)
            try:
                mark = await self._retry_redis(f"reading the watermark of {source}",
                                               partial(self.store.applied_offset, source))
                if self.prices is not None:
                    self.pairers[tp] = await self._retry_redis(f"loading the waiting pair halves of {source}",
                                                               partial(self.applier.load_pairer, source))
                committed = None if mark is not None else await committed_offset(self.consumer, tp)
                if committed is not None:  # consumed before, yet not in the store: it lost it while no worker ran
                    beginning = await seek_to_watermark(self.consumer, tp, None)
                    if committed > beginning:
                        lost.append(f"{source} (committed offset {committed}, resuming at {beginning})")
                elif mark is not None:
                    self.consumer.seek(tp, mark + 1)
            except StopRequested:
                return
            self.watermarks[tp] = mark
            self.assigned.add(tp)
        if lost:
            log.error("the store holds no watermark for partitions the group has consumed: %s; the store lost its "
                      "state (or the prefix is new): rebuilding them from the earliest retained offset",
                      ", ".join(lost))
            self.counters.state_restores += 1
            try:
                await self._retry_redis("counting the restore", self.store.count_restore)
            except StopRequested:
                return
        if assigned:
            log.info("partitions assigned: %s (watermarks %s)",
                     sorted(f"{tp.topic}:{tp.partition}" for tp in assigned),
                     {f"{tp.topic}:{tp.partition}": self.watermarks[tp] for tp in assigned})

    async def _retry_redis(self, what: str, call: Callable[[], Any]) -> Any:
        attempt = 0
        while True:
            try:
                return call()
            except (StoreError, redis.RedisError) as exc:
                attempt += 1
                if self._stop:
                    raise StopRequested() from exc
                delay = retry_delay(attempt)
                log.warning("%s failed (attempt %d), retrying in %.1f s: %s: %s",
                            what, attempt, delay, type(exc).__name__, exc)
                await self._pause(delay)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up early when the worker is asked to stop."""
        deadline = time.monotonic() + seconds
        while not self._stop and time.monotonic() < deadline:
            await asyncio.sleep(min(0.1, deadline - time.monotonic()))

    # -- inspection (rebuild, tests) ----------------------------------------------
    async def caught_up(self, end_offsets: dict[TopicPartition, int]) -> bool:
        """True when every partition of ``end_offsets`` is consumed and applied up to its end."""
        if set(end_offsets) - self.assigned:
            return False
        for tp, end in end_offsets.items():
            if await self.consumer.position(tp) < end:
                return False
        return self._inflight is None and self._lost is None and not self.applier.sending

    # -- lost state ---------------------------------------------------------------
    async def _restore(self) -> None:
        """Rebuild what the store lost from Kafka (:mod:`streams.restore`); between fetches only."""
        await self._finish_inflight()
        lost, self._lost = self._lost, None
        if lost is not None:
            await self.restorer.restore(lost, self.assigned, self.watermarks, self._to_commit)
            self.counters.state_restores += 1
            self._checked_at = time.monotonic()

    async def _when_idle(self) -> None:
        """Nothing fetched: settle the applies (their offsets become committable); now and then check that
        the store still holds our state (every apply checks it too)."""
        if self._inflight is not None and self._inflight.done():
            await self._finish_inflight(flush=False)
        if self._inflight is None and self.applier.sending:
            self._start_settle()  # the last batch sent: settled in the apply thread, not waited for here
        if self._inflight is not None or self._lost is not None:
            return
        if time.monotonic() - self._checked_at < IDLE_CHECK_SECONDS:
            return
        self._checked_at = time.monotonic()
        expected = {source_of(tp): mark for tp, mark in self.watermarks.items()
                    if mark is not None and tp in self.assigned}
        try:
            stored, generation = self.store.applied_offsets(), self.store.generation().id
        except (StoreError, redis.RedisError) as exc:
            log.warning("checking the store's state failed (the next apply checks it again): %s: %s",
                        type(exc).__name__, exc)
            return
        self._lost = find_loss(Expected(self.applier.generation, expected), generation, stored)
