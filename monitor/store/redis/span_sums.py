"""A slice's span sums added up from its windows as Redis sent them, and the float fields' exact re-sum (pure).

The arithmetic :mod:`monitor.store.redis.spans` builds on: :func:`fresh_sums` (a cold
read, or a slice whose cache did not add up) and :func:`resum_floats`. Integer fields and
sketch buckets are summed exactly (natively, native/src/window.rs, or in Python without it: the
same sums); the float fields are a left fold over the windows in window order, the same
additions as a fresh merge of the windows, so a sum equals the store's merge field for field.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache, reduce
from operator import add
from sys import intern
from typing import Any, NamedTuple

import orjson

from monitor.aggregate import LATENCY_PREFIX, Aggregate
from monitor.sketch import ZERO_KEY, LogSketch
from monitor.store.redis.wire import CODEC, FLOATS, decode_interned

try:  # the dict difference of native/src/window.rs (additions: Aggregate.merge, native itself)
    from fleetmon_native import difference as _difference
except ImportError:  # pragma: no cover - a tree without `make install`
    _difference = None
try:  # the float re-sum and the count comparison of native/src/window.rs (an extension built before them: Python)
    from fleetmon_native import changed_positions as _changed_positions
    from fleetmon_native import resum_floats as _resum_floats
except ImportError:  # pragma: no cover - a tree without `make install`
    _changed_positions = _resum_floats = None

NAN = math.nan
#: Float fields per window in the cache's flat float arrays.
N_FLOATS = len(FLOATS)
_FLOAT_INDEX = {key: i for i, key in enumerate(FLOATS)}
_ZERO_FIELD = LATENCY_PREFIX + ZERO_KEY


@lru_cache(maxsize=16)
def positions(starts: tuple[int, ...]) -> dict[int, int]:
    """``{start: its position}`` of a range (the same few ranges serve every slice of a scrape)."""
    return {start: i for i, start in enumerate(starts)}


def difference(new: Mapping[Any, Any], old: Mapping[Any, Any], native: bool = True) -> dict[Any, Any] | None:
    """``{k: new[k] - old.get(k, 0)}`` without zeros, in ``new``'s order; None when a difference is below 0
    or ``old`` holds a key ``new`` lacks (natively when built; ``native=False``: in Python)."""
    if native and _difference is not None:
        return _difference(new, old)
    oget = old.get
    out = {k: v - oget(k, 0) for k, v in new.items()}
    if min(out.values(), default=0) < 0 or old.keys() - new.keys():
        return None
    return {k: v for k, v in out.items() if v}


def shift_of(old_starts: tuple[int, ...], starts: tuple[int, ...]) -> int | None:
    """How many windows a range of the same length moved on by (its first ``d`` starts left, ``d`` new ones
    came at its end; 0: it did not move), or None when it changed otherwise."""
    n = len(starts)
    if not n or len(old_starts) != n:
        return None
    if old_starts[0] == starts[0]:
        return 0 if old_starts == starts else None
    d = positions(old_starts).get(starts[0])  # the minute's slide: once a minute
    return d if d is not None and old_starts[d:] == starts[:n - d] else None


def span_of(starts: tuple[int, ...], length: int) -> tuple[int, ...]:
    """The last ``length`` starts of a range: the span of that length (every span ends with the range)."""
    return starts[len(starts) - length:]


def shifted_counts(counts: array, d: int) -> array:
    """A cache's counts moved on by ``d`` windows, the ``d`` new windows absent (0)."""
    return counts[d:] + array("q", bytes(8 * d))


def shifted(counts: array, floats: array, d: int) -> tuple[array, array]:
    """A cache's counts and floats moved on by ``d`` windows, the ``d`` new windows absent (0, nan)."""
    return shifted_counts(counts, d), floats[d * N_FLOATS:] + array("d", [NAN]) * (d * N_FLOATS)


