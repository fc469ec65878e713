"""Consumer lag for ``fleetmon_consumer_lag``: Kafka end offsets against the store's applied offsets.

An edge (kafka-python), used by the exporter's collector; one
:class:`KafkaLag` per exporter process, shared by concurrent scrapes.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from monitor.config import KafkaConfig
from monitor.kafka import kafka_python_consumer

log = logging.getLogger("fleetmon.exporter")


class KafkaLag:
    """Consumer lag per ``<topic>:<partition>``: end offset − (applied offset + 1).

    End offsets come from the broker (kafka-python), cached for
    ``cache_seconds`` so that a fast scrape loop does not hammer the broker;
    applied offsets come from the store on every scrape. A partition with no
    applied offset lags by everything it holds (end − beginning). When the
    broker cannot be reached the lag is unknown (``None``), logged once per
    cache period, and the metric is simply not exported. The consumer takes
    the security options of ``kafka`` (:mod:`monitor.kafka`), so lag is read
    on SASL / TLS clusters too.
    """

    def __init__(self, kafka: KafkaConfig, topics: Sequence[str], cache_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, timeout_ms: int = 3000) -> None:
        self.kafka = kafka
        self.bootstrap = kafka.bootstrap
        self.topics = [t for t in topics if t]
        self.cache_seconds = cache_seconds
        self.clock = clock
        self.timeout_ms = timeout_ms
        self._cached: tuple[float, dict[str, tuple[int, int]] | None] | None = None
        self._consumer: Any = None
        self._lock = threading.Lock()

    def _offsets(self) -> dict[str, tuple[int, int]] | None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import-time warnings
            from kafka import KafkaConsumer, TopicPartition
        if self._consumer is None:
            self._consumer = KafkaConsumer(**kafka_python_consumer(
                self.kafka, client_id="fleetmon-exporter-lag", group_id=None, enable_auto_commit=False,
                request_timeout_ms=max(self.timeout_ms, 1000) + 1000))
        parts = []
        for topic in self.topics:
            for partition in sorted(self._consumer.partitions_for_topic(topic) or ()):
                parts.append(TopicPartition(topic, partition))
        if not parts:
            return {}
        ends = self._consumer.end_offsets(parts)
        begins = self._consumer.beginning_offsets(parts)
        return {f"{tp.topic}:{tp.partition}": (begins[tp], ends[tp]) for tp in parts}

    def lag(self, applied: Mapping[str, int]) -> dict[str, int] | None:
        with self._lock:
            now = self.clock()
            if self._cached is None or now - self._cached[0] >= self.cache_seconds:
                try:
                    offsets = self._offsets()
                except Exception as exc:  # noqa: BLE001 - an unreachable broker must not fail a scrape
                    log.warning("consumer lag unknown: cannot read offsets from Kafka %s: %s", self.bootstrap, exc)
                    self.close()
                    offsets = None
                self._cached = (now, offsets)
            offsets = self._cached[1]
        if offsets is None:
            return None
        out = {}
        for source, (begin, end) in offsets.items():
            mark = applied.get(source)
            out[source] = max(end - begin if mark is None else end - (mark + 1), 0)
        return out

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
            self._consumer = None
