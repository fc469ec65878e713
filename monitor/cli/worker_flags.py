"""The streaming commands' flags and how they land on the configuration: flag > environment > file > default.

``worker``, ``rebuild``, ``replay`` and ``stats`` share these flags; the
values behind them live in :mod:`monitor.config` (``[kafka]``, ``[redis]``,
``[slices]``, ``[windows]``, ``[alerts]``, ``[worker]``). Errors name the flag
(``--max-slice-values must be a number > 0, got '0'``) or the variable.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from monitor.config import WORKER_KNOBS, Config, ConfigError, load, parse_positive
from monitor.slices import DEFAULT_DIMENSIONS
from monitor.windows import parse_duration
from monitor.worker_settings import WorkerSettings, worker_settings

#: worker knob flags: (flag dest, [worker] key)
_KNOB_FLAGS = (("batch_max_records", "batch_max_records"), ("batch_within_seconds", "batch_within"),
               ("max_record_bytes", "max_record_bytes"), ("partitions", "partitions"),
               ("session_timeout_seconds", "session_timeout"), ("native", "native"))


def _dimensions(text: str) -> tuple[str, ...]:
    dims = tuple(d.strip() for d in text.split(",") if d.strip())
    if not dims or len(set(dims)) != len(dims):
        raise ValueError(f"--dimensions must be distinct comma-separated names, got {text!r}")
    return dims


def settings_from(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None,
                  config: Config | None = None) -> WorkerSettings:
    """Flags (attributes of ``args`` that are not None) over ``config`` (default: loaded from ``--config``
    and ``environ``). Raises ValueError (ConfigError is one) naming the setting that is wrong."""
    env = os.environ if environ is None else environ

    def flag(name: str) -> Any:
        return getattr(args, name, None) if args is not None else None

    if config is None:
        config = load(flag("config"), env=env)
    if flag("pair_ttl") and not flag("no_pairing"):
        try:
            parse_duration(flag("pair_ttl"))
        except ValueError as exc:
            raise ConfigError(f"--pair-ttl: {exc}") from None
    k, r, s, w = config.kafka, config.redis, config.slices, config.windows
    knobs: dict[str, Any] = {}
    for dest, key in _KNOB_FLAGS:
        if flag(dest) not in (None, ""):
            try:
                knobs[key] = WORKER_KNOBS[key](str(flag(dest)))
            except ValueError as exc:
                raise ValueError(f"--{dest.replace('_', '-')}: {exc}") from None
    config = replace(
        config,
        kafka=replace(k, bootstrap=flag("bootstrap") or k.bootstrap, topic=flag("topic") or k.topic,
                      dlq_topic=flag("dlq_topic") or k.dlq_topic, group_id=flag("group_id") or k.group_id),
        redis=replace(r, url=flag("redis_url") or r.url, prefix=flag("prefix") or r.prefix),
        slices=replace(s, dimensions=_dimensions(flag("dimensions")) if flag("dimensions") else s.dimensions,
                       max_values=(parse_positive(int, "--max-slice-values", flag("max_slice_values"))
                                   if flag("max_slice_values") else s.max_values)),
        windows=replace(w, minute_retention=flag("minute_retention") or w.minute_retention,
                        hour_retention=flag("hour_retention") or w.hour_retention),
        alerts=replace(config.alerts, pair_ttl=flag("pair_ttl") or config.alerts.pair_ttl),
        worker=replace(config.worker, **knobs),
    )
    return worker_settings(config, pairing=not flag("no_pairing"))


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
