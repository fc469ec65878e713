"""Consumer lag for ``fleetmon_consumer_lag``: Kafka end offsets against the store's applied offsets.

An edge (kafka-python), used by the exporter's collector; one
:class:`KafkaLag` per exporter process, shared by concurrent scrapes.

A scrape never waits on Kafka. The broker's offsets are read by a background
thread (started by the first scrape) every ``cache_seconds``; a scrape takes
the latest reading. kafka-python waits 30 s (its bootstrap timeout) before it
gives up on a broker that is down or that refuses the credentials, and a
scrape that waited with it outlived Prometheus's scrape timeout (10 s by
default): a Kafka outage blanked every fleetmon metric instead of just the lag.

While the lag is unknown the collector exports ``fleetmon_consumer_lag_up 0``
in its place: the alerts on the lag (worker stalled, lag high) cannot fire
without it, so its absence alerts on its own (FleetmonConsumerLagUnknown).
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
from monitor.kafka_auth import KafkaCredentialsRefused, check_credentials, refused_credentials

log = logging.getLogger("fleetmon.exporter")

Offsets = dict[str, tuple[int, int]]


class KafkaLag:
    """Consumer lag per ``<topic>:<partition>``: end offset − (applied offset + 1).

    Beginning and end offsets come from the broker (kafka-python), read by a
    background thread every ``cache_seconds`` so that a fast scrape loop does
    not hammer the broker; applied offsets come from the store on every scrape.
    A partition with no applied offset lags by everything it holds (end −
    beginning).

    The lag is unknown (``None``: ``fleetmon_consumer_lag`` is left out and
    ``fleetmon_consumer_lag_up`` is 0) until the first reading, and whenever
    the newest reading is older than ``stale_seconds``: the broker cannot be
    reached, or refuses the credentials.
    A failed reading is logged as a warning once per failure streak; a refusal
    of the SASL credentials is logged as an error with the broker's words
    (:mod:`monitor.kafka_auth`: asked before each consumer is built, and again
    when a reading fails). The first scrape waits up
    to ``first_wait_seconds`` for the first reading, so an exporter that starts
    beside a healthy broker reports lag from its first scrape.

    ``fetch`` (default: kafka-python, with the security options of ``kafka``,
    :mod:`monitor.kafka`) reads the offsets; tests pass their own.
    """

    def __init__(self, kafka: KafkaConfig, topics: Sequence[str], cache_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, timeout_ms: int = 3000, *,
                 stale_seconds: float = 60.0, first_wait_seconds: float = 2.0,
                 fetch: Callable[[], Offsets] | None = None) -> None:
        self.kafka = kafka
        self.bootstrap = kafka.bootstrap
        self.topics = [t for t in topics if t]
        self.cache_seconds = cache_seconds
        self.stale_seconds = max(stale_seconds, cache_seconds)
        self.first_wait_seconds = first_wait_seconds
        self.clock = clock
        self.timeout_ms = timeout_ms
        self._fetch = fetch or self._offsets
        self._reading: tuple[float, Offsets] | None = None  # (clock at the reading, offsets)
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._read_once = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def _offsets(self) -> Offsets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import-time warnings
            from kafka import KafkaConsumer, TopicPartition
        if self._consumer is None:
            check_credentials(self.kafka)  # SASL only: a refusal in ~1 s, not kafka-python's 30 s of retries
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

    def refresh(self) -> bool:
        """Read the offsets once, on the caller's thread; False (logged) when the broker did not answer."""
        try:
            offsets = self._fetch()
        except Exception as exc:  # noqa: BLE001 - an unreachable broker must not stop the reader
            self._drop_consumer()
            if not self._failing:
                self._failing = True
                refused = exc.refusal if isinstance(exc, KafkaCredentialsRefused) else self._refusal()
                if refused is not None:
                    log.error("consumer lag unknown: Kafka at %s refused the credentials: %s (check "
                              "kafka.sasl_username / sasl_password)", self.bootstrap, refused)
                else:
                    log.warning("consumer lag unknown: cannot read offsets from Kafka %s: %s", self.bootstrap,
                                exc)
            return False
        finally:
            self._read_once.set()
        if self._failing:
            self._failing = False
            log.info("consumer lag known again: Kafka %s answered", self.bootstrap)
        with self._lock:
            self._reading = (self.clock(), offsets)
        return True

    def _refusal(self) -> str | None:
        try:
            return refused_credentials(self.kafka)
        except Exception:  # noqa: BLE001 - the probe only explains; the warning is logged anyway
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.cache_seconds)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="fleetmon-consumer-lag", daemon=True)
            self._thread.start()

    def lag(self, applied: Mapping[str, int]) -> dict[str, int] | None:
        """The lag of each partition from the newest reading, or None when unknown (never waits on Kafka
        but for the first call's ``first_wait_seconds``)."""
        if self._thread is None:
            self._start()
            self._read_once.wait(self.first_wait_seconds)
        with self._lock:
            reading = self._reading
        if reading is None or self.clock() - reading[0] > self.stale_seconds:
            return None
        out = {}
        for source, (begin, end) in reading[1].items():
            mark = applied.get(source)
            out[source] = max(end - begin if mark is None else end - (mark + 1), 0)
        return out

    def _drop_consumer(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
            self._consumer = None

    def close(self) -> None:
        """Stop the reader thread (it finishes a reading in progress in the background) and the consumer."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        if thread is None or not thread.is_alive():
            self._drop_consumer()
