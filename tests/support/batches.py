"""Batch helpers for tests: a consumer record, one partition decoded, and the offsets of its
Python-validated traces."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streams.batch import Batch, PartitionBatch, decode_batch


@dataclass
class Rec:
    """The fields of aiokafka's ``ConsumerRecord`` the worker reads (``value`` None: a tombstone)."""

    offset: int
    value: bytes | None
    key: bytes | None = None
    timestamp: int | None = None


def decode_records(topic: str, partition: int, records: Sequence[Any], now: float, **options: Any) -> Batch:
    """:func:`streams.batch.decode_batch` of one partition's records."""
    return decode_batch([(topic, partition, records)], now, **options)


def trace_offsets(part: PartitionBatch) -> list[int]:
    """The offsets of ``part.traces`` (the Python-validated ones), same order."""
    return [part.records[position - part.base].offset for position in part.positions]
