"""Reading the dead-letter topic back: what ``fleetmon dlq list``, ``export`` and ``redrive`` stand on.

:func:`read_dlq` reads a snapshot of the DLQ topic — every record from the
beginning up to the end offsets seen when it starts (records that arrive
later are left for the next run), partition by partition, with a
group-less consumer: reading commits nothing and moves no worker's offsets.
The consumer is built from the one Kafka configuration (:mod:`monitor.kafka`),
so SASL / TLS apply.

Delivery to the DLQ is at-least-once (:mod:`streams.dlq`), so the same
source record can be there twice; :func:`unique` keeps the first copy of each
source coordinate (the DLQ record's key), which is what ``redrive`` sends.

:func:`reason_kind` folds a reason into its rule (``"tokens_in must be an
integer >= 0, got -3"`` → ``"tokens_in must be an integer >= 0"``) so that a
summary counts rules, not values.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from monitor.config import KafkaConfig
from monitor.kafka import kafka_python_consumer
from streams.dlq import original_payload, parse_dlq_record

#: Give up when no record arrived for this long while the snapshot is not read yet.
STALL_SECONDS = 30.0

_VALUE_TAIL = re.compile(r",? got .*$")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class DlqEntry:
    """One DLQ record: where it sits in the DLQ topic and what it says (``record`` is None when unreadable)."""

    partition: int
    offset: int
    key: str
    record: dict[str, Any] | None
    problem: str = ""

    @property
    def reasons(self) -> list[str]:
        return [str(r) for r in (self.record or {}).get("reasons", [])] or [self.problem]

    @property
    def rejected_at(self) -> float | None:
        value = (self.record or {}).get("rejected_at")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def source(self) -> str:
        src = (self.record or {}).get("source") or {}
        if isinstance(src, dict) and "topic" in src:
            return f"{src.get('topic')}:{src.get('partition')}@{src.get('offset')}"
        return self.key

    def payload(self) -> bytes | None:
        """The original value (None for a tombstone or an unreadable DLQ record)."""
        return original_payload(self.record) if self.record is not None else None

    @property
    def truncated(self) -> bool:
        return bool((self.record or {}).get("payload_truncated"))

    def to_dict(self) -> dict[str, Any]:
        return {"dlq_partition": self.partition, "dlq_offset": self.offset, "key": self.key,
                **(self.record or {"problem": self.problem})}


def reason_kind(reason: str) -> str:
    """The rule of a reason without the offending value (for counting).

    ``"…, got <value>"`` loses its tail; a reason without one has its numbers
    replaced by ``N`` (``"value is 1032 bytes, over the 600-byte limit"`` →
    ``"value is N bytes, over the N-byte limit"``).
    """
    kind = _VALUE_TAIL.sub("", reason).strip()
    if kind == reason.strip():
        kind = _NUMBER.sub("N", kind)
    return kind or reason


class Summary:
    """Records, distinct sources and counts per reason rule, accumulated one entry at a time."""

    def __init__(self) -> None:
        self.records = 0
        self.kinds: Counter[str] = Counter()
        self.keys: set[str] = set()
        self.first: float | None = None
        self.last: float | None = None

    def add(self, entry: DlqEntry) -> None:
        self.records += 1
        self.keys.add(entry.key)
        for reason in entry.reasons:
            self.kinds[reason_kind(reason)] += 1
        ts = entry.rejected_at
        if ts is not None:
            self.first = ts if self.first is None else min(self.first, ts)
            self.last = ts if self.last is None else max(self.last, ts)

    def to_dict(self) -> dict[str, Any]:
        return {"records": self.records, "sources": len(self.keys), "first_rejected_at": self.first,
                "last_rejected_at": self.last, "reasons": dict(self.kinds.most_common())}


def summarize(entries: Iterable[DlqEntry]) -> dict[str, Any]:
    """:class:`Summary` of ``entries`` as a dict (most frequent reason first)."""
    summary = Summary()
    for entry in entries:
        summary.add(entry)
    return summary.to_dict()


def matches(entry: DlqEntry, *, since_ts: float | None = None, reason: re.Pattern[str] | None = None,
            source_topic: str | None = None) -> bool:
    """The ``list`` / ``export`` / ``redrive`` filters: rejected at or after ``since_ts``, a reason matching."""
    if since_ts is not None and (entry.rejected_at is None or entry.rejected_at < since_ts):
        return False
    if reason is not None and not any(reason.search(r) for r in entry.reasons):
        return False
    src = (entry.record or {}).get("source") or {}
    return source_topic is None or (isinstance(src, dict) and src.get("topic") == source_topic)


def unique(entries: Iterable[DlqEntry]) -> Iterator[DlqEntry]:
    """The first copy of each source record (DLQ key)."""
    seen: set[str] = set()
    for entry in entries:
        if entry.key not in seen:
            seen.add(entry.key)
            yield entry


def read_dlq(kafka: KafkaConfig, topic: str, *, consumer: Any = None,
             clock: Callable[[], float] = time.monotonic) -> Iterator[DlqEntry]:
    """Every record of ``topic`` up to its end offsets at the start (see the module docstring).

    Raises LookupError when the topic does not exist, TimeoutError when the
    broker stops delivering for :data:`STALL_SECONDS` before the snapshot is read.
    """
    if consumer is None:
        from kafka import KafkaConsumer

        # no group, no commits, and a mistyped topic is reported rather than created
        consumer = KafkaConsumer(**kafka_python_consumer(kafka, client_id="fleetmon-dlq", group_id=None,
                                                         enable_auto_commit=False, allow_auto_create_topics=False))
    from kafka import TopicPartition

    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise LookupError(f"the DLQ topic {topic!r} does not exist on {kafka.bootstrap}")
        parts = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = {tp: end for tp, end in consumer.end_offsets(parts).items()}
        pending = {tp for tp in parts if consumer.position(tp) < ends[tp]}
        last_progress = clock()
        while pending:
            polled = consumer.poll(timeout_ms=1000, max_records=2000)
            for tp, messages in polled.items():
                for m in messages:
                    if m.offset < ends[tp]:
                        yield _entry(m)
                        last_progress = clock()
            for tp in list(pending):
                if consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
            if pending and clock() - last_progress > STALL_SECONDS:
                left = ", ".join(f"{tp.partition}@{consumer.position(tp)}<{ends[tp]}" for tp in sorted(pending))
                raise TimeoutError(f"reading the DLQ topic {topic!r} stalled for {STALL_SECONDS:g} s (left: {left})")
    finally:
        consumer.close()


def _entry(message: Any) -> DlqEntry:
    key = message.key.decode("utf-8", "replace") if message.key is not None else f"{message.partition}@{message.offset}"
    try:
        record = parse_dlq_record(message.value if message.value is not None else b"null")
    except ValueError as exc:
        return DlqEntry(message.partition, message.offset, key, None, str(exc))
    return DlqEntry(message.partition, message.offset, key, record)