def shifted_moves(length: int, d: int, old_starts: tuple[int, ...], old_counts: Sequence[int],
                  starts: tuple[int, ...], before: Sequence[int], counts: Sequence[int], differ: Iterable[int]
                  ) -> list[tuple[int, int, int]]:
    """A span's moves ``(start, count before, count after)`` (0: absent), oldest first, when its range moved
    on by ``d`` windows and the span kept its ``length``: the windows that left it, those of both
    spans whose count changed (``differ``: the positions where ``counts`` differ from ``before``, the
    old counts moved on), those that came in; the moves a set difference of the two spans finds."""
    n = len(starts)
    first, came = n - length, max(n - length, n - d)
    moves = [(old_starts[j], old_counts[j], 0) for j in range(first, min(n, first + d)) if old_counts[j]]
    moves.extend((starts[i], before[i], counts[i]) for i in differ if first <= i < came)
    moves.extend((starts[i], 0, counts[i]) for i in range(came, n) if counts[i])
    return moves


#: How an aggregate became its successor: each part merged in (True) or taken out (False), in order
#: (the float fields excepted: the successor's are summed afresh).
Ops = tuple[tuple[bool, Aggregate], ...]


def steps_of(total: Aggregate, moves: Iterable[tuple[int, int, int]], gained: Mapping[int, Aggregate | None],
             windows: Windows) -> list[Aggregate] | None:
    """The parts that move ``total`` when every move only adds (a window that gained a known
    increment, or one that came in: its content), each a sketch of ``total``'s parameters, so
    that nothing can fail while they are merged; else None (a window is taken out: on a copy)."""
    out = []
    sketch = total.latency
    try:
        for start, before, after in moves:
            part = (gained.get(start) if before else windows.content(start, after)) if after else None
            if part is None or not same_sketch(sketch, part):
                return None
            out.append(part)
    except ValueError:
        return None  # a window that does not read: the copy's merge says so
    return out


def same_sketch(a: LogSketch, b: Aggregate) -> bool:
    """Whether ``b``'s sketch merges into ``a`` (the same parameters), so that merging cannot fail."""
    return a.relative_accuracy == b.latency.relative_accuracy and a.min_value == b.latency.min_value


def added(total: Aggregate, steps: Sequence[Aggregate]) -> tuple[Aggregate, Ops]:
    """``total`` moved by ``steps`` in place, under a new object (see :func:`moved_in_place`), and the ops."""
    out = moved_in_place(total)
    for step in steps:
        out.merge(step)
    return out, tuple((True, step) for step in steps)


def moved_in_place(total: Aggregate) -> Aggregate:
    """A new aggregate over ``total``'s own dicts and sketch, to be moved in place (no copy, so a
    scrape does not hold the old and the new sums at once): "changed" stays "another object" for
    the exporter's caches. ``total`` is left :func:`stale` (its content is gone: reading it raises
    AttributeError); the reader's steps say how the new one was made of it. Call it only once every
    check passed: nothing may fail once the dicts are moved."""
    out = Aggregate(total.counts, total.latency)
    del total.counts, total.latency
    return out


def stale(agg: Aggregate) -> bool:
    """Whether ``agg`` was :func:`moved_in_place` (only its identity is left)."""
    return not hasattr(agg, "latency")


def delta(new: Aggregate, old: Aggregate) -> Aggregate | None:
    """``new - old`` (what a window gained), None if anything went down (a rebuild).

    Its float fields are approximate: the callers set those exactly.
    """
    zero = new.latency.zero_count - old.latency.zero_count
    if zero < 0:
        return None
    counts = difference(new.counts, old.counts)
    buckets = None if counts is None else difference(new.latency.buckets, old.latency.buckets)
    if counts is None or buckets is None:
        return None
    sketch = LogSketch(new.latency.relative_accuracy, new.latency.min_value)
    sketch.buckets = buckets
    sketch.zero_count, sketch.count = zero, new.latency.count - old.latency.count
    return Aggregate(counts, sketch)


