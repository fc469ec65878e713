"""monitor/store/redis/merge.py: the cluster store's key naming (one slot per partition view) and its merges."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from monitor.aggregate import Aggregate
from monitor.identity import OVERFLOW_FIELD
from monitor.sketch import LogSketch
from monitor.store.redis.layout import KeyLayout
from monitor.store.redis.merge import (
    check_prefix,
    global_prefix,
    hash_tag,
    merge_aggregates,
    merge_identities,
    merge_latest,
    one_source,
    split_view_key,
    sum_fields,
    sum_hashes,
    view_prefix,
)

TOPICS = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=40)
PREFIXES = st.text(string.ascii_letters + string.digits + ".:_-", min_size=1, max_size=20)
SLICES = st.text(string.ascii_letters + string.digits + "=|_-", min_size=1, max_size=30)


def every_key(layout: KeyLayout, sid: str, source: str) -> list[str]:
    """One key of every family an apply writes or a reader reads (the layout's table)."""
    return [layout.window("1m", 60, sid), layout.window_counts("1h", 0, sid), layout.totals(sid), layout.slices(),
            layout.counters(), layout.offsets(), layout.generation(), layout.paired("pair:r1:r2:"),
            layout.identity("r1"), layout.pending(source), layout.dims("tenant"), layout.state("alerts")]


@settings(max_examples=200, deadline=None)
@given(prefix=PREFIXES, topic=TOPICS, partition=st.integers(0, 10_000), sid=SLICES)
def test_every_key_of_a_partition_view_is_in_the_slot_of_its_hash_tag(prefix, topic, partition, sid):
    source = f"{topic}:{partition}"
    keys = every_key(KeyLayout(view_prefix(prefix, source)), sid, source)
    assert {hash_tag(key) for key in keys} == {f"t:{source}"}
    assert len({key_slot(key.encode()) for key in keys}) == 1
    shared = every_key(KeyLayout(global_prefix(prefix)), sid, source)
    assert {hash_tag(key) for key in shared} == {"g"}
    for key in keys:  # a view's key names its source and the single-node key after it
        assert split_view_key(prefix, key) == (source, key[len(view_prefix(prefix, source)) + 1:])
    assert all(split_view_key(prefix, key) is None for key in shared)


def test_the_single_node_layout_has_no_hash_tags():
    """Cluster off: the key layout is the one single-node Redis always had (byte for byte)."""
    layout = KeyLayout("fleetmon")
    assert every_key(layout, "release=r1|arm=baseline", "fleetmon.traces:3") == [
        "fleetmon:w:1m:60:release=r1|arm=baseline", "fleetmon:wc:1h:0:release=r1|arm=baseline",
        "fleetmon:t:release=r1|arm=baseline", "fleetmon:slices", "fleetmon:counters", "fleetmon:offsets",
        "fleetmon:generation", "fleetmon:x:pair:r1:r2:", "fleetmon:id:r1", "fleetmon:pending:fleetmon.traces:3",
        "fleetmon:dims:tenant", "fleetmon:state:alerts"]


def test_names_of_views():
    assert view_prefix("fleetmon", "fleetmon.traces:3") == "fleetmon:{t:fleetmon.traces:3}"
    assert view_prefix("fleetmon", None) == view_prefix("fleetmon", "") == "fleetmon:{t:}"
    assert global_prefix("fleetmon") == "fleetmon:{g}"
    assert hash_tag("a:{}:{b}") is None and hash_tag("plain") is None and hash_tag("a{b}c{d}") == "b"
    assert view_prefix("p", "a:1") != view_prefix("p", "a:2")
    assert key_slot(b"p:{t:a:1}:offsets") != key_slot(b"p:{t:a:2}:offsets")


@pytest.mark.parametrize("prefix", ["", "fm{x}", "a}b"])
def test_a_prefix_with_braces_is_refused_with_its_value(prefix):
    with pytest.raises(ValueError, match=r"redis\.prefix") as caught:
        check_prefix(prefix)
    assert repr(prefix) in str(caught.value)
    with pytest.raises(ValueError, match="must not contain"):
        view_prefix("fleetmon", "to{p}ic:0")


def test_an_apply_covers_one_source():
    assert one_source([("t:0", 0, 9)], ["t:0"]) == "t:0"
    assert one_source([], [""]) == "" and one_source([], []) == ""
    assert one_source([], ["t:2"]) == "t:2"
    with pytest.raises(ValueError, match=r"\['t:0', 't:1'\]"):
        one_source([("t:0", 0, 9), ("t:1", 0, 3)], [])
    with pytest.raises(ValueError, match="one partition at a time"):
        one_source([("t:0", 0, 9)], ["t:1"])


def random_aggregate(rng: random.Random) -> Aggregate:
    sketch = LogSketch()
    for _ in range(rng.randrange(0, 30)):
        sketch.add(rng.lognormvariate(0, 2))
    counts = {name: float(rng.randrange(0, 10**12)) for name in ("traces", "successes", "tokens_in:m")
              if rng.random() < 0.8}
    return Aggregate(counts, sketch)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), views=st.integers(1, 6), slices=st.integers(0, 8))
def test_merging_the_views_equals_one_aggregate_of_everything(seed, views, slices):
    rng = random.Random(seed)
    ids = [f"s{i}" for i in range(slices)]
    parts = [{sid: random_aggregate(rng) for sid in ids if rng.random() < 0.7} for _ in range(views)]
    before = [{sid: agg.to_dict() for sid, agg in part.items()} for part in parts]
    merged = merge_aggregates(parts, [*ids, "absent"])
    for sid in ids:
        whole = Aggregate()
        for part in parts:
            if sid in part:
                whole.merge(part[sid])
        assert merged[sid].to_dict() == whole.to_dict()  # integer counts and sketch buckets: exact
    assert merged["absent"].to_dict() == {}
    assert [{sid: agg.to_dict() for sid, agg in part.items()} for part in parts] == before  # inputs untouched


@given(st.lists(st.dictionaries(st.sampled_from("abcdef"), st.floats(-1e9, 1e9)), max_size=6))
def test_latest_times_take_the_max_and_sums_add(parts):
    latest = merge_latest(parts)
    for member in {m for part in parts for m in part}:
        assert latest[member] == max(part[member] for part in parts if member in part)
    sums = sum_fields(parts)
    for member in latest:
        assert sums[member] == pytest.approx(sum(part.get(member, 0) for part in parts), abs=1e-3)
    assert sum_hashes([{"x": part} for part in parts]) == ({"x": sums} if parts else {})


def test_identities_take_the_latest_time_per_tuple_and_add_the_overflow():
    merged = merge_identities([{"r1": {"v1": 10.0, "v2": 30.0, OVERFLOW_FIELD: 2}},
                               {"r1": {"v1": 20.0, OVERFLOW_FIELD: 3}, "r2": {"v9": 5.0}}])
    assert merged == {"r1": {"v1": 20.0, "v2": 30.0, OVERFLOW_FIELD: 5}, "r2": {"v9": 5.0}}
