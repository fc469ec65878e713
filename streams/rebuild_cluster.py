"""``fleetmon rebuild`` on a Redis Cluster store (``redis.cluster = true``): one atomic swap per slot.

Same recompute as on a single Redis (:mod:`streams.rebuild`): a new consumer group reads the topic
from the earliest retained offset with the workers' fold into a fresh prefix ``F = P.rebuild.<stamp>``,
a :class:`~monitor.store.redis.cluster.ClusterStore` of its own. Its partition views
``F:{t:<topic>:<n>}`` carry the same hash tags as the live views ``P:{t:<topic>:<n>}``, so each pair
lands in one slot, and so do ``F:{g}`` and ``P:{g}``. The swap is then the single-node SWAP script
once per slot, sent to that slot's node:

1. **each partition view, in partition order**, once the rebuild has applied every view up to the
   end offsets and each rebuilt watermark is at or past the live one (read first, so that the swaps
   come back to back; then each script checks again, atomically): the view's families are renamed
   over the live view's and its watermark replaces the live one. A view a running worker overtook
   in between is left for later: the rebuild reads on and tries it again; views already swapped are
   final, and the rebuild stops reading them;
2. **the shared slot**, once every view is swapped: the admitted values (``dims:``) are renamed over
   the live ones, the rebuild's sources are added to the live registry of views (``views``), the live
   generation is kept (a live store without one takes the rebuild's) and so is its restore count; the
   alert engine's ``state:`` keys are left alone — what the single-node swap does with the same keys.

Then the rebuild's prefix (every ``F:{...}`` key) and consumer group are deleted.

What readers see between two per-slot swaps. Each read of a view sees, atomically, its old state or
its rebuilt one; a reader merges views (sums), so a read during the swap phase is the sum, per
partition, of either state. Both are a fold of the partition's records up to a watermark (the rebuilt
one at or past the old one), so a read mixing them is a state a cluster store is in at any time
anyway — workers apply partitions independently, each partition at its own watermark — and every
count in it is exact for those watermarks. Two things are not of that kind, and both last only
until the last view's swap (measured: ``swap_seconds`` in the summary, milliseconds for a few
thousand keys per partition): a partition whose old state was wrong (the reason to rebuild) stays
wrong until its own swap; and when a dimension is over its cap, old and rebuilt views may have
admitted different values, so a value's traces can sit partly in its own row and partly in
``__other__`` — per-grouping sums stay exact. A rebuild that dies during the swap phase leaves the
partitions it swapped rebuilt and the others as they were (each of them consistent): run it again.

Running workers stay exactly-once, as on one Redis: after its view's swap a worker's next apply of
that partition starts at or below the new watermark and is refused by the view; the worker re-reads
the watermarks, reloads the waiting pair halves and folds only the records above them
(:mod:`streams.apply`). The swap never lowers a watermark and keeps the generation, so the loss check
(:mod:`streams.restore`) sees another writer's progress, not lost state. The rebuild's own loop keeps
the watermarks of its swapped views (the script is told to), so its loss check is quiet too.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, cast

import redis
from aiokafka import TopicPartition
from redis.cluster import RedisCluster

from monitor.store.redis import layout
from monitor.store.redis.cluster import ClusterStore, connect_cluster
from monitor.store.redis.merge import VIEWS, check_prefix, global_prefix, view_prefix
from monitor.worker_settings import WorkerSettings
from streams.consumer import make_consumer
from streams.loop import ConsumeLoop, tune_gc
from streams.rebuild import SwapResult, adopt_generation, delete_group, swap
from streams.restore import source_of

log = logging.getLogger("fleetmon.rebuild")

#: The shared slot's families a rebuild replaces (the admitted values); the rest of it is kept.
SHARED_REPLACED = (layout.family_pattern(layout.DIMS),)


def swap_view(client: RedisCluster, live_prefix: str, fresh_prefix: str, source: str, topic: str) -> SwapResult:
    """Step 1 for one partition: its rebuilt view over the live one, in its slot (atomic); the
    rebuilt watermark stays in the fresh view for the rebuild's own loop."""
    return swap(cast("redis.Redis", client), view_prefix(live_prefix, source), view_prefix(fresh_prefix, source),
                topic, keep_fresh_offsets=True, in_slot=True)


def swap_shared(client: RedisCluster, live_prefix: str, fresh_prefix: str) -> int:
    """Step 2: the rebuilt admitted values over the live ones, the view registry merged, the live
    generation kept (adopted when absent); returns the keys moved."""
    live, fresh = global_prefix(live_prefix), global_prefix(fresh_prefix)
    plain = cast("redis.Redis", client)
    result = swap(plain, live, fresh, "", patterns=list(SHARED_REPLACED), singles=(), in_slot=True)
    live_views, fresh_views = f"{live}:{VIEWS}", f"{fresh}:{VIEWS}"
    plain.sunionstore(live_views, [live_views, fresh_views])  # one slot: {g}
    adopt_generation(plain, live, fresh)
    return result.keys_moved


def node_timeout_seconds(client: RedisCluster) -> float | None:
    """The cluster's ``cluster-node-timeout`` (a master unresponsive that long is failed over), None if
    it cannot be read (an ACL user without CONFIG, say)."""
    try:
        reply = cast("dict[str, str]", client.config_get("cluster-node-timeout"))
        return float(reply["cluster-node-timeout"]) / 1000.0
    except (redis.RedisError, KeyError, ValueError):
        return None


