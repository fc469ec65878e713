"""Subcommands of the streaming side: ``worker``, ``stats``, ``replay``, ``rebuild``.

Heavy imports (faust, aiokafka, kafka-python, redis) stay inside the command
functions so that ``fleetmon --help`` and the offline commands stay fast.
Exit codes: 0 success, 2 bad input or configuration, 3 a service could not
be reached or failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from monitor.worker_settings import WorkerSettings

EXIT_OK, EXIT_BAD_INPUT, EXIT_SERVICE = 0, 2, 3


def _settings(args: argparse.Namespace) -> WorkerSettings:
    from monitor.cli.worker_flags import settings_from

    return settings_from(args)


def _logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="[%(asctime)s] %(name)s %(levelname)s %(message)s")


# -- worker -------------------------------------------------------------------------
def cmd_worker(args: argparse.Namespace) -> int:
    try:
        settings = _settings(args)
    except ValueError as exc:
        print(f"fleetmon worker: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from streams.app import run_worker

    return run_worker(settings, loglevel=args.loglevel)


# -- stats --------------------------------------------------------------------------
def cmd_stats(args: argparse.Namespace) -> int:
    import redis

    from monitor.cli.output import dumps
    from monitor.cli.stats import collect_stats, render_stats
    from monitor.store.base import StoreError
    from monitor.store.redis.open import open_store
    from monitor.windows import parse_duration

    try:
        settings = _settings(args)
        since = parse_duration(args.since) if args.since else None
        store = open_store(settings.redis_url, settings.prefix, settings.resolutions, cluster=settings.redis_cluster)
        doc = collect_stats(store, now=time.time(), since_seconds=since, resolution=args.resolution)
    except ValueError as exc:
        print(f"fleetmon stats: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (StoreError, redis.RedisError) as exc:
        print(f"fleetmon stats: cannot read Redis at {settings.describe()['redis']}: {exc}", file=sys.stderr)
        return EXIT_SERVICE
    doc["prefix"] = settings.prefix
    print(dumps(doc) if args.json else render_stats(doc, limit=args.limit))
    return EXIT_OK


# -- replay -------------------------------------------------------------------------
def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    try:
        with open(path, "rb") as handle:
            return sum(1 for line in handle if line.strip())
    except OSError:
        return None


def cmd_replay(args: argparse.Namespace) -> int:
    import warnings

    warnings.filterwarnings("ignore", "open_text is deprecated", DeprecationWarning)
    from kafka.errors import KafkaError
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from monitor.emitter import EmitError, TraceEmitter
    from monitor.kafka_auth import refused_credentials
    from monitor.offline.loaders import InputError
    from streams.replay import replay

    try:
        settings = _settings(args)
    except ValueError as exc:
        print(f"fleetmon replay: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.rate is not None and not args.rate > 0:
        print(f"fleetmon replay: --rate must be > 0 traces per second, got {args.rate}", file=sys.stderr)
        return EXIT_BAD_INPUT
    total = _count_lines(args.file)
    if total is not None and args.file.lower().endswith(".csv"):
        total = max(0, total - 1)  # the header
    refused = refused_credentials(settings.kafka)
    if refused is not None:
        print(f"fleetmon replay: Kafka at {settings.bootstrap} refused the credentials: {refused}", file=sys.stderr)
        return EXIT_SERVICE
    try:
        emitter = TraceEmitter(topic=settings.topic, kafka=settings.kafka)
    except KafkaError as exc:
        print(f"fleetmon replay: cannot reach Kafka at {settings.bootstrap}: {exc!r}", file=sys.stderr)
        return EXIT_SERVICE
    started = time.monotonic()
    columns = (TextColumn("replay {task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeRemainingColumn())
    try:
        with Progress(*columns, console=Console(stderr=True), disable=args.quiet, transient=False) as bar, emitter:
            task = bar.add_task(args.file, total=total, rate="")
            seen = [0]

            def advance(n: int) -> None:
                seen[0] += n
                if seen[0] % 1000 == 0:
                    elapsed = time.monotonic() - started
                    bar.update(task, completed=seen[0], rate=f"{seen[0] / elapsed:,.0f}/s" if elapsed else "")

            summary = replay(args.file, emitter, rate=args.rate, progress=advance)
            bar.update(task, completed=seen[0])
    except InputError as exc:
        print(f"fleetmon replay: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (EmitError, KafkaError) as exc:
        print(f"fleetmon replay: {exc}", file=sys.stderr)
        return EXIT_SERVICE
    elapsed = time.monotonic() - started
    print(f"fleetmon replay: sent {summary.sent:,} traces to {settings.topic} in {elapsed:.1f} s; "
          f"skipped {summary.skipped:,} invalid line(s)", file=sys.stderr)
    if args.json:
        from monitor.cli.output import dumps

        print(dumps({**summary.to_dict(), "topic": settings.topic, "seconds": round(elapsed, 3)}))
    return EXIT_OK


# -- rebuild ------------------------------------------------------------------------
def cmd_rebuild(args: argparse.Namespace) -> int:
    from monitor.cli.output import dumps
    from streams.rebuild import run_rebuild

    _logging(args.loglevel)
    try:
        settings = _settings(args)
    except ValueError as exc:
        print(f"fleetmon rebuild: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run = run_rebuild
    if settings.redis_cluster:  # one atomic swap per slot (streams/rebuild_cluster.py)
        from streams.rebuild_cluster import run_rebuild_cluster

        run = run_rebuild_cluster

    def progress(records: int) -> None:
        print(f"fleetmon rebuild: {records:,} records re-read", file=sys.stderr)

    try:
        summary = run(settings, progress=None if args.quiet else progress)
    except KeyboardInterrupt:
        print("fleetmon rebuild: interrupted; the live keys are untouched", file=sys.stderr)
        return EXIT_SERVICE
    except Exception as exc:  # noqa: BLE001 - report service failures with context
        print(f"fleetmon rebuild: failed, the live keys are untouched: {exc!r}", file=sys.stderr)
        return EXIT_SERVICE
    print(dumps(summary) if args.json else
          f"fleetmon rebuild: re-read {summary['records']:,} records ({summary['traces']:,} traces, "
          f"{summary['dlq']:,} dead-lettered) in {summary['seconds']:.1f} s; swapped {summary.get('keys_moved', 0):,} "
          f"keys into prefix {summary['prefix']!r}")
    return EXIT_OK


# -- registration -------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
    from monitor.cli.worker_flags import add_connection_flags, add_pipeline_flags, add_window_flags

    p = subparsers.add_parser("worker", help="run a streaming worker: Kafka traces -> windowed aggregates in Redis")
    add_connection_flags(p)
    add_pipeline_flags(p)
    p.add_argument("--dlq-topic", help="dead-letter topic (default: config / FLEETMON_KAFKA_DLQ_TOPIC / "
                                       "fleetmon.traces.dlq)")
    p.add_argument("--loglevel", default="info", choices=("debug", "info", "warn", "error", "crit"))
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("stats", help="per-slice and overall counts from Redis")
    add_connection_flags(p, kafka=False)
    p.add_argument("--since", help="only the windows of the last DURATION (90s, 5m, 2h, 7d); default all time")
    p.add_argument("--resolution", default="1m", help="window resolution used with --since (default 1m)")
    add_window_flags(p)
    p.add_argument("--json", action="store_true", help="one JSON document instead of text")
    p.add_argument("--limit", type=int, default=30, help="slices shown in the text form (default 30)")
    p.set_defaults(func=cmd_stats)

    p = subparsers.add_parser("replay", help="stream a JSONL/CSV trace file into Kafka")
    p.add_argument("file", help="traces: .jsonl (either trace form) or .csv with a header; - for stdin (JSONL)")
    add_connection_flags(p, redis=False)
    p.add_argument("--topic", help="topic (default: config / FLEETMON_KAFKA_TOPIC / fleetmon.traces)")
    p.add_argument("--rate", type=float, help="at most N traces per second (default: as fast as possible)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=cmd_replay)

    p = subparsers.add_parser("rebuild", help="recompute Redis from the retained topic, then swap it in")
    add_connection_flags(p)
    add_pipeline_flags(p)
    p.add_argument("--loglevel", default="warning", choices=("debug", "info", "warning", "error"))
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=cmd_rebuild)
