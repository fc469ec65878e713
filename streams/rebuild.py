"""``fleetmon rebuild``: recompute Redis from the retained input topic, then swap.

Kafka is the source of truth and Redis derived state, so Redis can always be
rebuilt: a NEW consumer group reads the topic from the earliest retained
offset with the same fold as the workers (same dimensions, cap, windows)
into a fresh key prefix ``<prefix>.rebuild.<stamp>``; once it has applied
everything up to the end offsets, its keys are **renamed** over the live
prefix in one Lua script (atomic: readers see the old state or the new one,
never a mix; Redis is blocked for the script's duration, roughly 1 s per
100,000 keys).

Renaming was chosen over an active-prefix pointer because it needs no
change in any reader (the exporter, the alert engine, ``fleetmon stats``
keep their prefix) and keeps every write path on fixed key names.

Workers may keep running during a rebuild. The swap only happens when, for
every partition of the topic, the rebuilt watermark is at or past the live
one; otherwise the rebuild consumes further and tries again. After the
swap a running worker's next apply starts at or below the new watermark, is
refused by the store, and the worker re-reads the watermark and folds only
the records after it — nothing is lost or counted twice (see
:mod:`streams.loop`).

What is replaced: window hashes (``w:``) and their count index (``wc:``),
per-slice totals (``t:``), the slice index, the pipeline counters, the
admitted slice values (``dims:``), the paired evidence (``x:``), this
topic's waiting pair halves (``pending:<topic>:*``) and this topic's fields
of ``offsets``. The alert engine's ``state:`` keys, the generation (a live
prefix without one takes the rebuild's) and other sources' watermarks are
left alone. Records are not written to the DLQ again (they
were when first seen); the ``dlq`` counter is recomputed. Limitation: the
topic's retention bounds what can be rebuilt — windows older than the
oldest retained record are lost if Redis is.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

import redis
from aiokafka import TopicPartition

from monitor.kafka import aiokafka_admin
from monitor.store.redis import layout
from monitor.store.redis.scripts import SWAP as _SWAP
from monitor.store.redis.store import RedisStore, connect
from monitor.worker_settings import WorkerSettings
from streams.consumer import make_consumer
from streams.loop import ConsumeLoop, tune_gc

log = logging.getLogger("fleetmon.rebuild")

#: Key families of the aggregate store (monitor/store/redis/layout.py) that a
#: rebuild owns and replaces — everything the worker's apply writes — plus
#: ``pending:<topic>:*`` (this topic's waiting pair halves) and this topic's
#: fields of ``offsets``. A new family written by the apply must be added
#: here; tests/unit/streams/test_rebuild.py fails until it is.
REPLACED_PATTERNS = tuple(layout.family_pattern(family) for family in (
    layout.WINDOW, layout.WINDOW_COUNTS, layout.TOTALS, layout.DIMS, layout.PAIRED, layout.IDENTITY))
REPLACED_KEYS = (layout.SLICES, layout.COUNTERS)
#: Families a rebuild leaves alone: not derived from the topic. The generation is kept so that running
#: workers see the swap as another writer's progress, not as lost state (streams/restore.py); the
#: rebuild's own generation key is deleted with its prefix.
KEPT_FAMILIES = (layout.STATE, layout.GENERATION)


def replaced_patterns(topic: str) -> list[str]:
    return [*REPLACED_PATTERNS, f"{layout.PENDING}:{glob_escape(topic)}:*"]


def glob_escape(text: str) -> str:
    """Escape Redis glob metacharacters so a prefix matches only itself."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


@dataclass
class SwapResult:
    swapped: bool
    keys_moved: int = 0
    partitions: int = 0
    behind: tuple[str, str, str] | None = None  # (source, live watermark, rebuilt watermark)


def swap(client: redis.Redis, live_prefix: str, fresh_prefix: str, topic: str) -> SwapResult:
    """Rename ``fresh_prefix``'s families over ``live_prefix`` if it is caught up (atomic)."""
    import json

    result = client.eval(_SWAP, 0, live_prefix, fresh_prefix, topic, json.dumps(replaced_patterns(topic)),
                         json.dumps(list(REPLACED_KEYS)), glob_escape(live_prefix), glob_escape(fresh_prefix))
    if int(result[0]) == 1:
        return SwapResult(True, int(result[1]), int(result[2]))
    source, live, rebuilt = (x.decode() if isinstance(x, bytes) else str(x) for x in result[1:4])
    return SwapResult(False, behind=(source, live, rebuilt))


