"""Slices: which dimensions a trace is grouped by, and the cardinality guard.

A slice (:data:`SliceKey`) is a tuple of ``(dimension, value)`` with
distinct dimensions, in the slicer's dimension order; its id is the text
``dim=value|dim=value`` with ``%``, ``|`` and ``=`` percent-escaped in values,
so ids round-trip and can be parsed back (the order is part of the id, and so
of the store's keys). A missing value is ``unknown``. The whole fleet is
:data:`WHOLE_FLEET`, the empty key (its id is ``""``). A comparison of two
releases is judged on :func:`comparison_slices`.

What is stored per trace is one row per slice grouping (:mod:`monitor.groupings`),
each carrying only its grouping's dimensions; the key of a trace here is the
full, per-dimension guarded key those rows are cut from.

Cardinality guard: each dimension admits at most ``max_values`` distinct
values; the first ones seen are admitted (in a steady fleet the values that
carry the volume appear first), later new values fold into ``__other__``
and the fold counts how many traces were folded per dimension. Admitted
values never change label afterwards, so series stay continuous. The guard
is pure; the Redis store keeps the admitted sets so that all workers agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from monitor.schema import Trace

DEFAULT_DIMENSIONS = ("release", "arm", "task_type", "tenant", "locale")
OTHER = "__other__"
UNKNOWN = "unknown"
#: Dimensions that say which side of a comparison a trace is on, never a slice of the comparison.
COMPARISON_EXCLUDED_DIMENSIONS = ("release", "arm", "model_id")

SliceKey = tuple[tuple[str, str], ...]
"""``(dimension, value)`` pairs, distinct dimensions, in the slicer's dimension order."""

WHOLE_FLEET: SliceKey = ()
"""The slice of every trace (id ``""``); output edges render it (alert labels say ``all``)."""


def slice_key(items: Mapping[str, str] | Sequence[tuple[str, str]] = ()) -> SliceKey:
    """A :data:`SliceKey` from a mapping or pairs, in their order; raises on a repeated dimension."""
    pairs = items.items() if isinstance(items, Mapping) else items
    out = tuple((str(dim), str(value)) for dim, value in pairs)
    dims = [dim for dim, _ in out]
    if len(set(dims)) != len(dims):
        raise ValueError(f"slice key has a repeated dimension: {out!r}")
    return out


def comparison_slices(key: SliceKey) -> tuple[SliceKey, ...]:
    """Where a trace of slice ``key`` counts in a comparison: the whole fleet, plus one
    single-dimension slice per dimension not in :data:`COMPARISON_EXCLUDED_DIMENSIONS` whose
    value is known (an ``unknown`` slice would repeat the whole fleet), in ``key``'s order."""
    return (WHOLE_FLEET, *(((dim, value),) for dim, value in key
                           if dim not in COMPARISON_EXCLUDED_DIMENSIONS and value != UNKNOWN))


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace("|", "%7C").replace("=", "%3D")


def _unescape(value: str) -> str:
    return value.replace("%3D", "=").replace("%7C", "|").replace("%25", "%")


def slice_id(key: SliceKey) -> str:
    # a value with none of the three characters is its own escape (the common case: skip the replaces)
    return "|".join([f"{dim}={_escape(value) if '%' in value or '|' in value or '=' in value else value}"
                     for dim, value in key])


def parse_slice_id(text: str) -> SliceKey:
    if not text:
        return WHOLE_FLEET
    out = []
    for part in text.split("|"):
        dim, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"slice id parts must look like dim=value, got {part!r} in {text!r}")
        out.append((dim, _unescape(value)))
    return tuple(out)


def matches(key: SliceKey, selector: Mapping[str, str]) -> bool:
    """True when every ``dim: value`` of ``selector`` holds in ``key``."""
    values = dict(key)
    return all(values.get(dim) == value for dim, value in selector.items())


#: Distinct values admitted per dimension when the guard's caps do not name it.
DEFAULT_MAX_VALUES = 100


