"""One batch into the store, verified: fold → pair → one atomic apply (runs in the worker's apply thread).

Guarantees (the store's contract is :mod:`monitor.store.base`):

* a batch is applied by one ``apply_verified`` that checks, in the same atomic step, that the store
  still holds what this worker applied: the generation it last saw and, per partition it holds, the
  watermark it last applied. When the store has lost that (restarted empty, rolled back, flushed)
  nothing is written and :meth:`BatchApplier.apply` returns the :class:`~monitor.store.base.LostState`;
  the loop then restores (:mod:`streams.restore`);
* an apply refused because part of the batch is already applied (a zombie, a rebuild's swap) re-reads
  the watermarks and applies only what lies above them;
* infrastructure errors are retried with backoff (the fold too: the cardinality guard may need Redis)
  until the worker stops; a retried apply that did reach Redis before its reply was lost is then
  refused as already applied, so it counts once. A retry decodes the batch afresh: the fold merges
  into the native groups it places, so folding the same decode twice would count some traces twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from aiokafka import TopicPartition

from monitor.delta import BatchDelta
from monitor.pairing import DEFAULT_CAPS, Caps, Pairer
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import AlreadyApplied, Applied, Expected, LostState, Store, StoreError, new_generation_id
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
    ``generation`` the store generation this worker applies into (None until its first apply).
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

    def load_pairer(self, source: str) -> Pairer:
        """A pairer holding the waiting halves the store has for ``source``."""
        assert self.prices is not None and self.pair_ttl_seconds is not None
        pairer = Pairer(self.prices, self.pair_ttl_seconds, self.pair_caps)
        pairer.load(self.store.pending(source))
        return pairer

    def apply(self, tps: dict[str, TopicPartition], batch: Batch, now: float,
              watermarks: dict[str, int]) -> dict[TopicPartition, int] | LostState:
        """Apply ``batch`` (sources → partitions in ``tps``); returns the new watermarks, or the lost state.

        ``watermarks`` are the ones this worker last applied, per source it holds (see the module docstring).
        A store that applies one partition at a time (``applies_per_source``: the Redis Cluster store)
        gets each partition of the batch folded and applied on its own, in order.
        """
        if len(batch.parts) > 1 and getattr(self.store, "applies_per_source", False):
            marks: dict[TopicPartition, int] = {}
            for piece in split_by_source(batch):
                source = piece.parts[0].source
                result = self.apply({source: tps[source]}, piece, now, watermarks)
                if isinstance(result, LostState):
                    return result  # the partitions applied before it are in the store's watermarks
                marks.update(result)
            return marks
        attempt = 0
        marks = {}
        expected = dict(watermarks)
        delta: BatchDelta | None = None
        pending: dict[str, tuple[dict[str, str], set[str]]] = {}
        stale_pairers = False
        while True:
            if self.stopping() and attempt:
                raise StopRequested()
            try:
                if stale_pairers:  # they ran ahead of what was applied: take the store's
                    for source, tp in tps.items():
                        if tp in self.pairers:
                            self.pairers[tp] = self.load_pairer(source)
                    stale_pairers = False
                if delta is None:
                    delta = fold_batch(batch, self.slicer, now, self.resolutions)
                    pairers = {source: self.pairers[tp] for source, tp in tps.items() if tp in self.pairers}
                    pending = pair_batch(batch, pairers, self.slicer.key, now, delta, self.slicer.key_for)
                outcome = self.store.apply_verified(delta, batch.ranges(), pending,
                                                    Expected(self.generation, expected), new_generation_id(now))
                if isinstance(outcome, Applied):
                    self.generation = outcome.generation
                    self.counters.batches += 1
                    self.counters.traces += batch.trace_count
                    self.counters.rejected += batch.rejection_count
                    for part in batch.parts:
                        marks[tps[part.source]] = part.last_offset
                    return marks
                if isinstance(outcome, LostState):
                    return outcome  # nothing written; the pairers ran ahead, the restore reloads them
                refused: AlreadyApplied = outcome
                stored = self.store.applied_offsets()
            except (StoreError, redis.RedisError) as exc:
                attempt += 1
                delay = retry_delay(attempt)
                log.warning("Redis apply of %s failed (attempt %d), retrying in %.1f s: %s: %s",
                            describe(batch), attempt, delay, type(exc).__name__, exc)
                stale_pairers = stale_pairers or (delta is not None and bool(self.pairers))
                if delta is not None:  # the fold merged into the batch's native groups: decode afresh
                    batch = batch.after({})
                delta = None
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not self.stopping():
                    time.sleep(0.1)
                continue
            # Refused: part of the range is already applied by someone else.
            self.counters.applies_refused += 1
            stale_pairers = bool(self.pairers)
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
            if not rest:
                return marks
            tps = {source: tp for source, tp in tps.items() if source in left}
            batch, delta = rest, None
