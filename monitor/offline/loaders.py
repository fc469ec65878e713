"""Reading trace files: JSONL (either trace form) or CSV with a header.

Every error names the file, the line and the field. A file is read whole and
all of its problems are collected (up to ``max_errors``) before raising, so a
user fixes a file in one pass rather than one line at a time.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from monitor.schema import Trace, TraceError, validate


class InputError(ValueError):
    """A file that cannot be read as traces; the message lists the problems."""


def parse_mapping(text: str) -> dict[str, str]:
    """``"model=agent,instance_id=task"`` → ``{"model": "agent", ...}`` (source → target)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        source, sep, target = part.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise InputError(f"--map entries must look like SOURCE=TARGET, got {part!r}")
        out[source.strip()] = target.strip()
    return out


def iter_lines(handle: TextIO, fmt: str, name: str) -> Iterator[tuple[int, Any, bool, str | None]]:
    """``(line number, record or None, from_text, problem or None)`` for each record of a file.

    A line that cannot be read as a record yields its problem instead, so a
    caller decides whether to stop (``compare``) or skip and count
    (``replay``, ``run``). ``from_text`` is True for CSV, whose values are text.
    """
    if fmt == "csv":
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise InputError(f"{name}: CSV file has no header line")
        for row in reader:
            if None in row:
                yield reader.line_num, None, True, "more values than header columns"
            else:
                yield reader.line_num, dict(row), True, None
        return
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line), False, None
        except json.JSONDecodeError as exc:
            yield number, None, False, f"not valid JSON ({exc.msg} at column {exc.colno})"


def detect_format(path: str) -> str:
    lower = path.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".jsonl", ".json", ".ndjson")) or path == "-":
        return "jsonl"
    raise InputError(f"{path}: unknown file type; use .jsonl (one JSON object per line) or .csv with a header")


def read_traces(path: str, *, mapping: Mapping[str, str] | None = None, default_agent: str | None = None,
                max_errors: int = 20, handle: TextIO | None = None) -> list[Trace]:
    """Read and validate every record of ``path``.

    ``mapping`` renames source fields first (``{"resolved": "ok"}``).
    ``default_agent`` fills ``agent`` on compact-form records that lack it
    (the file name, by the compare command's convention). Raises
    :class:`InputError` listing up to ``max_errors`` problems.
    """
    fmt = detect_format(path)
    opened = handle is None
    if handle is None:
        try:
            handle = open(path, encoding="utf-8", newline="")
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}") from None
    traces: list[Trace] = []
    problems: list[str] = []
    try:
        for line, data, from_text, problem in iter_lines(handle, fmt, path):
            if problem is not None:
                raise InputError(f"{path} line {line}: {problem}")
            if mapping and isinstance(data, dict):
                data = {mapping.get(k, k): v for k, v in data.items()}
            if isinstance(data, dict) and default_agent is not None and "task" in data \
                    and "trace_id" not in data and data.get("agent") in (None, ""):
                data["agent"] = default_agent
            try:
                traces.append(validate(data, from_text=from_text, where=f"{path} line {line}"))
            except TraceError as exc:
                problems.append(str(exc))
                if len(problems) >= max_errors:
                    problems.append(f"... stopped after {max_errors} problems")
                    break
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    finally:
        if opened:
            handle.close()
    if problems:
        raise InputError("\n".join(problems))
    if not traces:
        raise InputError(f"{path}: no records")
    return traces


def agent_name_for(path: str) -> str:
    """The agent name used when records carry none: the file's stem."""
    return Path(path).stem


def select_agent(traces: Sequence[Trace], agent: str | None, path: str) -> list[Trace]:
    """Keep only ``agent``'s records (by model_id) when asked; error if none."""
    if agent is None:
        return list(traces)
    kept = [t for t in traces if t.model_id == agent]
    if not kept:
        names = sorted({t.model_id for t in traces})
        shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
        raise InputError(f"{path}: no records for agent {agent!r}; agents in the file: {shown}")
    return kept
