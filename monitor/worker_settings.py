"""What a worker (or a rebuild) runs with, resolved once from the configuration's ``[worker]`` and friends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.config import Config, ConfigError, KafkaConfig
from monitor.groupings import GroupingSet
from monitor.pairing import DEFAULT_CAPS, Caps
from monitor.redact import redact_url
from monitor.slices import DEFAULT_DIMENSIONS
from monitor.windows import Resolution, resolutions_for


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker (or a rebuild) runs with, resolved once (tests build it explicitly); pair TTL None: no pairing."""

    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    redis_url: str = field(default="redis://localhost:6379/0", repr=False)
    prefix: str = "fleetmon"
    redis_cluster: bool = False               # redis_url names a node of a Redis Cluster
    dimensions: tuple[str, ...] = DEFAULT_DIMENSIONS
    max_slice_values: int = 100
    #: The slice groupings and budgets (monitor/groupings.py); None: the defaults of ``dimensions``.
    groupings: GroupingSet | None = None
    resolutions: tuple[Resolution, ...] = field(default_factory=lambda: resolutions_for(48 * 3600, 35 * 86400))
    batch_max_records: int = 200_000
    batch_within_seconds: float = 1.0
    max_record_bytes: int = 1024 * 1024
    partitions: int = 4
    session_timeout_seconds: float = 10.0
    native: bool = True
    native_threads: int = 1                   # threads that read a batch's records natively
    pair_ttl_seconds: float | None = 3600.0
    #: Per-trace caps of the paired cost and latency sums (alerts.cost_cap_usd, alerts.latency_cap).
    pair_caps: Caps = DEFAULT_CAPS
    price_map: str = ""                       # empty: the bundled map

    bootstrap = property(lambda self: self.kafka.bootstrap)
    topic = property(lambda self: self.kafka.topic)
    dlq_topic = property(lambda self: self.kafka.dlq_topic)
    group_id = property(lambda self: self.kafka.group_id)

    def describe(self) -> dict[str, Any]:
        """A loggable summary (the Redis password is masked, Kafka secrets left out)."""
        return {"bootstrap": self.bootstrap, "redis": redact_url(self.redis_url), "topic": self.topic,
                "dlq_topic": self.dlq_topic, "group_id": self.group_id, "prefix": self.prefix,
                "redis_cluster": self.redis_cluster,
                "dimensions": list(self.dimensions), "max_slice_values": self.max_slice_values,
                "grouping_budgets": {g.name: g.budget for g in self.groupings.groupings if g.name}
                if self.groupings is not None else "defaults",
                "windows": {r.name: r.retention_seconds for r in self.resolutions},
                "batch_max_records": self.batch_max_records, "batch_within_seconds": self.batch_within_seconds,
                "pair_ttl_seconds": self.pair_ttl_seconds, "native": self.native,
                "native_threads": self.native_threads,
                "security_protocol": self.kafka.security_protocol}


def worker_settings(config: Config, *, pairing: bool = True) -> WorkerSettings:
    """The worker's settings from ``config``; ConfigError names a window retention that cannot be used."""
    try:
        resolutions = resolutions_for(config.seconds("windows", "minute_retention"),
                                      config.seconds("windows", "hour_retention"))
    except ValueError as exc:
        raise ConfigError(f"window retention: {exc}") from None
    w = config.worker
    return WorkerSettings(
        kafka=config.kafka, redis_url=config.redis.url, prefix=config.redis.prefix,
        redis_cluster=config.redis.cluster,
        dimensions=config.slices.dimensions, max_slice_values=config.slices.max_values, resolutions=resolutions,
        groupings=config.slices.grouping_set(),
        batch_max_records=w.batch_max_records, batch_within_seconds=w.batch_within,
        max_record_bytes=w.max_record_bytes, partitions=w.partitions, session_timeout_seconds=w.session_timeout,
        native=w.native, native_threads=w.native_threads,
        pair_ttl_seconds=config.seconds("alerts", "pair_ttl") if pairing else None,
        pair_caps=pair_caps(config),
        price_map=config.pricing.price_map)


def pair_caps(config: Config) -> Caps:
    """The per-trace caps of the capped cost and latency sums: the workers count with them, the engine checks."""
    return Caps(config.alerts.cost_cap_usd, config.seconds("alerts", "latency_cap"))
