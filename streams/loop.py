"""The consume loop: Kafka fetches → decode + validate → fold + pair → one atomic Redis apply per fetch → commit.

Guarantees (Kafka delivers at least once; the effect on Redis is exactly once):

* a fetch (one or more partitions) is one :class:`streams.batch.Batch`, written by one atomic
  ``RedisStore.apply_ranges`` that also advances each partition's watermark and is refused when any
  range starts at or below it; the loop then re-reads the watermarks and applies only what lies above;
* a partition resumes at its Redis watermark + 1, not at the committed offset; offsets are committed
  only after the apply; shadow pairs' waiting halves are persisted by the same apply;
* rejected records reach the DLQ (acknowledged) before the apply that counts them; infrastructure
  failures are retried with backoff and nothing is committed meanwhile (the worker stalls rather than
  drops); bad input never raises out of the loop.

The apply thread decodes, folds and applies fetch N while the event loop fetches N + 1 (one in flight,
so applies stay in offset order). Why the loop owns its consumer, and its cost: docs/operating.md.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from monitor.delta import BatchDelta
from monitor.pairing import Pairer
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import StoreError
from monitor.store.redis.store import RedisGuard, RedisStore
from monitor.worker_settings import WorkerSettings
from streams.batch import Batch, PartitionBatch, decode_batch, fold_batch, pair_batch, records_after
from streams.consumer import RebalanceListener, make_consumer, take
from streams.dlq import DlqSink, part_records
from streams.native import NativeFolder
from streams.native import available as native_available

log = logging.getLogger("fleetmon.worker")

COMMIT_INTERVAL_SECONDS = 1.0
PROGRESS_LOG_INTERVAL_SECONDS = 10.0
RETRY_MAX_SECONDS = 10.0


def tune_gc() -> None:
    """Fewer garbage-collector passes (a batch allocates ~10 objects per record, all freed together);
    startup objects are frozen out of every pass. Gain measured in docs/operating.md."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def retry_delay(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): exponential from 0.4 s, capped."""
    return min(RETRY_MAX_SECONDS, 0.2 * 2 ** min(attempt, 6))


def _describe(batch: Batch) -> str:
    return ", ".join(f"{source} offsets {first}..{last}" for source, first, last in batch.ranges())


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


