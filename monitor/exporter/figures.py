"""What the exporter's per-slice samples are worth, computed from aggregates (pure arithmetic).

:func:`window_figures` values the :data:`~monitor.exporter.families.HEALTH_GAUGES` of one
(slice, window) as :func:`monitor.aggregate.health` would; :func:`histogram_counts` gives the
cumulative bucket counts of the latency histogram from a slice's sketch. Both run for every
changed slice on every scrape, so they skip what no family exports.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import accumulate
from typing import Any

from monitor.aggregate import TOKEN_KINDS, Aggregate, cost_per_solved
from monitor.exporter.families import QUANTILES
from monitor.exporter.rates import SMALL_N, rate_figures
from monitor.pricing import Price, PriceMap
from monitor.sketch import LogSketch
from monitor.stats.intervals import two_sided_critical_value, wilson_bounds

try:  # the running bucket counts of native/src/window.rs (an extension built before them: Python)
    from fleetmon_native import bucket_at_ranks as _bucket_at_ranks
    from fleetmon_native import counts_up_to as _counts_up_to
except ImportError:  # pragma: no cover - a tree without `make install`
    _bucket_at_ranks = _counts_up_to = None


def window_figures(agg: Aggregate, prices: PriceMap, at: float | None,
                   price_of: Callable[[str], Price] | None = None) -> list[float | None]:
    """The values of the ``HEALTH_GAUGES`` of a window with traces, None where one is left out.

    The figures :func:`monitor.aggregate.health` gives (same functions, same
    arithmetic, but for the exact rate intervals: :mod:`monitor.exporter.rates`,
    equal to scipy's to a relative 1e-12, and the cost: :func:`cost_usd`, the same
    figure faster; tests compare them), without the
    parts of the health vector no gauge exports (the harmful-action and
    over-refusal intervals, the latency mean, the tool error rate). ``n`` must be > 0.
    Every value is a float or None. ``price_of``: as for :func:`cost_usd`.
    """
    get = agg.counts.get
    n = int(get("traces", 0))
    successes = int(get("successes", 0))
    per_solved = cost_per_solved(cost_usd(agg, prices, at, price_of), successes)
    benign = int(get("benign", 0))
    return [*_rates(successes, n), per_solved if math.isfinite(per_solved) else None,
            *_latency_quantiles(agg.latency),
            int(get("harmful_action", 0)) / n, int(get("refused_benign", 0)) / benign if benign else None,
            *_rates(int(get("side_effect_traces", 0)), n), get("side_effects", 0) / n,
            *_rates(int(get("prompt_injection", 0)), n),
            get("steps", 0) / n, get("steps_solved", 0) / successes if successes else None]


_QUANTILE_LEVELS = tuple(q for _key, q in QUANTILES)
_Z95 = two_sided_critical_value(0.95)


def _rates(successes: int, n: int) -> tuple[float, float, float]:
    """``rate_figures(successes, n)``: the Wilson case (the usual one) without its checks, as it computes it."""
    if SMALL_N <= n and 0 < successes < n:
        low, high = wilson_bounds(successes, n, _Z95)
        return successes / n, low, high
    return rate_figures(successes, n)


def _latency_quantiles(sketch: Any) -> list[float | None]:
    """``sketch_quantiles(sketch, _QUANTILE_LEVELS)``, None for a non-finite one: without a zero
    count every rank is above it, so the native bisection's buckets are the quantiles' own."""
    count = sketch.count
    if count and not sketch.zero_count and _bucket_at_ranks is not None and sketch.buckets and count < _I64:
        last = count - 1
        found = _bucket_at_ranks(sketch.buckets, [math.floor(q * last) for q in _QUANTILE_LEVELS])
        if found is not None:
            quantiles = [sketch.value_of(index) for index in found]
            return [q if math.isfinite(q) else None for q in quantiles]
    return [q if math.isfinite(q) else None for q in sketch_quantiles(sketch, _QUANTILE_LEVELS)]

#: Field name -> (its position in TOKEN_KINDS, its model) for a model's token field, None for any other.
_TOKEN_FIELDS: dict[str, tuple[int, str] | None] = {}
_TOKEN_FIELDS_CACHED = 4096
_TOKEN_PREFIXES = tuple(kind + ":" for kind in TOKEN_KINDS)


#: The field names in _TOKEN_FIELDS, and those of them that are a model's token field.
_CLASSIFIED: set[str] = set()
_TOKEN_KEYS: set[str] = set()


def _token_field(key: str) -> tuple[int, str] | None:
    token = None
    if key.startswith(_TOKEN_PREFIXES):
        kind, model = key.split(":", 1)
        token = (TOKEN_KINDS.index(kind), model)
    if len(_TOKEN_FIELDS) < _TOKEN_FIELDS_CACHED:
        _TOKEN_FIELDS[key] = token
        _CLASSIFIED.add(key)
        if token is not None:
            _TOKEN_KEYS.add(key)
    return token


#: The tokens of each model an aggregate names: ``(model, tokens_in, tokens_cached_in, tokens_out)``.
ModelTokens = tuple[tuple[str, float, float, float], ...]


def _token_keys(counts: dict[str, float]) -> list[str]:
    """The fields of ``counts`` that are a model's tokens, in counter order (each name parsed once a
    process, up to the cap; past it by their prefix, as :func:`_token_field` tells them)."""
    keys = counts.keys()
    if not keys <= _CLASSIFIED:
        for key in keys - _CLASSIFIED:
            _token_field(key)
        if not keys <= _CLASSIFIED:
            return [key for key in counts if key.startswith(_TOKEN_PREFIXES)]
    return [key for key in counts if key in _TOKEN_KEYS]


def _per_model(counts: dict[str, float]) -> tuple[dict[str, list[Any]], tuple[list[float], ...]]:
    """Each model's tokens ``[in, cached_in, out]`` summed in counter order (as :meth:`Aggregate.cost_usd`
    sums them), and each kind's values in counter order, in one pass over the counters' token fields."""
    models: dict[str, list[Any]] = {}
    kinds: tuple[list[float], ...] = tuple([] for _kind in TOKEN_KINDS)
    for key in _token_keys(counts):
        token = _TOKEN_FIELDS.get(key) or _token_field(key)
        assert token is not None  # a token field
        value = counts[key]
        tokens = models.get(token[1])
        if tokens is None:
            tokens = models[token[1]] = [0, 0, 0]
        tokens[token[0]] += value
        kinds[token[0]].append(value)
    return models, kinds


def token_sums(agg: Aggregate) -> tuple[ModelTokens, tuple[float, ...]]:
    """Each model's tokens (in counter order, as :meth:`Aggregate.cost_usd` sums them) and each kind's
    total over the models (``agg.tokens(kind)`` for each of ``TOKEN_KINDS``, to the bit)."""
    models, kinds = _per_model(agg.counts)
    # sum() of each kind's values in counter order, as Aggregate.tokens (whatever sum() does with floats)
    return tuple((model, *tokens) for model, tokens in models.items()), tuple(map(sum, kinds))


def cost_of(models: Iterable[tuple[str, float, float, float]], fees_usd: float, prices: PriceMap, at: float | None,
            price_of: Callable[[str], Price] | None = None) -> float:
    """The cost of ``models``' tokens ``(model, tokens_in, tokens_cached_in, tokens_out)`` priced with the
    entries in force at ``at``, plus ``fees_usd``, added exactly rounded (``math.fsum``) as
    :meth:`Aggregate.cost_usd` adds them. ``price_of(model)``, when given, must be
    ``prices.price_for(model, at)`` (a memo of it)."""
    if price_of is None:
        price_of = partial(prices.price_for, at=at)
    return math.fsum([fees_usd, *(price_of(model).cost_usd(tokens_in, tokens_cached_in, tokens_out)
                                  for model, tokens_in, tokens_cached_in, tokens_out in models)])


def cost_usd(agg: Aggregate, prices: PriceMap, at: float | None,
             price_of: Callable[[str], Price] | None = None) -> float:
    """:meth:`Aggregate.cost_usd <monitor.aggregate.Aggregate.cost_usd>`, to the bit, each name parsed once.

    Each model's tokens are summed in counter order as there; the models' costs and the fees are
    added exactly rounded (``math.fsum``) as there, so the figure does not depend on the order of the
    counters (a span sum moved by its windows keeps a model where it first came; a fresh sum puts it
    where its first remaining window has it): a long-lived exporter serves a fresh one's figure.
    ``price_of``: as for :func:`cost_of`.
    """
    models, _kinds = _per_model(agg.counts)
    return cost_of(((model, *tokens) for model, tokens in models.items()), agg.counts.get("fees_usd", 0.0),
                   prices, at, price_of)


_I64 = 1 << 63  # ranks below it are handed to the native bisection


def _cumulative(sketch: Any) -> tuple[list[int], list[int]]:
    """The sketch's bucket indices in order, and the running count of its buckets up to each."""
    buckets = sketch.buckets
    keys = sorted(buckets)  # nearly sorted already (decoded in order, merges append): cheap
    return keys, list(accumulate(map(buckets.__getitem__, keys)))


