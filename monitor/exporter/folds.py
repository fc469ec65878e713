"""The exporter's served rows that merge several stored rows (``__other__``), kept from scrape to scrape (no I/O).

A folded row is the merge of its members in order (:func:`monitor.exporter.budget.apply_budget`).
:class:`RowFolds` keeps each such row with the member aggregates it was merged from; on the
next scrape a row whose members are the same objects is handed out again (the same object: the
collector's rendered blocks are reused), and one whose member list is the same but some members
changed is moved by those members' changes only: the ops the reader reports for them
(:attr:`monitor.store.redis.reads.SpanReader.steps`, a window's increment: a few buckets), else
their difference (:func:`monitor.store.redis.span_sums.delta`) unless the reader moved the member in
place (its previous object is then :func:`~monitor.store.redis.span_sums.stale`). Anything else is
merged afresh. The parts that move a row are added as one net per count and bucket
(:func:`moved_natively`, native/src/signed.rs: the integers added in Rust, not one Python ``+`` and
two dict operations per entry and part), part by part in Python without the extension.

Guarantee: every row equals a fresh merge of its members field for field and in field order
(integer counts and sketch buckets are added exactly; the float fields are summed again over the
members in member order, the same additions as a fresh merge; the counters' order is the fresh
merge's, though the exporter's figures no longer depend on it: monitor.exporter.figures.cost_usd).
Memory: one aggregate and the member references per folded row served.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import NamedTuple

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.store.redis.reads import Steps
from monitor.store.redis.span_sums import delta, same_sketch, stale

try:  # the net sum of native/src/signed.rs (a tree without `make install`: part by part in Python)
    from fleetmon_native import add_signed as _add_signed
except ImportError:  # pragma: no cover
    _add_signed = None

_NO_FIELDS: frozenset[str] = frozenset()

_FLOAT_FIELDS = tuple(sorted(FLOAT_FIELDS))


class _Row(NamedTuple):
    members: tuple[str, ...]
    parts: tuple[Aggregate, ...]
    merged: Aggregate


def merge_fresh(parts: Sequence[Aggregate]) -> Aggregate:
    """The merge of ``parts`` in order, into a new aggregate (what :func:`apply_budget` serves)."""
    out = Aggregate()
    for part in parts:
        out.merge(part)
    return out


class RowFolds:
    """Folded rows by key, each reused or moved while its members stay the same (module docstring)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[int, str], _Row] = {}
        self._kept: dict[tuple[int, str], _Row] = {}
        #: What the last scrape did: rows handed out again, moved by their members' changes, merged afresh.
        self.last = {"reused": 0, "moved": 0, "merged": 0}

    def start(self) -> None:
        """Begin a scrape: rows not asked for until :meth:`finish` are dropped then."""
        self._kept = {}
        self.last = dict.fromkeys(self.last, 0)

    def finish(self) -> None:
        self._rows, self._kept = self._kept, {}

    def row(self, key: tuple[int, str], members: Sequence[str], aggregates: Mapping[str, Aggregate],
            steps: Steps) -> Aggregate:
        """The merge of ``members``' aggregates (in order); ``key`` names the row (span index or -1, row id).

        ``steps`` are keyed like the reader's ``(span index, member)``; a step is used only when it
        leads from the very aggregate this row was merged from to the member's current one.
        """
        names = tuple(members)
        parts = tuple(aggregates[sid] for sid in names)
        if len(parts) == 1:
            return parts[0]  # the reader's own object (never mutated)
        known = self._rows.get(key)
        merged = None
        if known is not None:
            if known.members == names and all(a is b for a, b in zip(parts, known.parts)):
                merged = known.merged
                self.last["reused"] += 1
            elif 2 * len(set(names).symmetric_difference(known.members)) < len(names):
                merged = _moved(known, parts, key[0], names, steps, aggregates)
                if merged is not None:
                    self.last["moved"] += 1
        if merged is None:
            merged = merge_fresh(parts)
            self.last["merged"] += 1
        self._kept[key] = _Row(names, parts, merged)
        return merged


