"""The mergeable per-(window, slice) aggregate and the health vector it yields.

An :class:`Aggregate` is a bag of additive counters plus a latency sketch:
``merge`` is addition, so it is associative and commutative, the empty
aggregate is its identity, and the aggregate of a union of traces equals the
merge of the parts' aggregates; ``subtract`` takes a merged-in part out
again (exact for the counts and the sketch, up to rounding for the two float
fields), which is what lets a reader slide a sum over windows. Its serial
form (:meth:`Aggregate.to_dict`) is a flat ``{field: number}`` mapping in
which every value is summed on merge, which is what lets Redis fold batches
with HINCRBY/HINCRBYFLOAT.

Token sums are kept per ``model_id`` (``tokens_in:<model>`` and so on)
because a slice may span models while prices never do; dollars are computed
at read time (:meth:`Aggregate.cost_usd`) with the price entries in force at
a time the caller passes (a window's start).

Empty aggregate: every count is 0; rates are nan with the interval (0, 1);
cost per solved is ``inf`` when there are no successes (and 0 cost over 0
successes is nan); latency quantiles are nan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from monitor.pricing import PriceMap
from monitor.schema import OUTCOMES, Trace
from monitor.sketch import LogSketch, add_counts
from monitor.stats.intervals import estimate_rate

#: Fields summed as floats (HINCRBYFLOAT); every other field is an integer.
FLOAT_FIELDS = frozenset(("fees_usd", "latency_sum_seconds"))
LATENCY_PREFIX = "latency:"
TOKEN_KINDS = ("tokens_in", "tokens_cached_in", "tokens_out")
_TOKEN_PREFIXES = tuple(kind + ":" for kind in TOKEN_KINDS)
PLAIN_FIELDS = (
    "traces", "successes", *(f"outcome:{o}" for o in OUTCOMES), "outcome:none",
    "fees_usd", "steps", "tool_calls", "tool_errors", "steps_solved", "tokens_solved",
    "harmful_action", "refused", "benign", "refused_benign", "side_effects",
    "side_effect_traces", "prompt_injection", "latency_count", "latency_sum_seconds",
)


class Aggregate:
    """Additive counters over a set of traces (see the module docstring)."""

    __slots__ = ("counts", "latency")

    def __init__(self, counts: dict[str, float] | None = None, latency: LogSketch | None = None) -> None:
        self.counts: dict[str, float] = counts if counts is not None else {}
        self.latency = latency if latency is not None else LogSketch()

    # -- building -----------------------------------------------------------
    def update(self, trace: Trace) -> Aggregate:
        """Fold one validated trace in (in place); returns self."""
        c = self.counts
        get = c.get
        c["traces"] = get("traces", 0) + 1
        outcome_key = "outcome:" + (trace.outcome or "none")
        c[outcome_key] = get(outcome_key, 0) + 1
        model = trace.model_id
        for kind, value in (("tokens_in:", trace.tokens_in), ("tokens_cached_in:", trace.tokens_cached_in),
                            ("tokens_out:", trace.tokens_out)):
            if value:
                key = kind + model
                c[key] = get(key, 0) + value
        if trace.success:
            c["successes"] = get("successes", 0) + 1
            c["steps_solved"] = get("steps_solved", 0) + trace.steps
            c["tokens_solved"] = get("tokens_solved", 0) + trace.tokens_in + trace.tokens_out
        for name in ("steps", "tool_calls", "tool_errors", "side_effects"):
            value = getattr(trace, name)
            if value:
                c[name] = get(name, 0) + value
        if trace.fees_usd:
            c["fees_usd"] = get("fees_usd", 0.0) + trace.fees_usd
        if trace.side_effects:
            c["side_effect_traces"] = get("side_effect_traces", 0) + 1
        if trace.harmful_action:
            c["harmful_action"] = get("harmful_action", 0) + 1
        if trace.refused:
            c["refused"] = get("refused", 0) + 1
        if trace.benign:
            c["benign"] = get("benign", 0) + 1
            if trace.refused:
                c["refused_benign"] = get("refused_benign", 0) + 1
        if trace.prompt_injection:
            c["prompt_injection"] = get("prompt_injection", 0) + 1
        if trace.latency_seconds is not None:
            c["latency_count"] = get("latency_count", 0) + 1
            c["latency_sum_seconds"] = get("latency_sum_seconds", 0.0) + trace.latency_seconds
            self.latency.add(trace.latency_seconds)
        return self

    @classmethod
    def of(cls, traces: Iterable[Trace]) -> Aggregate:
        agg = cls()
        for trace in traces:
            agg.update(trace)
        return agg

    def merge(self, other: Aggregate) -> Aggregate:
        """Add ``other`` in (in place); returns self."""
        add_counts(self.counts, other.counts)
        self.latency.merge(other.latency)
        return self

    def subtract(self, other: Aggregate) -> Aggregate:
        """Take ``other`` out again (in place); returns self: the inverse of :meth:`merge`.

        ``other`` must have been merged in before (a window leaving a running
        sum). Integer counts and sketch buckets are exact: a count that
        reaches 0 is removed, so ``(a + b).subtract(b) == a``; one that would
        go negative raises ValueError naming the field, and nothing is
        changed. The float fields (:data:`FLOAT_FIELDS`) are only as exact as
        float sums are: one left below, or within ``1e-9`` (relative to what
        is taken out) of, 0 becomes 0 and is removed, so none goes negative
        (a caller that needs them exact re-adds them from the parts).
        """
        c = self.counts
        get = c.get
        left = {key: get(key, 0) - value for key, value in other.counts.items()}
        for key in FLOAT_FIELDS:
            if key in left and left[key] <= 1e-9 * abs(other.counts[key]):
                left[key] = 0  # rounding residue, or below 0 by rounding: a float sum is not exact
        if left and min(left.values()) < 0:
            key = min(left, key=left.__getitem__)
            raise ValueError(f"cannot subtract {key}={other.counts[key]!r} from {get(key, 0)!r}: counts must "
                             "stay >= 0 (the aggregate was not merged in)")
        self.latency.subtract(other.latency)  # checks its buckets before changing anything
        c.update(left)
        for key in [key for key, value in left.items() if not value]:
            del c[key]
        return self

    def __add__(self, other: Aggregate) -> Aggregate:
        return self.copy().merge(other)

    def copy(self) -> Aggregate:
        return Aggregate(dict(self.counts), self.latency.copy())

    # -- serial form ----------------------------------------------------------
    def to_dict(self) -> dict[str, float]:
        """Flat additive mapping; zero counts are left out."""
        out = {k: v for k, v in self.counts.items() if v}
        for key, n in self.latency.to_dict().items():
            out[LATENCY_PREFIX + key] = n
        return out

    @classmethod
    def from_dict(cls, data: Mapping[Any, Any]) -> Aggregate:
        """Inverse of :meth:`to_dict`; accepts the bytes Redis returns."""
        counts: dict[str, float] = {}
        buckets: dict[str, int] = {}
        for raw_key, raw_value in data.items():
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            text = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
            if key.startswith(LATENCY_PREFIX):
                buckets[key[len(LATENCY_PREFIX):]] = int(text)
            elif key in FLOAT_FIELDS:
                counts[key] = float(text)
            else:
                counts[key] = int(float(text)) if isinstance(text, str) else int(text)
        return cls(counts, LogSketch.from_dict(buckets))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Aggregate):
            return NotImplemented
        keys = set(self.counts) | set(other.counts)
        for key in keys:
            a, b = self.counts.get(key, 0), other.counts.get(key, 0)
            if key in FLOAT_FIELDS:
                if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif a != b:
                return False
        return self.latency == other.latency

    def __repr__(self) -> str:
        return f"Aggregate(traces={self.traces}, successes={self.successes})"

    # -- reading --------------------------------------------------------------
    def get(self, name: str) -> float:
        return self.counts.get(name, 0)

    @property
    def traces(self) -> int:
        return int(self.counts.get("traces", 0))

    @property
    def successes(self) -> int:
        return int(self.counts.get("successes", 0))

    def tokens_by_model(self) -> dict[str, dict[str, float]]:
        """``{model: {"tokens_in": .., "tokens_cached_in": .., "tokens_out": ..}}``."""
        out: dict[str, dict[str, float]] = {}
        for key, value in self.counts.items():
            if key.startswith(_TOKEN_PREFIXES):
                kind, model = key.split(":", 1)
                out.setdefault(model, dict.fromkeys(TOKEN_KINDS, 0))[kind] += value
        return out

    def tokens(self, kind: str) -> float:
        prefix = kind + ":"
        return sum(v for k, v in self.counts.items() if k.startswith(prefix))

    def cost_usd(self, prices: PriceMap, at: float | None) -> float:
        """Token cost priced with the entries in force at ``at``, plus fees.

        The models' costs and the fees are added exactly rounded (``math.fsum``), so the figure
        does not depend on the order of the counters: two equal aggregates built in different
        orders (a sum moved window by window, a fresh sum) list their models in different orders,
        and a left-to-right sum of three terms or more could differ in the last digit.
        """
        fees = self.counts.get("fees_usd", 0.0)
        return math.fsum([fees, *(prices.price_for(model, at).cost_usd(t["tokens_in"], t["tokens_cached_in"],
                                                                       t["tokens_out"])
                                  for model, t in self.tokens_by_model().items())])


def cost_per_solved(cost_usd: float, successes: int) -> float:
    """Total cost / successes: inf with cost and no success, nan with neither."""
    if successes > 0:
        return cost_usd / successes
    return math.inf if cost_usd > 0 else math.nan


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan


def health(agg: Aggregate, prices: PriceMap, at: float | None, confidence: float = 0.95) -> dict[str, Any]:
    """The health vector of DESIGN.md for one aggregate (micro within it).

    Success and the safety rates carry their interval (Wilson, or
    Clopper–Pearson for small n or 0/n); harmful-action and over-refusal are
    always reported together. Steps are means over all traces and over the
    solved ones (a trace without ``steps`` counts 0).
    """
    n = agg.traces
    success = estimate_rate(agg.successes, n, confidence)
    cost = agg.cost_usd(prices, at)
    harmful = estimate_rate(int(agg.get("harmful_action")), n, confidence)
    benign = int(agg.get("benign"))
    over_refusal = estimate_rate(int(agg.get("refused_benign")), benign, confidence)
    side_effect = estimate_rate(int(agg.get("side_effect_traces")), n, confidence)
    injection = estimate_rate(int(agg.get("prompt_injection")), n, confidence)
    p50, p95, p99 = agg.latency.quantiles((0.5, 0.95, 0.99))
    return {
        "traces": n,
        "successes": agg.successes,
        "success": {"rate": success.rate, "low": success.low, "high": success.high,
                    "method": success.method},
        "cost_usd": cost,
        "cost_per_trace_usd": _ratio(cost, n),
        "cost_per_solved_usd": cost_per_solved(cost, agg.successes),
        "latency_seconds": {"p50": p50, "p95": p95, "p99": p99,
                            "mean": _ratio(agg.get("latency_sum_seconds"), agg.get("latency_count"))},
        "safety": {
            "harmful_action_rate": harmful.rate, "harmful_action_ci": [harmful.low, harmful.high],
            "over_refusal_rate": over_refusal.rate, "over_refusal_ci": [over_refusal.low, over_refusal.high],
            "benign": benign,
            "side_effect_rate": side_effect.rate, "side_effect_ci": [side_effect.low, side_effect.high],
            "side_effects_per_trace": _ratio(agg.get("side_effects"), n),
            "prompt_injection_rate": injection.rate, "prompt_injection_ci": [injection.low, injection.high],
        },
        "steps": {"mean": _ratio(agg.get("steps"), n), "solved_mean": _ratio(agg.get("steps_solved"), agg.successes)},
        "tool_error_rate": _ratio(agg.get("tool_errors"), agg.get("tool_calls")),
    }
