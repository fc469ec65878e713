"""``fleetmon`` command line: one parser, each command registered by its own module.

Command modules keep their heavy imports inside the command functions, so
``fleetmon compare`` never loads Kafka, Redis or Faust.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from monitor.cli import alerts, compare, dlq, exporter, power, run, streams
from monitor.cli.output import EXIT_BAD_INPUT, EXIT_OK
from monitor.redact import install_log_redaction

#: In the order ``fleetmon --help`` lists them.
COMMAND_MODULES = (compare, power, streams, exporter, alerts, dlq, run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetmon", description="Streaming production monitor for LLM-agent fleets.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    install_log_redaction()  # no log line of any command shows a secret (monitor.redact)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_BAD_INPUT if exc.code not in (0, None) else EXIT_OK
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