def _moved(known: _Row, parts: tuple[Aggregate, ...], span: int, names: tuple[str, ...],
           steps: Steps, aggregates: Mapping[str, Aggregate]) -> Aggregate | None:
    """``known.merged`` moved by the members that changed, left or joined; None when a change is not
    known exactly.

    A member's previous aggregate that the reader moved in place (:func:`stale`) is never read:
    when such a member left the row, its old content is taken out as its current one without the
    step that moved it.
    """
    was = dict(zip(known.members, known.parts))
    signed: list[tuple[bool, Aggregate]] = []  # what moves the row: each part added (True) or taken out
    for sid in was.keys() - set(names):  # left the row: exact, it was merged in
        gone = was[sid]
        if not stale(gone):
            signed.append((False, gone))
            continue
        step, now = steps.get((span, sid)), aggregates.get(sid)
        if step is None or now is None or step[0] is not gone or step[1] is not now:
            return None
        # + what it gained - what it lost - its current content
        signed.extend(op for op in step[2] if op[0])
        signed.extend(op for op in step[2] if not op[0])
        signed.append((False, now))
    for sid, now in zip(names, parts):
        before = was.get(sid)
        if now is before:
            continue
        if before is None:
            signed.append((True, now))  # joined the row
            continue
        step = steps.get((span, sid))
        if step is not None and step[0] is before and step[1] is now:
            signed.extend(step[2])
            continue
        if stale(before):
            return None  # moved in place by a step that does not lead here: merged afresh
        gained = delta(now, before)
        if gained is None:
            return None  # something went down (a rebuild): merged afresh
        signed.append((True, gained))
    out = known.merged.copy()
    moved = moved_natively(out, signed)
    if moved is None:  # a count the native sum does not take: part by part, on another copy
        out = known.merged.copy()
        moved = moved_in_python(out, signed)
    if not moved:
        return None
    counts = out.counts
    for key in _FLOAT_FIELDS:  # the fresh merge's additions: 0 + the members' values in order
        total: float = 0
        present = False
        for part in parts:
            value = part.counts.get(key)
            if value is not None:
                total += value
                present = True
        if present:
            counts[key] = total
        else:
            counts.pop(key, None)
    order = dict.fromkeys(chain.from_iterable(part.counts for part in parts))
    if len(order) != len(counts) or any(a != b for a, b in zip(order, counts)):
        out.counts = {key: counts.get(key, 0) for key in order}
    return out


def moved_natively(total: Aggregate, signed: Sequence[tuple[bool, Aggregate]]) -> bool | None:
    """Add each part into ``total`` (True) or take it out (False), in place, as the net of each count
    and bucket over the parts, added once (``add_signed``, native/src/signed.rs), the float fields
    aside (the caller sums them afresh). False when a count or bucket would end below 0 or a sketch
    does not merge; None when the extension is not built or a count is not an int within 64 bits.
    On False or None ``total`` may be half moved: it is the caller's copy, to be dropped.

    The integer counts and buckets equal :func:`moved_in_python`'s; a count that ends at 0 is
    removed, and one whose net is 0 is left where it is (the caller sets the counts' order).
    """
    if _add_signed is None:
        return None
    sketch = total.latency
    if not all(same_sketch(sketch, part) for _add, part in signed):
        return False
    zero = sketch.zero_count + sum(p.latency.zero_count if add else -p.latency.zero_count for add, p in signed)
    count = sketch.count + sum(p.latency.count if add else -p.latency.count for add, p in signed)
    if zero < 0 or count < 0:
        return False
    signs = [add for add, _part in signed]
    moved = _add_signed(total.counts, [part.counts for _add, part in signed], signs, FLOAT_FIELDS)
    if moved:
        moved = _add_signed(sketch.buckets, [part.latency.buckets for _add, part in signed], signs, _NO_FIELDS)
    if moved:
        sketch.zero_count, sketch.count = zero, count
    return moved


def moved_in_python(total: Aggregate, signed: Sequence[tuple[bool, Aggregate]]) -> bool:
    """:func:`moved_natively` part by part (``Aggregate.merge`` / ``subtract``); False when a part
    does not take out or a sketch does not merge (``total`` is then to be dropped)."""
    try:
        for add, part in signed:
            if add:
                total.merge(part)
            else:
                total.subtract(part)
    except ValueError:
        return False
    return True