class ConsumeLoop:
    """One consumer's loop into one store (guarantees in the module docstring).

    ``dlq`` may be None (``fleetmon rebuild`` re-reads records that were
    dead-lettered when first seen): rejections are then counted, not sent.
    """

    def __init__(self, settings: WorkerSettings, store: RedisStore, *, dlq: DlqSink | None,
                 consumer: AIOKafkaConsumer | None = None, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.dlq = dlq
        self.clock = clock
        self.slicer = Slicer(settings.dimensions, RedisGuard(store, settings.max_slice_values))
        self.prices = PriceMap.load(settings.price_map or None) if settings.pair_ttl_seconds else None
        self.native: NativeFolder | None = None
        if settings.native and native_available():
            self.native = NativeFolder(settings.dimensions, settings.resolutions,
                                       max_record_bytes=settings.max_record_bytes,
                                       pair_id_slow=self.prices is not None)
        elif settings.native:
            log.warning("the native fold (fleetmon_native) is not installed: folding in Python, "
                        "several times slower; `make install` builds it")
        self.pairers: dict[TopicPartition, Pairer] = {}   # touched by the apply thread only, once assigned
        self.consumer = consumer or make_consumer(settings)
        self.counters = LoopCounters()
        self.assigned: set[TopicPartition] = set()
        self.watermarks: dict[TopicPartition, int | None] = {}
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
                fetched, full = await take(self.consumer, self.settings.batch_max_records,
                                           self.settings.batch_within_seconds, lambda: self._stop)
                if fetched:
                    await self._process(fetched)
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
        await self._finish_inflight()
        parts = [(tp, records) for tp, records in parts if tp in self.assigned]  # revoked while we awaited
        if parts:
            self._inflight = asyncio.get_running_loop().run_in_executor(
                self._executor, self._handle_blocking, parts, self.clock())

    def _mark_committable(self, tp: TopicPartition, applied: int) -> None:
        if tp in self.assigned:
            self._to_commit[tp] = max(self._to_commit.get(tp, 0), applied + 1)

    async def _finish_inflight(self) -> None:
        # The rebalance callback may await the same apply as the loop does;
        # both record the same result, and only completion clears the slot.
        future = self._inflight
        if future is None:
            return
        try:
            marks = await future
        finally:
            if self._inflight is future:
                self._inflight = None
        for tp, mark in marks.items():
            if tp in self.assigned:
                self.watermarks[tp] = mark
                self._mark_committable(tp, mark)

    def _handle_blocking(self, parts: list[tuple[TopicPartition, Sequence[Any]]],
                         now: float) -> dict[TopicPartition, int]:
        """Decode, fold, dead-letter and apply one fetch (runs in the apply thread); returns the watermarks."""
        batch = decode_batch([(tp.topic, tp.partition, records) for tp, records in parts], now,
                             max_record_bytes=self.settings.max_record_bytes, native=self.native)
        tps = {part.source: tp for part, (tp, _) in zip(batch.parts, parts)}
        if batch.rejection_count and self.dlq is not None:
            assert self._event_loop is not None  # set by start(), before any fetch
            for part in batch.parts:
                if part.rejections:  # written (and acknowledged) before the apply that counts them
                    asyncio.run_coroutine_threadsafe(self._send_dlq(part, now), self._event_loop).result()
        return self._apply_blocking(tps, batch, now)

    def _apply_blocking(self, tps: dict[str, TopicPartition], batch: Batch, now: float) -> dict[TopicPartition, int]:
        """Apply one batch (in the apply thread): fold, pair, one atomic apply; returns the new watermarks.

        Infrastructure errors are retried (the fold too: the cardinality
        guard may need Redis); a refused apply re-reads the watermarks and
        applies what is left above them."""
        attempt = 0
        marks: dict[TopicPartition, int] = {}
        delta: BatchDelta | None = None
        pending: dict[str, tuple[dict[str, str], set[str]]] = {}
        stale_pairers = False
        while True:
            if self._stop and attempt:
                raise StopRequested()
            try:
                if stale_pairers:  # they ran ahead of what was applied: take the store's
                    for source, tp in tps.items():
                        if tp in self.pairers:
                            self.pairers[tp] = self._load_pairer(source)
                    stale_pairers = False
                if delta is None:
                    delta = fold_batch(batch, self.slicer, now, self.settings.resolutions)
                    pairers = {source: self.pairers[tp] for source, tp in tps.items() if tp in self.pairers}
                    pending = pair_batch(batch, pairers, self.slicer.key, now, delta)
                refused = self.store.apply_ranges(delta, batch.ranges(), pending)
                if refused is None:
                    self.counters.batches += 1
                    self.counters.traces += batch.trace_count
                    self.counters.rejected += batch.rejection_count
                    for part in batch.parts:
                        marks[tps[part.source]] = part.last_offset
                    return marks
                watermarks = self.store.applied_offsets()
            except (StoreError, redis.RedisError) as exc:
                attempt += 1
                delay = retry_delay(attempt)
                log.warning("Redis apply of %s failed (attempt %d), retrying in %.1f s: %s: %s",
                            _describe(batch), attempt, delay, type(exc).__name__, exc)
                stale_pairers = stale_pairers or (delta is not None and bool(self.pairers))
                delta = None
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not self._stop:
                    time.sleep(0.1)
                continue
            # Refused: part of the range is already applied by someone else.
            self.counters.applies_refused += 1
            stale_pairers = bool(self.pairers)
            rest = batch.after(watermarks)
            self.counters.records_already_applied += batch.size - rest.size
            log.info("apply of %s refused (%s at watermark %s); refolding the %d records above the watermarks",
                     _describe(batch), refused[0], refused[1], rest.size)
            left = {part.source for part in rest.parts}
            for part in batch.parts:
                if part.source not in left:  # the store holds all of it already
                    marks[tps[part.source]] = watermarks[part.source]
            if not rest:
                return marks
            tps = {source: tp for source, tp in tps.items() if source in left}
            batch, delta = rest, None

    def _load_pairer(self, source: str) -> Pairer:
        assert self.prices is not None and self.settings.pair_ttl_seconds is not None
        pairer = Pairer(self.prices, self.settings.pair_ttl_seconds)
        pairer.load(self.store.pending(source))
        return pairer

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

    async def _commit_ready(self, force: bool = False) -> None:
        if not self._to_commit:
            return
        now = time.monotonic()
        if not force and now - self._last_commit < COMMIT_INTERVAL_SECONDS:
            return
        offsets = {tp: offset for tp, offset in self._to_commit.items() if tp in self.assigned}
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
        try:
            await self._finish_inflight()
        except StopRequested:
            pass
        await self._commit_ready(force=True)
        for tp in revoked:
            self.assigned.discard(tp)
            self.pairers.pop(tp, None)
            self.watermarks.pop(tp, None)
            self._to_commit.pop(tp, None)
        if revoked:
            log.info("partitions revoked: %s", sorted(f"{tp.topic}:{tp.partition}" for tp in revoked))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in sorted(assigned):
            source = f"{tp.topic}:{tp.partition}"
            try:
                mark = await self._retry_redis(f"reading the watermark of {source}",
                                               partial(self.store.applied_offset, source))
                if self.prices is not None:
                    self.pairers[tp] = await self._retry_redis(f"loading the waiting pair halves of {source}",
                                                               partial(self._load_pairer, source))
            except StopRequested:
                return
            self.watermarks[tp] = mark
            if mark is not None:
                self.consumer.seek(tp, mark + 1)
            self.assigned.add(tp)
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
        return self._inflight is None
