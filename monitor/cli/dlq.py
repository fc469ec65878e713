"""``fleetmon dlq list|export|redrive``: inspect the dead-letter topic and send fixed records back.

* ``list`` — the DLQ records (source coordinates, when, every reason, the
  start of the payload) and a count per reason rule; ``--json`` prints one
  JSON object per record and the summary last.
* ``export -o FILE`` — the original payloads, one per line, to fix by hand
  and send with ``fleetmon replay FILE``.
* ``redrive`` — re-validates each DLQ record's original payload with the
  worker's rules *now* (after a producer fix, a raised limit, a clock that
  caught up) and sends the ones that pass to the traces topic; the others are
  listed with today's reasons. ``--dry-run`` only reports.

Every command reads a snapshot of the topic (``streams.dlq_reader``) with the
one Kafka configuration (``--config``, SASL / TLS included) and filters with
``--since DURATION`` (rejected that recently), ``--reason REGEX`` and
``--source-topic``. ``redrive`` sends each source record once per run (the
DLQ is at-least-once, copies are folded); running it twice over the same
records counts them twice — narrow it with ``--since``.
Exit codes: 0 done, 2 bad arguments or configuration, 3 Kafka failed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams.dlq_reader import DlqEntry

EXIT_OK, EXIT_BAD_INPUT, EXIT_SERVICE = 0, 2, 3
PAYLOAD_SHOWN_CHARS = 160


def _when(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _printable(text: str, limit: int) -> str:
    """A one-line, escaped excerpt: control and bidi characters never reach the terminal raw."""
    shown = json.dumps(text[:limit], ensure_ascii=True)[1:-1]
    return shown + ("…" if len(text) > limit else "")


def _entries(args: argparse.Namespace, settings: Any) -> Iterator[DlqEntry]:
    from monitor.windows import parse_duration
    from streams.dlq_reader import matches, read_dlq

    since_ts = time.time() - parse_duration(args.since) if args.since else None
    reason = re.compile(args.reason) if args.reason else None
    for entry in read_dlq(settings.kafka, settings.dlq_topic):
        if matches(entry, since_ts=since_ts, reason=reason, source_topic=args.source_topic):
            yield entry


def _run(args: argparse.Namespace, action: Any) -> int:
    """Settings, then ``action(settings)``; configuration and Kafka errors become exit codes."""
    from kafka.errors import KafkaError

    from monitor.cli.worker_flags import settings_from

    name = f"fleetmon dlq {args.dlq_command}"
    try:
        settings = settings_from(args)
        if args.reason:
            re.compile(args.reason)
        if args.since:
            from monitor.windows import parse_duration

            parse_duration(args.since)
    except re.error as exc:
        print(f"{name}: --reason is not a regular expression: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from monitor.kafka_auth import refused_credentials

    refused = refused_credentials(settings.kafka)
    if refused is not None:
        print(f"{name}: Kafka at {settings.bootstrap} refused the credentials: {refused}", file=sys.stderr)
        return EXIT_SERVICE
    try:
        result: int = action(settings)
        return result
    except (KafkaError, LookupError, TimeoutError) as exc:
        print(f"{name}: kafka at {settings.bootstrap}: {exc!r}" if isinstance(exc, KafkaError)
              else f"{name}: {exc}", file=sys.stderr)
        return EXIT_SERVICE


def cmd_list(args: argparse.Namespace) -> int:
    from streams.dlq_reader import Summary

    def action(settings: Any) -> int:
        tally = Summary()
        for entry in _entries(args, settings):
            tally.add(entry)
            if args.json:
                print(json.dumps(entry.to_dict(), ensure_ascii=False))
            elif tally.records <= args.limit:
                payload = entry.payload()
                excerpt = "(tombstone)" if payload is None else _printable(
                    payload.decode("utf-8", "replace"), PAYLOAD_SHOWN_CHARS)
                print(f"{_when(entry.rejected_at)}  {entry.source}  [dlq {entry.partition}@{entry.offset}]")
                for reason in entry.reasons:
                    print(f"    reason: {_printable(reason, 400)}")
                print(f"    payload: {excerpt}")
        summary = tally.to_dict()
        if args.json:
            print(json.dumps({"summary": summary, "dlq_topic": settings.dlq_topic}))
            return EXIT_OK
        if tally.records > args.limit:
            print(f"... {tally.records - args.limit} more (--limit, or --json for all)")
        print(f"{summary['records']} DLQ record(s) in {settings.dlq_topic}, {summary['sources']} distinct "
              f"source record(s); by reason:")
        for kind, n in summary["reasons"].items():
            print(f"  {n:>8}  {_printable(kind, 200)}")
        return EXIT_OK

    return _run(args, action)


def cmd_export(args: argparse.Namespace) -> int:
    from streams.dlq_reader import unique

    def action(settings: Any) -> int:
        written = skipped = 0
        out = sys.stdout if args.output in (None, "-") else open(args.output, "w", encoding="utf-8")
        try:
            for entry in unique(_entries(args, settings)):
                payload = entry.payload()
                if payload is None or entry.truncated:
                    skipped += 1
                    continue
                text = payload.decode("utf-8", "replace").replace("\r", "\\r").replace("\n", "\\n")
                out.write(text + "\n")
                written += 1
        finally:
            if out is not sys.stdout:
                out.close()
        print(f"fleetmon dlq export: wrote {written} payload(s) to {args.output or 'stdout'}; skipped {skipped} "
              "(tombstones or payloads cut at the DLQ size limit)", file=sys.stderr)
        return EXIT_OK

    return _run(args, action)


def _recheck(entry: DlqEntry, now: float) -> tuple[Any, list[str]]:
    """``(trace, [])`` when the original payload passes the worker's rules now, else ``(None, reasons)``."""
    from monitor.limits import loads
    from monitor.schema import TraceError, validate

    payload = entry.payload()
    if payload is None:
        return None, ["a tombstone (no value): nothing to send"]
    if entry.truncated:
        return None, ["the payload was cut at the DLQ size limit: the original cannot be restored"]
    try:
        data = loads(payload)
    except ValueError as exc:
        return None, [f"not JSON: {exc}"]
    try:
        trace = validate(data, now=now)
    except TraceError as exc:
        return None, list(exc.problems)
    if trace.ts is None:
        return None, ["ts is required for streaming; fix it and send with `fleetmon replay` (it stamps now)"]
    return trace, []


