"""``fleetmon alerts``: the alert engine as a service over the Redis the workers fill."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time


def cmd_alerts(args: argparse.Namespace) -> int:
    from alerts.engine import AlertEngine
    from alerts.wiring import engine_config, notifier
    from monitor.config import ConfigError, load
    from monitor.store.redis.open import open_store

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"fleetmon alerts: {exc}", file=sys.stderr)
        return 2
    store = open_store(args.redis or config.redis.url, prefix=config.redis.prefix, cluster=config.redis.cluster)
    engine = AlertEngine(store, notifier(config), engine_config(config))
    interval = config.seconds("alerts", "interval")
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    deadline = time.monotonic() + args.duration if args.duration else None
    try:
        while not stop["now"] and (deadline is None or time.monotonic() < deadline):
            engine.tick(time.time())
            if args.once:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    firing = engine.firing()
    print(f"fleetmon alerts: stopped; {len(firing)} alert(s) firing", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alerts", help="run the alert engine over the workers' Redis state")
    p.add_argument("--config", help="fleetmon.toml (environment overrides apply)")
    p.add_argument("--redis", help="Redis URL (default: config / FLEETMON_REDIS_URL)")
    p.add_argument("--once", action="store_true", help="evaluate once and exit")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.set_defaults(func=cmd_alerts)
