"""Bounds on trace values, so that no accepted record can corrupt the state.

A value outside these bounds is rejected (never clamped) by
:func:`monitor.schema.validate` and, identically, by the native fast path
(which is built with these constants; :mod:`streams.native`):

* counts are integers in ``[0, MAX_TOKENS]`` for ``tokens_*`` and
  ``[0, MAX_COUNT]`` for ``steps``, ``tool_calls``, ``tool_errors``,
  ``side_effects`` and ``trial`` — sums of any realistic stream then stay far
  below 2^53, where Redis's float increments would start to round;
* ``latency_ms`` is finite in ``[0, MAX_LATENCY_MS]``, ``fees_usd`` finite in
  ``[0, MAX_FEES_USD]``, ``ts`` finite in ``[0, MAX_TS]``;
* label text (every string field, tag key and tag value) is at most
  ``MAX_LABEL_CHARS`` code points with no control (C0, DEL, C1) or bidi
  override characters; the identifiers ``trace_id`` and ``pair_id`` are
  bounded in length only.

:class:`Checker` applies these rules to one record's fields.

:func:`loads` decodes JSON like orjson but rejects an object with a repeated
key (orjson silently keeps the last one), so ``"outcome":"bogus",
"outcome":"success"`` is not counted as a success.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

try:  # orjson is ~5x faster than json on trace-sized objects
    from orjson import JSONDecodeError
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a declared dependency
    from json import JSONDecodeError  # type: ignore[assignment]
    from json import loads as _fast_loads  # type: ignore[assignment]

MAX_TOKENS = 10**12
MAX_COUNT = 10**9
TOKEN_FIELDS = frozenset(("tokens_in", "tokens_out", "tokens_cached_in"))
MAX_LATENCY_MS = 7 * 86_400 * 1000.0   # 7 days
MAX_FEES_USD = 1e6
MAX_TS = 253_402_300_799.0             # 9999-12-31T23:59:59Z
MAX_LABEL_CHARS = 256
#: Identifiers, never label values: bounded in length only.
ID_FIELDS = frozenset(("trace_id", "pair_id"))

_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_KEY_END = re.compile(rb'"\s*:')
_TRUE_TEXT = frozenset(("1", "true", "True", "TRUE", "yes"))
_FALSE_TEXT = frozenset(("0", "false", "False", "FALSE", "no"))



def count_limit(name: str) -> int:
    """The largest value the count field ``name`` may take."""
    return MAX_TOKENS if name in TOKEN_FIELDS else MAX_COUNT


def label_problem(text: str, printable: bool = True) -> str | None:
    """Why ``text`` cannot be a label value (None when it can); ``printable=False`` checks the length only."""
    if len(text) > MAX_LABEL_CHARS:
        return f"at most {MAX_LABEL_CHARS} characters long (got {len(text)})"
    bad = _BAD_CHARS.search(text) if printable else None
    if bad is not None:
        return f"printable text without control or bidi characters (found U+{ord(bad.group()):04X})"
    return None


class Checker:
    """Collects problems while reading fields of one record (each names field, value and rule)."""

    def __init__(self, record: Mapping[str, Any], from_text: bool) -> None:
        self.record = record
        self.from_text = from_text
        self.problems: list[str] = []

    def bad(self, name: str, value: Any, allowed: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        self.problems.append(f"{name} must be {allowed}, got {shown}")

    def text(self, name: str, value: Any, required: bool = False) -> str | None:
        if value is None or (self.from_text and value == "" and not required):
            if required:
                self.problems.append(f"{name} is required")
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            self.bad(name, value, "a string")
            return None
        text = str(value)
        if required and not text:
            self.bad(name, text, "a non-empty string")
            return None
        return text if self.label(name, text, printable=name not in ID_FIELDS) else None

    def label(self, name: str, text: str, printable: bool = True) -> bool:
        problem = label_problem(text, printable)
        if problem is not None:
            self.bad(name, text, problem)
        return problem is None

    def count(self, name: str, value: Any) -> int:
        if value is None or (self.from_text and value == ""):
            return 0
        if self.from_text and isinstance(value, str):
            try:
                value = float(value) if "." in value or "e" in value.lower() else int(value)
            except ValueError:
                self.bad(name, value, "an integer >= 0")
                return 0
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.bad(name, value, "an integer >= 0")
            return 0
        if value > count_limit(name):
            self.bad(name, value, f"an integer <= {count_limit(name)}")
            return 0
        return value

    def number(self, name: str, value: Any, default: float | None, limit: float) -> float | None:
        if value is None or (self.from_text and value == ""):
            return default
        if self.from_text and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                self.bad(name, value, "a finite number >= 0")
                return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            self.bad(name, value, "a finite number >= 0")
            return default
        if value > limit:
            self.bad(name, value, f"a number <= {limit:.0f}")
            return default
        return float(value)

    def flag(self, name: str, value: Any, optional: bool) -> bool | None:
        if value is None or (self.from_text and value == ""):
            return None if optional else False
        if self.from_text and isinstance(value, str):
            if value in _TRUE_TEXT:
                return True
            if value in _FALSE_TEXT:
                return False
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1) and not self.from_text:
            return bool(value)
        if self.from_text and isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        self.bad(name, value, "true or false")
        return None if optional else False

    def choice(self, name: str, value: Any, allowed: tuple[str, ...], default: str | None) -> str | None:
        if value is None or (self.from_text and value == ""):
            return default
        if value not in allowed:
            self.bad(name, value, "one of " + ", ".join(allowed))
            return default
        chosen: str = value  # a member of allowed
        return chosen


class DuplicateKeyError(JSONDecodeError):
    """A JSON object with a key given more than once."""

    def __str__(self) -> str:
        return self.msg


def _keys(value: Any) -> int:
    """The number of object keys in a decoded JSON value, nested ones included."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            total += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            shown = f"{out[key]!r}, then {value!r}"
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise DuplicateKeyError(f"key {key!r} appears more than once in an object ({shown}); "
                                    "each key may appear once", "", 0)
        out[key] = value
    return out


def loads(value: bytes | str) -> Any:
    """Decode JSON; raise :class:`DuplicateKeyError` (a ``JSONDecodeError``) for a repeated key.

    Cheap in the common case: every key ends with ``"`` and ``:``, so when the
    decoded value holds as many keys as the text has such endings, no key
    was dropped; only otherwise is the text parsed again, pair by pair.
    """
    data = _fast_loads(value)
    raw = value.encode() if isinstance(value, str) else value
    if isinstance(data, (dict, list)) and _keys(data) < len(_KEY_END.findall(raw)):
        try:
            json.loads(raw, object_pairs_hook=_no_duplicates)
        except RecursionError:  # nesting this deep is rejected by validation anyway
            pass
    return data
