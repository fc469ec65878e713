"""Pure batch handling: decode + validate, split by partition, watermark filtering, fold."""

import json
from dataclasses import dataclass

import pytest

from monitor.schema import MAX_FUTURE_SKEW_SECONDS
from monitor.slices import Slicer
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.batch import Batch, decode_batch, fold_batch, merge_fetches
from streams.native import NativeFolder
from tests.support.batches import decode_records, trace_offsets

NOW = 1_800_000_000.0
DIMENSIONS = ("tenant",)


@pytest.fixture(params=["python", "native"])
def native(request):
    """Every batch test runs on both decode paths."""
    if request.param == "python":
        return None
    return NativeFolder(DIMENSIONS, DEFAULT_RESOLUTIONS, max_record_bytes=1024 * 1024, pair_id_slow=True)


def offsets(batch: Batch) -> list[int]:
    """Every record's offset that became a trace, whichever path took it (one partition)."""
    (part,) = batch.parts
    rejected = {r.offset for r in part.rejections}
    return [r.offset for r in part.records if r.offset not in rejected]


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
    (part,) = batch.parts
    assert [t.trace_id for t in part.traces] == ["t1", "t2"]
    assert trace_offsets(part) == [5, 6]
    assert part.rejections == []
    assert (part.first_offset, part.last_offset, part.source) == (5, 6, "fleetmon.traces:0")
    assert batch.ranges() == [("fleetmon.traces:0", 5, 6)]


def test_the_native_path_folds_plain_traces_and_leaves_the_rest_to_python(native):
    records = [Rec(5, trace(1)), Rec(6, trace(2, pair_id="p")), Rec(7, b"{bad"), Rec(8, trace(3, tags={"a": 1}))]
    batch = decode_records("t", 0, records, NOW, native=native)
    (part,) = batch.parts
    assert part.trace_count == 3 and len(part.rejections) == 1
    if native is not None:  # a pair_id goes to Python (the pairer needs the trace), so does the bad record
        assert part.native_count == 2 and [t.trace_id for t in part.traces] == ["t2"]
    assert fold_batch(batch, Slicer(dimensions=DIMENSIONS), NOW).counters == {"traces": 3, "dlq": 1}


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
def test_every_bad_record_is_rejected_with_its_reason(value, reason, native):
    batch = decode_records("fleetmon.traces", 2, [Rec(9, value, partition=2, key=b"k")], NOW, native=native)
    (part,) = batch.parts
    assert part.trace_count == 0
    (rejection,) = part.rejections
    assert any(reason in r for r in rejection.reasons), rejection.reasons
    assert (rejection.offset, rejection.value, rejection.key) == (9, value, b"k")
    assert (part.first_offset, part.last_offset) == (9, 9)


def test_all_problems_of_a_record_are_kept():
    value = json.dumps({"trace_id": "t", "ts": "yesterday", "model_id": "m", "ok": "maybe",
                        "tokens_out": -1}).encode()
    (rejection,) = decode_records("t", 0, [Rec(0, value)], NOW).parts[0].rejections
    assert len(rejection.reasons) == 3


def test_oversized_value_is_rejected_before_parsing(native):
    value = trace(1, tags={"blob": "x" * 2000})
    if native is not None:
        native = NativeFolder(DIMENSIONS, DEFAULT_RESOLUTIONS, max_record_bytes=1000, pair_id_slow=True)
    batch = decode_records("t", 0, [Rec(0, value)], NOW, max_record_bytes=1000, native=native)
    assert "over the 1000-byte limit" in batch.parts[0].rejections[0].reasons[0]


def test_unexpected_validation_errors_become_rejections():
    def exploding_loads(raw):
        return {"trace_id": "t", "ts": NOW, "model_id": "m", "ok": True, "tags": BadMapping(a=1)}

    class BadMapping(dict):
        def items(self):
            raise RuntimeError("boom")

    batch = decode_records("t", 0, [Rec(0, b"{}")], NOW, loads=exploding_loads)
    assert "validation failed unexpectedly: RuntimeError: boom" in batch.parts[0].rejections[0].reasons[0]


