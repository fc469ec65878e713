"""The consume loop's rebalance callback against a fetch in hand (no Kafka: the consumer is a stub
whose commit yields to the event loop, the one thing the race needs; the real rebalances run in
tests/integration/test_pipeline.py and test_cluster.py)."""

from __future__ import annotations

import asyncio
import json
import time

from aiokafka.structs import TopicPartition

from monitor.store.memory import MemoryStore
from monitor.worker_settings import WorkerSettings
from streams.loop import ConsumeLoop
from tests.support.batches import Rec
from tests.support.pipeline import make_records


class YieldingConsumer:
    """Commits succeed after yielding once, as a network round trip does."""

    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, int]] = []

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await asyncio.sleep(0)
        self.commits.append(dict(offsets))


def test_a_fetch_in_hand_starts_no_apply_for_partitions_being_revoked():
    """While on_revoked awaits its commit, the loop may process a fetch it already holds. An apply
    started for a revoked partition then would run after its pairer is dropped: its traces counted,
    its shadow halves never paired (pairs lost across the rebalance)."""
    consumer = YieldingConsumer()
    loop = ConsumeLoop(WorkerSettings(prefix="t"), MemoryStore(), dlq=None, consumer=consumer)
    tp = TopicPartition("t", 0)
    records = make_records(20, seed=1, now=time.time(), pair_share=1.0)
    fetched = {tp: [Rec(offset, json.dumps(r).encode()) for offset, r in enumerate(records)]}
    loop.assigned.add(tp)
    loop.watermarks[tp] = None
    loop._to_commit[tp] = 1  # something to commit, so on_revoked awaits the consumer

    async def race() -> None:
        await asyncio.gather(loop.on_revoked({tp}), loop._process(fetched))

    try:
        asyncio.run(race())
        assert loop._inflight is None, "an apply started for a partition being revoked"
        assert loop.counters.records == 0
        assert tp not in loop.assigned and tp not in loop.pairers
        assert consumer.commits == [{tp: 1}], "the revoked partition's ready offset is still committed"
    finally:
        loop._executor.shutdown(wait=True)
