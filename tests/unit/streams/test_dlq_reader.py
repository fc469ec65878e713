"""streams.dlq_reader: reason rules, summaries, filters and de-duplication of DLQ entries (no broker needed)."""

from __future__ import annotations

import re

import pytest

from streams.dlq import build_dlq_record
from streams.dlq_reader import DlqEntry, Summary, matches, reason_kind, summarize, unique


def entry(offset: int, reasons: list[str], *, source_offset: int | None = None, rejected_at: float | None = 100.0,
          topic: str = "fleetmon.traces", value: bytes | None = b'{"a": 1}') -> DlqEntry:
    src = offset if source_offset is None else source_offset
    record = build_dlq_record(topic=topic, partition=0, offset=src, value=value, reasons=reasons,
                              rejected_at=rejected_at)
    return DlqEntry(0, offset, f"{topic}:0:{src}", record)


@pytest.mark.parametrize(("reason", "kind"), [
    ("tokens_in must be an integer >= 0, got -3", "tokens_in must be an integer >= 0"),
    ("value is 1032 bytes, over the 600-byte limit (FLEETMON_WORKER_MAX_RECORD_BYTES)",
     "value is N bytes, over the N-byte limit (FLEETMON_WORKER_MAX_RECORD_BYTES)"),
    ("value is empty (a tombstone), expected a JSON trace", "value is empty (a tombstone), expected a JSON trace"),
])
def test_reason_kind_drops_the_value(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


def test_summary_counts_rules_sources_and_time_span() -> None:
    entries = [entry(0, ["tokens_in must be an integer >= 0, got -3"], rejected_at=50.0),
               entry(1, ["tokens_in must be an integer >= 0, got -7", "outcome must be one of success, got 'x'"]),
               entry(2, ["tokens_in must be an integer >= 0, got -3"], source_offset=0, rejected_at=150.0)]
    doc = summarize(entries)
    assert doc == {"records": 3, "sources": 2, "first_rejected_at": 50.0, "last_rejected_at": 150.0,
                   "reasons": {"tokens_in must be an integer >= 0": 3, "outcome must be one of success": 1}}
    assert next(iter(doc["reasons"])) == "tokens_in must be an integer >= 0"    # most frequent first
    assert Summary().to_dict()["records"] == 0


def test_filters() -> None:
    e = entry(0, ["tokens_in must be an integer >= 0, got -3"], rejected_at=100.0)
    assert matches(e) and matches(e, since_ts=100.0) and not matches(e, since_ts=100.5)
    assert matches(e, reason=re.compile("tokens_")) and not matches(e, reason=re.compile("latency"))
    assert matches(e, source_topic="fleetmon.traces") and not matches(e, source_topic="other")
    undated = entry(1, ["x"], rejected_at=None)
    assert matches(undated) and not matches(undated, since_ts=0.0)


def test_unique_keeps_the_first_copy_of_each_source_record() -> None:
    entries = [entry(0, ["a"]), entry(1, ["b"]), entry(2, ["a again"], source_offset=0)]
    assert [e.offset for e in unique(entries)] == [0, 1]


def test_entry_payload_tombstone_and_unreadable() -> None:
    assert entry(0, ["x"]).payload() == b'{"a": 1}'
    assert entry(0, ["x"], value=None).payload() is None
    broken = DlqEntry(0, 5, "k", None, "not a DLQ record: ...")
    assert broken.reasons == ["not a DLQ record: ..."] and broken.payload() is None and broken.source == "k"
    assert broken.to_dict() == {"dlq_partition": 0, "dlq_offset": 5, "key": "k", "problem": "not a DLQ record: ..."}
