"""Dead-letter records: what the worker writes for input it cannot count.

A record that is not a valid trace (not UTF-8, not JSON, not an object,
failing schema v1, stamped too far in the future, over the size limit, or
without event time) is written to the DLQ topic as one JSON object::

    {"dlq_version": 1,
     "reasons": ["tokens_in must be an integer >= 0, got -3", ...],
     "source": {"topic": "fleetmon.traces", "partition": 2, "offset": 1234,
                "timestamp_ms": 1795980000000, "key": "pair-17"},
     "payload": "<the original value as text>",        # when it is valid UTF-8
     "payload_base64": "<the original value, base64>",  # otherwise
     "payload_bytes": 812, "payload_truncated": false,
     "payload_sha256": "<hex digest of the whole original value>",
     "rejected_at": 1795980001.25}

Guarantees: every reason is kept; the original bytes are recoverable with
:func:`original_payload` unless ``payload_truncated`` is true, which happens
only for values longer than ``max_payload_bytes`` (6 MiB; the DLQ record
must fit in one Kafka record — :func:`encode_bounded` cuts further when JSON
escaping would make it too big); then a prefix of the value is kept and
``payload_bytes`` / ``payload_sha256`` still describe the whole value. The
source key follows the same rule (``key`` or ``key_base64``). A tombstone
(null value) has neither ``payload`` nor ``payload_base64``.

The DLQ record's Kafka key is ``<topic>:<partition>:<offset>`` of the source
record. Delivery to the DLQ is at-least-once (a worker killed between the DLQ
write and the Redis apply rejects the record again after restart), so readers
that need each rejected record once deduplicate on that key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Protocol

from streams.batch import PartitionBatch

DLQ_VERSION = 1
#: Default cap on the original value copied into a DLQ record (bytes). The
#: broker's record limit is 10 MiB; base64 grows data by 4/3.
DEFAULT_MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
#: Largest encoded DLQ record; JSON escaping can blow text up (a control
#: character takes 6 bytes), so the payload is cut further when needed.
DEFAULT_MAX_RECORD_BYTES = 9 * 1024 * 1024


def _text_or_base64(name: str, raw: bytes, out: dict[str, Any]) -> None:
    try:
        out[name] = raw.decode("utf-8")
    except UnicodeDecodeError:
        out[name + "_base64"] = base64.b64encode(raw).decode("ascii")


def dlq_key(topic: str, partition: int, offset: int) -> bytes:
    """The DLQ record's Kafka key: the source coordinates, for deduplication."""
    return f"{topic}:{partition}:{offset}".encode()


def build_dlq_record(*, topic: str, partition: int, offset: int, value: bytes | None,
                     reasons: list[str], key: bytes | None = None, timestamp_ms: int | None = None,
                     rejected_at: float | None = None,
                     max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> dict[str, Any]:
    """The DLQ object for one rejected source record (see the module docstring)."""
    if not reasons:
        raise ValueError(f"a DLQ record needs at least one reason (source {topic}:{partition}:{offset})")
    if max_payload_bytes < 0:
        raise ValueError(f"max_payload_bytes must be >= 0, got {max_payload_bytes}")
    source: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                              "timestamp_ms": timestamp_ms}
    if key is not None:
        _text_or_base64("key", key[:max_payload_bytes], source)
    record: dict[str, Any] = {"dlq_version": DLQ_VERSION, "reasons": list(reasons), "source": source}
    if value is not None:
        kept = value[:max_payload_bytes]
        if len(kept) < len(value):
            # cut at a character boundary when the value is text, so a long
            # text payload stays readable rather than turning into base64
            try:
                kept.decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.reason == "unexpected end of data":
                    kept = kept[:exc.start]
        _text_or_base64("payload", kept, record)
        record["payload_bytes"] = len(value)
        record["payload_truncated"] = len(kept) < len(value)
        record["payload_sha256"] = hashlib.sha256(value).hexdigest()
    else:
        record["payload_bytes"] = 0
        record["payload_truncated"] = False
    if rejected_at is not None:
        record["rejected_at"] = rejected_at
    return record


def encode_dlq_record(record: Mapping[str, Any]) -> bytes:
    """Serialise a DLQ object (plain JSON, UTF-8, no NaN)."""
    return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def encode_bounded(*, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                   max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, **source: Any) -> bytes:
    """:func:`build_dlq_record` encoded, its payload cut until the record fits ``max_record_bytes``."""
    cap = max_payload_bytes
    while True:
        encoded = encode_dlq_record(build_dlq_record(**source, max_payload_bytes=cap))
        if len(encoded) <= max_record_bytes or cap == 0:
            return encoded
        cap //= 4


class DlqSink(Protocol):
    """Where rejected records go; ``send`` returns once every record is acknowledged."""

    async def send(self, records: list[tuple[bytes, bytes]]) -> None: ...


def part_records(part: PartitionBatch, rejected_at: float) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` of the DLQ record of each rejection of ``part``, in offset order."""
    return [(dlq_key(part.topic, part.partition, rejection.offset),
             encode_bounded(topic=part.topic, partition=part.partition, offset=rejection.offset,
                            value=rejection.value, reasons=rejection.reasons, key=rejection.key,
                            timestamp_ms=rejection.timestamp_ms, rejected_at=rejected_at))
            for rejection in part.rejections]


def parse_dlq_record(raw: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_dlq_record`; raises ValueError on anything else."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a DLQ record: {exc}") from None
    if not isinstance(record, dict) or record.get("dlq_version") != DLQ_VERSION:
        raise ValueError(f"not a DLQ record of version {DLQ_VERSION}: {str(record)[:80]!r}")
    return record


def original_payload(record: Mapping[str, Any]) -> bytes | None:
    """The source value kept in a DLQ object (None for a tombstone)."""
    if "payload" in record:
        return str(record["payload"]).encode("utf-8")
    if "payload_base64" in record:
        return base64.b64decode(record["payload_base64"])
    return None
