"""The consume loop: Kafka batches → validate → fold → one Redis apply per partition → commit.

Why the loop owns an aiokafka consumer instead of being a Faust agent:
measured on the project machine (2 cores), a Faust agent on a raw-bytes
topic draining ``stream.take(10_000, within=1)`` with no processing moved
about 9,300 records/s, while a bare aiokafka consumer calling ``getmany``
drained the same topic at 220,000–500,000 records/s. Faust's per-event path
(conductor → channel queue → one Event per record → per-record acks) costs
~100 µs a record, more than twice the whole 40 µs budget of the 25,000
traces/s target.
So :mod:`streams.app` runs this loop inside the Faust worker as a service
that owns its consumer and takes whole fetches; Faust keeps the process
lifecycle (signals, logging, graceful stop), the topic declarations and the
producer the DLQ is written with.

Exactly-once effect on Redis (Kafka itself delivers at least once):

* a batch is one partition's consecutive records; its delta (traces folded
  by :func:`monitor.fold.fold` plus the ``dlq`` count) is written by one
  atomic ``RedisStore.apply(delta, "topic:partition", first, last)`` that
  also advances the partition's watermark, and is skipped by Redis when
  ``first`` is at or below the watermark;
* on assignment the loop reads each partition's watermark and seeks to
  ``watermark + 1`` (Redis, not the committed offset, decides the position,
  so a crash between apply and commit re-reads nothing twice); records at or
  below the cached watermark are dropped before folding;
* when an apply is refused (another worker — e.g. a zombie that lost the
  partition — got there first), the watermark is re-read, the records at or
  below it dropped and the rest folded again and applied;
* offsets are committed to Kafka only after the apply (at most once a
  second, and on revocation and stop) — they matter for lag monitoring and
  for partitions that have no watermark yet.

Shadow pairing (baseline ⋈ shadow on ``pair_id``; the producer keys by
``pair_id`` so both halves reach the same partition): each partition has a
:class:`monitor.pairing.Pairer` whose waiting halves are persisted by the
same apply (``P:pending:<topic>:<partition>``) and reloaded on assignment
and after a refused apply. Pairing runs in the apply thread, which owns the
pairers, so the fold of the next batch never races it. A half waits
``pair_ttl`` of *event time*: the clock is the batch's latest ``ts``
(capped at wall time), so ``fleetmon rebuild`` pairs old traffic as the live
worker did (only a half that waited about the TTL may fare differently, as
batch boundaries differ).

Pipelining: the apply runs in one background thread (the Redis round trip
and the Lua script's time overlap the next batch's decode and fold); at
most one apply is in flight, so applies stay in offset order. Rejected
records are written to the DLQ (and acknowledged) before the apply that
counts them.

Infrastructure failures (Redis or the DLQ unreachable) are retried with
backoff and logged; nothing is committed meanwhile, so the worker stalls
rather than drops. Bad *input* never raises out of the loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

import redis
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from monitor.fold import BatchDelta
from monitor.pairing import PAIRED_ARMS, Pairer
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store import StoreError
from monitor.store_redis import RedisGuard, RedisStore
from streams.batch import PartitionBatch, decode_records, fold_batch, merge_fetches
from streams.dlq import dlq_key, encode_bounded
from streams.settings import WorkerSettings

log = logging.getLogger("fleetmon.worker")

COMMIT_INTERVAL_SECONDS = 1.0
PROGRESS_LOG_INTERVAL_SECONDS = 10.0
RETRY_MAX_SECONDS = 10.0


def tune_gc() -> None:
    """Fewer garbage-collector passes: a batch allocates ~10 objects per record,
    all freed together; the default gen-0 threshold (700) runs a pass every
    few dozen records. Startup objects are frozen out of every pass. Measured
    10-15% more traces/s on the decode + validate + fold path."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


class DlqSink(Protocol):
    """Where rejected records go; ``send`` returns once every record is acknowledged."""

    async def send(self, records: list[tuple[bytes, bytes]]) -> None: ...


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


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, loop: "ConsumeLoop") -> None:
        self.loop = loop

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.loop.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.loop.on_assigned(set(assigned))