def sketch_quantiles(sketch: Any, qs: Sequence[float], native: bool = True) -> list[float]:
    """``sketch.quantiles(qs)`` (:meth:`~monitor.sketch.LogSketch.quantiles`), by bisection of the running counts.

    The same lower quantiles, bucket for bucket (a test compares them): rank
    ``floor(q (n - 1))``, 0.0 below the zero count, else the representative of the
    first bucket whose running count passes the rank. The buckets are sorted and
    bisected natively when the extension is built (``native=False``: in Python; the
    native reader hands anything but int indices and counts >= 0 within i64 back).
    """
    count, zero = sketch.count, sketch.zero_count
    if count == 0:
        return [math.nan] * len(qs)
    ranks = []
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        ranks.append(math.floor(q * (count - 1)))
    above = [rank - zero for rank in ranks if rank >= zero]
    found = None
    if above and native and _bucket_at_ranks is not None and sketch.buckets and count < _I64:
        found = _bucket_at_ranks(sketch.buckets, above)
    if found is None and above:
        keys, running = _cumulative(sketch)
        if keys:
            last = len(keys) - 1
            found = [keys[min(bisect.bisect_right(running, rank), last)] for rank in above]
    at = iter(found or ())
    out = []
    for rank in ranks:
        if rank < zero:
            out.append(0.0)
        elif found is None:
            out.append(math.nan)  # counts that do not add up; the sketch's own loop would fail here
        else:
            out.append(sketch.value_of(next(at)))
    return out


