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
of ``offsets``. The alert engine's ``state:`` keys and other sources'
watermarks are left alone. Records are not written to the DLQ again (they
were when first seen); the ``dlq`` counter is recomputed. Limitation: the
topic's retention bounds what can be rebuilt — windows older than the
oldest retained record are lost if Redis is.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis
from aiokafka import TopicPartition

from monitor.store.redis.store import RedisStore, connect
from streams.settings import WorkerSettings
from streams.loop import ConsumeLoop, make_consumer, tune_gc

log = logging.getLogger("fleetmon.rebuild")

#: Key families of the aggregate store (monitor/store/redis/store.py's key layout)
#: that a rebuild owns and replaces — everything the worker's apply writes —
#: plus ``pending:<topic>:*`` (this topic's waiting pair halves) and this
#: topic's fields of ``offsets``. A new family written by the apply must be
#: added here; tests/unit/test_streams_rebuild.py fails until it is.
REPLACED_PATTERNS = ("w:*", "wc:*", "t:*", "dims:*", "x:*")
REPLACED_KEYS = ("slices", "counters")
#: Families a rebuild leaves alone: not derived from the topic.
KEPT_FAMILIES = ("state",)


def replaced_patterns(topic: str) -> list[str]:
    return [*REPLACED_PATTERNS, f"pending:{glob_escape(topic)}:*"]

_SWAP = """
local live, fresh, topic = ARGV[1], ARGV[2], ARGV[3]
local live_offsets = live .. ':offsets'
local fresh_offsets = fresh .. ':offsets'
-- 1. the rebuilt watermark must be at or past the live one, partition by partition
local marks = redis.call('HGETALL', live_offsets)
for i = 1, #marks, 2 do
  if string.sub(marks[i], 1, #topic + 1) == topic .. ':' then
    local mine = redis.call('HGET', fresh_offsets, marks[i])
    if (not mine) or tonumber(mine) < tonumber(marks[i + 1]) then
      return {0, marks[i], marks[i + 1], mine or ''}
    end
  end
end
local function collect(prefix, patterns)
  local seen, keys = {}, {}
  for _, pattern in ipairs(patterns) do
    local cursor = '0'
    repeat
      local page = redis.call('SCAN', cursor, 'MATCH', prefix .. pattern, 'COUNT', 1000)
      cursor = page[1]
      for _, k in ipairs(page[2]) do
        if not seen[k] then seen[k] = true; keys[#keys + 1] = k end
      end
    until cursor == '0'
  end
  return keys
end
local patterns, singles = cjson.decode(ARGV[4]), cjson.decode(ARGV[5])
-- 2. drop the live families (SCAN patterns use the glob-escaped prefixes)
for _, k in ipairs(collect(ARGV[6] .. ':', patterns)) do redis.call('UNLINK', k) end
for _, name in ipairs(singles) do redis.call('UNLINK', live .. ':' .. name) end
-- 3. rename the rebuilt ones over them (RENAME keeps each window's TTL)
local fresh_keys = collect(ARGV[7] .. ':', patterns)
for _, name in ipairs(singles) do
  if redis.call('EXISTS', fresh .. ':' .. name) == 1 then fresh_keys[#fresh_keys + 1] = fresh .. ':' .. name end
end
for _, k in ipairs(fresh_keys) do redis.call('RENAME', k, live .. string.sub(k, #fresh + 1)) end
-- 4. this topic's watermarks: replace them, keep other sources' fields
for i = 1, #marks, 2 do
  if string.sub(marks[i], 1, #topic + 1) == topic .. ':' then redis.call('HDEL', live_offsets, marks[i]) end
end
local mine = redis.call('HGETALL', fresh_offsets)
for i = 1, #mine, 2 do redis.call('HSET', live_offsets, mine[i], mine[i + 1]) end
redis.call('UNLINK', fresh_offsets)
return {1, #fresh_keys, #mine / 2}
"""


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
    behind = tuple(x.decode() if isinstance(x, bytes) else str(x) for x in result[1:4])
    return SwapResult(False, behind=behind)  # type: ignore[arg-type]


def drop_prefix(client: redis.Redis, prefix: str, topic: str) -> int:
    """Delete what a failed rebuild left under its own prefix."""
    deleted = 0
    for pattern in (*replaced_patterns(topic), *REPLACED_KEYS, "offsets"):
        for key in client.scan_iter(match=f"{glob_escape(prefix)}:{pattern}", count=1000):
            deleted += client.unlink(key)
    return deleted


async def rebuild(settings: WorkerSettings, *, progress: Any = None) -> dict[str, Any]:
    """Run a rebuild to completion (see the module docstring); returns a summary."""
    started = time.monotonic()
    stamp = f"{int(time.time())}-{uuid.uuid4().hex[:8]}"
    fresh_prefix = f"{settings.prefix}.rebuild.{stamp}"
    fresh = settings.with_(prefix=fresh_prefix, group_id=f"{settings.group_id}.rebuild.{stamp}",
                           auto_offset_reset="earliest")
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
            return True
        log.info("live watermark of %s is ahead (%s > %s); consuming further", *result.behind)  # type: ignore[misc]
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

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap.split(","), client_id="fleetmon-rebuild",
                               **settings.aiokafka_options())
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
