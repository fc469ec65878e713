"""The consume loop's Kafka side: the consumer it owns, its rebalance listener, and batched fetching.

The consumer never commits by itself (the loop commits after each Redis
apply), reads raw bytes, starts a new group at the earliest retained offset,
and takes large fetches. :func:`take` has ``stream.take(max, within)``
semantics: up to ``limit`` records, waiting at most ``within_seconds`` after
the first one arrives. Every client option comes from :mod:`monitor.kafka`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from monitor.kafka import aiokafka_consumer
from monitor.worker_settings import WorkerSettings
from streams.batch import merge_fetches

MAX_PARTITION_FETCH_BYTES = 4 * 1024 * 1024
FETCH_MAX_BYTES = 64 * 1024 * 1024
MAX_POLL_INTERVAL_MS = 300_000


class Rebalanced(Protocol):
    """What the listener hands partition changes to (the loop)."""

    async def on_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_assigned(self, assigned: set[TopicPartition]) -> None: ...


class RebalanceListener(ConsumerRebalanceListener):
    def __init__(self, target: Rebalanced) -> None:
        self.target = target

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.target.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.target.on_assigned(set(assigned))


def make_consumer(settings: WorkerSettings, group_id: str | None = None,
                  client_id: str | None = None) -> AIOKafkaConsumer:
    """The consumer the loop owns: manual commits, large fetches, raw bytes."""
    session_ms = int(settings.session_timeout_seconds * 1000)
    return AIOKafkaConsumer(**aiokafka_consumer(
        settings.kafka,
        client_id=client_id or f"fleetmon-{socket.gethostname()}-{os.getpid()}",
        group_id=group_id or settings.group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=MAX_PARTITION_FETCH_BYTES,
        fetch_max_bytes=FETCH_MAX_BYTES,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(100, session_ms // 3),
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
    ))


async def take(consumer: AIOKafkaConsumer, limit: int, within_seconds: float,
               stopping: Callable[[], bool]) -> tuple[dict[TopicPartition, list[Any]], bool]:
    """Up to ``limit`` records by partition, and whether the batch filled up (empty when nothing came)."""
    fetched: dict[TopicPartition, list[Any]] = {}
    count = 0
    deadline: float | None = None
    timeout_ms = int(within_seconds * 1000)
    while not stopping():
        part = await consumer.getmany(timeout_ms=timeout_ms, max_records=limit - count)
        count += merge_fetches(fetched, part)
        if count >= limit:
            return fetched, True
        if count == 0:
            return fetched, False
        now = time.monotonic()
        if deadline is None:
            deadline = now + within_seconds
        if not part or now >= deadline:
            break
        timeout_ms = max(1, int((deadline - now) * 1000))
    return fetched, False