def test_mixed_batch_keeps_every_record_once(native):
    records = [Rec(o, trace(o) if o % 3 else b"{bad") for o in range(10, 30)]
    batch = decode_records("t", 0, records, NOW, native=native)
    (part,) = batch.parts
    assert part.trace_count + len(part.rejections) == 20 == batch.size
    assert sorted(offsets(batch) + [r.offset for r in part.rejections]) == list(range(10, 30))


def make_batch(native=None) -> Batch:
    # offsets 100..109; 102 and 109 are bad
    records = [Rec(o, b"bad" if o in (102, 109) else trace(o)) for o in range(100, 110)]
    return decode_records("t", 1, records, NOW, native=native)


@pytest.mark.parametrize("watermark, first, kept", [
    (None, 100, list(range(100, 110))),
    (50, 100, list(range(100, 110))),
    (99, 100, list(range(100, 110))),
    (101, 102, list(range(102, 110))),
    (102, 103, list(range(103, 110))),
    (108, 109, [109]),
])
def test_after_watermark_keeps_exactly_the_later_records(watermark, first, kept, native):
    fresh = make_batch(native).after({"t:1": watermark})
    (part,) = fresh.parts
    assert sorted(offsets(fresh) + [r.offset for r in part.rejections]) == kept
    assert (part.first_offset, part.last_offset) == (first, 109)
    assert part.trace_count == len(kept) - len([o for o in kept if o in (102, 109)])
    assert fold_batch(fresh, Slicer(dimensions=DIMENSIONS), NOW).counters.get("traces", 0) == part.trace_count


@pytest.mark.parametrize("watermark", [109, 500])
def test_after_watermark_at_or_past_the_end_is_empty(watermark, native):
    fresh = make_batch(native).after({"t:1": watermark})
    assert not fresh and fresh.size == 0 and fresh.ranges() == []


def test_a_batch_of_several_partitions_keeps_each_ones_range_and_watermark(native):
    a = [Rec(o, trace(o), partition=0) for o in range(0, 5)]
    b = [Rec(o, b"bad" if o == 41 else trace(o), partition=3) for o in range(40, 43)]
    batch = decode_batch([("t", 0, a), ("t", 3, b)], NOW, native=native)
    assert batch.ranges() == [("t:0", 0, 4), ("t:3", 40, 42)]
    assert (batch.trace_count, batch.rejection_count) == (7, 1)
    rest = batch.after({"t:0": 2, "t:3": 42})
    assert rest.ranges() == [("t:0", 3, 4)] and rest.trace_count == 2


def test_fold_batch_counts_traces_and_dlq_in_one_delta(native):
    batch = make_batch(native)
    delta = fold_batch(batch, Slicer(dimensions=DIMENSIONS), NOW)
    assert delta.counters["traces"] == 8
    assert delta.counters["dlq"] == 2
    # one row per slice grouping: the whole fleet's (id "", no release or arm here) and the tenant rows
    assert delta.totals[""].traces == 8
    assert sum(agg.traces for sid, agg in delta.totals.items() if sid) == 8


def test_fold_batch_of_only_rejections_still_counts_them():
    batch = decode_records("t", 0, [Rec(0, b"x"), Rec(1, b"y")], NOW)
    delta = fold_batch(batch, Slicer(), NOW)
    assert delta.counters == {"dlq": 2}


def test_fold_batch_refuses_a_batch_folded_natively_with_other_dimensions():
    batch = make_batch(NativeFolder(DIMENSIONS, DEFAULT_RESOLUTIONS, max_record_bytes=1024, pair_id_slow=True))
    with pytest.raises(ValueError, match="other dimensions"):
        fold_batch(batch, Slicer(dimensions=("tenant", "locale")), NOW)


def test_merge_fetches_appends_per_partition():
    acc = {"p0": [1, 2]}
    assert merge_fetches(acc, {"p0": [3], "p1": [4, 5], "p2": []}) == 3
    assert acc == {"p0": [1, 2, 3], "p1": [4, 5]}


def test_a_fault_in_the_native_path_falls_back_to_python(caplog):
    class Broken:
        def fold(self, values, now, part_lengths=None):
            raise RuntimeError("boom")

    batch = decode_records("t", 0, [Rec(0, trace(1)), Rec(1, b"bad")], NOW, native=Broken())
    (part,) = batch.parts
    assert [t.trace_id for t in part.traces] == ["t1"] and len(part.rejections) == 1
    assert batch.native is None and "decoding it in Python" in caplog.text
