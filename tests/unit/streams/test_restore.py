"""Loss detection and restore (streams/apply.py, streams/restore.py) on the in-memory store.

The memory store has the Redis store's apply semantics (tests/integration/test_store_redis.py and
test_state_loss.py check the Redis side on a real server): a store that restarts empty or rolls
back must be noticed at the next apply, nothing written, and restoring from the store's watermarks
(re-reading the records above them, with the pairers reloaded from the store) must end with exactly
the state of one pass over every record — totals, paired counts and counters.
"""

from __future__ import annotations

import copy
import json
import random

import pytest
from aiokafka import TopicPartition

from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import Expected, LostState
from monitor.store.memory import MemoryStore
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.apply import BatchApplier, LoopCounters
from streams.batch import decode_batch
from streams.restore import find_loss
from tests.support.batches import Rec
from tests.support.pipeline import make_records

NOW = 1_796_000_000.0
TOPIC = "t"



def test_find_loss_is_the_apply_scripts_rule():
    expected = Expected("g1", {"t:0": 10, "t:1": 5})
    assert find_loss(expected, "g1", {"t:0": 10, "t:1": 5}) is None
    assert find_loss(expected, "g1", {"t:0": 12, "t:1": 9}) is None  # another writer's progress
    assert find_loss(Expected(None, {}), "g9", {}) is None           # nothing applied yet: adopt the store's
    lost = find_loss(expected, None, {})
    assert lost is not None and lost.behind == {"t:0": None, "t:1": None} and lost.generation is None
    rolled = find_loss(expected, "g1", {"t:0": 10, "t:1": 3})
    assert rolled is not None and rolled.behind == {"t:1": 3}
    assert "t:1 applied through offset 5, the store holds offset 3" in rolled.describe()
    flushed = find_loss(expected, "g2", {"t:0": 10, "t:1": 5})
    assert flushed is not None and "generation g1 expected, the store has g2" in flushed.describe()


class Worker:
    """The loop's bookkeeping around a :class:`BatchApplier`, without Kafka: per partition the offset
    it resumes at and the watermark it last applied; a loss is restored as streams/restore.py does."""

    def __init__(self, store: MemoryStore, partitions: dict[int, list[Rec]]) -> None:
        self.store = store
        self.partitions = partitions
        self.tps = {f"{TOPIC}:{p}": TopicPartition(TOPIC, p) for p in partitions}
        self.applier = BatchApplier(store, Slicer(), tuple(DEFAULT_RESOLUTIONS), LoopCounters(),
                                    PriceMap.load(None), 3600.0, lambda: False)
        self.position = {p: 0 for p in partitions}
        self.watermarks: dict[str, int] = {}
        self.losses: list[LostState] = []
        self.restore()

    def restore(self) -> None:
        stored = self.store.applied_offsets()
        self.applier.generation = self.store.generation().id
        for source, tp in self.tps.items():
            self.applier.pairers[tp] = self.applier.load_pairer(source)
            mark = stored.get(source)
            self.position[tp.partition] = 0 if mark is None else mark + 1
            if mark is None:
                self.watermarks.pop(source, None)
            else:
                self.watermarks[source] = mark

    def step(self, rng: random.Random) -> bool:
        """Apply one fetch of up to 3 partitions; False when everything is applied."""
        left = [p for p, recs in self.partitions.items() if self.position[p] < len(recs)]
        if not left:
            return False
        chosen = sorted(rng.sample(left, min(len(left), rng.randint(1, 3))))
        batch = decode_batch([(TOPIC, p, self.partitions[p][self.position[p]:self.position[p] + rng.randint(1, 150)])
                              for p in chosen], NOW)
        tps = {part.source: self.tps[f"{TOPIC}:{part.partition}"] for part in batch.parts}
        outcome = self.applier.apply(tps, batch, NOW, dict(self.watermarks))
        if isinstance(outcome, LostState):
            self.losses.append(outcome)
            self.restore()
            return True
        for tp, mark in outcome.items():
            self.watermarks[f"{tp.topic}:{tp.partition}"] = mark
            self.position[tp.partition] = mark + 1
        return True


def partitioned(seed: int, n: int = 4000) -> dict[int, list[Rec]]:
    """``n`` records (a fifth in shadow pairs) spread over 4 partitions by key, as the producer does."""
    records = make_records(n, seed=seed, now=NOW - 10, pair_share=0.2)
    out: dict[int, list[Rec]] = {p: [] for p in range(4)}
    for record in records:
        key = record.get("pair_id", record["trace_id"])
        p = sum(key.encode()) % 4
        out[p].append(Rec(len(out[p]), json.dumps(record).encode(), key.encode()))
    return out


def state_of(store: MemoryStore, approx: bool = False) -> dict:
    """Everything a restore must get back; with ``approx`` (the expected side) float sums match with a
    relative tolerance (they were added in another order), everything else exactly."""
    floats = approx_floats if approx else dict
    return {"totals": {sid: floats(agg.to_dict()) for sid, agg in store.totals().items()},
            "paired": {key: floats(fields) for key, fields in store.paired_evidence().items()},
            "counters": store.counters(), "offsets": store.applied_offsets(),
            "pending": {p: store.pending(f"{TOPIC}:{p}") for p in range(4)}}


def approx_floats(fields: dict) -> dict:
    return {k: v if float(v).is_integer() else pytest.approx(v, rel=1e-9) for k, v in fields.items()}


def run_to_end(worker: Worker, rng: random.Random, lose_at: int | None = None, lose: str = "") -> None:
    steps = 0
    snapshot = None
    while worker.step(rng):
        steps += 1
        if lose == "rollback" and steps == (lose_at or 0) // 2:
            snapshot = copy.deepcopy(vars(worker.store))
        if steps == lose_at:
            assert any(worker.position[p] < len(recs) for p, recs in worker.partitions.items())
            if lose == "empty":
                worker.store.lose_state()
            else:
                assert snapshot is not None
                vars(worker.store).update(snapshot)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("lose", ["empty", "rollback"])
def test_a_lost_or_rolled_back_store_is_noticed_once_and_restored_exactly(seed, lose):
    partitions = partitioned(seed)
    reference = MemoryStore()
    run_to_end(Worker(reference, partitions), random.Random(seed))

    store = MemoryStore()
    worker = Worker(store, partitions)
    rng = random.Random(seed + 100)
    for _ in range(6):
        worker.step(rng)
    before = store.generation().id
    run_to_end(worker, rng, lose_at=8, lose=lose)

    assert len(worker.losses) == 1  # noticed at the first apply after the loss, restored once
    lost = worker.losses[0]
    assert lost.behind, "the loss names the partitions whose watermark went missing or back"
    if lose == "empty":
        assert all(mark is None for mark in lost.behind.values()) and lost.generation is None
        assert store.generation().id is not None
    else:
        assert all(mark is not None for mark in lost.behind.values()) and store.generation().id == before
    assert state_of(store) == state_of(reference, approx=True)
    assert sum(c["n_pairs"] for c in store.paired_evidence().values()) > 0  # pairs were in play
