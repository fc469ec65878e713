"""Canary evidence the alert engine builds, and what a comparison is (pure).

Shadow (paired) evidence is :class:`monitor.pairing.PairedCounts`, kept by
the workers. Canary evidence is built by the engine from the store's windows:
per stratum (task type), one :class:`ArmCounts` per arm. Both are additive:
evidence from two partitions (or two windows) combines with ``merge`` and the
result equals the evidence of the union. Every delta or effect is
**candidate − baseline**.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from monitor.counters import Counters
from monitor.schema import CANARY_ARMS, COMPARISON_ARMS


@dataclass(frozen=True)
class Comparison:
    """Which two releases are compared and how: ``arm`` (a ``COMPARISON_ARMS`` member) is
    ``"shadow"`` (paired traffic) or ``"canary"`` (disjoint traffic)."""

    baseline_release: str
    candidate_release: str
    arm: str

    def __post_init__(self) -> None:
        if self.arm not in COMPARISON_ARMS:
            raise ValueError(f"arm must be one of {COMPARISON_ARMS}, got {self.arm!r}")


@dataclass(frozen=True)
class ArmCounts(Counters):
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

    def merge(self, other: CanaryStrata) -> CanaryStrata:
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
            for arm, counts in zip(CANARY_ARMS, pair):
                for name, value in counts.to_dict().items():
                    out[f"{k}|{arm}|{name}"] = int(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[Any, Any]) -> CanaryStrata:
        raw: dict[str, dict[str, dict[str, Any]]] = {}
        for raw_key, value in d.items():
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            stratum, arm, name = key.rsplit("|", 2)
            if arm not in CANARY_ARMS:
                raise ValueError(f"canary strata key {key!r}: arm must be baseline or canary")
            raw.setdefault(stratum, {side: {} for side in CANARY_ARMS})[arm][name] = value
        baseline, canary = CANARY_ARMS
        return cls({k: (ArmCounts.from_dict(v[baseline]), ArmCounts.from_dict(v[canary])) for k, v in raw.items()})
