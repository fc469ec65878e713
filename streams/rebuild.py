"""``fleetmon rebuild``: recompute Redis from the retained input topic, then swap.

Kafka is the source of truth and Redis derived state, so Redis can always be
rebuilt: a NEW consumer group reads the topic from the earliest retained
offset with the same fold as the workers (same dimensions, cap, windows)
into a fresh key prefix ``<prefix>.rebuild.<stamp>``; once it has applied
everything up to the end offsets, its keys are **renamed** over the live
prefix in one Lua script (atomic: readers see the old state or the new one,
never a mix; Redis is blocked for the script's duration, roughly 1 s per
100,000 keys).

On a Redis Cluster store the same recompute is swapped in one slot at a time
(:mod:`streams.rebuild_cluster`, with the same script and key families).

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
left alone; the generation's ``rebuilds`` is incremented, for the exporter's
caches. Records are not written to the DLQ again (they
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

from monitor.kafka import kafka_python_admin
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
#: rebuild's own generation key is deleted with its prefix. The swap increments the live generation's
#: ``rebuilds`` (readers that cache by ``traces`` drop their caches when it moves: layout.py).
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


def glob_literal(pattern: str) -> str:
    """The literal prefix a ``<escaped literal>*`` pattern matches (what every replaced pattern is)."""
    if not pattern.endswith("*"):
        raise ValueError(f"a replaced family's pattern must end in '*', got {pattern!r}")
    out, escaped = [], False
    for ch in pattern[:-1]:
        if escaped or ch != "\\":
            if not escaped and ch in "*?[]":
                raise ValueError(f"a replaced family's pattern must be a literal then '*', got {pattern!r}")
            out.append(ch)
            escaped = False
        else:
            escaped = True
    return "".join(out)


def swap(client: redis.Redis, live_prefix: str, fresh_prefix: str, topic: str, *,
         patterns: list[str] | None = None, singles: tuple[str, ...] = REPLACED_KEYS,
         keep_fresh_offsets: bool = False, in_slot: bool = False) -> SwapResult:
    """Rename ``fresh_prefix``'s families over ``live_prefix`` if it is caught up (atomic).

    By default the families a rebuild replaces (``patterns``, ``singles``), the fresh watermarks deleted,
    the keys found with SCAN. ``in_slot`` (a Redis Cluster): both prefixes carry the same hash tag, the
    offsets hashes passed as KEYS send the script to that slot's node, and the keys are found among
    the slot's (its own keys, not the whole node's)."""
    import json

    chosen = replaced_patterns(topic) if patterns is None else patterns
    keys = (layout.KeyLayout(live_prefix).offsets(), layout.KeyLayout(fresh_prefix).offsets())
    result = client.eval(_SWAP, len(keys), *keys, live_prefix, fresh_prefix, topic, json.dumps(chosen),
                         json.dumps(list(singles)), glob_escape(live_prefix), glob_escape(fresh_prefix),
                         "1" if keep_fresh_offsets else "",
                         json.dumps([glob_literal(p) for p in chosen]) if in_slot else "")
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
    await delete_group(settings, fresh.group_id)
    counters = loop.counters
    return {"prefix": settings.prefix, "topic": settings.topic, "records": counters.records,
            "traces": counters.traces, "dlq": counters.rejected, **outcome,
            "seconds": round(time.monotonic() - started, 3)}


async def delete_group(settings: WorkerSettings, group_id: str) -> None:
    """Best effort: the rebuild's consumer group is of no further use (aiokafka's admin client cannot
    delete groups, kafka-python's can: run in a thread)."""
    await asyncio.to_thread(_delete_group_blocking, settings, group_id)


def _delete_group_blocking(settings: WorkerSettings, group_id: str) -> None:
    from kafka.admin import KafkaAdminClient

    try:
        admin = KafkaAdminClient(**kafka_python_admin(settings.kafka, client_id="fleetmon-rebuild"))
    except Exception as exc:  # noqa: BLE001 - clean-up only
        log.warning("could not delete consumer group %s (admin client): %r", group_id, exc)
        return
    try:
        failed = [(group, error) for group, error in admin.delete_groups([group_id]) if error is not None
                  and getattr(error, "errno", 0) != 0]
        if failed:
            log.warning("could not delete consumer group %s: %r", group_id, failed)
    except Exception as exc:  # noqa: BLE001 - clean-up only
        log.warning("could not delete consumer group %s: %r", group_id, exc)
    finally:
        admin.close()


def run_rebuild(settings: WorkerSettings, progress: Any = None) -> dict[str, Any]:
    tune_gc()
    return asyncio.run(rebuild(settings, progress=progress))
