"""The consume loop: Kafka fetches → decode + validate → fold → one atomic Redis apply per fetch → commit.

Why the loop owns an aiokafka consumer instead of being a Faust agent:
measured on the project machine (2 cores), a Faust agent on a raw-bytes
topic draining ``stream.take(10_000, within=1)`` with no processing moved
about 9,300 records/s, while a bare aiokafka consumer calling ``getmany``
drained the same topic at 220,000–500,000 records/s. Faust's per-event path
(conductor → channel queue → one Event per record → per-record acks) costs
~100 µs a record. So :mod:`streams.app` runs this loop inside the Faust
worker as a service that owns its consumer and takes whole fetches; Faust
keeps the process lifecycle (signals, logging, graceful stop), the topic
declarations and the producer the DLQ is written with.

Where the time goes, and what the loop does about it (``bench/throughput.py``):

* decoding and validating: the native fast path (:mod:`streams.native`, Rust)
  decodes, validates and group-folds the plain full-form traces of a whole
  fetch in one call with the GIL released; Python validates only the rest
  (and writes every rejection reason);
* Redis: cost grows with the hash fields written per apply, so one apply
  covers a whole fetch (every partition in it) rather than one partition,
  fetches are large (``batch_max_records``, 200,000 by default), and the
  apply script reads and rewrites each hash once instead of one HINCRBY a
  field;
* pipelining: the apply thread decodes, folds, dead-letters and applies
  fetch N while the event loop already fetches N + 1 (one fetch in flight
  at most, so applies stay in offset order).

Exactly-once effect on Redis (Kafka itself delivers at least once):

* a batch is the fetched records of one or more partitions; its delta
  (traces folded by :func:`monitor.fold.fold` plus the ``dlq`` count) is
  written by one atomic ``RedisStore.apply_ranges(delta, [(topic:partition,
  first, last), ...])`` that also advances every partition's watermark, and
  is refused by Redis when any ``first`` is at or below its watermark;
* on assignment the loop reads each partition's watermark and seeks to
  ``watermark + 1`` (Redis, not the committed offset, decides the position,
  so a crash between apply and commit re-reads nothing twice); records at or
  below the cached watermark are dropped before decoding;
* when an apply is refused (another worker — e.g. a zombie that lost a
  partition — got there first), the watermarks are re-read, the records at
  or below them dropped and the rest decoded, folded and applied again;
* offsets are committed to Kafka only after the apply (at most once a
  second, and on revocation and stop) — they matter for lag monitoring and
  for partitions that have no watermark yet.

Shadow pairing (baseline ⋈ shadow on ``pair_id``; the producer keys by
``pair_id`` so both halves reach the same partition): each partition has a
:class:`monitor.pairing.Pairer` whose waiting halves are persisted by the
same apply (``P:pending:<topic>:<partition>``) and reloaded on assignment
and after a refused or failed apply. Traces with a ``pair_id`` always take
the Python path, so the pairer sees whole traces. Pairing runs in the apply
thread, which owns the pairers. A half waits ``pair_ttl`` of *event time*:
the clock is its partition's latest ``ts`` in the batch (capped at wall
time), so ``fleetmon rebuild`` pairs old traffic as the live worker did
(only a half that waited about the TTL may fare differently, as batch
boundaries differ).

Rejected records are written to the DLQ (and acknowledged) before the apply
that counts them. Infrastructure failures (Redis or the DLQ unreachable) are
retried with backoff and logged; nothing is committed meanwhile, so the
worker stalls rather than drops. Bad *input* never raises out of the loop.
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
from typing import Any, Awaitable, Callable, Protocol, Sequence

import redis
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from monitor.fold import BatchDelta
from monitor.pairing import PAIRED_ARMS, Pairer
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import StoreError
from monitor.store.redis.store import RedisGuard, RedisStore
from streams.native import NativeFolder
from streams.native import available as native_available
from streams.batch import Batch, PartitionBatch, decode_batch, fold_batch, merge_fetches, records_after
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


def _describe(batch: Batch) -> str:
    return ", ".join(f"{source} offsets {first}..{last}" for source, first, last in batch.ranges())


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
        self.consumer.subscribe([self.settings.topic], listener=_Rebalance(self))
        await self.consumer.start()
        self._event_loop = asyncio.get_running_loop()
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
                    pending = self._pair(tps, batch, delta, now)
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
                delay = min(RETRY_MAX_SECONDS, 0.2 * 2 ** min(attempt, 6))
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

    def _pair(self, tps: dict[str, TopicPartition], batch: Batch, delta: BatchDelta,
              now: float) -> dict[str, tuple[dict[str, str], set[str]]]:
        """Join the batch's shadow pairs into ``delta``; returns the waiting halves' changes per source."""
        pending: dict[str, tuple[dict[str, str], set[str]]] = {}
        key = self.slicer.key
        for part in batch.parts:
            pairer = self.pairers.get(tps[part.source])
            latest = part.latest_ts
            if pairer is None or latest is None:
                continue
            paired = BatchDelta()
            for trace in part.traces:  # the native path leaves every trace with a pair_id to Python
                if trace.pair_id is not None and trace.arm in PAIRED_ARMS:
                    pairer.offer(trace, key(trace), paired)
            pairer.expire(min(now, latest), paired)
            pending[part.source] = (paired.pending_set, paired.pending_del)
            paired.pending_set, paired.pending_del = {}, set()
            delta.merge(paired)
        return pending

    def _load_pairer(self, source: str) -> Pairer:
        assert self.prices is not None and self.settings.pair_ttl_seconds is not None
        pairer = Pairer(self.prices, self.settings.pair_ttl_seconds)
        pairer.load(self.store.pending(source))
        return pairer

    async def _send_dlq(self, part: PartitionBatch, now: float) -> None:
        assert self.dlq is not None
        records = []
        for rejection in part.rejections:
            value = encode_bounded(topic=part.topic, partition=part.partition, offset=rejection.offset,
                                   value=rejection.value, reasons=rejection.reasons, key=rejection.key,
                                   timestamp_ms=rejection.timestamp_ms, rejected_at=now)
            records.append((dlq_key(part.topic, part.partition, rejection.offset), value))
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
