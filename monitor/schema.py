"""Trace schema v1: one JSON object per agent interaction.

A trace is validated into a :class:`Trace` or rejected with *every* problem
found, each naming the field, the value and what is allowed. Nothing is
silently coerced: a negative token count, a NaN latency, an unparseable
timestamp or ``tokens_cached_in > tokens_in`` is an error; so is a value
beyond the bounds of :mod:`monitor.limits` (counts, latency, fees, label
text). Unknown fields become string tags; tags are flat. Two input shapes are accepted:

* the full form of DESIGN.md (``trace_id``, ``ts``, ``model_id``, an outcome);
* the compact trial-log form ``{agent, task, trial, ok, tin, tout, tin_cached,
  steps, lat (seconds), fees, ...tags}`` used by offline evaluation logs.

A few OpenTelemetry GenAI attribute names are accepted as aliases
(``gen_ai.request.model`` → ``model_id`` and so on; a field given under its
own name wins over its alias). ``gen_ai.conversation.id`` becomes the tag
``conversation_id``, never a ``pair_id``: a conversation's turns are not
shadow twins, and a pair id must come from the producer.

Values from CSV files arrive as strings; :func:`validate` is strict about
types, so CSV readers pass ``from_text=True`` which parses numbers and
booleans from their text form (``"1"``, ``"true"``, ``"0.25"``) — still
rejecting anything that does not parse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.limits import MAX_FEES_USD, MAX_LATENCY_MS, MAX_TS, Checker

OUTCOMES = ("success", "failure", "escalated", "abandoned")
ARMS = ("baseline", "canary", "shadow")  # a trace's arm; below: a shadow pair, a canary stratum, a candidate
PAIRED_ARMS, CANARY_ARMS, COMPARISON_ARMS = ("baseline", "shadow"), ("baseline", "canary"), ("shadow", "canary")
USER_SIGNALS = ("up", "down", "none")

#: Furthest into the future (relative to ``now``) a trace may be stamped.
MAX_FUTURE_SKEW_SECONDS = 300.0

ALIASES = {
    "gen_ai.request.model": "model_id",
    "gen_ai.response.model": "model_id",
    "gen_ai.usage.input_tokens": "tokens_in",
    "gen_ai.usage.output_tokens": "tokens_out",
    "gen_ai.usage.cache_read.input_tokens": "tokens_cached_in",
    "gen_ai.usage.cache_read_input_tokens": "tokens_cached_in",
    "gen_ai.agent.version": "release",
    "gen_ai.conversation.id": "conversation_id",  # a tag: a conversation's turns are not a shadow pair
}

_STR_FIELDS = ("scaffold_hash", "prompt_hash", "release", "pair_id", "task_type",
               "tenant", "locale", "task_id", "tool_schema_hash", "config_hash")
_COUNT_FIELDS = ("steps", "tool_calls", "tool_errors", "tokens_in", "tokens_out",
                 "tokens_cached_in", "side_effects")
_BOOL_FIELDS = ("harmful_action", "refused", "prompt_injection")
_OPTIONAL_BOOL_FIELDS = ("ok", "benign", "recontact_24h")
KNOWN_FIELDS = frozenset(
    ("trace_id", "ts", "model_id", "outcome", "arm", "tags", "trial", "fees_usd",
     "latency_ms", "user_signal", *_STR_FIELDS, *_COUNT_FIELDS, *_BOOL_FIELDS,
     *_OPTIONAL_BOOL_FIELDS))
COMPACT_FIELDS = frozenset(("agent", "task", "trial", "ok", "tin", "tout", "tin_cached",
                            "steps", "lat", "fees"))


class TraceError(ValueError):
    """A record that is not a valid trace; ``problems`` lists every reason."""

    def __init__(self, problems: list[str], where: str = "") -> None:
        self.problems = problems
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(prefix + "; ".join(problems))


@dataclass(frozen=True, slots=True)
class Trace:
    """One validated interaction. Times are epoch seconds; latency in seconds."""

    trace_id: str
    ts: float | None
    model_id: str
    release: str
    arm: str = "baseline"
    success: bool = False
    outcome: str | None = None
    ok: bool | None = None
    scaffold_hash: str | None = None
    prompt_hash: str | None = None
    tool_schema_hash: str | None = None   # the release's version tuple: see monitor.identity
    config_hash: str | None = None
    pair_id: str | None = None
    task_type: str | None = None
    tenant: str | None = None
    locale: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    task_id: str | None = None
    trial: int | None = None
    steps: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached_in: int = 0
    fees_usd: float = 0.0
    latency_seconds: float | None = None
    user_signal: str = "none"
    recontact_24h: bool | None = None
    harmful_action: bool = False
    refused: bool = False
    benign: bool | None = None
    side_effects: int = 0
    prompt_injection: bool = False

    def dimension(self, name: str) -> str | None:
        """The value of a slice dimension: a top-level field, else a tag."""
        if name in _DIMENSION_FIELDS:
            field_value: str | None = getattr(self, name)  # every dimension field is a str or None
            return field_value
        return self.tags.get(name)


_DIMENSION_FIELDS = frozenset(("release", "arm", "model_id", "task_type", "tenant", "locale",
                               "scaffold_hash", "prompt_hash", "task_id", "tool_schema_hash",
                               "config_hash"))


def success_proxy(ok: bool | None, outcome: str | None, user_signal: str,
                  recontact_24h: bool | None) -> bool:
    """DESIGN.md's success proxy: ``ok`` wins when present; else the outcome is
    ``success`` and the user did not signal ``down`` nor re-contact within 24 h."""
    if ok is not None:
        return ok
    return outcome == "success" and user_signal != "down" and recontact_24h is not True


def parse_ts(value: Any, from_text: bool = False) -> float:
    """Epoch seconds (a number, or its text when ``from_text``) or an RFC 3339 string → epoch seconds.

    Raises ValueError for NaN, infinities, values outside ``[0, MAX_TS]`` and
    unparseable text. A string without an offset is rejected: event time must
    be unambiguous. Like every numeric field, a number in a JSON string is
    accepted only from text formats (CSV).
    """
    if isinstance(value, bool):
        raise ValueError(f"must be epoch seconds or an RFC 3339 string, got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0 or value > MAX_TS:
            raise ValueError(f"must be finite epoch seconds in [0, {MAX_TS:.0f}], got {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            if from_text:
                return parse_ts(number)
            raise ValueError(f"must be a JSON number of epoch seconds or an RFC 3339 string, got {value!r}")
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"must be epoch seconds or an RFC 3339 string, got {value!r}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"RFC 3339 time needs an offset such as Z or +00:00, got {value!r}")
        return parsed.timestamp()
    raise ValueError(f"must be epoch seconds or an RFC 3339 string, got {value!r}")


def _tag(check: Checker, tags: dict[str, str], name: str, key: Any, value: Any) -> None:
    """Add one tag: a label-safe key and a scalar value (tags are flat: no objects, no arrays)."""
    if isinstance(value, (dict, list)):
        check.bad(name, value, "a string, number or boolean (tags are flat)")
    elif check.label(name + " (a tag name)", str(key)):
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        if check.label(name, text):
            tags.setdefault(str(key), text)


_COMPACT_RENAMES = {"agent": "model_id", "task": "task_id", "tin": "tokens_in", "tout": "tokens_out",
                    "tin_cached": "tokens_cached_in", "fees": "fees_usd", "lat": "_lat_seconds"}


def _from_compact(record: Mapping[str, Any]) -> dict[str, Any]:
    """Rewrite the compact trial-log form into full-form field names (unknown keys become tags)."""
    full: dict[str, Any] = {}
    tags: dict[str, Any] = {}
    for key, value in record.items():
        if key in _COMPACT_RENAMES:
            full[_COMPACT_RENAMES[key]] = value
        elif key in KNOWN_FIELDS:
            full[key] = value
        else:
            tags[key] = value
    full["tags"] = tags
    if "trace_id" not in full:
        full["trace_id"] = f"{record.get('agent')}/{record.get('task')}/{record.get('trial', 0)}"
    return full


def is_compact(record: Mapping[str, Any]) -> bool:
    """The compact trial-log form: has ``agent`` and ``task`` and no ``trace_id``."""
    return "agent" in record and "task" in record and "trace_id" not in record


def validate(record: Any, *, now: float | None = None, from_text: bool = False,
             where: str = "") -> Trace:
    """Validate one decoded record into a :class:`Trace`.

    ``now`` (epoch seconds), when given, rejects traces stamped more than
    :data:`MAX_FUTURE_SKEW_SECONDS` ahead of it. Raises :class:`TraceError`
    listing every problem; ``where`` (e.g. ``"line 17 of traces.jsonl"``)
    prefixes the message.
    """
    if not isinstance(record, Mapping):
        raise TraceError([f"a trace must be a JSON object, got {type(record).__name__}"], where)
    compact = is_compact(record)
    if compact:
        record = _from_compact(record)
    elif any(key in record for key in ALIASES):
        record = {ALIASES.get(k, k): v for k, v in record.items() if not (k in ALIASES and ALIASES[k] in record)}
    check = Checker(record, from_text)
    get = record.get

    trace_id = check.text("trace_id", get("trace_id"), required=True)
    model_id = check.text("model_id", get("model_id"), required=True)
    ts: float | None = None
    if get("ts") is None or (from_text and get("ts") == ""):
        if not compact:
            check.problems.append("ts is required")
    else:
        try:
            ts = parse_ts(get("ts"), from_text)
        except ValueError as exc:
            check.problems.append(f"ts {exc}")
        else:
            if now is not None and ts > now + MAX_FUTURE_SKEW_SECONDS:
                check.problems.append(
                    f"ts must be at most {MAX_FUTURE_SKEW_SECONDS:.0f} s ahead of now ({now:.0f}), got {ts:.0f}")

    outcome = check.choice("outcome", get("outcome"), OUTCOMES, None)
    ok = check.flag("ok", get("ok"), optional=True)
    if outcome is None and ok is None and not any(p.startswith(("outcome", "ok ")) for p in check.problems):
        check.problems.append("an outcome is required: outcome (one of "
                              + ", ".join(OUTCOMES) + ") or ok (true/false)")

    strings = {name: check.text(name, get(name)) for name in _STR_FIELDS}
    counts = {name: check.count(name, get(name)) for name in _COUNT_FIELDS}
    if counts["tokens_cached_in"] > counts["tokens_in"]:
        check.problems.append(
            f"tokens_cached_in must be <= tokens_in ({counts['tokens_in']}), got {counts['tokens_cached_in']}")
    flags = {name: check.flag(name, get(name), optional=False) for name in _BOOL_FIELDS}
    benign = check.flag("benign", get("benign"), optional=True)
    recontact = check.flag("recontact_24h", get("recontact_24h"), optional=True)
    arm = check.choice("arm", get("arm"), ARMS, "baseline")
    user_signal = check.choice("user_signal", get("user_signal"), USER_SIGNALS, "none")
    fees = check.number("fees_usd", get("fees_usd"), 0.0, MAX_FEES_USD)
    if "_lat_seconds" in record:
        latency = check.number("lat", get("_lat_seconds"), None, MAX_LATENCY_MS / 1000.0)
    else:
        latency_ms = check.number("latency_ms", get("latency_ms"), None, MAX_LATENCY_MS)
        latency = None if latency_ms is None else latency_ms / 1000.0
    trial_value = get("trial")
    trial = None if trial_value is None or (from_text and trial_value == "") else check.count("trial", trial_value)

    tags_value = get("tags") or {}
    tags: dict[str, str] = {}
    if not isinstance(tags_value, Mapping):
        check.bad("tags", tags_value, "an object of string values")
    else:
        for key, value in tags_value.items():
            _tag(check, tags, f"tags.{key}", key, value)
    if not compact:
        for key, value in record.items():
            if key not in KNOWN_FIELDS and value is not None:
                _tag(check, tags, key, key, value)

    if check.problems:
        raise TraceError(check.problems, where)
    assert trace_id is not None and model_id is not None
    by_name: dict[str, Any] = {**counts, **flags}  # the int fields of _COUNT_FIELDS, the bool ones of _BOOL_FIELDS
    return Trace(
        trace_id=trace_id, ts=ts, model_id=model_id,
        release=strings["release"] or model_id, arm=arm or "baseline",
        success=success_proxy(ok, outcome, user_signal or "none", recontact),
        outcome=outcome, ok=ok,
        scaffold_hash=strings["scaffold_hash"], prompt_hash=strings["prompt_hash"],
        tool_schema_hash=strings["tool_schema_hash"], config_hash=strings["config_hash"],
        pair_id=strings["pair_id"], task_type=strings["task_type"], tenant=strings["tenant"],
        locale=strings["locale"], tags=tags, task_id=strings["task_id"], trial=trial,
        fees_usd=fees or 0.0, latency_seconds=latency, user_signal=user_signal or "none",
        recontact_24h=recontact, benign=benign, **by_name,
    )


def to_record(trace: Trace) -> dict[str, Any]:
    """The full-form JSON object of a trace (inverse of :func:`validate`)."""
    out: dict[str, Any] = {"trace_id": trace.trace_id, "ts": trace.ts, "model_id": trace.model_id,
                           "release": trace.release, "arm": trace.arm}
    if trace.outcome is not None:
        out["outcome"] = trace.outcome
    if trace.ok is not None:
        out["ok"] = trace.ok
    for name in ("scaffold_hash", "prompt_hash", "tool_schema_hash", "config_hash", "pair_id", "task_type",
                 "tenant", "locale", "task_id", "trial", "benign", "recontact_24h"):
        value = getattr(trace, name)
        if value is not None:
            out[name] = value
    for name in _COUNT_FIELDS + _BOOL_FIELDS:
        out[name] = getattr(trace, name)
    out["fees_usd"] = trace.fees_usd
    if trace.latency_seconds is not None:
        out["latency_ms"] = trace.latency_seconds * 1000.0
    if trace.user_signal != "none":
        out["user_signal"] = trace.user_signal
    if trace.tags:
        out["tags"] = dict(trace.tags)
    return out
