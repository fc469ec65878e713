"""A packed window (monitor.store.redis.packed) holds exactly the aggregate's fields (no services needed)."""

from __future__ import annotations

import random

import pytest

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.store.redis.layout import PACKED_FIELD
from monitor.store.redis.packed import pack, window_fields
from monitor.store.redis.wire import decode_hash
from tests.support.traces import make_traces


def field_text(agg: Aggregate) -> dict[str, str]:
    """The aggregate as a field-by-field hash held it: integers as decimal text, floats as repr."""
    return {k: repr(float(v)) if k in FLOAT_FIELDS else str(int(v)) for k, v in agg.to_dict().items() if v}


def aggregates(seed: int) -> list[Aggregate]:
    rng = random.Random(seed)
    traces = make_traces(300, seed=seed)
    out = [Aggregate(), Aggregate.of(traces[:1]), Aggregate.of(t for t in traces if t.latency_seconds is None)]
    out += [Aggregate.of(rng.sample(traces, rng.randint(1, 300))) for _ in range(10)]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_packed_window_reads_back_as_its_aggregate(seed):
    for agg in aggregates(seed):
        text = pack(agg)
        got = decode_hash(text)  # what a fetch sends for a packed window: the text as it is
        assert got.counts == {k: v for k, v in agg.counts.items() if v}
        assert got.latency == agg.latency and got.latency.count == agg.latency.count
        assert window_fields({PACKED_FIELD: text}) == field_text(agg)
        assert window_fields({PACKED_FIELD.encode(): text.encode()}) == field_text(agg)


def test_sub_second_latencies_zero_latencies_and_odd_names_survive_packing():
    agg = Aggregate({"traces": 3, 'tokens_in:m/"x"\n\u00e9': 12, "fees_usd": 0.1 + 0.2})
    for seconds in (0.0, 0.0004, 0.2, 30.0):  # zero, negative and positive bucket indices
        agg.latency.add(seconds)
    text = pack(agg)
    assert text.count("\n") == 1  # JSON escapes a newline inside a name
    assert decode_hash(text).counts == agg.counts and decode_hash(text).latency == agg.latency
    assert float(window_fields({PACKED_FIELD: text})["fees_usd"]) == 0.1 + 0.2  # repr: the same double


def test_fields_beside_the_packed_one_are_added_to_it():
    agg = Aggregate({"traces": 2, "successes": 1, "fees_usd": 0.5})
    fields = window_fields({PACKED_FIELD: pack(agg), "successes": "4", "fees_usd": "1.25", "outcome:none": "2"})
    assert fields == {"traces": "2", "successes": "5", "fees_usd": "1.75", "outcome:none": "2"}
    assert window_fields({"traces": "7"}) == {"traces": "7"}  # a field-by-field hash, as it is
