"""DLQ records: every reason, the original bytes, the source coordinates."""

import base64
import hashlib
import json

import pytest

from streams.dlq import build_dlq_record, dlq_key, encode_bounded, encode_dlq_record, original_payload, parse_dlq_record

SOURCE = {"topic": "fleetmon.traces", "partition": 3, "offset": 1234}


def test_text_payload_is_kept_as_text_with_every_reason_and_the_source():
    value = b'{"trace_id": "t1", "tokens_in": -3}'
    record = build_dlq_record(**SOURCE, value=value, key=b"pair-7", timestamp_ms=1_795_980_000_000,
                              reasons=["tokens_in must be an integer >= 0, got -3", "ts is required"],
                              rejected_at=1_795_980_001.5)
    assert record["reasons"] == ["tokens_in must be an integer >= 0, got -3", "ts is required"]
    assert record["source"] == {"topic": "fleetmon.traces", "partition": 3, "offset": 1234,
                                "timestamp_ms": 1_795_980_000_000, "key": "pair-7"}
    assert record["payload"] == value.decode()
    assert "payload_base64" not in record
    assert record["payload_bytes"] == len(value)
    assert record["payload_truncated"] is False
    assert record["payload_sha256"] == hashlib.sha256(value).hexdigest()
    assert record["rejected_at"] == 1_795_980_001.5
    assert original_payload(parse_dlq_record(encode_dlq_record(record))) == value


def test_invalid_utf8_payload_and_key_go_base64_and_round_trip():
    value = b'{"trace_id": "\xff\xfe"}'
    record = build_dlq_record(**SOURCE, value=value, key=b"\xc3\x28", reasons=["value is not valid UTF-8"])
    assert "payload" not in record
    assert base64.b64decode(record["payload_base64"]) == value
    assert base64.b64decode(record["source"]["key_base64"]) == b"\xc3\x28"
    encoded = encode_dlq_record(record)
    json.loads(encoded)  # plain JSON, valid UTF-8
    assert original_payload(parse_dlq_record(encoded)) == value


def test_oversized_payload_is_truncated_at_a_character_boundary_and_says_so():
    value = ("é" * 100).encode()  # 200 bytes of 2-byte characters
    record = build_dlq_record(**SOURCE, value=value, reasons=["too big"], max_payload_bytes=51)
    assert record["payload_truncated"] is True
    assert record["payload_bytes"] == 200
    assert record["payload"] == "é" * 25  # 50 bytes: the 51st would split a character
    assert record["payload_sha256"] == hashlib.sha256(value).hexdigest()


def test_tombstone_has_no_payload():
    record = build_dlq_record(**SOURCE, value=None, reasons=["value is empty"])
    assert original_payload(record) is None
    assert record["payload_bytes"] == 0 and record["payload_truncated"] is False


def test_a_dlq_record_needs_a_reason():
    with pytest.raises(ValueError, match="at least one reason"):
        build_dlq_record(**SOURCE, value=b"{}", reasons=[])


def test_key_names_the_source_for_deduplication():
    assert dlq_key("fleetmon.traces", 3, 1234) == b"fleetmon.traces:3:1234"


def test_parse_rejects_what_is_not_a_dlq_record():
    with pytest.raises(ValueError, match="not a DLQ record"):
        parse_dlq_record(b'{"reasons": []}')
    with pytest.raises(ValueError, match="not a DLQ record"):
        parse_dlq_record(b"\xff")


def test_escaping_heavy_payload_is_cut_until_the_record_fits():
    value = b"\x01" * 100_000  # valid UTF-8, 6 bytes each once JSON-escaped
    encoded = encode_bounded(**SOURCE, value=value, reasons=["not valid JSON"], max_record_bytes=50_000)
    record = parse_dlq_record(encoded)
    assert len(encoded) <= 50_000
    assert record["payload_truncated"] is True and record["payload_bytes"] == 100_000
    assert original_payload(record) == value[:len(original_payload(record))]
    small = encode_bounded(**SOURCE, value=b"{}", reasons=["x"])
    assert parse_dlq_record(small)["payload"] == "{}"
