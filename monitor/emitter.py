"""Producer SDK: what a fleet operator adds to an agent service to emit traces.

::

    from monitor.emitter import TraceEmitter

    with TraceEmitter(bootstrap="kafka:9092") as emitter:
        emitter.emit({"trace_id": run.id, "model_id": "claude-x", "release": "r42",
                      "task_type": "refund", "tenant": "acme", "outcome": "success",
                      "tokens_in": usage.input, "tokens_out": usage.output,
                      "latency_ms": elapsed_ms})

Guarantees:

* a record is validated against schema v1 *before* it is sent: an invalid
  one raises :class:`~monitor.schema.TraceError` naming every bad field, and
  nothing is sent;
* ``ts`` missing → the emitter stamps the current time (the usual case in a
  live service); a ``ts`` more than five minutes ahead is refused;
* what goes on the wire is the canonical full form (:func:`monitor.schema.
  to_record` of the validated trace) as compact JSON, so the workers read
  exactly what was validated;
* the Kafka key is ``pair_id`` when present (a baseline trace and its shadow
  twin land on the same partition, in order) else ``trace_id``;
* the producer is idempotent with ``acks='all'`` (no duplicates from the
  producer's own retries, no loss on a leader change); ``close`` (and leaving
  the ``with`` block) flushes and waits. Delivery errors surface from
  :meth:`flush` / :meth:`close` as :class:`EmitError` naming the trace;
* with ``kafka=`` (the ``[kafka]`` section of :mod:`monitor.config`) the
  producer gets its security options (SASL, TLS) from :mod:`monitor.kafka`.

Thread safety: the underlying kafka-python producer is thread-safe, so one
emitter may be shared by a service's threads.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from monitor.config import KafkaConfig
from monitor.kafka import kafka_python_producer
from monitor.kafka_auth import check_credentials
from monitor.schema import Trace, TraceError, to_record, validate

DEFAULT_TOPIC = "fleetmon.traces"

try:
    import orjson

    def _dumps(value: Any) -> bytes:
        return orjson.dumps(value)
except ImportError:  # pragma: no cover - orjson is a declared dependency
    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


class EmitError(RuntimeError):
    """Traces that Kafka did not acknowledge; ``failures`` lists (trace_id, error)."""

    def __init__(self, failures: list[tuple[str, str]]) -> None:
        self.failures = failures
        shown = "; ".join(f"{tid}: {err}" for tid, err in failures[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} trace(s) were not delivered to Kafka: {shown}{more}")


def encode_trace(trace: Trace) -> tuple[bytes, bytes]:
    """``(key, value)`` of a validated trace as the emitter sends it."""
    key = (trace.pair_id or trace.trace_id).encode("utf-8")
    return key, _dumps(to_record(trace))


def prepare(record: Mapping[str, Any] | Trace, now: float, *, from_text: bool = False,
            where: str = "") -> Trace:
    """Validate ``record`` (stamping ``ts`` = ``now`` when it has none)."""
    if isinstance(record, Trace):
        trace = record
        if trace.ts is None:
            trace = validate({**to_record(trace), "ts": now}, now=now, where=where)
        elif trace.ts > now + 300:
            trace = validate(to_record(trace), now=now, where=where)  # raises the future-ts error
        return trace
    if not isinstance(record, Mapping):
        raise TraceError([f"a trace must be a JSON object, got {type(record).__name__}"], where)
    if record.get("ts") in (None, ""):
        record = {**record, "ts": now}
    return validate(record, now=now, from_text=from_text, where=where)


class TraceEmitter:
    """Validates and sends traces to Kafka (see the module docstring).

    ``producer`` may be injected (tests, or a shared KafkaProducer); otherwise
    one is built from ``kafka`` (bootstrap and security; default: no security)
    with ``bootstrap`` overriding its servers (default: ``kafka.bootstrap``
    when ``kafka`` is given, else env ``FLEETMON_KAFKA_BOOTSTRAP`` or
    ``localhost:9092``), and ``producer_config`` overrides last. When SASL is
    configured, the broker is asked once whether it takes the credentials, and a
    refusal raises :class:`monitor.kafka_auth.KafkaCredentialsRefused` (a
    ``ConnectionError``) with the broker's words instead of kafka-python's 30 s
    bootstrap timeout.
    """

    def __init__(self, bootstrap: str | None = None, topic: str = DEFAULT_TOPIC, *,
                 producer: Any = None, clock: Callable[[], float] = time.time,
                 kafka: KafkaConfig | None = None, **producer_config: Any) -> None:
        self.topic = topic
        self.clock = clock
        self.sent = 0
        self._failures: list[tuple[str, str]] = []
        if producer is None:
            from kafka import KafkaProducer

            if kafka is None:
                kafka = KafkaConfig(bootstrap=os.environ.get("FLEETMON_KAFKA_BOOTSTRAP") or "localhost:9092")
            if bootstrap:
                kafka = replace(kafka, bootstrap=bootstrap)
            # kafka-python would retry a refused password for 30 s and then say only that it could
            # not bootstrap; the broker's own refusal is asked for first (SASL only).
            check_credentials(kafka)
            options = kafka_python_producer(kafka, client_id="fleetmon-emitter", enable_idempotence=True,
                                            acks="all", linger_ms=5, batch_size=256 * 1024)
            producer = KafkaProducer(**{**options, **producer_config})
        self.producer = producer
        self._closed = False

    def emit(self, record: Mapping[str, Any] | Trace, *, where: str = "") -> Trace:
        """Validate and send one trace; returns the validated trace.

        Raises TraceError (nothing sent) when the record is not a valid trace.
        Sending is asynchronous; :meth:`flush` waits for acknowledgements.
        """
        if self._closed:
            raise RuntimeError("TraceEmitter is closed")
        trace = prepare(record, self.clock(), where=where)
        self.send_trace(trace)
        return trace

    def send_trace(self, trace: Trace) -> None:
        """Send an already validated trace (with ``ts``)."""
        key, value = encode_trace(trace)
        future = self.producer.send(self.topic, value=value, key=key)
        future.add_errback(self._failed, trace.trace_id)
        self.sent += 1

    def _failed(self, trace_id: str, exc: BaseException) -> None:
        self._failures.append((trace_id, repr(exc)))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every sent trace is acknowledged; raise EmitError for any that failed."""
        self.producer.flush(timeout=timeout)
        if self._failures:
            failures, self._failures = self._failures, []
            raise EmitError(failures)

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            self.producer.close(timeout=timeout)

    def __enter__(self) -> TraceEmitter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