class Windows:
    """One update's windows: those fetched (start → text) and the cached ones (start → (count, text)),
    each parsed once and only when asked; a fetched window that replaces a cached one is read against
    it natively (its count, floats and increment, :meth:`WindowCodec.delta`) without parsing either."""

    def __init__(self, fetched: Mapping[int, bytes | str], cached: Mapping[int, tuple[int, bytes]]) -> None:
        self.raw = {start: raw.encode() if isinstance(raw, str) else raw for start, raw in fetched.items()}
        self.cached = cached
        self.parsed: dict[tuple[int, int], Aggregate] = {}  # (start, count) -> content
        self.steps: dict[tuple[int, int], Aggregate | None] = {}  # (start, old count) -> increment
        self.heads: dict[int, tuple[int, list[float]]] = {}  # fetched start -> (count, floats)
        for start, raw in self.raw.items():
            entry = cached.get(start)
            got = None if CODEC is None or entry is None else CODEC.delta(raw, entry[1])
            if got is not None and entry is not None:
                traces, floats, step = got
                self.heads[start] = (traces, floats)
                self.steps[(start, entry[0])] = None if step is None else _sketched(*step)
            else:
                agg = decode_interned(raw)
                self.parsed[(start, agg.traces)] = agg
                self.heads[start] = (agg.traces, window_floats(agg))

    def has(self, start: int, count: int) -> bool:
        """Whether window ``start`` holding ``count`` traces is fetched or cached."""
        head = self.heads.get(start)
        entry = self.cached.get(start)
        return (head is not None and head[0] == count) or (entry is not None and entry[0] == count)

    def content(self, start: int, count: int) -> Aggregate:
        """Window ``start`` holding ``count`` traces (it must be :meth:`has`), parsed once."""
        agg = self.parsed.get((start, count))
        if agg is None:
            head = self.heads.get(start)
            raw = self.raw[start] if head is not None and head[0] == count else self.cached[start][1]
            agg = self.parsed[(start, count)] = decode_interned(raw)
        return agg

    def gained(self, start: int, count: int, before: int) -> Aggregate | None:
        """What window ``start`` gained from ``before`` traces to ``count`` (both :meth:`has`)."""
        if (start, before) in self.steps and self.heads[start][0] == count:
            return self.steps[(start, before)]
        return delta(self.content(start, count), self.content(start, before))


def _sketched(counts: dict[str, float], buckets: dict[int, int], zero: int, count: int) -> Aggregate:
    sketch = LogSketch()
    sketch.buckets, sketch.zero_count, sketch.count = buckets, zero, count
    return Aggregate(counts, sketch)


def window_floats(agg: Aggregate) -> list[float]:
    """A window's float fields in FLOATS order, nan where absent."""
    get = agg.counts.get
    return [float(v) if (v := get(key)) is not None else NAN for key in FLOATS]


class FreshSums(NamedTuple):
    """A slice's windows added up afresh: per start of the range its count and floats, the sums per span."""

    counts: array
    floats: array
    sums: list[Aggregate]


def fresh_sums(fetched: Mapping[int, bytes], range_: tuple[int, ...], suffixes: tuple[int, ...],
               codec: Any = CODEC) -> FreshSums:
    """The sums of the spans (the last ``suffixes`` starts of ``range_``) over the windows in ``fetched``.

    ``fetched`` must hold every window of the range with traces, as the fetch script sends
    it. The sums are added up from the encoded windows directly, without a parsed aggregate
    per window: by the native ``codec`` (native/src/window.rs) when there is one and it reads
    every window, else by :func:`fresh_sums_python`; the two give the same sums. A window
    whose ``traces`` is 0 (it expired between the scripts) counts as absent.
    """
    if codec is not None:
        raws = [fetched.get(start) for start in range_]
        got = codec.sums([raw.encode() if isinstance(raw, str) else raw for raw in raws], list(suffixes))
        if got is not None:
            counts, floats = array("q", got[0]), array("d", got[1])
            sums = []
            for length, (fields, zero, buckets, in_buckets) in zip(suffixes, got[2]):
                total = Aggregate(fields)
                sketch = total.latency
                sketch.zero_count, sketch.buckets, sketch.count = zero, buckets, zero + in_buckets
                sums.append(resum_floats(total, floats, range_, range_[len(range_) - length:]))
            return FreshSums(counts, floats, sums)
    return fresh_sums_python(fetched, range_, suffixes)


