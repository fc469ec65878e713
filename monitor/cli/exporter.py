"""``fleetmon exporter``: serve the Prometheus exporter over a Redis store.

Heavy imports (redis, prometheus_client) happen inside the command.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Any


def _load_extra(spec: str, store: Any, prices: Any) -> Any:
    """``module:attr`` → the collector ``attr(store, prices)`` returns."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--extra must look like package.module:factory, got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--extra {spec}: cannot load it: {exc}") from exc
    return factory(store, prices)


def _deprecated_topic() -> str | None:
    """``FLEETMON_TOPIC``: the exporter's old name for ``kafka.topic`` (``FLEETMON_KAFKA_TOPIC``), still honoured."""
    topic = os.environ.get("FLEETMON_TOPIC")
    if topic:
        logging.getLogger("fleetmon.exporter").warning("FLEETMON_TOPIC is deprecated; set FLEETMON_KAFKA_TOPIC "
                                                       "(kafka.topic) instead")
    return topic


def cmd_exporter(args: argparse.Namespace) -> int:
    from alerts.saved_findings import from_store
    from monitor.config import ConfigError, load
    from monitor.exporter.collector import serve
    from monitor.exporter.comparisons import ComparisonCollector
    from monitor.exporter.lag import KafkaLag
    from monitor.pricing import PriceMap, PricingError
    from monitor.redact import redact_url
    from monitor.store.base import StoreError
    from monitor.store.redis.open import open_store
    from monitor.windows import parse_duration

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        # fleetmon.toml (+ FLEETMON_* overrides) gives the defaults; flags win.
        config = load(args.config)
        args.redis = args.redis or config.redis.url
        args.prefix = args.prefix or config.redis.prefix
        args.port = config.exporter.port if args.port is None else args.port
        args.host = args.host or config.exporter.host
        prices = PriceMap.load(args.price_map or config.pricing.price_map or None)
        active_window = parse_duration(args.active_window)
        store = open_store(args.redis, prefix=args.prefix, cluster=config.redis.cluster)
        extras = [_load_extra(spec, store, prices) for spec in args.extra or ()]
        # The alert engine's latest evidence (fleetmon_comparison_*), from the snapshot it saves.
        extras.append(ComparisonCollector(from_store(store, clock=time.time), config.slices.dimensions))
    except (ConfigError, PricingError, StoreError, ValueError) as exc:
        print(f"fleetmon exporter: {exc}", file=sys.stderr)
        return 2
    # Lag is on only when Kafka is named explicitly (the flag, FLEETMON_KAFKA_BOOTSTRAP or a --config file),
    # not by the built-in default.
    bootstrap = (args.kafka_bootstrap or os.environ.get("FLEETMON_KAFKA_BOOTSTRAP")
                 or (config.kafka.bootstrap if args.config else None))
    topics = [t for t in (args.topic or _deprecated_topic() or config.kafka.topic).split(",") if t]
    lag = KafkaLag(replace(config.kafka, bootstrap=bootstrap), topics) if bootstrap else None
    try:
        server = serve(store, prices, args.port, args.host, active_window_seconds=active_window,
                       extra_collectors=extras, consumer_lag=lag, max_series=config.exporter.max_series)
    except OSError as exc:
        print(f"fleetmon exporter: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    print(f"fleetmon exporter: serving http://{host}:{port}/metrics (redis {redact_url(args.redis)}, prefix "
          f"{args.prefix!r}, consumer lag {'from ' + bootstrap if bootstrap else 'off'})",
          file=sys.stderr, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.shutdown()
    server.server_close()
    if lag is not None:
        lag.close()
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("exporter", help="serve Prometheus metrics read from the Redis store at scrape time")
    p.add_argument("--config", help="fleetmon.toml (environment overrides apply); flags below win")
    p.add_argument("--port", type=int, default=None, help="TCP port (default exporter.port, 9464)")
    p.add_argument("--host", default=None, help="address to listen on (default exporter.host, 127.0.0.1)")
    p.add_argument("--redis", default=None,
                   help="Redis URL (default redis.url / $FLEETMON_REDIS_URL, redis://localhost:6379/0)")
    p.add_argument("--prefix", default=None, help="Redis key prefix of the store (default redis.prefix, fleetmon)")
    p.add_argument("--price-map", help="TOML price map (default: the bundled map)")
    p.add_argument("--active-window", default="2h",
                   help="slices with traffic this recent get windowed gauges (default 2h)")
    p.add_argument("--kafka-bootstrap", help="Kafka bootstrap servers for fleetmon_consumer_lag "
                   "(default $FLEETMON_KAFKA_BOOTSTRAP, else kafka.bootstrap of --config; off when none is set)")
    p.add_argument("--topic", help="topic(s) whose lag to report, comma-separated (default $FLEETMON_TOPIC "
                   "or kafka.topic, fleetmon.traces)")
    p.add_argument("--extra", action="append", metavar="MODULE:FACTORY",
                   help="add the collector FACTORY(store, prices) returns (repeatable); the "
                   "fleetmon_comparison_* metrics of the alert engine are always included")
    p.set_defaults(func=cmd_exporter)
