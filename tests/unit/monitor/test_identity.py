"""monitor.identity: version tuples per release label, what changed between two, and the store's merge."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor import identity
from monitor.delta import BatchDelta
from monitor.fold import fold
from monitor.identity import (
    COMPONENTS,
    MAX_IDENTITIES_PER_RELEASE,
    OVERFLOW_FIELD,
    apply_to,
    confounded_warning,
    decode,
    encode,
    identity_changes,
    identity_of_traces,
    summarize,
)
from monitor.schema import validate
from monitor.slices import CardinalityGuard, Slicer
from monitor.store.memory import MemoryStore

NOW = 1_800_000_000.0


def trace(ts: float = NOW - 10, **fields):
    return validate({"trace_id": "t", "ts": ts, "model_id": "m1", "ok": True, **fields})


def test_the_two_new_fields_are_validated_like_the_other_hashes():
    t = trace(tool_schema_hash="tools-7", config_hash="cfg-3")
    assert (t.tool_schema_hash, t.config_hash) == ("tools-7", "cfg-3")
    with pytest.raises(ValueError, match=r"tool_schema_hash must be a string, got \[1\]"):
        trace(tool_schema_hash=[1])
    with pytest.raises(ValueError, match="config_hash must be at most 256 characters long"):
        trace(config_hash="x" * 257)
    with pytest.raises(ValueError, match="config_hash must be printable text"):
        trace(config_hash="a\x1bb")


def test_identity_of_a_trace_is_its_label_and_its_tuple_with_empty_for_missing():
    release, found = identity.identity_of(trace(release="r1", prompt_hash="p", config_hash="c"))
    assert release == "r1" and found == ("m1", "", "p", "", "c")
    assert identity.identity_of(trace(release=""))[0] == "m1"      # the label defaults to model_id


def test_changes_name_the_differing_components_in_order():
    base = {"model_id": "m1", "scaffold_hash": "s", "prompt_hash": "p1", "tool_schema_hash": "", "config_hash": "c"}
    assert identity_changes(base, base) == []
    assert identity_changes(base, {**base, "prompt_hash": "p2"}) == ["prompt_hash"]
    both = {**base, "config_hash": "c2", "model_id": "m2"}
    assert identity_changes(base, both) == ["model_id", "config_hash"]
    assert identity_changes(base, {k: v for k, v in base.items() if k != "tool_schema_hash"}) == []  # "" = missing
    assert identity_changes(None, base) == [] and identity_changes(base, None) == []
    assert confounded_warning(["prompt_hash"]) is None
    assert confounded_warning(["model_id", "config_hash"]) == "confounded: 2 components differ (model_id, config_hash)"


def test_encoded_tuples_round_trip_and_bad_text_is_named():
    found = ("m|1", "s\"", "p", "", "é")
    assert decode(encode(found)) == found
    for bad in ("[1,2]", "not json", '["a","b","c","d",5]'):
        with pytest.raises(ValueError, match="a release identity must be a JSON array of 5 strings"):
            decode(bad)


def test_the_store_keeps_each_tuples_latest_time_and_caps_the_count() -> None:
    stored: dict[str, float] = {}
    apply_to(stored, {"a": 5.0})
    apply_to(stored, {"a": 3.0, "b": 4.0})
    assert stored == {"a": 5.0, "b": 4.0}
    apply_to(stored, {f"x{i}": 1.0 for i in range(MAX_IDENTITIES_PER_RELEASE)})
    assert sum(1 for name in stored if name != OVERFLOW_FIELD) == MAX_IDENTITIES_PER_RELEASE
    assert stored[OVERFLOW_FIELD] == 2  # the two tuples past the cap are counted, not kept
    apply_to(stored, {"a": 9.0})       # a kept tuple still moves past the cap
    assert stored["a"] == 9.0 and stored[OVERFLOW_FIELD] == 2


def test_summary_current_is_the_latest_and_changes_count_distinct_tuples_plus_overflow():
    one, two = encode(("m1", "", "p1", "", "")), encode(("m1", "", "p2", "", ""))
    found = summarize({"r": {one: 10.0, two: 20.0}, "empty": {}, "junk": {"nope": 1.0},
                       "full": {one: 1.0, OVERFLOW_FIELD: 3}})
    assert sorted(found) == ["full", "r"]
    assert found["r"].current == ("m1", "", "p2", "", "") and found["r"].changes == 1 and found["r"].last_seen == 20.0
    assert found["full"].changes == 3
    assert found["r"].mapping() == dict(zip(COMPONENTS, ("m1", "", "p2", "", "")))
    # a tie in time: the greatest encoded tuple, so every reader agrees
    assert summarize({"r": {one: 5.0, two: 5.0}})["r"].current[2] == "p2"


def test_the_fold_keeps_tuples_per_admitted_release_only():
    traces = [trace(release=f"r{i % 4}", prompt_hash=f"p{i % 2}", ts=NOW - 100 + i) for i in range(8)]
    delta = fold(traces, Slicer(("release", "arm"), CardinalityGuard(3)), NOW)
    assert sorted(delta.identities) == ["r0", "r1", "r2"]          # r3 was folded into __other__
    assert delta.identities["r0"] == {encode(("m1", "", "p0", "", "")): NOW - 96}
    assert delta.counters["folded:release"] == 2


def test_offline_sides_report_their_latest_tuple_and_how_many_they_mix():
    side = [trace(ts=NOW - 5, prompt_hash="new"), trace(ts=NOW - 50, prompt_hash="old"), trace(ts=NOW - 9)]
    current, distinct = identity_of_traces(side)
    assert current is not None and current["prompt_hash"] == "new" and distinct == 3
    assert identity_of_traces([]) == (None, 0)


batches = st.lists(st.lists(st.tuples(st.sampled_from(["r1", "r2"]), st.sampled_from(["p1", "p2", "p3"]),
                                      st.integers(0, 1000)), min_size=1, max_size=6), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(batches, st.randoms(use_true_random=False))
def test_applying_batches_in_any_order_or_merged_gives_the_same_identities(parts, rnd: random.Random):
    """Max-merge: concurrent workers, a replay in another order and one merged delta all agree."""
    deltas = [fold([trace(release=r, prompt_hash=p, ts=NOW - 1000 + t) for r, p, t in part],
                   Slicer(("release",)), NOW) for part in parts]
    in_order, shuffled, merged = MemoryStore(), MemoryStore(), MemoryStore()
    for delta in deltas:
        in_order.apply(delta)
    for delta in rnd.sample(deltas, len(deltas)):
        shuffled.apply(delta)
    union = BatchDelta()
    for delta in deltas:
        union.merge(delta)
    merged.apply(union)
    expected = summarize(in_order.release_identities())
    assert summarize(shuffled.release_identities()) == expected == summarize(merged.release_identities())
    distinct = {(r, p) for part in parts for r, p, _ in part}
    for release, found in expected.items():
        assert found.changes == sum(1 for r, _ in distinct if r == release) - 1
        assert found.last_seen == max(NOW - 1000 + t for part in parts for r, _, t in part if r == release)
