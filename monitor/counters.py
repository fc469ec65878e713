"""Flat additive counter records: validated, mergeable, with a codec to/from a flat hash (pure).

A :class:`Counters` subclass is a frozen dataclass whose fields are ``int``
counts (>= 0) or finite ``float`` sums. ``merge`` adds field by field, so the
record of two disjoint sets of events is the merge of theirs (associative,
commutative, the empty record is the identity). ``to_dict`` gives every field
(``str -> int | float``); ``from_dict`` accepts what a Redis hash returns
(names and values as ``bytes`` or ``str``), reads a missing field as 0 (so a
new counter never breaks old state) and raises naming the field and value
when one is not a number of the field's kind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Self


def hash_number(field_name: str, raw: Any, integer: bool) -> int | float:
    """A hash value (``bytes``, ``str`` or a number) as the number field ``field_name`` holds."""
    if isinstance(raw, bytes):
        raw = raw.decode()
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{field_name} must be a number, got {raw!r}") from None
    if integer:
        if not value.is_integer():
            raise ValueError(f"{field_name} must be an integer, got {raw!r}")
        return int(value)
    return value


@dataclass(frozen=True)
class Counters:
    """Base of flat counter records (see the module docstring); subclasses add the fields."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{f.name} must be an integer >= 0, got {value!r}")
            if f.type == "float" and not math.isfinite(value):
                raise ValueError(f"{f.name} must be finite, got {value!r}")

    def to_dict(self) -> dict[str, int | float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, hash_fields: Mapping[Any, Any]) -> Self:
        named = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in hash_fields.items()}
        values = {f.name: hash_number(f.name, named.get(f.name, 0), integer=(f.type == "int")) for f in fields(cls)}
        return cls(**values)

    def merge(self, other: Self) -> Self:
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(self).__name__} with {type(other).__name__}")
        return type(self)(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})
