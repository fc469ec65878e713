"""``fleetmon replay``: stream a JSONL or CSV trace file into Kafka.

Every line is validated with the emitter's rules before it is sent: records
without ``ts`` (the compact trial-log form) are stamped with the current
time; an invalid line is reported on stderr with its file and line number
and skipped, and the summary says how many were skipped — nothing is
dropped silently. ``--rate`` caps traces per second (a token bucket over the
whole run, so short stalls are caught up).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from monitor.emitter import TraceEmitter, prepare
from monitor.offline.loaders import InputError, detect_format, iter_lines
from monitor.schema import TraceError

MAX_REPORTED_PROBLEMS = 50


@dataclass
class ReplaySummary:
    sent: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "skipped": self.skipped}


class RateLimiter:
    """At most ``rate`` events per second on average since the first one."""

    def __init__(self, rate: float | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate is not None and not rate > 0:
            raise ValueError(f"--rate must be > 0 traces per second, got {rate}")
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.started: float | None = None
        self.count = 0

    def wait(self) -> None:
        if self.rate is None:
            return
        now = self.clock()
        if self.started is None:
            self.started = now
        due = self.started + self.count / self.rate
        if due > now:
            self.sleep(due - now)
        self.count += 1


def replay(path: str, emitter: TraceEmitter, *, rate: float | None = None,
           progress: Callable[[int], None] | None = None, report: TextIO | None = None,
           clock: Callable[[], float] = time.time) -> ReplaySummary:
    """Send every valid record of ``path``; report and count the others."""
    fmt = detect_format(path)
    report = report if report is not None else sys.stderr  # looked up late: rich redirects it
    summary = ReplaySummary()
    limiter = RateLimiter(rate)
    try:
        handle = sys.stdin if path == "-" else open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    try:
        for line, record, from_text, problem in iter_lines(handle, fmt, path):
            where = f"{path} line {line}"
            if problem is None:
                try:
                    trace = prepare(record, clock(), from_text=from_text, where=where)
                except TraceError as exc:
                    problem = "; ".join(exc.problems)
            if problem is not None:
                summary.skipped += 1
                message = f"{where}: {problem}"
                if len(summary.problems) < MAX_REPORTED_PROBLEMS:
                    summary.problems.append(message)
                    print(f"fleetmon replay: skipped {message}", file=report)
                elif len(summary.problems) == MAX_REPORTED_PROBLEMS:
                    summary.problems.append("...")
                    print(f"fleetmon replay: more than {MAX_REPORTED_PROBLEMS} invalid lines; "
                          "only the count is reported from here on", file=report)
                if progress is not None:
                    progress(1)
                continue
            limiter.wait()
            emitter.send_trace(trace)
            summary.sent += 1
            if progress is not None:
                progress(1)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    finally:
        if handle is not sys.stdin:
            handle.close()
    emitter.flush()
    return summary