def live_ahead(client: RedisCluster, live_prefix: str,
               rebuilt: dict[TopicPartition, int | None]) -> list[tuple[str, int, int | None]]:
    """The partitions whose live watermark is past the rebuilt one: ``(source, live, rebuilt)``."""
    out = []
    for tp, mark in sorted(rebuilt.items()):
        source = source_of(tp)
        live = client.hget(layout.KeyLayout(view_prefix(live_prefix, source)).offsets(), source)
        if live is not None and (mark is None or int(live) > mark):
            out.append((source, int(live), mark))
    return out


@dataclass
class SwapProgress:
    """Which partitions are swapped so far and what it took."""

    swapped: dict[TopicPartition, int] = field(default_factory=dict)  # partition -> keys moved
    first_swap_at: float | None = None
    seconds: float = 0.0
    shared_keys: int = 0
    rounds: int = 0            # swap attempts (more than one when running workers were ahead)
    slowest_view_seconds: float = 0.0


async def rebuild_cluster(settings: WorkerSettings, *, progress: Any = None) -> dict[str, Any]:
    """Run a rebuild of a Redis Cluster store to completion (see the module docstring); a summary."""
    started = time.monotonic()
    check_prefix(settings.prefix)
    stamp = f"{int(time.time())}-{uuid.uuid4().hex[:8]}"
    fresh_prefix = f"{settings.prefix}.rebuild.{stamp}"
    fresh = replace(settings, prefix=fresh_prefix,
                    kafka=replace(settings.kafka, group_id=f"{settings.group_id}.rebuild.{stamp}"))
    client = connect_cluster(settings.redis_url)
    timeout = node_timeout_seconds(client)
    store = ClusterStore(client, fresh_prefix, settings.resolutions)
    loop = ConsumeLoop(fresh, store, dlq=None, consumer=make_consumer(fresh))
    state = SwapProgress()
    targets: dict[TopicPartition, int] = {}
    finished: list[bool] = []

    async def done(runner: ConsumeLoop) -> bool:
        partitions = runner.consumer.partitions_for_topic(settings.topic) or set()
        every = {TopicPartition(settings.topic, p) for p in partitions}
        if not every or not every <= runner.assigned:
            return False
        left = every - set(state.swapped)
        if set(targets) != left:
            targets.clear()
            targets.update(await runner.consumer.end_offsets(sorted(left)))
        if progress is not None:
            progress(runner.counters.records)
        if not await runner.caught_up(targets):
            return False
        state.rounds += 1
        ahead = live_ahead(client, settings.prefix, {tp: runner.watermarks.get(tp) for tp in left})
        if ahead:  # wait until every view can swap, so that the swaps come together (the scripts check again)
            log.info("live watermarks ahead of the rebuild (source, live, rebuilt): %s; consuming further", ahead)
            targets.clear()
            return False
        behind = []
        for tp in sorted(left):
            at = time.monotonic()
            result = swap_view(client, settings.prefix, fresh_prefix, source_of(tp), settings.topic)
            state.slowest_view_seconds = max(state.slowest_view_seconds, time.monotonic() - at)
            if not result.swapped:
                behind.append(result.behind)
                continue
            state.first_swap_at = state.first_swap_at or at
            state.swapped[tp] = result.keys_moved
            log.info("swapped %s: %d keys, watermark %s, in %.3f s", source_of(tp), result.keys_moved,
                     runner.watermarks.get(tp), time.monotonic() - at)
            runner.consumer.pause(tp)  # final: what the rebuild would read of it now is the workers'
        if behind:
            log.info("live watermarks ahead of the rebuild (source, live, rebuilt): %s; consuming further", behind)
            targets.clear()
            return False
        state.shared_keys = swap_shared(client, settings.prefix, fresh_prefix)
        state.seconds = time.monotonic() - (state.first_swap_at or time.monotonic())
        finished.append(True)
        return True

    try:
        await loop.run(until=done)
    except BaseException:
        if state.swapped and not finished:
            log.error("rebuild failed after swapping %d partition(s) (%s): those hold the rebuilt state, the "
                      "others and the admitted values are untouched; run it again", len(state.swapped),
                      ", ".join(source_of(tp) for tp in sorted(state.swapped)))
        raise
    finally:
        try:
            store.clear()  # every key under the rebuild's prefix: views, shared slot, kept watermarks
        except Exception as exc:  # noqa: BLE001 - clean-up only; the keys are under their own prefix
            log.warning("could not delete the rebuild's keys under %s: %r", fresh_prefix, exc)
        client.close()
    await delete_group(settings, fresh.group_id)
    if timeout is not None and state.slowest_view_seconds > timeout / 2:
        log.warning("a partition view's swap blocked its master for %.2f s, more than half the cluster-node-timeout "
                    "(%.1f s): a swap longer than the timeout makes the cluster fail the master over (the workers "
                    "then restore its partitions from Kafka); raise cluster-node-timeout or add partitions "
                    "(docs/operating.md, \"Rebuilding Redis\")", state.slowest_view_seconds, timeout)
    counters = loop.counters
    return {"prefix": settings.prefix, "topic": settings.topic, "cluster": True, "records": counters.records,
            "traces": counters.traces, "dlq": counters.rejected,
            "keys_moved": sum(state.swapped.values()) + state.shared_keys, "partitions": len(state.swapped),
            "swap_seconds": round(state.seconds, 4), "swap_rounds": state.rounds,
            "slowest_view_swap_seconds": round(state.slowest_view_seconds, 4), "cluster_node_timeout_seconds": timeout,
            "seconds": round(time.monotonic() - started, 3)}


def run_rebuild_cluster(settings: WorkerSettings, progress: Any = None) -> dict[str, Any]:
    tune_gc()
    return asyncio.run(rebuild_cluster(settings, progress=progress))