def make_consumer(settings: WorkerSettings, group_id: str | None = None,
                  client_id: str | None = None) -> AIOKafkaConsumer:
    """The consumer the loop owns: manual commits, large fetches, raw bytes."""
    session_ms = int(settings.session_timeout_seconds * 1000)
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap.split(","),
        group_id=group_id or settings.group_id,
        client_id=client_id or f"fleetmon-{socket.gethostname()}-{os.getpid()}",
        enable_auto_commit=False,
        auto_offset_reset=settings.auto_offset_reset,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(100, session_ms // 3),
        max_poll_interval_ms=300_000,
        **settings.aiokafka_options(),
    )


class ConsumeLoop:
    """One consumer's loop into one store (see the module docstring).

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

    # -- lifecycle ----------------------------------------------------------------
    async def start(self) -> None:
        self.consumer.subscribe([self.settings.topic], listener=_Rebalance(self))
        await self.consumer.start()
        self._started = True

    def request_stop(self) -> None:
        self._stop = True

    async def run(self, until: Callable[["ConsumeLoop"], Awaitable[bool]] | None = None) -> None:
        """Consume until :meth:`request_stop` (or until ``until(self)`` is true
        after a fetch that left the buffer empty), then drain and close."""
        if not self._started:
            await self.start()
        progress_at = time.monotonic() + PROGRESS_LOG_INTERVAL_SECONDS
        try:
            while not self._stop:
                fetched, full = await self._take()
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

    # -- fetching -----------------------------------------------------------------
    async def _take(self) -> tuple[dict[TopicPartition, list[Any]], bool]:
        """Up to ``batch_max_records`` records, waiting at most ``batch_within``
        after the first one arrives (``stream.take(max, within)`` semantics).
        Returns the records by partition and whether the batch filled up."""
        limit = self.settings.batch_max_records
        fetched: dict[TopicPartition, list[Any]] = {}
        count = 0
        deadline: float | None = None
        timeout_ms = int(self.settings.batch_within_seconds * 1000)
        while not self._stop:
            part = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=limit - count)
            count += merge_fetches(fetched, part)
            if count >= limit:
                return fetched, True
            if count == 0:
                return fetched, False
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.settings.batch_within_seconds
            if not part or now >= deadline:
                break
            timeout_ms = max(1, int((deadline - now) * 1000))
        return fetched, False

    # -- processing ---------------------------------------------------------------
    async def _process(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        now = self.clock()
        for tp, records in fetched.items():
            if tp not in self.assigned or not records:
                continue  # revoked while the fetch was in our hands: the new owner reads it
            self.counters.records += len(records)
            batch = decode_records(tp.topic, tp.partition, records, now,
                                   max_record_bytes=self.settings.max_record_bytes)
            fresh = batch.after(self.watermarks.get(tp))
            self.counters.records_already_applied += batch.size - fresh.size
            if not fresh:
                await self._finish_inflight()
                self._to_commit[tp] = records[-1].offset + 1
                continue
            try:
                delta = fold_batch(fresh, self.slicer, now, self.settings.resolutions)
            except StoreError:
                delta = None  # the guard's Redis is unreachable: the apply thread folds and retries
            if fresh.rejections and self.dlq is not None:
                await self._send_dlq(fresh, now)
            await self._finish_inflight()
            if tp not in self.assigned:
                continue  # revoked while we awaited: its pairer is gone, the new owner applies it
            self._inflight = asyncio.get_running_loop().run_in_executor(
                self._executor, self._apply_blocking, tp, fresh, delta, now)

    async def _finish_inflight(self) -> None:
        # The rebalance callback may await the same apply as the loop does;
        # both record the same result, and only completion clears the slot.
        future = self._inflight
        if future is None:
            return
        try:
            tp, mark = await future
        finally:
            if self._inflight is future:
                self._inflight = None
        if tp in self.assigned:
            self.watermarks[tp] = mark
            self._to_commit[tp] = mark + 1

    def _apply_blocking(self, tp: TopicPartition, batch: PartitionBatch, delta: BatchDelta | None,
                        now: float) -> tuple[TopicPartition, int]:
        """Apply one batch (runs in the apply thread); returns the new watermark.

        ``delta`` None means "fold it here" (the cardinality guard could not
        reach Redis when the loop folded it)."""
        attempt = 0
        paired = False
        while True:
            if self._stop and attempt:
                raise StopRequested()
            try:
                if delta is None:
                    delta = fold_batch(batch, self.slicer, now, self.settings.resolutions)
                if not paired:
                    self._pair(tp, batch, delta, now)
                    paired = True
                if self.store.apply(delta, batch.source, batch.first_offset, batch.last_offset):
                    self.counters.batches += 1
                    self.counters.traces += len(batch.traces)
                    self.counters.rejected += len(batch.rejections)
                    return tp, batch.last_offset
                mark = self.store.applied_offset(batch.source)
                if tp in self.pairers:  # our pairer ran ahead of what was applied: take the store's
                    self.pairers[tp] = self._load_pairer(batch.source)
            except (StoreError, redis.RedisError) as exc:
                attempt += 1
                delay = min(RETRY_MAX_SECONDS, 0.2 * 2 ** min(attempt, 6))
                log.warning("Redis apply of %s offsets %d..%d failed (attempt %d), retrying in %.1f s: %s: %s",
                            batch.source, batch.first_offset, batch.last_offset, attempt, delay,
                            type(exc).__name__, exc)
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not self._stop:
                    time.sleep(0.1)
                continue
            # Refused: part of the range is already applied by someone else.
            self.counters.applies_refused += 1
            rest = batch.after(mark)
            self.counters.records_already_applied += batch.size - rest.size
            log.info("apply of %s from offset %d refused (watermark %s); refolding %d records",
                     batch.source, batch.first_offset, mark, rest.size)
            if not rest:
                return tp, max(mark if mark is not None else -1, batch.last_offset)
            batch, delta, paired = rest, None, False

    def _pair(self, tp: TopicPartition, batch: PartitionBatch, delta: BatchDelta, now: float) -> None:
        """Join the batch's shadow pairs into ``delta`` (what fold(pairer=...) does, in the apply thread)."""
        pairer = self.pairers.get(tp)
        if pairer is None or not batch.traces:
            return
        key = self.slicer.key
        latest = 0.0
        for trace in batch.traces:
            if trace.ts > latest:  # type: ignore[operator]
                latest = trace.ts  # type: ignore[assignment]
            if trace.pair_id is not None and trace.arm in PAIRED_ARMS:
                pairer.offer(trace, key(trace), delta)
        pairer.expire(min(now, latest), delta)

    def _load_pairer(self, source: str) -> Pairer:
        assert self.prices is not None and self.settings.pair_ttl_seconds is not None
        pairer = Pairer(self.prices, self.settings.pair_ttl_seconds)
        pairer.load(self.store.pending(source))
        return pairer

    async def _send_dlq(self, batch: PartitionBatch, now: float) -> None:
        assert self.dlq is not None
        records = []
        for rejection in batch.rejections:
            value = encode_bounded(topic=batch.topic, partition=batch.partition, offset=rejection.offset,
                                   value=rejection.value, reasons=rejection.reasons, key=rejection.key,
                                   timestamp_ms=rejection.timestamp_ms, rejected_at=now)
            records.append((dlq_key(batch.topic, batch.partition, rejection.offset), value))
        attempt = 0
        while True:
            try:
                await self.dlq.send(records)
                return
            except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                attempt += 1
                if self._stop:
                    raise StopRequested() from exc
                delay = min(RETRY_MAX_SECONDS, 0.2 * 2 ** min(attempt, 6))
                log.warning("writing %d records of %s to the DLQ failed (attempt %d), retrying in %.1f s: %s: %s",
                            len(records), batch.source, attempt, delay, type(exc).__name__, exc)
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
                                               lambda: self.store.applied_offset(source))
                if self.prices is not None:
                    self.pairers[tp] = await self._retry_redis(f"loading the waiting pair halves of {source}",
                                                               lambda: self._load_pairer(source))
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
                delay = min(RETRY_MAX_SECONDS, 0.2 * 2 ** min(attempt, 6))
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