def cmd_redrive(args: argparse.Namespace) -> int:
    from monitor.emitter import TraceEmitter
    from streams.dlq_reader import reason_kind, unique

    def action(settings: Any) -> int:
        now = time.time()
        sent = read = 0
        still: dict[str, int] = {}
        emitter = None if args.dry_run else TraceEmitter(topic=settings.topic, kafka=settings.kafka)
        try:
            for entry in unique(_entries(args, settings)):
                read += 1
                trace, reasons = _recheck(entry, now)
                if trace is None:
                    for reason in reasons:
                        still[reason_kind(reason)] = still.get(reason_kind(reason), 0) + 1
                    if not args.json:
                        print(f"still invalid: {entry.source}: {_printable('; '.join(reasons), 400)}")
                    continue
                if emitter is not None:
                    emitter.send_trace(trace)
                sent += 1
        finally:
            if emitter is not None:
                emitter.close()
        doc = {"dlq_topic": settings.dlq_topic, "topic": settings.topic, "records": read,
               ("would_send" if args.dry_run else "sent"): sent, "still_invalid": read - sent,
               "still_invalid_reasons": still}
        print(json.dumps(doc) if args.json else
              f"fleetmon dlq redrive: {read} source record(s) matched; {'would send' if args.dry_run else 'sent'} "
              f"{sent} to {settings.topic}; {read - sent} still invalid")
        return EXIT_OK

    return _run(args, action)


def register(sub: argparse._SubParsersAction) -> None:
    from monitor.cli.worker_flags import add_connection_flags

    p = sub.add_parser("dlq", help="inspect the dead-letter topic and re-drive fixed records")
    dlq_sub = p.add_subparsers(dest="dlq_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        add_connection_flags(q, redis=False)
        q.add_argument("--dlq-topic", help="dead-letter topic (default: config / FLEETMON_KAFKA_DLQ_TOPIC / "
                                           "fleetmon.traces.dlq)")
        q.add_argument("--since", help="only records rejected within this DURATION (90s, 5m, 2h, 7d)")
        q.add_argument("--reason", metavar="REGEX", help="only records with a reason matching REGEX")
        q.add_argument("--source-topic", help="only records rejected from this topic")

    q = dlq_sub.add_parser("list", help="DLQ records with their reasons, and a count per reason")
    common(q)
    q.add_argument("--limit", type=int, default=20, help="records shown in the text form (default 20)")
    q.add_argument("--json", action="store_true", help="one JSON object per record, then the summary")
    q.set_defaults(func=cmd_list)

    q = dlq_sub.add_parser("export", help="the original payloads, one per line, to fix and `fleetmon replay`")
    common(q)
    q.add_argument("--output", "-o", help="file to write (default stdout)")
    q.set_defaults(func=cmd_export)

    q = dlq_sub.add_parser("redrive", help="send the DLQ records that pass validation now to the traces topic")
    common(q)
    q.add_argument("--topic", help="where to send them (default: config / FLEETMON_KAFKA_TOPIC / fleetmon.traces)")
    q.add_argument("--dry-run", action="store_true", help="only report what would be sent")
    q.add_argument("--json", action="store_true", help="print the summary as JSON")
    q.set_defaults(func=cmd_redrive)
