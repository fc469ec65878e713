"""streams/apply.py: an apply that fails and is retried counts its batch once (on the memory store)."""

from __future__ import annotations

import json
import time

import pytest
from aiokafka import TopicPartition

from monitor.pricing import PriceMap
from monitor.slices import Slicer
from monitor.store.base import StoreError
from monitor.store.memory import MemoryStore
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.apply import BatchApplier, LoopCounters
from streams.batch import decode_batch
from streams.native import NativeFolder
from streams.native import available as native_available
from tests.support.batches import Rec
from tests.support.pipeline import make_records


class FailingOnce(MemoryStore):
    """Fails the first ``failures`` applies, as a Redis that restarts or drops the connection does."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def apply_verified(self, *args, **kwargs):
        if self.failures:
            self.failures -= 1
            raise StoreError("applying a batch to Redis failed: Redis is loading the dataset in memory")
        return super().apply_verified(*args, **kwargs)


@pytest.mark.parametrize("native", [True, False])
def test_a_retried_apply_counts_the_batch_once(native):
    if native and not native_available():
        pytest.skip("fleetmon_native is not built")
    now = time.time()
    # few slices, so groups of both decode paths (plain traces natively, pairs in Python) share windows
    records = [dict(r, tenant="t", locale="en", task_type="code") for r in make_records(2000, 5, now, 0.2)]
    raw = [Rec(i, json.dumps(r).encode()) for i, r in enumerate(records)]
    folder = NativeFolder(Slicer().dimensions, DEFAULT_RESOLUTIONS, max_record_bytes=1 << 20,
                          pair_id_slow=True) if native else None
    outcomes = []
    for failures in (0, 2):
        store = FailingOnce(failures)
        applier = BatchApplier(store, Slicer(), tuple(DEFAULT_RESOLUTIONS), LoopCounters(), PriceMap.load(None),
                               3600.0, lambda: False)
        tp = TopicPartition("t", 0)
        applier.pairers[tp] = applier.load_pairer("t:0")
        batch = decode_batch([("t", 0, raw)], now, native=folder)
        assert applier.apply({"t:0": tp}, batch, now, {}) == {tp: len(raw) - 1}
        outcomes.append((store.counters(), {sid: agg.traces for sid, agg in store.totals().items()}))
    assert outcomes[1] == outcomes[0]
    assert outcomes[0][0]["traces"] == len(records)
