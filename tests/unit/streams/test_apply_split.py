"""streams/apply.py on a store that applies one partition at a time (the Redis Cluster store's contract)."""

from __future__ import annotations

import json
import time

import pytest
from aiokafka import TopicPartition

from monitor.aggregate import FLOAT_FIELDS
from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import LostState
from monitor.store.memory import MemoryStore
from monitor.store.redis.merge import one_source
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.apply import BatchApplier, LoopCounters, split_by_source
from streams.batch import decode_batch
from streams.native import NativeFolder
from streams.native import available as native_available
from tests.support.batches import Rec
from tests.support.pipeline import make_records


class PerSource(MemoryStore):
    """A memory store that, like the cluster store, takes one source per apply (and records them)."""

    applies_per_source = True

    def __init__(self, lose_at: int | None = None) -> None:
        super().__init__()
        self.applied: list[list[str]] = []
        self.lose_at = lose_at

    def apply_verified(self, delta, ranges, pending, expected, new_generation):
        one_source(ranges, pending or {})  # raises when a batch was not split
        if self.lose_at is not None and len(self.applied) == self.lose_at:
            return LostState(expected, "g", {ranges[0][0]: None})
        self.applied.append([source for source, _first, _last in ranges])
        return super().apply_verified(delta, ranges, pending, expected, new_generation)


def parts(n_partitions: int, now: float) -> list[tuple[str, int, list[Rec]]]:
    records = make_records(3000, 7, now, 0.2)
    out = []
    for p in range(n_partitions):
        mine = [r for i, r in enumerate(records) if i % n_partitions == p]
        out.append(("t", p, [Rec(i, json.dumps(r).encode()) for i, r in enumerate(mine)]))
    return out


def folder(native: bool) -> NativeFolder | None:
    if native and not native_available():
        pytest.skip("fleetmon_native is not built")
    return NativeFolder(Slicer().dimensions, DEFAULT_RESOLUTIONS, max_record_bytes=1 << 20,
                        pair_id_slow=True) if native else None


def applier_on(store: MemoryStore) -> BatchApplier:
    return BatchApplier(store, Slicer(), tuple(DEFAULT_RESOLUTIONS), LoopCounters(), PriceMap.load(None), 3600.0,
                        lambda: False)


@pytest.mark.parametrize("native", [True, False])
def test_a_batch_is_split_by_partition_and_counts_as_one_apply_would(native):
    now = time.time()
    tps = {f"t:{p}": TopicPartition("t", p) for p in range(3)}
    split, whole = PerSource(), MemoryStore()
    for store in (split, whole):
        applier = applier_on(store)
        for source, tp in tps.items():
            applier.pairers[tp] = applier.load_pairer(source)
        batch = decode_batch(parts(3, now), now, native=folder(native))
        marks = applier.apply(tps, batch, now, {})
        assert marks == {tp: part.last_offset for tp, part in zip(tps.values(), batch.parts)}
    assert split.applied == [["t:0"], ["t:1"], ["t:2"]]
    assert split.counters() == whole.counters()
    exact = {s: {k: v for k, v in a.to_dict().items() if k not in FLOAT_FIELDS} for s, a in whole.totals().items()}
    assert {s: {k: v for k, v in a.to_dict().items() if k not in FLOAT_FIELDS} for s, a in split.totals().items()} \
        == exact
    split_totals = split.totals()
    for sid, agg in whole.totals().items():  # float sums in another order: equal to the last bits or so
        for name in FLOAT_FIELDS & agg.counts.keys():
            assert split_totals[sid].counts[name] == pytest.approx(agg.counts[name], rel=1e-12)
    assert split.paired_evidence() == whole.paired_evidence()


@pytest.mark.parametrize("native", [True, False])
def test_split_keeps_every_record_of_each_partition(native):
    now = time.time()
    batch = decode_batch(parts(4, now), now, native=folder(native))
    pieces = split_by_source(batch)
    assert [piece.ranges() for piece in pieces] == [[r] for r in batch.ranges()]
    assert sum(piece.trace_count for piece in pieces) == batch.trace_count == 3000


def test_a_loss_found_on_a_later_partition_is_returned_after_the_earlier_ones_applied():
    now = time.time()
    tps = {f"t:{p}": TopicPartition("t", p) for p in range(3)}
    store = PerSource(lose_at=1)
    outcome = applier_on(store).apply(tps, decode_batch(parts(3, now), now), now, {})
    assert isinstance(outcome, LostState) and outcome.behind == {"t:1": None}
    assert store.applied == [["t:0"]] and set(store.applied_offsets()) == {"t:0"}
