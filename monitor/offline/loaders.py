"""Reading trace files: JSONL (either trace form) or CSV with a header.

Every error names the file, the line and the field. A file is read whole and
all of its problems are collected (up to ``max_errors``) before raising, so a
user fixes a file in one pass rather than one line at a time.

JSON lines are decoded by :func:`monitor.limits.loads` (orjson speed), which
rejects an object that repeats a key. Offline evaluation logs may carry a
graded outcome, ``score`` in [0, 1] (tau-bench reward, rubric or judge
score): :func:`read_trials` reads it beside the trace, and a record without
``ok`` or ``outcome`` succeeds when ``score >= success_threshold``. ``ok``
also accepts 1/0 and 1.0/0.0 here (as numbers, or as text in CSV); any other
number is an error that names it. Plain compact records take
:mod:`monitor.offline.fastpath`.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from monitor.limits import MAX_LABEL_CHARS, DuplicateKeyError, JSONDecodeError, loads

try:  # a declared dependency; json is the fallback, as in monitor.limits
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover
    from json import loads as _fast_loads  # type: ignore[assignment]
from monitor.offline.fastpath import fast_compact
from monitor.offline.trials import TrialLike
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


def iter_lines(handle: TextIO, fmt: str, name: str,
               whole: bool = False) -> Iterator[tuple[int, Any, bool, str | None]]:
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
    lines: Iterable[str] = handle
    if whole:  # a file read at once (compare): decode it in one call when it is clean
        lines = list(handle)
        batch = _decode_all(lines)
        if batch is not None:
            yield from ((number, record, False, None) for number, record in batch)
            return
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield number, loads(line), False, None
        except DuplicateKeyError as exc:
            yield number, None, False, f"not valid JSON: {exc}"
        except JSONDecodeError as exc:
            yield number, None, False, f"not valid JSON ({exc.msg} at column {exc.colno})"


_KEY_END = re.compile(r'"\s*:')  # every object key ends so (as in monitor.limits)


def _decode_all(lines: list[str]) -> list[tuple[int, Any]] | None:
    """Every non-blank line decoded at once, or None to go line by line with :func:`monitor.limits.loads`.

    One orjson call over the file (as a JSON array) costs a fraction of one
    call per line. orjson keeps the last of repeated keys, so the batch is
    accepted only when every line is a flat object and the objects hold as
    many keys as the text has key endings: then no key was dropped. Anything
    else (a bad line, a nested value, a string holding ``":``, a repeated
    key) returns None, and the caller's per-line :func:`~monitor.limits.loads`
    names the line and the problem.
    """
    numbered = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    text = "[" + ",".join(line for _, line in numbered) + "]"
    try:
        records = _fast_loads(text)
    except ValueError:  # orjson.JSONDecodeError and json's are ValueErrors
        return None
    if not isinstance(records, list) or len(records) != len(numbered) \
            or not all(type(r) is dict for r in records):
        return None  # e.g. a line such as '1, 2' splits into two values
    # With no quote followed by whitespace, every key ends exactly '":' (str.count is ~20x a regex).
    plain = '" ' not in text and '"\t' not in text
    if sum(map(len, records)) != (text.count('":') if plain else len(_KEY_END.findall(text))):
        return None
    return [(number, record) for (number, _), record in zip(numbered, records)]


def detect_format(path: str) -> str:
    lower = path.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".jsonl", ".json", ".ndjson")) or path == "-":
        return "jsonl"
    raise InputError(f"{path}: unknown file type; use .jsonl (one JSON object per line) or .csv with a header")


def read_traces(path: str, *, mapping: Mapping[str, str] | None = None, default_agent: str | None = None,
                max_errors: int = 20, handle: TextIO | None = None) -> list[Trace]:
    """Read and validate every record of ``path`` (see :func:`read_trials`; scores are dropped)."""
    traces = read_trials(path, mapping=mapping, default_agent=default_agent, max_errors=max_errors,
                         handle=handle, fast=False)[0]
    return [t for t in traces if isinstance(t, Trace)]


def _fit_task_id(data: dict[str, Any]) -> None:
    """Shorten a compact record's task id whose derived trace id (agent/task/trial) would pass the
    label limit: the id keeps its start and gains a digest of the whole (tau-bench telecom task ids
    run past 200 characters). Distinct ids stay distinct; short ids are untouched."""
    agent, task = data.get("agent"), data.get("task")
    if not isinstance(agent, str) or not isinstance(task, str):
        return
    room = MAX_LABEL_CHARS - len(agent) - len(str(data.get("trial", 0))) - 2
    if len(task) <= room or room < 24:
        return
    digest = hashlib.sha1(task.encode()).hexdigest()[:12]
    data["task"] = task[:room - 13] + "~" + digest


_OK_NUMBERS = {1: True, 0: False}
_OK_TEXT = {"1.0": "true", "0.0": "false"}


def _take_score(data: dict[str, Any], from_text: bool, success_threshold: float,
                problems: list[str]) -> float | None:
    """Pop ``score`` from a record, check it, and fill ``ok`` from it when the record has no outcome."""
    value = data.pop("score", None)
    if value is None or (from_text and value == ""):
        return None
    number: float | None = None
    if from_text and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    if number is None or not math.isfinite(number) or not 0.0 <= number <= 1.0:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        problems.append(f"score must be a number in [0, 1], got {shown}")
        return None
    if data.get("ok") in (None, "") and data.get("outcome") in (None, ""):
        data["ok"] = number >= success_threshold
    return number


def _normalise_ok(data: dict[str, Any], from_text: bool, problems: list[str]) -> None:
    """Accept 1/0 and 1.0/0.0 for ``ok``; name any other number (a graded outcome belongs in score)."""
    value = data.get("ok")
    if from_text and isinstance(value, str):
        text = value.strip()
        if text in _OK_TEXT:
            data["ok"] = _OK_TEXT[text]
            return
        try:
            number = float(text)
        except ValueError:
            return  # true/false/yes/... or garbage: validate() decides and names it
        if number not in _OK_NUMBERS:
            problems.append(f"ok must be true or false (or 1/0, 1.0/0.0), got {value!r}; "
                            "a graded outcome goes in score (e.g. --map reward=score)")
            data["ok"] = False  # placeholder: the record is rejected for the problem above
        return
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        if value in _OK_NUMBERS and math.isfinite(value):
            data["ok"] = _OK_NUMBERS[int(value)]
        else:
            problems.append(f"ok must be true or false (or 1/0, 1.0/0.0), got {value!r}; "
                            "a graded outcome goes in score (e.g. --map reward=score)")
            data["ok"] = False  # placeholder: the record is rejected for the problem above


def read_trials(path: str, *, mapping: Mapping[str, str] | None = None, default_agent: str | None = None,
                max_errors: int = 20, handle: TextIO | None = None,
                success_threshold: float = 1.0, fast: bool = True,
                task_key: Sequence[str] = ()) -> tuple[list[TrialLike], list[float | None]]:
    """Read and validate every record of ``path``: the traces and each one's ``score`` (or None).

    ``mapping`` renames source fields first (``{"resolved": "ok"}``).
    ``default_agent`` fills ``agent`` on compact-form records that lack it
    (the file name, by the compare command's convention). A record without
    ``ok`` or ``outcome`` but with a ``score`` succeeds when ``score >=
    success_threshold``. ``task_key`` (field names, after ``mapping``) makes
    the task the values of those fields joined by "/" (tau-bench task ids
    repeat across domains: ``("domain", "task")``). With ``fast`` plain
    compact records become
    :class:`~monitor.offline.trials.Trial` tuples (same values, no Trace).
    Raises :class:`InputError` listing up to ``max_errors`` problems.
    """
    fmt = detect_format(path)
    opened = handle is None
    if handle is None:
        try:
            handle = open(path, encoding="utf-8", newline="")
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}") from None
    traces: list[TrialLike] = []
    scores: list[float | None] = []
    known: set[str] = set()  # strings the fast path found label-safe
    problems: list[str] = []
    try:
        for line, data, from_text, problem in iter_lines(handle, fmt, path, whole=True):
            if problem is not None:
                raise InputError(f"{path} line {line}: {problem}")
            if mapping and isinstance(data, dict):
                data = {mapping.get(k, k): v for k, v in data.items()}
            if task_key and isinstance(data, dict):
                missing = [f for f in task_key if data.get(f) in (None, "")]
                if missing:
                    problems.append(f"{path} line {line}: --task-key field {missing[0]} is missing or empty")
                    if len(problems) >= max_errors:
                        break
                    continue
                data["task"] = "/".join(str(data[f]) for f in task_key)
            if isinstance(data, dict) and default_agent is not None and "task" in data \
                    and "trace_id" not in data and data.get("agent") in (None, ""):
                data["agent"] = default_agent
            if isinstance(data, dict) and "trace_id" not in data:
                _fit_task_id(data)
            score: float | None = None
            if isinstance(data, dict):
                quick = fast_compact(data, known) if fast and not from_text and "score" not in data else None
                if quick is not None:
                    traces.append(quick)
                    scores.append(None)
                    continue
                own: list[str] = []
                score = _take_score(data, from_text, success_threshold, own)
                _normalise_ok(data, from_text, own)
                own = [f"{path} line {line}: {p}" for p in own]
            else:
                own = []
            try:
                trace = validate(data, from_text=from_text, where=f"{path} line {line}")
            except TraceError as exc:
                own.append(str(exc))
            if own:
                problems.extend(own)
                if len(problems) >= max_errors:
                    problems.append(f"... stopped after {max_errors} problems")
                    break
                continue
            traces.append(trace)
            scores.append(score)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    finally:
        if opened:
            handle.close()
    if problems:
        raise InputError("\n".join(problems))
    if not traces:
        raise InputError(f"{path}: no records")
    return traces, scores


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
