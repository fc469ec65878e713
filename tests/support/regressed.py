"""A regression fed straight into an in-memory store: the engine tests that need one firing alert."""

from __future__ import annotations

from monitor.delta import BatchDelta
from monitor.pairing import PairedCounts, pair_key
from monitor.slices import comparison_slices, slice_id
from monitor.store.memory import MemoryStore


def regressed_minute(store: MemoryStore, offset: int) -> None:
    """A minute of shadow pairs where candidate v2 solves 25 points fewer refund tasks than v1."""
    delta = BatchDelta()
    counts = PairedCounts(n_pairs=100, b=30, c=5)
    for key in comparison_slices((("task_type", "refund"),)):
        delta.add_paired_evidence(pair_key("v1", "v2", slice_id(key)), counts.hash_fields())
    store.apply(delta, "t:0", offset, offset + 99)
