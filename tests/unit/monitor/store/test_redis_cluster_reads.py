"""monitor/store/redis/cluster_reads.py: the per-view merge keeps the exporter's identity cache hits."""

from __future__ import annotations

from monitor.aggregate import Aggregate
from monitor.store.redis.cluster_reads import _Memo


def agg(traces: int) -> Aggregate:
    return Aggregate({"traces": traces, "successes": traces // 2})


def test_the_same_parts_give_the_same_merged_object_and_new_parts_a_new_sum():
    memo = _Memo()
    a, b = agg(3), agg(5)
    merged = memo.merge("s", (a, b))
    assert merged.counts == {"traces": 8, "successes": 3} and a.counts["traces"] == 3  # parts untouched
    assert memo.merge("s", (a, b)) is merged
    c = agg(7)
    again = memo.merge("s", (a, c))
    assert again is not merged and again.counts["traces"] == 10
    assert memo.merge("t", (a,)) is a  # one view: its reader's object itself
    memo.keep({"t"})
    assert set(memo.entries) == {"t"}