def histogram_counts(sketch: Any, bounds: Sequence[float], native: bool = True) -> list[int]:
    """Cumulative counts per upper bound: ``sketch.count_below(b)`` for each ``b``.

    Same definition as :meth:`~monitor.sketch.LogSketch.count_below` (a value
    counts below ``b`` when its bucket's representative is ``<= b``, so a
    count is exact up to the sketch's relative accuracy around ``b``), by
    bisection: representatives grow with the bucket index, so each bound is a
    largest index (found once per sketch layout and bounds) and its count is the
    running count of the buckets up to that index (natively when the extension is built, as
    :func:`sketch_quantiles`).
    """
    limits = _index_limits(sketch.relative_accuracy, sketch.min_value, tuple(bounds))
    zero = sketch.zero_count
    up_to = None
    if native and _counts_up_to is not None:
        up_to = _counts_up_to(sketch.buckets, limits)
    if up_to is None:
        keys, running = _cumulative(sketch)
        up_to = []
        for limit in limits:
            below = bisect.bisect_right(keys, limit)
            up_to.append(running[below - 1] if below else 0)
    return [zero + n if bound >= 0.0 else 0 for bound, n in zip(bounds, up_to)]


_INDEX_LIMITS: dict[tuple[float, float, tuple[float, ...]], list[float]] = {}


def _index_limits(relative_accuracy: float, min_value: float, bounds: tuple[float, ...]) -> list[float]:
    """Per bound, the largest bucket index whose representative is ``<= bound``."""
    key = (relative_accuracy, min_value, bounds)
    limits = _INDEX_LIMITS.get(key)
    if limits is None:
        probe = LogSketch(relative_accuracy, min_value)

        def value(index: int) -> float:
            try:
                return probe.value_of(index)
            except OverflowError:
                return math.inf

        limits = []
        for bound in bounds:
            if not bound > 0.0:
                limits.append(-math.inf)  # representatives are > 0
            elif math.isinf(bound):
                limits.append(math.inf)
            else:
                index = math.floor(math.log(bound * (probe.gamma + 1.0) / 2.0) / math.log(probe.gamma))
                while value(index + 1) <= bound:
                    index += 1
                while value(index) > bound:
                    index -= 1
                limits.append(index)
        if len(_INDEX_LIMITS) > 64:
            _INDEX_LIMITS.clear()
        _INDEX_LIMITS[key] = limits
    return limits
