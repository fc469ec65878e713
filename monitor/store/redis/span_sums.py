"""A slice's span sums added up from its windows as Redis sent them, and the float fields' exact re-sum (pure).

The arithmetic :mod:`monitor.store.redis.spans` builds on: :func:`fresh_sums` (a cold
read, or a slice whose cache did not add up) and :func:`resum_floats`. Integer fields and
sketch buckets are summed exactly (the buckets as numpy integers, each sum checked to stay
exact); the float fields are a left fold over the windows in window order, the same
additions as a fresh merge of the windows, so a sum equals the store's merge field for field.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache, reduce
from operator import add
from sys import intern
from typing import NamedTuple

import numpy as np
import orjson

from monitor.aggregate import LATENCY_PREFIX, Aggregate
from monitor.sketch import ZERO_KEY
from monitor.store.redis.wire import FLOATS

NAN = math.nan
#: Float fields per window in the cache's flat float arrays.
N_FLOATS = len(FLOATS)
_FLOAT_INDEX = {key: i for i, key in enumerate(FLOATS)}
_ZERO_FIELD = LATENCY_PREFIX + ZERO_KEY


@lru_cache(maxsize=16)
def positions(starts: tuple[int, ...]) -> dict[int, int]:
    """``{start: its position}`` of a range (the same few ranges serve every slice of a scrape)."""
    return {start: i for i, start in enumerate(starts)}


def interned(agg: Aggregate) -> Aggregate:
    """``agg`` with its field names shared with every other cached aggregate's (in place; returns it).

    A decoded hash brings its own copy of every field name; a cache of thousands of
    aggregates would hold tens of thousands of copies of the same few dozen names.
    """
    agg.counts = {intern(key): value for key, value in agg.counts.items()}
    return agg


def window_floats(agg: Aggregate) -> list[float]:
    """A window's float fields in FLOATS order, nan where absent."""
    get = agg.counts.get
    return [float(v) if (v := get(key)) is not None else NAN for key in FLOATS]


class FreshSums(NamedTuple):
    """A slice's windows added up afresh: per start of the range its count and floats, the sums per span."""

    counts: array
    floats: array
    sums: list[Aggregate]


def fresh_sums(fetched: Mapping[int, bytes], range_: tuple[int, ...], suffixes: tuple[int, ...]) -> FreshSums:
    """The sums of the spans (the last ``suffixes`` starts of ``range_``) over the windows in ``fetched``.

    ``fetched`` must hold every window of the range with traces, as the fetch script sends
    it. The sums are added up from the encoded windows directly (the sketch buckets of all
    of them parsed at once), without a parsed aggregate per window; a window whose
    ``traces`` is 0 (it expired between the scripts) counts as absent.
    """
    n = len(range_)
    counts = array("q", bytes(8 * n))
    floats = array("d", [NAN]) * (n * N_FLOATS)
    plain: list[dict[str, int]] = []
    zeros: list[int] = []
    tails: list[bytes] = []
    pairs: list[int] = []
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
        present.append(i)
        plain.append(fields)
        zeros.append(zero)
        tails.append(tail)
        pairs.append(tail.count(b" ") + 1 if tail.strip() else 0)
    numbers = np.fromstring(b" ".join(tails), dtype=np.int64, sep=" ") if any(pairs) else np.zeros(0, np.int64)
    if len(numbers) != 2 * sum(p // 2 for p in pairs) or (len(numbers) and numbers[1::2].min() < 0):
        raise ValueError(f"sketch buckets must hold counts >= 0 in pairs, got {numbers[:8].tolist()}...")
    ends = np.cumsum([p // 2 for p in pairs], dtype=np.int64)
    sums = []
    for length in suffixes:
        first = n - length
        chosen = [r for r, i in enumerate(present) if i >= first]
        total = Aggregate()
        counts_out = total.counts
        for r in chosen:
            for name, number in plain[r].items():
                counts_out[name] = counts_out.get(name, 0) + number
        sketch = total.latency
        sketch.zero_count = sum(zeros[r] for r in chosen)
        if chosen:
            lo = 0 if chosen[0] == 0 else int(ends[chosen[0] - 1])
            part = numbers[2 * lo:2 * int(ends[chosen[-1]])]
            sketch.buckets = _bucket_sums(part[0::2], part[1::2])
        sketch.count = sketch.zero_count + sum(sketch.buckets.values())
        resum_floats(total, floats, range_, range_[n - length:])
        sums.append(total)
    return FreshSums(counts, floats, sums)


def _bucket_sums(indices: np.ndarray, counts: np.ndarray) -> dict[int, int]:
    """``{index: summed count}`` over the pairs, in index order, without zero counts."""
    if not len(indices):
        return {}
    low = int(indices.min())
    summed = np.bincount(indices - low, weights=None if counts is None else counts.astype(np.float64))
    if summed.max(initial=0) >= 2**53:  # beyond exact float integers: add them as Python ints
        out: dict[int, int] = {}
        for index, n in zip(indices.tolist(), counts.tolist()):
            out[index] = out.get(index, 0) + n
        return {index: out[index] for index in sorted(out) if out[index]}
    nonzero = np.flatnonzero(summed)
    return dict(zip((nonzero + low).tolist(), summed[nonzero].astype(np.int64).tolist()))


def resum_floats(total: Aggregate, floats: Sequence[float], range_: tuple[int, ...], span: Sequence[int]
                 ) -> Aggregate:
    """Set the float fields of ``total`` to their sum over ``span``'s windows, in window order.

    The same additions, in the same order, as a fresh merge of the windows
    (a left fold: not ``sum()``, which compensates from Python 3.12 on), so
    subtracting never leaves rounding residue behind.
    """
    counts = total.counts
    if not span:
        for key in FLOATS:
            counts.pop(key, None)
        return total
    first = positions(range_)[span[0]]
    for j, key in enumerate(FLOATS):
        values = [v for v in floats[first * N_FLOATS + j:(first + len(span)) * N_FLOATS:N_FLOATS] if v == v]
        if values:
            counts[key] = reduce(add, values)
        else:
            counts.pop(key, None)
    return total
