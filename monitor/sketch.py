"""Mergeable log-bucket quantile sketch (the DDSketch construction).

Guarantee: for data of non-negative values, ``quantile(q)`` is within
``relative_accuracy`` (alpha in the paper, default 1%) relative error of the
exact *lower* q-quantile of everything added, i.e. of the item of rank
``floor(q * (n - 1))`` in sorted order (``numpy.quantile(method="lower")``).
Values below ``min_value`` (1 µs for latencies in seconds) count as zero and
are returned as 0.0, which is exact for zeros.

Memory: one integer per occupied bucket. With gamma = (1 + alpha) / (1 - alpha)
a bucket covers a factor gamma, so 1% accuracy spans 1 µs .. 1 day in about
1,260 buckets at most; real latency data occupies a few hundred.

Buckets are indexed ``i = ceil(log_gamma(x))`` and represent ``2 gamma^i /
(gamma + 1)``. Two sketches merge by adding bucket counts, so merging the
sketches of two sets is exactly the sketch of their union (the property the
windowed store relies on), and :meth:`LogSketch.subtract` takes a merged-in
sketch out again exactly (what the exporter's sliding sums rely on). The
serial form is a flat ``{bucket: count}`` mapping with string keys (``"z"``
for the zero bucket) so it can live in a Redis hash and be summed with
HINCRBY.

Empty sketch: ``count == 0`` and every quantile is ``nan``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

DEFAULT_RELATIVE_ACCURACY = 0.01
DEFAULT_MIN_VALUE = 1e-6
ZERO_KEY = "z"


def _add_counts(dst: dict[Any, Any], src: Mapping[Any, Any]) -> None:
    for key, value in src.items():
        dst[key] = dst.get(key, 0) + value


#: ``add_counts(dst, src)``: ``dst[k] = dst.get(k, 0) + v`` for every ``(k, v)`` of ``src``, in
#: ``src``'s order: the dict loop of :meth:`LogSketch.merge` and :meth:`monitor.aggregate.Aggregate.merge`.
#: In C when the native module is built (``native/src/window.rs``: Python's own additions, same order).
try:
    from fleetmon_native import add_into as _native_add_into
except ImportError:  # a tree without `make install`
    _native_add_into = None
add_counts: Callable[[dict[Any, Any], Mapping[Any, Any]], None] = _native_add_into or _add_counts


class LogSketch:
    """Quantile sketch with relative error ``relative_accuracy`` on values >= 0."""

    __slots__ = ("relative_accuracy", "min_value", "gamma", "_log_gamma", "buckets",
                 "zero_count", "count")

    def __init__(self, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
                 min_value: float = DEFAULT_MIN_VALUE) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy!r}")
        if not min_value > 0.0:
            raise ValueError(f"min_value must be > 0, got {min_value!r}")
        self.relative_accuracy = relative_accuracy  # alpha in the paper
        self.min_value = min_value
        self.gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
        self._log_gamma = math.log(self.gamma)
        self.buckets: dict[int, int] = {}
        self.zero_count = 0
        self.count = 0

    def key(self, value: float) -> int | None:
        """The bucket index of ``value``; None for the zero bucket."""
        if value < self.min_value:
            return None
        return math.ceil(math.log(value) / self._log_gamma)

    def add(self, value: float, count: int = 1) -> None:
        """Add ``value`` (>= 0, finite) ``count`` times."""
        if not (value >= 0.0 and math.isfinite(value)):
            raise ValueError(f"sketch values must be finite and >= 0, got {value!r}")
        index = self.key(value)
        if index is None:
            self.zero_count += count
        else:
            self.buckets[index] = self.buckets.get(index, 0) + count
        self.count += count

    def extend(self, values: Iterable[float]) -> None:
        for value in values:
            self.add(value)

    def value_of(self, index: int) -> float:
        """The representative value of bucket ``index``."""
        return 2.0 * self.gamma ** index / (self.gamma + 1.0)

    def merge(self, other: LogSketch) -> LogSketch:
        """Add ``other`` into this sketch (in place) and return self."""
        if other.relative_accuracy != self.relative_accuracy or other.min_value != self.min_value:
            raise ValueError(
                "cannot merge sketches with different parameters: "
                f"{self.relative_accuracy}/{self.min_value} vs {other.relative_accuracy}/{other.min_value}")
        add_counts(self.buckets, other.buckets)
        self.zero_count += other.zero_count
        self.count += other.count
        return self

    def subtract(self, other: LogSketch) -> LogSketch:
        """Take ``other`` out of this sketch (in place) and return self: the inverse of :meth:`merge`.

        Exact (bucket counts are integers) when ``other`` was merged in
        before; a bucket that reaches 0 is removed, so ``(a + b).subtract(b)
        == a`` bucket for bucket. A bucket that would go negative raises
        ValueError naming it, and nothing is changed.
        """
        if other.relative_accuracy != self.relative_accuracy or other.min_value != self.min_value:
            raise ValueError(
                "cannot subtract sketches with different parameters: "
                f"{self.relative_accuracy}/{self.min_value} vs {other.relative_accuracy}/{other.min_value}")
        buckets = self.buckets
        get = buckets.get
        left = {index: get(index, 0) - n for index, n in other.buckets.items()}
        if left and min(left.values()) < 0:
            index = min(left, key=left.__getitem__)
            raise ValueError(f"cannot subtract {other.buckets[index]} from sketch bucket {index}, which holds "
                             f"{get(index, 0)}: the sketch was not merged in")
        if other.zero_count > self.zero_count:
            raise ValueError(f"cannot subtract {other.zero_count} from the zero bucket, which holds "
                             f"{self.zero_count}: the sketch was not merged in")
        buckets.update(left)
        for index in [index for index, n in left.items() if not n]:
            del buckets[index]
        self.zero_count -= other.zero_count
        self.count -= other.count
        return self

    def __add__(self, other: LogSketch) -> LogSketch:
        return self.copy().merge(other)

    def copy(self) -> LogSketch:
        out = LogSketch(self.relative_accuracy, self.min_value)
        out.buckets = dict(self.buckets)
        out.zero_count = self.zero_count
        out.count = self.count
        return out

    def quantile(self, q: float) -> float:
        """Lower q-quantile (rank ``floor(q (n-1))``); nan when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        if self.count == 0:
            return math.nan
        rank = math.floor(q * (self.count - 1))
        if rank < self.zero_count:
            return 0.0
        seen = self.zero_count
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen > rank:
                return self.value_of(index)
        return self.value_of(max(self.buckets))  # unreachable with consistent counts

    def quantiles(self, qs: Iterable[float]) -> list[float]:
        """Several lower quantiles in one pass over the sorted buckets."""
        qs = list(qs)
        if self.count == 0:
            return [math.nan] * len(qs)
        order = sorted(range(len(qs)), key=lambda i: qs[i])
        out = [math.nan] * len(qs)
        items = sorted(self.buckets.items())
        seen = self.zero_count
        pos = 0
        for i in order:
            rank = math.floor(qs[i] * (self.count - 1))
            if rank < self.zero_count:
                out[i] = 0.0
                continue
            while pos < len(items) and seen + items[pos][1] <= rank:
                seen += items[pos][1]
                pos += 1
            out[i] = self.value_of(items[min(pos, len(items) - 1)][0])
        return out

    def count_below(self, bound: float) -> int:
        """How many values fall in buckets whose representative is <= ``bound``.

        Used to derive cumulative histogram buckets; exact up to the sketch's
        relative accuracy around ``bound``.
        """
        total = self.zero_count if bound >= 0.0 else 0
        for index, n in self.buckets.items():
            if self.value_of(index) <= bound:
                total += n
        return total

    def to_dict(self) -> dict[str, int]:
        """Flat ``{bucket: count}`` with string keys; ``"z"`` is the zero bucket."""
        out = {str(index): n for index, n in self.buckets.items()}
        if self.zero_count:
            out[ZERO_KEY] = self.zero_count
        return out

    @classmethod
    def of_buckets(cls, buckets: dict[int, int], zero_count: int = 0) -> LogSketch:
        """A default-parameter sketch holding ``buckets`` (index → count > 0) and ``zero_count`` zeros;
        takes ownership of ``buckets``."""
        sketch = cls()
        sketch.buckets = buckets
        sketch.zero_count = zero_count
        sketch.count = zero_count + sum(buckets.values())
        return sketch

    @classmethod
    def from_dict(cls, data: Mapping[str, int | str | bytes],
                  relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
                  min_value: float = DEFAULT_MIN_VALUE) -> LogSketch:
        """Inverse of :meth:`to_dict`; accepts bytes/str values as Redis returns them."""
        sketch = cls(relative_accuracy, min_value)
        for key, raw in data.items():
            key_text = key.decode() if isinstance(key, bytes) else str(key)
            n = int(raw)
            if n < 0:
                raise ValueError(f"sketch bucket {key_text} has a negative count {n}")
            if n == 0:
                continue
            if key_text == ZERO_KEY:
                sketch.zero_count += n
            else:
                sketch.buckets[int(key_text)] = sketch.buckets.get(int(key_text), 0) + n
            sketch.count += n
        return sketch

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, LogSketch) and self.buckets == other.buckets
                and self.zero_count == other.zero_count
                and self.relative_accuracy == other.relative_accuracy
                and self.min_value == other.min_value)

    def __repr__(self) -> str:
        return (f"LogSketch(relative_accuracy={self.relative_accuracy}, count={self.count}, "
                f"buckets={len(self.buckets)})")