def fresh_sums_python(fetched: Mapping[int, bytes], range_: tuple[int, ...], suffixes: tuple[int, ...]
                      ) -> FreshSums:
    """:func:`fresh_sums` in Python (what the native codec is checked against)."""
    n = len(range_)
    counts = array("q", bytes(8 * n))
    floats = array("d", [NAN]) * (n * N_FLOATS)
    plain: list[dict[str, int]] = []
    zeros: list[int] = []
    pairs: list[list[int]] = []
    present: list[int] = []
    for i, start in enumerate(range_):
        raw = fetched.get(start)
        if raw is None:
            continue
        if isinstance(raw, str):
            raw = raw.encode()
        head, _, tail = raw.partition(b"\n")
        flat = orjson.loads(head)
        fields: dict[str, int] = {}
        zero = 0
        it: Iterator[str] = iter(flat if isinstance(flat, list) else ())  # cjson writes an empty array as {}
        for key, value in zip(it, it):
            j = _FLOAT_INDEX.get(key)
            if j is not None:
                floats[i * N_FLOATS + j] = float(value)
            elif key == _ZERO_FIELD:
                zero = int(value)
            else:
                key = intern(key)
                try:
                    fields[key] = int(value)
                except ValueError:
                    fields[key] = int(float(value))
        counts[i] = fields.get("traces", 0)
        if not counts[i]:
            continue  # expired or emptied between the scripts: absent
        numbers = [int(x) for x in tail.split()]
        if len(numbers) % 2 or any(n < 0 for n in numbers[1::2]):
            raise ValueError(f"sketch buckets must hold counts >= 0 in pairs, got {numbers[:8]}...")
        present.append(i)
        plain.append(fields)
        zeros.append(zero)
        pairs.append(numbers)
    sums = []
    for length in suffixes:
        first = n - length
        chosen = [r for r, i in enumerate(present) if i >= first]
        total = Aggregate()
        counts_out = total.counts
        summed: dict[int, int] = {}
        for r in chosen:
            for name, number in plain[r].items():
                counts_out[name] = counts_out.get(name, 0) + number
            numbers = pairs[r]
            for index, count in zip(numbers[0::2], numbers[1::2]):
                summed[index] = summed.get(index, 0) + count
        sketch = total.latency
        sketch.zero_count = sum(zeros[r] for r in chosen)
        sketch.buckets = {index: summed[index] for index in sorted(summed) if summed[index]}
        sketch.count = sketch.zero_count + sum(sketch.buckets.values())
        resum_floats(total, floats, range_, range_[n - length:])
        sums.append(total)
    return FreshSums(counts, floats, sums)


def changed(new: Sequence[int], old: Sequence[int], native: bool = True) -> list[int]:
    """The positions where two count sequences differ, over the shorter one's length (natively when
    both are ``array("q")`` and the extension is built)."""
    if not new or not old:
        return []  # (an empty array's buffer is not aligned for the native reader)
    if native and _changed_positions is not None and isinstance(new, array) and isinstance(old, array) \
            and new.typecode == old.typecode == "q":
        return _changed_positions(new, old)
    return [i for i, (a, b) in enumerate(zip(new, old)) if a != b]


def resum_floats(total: Aggregate, floats: Sequence[float], range_: tuple[int, ...], span: Sequence[int],
                 native: bool = True) -> Aggregate:
    """Set the float fields of ``total`` to their sum over ``span``'s windows, in window order.

    The same additions, in the same order, as a fresh merge of the windows
    (a left fold: not ``sum()``, which compensates from Python 3.12 on), so
    subtracting never leaves rounding residue behind. Natively (native/src/window.rs, the
    same additions) when ``floats`` is an ``array("d")`` and the extension is built.
    """
    counts = total.counts
    if not span:
        for key in FLOATS:
            counts.pop(key, None)
        return total
    first = positions(range_)[span[0]]
    if native and _resum_floats is not None and isinstance(floats, array) and floats.typecode == "d":
        for key, value in zip(FLOATS, _resum_floats(floats, first, len(span), N_FLOATS)):
            if value is None:
                counts.pop(key, None)
            else:
                counts[key] = value
        return total
    for j, key in enumerate(FLOATS):
        values = [v for v in floats[first * N_FLOATS + j:(first + len(span)) * N_FLOATS:N_FLOATS] if v == v]
        if values:
            counts[key] = reduce(add, values)
        else:
            counts.pop(key, None)
    return total
