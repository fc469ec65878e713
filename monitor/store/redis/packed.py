"""A window aggregate packed into one hash field (the format of :mod:`monitor.store.redis.layout`).

The packed text is the JSON array ``[field, value, ...]`` of the aggregate's non-zero fields but
its sketch buckets (integers as decimal text, the float fields as ``repr``: the text a hash field
would hold), a newline (JSON escapes its own), then ``index count ...`` of the sketch buckets:
exactly what the read scripts send for any hash, so :func:`monitor.store.redis.wire.decode_hash`
reads it. :data:`PACKING` is the same format's Lua, which the apply script (``scripts.APPLY``) merges
increments with and the read scripts (``FETCH``, ``TOTALS``) send hashes in; nothing here talks to Redis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from string import Template
from typing import Protocol, cast, runtime_checkable

import orjson

from monitor.aggregate import FLOAT_FIELDS, LATENCY_PREFIX, Aggregate
from monitor.delta import BatchDelta, WindowKey
from monitor.sketch import ZERO_KEY
from monitor.store.redis.layout import PACKED_FIELD

__all__ = ["PACKED_FIELD", "PACKING", "PackedHeld", "hash_fields", "pack", "pack_held", "pack_python",
           "packed_windows", "window_fields"]

_ZERO_FIELD = LATENCY_PREFIX + ZERO_KEY
_BUCKET_FIELDS: dict[int, str] = {}   # sketch bucket index -> its hash field name (a few hundred at most)

try:
    from fleetmon_native import WindowPacker as _WindowPacker
except ImportError:  # not built: every window is packed in Python
    _PACKER = None
else:
    _PACKER = _WindowPacker(sorted(FLOAT_FIELDS), _ZERO_FIELD)

# Lua functions for the scripts that start with them. merged(a, b): two packed texts added (integers
# exact below 2^53 as '%.0f', the float fields '%.17g': what HINCRBY / HINCRBYFLOAT would store;
# fields and buckets in first-seen order). encode(flat): a hash's HGETALL as packed text (a packed field
# as it is; fields held beside it, or a hash held field by field, added to it). Also binds the locals
# call, sub, tonumber that the read scripts use.
PACKING = Template("""
local call, sub, tonumber = redis.call, string.sub, tonumber
local find, gmatch, format, concat = string.find, string.gmatch, string.format, table.concat
local is_float = {$float_set}
local function merged(old, new)
  local a, b = find(old, '\\n', 1, true), find(new, '\\n', 1, true)
  local plain, add = cjson.decode(sub(old, 1, a - 1)), cjson.decode(sub(new, 1, b - 1))
  local at = {}
  for j = 1, #plain, 2 do at[plain[j]] = j + 1 end
  for j = 1, #add, 2 do
    local f = add[j]
    local p = at[f]
    if p then
      local v = tonumber(plain[p]) + tonumber(add[j + 1])
      plain[p] = is_float[f] and format('%.17g', v) or format('%.0f', v)
    else
      plain[#plain + 1] = f
      plain[#plain + 1] = add[j + 1]
      at[f] = #plain
    end
  end
  local counts, order = {}, {}
  for _, text in ipairs({sub(old, a + 1), sub(new, b + 1)}) do
    for i, n in gmatch(text, '(%S+) (%S+)') do
      local c = counts[i]
      if c then counts[i] = c + tonumber(n) else counts[i] = tonumber(n); order[#order + 1] = i end
    end
  end
  local out = {}
  for k = 1, #order do
    out[2 * k - 1] = order[k]
    out[2 * k] = format('%.0f', counts[order[k]])
  end
  return cjson.encode(plain) .. '\\n' .. concat(out, ' ')
end
local function encode(flat)
  if #flat == 2 and flat[1] == '$packed' then return flat[2] end
  local plain, buckets, packed = {}, {}, nil
  for j = 1, #flat, 2 do
    local f = flat[j]
    if f == '$packed' then
      packed = flat[j + 1]
    elseif sub(f, 1, $latency_length) == '$latency' and f ~= '$latency_zero' then
      buckets[#buckets + 1] = sub(f, $latency_length + 1)
      buckets[#buckets + 1] = flat[j + 1]
    else
      plain[#plain + 1] = f
      plain[#plain + 1] = flat[j + 1]
    end
  end
  local text = cjson.encode(plain) .. '\\n' .. concat(buckets, ' ')
  if packed then return merged(packed, text) end
  return text
end
""").substitute(
    packed=PACKED_FIELD, latency=LATENCY_PREFIX, latency_length=len(LATENCY_PREFIX), latency_zero=_ZERO_FIELD,
    float_set=", ".join(f"['{name}'] = true" for name in sorted(FLOAT_FIELDS)))


def pack(agg: Aggregate) -> str:
    """``agg`` as a window hash's packed field (see the module docstring); zero counts left out.

    Written natively (``fleetmon_native.WindowPacker``, ~10x faster) when that is installed and
    sure to write the same text; else by :func:`pack_python`.
    """
    if _PACKER is not None:
        latency = agg.latency
        text = _PACKER.pack(agg.counts, latency.buckets, latency.zero_count)
        if text is not None:
            return text
    return pack_python(agg)


@runtime_checkable
class PackedHeld(Protocol):
    """Windows held natively that pack themselves (:class:`streams.native.HeldWindows`)."""

    @property
    def window_keys(self) -> Sequence[WindowKey]: ...
    def packed_windows(self, floats: Sequence[str], zero_field: str) -> list[str | None]: ...
    def window_traces(self) -> list[int]: ...
    def windows(self) -> list[Aggregate]: ...


def packed_windows(delta: BatchDelta) -> Iterable[tuple[WindowKey, str, int]]:
    """Each window of ``delta``: its key, its :func:`pack` text and its ``traces``, in the delta's order
    (packed where they are held, without making them Aggregates, when they pack themselves)."""
    held = delta.held_windows
    if isinstance(held, PackedHeld):
        return zip(held.window_keys, pack_held(held), held.window_traces(), strict=True)
    return ((key, pack(agg), agg.traces) for key, agg in delta.windows.items())


def hash_fields(agg: Aggregate) -> tuple[dict[str, str], dict[str, str]]:
    """``agg`` as one hash's fields written field by field (a total's): the integer fields and sketch
    buckets (``latency:<index>``, ``latency:z``), then the float fields, as decimal text; zeros left out."""
    counts = agg.counts
    fields = {name: str(int(value)) for name, value in counts.items() if value and name not in FLOAT_FIELDS}
    latency = agg.latency
    names = _BUCKET_FIELDS
    for index, n in latency.buckets.items():
        name = names.get(index)
        if name is None:
            name = names[index] = LATENCY_PREFIX + str(index)
        fields[name] = str(int(n))
    if latency.zero_count:
        fields[_ZERO_FIELD] = str(int(latency.zero_count))
    return fields, {name: repr(float(counts[name])) for name in FLOAT_FIELDS if counts.get(name)}


def pack_held(held: PackedHeld) -> list[str]:
    """Every held window's :func:`pack` text, in order: packed natively, and by :func:`pack_python` where
    the native packer is not sure to write Python's text (then every window is made an Aggregate)."""
    texts = held.packed_windows(sorted(FLOAT_FIELDS), _ZERO_FIELD)
    if None in texts:
        aggregates = held.windows()
        return [pack_python(aggregates[i]) if text is None else text for i, text in enumerate(texts)]
    return cast("list[str]", texts)


def pack_python(agg: Aggregate) -> str:
    """:func:`pack` in Python: the reference the native packer is checked against."""
    plain: list[str] = []
    for name, value in agg.counts.items():
        if value:
            plain.append(name)
            plain.append(repr(float(value)) if name in FLOAT_FIELDS else str(int(value)))
    latency = agg.latency
    if latency.zero_count:
        plain.append(_ZERO_FIELD)
        plain.append(str(int(latency.zero_count)))
    buckets = latency.buckets
    # one C-level format for every bucket: ~100 a window, most of the packing's time when done one by one
    text = " ".join(("%d %d",) * len(buckets)) % tuple(chain.from_iterable(buckets.items())) if buckets else ""
    return orjson.dumps(plain).decode() + "\n" + text


def _as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def window_fields(raw: Mapping[bytes, bytes] | Mapping[str, str]) -> dict[str, str]:
    """A window hash as HGETALL returns it → its aggregate's fields, one per name, as decimal text.

    The packed field is expanded (buckets as ``latency:<index>``); a field held outside it (a hash
    written before windows were packed, or edited by hand) is added to the packed one's value, as
    the read scripts add them. For tests and tools that look at raw keys; readers use the scripts.
    """
    fields: dict[str, str] = {}
    packed = None
    for key, value in raw.items():
        name = _as_text(key)
        if name == PACKED_FIELD:
            packed = _as_text(value)
        else:
            fields[name] = _as_text(value)
    if packed is None:
        return fields
    head, _, tail = packed.partition("\n")
    flat = orjson.loads(head) or []
    numbers = tail.split()
    inside = dict(zip(flat[0::2], flat[1::2]))
    inside.update({LATENCY_PREFIX + index: n for index, n in zip(numbers[0::2], numbers[1::2])})
    for name, value in fields.items():
        if name in inside:
            total = float(inside[name]) + float(value)
            inside[name] = repr(total) if name in FLOAT_FIELDS else str(int(total))
        else:
            inside[name] = value
    return inside
