"""What a decision is made of: the kinds, the policy (floors, α and its split), the finding (pure).

One α per comparison. ``Policy.alpha`` is the comparison's level; it is
split across the alert *families* the policy can ever produce by the fixed
``AlphaWeights`` (normalised over those families, so a comparison's split
never changes over its life): success, cost, latency, safety (harmful
action), over-refusal, and one family per configured absolute threshold.
Within each family the slices share the family's α through e-BH
(:mod:`alerts.fdr`). Union bound: P(any false page of a comparison, over
every family, slice and look of its whole life) <= Σ shares = α, for the
families whose tests are valid e-processes (module notes of
:mod:`alerts.decide` say which).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from alerts.evidence import Comparison
from monitor.pairing import DEFAULT_CAPS, Caps
from monitor.slices import SliceKey

#: Regression kinds tested per slice with e-values and controlled by e-BH across slices.
REGRESSION_KINDS = ("success_regression", "cost_regression", "latency_regression", "safety_regression",
                    "over_refusal_regression")
KINDS = (*REGRESSION_KINDS, "safety_threshold")
#: Kinds that page as critical and fire without the hold.
SAFETY_KINDS = ("safety_regression", "over_refusal_regression", "safety_threshold")
#: Kinds decided by an exact betting e-value (their counters are "flip" or "rate" on shadow traffic).
BETTING_KINDS = ("success_regression", "safety_regression", "over_refusal_regression", "safety_threshold")
THRESHOLD_METRICS = ("harmful_action", "over_refusal")


@dataclass(frozen=True)
class Floors:
    """Practical floors: success drop in points (0.02 = 2 points), relative cost/latency increase."""

    success_points: float = 0.02
    cost_relative: float = 0.10
    latency_relative: float = 0.10


@dataclass(frozen=True)
class AlphaWeights:
    """Fixed weights of the α split; ``safety_threshold`` is per configured threshold metric.

    Defaults: success 0.35, cost 0.15, latency 0.15, safety (harmful action) 0.15, over-refusal
    0.10, each threshold 0.05 (sum 1.0 with both thresholds configured). Success gets the most
    because it is the test users tune for; safety keeps a large share although it has no floor,
    since its effects are rare events. Only ratios matter: shares are normalised.
    """

    success_regression: float = 0.35
    cost_regression: float = 0.15
    latency_regression: float = 0.15
    safety_regression: float = 0.15
    over_refusal_regression: float = 0.10
    safety_threshold: float = 0.05

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"AlphaWeights.{f.name} must be a number > 0, got {value!r}")


def family_name(kind: str, metric: str = "") -> str:
    """The α family of a finding: its kind, plus the metric for thresholds ("safety_threshold:harmful_action")."""
    return f"{kind}:{metric}" if kind == "safety_threshold" else kind


@dataclass(frozen=True)
class Policy:
    """Decision policy for every comparison.

    ``alpha`` is the level of one whole comparison (split by ``weights``, see the
    module docstring). Every test runs from the first pair (they are all
    anytime-valid e-processes). A threshold of None is off.
    """

    alpha: float = 0.05
    floors: Floors = field(default_factory=Floors)
    harmful_threshold: float | None = None
    over_refusal_threshold: float | None = None
    weights: AlphaWeights = field(default_factory=AlphaWeights)
    #: Per-trace caps the cost / latency tests expect the workers to have counted with (monitor.pairing.Caps).
    caps: Caps = DEFAULT_CAPS
    #: False: skip the bisected lower bound of findings that are not significant (the
    #: validity bench's speed-up; decisions are identical, the shown bound is the scale's start).
    bounds_for_all: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"Policy.alpha must be in (0, 1), got {self.alpha}")
        for name in ("harmful_threshold", "over_refusal_threshold"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"Policy.{name} must be in [0, 1] or None, got {value}")

    def thresholds(self) -> dict[str, float]:
        """Configured absolute thresholds by metric."""
        out = {"harmful_action": self.harmful_threshold, "over_refusal": self.over_refusal_threshold}
        return {metric: value for metric, value in out.items() if value is not None}

    def alpha_shares(self) -> dict[str, float]:
        """α of each family this policy can produce (``family_name`` keys); the values sum to ``alpha``."""
        raw = {kind: float(getattr(self.weights, kind)) for kind in REGRESSION_KINDS}
        raw.update({family_name("safety_threshold", m): float(self.weights.safety_threshold)
                    for m in self.thresholds()})
        total = sum(raw.values())
        return {name: self.alpha * w / total for name, w in raw.items()}

    def alpha_share(self, kind: str, metric: str = "") -> float:
        """α of one family; raises KeyError naming the family if the policy cannot produce it."""
        shares = self.alpha_shares()
        name = family_name(kind, metric)
        if name not in shares:
            raise KeyError(f"no alpha share for family {name!r}; families: {sorted(shares)}")
        return shares[name]


@dataclass(frozen=True)
class Finding:
    """One test's outcome for one (comparison, slice).

    ``effect`` is signed so that positive = candidate worse; ``alpha`` is the
    level the decision used (the family's share after e-BH). ``detail`` carries
    ``counters``/``counters_kind`` (the lifecycle's input), ``test``,
    ``interval``, ``cause`` etc.
    """

    kind: str
    comparison: Comparison
    slice_key: SliceKey
    severity: str
    significant: bool
    beyond_floor: bool
    fires: bool
    e_value: float
    effect: float
    effect_low: float
    effect_high: float
    floor: float
    alpha: float
    n_pairs: int
    b: int
    c: int
    detail: dict[str, Any] = field(default_factory=dict)
