"""``fleetmon run``, ``fleetmon simulate`` and ``fleetmon config check`` (edge: I/O and the clock)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO


def _scenario(args: argparse.Namespace, start_ts: float) -> Any:
    from monitor.run.simulate import Scenario

    return Scenario(rate_per_second=args.rate, duration_seconds=args.sim_duration, start_ts=start_ts,
                    regression_at_seconds=None if args.regression_at < 0 else args.regression_at,
                    regression_drop=args.drop, harmful_rise=args.harmful_rise, canary_share=args.canary_share,
                    shadow_share=args.shadow_share, seed=args.seed)


def _add_scenario_flags(p: argparse.ArgumentParser, duration: float) -> None:
    p.add_argument("--rate", type=float, default=20.0, help="requests per second (default 20)")
    p.add_argument("--sim-duration", type=float, default=duration, help=f"seconds of traffic (default {duration:g})")
    p.add_argument("--regression-at", type=float, default=60.0,
                   help="seconds until the candidate regresses; negative = never (A/A) (default 60)")
    p.add_argument("--drop", type=float, default=0.20, help="success drop of the regression (default 0.20)")
    p.add_argument("--harmful-rise", type=float, default=0.0, help="harmful-action rise of the regression")
    p.add_argument("--shadow-share", type=float, default=1.0, help="share of requests mirrored as shadow pairs")
    p.add_argument("--canary-share", type=float, default=0.0, help="share of requests served by a canary")
    p.add_argument("--seed", type=int, default=0)


# -- fleetmon simulate ---------------------------------------------------------------------
def cmd_simulate(args: argparse.Namespace) -> int:
    from monitor.run.simulate import generate

    start = args.start if args.start is not None else time.time()
    try:
        scenario = _scenario(args, start)
    except ValueError as exc:
        print(f"fleetmon simulate: {exc}", file=sys.stderr)
        return 2
    records = generate(scenario)
    if args.kafka is not None:
        from monitor.config import ConfigError, load
        from monitor.emitter import TraceEmitter
        from monitor.kafka_auth import KafkaCredentialsRefused

        try:
            kafka = load(args.config).kafka  # security (SASL/TLS) from --config and FLEETMON_KAFKA_*
        except ConfigError as exc:
            print(f"fleetmon simulate: {exc}", file=sys.stderr)
            return 2
        args.kafka = args.kafka or kafka.bootstrap
        args.topic = args.topic or kafka.topic
        n = 0
        try:
            emitter = TraceEmitter(args.kafka, topic=args.topic, kafka=kafka)
        except KafkaCredentialsRefused as exc:
            print(f"fleetmon simulate: {exc}", file=sys.stderr)
            return 3
        with emitter:
            for record in records:
                if args.realtime:
                    _sleep_until(record["ts"])
                emitter.emit(record)
                n += 1
        print(f"fleetmon simulate: sent {n} traces to {args.topic} at {args.kafka}", file=sys.stderr)
        return 0
    out: TextIO = sys.stdout if args.output in (None, "-") else open(args.output, "w", encoding="utf-8")
    try:
        for record in records:
            if args.realtime:
                _sleep_until(record["ts"])
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _sleep_until(ts: float) -> None:
    delay = ts - time.time()
    if delay > 0:
        time.sleep(delay)


# -- fleetmon config check ----------------------------------------------------------------
def cmd_config_check(args: argparse.Namespace) -> int:
    from monitor.config import ConfigError, load

    try:
        config = load(args.file)
    except ConfigError as exc:
        print(f"fleetmon config check: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(config.redacted(), indent=2) if args.show else f"{config.source}: ok")
    return 0


# -- fleetmon run ---------------------------------------------------------------------------
class _Http:
    """``/metrics`` (the exporter's registry) and ``/healthz`` on one port."""

    def __init__(self, registry: Any, health: Any, host: str, port: int) -> None:
        from monitor.exporter.exposition import render

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = render(registry, self.headers.get("Accept"))
                    code = 200
                elif path == "/healthz":
                    body, ctype, code = json.dumps(health()).encode(), "application/json", 200
                else:
                    body, ctype, code = b"not found: try /metrics or /healthz\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _input_batches(path: str, batch: int = 2000) -> Iterator[list[tuple[str, Any]]]:
    """``(where, record)`` batches of a JSONL or CSV file (``-``: JSONL on stdin)."""
    from monitor.offline.loaders import detect_format, iter_lines
    from monitor.run.pipeline import NotJson

    fmt = detect_format(path)
    handle = sys.stdin if path == "-" else open(path, encoding="utf-8", errors="surrogateescape", newline="")
    name = "stdin" if path == "-" else path
    out: list[tuple[str, Any]] = []
    try:
        for number, record, _from_text, problem in iter_lines(handle, fmt, name):
            out.append((f"line {number} of {name}", NotJson(problem) if problem else record))
            if len(out) >= batch:
                yield out
                out = []
        if out:
            yield out
    finally:
        if handle is not sys.stdin:
            handle.close()


def cmd_run(args: argparse.Namespace) -> int:
    from alerts.engine import from_engine
    from alerts.wiring import notifier
    from monitor.config import ConfigError, load
    from monitor.exporter.collector import build_registry
    from monitor.exporter.comparisons import ComparisonCollector
    from monitor.run.pipeline import Pipeline
    from monitor.schema import TraceError
    from monitor.store.base import Store
    from monitor.store.memory import MemoryStore

    try:
        config = load(args.config)
        if args.kafka or args.redis:
            from dataclasses import replace
            if args.kafka:
                config = replace(config, kafka=replace(config.kafka, bootstrap=args.kafka))
            if args.redis:
                config = replace(config, redis=replace(config.redis, url=args.redis))
    except ConfigError as exc:
        print(f"fleetmon run: {exc}", file=sys.stderr)
        return 2

    if args.kafka:
        from monitor.kafka_auth import refused_credentials

        refused = refused_credentials(config.kafka)  # kafka-python would retry a refusal for 30 s, silently
        if refused is not None:
            print(f"fleetmon run: Kafka at {config.kafka.bootstrap} refused the credentials: {refused}",
                  file=sys.stderr)
            return 3

    if args.input and args.input.lower().endswith(".csv"):
        print("fleetmon run: --input takes JSONL traces (one object per line); "
              "stream a CSV with `fleetmon replay FILE.csv` into Kafka instead", file=sys.stderr)
        return 2

    def report_invalid(where: str, exc: TraceError) -> None:
        print(f"fleetmon run: invalid trace, {exc}", file=sys.stderr)

    guard = None
    store: Store
    if args.redis:
        from monitor.store.redis.open import open_store
        from monitor.store.redis.store import RedisGuard
        redis_store = open_store(config.redis.url, prefix=config.redis.prefix, cluster=config.redis.cluster)
        store = redis_store
        guard = RedisGuard(redis_store, config.slices.max_values)
    else:
        store = MemoryStore()
    tick = args.tick
    if tick is None and args.input:
        tick = max(60.0, config.seconds("alerts", "interval"))  # replay: a day evaluates in seconds
    pipeline = Pipeline(config, store, notifier(config), guard=guard, tick_seconds=tick,
                        on_invalid=report_invalid)
    clock = {"now": time.time()}
    registry, collector = build_registry(store, pipeline.prices, now=lambda: clock["now"],
                                         max_series=config.exporter.max_series)
    collector.add_extra(ComparisonCollector(from_engine(pipeline.engine), config.slices.dimensions))

    def health() -> dict[str, Any]:
        return {"status": "ok", "traces": pipeline.stats.traces, "invalid": pipeline.stats.invalid,
                "firing": len(pipeline.engine.firing()), "evaluations": pipeline.stats.ticks}

    try:
        http = _Http(registry, health, args.host, args.port if args.port is not None else config.exporter.port)
    except OSError as exc:
        print(f"fleetmon run: cannot serve /metrics on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    source = f"input {args.input}" if args.input else (f"kafka {config.kafka.bootstrap}" if args.kafka
                                                       else "simulator (baseline + shadow; regression at "
                                                            f"{args.regression_at:g} s)")
    deadline = time.monotonic() + args.duration if args.duration else None
    live = None
    if not args.headless:
        from rich.live import Live

        from monitor.run.live_view import render
        live = Live(render(pipeline, clock["now"], source), refresh_per_second=2, screen=False)
        live.start()
    try:
        for now in _drive(args, config, pipeline, stop, deadline):
            clock["now"] = now
            if live is not None:
                live.update(render(pipeline, now, source))
        pipeline.flush(clock["now"])
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.update(render(pipeline, clock["now"], source))
            live.stop()
        http.close()
    _summary(pipeline, source)
    return 0


def _drive(args: argparse.Namespace, config: Any, pipeline: Any, stop: threading.Event,
           deadline: float | None) -> Iterator[float]:
    """Feed the pipeline from the chosen source; yields the clock after each step."""
    def over() -> bool:
        return stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

    if args.input:
        now = 0.0
        for batch in _input_batches(args.input):
            pipeline.feed(batch, now, event_time=True)
            now = pipeline.stats.last_ts or now
            yield now
            if over():
                return
        return
    if args.kafka:
        from kafka import KafkaConsumer

        from monitor.kafka import kafka_python_consumer
        from monitor.limits import loads
        from monitor.run.pipeline import NotJson

        consumer = KafkaConsumer(config.kafka.topic, **kafka_python_consumer(
            config.kafka, group_id=f"{config.kafka.group_id}-run", auto_offset_reset="earliest"))
        try:
            while not over():
                polled = consumer.poll(timeout_ms=500, max_records=5000)
                batch = []
                for tp, messages in polled.items():
                    for m in messages:
                        where = f"{tp.topic}:{tp.partition}@{m.offset}"
                        try:  # a repeated key is rejected, as the worker does (monitor.limits.loads)
                            batch.append((where, loads(m.value)))
                        except (ValueError, TypeError) as exc:  # JSONDecodeError, DuplicateKeyError, UnicodeError
                            batch.append((where, NotJson(str(exc) if m.value is not None else "a tombstone")))
                now = time.time()
                if batch:
                    pipeline.feed(batch, now)
                else:
                    pipeline.advance(now)
                yield now
        finally:
            consumer.close()
        return
    from monitor.run.simulate import generate

    started = time.time()
    scenario = _scenario(args, started)
    records = generate(scenario)
    pending = next(records, None)
    n = 0
    while pending is not None and not over():
        now = started + (time.time() - started) * args.speed  # the simulated clock
        batch = []
        while pending is not None and pending["ts"] <= now:
            n += 1
            batch.append((f"simulated trace {n}", pending))
            pending = next(records, None)
        if batch:
            pipeline.feed(batch, now)
        else:
            pipeline.advance(now)
        yield now
        time.sleep(0.2)


def _summary(pipeline: Any, source: str) -> None:
    stats = pipeline.stats
    fired = [e for e in stats.events if e.status == "firing"]
    resolved = [e for e in stats.events if e.status == "resolved"]
    span = (stats.last_ts - stats.first_ts) if stats.first_ts is not None and stats.last_ts is not None else 0.0
    print(f"fleetmon run: {source}: {stats.traces} traces over {span:.0f} s of event time, {stats.invalid} invalid, "
          f"{stats.ticks} evaluations, {len(fired)} alert(s) fired, {len(resolved)} resolved, "
          f"{len(pipeline.engine.firing())} still firing", file=sys.stderr)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="the whole pipeline in one process (simulator, file or Kafka in)")
    p.add_argument("--config", help="fleetmon.toml (environment overrides apply)")
    p.add_argument("--input", metavar="FILE|-", help="JSONL traces; time is their event time, read as fast as possible")
    p.add_argument("--kafka", metavar="BOOTSTRAP", help="consume the traces topic of this Kafka instead")
    p.add_argument("--redis", metavar="URL", help="keep state in this Redis instead of memory")
    p.add_argument("--duration", type=float, help="stop after this many seconds of wall time")
    p.add_argument("--headless", action="store_true", help="no live view (alert JSON lines still go to stdout)")
    p.add_argument("--host", default="127.0.0.1", help="address for /metrics and /healthz (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port for /metrics and /healthz (default 9464)")
    p.add_argument("--tick", type=float, default=None,
                   help="seconds (of the run's clock) between alert evaluations "
                        "(default alerts.interval; with --input at least 60 s of event time)")
    _add_scenario_flags(p, duration=3600.0)
    p.add_argument("--speed", type=float, default=1.0,
                   help="simulator only: run the simulated clock this many times faster than wall time")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("simulate", help="synthetic fleet traffic to stdout, a file or Kafka")
    p.add_argument("--output", "-o", help="JSONL file (default stdout)")
    p.add_argument("--kafka", metavar="BOOTSTRAP", nargs="?", const="",
                   help="send to this Kafka instead (no value: kafka.bootstrap of --config)")
    p.add_argument("--topic", default=None, help="topic to send to (default kafka.topic, fleetmon.traces)")
    p.add_argument("--config", help="fleetmon.toml whose [kafka] (servers, topic, SASL/TLS) --kafka uses")
    p.add_argument("--start", type=float, help="event time of the first trace (default now)")
    p.add_argument("--realtime", action="store_true", help="emit at the traces' event times")
    _add_scenario_flags(p, duration=300.0)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("config", help="configuration file tools")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    c = config_sub.add_parser("check", help="validate fleetmon.toml (and FLEETMON_* overrides) without running")
    c.add_argument("file", nargs="?", default=None, help="the file (default: defaults + environment)")
    c.add_argument("--show", action="store_true", help="print the effective settings, secrets redacted")
    c.set_defaults(func=cmd_config_check)
