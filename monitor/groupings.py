"""Slice groupings: the bounded set of dimension combinations every trace is counted in (pure).

Like the grouping sets of a SQL cube, a trace is not stored once under the
full cross-product of its dimensions but once in **each grouping** of a
small, explicit set. A grouping is a set of slice dimensions that always
holds the *base* dimensions (``release`` and ``arm``, those of them the
slicer has); its *extras* are the others. The defaults
(:func:`default_groupings`) are the base alone, the base with each single
other dimension, and — so that the canary can stratify every comparison
slice by task type — the base with ``task_type`` and each other single
dimension; the operator adds cross-dimension groupings in the config
(``[slices] groupings``).

Ids. A stored slice keeps its ``dim=value|...`` id (:mod:`monitor.slices`)
and carries only its grouping's dimensions, in the slicer's order, so the
grouping of a stored slice is its set of dimensions: :func:`grouping_name`
is the extras joined with ``,`` (``""`` for the base alone, e.g.
``task_type,tenant``). Readers pick the rows of one grouping
(:func:`rows_of`); summing the rows of two groupings would count a trace
twice.

Budgets. Each grouping other than the base admits at most ``budget``
distinct combinations — a row's values: release, arm and its extras — so its
stored rows are at most ``budget`` plus one ``__other__`` row per release and
arm, whatever the traffic (the base grouping's rows are bounded by the
per-dimension caps on release and arm). Admission is first-seen: a stream
cannot know tomorrow's top values, and re-labelling an admitted combination
later would break its series, so the first combinations seen are kept (in a
steady fleet they carry the volume) and later ones fold into their release
and arm's row of the grouping whose extras all read ``__other__`` — that row
uses no budget. The fold is counted per grouping (``grouping_folded:<name>``,
exported as ``fleetmon_grouping_folded_total``). The admitted sets are kept by
the cardinality guard (in Redis for the workers, so all of them agree) and,
like the per-dimension sets, until the store is rebuilt: a grouping's budget
must hold every combination the releases kept between rebuilds bring (a new
release whose combinations no longer fit is counted in its ``__other__``
rows; docs/metrics.md "Slice groupings" sizes it).

Guarantees (tested as invariants): every trace counts exactly once per
grouping; each grouping's rows sum to the whole fleet; no grouping admits
more than ``budget`` combinations; a grouping's folded count equals the
traces whose row is not their own combination.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import Any

from monitor.slices import (
    COMPARISON_EXCLUDED_DIMENSIONS,
    OTHER,
    UNKNOWN,
    WHOLE_FLEET,
    CardinalityGuard,
    SliceKey,
    Slicer,
    answers_inline,
    slice_id,
)

#: Dimensions every grouping holds (those of them the slicer has).
BASE_DIMENSIONS = ("release", "arm")
#: The canary's stratum: every comparison slice is split by it (alerts/engine.py).
STRATUM_DIMENSION = "task_type"
DEFAULT_BUDGET = 1000
#: Counter of the traces a grouping's budget folded into its ``__other__`` row.
FOLDED_COUNTER_PREFIX = "grouping_folded:"
#: The guard's name of a grouping's admitted set (``P:dims:grouping:<name>`` in Redis).
ADMITTED_PREFIX = "grouping:"


@dataclass(frozen=True)
class Grouping:
    """A set of slice dimensions, in the slicer's order, and its budget of extra-value combinations."""

    dimensions: tuple[str, ...]
    budget: int = DEFAULT_BUDGET

    @cached_property
    def extras(self) -> tuple[str, ...]:
        return tuple(d for d in self.dimensions if d not in BASE_DIMENSIONS)

    @cached_property
    def name(self) -> str:
        """The extras joined with ``,``; ``""`` for the base grouping (the ``grouping`` label)."""
        return ",".join(self.extras)


def grouping_name(key: Iterable[tuple[str, str]]) -> str:
    """The name of the grouping a stored slice belongs to, from its dimensions."""
    return ",".join(d for d, _ in key if d not in BASE_DIMENSIONS)


