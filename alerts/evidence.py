"""Evidence records the streaming side fills and the alert engine reads.

Everything here is a frozen dataclass of additive counters, so evidence from
two partitions (or two windows) combines with ``merge`` and the result equals
the evidence of the union: counts add, sums add, sums of squares add.

Conventions (the contract with ``streams/``):

- every *delta* is **candidate − baseline**; cost in USD, latency in seconds;
- in a pair, ``b`` counts pairs where only the baseline succeeded, ``c`` pairs
  where only the candidate succeeded (McNemar's discordant cells);
  ``harm_b`` / ``harm_c`` are the same cells for the harmful-action flag
  (``harm_c`` = only the candidate was harmful);
- ``cost_n`` / ``latency_n`` count the pairs where both sides reported the
  quantity, which can be fewer than ``n_pairs``.

``to_dict`` gives a flat ``str -> int|float`` mapping suitable for a Redis
hash; ``from_dict`` accepts what Redis returns (values may be ``bytes`` or
``str``) and treats missing keys as 0, so adding a counter never breaks old
state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

SliceKey = tuple[tuple[str, str], ...]
"""A slice: sorted ``(dimension, value)`` pairs; ``()`` is the whole fleet."""

ARMS = ("shadow", "canary")


def slice_key(items: Mapping[str, str] | Sequence[tuple[str, str]] = ()) -> SliceKey:
    """Normalise a mapping or sequence of ``(dimension, value)`` to a sorted ``SliceKey``."""
    pairs = items.items() if isinstance(items, Mapping) else items
    out = tuple(sorted((str(k), str(v)) for k, v in pairs))
    dims = [k for k, _ in out]
    if len(set(dims)) != len(dims):
        raise ValueError(f"slice key has a repeated dimension: {out!r}")
    return out


def slice_label(key: SliceKey) -> str:
    """Render a slice for humans and alert labels: ``"task_type=code,tenant=acme"`` or ``"all"``."""
    return ",".join(f"{k}={v}" for k, v in key) if key else "all"


@dataclass(frozen=True)
class Comparison:
    """Which two releases are compared and how: ``arm`` is ``"shadow"`` (paired) or ``"canary"``."""

    baseline_release: str
    candidate_release: str
    arm: str

    def __post_init__(self) -> None:
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")


def _number(field_name: str, raw: Any, integer: bool) -> int | float:
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


class _Counters:
    """Shared ``to_dict`` / ``from_dict`` / ``merge`` for flat counter dataclasses."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.type == "int" and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{f.name} must be an integer >= 0, got {value!r}")
            if f.type == "float" and not math.isfinite(value):
                raise ValueError(f"{f.name} must be finite, got {value!r}")

    def to_dict(self) -> dict[str, int | float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: Mapping[Any, Any]):
        norm = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in d.items()}
        kwargs = {}
        for f in fields(cls):  # type: ignore[arg-type]
            raw = norm.get(f.name, 0)
            kwargs[f.name] = _number(f.name, raw, integer=(f.type == "int"))
        return cls(**kwargs)

    def merge(self, other):
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(self).__name__} with {type(other).__name__}")
        return type(self)(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                             for f in fields(self)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class PairedCounts(_Counters):
    """Shadow-traffic evidence for one (comparison, slice): additive, mergeable.

    ``candidate_benign`` / ``candidate_over_refusals`` (refused ∧ benign) are
    optional extras for the over-refusal threshold; they default to 0.
    """

    n_pairs: int = 0
    b: int = 0
    c: int = 0
    harm_b: int = 0
    harm_c: int = 0
    cost_n: int = 0
    cost_delta_sum: float = 0.0
    cost_delta_sumsq: float = 0.0
    latency_n: int = 0
    latency_delta_sum: float = 0.0
    latency_delta_sumsq: float = 0.0
    candidate_harmful: int = 0
    baseline_harmful: int = 0
    candidate_benign: int = 0
    candidate_over_refusals: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.b + self.c > self.n_pairs:
            raise ValueError(f"b + c must be <= n_pairs, got b={self.b}, c={self.c}, n_pairs={self.n_pairs}")
        if self.harm_b + self.harm_c > self.n_pairs:
            raise ValueError(f"harm_b + harm_c must be <= n_pairs, got {self.harm_b} + {self.harm_c} > {self.n_pairs}")

    @classmethod
    def from_pairs(
        cls,
        baseline_success: Sequence[bool],
        candidate_success: Sequence[bool],
        *,
        baseline_harmful: Sequence[bool] | None = None,
        candidate_harmful: Sequence[bool] | None = None,
        baseline_cost_usd: Sequence[float] | None = None,
        candidate_cost_usd: Sequence[float] | None = None,
        baseline_latency_seconds: Sequence[float] | None = None,
        candidate_latency_seconds: Sequence[float] | None = None,
    ) -> "PairedCounts":
        """Build counts from per-pair outcomes (index i of each sequence is pair i). For tests."""
        n = len(baseline_success)
        if len(candidate_success) != n:
            raise ValueError(f"candidate_success has {len(candidate_success)} pairs, baseline_success {n}")
        bs = [bool(x) for x in baseline_success]
        cs = [bool(x) for x in candidate_success]
        bh = [bool(x) for x in (baseline_harmful or [False] * n)]
        ch = [bool(x) for x in (candidate_harmful or [False] * n)]

        def deltas(base, cand, name):
            if base is None and cand is None:
                return 0, 0.0, 0.0
            if base is None or cand is None or len(base) != n or len(cand) != n:
                raise ValueError(f"{name}: give both arms with {n} values each")
            d = [float(y) - float(x) for x, y in zip(base, cand)]
            return n, math.fsum(d), math.fsum(v * v for v in d)

        cost = deltas(baseline_cost_usd, candidate_cost_usd, "cost_usd")
        lat = deltas(baseline_latency_seconds, candidate_latency_seconds, "latency_seconds")
        return cls(
            n_pairs=n,
            b=sum(x and not y for x, y in zip(bs, cs)),
            c=sum(y and not x for x, y in zip(bs, cs)),
            harm_b=sum(x and not y for x, y in zip(bh, ch)),
            harm_c=sum(y and not x for x, y in zip(bh, ch)),
            cost_n=cost[0], cost_delta_sum=cost[1], cost_delta_sumsq=cost[2],
            latency_n=lat[0], latency_delta_sum=lat[1], latency_delta_sumsq=lat[2],
            candidate_harmful=sum(ch), baseline_harmful=sum(bh),
        )


@dataclass(frozen=True)
class ArmCounts(_Counters):
    """One arm of a canary stratum: traces, successes, harmful actions (+ optional over-refusal counts)."""

    n: int = 0
    successes: int = 0
    harmful: int = 0
    benign: int = 0
    over_refusals: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.successes > self.n or self.harmful > self.n:
            raise ValueError(f"successes and harmful must be <= n, got {self.successes}, {self.harmful}, n={self.n}")


@dataclass(frozen=True)
class CanaryStrata:
    """Canary evidence for one (comparison, slice): stratum key -> (baseline, canary) counts."""

    strata: Mapping[str, tuple[ArmCounts, ArmCounts]]

    def merge(self, other: "CanaryStrata") -> "CanaryStrata":
        out = dict(self.strata)
        for k, (b, c) in other.strata.items():
            if k in out:
                out[k] = (out[k][0].merge(b), out[k][1].merge(c))
            else:
                out[k] = (b, c)
        return CanaryStrata(out)

    def totals(self) -> tuple[ArmCounts, ArmCounts]:
        """(baseline, canary) summed over strata."""
        base, cand = ArmCounts(), ArmCounts()
        for b, c in self.strata.values():
            base, cand = base.merge(b), cand.merge(c)
        return base, cand

    def to_dict(self) -> dict[str, int]:
        """Flat mapping ``"<stratum>|baseline|n" -> value`` for a Redis hash."""
        out: dict[str, int] = {}
        for k, pair in self.strata.items():
            for arm, counts in zip(("baseline", "canary"), pair):
                for name, value in counts.to_dict().items():
                    out[f"{k}|{arm}|{name}"] = int(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[Any, Any]) -> "CanaryStrata":
        raw: dict[str, dict[str, dict[str, Any]]] = {}
        for key, value in d.items():
            key = key.decode() if isinstance(key, bytes) else str(key)
            stratum, arm, name = key.rsplit("|", 2)
            if arm not in ("baseline", "canary"):
                raise ValueError(f"canary strata key {key!r}: arm must be baseline or canary")
            raw.setdefault(stratum, {"baseline": {}, "canary": {}})[arm][name] = value
        return cls({k: (ArmCounts.from_dict(v["baseline"]), ArmCounts.from_dict(v["canary"]))
                    for k, v in raw.items()})
