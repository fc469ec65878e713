"""Pure batch handling: decode + validate, split by partition, watermark filtering, fold."""

import json
from dataclasses import dataclass

import pytest

from monitor.schema import MAX_FUTURE_SKEW_SECONDS
from monitor.slices import Slicer
from streams.batch import PartitionBatch, decode_records, fold_batch, group_by_partition, merge_fetches

NOW = 1_800_000_000.0


@dataclass
class Rec:
    offset: int
    value: bytes | None
    topic: str = "fleetmon.traces"
    partition: int = 0
    key: bytes | None = None
    timestamp: int | None = 1_800_000_000_000


def trace(i: int, **extra) -> bytes:
    data = {"trace_id": f"t{i}", "ts": NOW - 30, "model_id": "m", "ok": i % 2 == 0, "tokens_in": 10 * i,
            "tokens_out": i, "tenant": f"tenant-{i % 3}"}
    data.update(extra)
    return json.dumps(data).encode()


def test_valid_records_become_traces_in_offset_order():
    batch = decode_records("fleetmon.traces", 0, [Rec(5, trace(1)), Rec(6, trace(2))], NOW)
    assert [t.trace_id for t in batch.traces] == ["t1", "t2"]
    assert batch.offsets == [5, 6]
    assert batch.rejections == []
    assert (batch.first_offset, batch.last_offset, batch.source) == (5, 6, "fleetmon.traces:0")


@pytest.mark.parametrize("value, reason", [
    (b"not json", "not valid JSON"),
    (b'{"trace_id": "t\xff"}', "not valid UTF-8"),
    (b"[1, 2]", "must be a JSON object"),
    (b"null", "must be a JSON object"),
    (json.dumps({"trace_id": "t", "ts": NOW, "model_id": "m", "ok": True, "tokens_in": -3}).encode(),
     "tokens_in must be an integer >= 0, got -3"),
    (json.dumps({"trace_id": 7.5, "ts": NOW, "model_id": "m", "ok": True}).encode(), "trace_id must be a string"),
    (json.dumps({"ts": NOW, "ok": True}).encode(), "trace_id is required"),
    (json.dumps({"trace_id": "t", "ts": NOW + MAX_FUTURE_SKEW_SECONDS + 60, "model_id": "m", "ok": True}).encode(),
     "ts must be at most"),
    (json.dumps({"agent": "a", "task": "x", "ok": True}).encode(), "ts is required for streaming"),
    (None, "tombstone"),
])
def test_every_bad_record_is_rejected_with_its_reason(value, reason):
    batch = decode_records("fleetmon.traces", 2, [Rec(9, value, partition=2, key=b"k")], NOW)
    assert batch.traces == []
    (rejection,) = batch.rejections
    assert any(reason in r for r in rejection.reasons), rejection.reasons
    assert (rejection.offset, rejection.value, rejection.key) == (9, value, b"k")
    assert (batch.first_offset, batch.last_offset) == (9, 9)


def test_all_problems_of_a_record_are_kept():
    value = json.dumps({"trace_id": "t", "ts": "yesterday", "model_id": "m", "ok": "maybe",
                        "tokens_out": -1}).encode()
    (rejection,) = decode_records("t", 0, [Rec(0, value)], NOW).rejections
    assert len(rejection.reasons) == 3


def test_oversized_value_is_rejected_before_parsing():
    value = trace(1, tags={"blob": "x" * 2000})
    batch = decode_records("t", 0, [Rec(0, value)], NOW, max_record_bytes=1000)
    assert "over the 1000-byte limit" in batch.rejections[0].reasons[0]


def test_unexpected_validation_errors_become_rejections():
    def exploding_loads(raw):
        return {"trace_id": "t", "ts": NOW, "model_id": "m", "ok": True, "tags": BadMapping(a=1)}

    class BadMapping(dict):
        def items(self):
            raise RuntimeError("boom")

    batch = decode_records("t", 0, [Rec(0, b"{}")], NOW, loads=exploding_loads)
    assert "validation failed unexpectedly: RuntimeError: boom" in batch.rejections[0].reasons[0]


def test_mixed_batch_keeps_every_record_once():
    records = [Rec(o, trace(o) if o % 3 else b"{bad") for o in range(10, 30)]
    batch = decode_records("t", 0, records, NOW)
    assert sorted(batch.offsets + [r.offset for r in batch.rejections]) == list(range(10, 30))
    assert batch.size == 20


def make_batch() -> PartitionBatch:
    # offsets 100..109; 102 and 109 are bad
    records = [Rec(o, b"bad" if o in (102, 109) else trace(o)) for o in range(100, 110)]
    return decode_records("t", 1, records, NOW)


@pytest.mark.parametrize("watermark, first, kept", [
    (None, 100, list(range(100, 110))),
    (50, 100, list(range(100, 110))),
    (99, 100, list(range(100, 110))),
    (101, 102, list(range(102, 110))),
    (102, 103, list(range(103, 110))),
    (108, 109, [109]),
])
def test_after_watermark_keeps_exactly_the_later_records(watermark, first, kept):
    fresh = make_batch().after(watermark)
    assert sorted(fresh.offsets + [r.offset for r in fresh.rejections]) == kept
    assert (fresh.first_offset, fresh.last_offset) == (first, 109)
    assert [t.trace_id for t in fresh.traces] == [f"t{o}" for o in fresh.offsets]


@pytest.mark.parametrize("watermark", [109, 500])
def test_after_watermark_at_or_past_the_end_is_empty(watermark):
    fresh = make_batch().after(watermark)
    assert not fresh and fresh.size == 0


def test_fold_batch_counts_traces_and_dlq_in_one_delta():
    batch = make_batch()
    delta = fold_batch(batch, Slicer(dimensions=("tenant",)), NOW)
    assert delta.counters["traces"] == 8
    assert delta.counters["dlq"] == 2
    assert sum(agg.traces for agg in delta.totals.values()) == 8


def test_fold_batch_of_only_rejections_still_counts_them():
    batch = decode_records("t", 0, [Rec(0, b"x"), Rec(1, b"y")], NOW)
    delta = fold_batch(batch, Slicer(), NOW)
    assert delta.counters == {"dlq": 2}


def test_group_by_partition_splits_and_keeps_order():
    records = [Rec(o, b"", topic=tp[0], partition=tp[1])
               for o, tp in enumerate([("a", 0), ("a", 1), ("b", 0), ("a", 0), ("a", 1), ("a", 0)])]
    groups = group_by_partition(records)
    assert {k: [r.offset for r in v] for k, v in groups.items()} == {
        ("a", 0): [0, 3, 5], ("a", 1): [1, 4], ("b", 0): [2]}


def test_merge_fetches_appends_per_partition():
    acc = {"p0": [1, 2]}
    assert merge_fetches(acc, {"p0": [3], "p1": [4, 5], "p2": []}) == 3
    assert acc == {"p0": [1, 2, 3], "p1": [4, 5]}
