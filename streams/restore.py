"""Restoring a worker's partitions from Kafka when the store lost what the worker applied.

Detection: every apply checks, atomically, that the store's generation is the one this worker last
saw and that each watermark it holds is not below the one it last applied (:mod:`streams.apply`);
an idle worker runs the same check (:func:`find_loss`) every :data:`IDLE_CHECK_SECONDS`. A store that
restarted empty or was flushed has no generation (or a new one written by another worker); one
rolled back by ``appendonly everysec`` after a crash has watermarks below the worker's.

Restore (:meth:`Restorer.restore`, run by the loop between fetches, never concurrently with one):
the worker stops applying, logs an error naming every partition it holds with the offset it had
applied and the one the store holds, re-reads the watermarks and the generation, reloads the
waiting pair halves, forgets the admitted slice values it cached, drops what it fetched and seeks
every partition to the store's watermark + 1 (the earliest retained offset when the store has
none). It counts the restore in the store (``fleetmon_state_restores_total``).

Why this is exact: an apply writes its effects, its pair halves and its watermarks in one atomic
script, and Redis persists and replays scripts whole, so whatever the store holds after a loss —
nothing, or the state as of some earlier apply — is exactly the effect of the records at or below
its watermarks. Reading on from there adds each remaining record once. Records re-read after a
restore that were dead-lettered before it are not sent to the DLQ again (the loop remembers the
last offset it dead-lettered per partition); they are counted in ``dlq`` again, as the count was
lost with the rest. Limits: what the topic no longer retains cannot
be restored (size ``retention.ms`` for it, docs/operating.md); the admitted values of a capped
dimension are re-admitted in the order of the re-read, so which values fold into ``__other__``
may differ from before the loss once a dimension is over its cap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from monitor.store.base import Expected, LostState, Store
from monitor.store.redis.store import RedisGuard
from streams.apply import BatchApplier, retry_delay

log = logging.getLogger("fleetmon.worker")

#: How often a worker with nothing to apply checks that the store still holds its state.
IDLE_CHECK_SECONDS = 5.0
#: Tries at the broker's earliest offset before a restore gives up (the worker then fails loudly).
SEEK_ATTEMPTS = 8

Retry = Callable[[str, Callable[[], Any]], Awaitable[Any]]


def source_of(tp: TopicPartition) -> str:
    return f"{tp.topic}:{tp.partition}"


def find_loss(expected: Expected, generation: str | None, stored: Mapping[str, int]) -> LostState | None:
    """The apply script's check on values read outside it: the loss, or None when the store holds
    ``expected`` (a watermark above the expected one is another writer's progress, not a loss)."""
    behind = {source: stored.get(source) for source, mark in expected.watermarks.items()
              if stored.get(source, -1) < mark}
    if behind or (expected.generation is not None and expected.generation != generation):
        return LostState(expected, generation, behind)
    return None


async def committed_offset(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The group's committed offset of ``tp`` (None when there is none or the broker cannot say)."""
    try:
        committed: int | None = await consumer.committed(tp)
        return committed
    except KafkaError as exc:  # then the group's position decides, as without the loss check
        log.warning("reading the committed offset of %s failed: %r", source_of(tp), exc)
        return None


async def seek_to_watermark(consumer: AIOKafkaConsumer, tp: TopicPartition, mark: int | None,
                            attempts: int = SEEK_ATTEMPTS) -> int:
    """Position ``tp`` after ``mark`` (at the earliest retained offset when None); returns the offset.
    Asking the broker for the earliest offset is retried with backoff, then the error is raised."""
    if mark is not None:
        consumer.seek(tp, mark + 1)
        return mark + 1
    for attempt in range(1, attempts + 1):
        try:
            beginning = (await consumer.beginning_offsets([tp]))[tp]
            break
        except KafkaError as exc:
            if attempt == attempts:
                raise
            log.warning("reading the earliest offset of %s failed (attempt %d), retrying: %r", source_of(tp),
                        attempt, exc)
            await asyncio.sleep(retry_delay(attempt))
    consumer.seek(tp, beginning)
    return int(beginning)


class Restorer:
    """The restore step of one worker's loop (see the module docstring); ``retry`` is the loop's
    retry-with-backoff for store calls (it raises :class:`streams.apply.StopRequested` when stopping)."""

    def __init__(self, consumer: AIOKafkaConsumer, store: Store, applier: BatchApplier, guard: RedisGuard,
                 retry: Retry) -> None:
        self.consumer = consumer
        self.store = store
        self.applier = applier
        self.guard = guard
        self.retry = retry

    async def restore(self, lost: LostState, assigned: set[TopicPartition],
                      watermarks: MutableMapping[TopicPartition, int | None],
                      to_commit: MutableMapping[TopicPartition, int]) -> dict[str, int]:
        """Re-read the store and seek every ``assigned`` partition back; updates the loop's maps in place
        and returns the offset each partition resumes at."""
        stored: dict[str, int] = await self.retry("re-reading the watermarks", self.store.applied_offsets)
        generation = await self.retry("re-reading the state generation", self.store.generation)
        mine = sorted(assigned)
        log.error("the store lost state this worker applied (%s): stopping the applies and rebuilding from the "
                  "retained topic; partitions (applied by this worker -> held by the store): %s", lost.describe(),
                  ", ".join(f"{source_of(tp)} {watermarks.get(tp)} -> {stored.get(source_of(tp))}" for tp in mine))
        self.applier.generation = generation.id
        self.guard.forget()
        resumed: dict[str, int] = {}
        for tp in mine:
            source = source_of(tp)
            if self.applier.prices is not None:
                self.applier.pairers[tp] = await self.retry(f"reloading the waiting pair halves of {source}",
                                                            partial(self.applier.load_pairer, source))
            watermarks[tp] = stored.get(source)
            to_commit.pop(tp, None)
            resumed[source] = await seek_to_watermark(self.consumer, tp, stored.get(source))
        await self.retry("counting the restore", self.store.count_restore)
        log.warning("restore: re-reading %s from Kafka (store generation %s)",
                  ", ".join(f"{source} from offset {offset}" for source, offset in resumed.items()) or "nothing",
                  generation.id or "none yet: the next apply writes one")
        return resumed