def adopt_generation(client: redis.Redis, live_prefix: str, fresh_prefix: str) -> None:
    """After a swap: a live prefix without a generation (Redis was emptied) takes the rebuild's;
    one that has a generation keeps it. The rebuild's generation key is deleted either way."""
    live, fresh = layout.KeyLayout(live_prefix).generation(), layout.KeyLayout(fresh_prefix).generation()
    fresh_id = client.hget(fresh, layout.GENERATION_ID_FIELD)
    if fresh_id is not None:
        client.hsetnx(live, layout.GENERATION_ID_FIELD, fresh_id)
    client.unlink(fresh)


def drop_prefix(client: redis.Redis, prefix: str, topic: str) -> int:
    """Delete what a failed rebuild left under its own prefix."""
    deleted = 0
    for pattern in (*replaced_patterns(topic), *REPLACED_KEYS, layout.OFFSETS, layout.GENERATION):
        for key in client.scan_iter(match=f"{glob_escape(prefix)}:{pattern}", count=1000):
            deleted += client.unlink(key)
    return deleted


async def rebuild(settings: WorkerSettings, *, progress: Any = None) -> dict[str, Any]:
    """Run a rebuild to completion (see the module docstring); returns a summary."""
    started = time.monotonic()
    stamp = f"{int(time.time())}-{uuid.uuid4().hex[:8]}"
    fresh_prefix = f"{settings.prefix}.rebuild.{stamp}"
    fresh = replace(settings, prefix=fresh_prefix,
                    kafka=replace(settings.kafka, group_id=f"{settings.group_id}.rebuild.{stamp}"))
    client = connect(settings.redis_url)
    store = RedisStore(client, fresh_prefix, settings.resolutions)
    loop = ConsumeLoop(fresh, store, dlq=None, consumer=make_consumer(fresh))
    targets: dict[TopicPartition, int] = {}
    outcome: dict[str, Any] = {}

    async def done(runner: ConsumeLoop) -> bool:
        partitions = runner.consumer.partitions_for_topic(settings.topic) or set()
        every = {TopicPartition(settings.topic, p) for p in partitions}
        if not every or not every <= runner.assigned:
            return False
        if set(targets) != every:
            targets.clear()
            targets.update(await runner.consumer.end_offsets(list(every)))
        if progress is not None:
            progress(runner.counters.records)
        if not await runner.caught_up(targets):
            return False
        result = swap(client, settings.prefix, fresh_prefix, settings.topic)
        if result.swapped:
            outcome.update(keys_moved=result.keys_moved, partitions=result.partitions)
            adopt_generation(client, settings.prefix, fresh_prefix)
            return True
        log.info("live watermark of %s is ahead (%s > %s); consuming further", *(result.behind or ("?", "?", "?")))
        targets.clear()
        return False

    try:
        await loop.run(until=done)
    except BaseException:
        drop_prefix(client, fresh_prefix, settings.topic)
        raise
    finally:
        client.close()
    await _delete_group(settings, fresh.group_id)
    counters = loop.counters
    return {"prefix": settings.prefix, "topic": settings.topic, "records": counters.records,
            "traces": counters.traces, "dlq": counters.rejected, **outcome,
            "seconds": round(time.monotonic() - started, 3)}


async def _delete_group(settings: WorkerSettings, group_id: str) -> None:
    """Best effort: the rebuild's consumer group is of no further use."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**aiokafka_admin(settings.kafka, client_id="fleetmon-rebuild"))
    try:
        await admin.start()
        await admin.delete_consumer_groups([group_id])
    except Exception as exc:  # noqa: BLE001 - clean-up only
        log.info("could not delete consumer group %s: %r", group_id, exc)
    finally:
        await admin.close()


def run_rebuild(settings: WorkerSettings, progress: Any = None) -> dict[str, Any]:
    tune_gc()
    return asyncio.run(rebuild(settings, progress=progress))
