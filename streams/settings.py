"""Worker configuration: ``fleetmon.toml`` + environment + command-line flags.

Precedence: flag > environment > config file > default. The shared settings
come from :mod:`monitor.config` (so every component reads the same keys and
``FLEETMON_<SECTION>_<KEY>`` overrides): ``kafka.bootstrap``
(``FLEETMON_KAFKA_BOOTSTRAP``, default ``localhost:9092``), ``kafka.topic``,
``kafka.dlq_topic``, ``kafka.group_id`` (default ``fleetmon``), the Kafka
security options, ``redis.url`` (``FLEETMON_REDIS_URL``, default
``redis://localhost:6379/0``), ``redis.prefix``, ``slices.dimensions``,
``slices.max_values`` (default 100), ``windows.minute_retention`` (48h) and
``windows.hour_retention`` (35d), ``alerts.pair_ttl`` (1h: how long half a
shadow pair waits for its twin) and ``pricing.price_map`` (cost deltas of
pairs).

Tuning knobs of the worker alone (environment or flag):

==================================  ===================================  =========
``FLEETMON_WORKER_BATCH_MAX_RECORDS``  records per batch, at most          200000
``FLEETMON_WORKER_BATCH_WITHIN``       seconds a batch may wait to fill     1.0
``FLEETMON_WORKER_MAX_RECORD_BYTES``   largest value accepted as a trace    1048576
``FLEETMON_WORKER_PARTITIONS``         partitions of topics it creates      4
``FLEETMON_WORKER_SESSION_TIMEOUT``    consumer group session (seconds)     10
``FLEETMON_WORKER_NATIVE``             fold with the native fast path        1
==================================  ===================================  =========

Everything is read once into a frozen :class:`WorkerSettings`; nothing reads
the environment later, so tests build settings explicitly.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from monitor.config import Config, ConfigError, KafkaConfig, load, redact_url
from monitor.slices import DEFAULT_DIMENSIONS
from monitor.windows import Resolution, parse_duration, resolutions_for


@dataclass(frozen=True)
class WorkerSettings:
    bootstrap: str = "localhost:9092"
    redis_url: str = "redis://localhost:6379/0"
    topic: str = "fleetmon.traces"
    dlq_topic: str = "fleetmon.traces.dlq"
    group_id: str = "fleetmon"
    prefix: str = "fleetmon"
    dimensions: tuple[str, ...] = DEFAULT_DIMENSIONS
    max_slice_values: int = 100
    resolutions: tuple[Resolution, ...] = field(default_factory=lambda: resolutions_for(48 * 3600, 35 * 86400))
    batch_max_records: int = 200_000
    batch_within_seconds: float = 1.0
    max_record_bytes: int = 1024 * 1024
    partitions: int = 4
    session_timeout_seconds: float = 10.0
    native: bool = True                       # the compiled fast path (streams.native), when installed
    auto_offset_reset: str = "earliest"
    kafka_security: KafkaConfig = field(default_factory=KafkaConfig)
    pair_ttl_seconds: float | None = 3600.0   # None: no shadow pairing
    price_map: str = ""                      # empty: the bundled map

    def with_(self, **changes: Any) -> "WorkerSettings":
        return replace(self, **changes)

    def aiokafka_options(self) -> dict[str, Any]:
        """Security options for aiokafka clients (which take an SSL context, not file names)."""
        k = self.kafka_security
        if k.security_protocol == "PLAINTEXT":
            return {}
        options: dict[str, Any] = {"security_protocol": k.security_protocol}
        if "SSL" in k.security_protocol:
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=k.ssl_cafile or None, certfile=k.ssl_certfile or None,
                keyfile=k.ssl_keyfile or None, password=k.ssl_password or None)
        if k.sasl_mechanism:
            options["sasl_mechanism"] = k.sasl_mechanism
            options["sasl_plain_username"] = k.sasl_username
            options["sasl_plain_password"] = k.sasl_password
        return options

    def describe(self) -> dict[str, Any]:
        """A loggable summary (the Redis password is masked, Kafka secrets left out)."""
        return {"bootstrap": self.bootstrap, "redis": redact_url(self.redis_url), "topic": self.topic,
                "dlq_topic": self.dlq_topic, "group_id": self.group_id, "prefix": self.prefix,
                "dimensions": list(self.dimensions), "max_slice_values": self.max_slice_values,
                "windows": {r.name: r.retention_seconds for r in self.resolutions},
                "batch_max_records": self.batch_max_records, "batch_within_seconds": self.batch_within_seconds,
                "pair_ttl_seconds": self.pair_ttl_seconds, "native": self.native, "security_protocol": self.kafka_security.security_protocol}


def _positive(kind: type, name: str, text: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name} must be a number > 0, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {text!r}")
    return value


def _switch(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 1 or 0 (true/false, on/off), got {text!r}")


def _dimensions(text: str) -> tuple[str, ...]:
    dims = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dims or len(set(dims)) != len(dims):
        raise ValueError(f"--dimensions must be distinct comma-separated names, got {text!r}")
    return dims


#: worker-only knobs: (flag dest, environment variable, parser)
_WORKER_KNOBS: tuple[tuple[str, str, Any], ...] = (
    ("batch_max_records", "FLEETMON_WORKER_BATCH_MAX_RECORDS", lambda t: _positive(int, "batch max records", t)),
    ("batch_within_seconds", "FLEETMON_WORKER_BATCH_WITHIN", lambda t: _positive(float, "batch within", t)),
    ("max_record_bytes", "FLEETMON_WORKER_MAX_RECORD_BYTES", lambda t: _positive(int, "max record bytes", t)),
    ("partitions", "FLEETMON_WORKER_PARTITIONS", lambda t: _positive(int, "partitions", t)),
    ("session_timeout_seconds", "FLEETMON_WORKER_SESSION_TIMEOUT", lambda t: _positive(float, "session timeout", t)),
    ("native", "FLEETMON_WORKER_NATIVE", lambda t: _switch("native", t)),
)


def settings_from(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None,
                  config: Config | None = None) -> WorkerSettings:
    """Flags (attributes of ``args`` that are not None) over environment over config file over defaults.

    Raises ValueError (ConfigError is one) naming the setting that is wrong.
    """
    env = os.environ if environ is None else environ
    flag = (lambda name: getattr(args, name, None)) if args is not None else (lambda name: None)
    if config is None:
        config = load(flag("config"), env=env)
    try:
        minute = parse_duration(flag("minute_retention") or config.windows.minute_retention)
        hour = parse_duration(flag("hour_retention") or config.windows.hour_retention)
        resolutions = resolutions_for(minute, hour)
    except ValueError as exc:
        raise ConfigError(f"window retention: {exc}") from None
    try:
        pair_ttl = None if flag("no_pairing") else parse_duration(flag("pair_ttl") or config.alerts.pair_ttl)
    except ValueError as exc:
        raise ConfigError(f"--pair-ttl: {exc}") from None
    values: dict[str, Any] = {
        "bootstrap": flag("bootstrap") or config.kafka.bootstrap,
        "redis_url": flag("redis_url") or config.redis.url,
        "topic": flag("topic") or config.kafka.topic,
        "dlq_topic": flag("dlq_topic") or config.kafka.dlq_topic,
        "group_id": flag("group_id") or config.kafka.group_id,
        "prefix": flag("prefix") or config.redis.prefix,
        "dimensions": _dimensions(flag("dimensions")) if flag("dimensions") else config.slices.dimensions,
        "max_slice_values": (_positive(int, "--max-slice-values", flag("max_slice_values"))
                             if flag("max_slice_values") else config.slices.max_values),
        "resolutions": resolutions,
        "kafka_security": config.kafka,
        "pair_ttl_seconds": pair_ttl,
        "price_map": config.pricing.price_map,
    }
    for dest, var, parse in _WORKER_KNOBS:
        text = flag(dest) if flag(dest) is not None else env.get(var)
        if text not in (None, ""):
            try:
                values[dest] = parse(str(text))
            except ValueError as exc:
                source = f"--{dest.replace('_', '-')}" if flag(dest) is not None else var
                raise ValueError(f"{source}: {exc}") from None
    return WorkerSettings(**values)


def add_connection_flags(parser: argparse.ArgumentParser, *, kafka: bool = True, redis: bool = True) -> None:
    parser.add_argument("--config", help="fleetmon.toml (environment overrides apply)")
    if kafka:
        parser.add_argument("--bootstrap", help="Kafka bootstrap servers host:port[,...] "
                                                "(default: config / FLEETMON_KAFKA_BOOTSTRAP / localhost:9092)")
    if redis:
        parser.add_argument("--redis", dest="redis_url",
                            help="Redis URL (default: config / FLEETMON_REDIS_URL / redis://localhost:6379/0)")
        parser.add_argument("--prefix", help="Redis key prefix (default: config / FLEETMON_REDIS_PREFIX / fleetmon)")


def add_window_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minute-retention", help="how long 1-minute windows are kept (default 48h)")
    parser.add_argument("--hour-retention", help="how long 1-hour windows are kept (default 35d)")


def add_pipeline_flags(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``worker`` and ``rebuild`` (they must fold the same way)."""
    parser.add_argument("--topic", help="input topic (default: config / FLEETMON_KAFKA_TOPIC / fleetmon.traces)")
    parser.add_argument("--group-id", help="consumer group (default: config / FLEETMON_KAFKA_GROUP_ID / fleetmon)")
    parser.add_argument("--dimensions", help="slice dimensions, comma-separated (default: "
                                             + ",".join(DEFAULT_DIMENSIONS) + ")")
    parser.add_argument("--max-slice-values", help="distinct values admitted per dimension before the rest "
                                                   "fold into __other__ (default 100)")
    add_window_flags(parser)
    parser.add_argument("--batch-max-records", help="records per batch at most (default 200000)")
    parser.add_argument("--batch-within", dest="batch_within_seconds",
                        help="seconds a batch may wait to fill up (default 1.0)")
    parser.add_argument("--max-record-bytes", help="largest value accepted as a trace; larger ones go to "
                                                   "the DLQ (default 1048576)")
    parser.add_argument("--partitions", help="partitions of the topics the worker creates (default 4)")
    parser.add_argument("--session-timeout", dest="session_timeout_seconds",
                        help="consumer group session timeout in seconds (default 10)")
    parser.add_argument("--pair-ttl", help="how long half a shadow pair waits for its twin, in event time "
                                           "(default: config alerts.pair_ttl / 1h)")
    parser.add_argument("--no-pairing", action="store_true", default=None,
                        help="do not join shadow pairs (the alert engine then has no paired evidence)")