@dataclass
class CardinalityGuard:
    """Caps distinct values per dimension (see the module docstring)."""

    max_values: int | Mapping[str, int] = DEFAULT_MAX_VALUES
    admitted: dict[str, set[str]] = field(default_factory=dict)

    def cap(self, dim: str) -> int:
        if isinstance(self.max_values, int):
            return self.max_values
        return self.max_values.get(dim, DEFAULT_MAX_VALUES)

    def admit(self, dim: str, value: str) -> str:
        return self.admit_capped(dim, value, self.cap(dim))

    def admit_capped(self, dim: str, value: str, cap: int) -> str:
        """``value`` if the set ``dim`` holds it or has room under ``cap`` (it is then added), else ``__other__``.

        The groupings' admitted sets of value combinations (:mod:`monitor.groupings`) use it with their budget.
        """
        seen = self.admitted.setdefault(dim, set())
        if value in seen:
            return value
        if len(seen) < cap:
            seen.add(value)
            return value
        return OTHER

    def admit_each(self, dims: Sequence[str], values: Sequence[str]) -> list[str]:
        """``[admit(dim, value) for dim, value in zip(dims, values)]``, the questions asked in that order.

        The pure guard answers them inline (same sets, same answers, no call per value); a guard whose
        class or instance replaces ``admit``, ``admit_capped`` or ``cap`` (the Redis guard, a test's
        recording guard) is asked each one through ``admit``, as before.
        """
        if not answers_inline(self):
            admit = self.admit
            return [admit(dim, value) for dim, value in zip(dims, values)]
        admitted, max_values = self.admitted, self.max_values
        out = []
        for dim, value in zip(dims, values):
            seen = admitted.get(dim)
            if seen is None:
                seen = admitted[dim] = set()
            if value in seen:
                out.append(value)
                continue
            cap = max_values if isinstance(max_values, int) else max_values.get(dim, DEFAULT_MAX_VALUES)
            if len(seen) < cap:
                seen.add(value)
                out.append(value)
            else:
                out.append(OTHER)
        return out


_INLINE_METHODS = ("admit", "admit_capped", "cap")


def answers_inline(guard: CardinalityGuard) -> bool:
    """True when ``guard`` is the pure guard's behaviour itself: no subclass or instance replaces how it
    answers. Its questions are then unobservable but for the sets they leave, and an answer once given
    stands for as long as no value is removed from the sets (admitted values stay, and a full set stays
    full), so callers may answer inline or remember answers within one fold."""
    kind = type(guard)
    return (kind.admit_capped is CardinalityGuard.admit_capped and kind.admit is CardinalityGuard.admit
            and kind.cap is CardinalityGuard.cap and vars(guard).keys().isdisjoint(_INLINE_METHODS))


class GroupingRows(Protocol):
    """What a slicer places traces with (:class:`monitor.groupings.GroupingSet`)."""

    @property
    def dimensions(self) -> tuple[str, ...]: ...

    def names(self) -> tuple[str, ...]: ...


@dataclass
class Slicer:
    """Turns a trace into its guarded slice key (the full key over every dimension, per-dimension guarded).

    What is stored is not that key but one row per grouping (:mod:`monitor.groupings`, placed by
    :func:`monitor.fold.place_groups`); ``groupings`` None means the default groupings of ``dimensions``.
    """

    dimensions: Sequence[str] = DEFAULT_DIMENSIONS
    guard: CardinalityGuard = field(default_factory=CardinalityGuard)
    groupings: GroupingRows | None = None

    def __post_init__(self) -> None:
        if len(set(self.dimensions)) != len(self.dimensions):
            raise ValueError(f"slice dimensions must be distinct, got {list(self.dimensions)}")
        if self.groupings is not None and tuple(self.groupings.dimensions) != tuple(self.dimensions):
            raise ValueError(f"the groupings are of dimensions {list(self.groupings.dimensions)}, "
                             f"the slicer's are {list(self.dimensions)}")

    def key(self, trace: Trace) -> SliceKey:
        return self.key_for([trace.dimension(dim) or UNKNOWN for dim in self.dimensions])

    def key_for(self, values: Sequence[str]) -> SliceKey:
        """The guarded key of raw dimension values (``unknown`` for missing), in dimension order."""
        dims = self.dimensions
        return tuple(zip(dims, self.guard.admit_each(dims, values)))

    def keys(self, traces: Iterable[Trace]) -> list[SliceKey]:
        return [self.key(t) for t in traces]