def default_groupings(dimensions: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Base; base × each other dimension; base × ``task_type`` × each other (see the module docstring)."""
    extras = [d for d in dimensions if d not in BASE_DIMENSIONS]
    out: list[frozenset[str]] = [frozenset()]
    out += [frozenset((d,)) for d in extras]
    if STRATUM_DIMENSION in extras:
        out += [frozenset((STRATUM_DIMENSION, d)) for d in extras if d != STRATUM_DIMENSION]
    return tuple(_ordered(dimensions, s) for s in out)


def _ordered(dimensions: Sequence[str], extras: Iterable[str]) -> tuple[str, ...]:
    wanted = set(extras) | set(BASE_DIMENSIONS)
    return tuple(d for d in dimensions if d in wanted)


@dataclass(frozen=True)
class GroupingSet:
    """The groupings a slicer counts each trace in, in order (defaults first, then the operator's)."""

    dimensions: tuple[str, ...]
    groupings: tuple[Grouping, ...]

    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.groupings)

    def get(self, name: str) -> Grouping | None:
        return next((g for g in self.groupings if g.name == name), None)

    def rows(self, key: SliceKey, admit: Callable[[Grouping, str], bool]) -> list[tuple[Grouping, SliceKey, bool]]:
        """Per grouping, the row a trace of full (guarded) key ``key`` counts in and whether it was folded.

        ``admit(grouping, row_id)`` answers whether a combination (the row's id: its
        release, arm and extras) is admitted; it is asked only for rows whose extras
        are not all ``__other__``. ``key`` holds the slicer's dimensions in order.

        With an ``admit`` of :func:`guard_admit` (one per fold), each grouping's row,
        id and fold are remembered per projection (the key's values of its
        dimensions) for that object's life: the admit is still asked every time, in
        the same order, unless the guard is the pure one (its answers stand: see
        :func:`monitor.slices.answers_inline`), whose remembered answer is reused.
        """
        if isinstance(admit, GuardAdmit) and len(key) == len(self.dimensions) and key:
            dims, values = zip(*key)
            if dims == self.dimensions:
                return self._remembered_rows(key, values, admit)
        values_of = dict(key)
        out = []
        for g in self.groupings:
            row = tuple((d, values_of[d]) for d in g.dimensions)
            folded = False
            extras = [v for d, v in row if d not in BASE_DIMENSIONS]
            if extras and any(v != OTHER for v in extras) and not admit(g, slice_id(row)):
                row = tuple((d, v if d in BASE_DIMENSIONS else OTHER) for d, v in row)
                folded = True
            out.append((g, row, folded))
        return out

    @cached_property
    def _plan(self) -> tuple[tuple[Grouping, Callable[[Sequence[Any]], Hashable], tuple[int, ...],
                                   tuple[int, ...]], ...]:
        """Per grouping: it, its projection of the key's values, its dimensions' and its extras' positions."""
        out = []
        for g in self.groupings:
            where = tuple(self.dimensions.index(d) for d in g.dimensions)
            extras = tuple(i for i, d in enumerate(g.dimensions) if d not in BASE_DIMENSIONS)
            project: Callable[[Sequence[Any]], Hashable] = itemgetter(*where) if where else _nothing
            out.append((g, project, where, extras))
        return tuple(out)

    def _remembered_rows(self, key: SliceKey, values: Sequence[str], admit: GuardAdmit,
                         ) -> list[tuple[Grouping, SliceKey, bool]]:
        """:meth:`rows` for a key in the slicer's order, through ``admit``'s memory (same rows, same questions)."""
        memory = admit.memory_for(self)
        final = admit.final
        out: list[tuple[Grouping, SliceKey, bool]] = []
        for (g, project, where, extras), known in zip(self._plan, memory):
            projection = project(values)
            seen = known.get(projection)
            if seen is None:
                row: SliceKey = tuple([key[i] for i in where])
                sid, folded_row = None, row
                if any(row[i][1] != OTHER for i in extras):   # a combination: the guard is asked
                    sid = slice_id(row)
                    folded_row = tuple([(d, OTHER) if i in extras else (d, v) for i, (d, v) in enumerate(row)])
                seen = known[projection] = (row, False, sid, folded_row)
            row, folded, sid, folded_row = seen
            if sid is not None:
                folded = not admit(g, sid)
                if folded:
                    row = folded_row
                if final:   # the pure guard's answer stands (its sets only grow): it is not asked again
                    known[projection] = (row, folded, None, row)
            out.append((g, row, folded))
        return out


def grouping_set(dimensions: Sequence[str], extra: Iterable[Sequence[str]] = (), budget: int = DEFAULT_BUDGET,
                 budgets: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> GroupingSet:
    """The default groupings of ``dimensions`` plus ``extra`` (lists of dimensions; the base is implied),
    each with ``budget`` unless ``budgets`` names it (by its dimensions joined with ``,``, any order).

    Raises ValueError naming the config field, the value and what is allowed.
    """
    dimensions = tuple(dimensions)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"slices.grouping_budget must be an integer >= 1, got {budget!r}")
    others = [d for d in dimensions if d not in BASE_DIMENSIONS]
    specs = list(default_groupings(dimensions))
    for i, dims in enumerate(extra):
        if isinstance(dims, str) or not all(isinstance(d, str) for d in dims):
            raise ValueError(f"slices.groupings[{i}] must be a list of dimension names, got {dims!r}")
        unknown = [d for d in dims if d not in dimensions]
        if unknown or len(set(dims)) != len(dims):
            raise ValueError(f"slices.groupings[{i}] must be distinct dimensions of slices.dimensions "
                             f"{list(dimensions)}, got {list(dims)}")
        ordered = _ordered(dimensions, dims)
        if ordered not in specs:
            specs.append(ordered)
    by_name = {",".join(d for d in dims if d not in BASE_DIMENSIONS): dims for dims in specs}
    overrides: dict[str, int] = {}
    for name, value in (budgets.items() if isinstance(budgets, Mapping) else budgets):
        parts = [p.strip() for p in str(name).split(",") if p.strip()]
        canonical = ",".join(d for d in others if d in parts)
        if set(parts) - set(others) or canonical not in by_name or not parts:
            raise ValueError(f"slices.grouping_budgets key must name a grouping (its dimensions other than "
                             f"release and arm, joined with ','), one of {sorted(n for n in by_name if n)}, "
                             f"got {name!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"slices.grouping_budgets[{name!r}] must be an integer >= 1, got {value!r}")
        overrides[canonical] = value
    return GroupingSet(dimensions, tuple(Grouping(dims, overrides.get(name, budget))
                                         for name, dims in by_name.items()))


def of_slicer(slicer: Slicer) -> GroupingSet:
    """The slicer's groupings; the default ones of its dimensions (set on it once) when it has none."""
    found = slicer.groupings
    if found is None:
        found = slicer.groupings = grouping_set(slicer.dimensions)
    if not isinstance(found, GroupingSet):
        raise TypeError(f"a slicer's groupings must be a GroupingSet, got {type(found).__name__}")
    return found


def _nothing(values: Sequence[Any]) -> Hashable:
    return ()


class GuardAdmit:
    """``GroupingSet.rows``'s ``admit`` through a guard: one admitted set per grouping, capped by its budget.

    It also holds what :meth:`GroupingSet.rows` remembers for its life (meant to be one fold): per
    grouping and projection the row, its id (when the guard is asked about it) and its folded row,
    and, when the guard is the pure one (:func:`monitor.slices.answers_inline`), the answer instead.
    Nothing may remove values from the pure guard's sets while it lives; any other guard (the Redis
    guard, whose ``forget`` clears them) is asked again every time.
    """

    __slots__ = ("final", "guard", "_memory", "_of")

    def __init__(self, guard: CardinalityGuard) -> None:
        self.guard = guard
        self.final = answers_inline(guard)
        self._of: GroupingSet | None = None
        self._memory: list[dict[Hashable, tuple[SliceKey, bool, str | None, SliceKey]]] = []

    def __call__(self, grouping: Grouping, combination: str) -> bool:
        return self.guard.admit_capped(ADMITTED_PREFIX + grouping.name, combination, grouping.budget) != OTHER

    def memory_for(self, of: GroupingSet) -> list[dict[Hashable, tuple[SliceKey, bool, str | None, SliceKey]]]:
        """Per grouping of ``of``, what is remembered (forgotten when asked for another set)."""
        if self._of is not of:
            self._of = of
            self._memory = [{} for _ in of.groupings]
        return self._memory


def guard_admit(guard: CardinalityGuard) -> GuardAdmit:
    """``GroupingSet.rows``'s ``admit`` through ``guard`` (:class:`GuardAdmit`), meant for one fold."""
    return GuardAdmit(guard)


def rows_of(ids: Iterable[str], name: str, parse: Callable[[str], SliceKey]) -> dict[str, SliceKey]:
    """The ids (and parsed keys) of the stored slices of grouping ``name``."""
    out = {}
    for sid in ids:
        key = parse(sid)
        if grouping_name(key) == name:
            out[sid] = key
    return out


def comparison_feeds(key: SliceKey, stratum: str | None = None) -> tuple[tuple[SliceKey, str], ...]:
    """The comparison slices (:func:`monitor.slices.comparison_slices`) a row of one grouping stands for,
    each with the row's value of ``stratum`` (``unknown`` without one).

    Each comparison slice is read from exactly one grouping, so no trace counts
    twice: unstratified (``stratum`` None: the slicer has no such dimension),
    the whole fleet from the base rows and ``d=v`` from the base × ``d`` rows;
    stratified, the whole fleet and ``stratum=v`` from the base × ``stratum``
    rows and ``d=v`` from the base × ``stratum`` × ``d`` rows. Every other row
    stands for nothing. An ``unknown`` value stands for no single-dimension slice
    (it would repeat the whole fleet), as in ``comparison_slices``.
    """
    extras = [(d, v) for d, v in key if d not in BASE_DIMENSIONS]
    values = dict(extras)
    if stratum is not None:
        if stratum not in values:
            return ()
        level = values[stratum]
        rest = [(d, v) for d, v in extras if d != stratum]
        if not rest:
            own = ((((stratum, level),), level),) if _comparable(stratum, level) else ()
            return ((WHOLE_FLEET, level), *own)
        if len(rest) == 1 and _comparable(*rest[0]):
            return (((rest[0],), level),)
        return ()
    if not extras:
        return ((WHOLE_FLEET, UNKNOWN),)
    if len(extras) == 1 and _comparable(*extras[0]):
        return (((extras[0],), UNKNOWN),)
    return ()


def _comparable(dim: str, value: str) -> bool:
    return dim not in COMPARISON_EXCLUDED_DIMENSIONS and value != UNKNOWN


def coerce_groupings(where: str, value: Any, from_env: bool) -> Any:
    """The config's ``slices.groupings`` (TOML: a list of lists of dimensions; environment: ``a,b;c,d``) or
    ``slices.grouping_budgets`` (TOML: a table ``{"a,b" = 5000}``; environment: ``a,b=5000;c=200``) as tuples.

    ``where`` names the setting (it ends with the key); ValueError names it, the value and the form allowed.
    """
    budgets = where.rstrip(")").endswith("grouping_budgets")
    if from_env and isinstance(value, str):
        parts = [p.strip() for p in value.split(";") if p.strip()]
        if not budgets:
            value = [[d.strip() for d in p.split(",") if d.strip()] for p in parts]
        else:
            pairs = [p.rpartition("=") for p in parts]
            if any(not sep or not v.strip().lstrip("-").isdigit() for _, sep, v in pairs):
                raise ValueError(f"{where} must look like 'task_type,tenant=5000;locale=200', got {value!r}")
            value = {k.strip(): int(v) for k, _, v in pairs}
    if budgets:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"{where} must be a table of grouping name = budget, e.g. "
                             f'{{"task_type,tenant" = 5000}}, got {value!r}')
        return tuple(value.items())
    if not isinstance(value, list) or not all(isinstance(g, list) and g and all(isinstance(d, str) and d for d in g)
                                              for g in value):
        raise ValueError(f"{where} must be a list of lists of dimension names, e.g. "
                         f'[["task_type", "tenant"]], got {value!r}')
    return tuple(tuple(g) for g in value)
