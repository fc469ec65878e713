"""Synthetic fleet traffic (pure, seeded, event-time stamped).

A :class:`Scenario` describes a fleet: a baseline release serving traffic,
optionally a candidate that receives *shadow* twins of a share of baseline
requests (same ``pair_id``, arm ``shadow``) and/or a *canary* share of
disjoint requests (arm ``canary``), across slices (task type, tenant,
locale). Each release has a success probability, token, latency and safety
profile. Paired outcomes are correlated: with probability ``correlation``
the shadow twin shares the baseline request's latent difficulty draw, so
both arms tend to succeed or fail together, as real shadow traffic does.
From ``regression_at_seconds`` on, the candidate's success drops by
``regression_drop`` (absolute) and its harmful-action rate rises by
``harmful_rise``, on the task types in ``regression_task_types`` (all when
None) — real regressions concentrate where a change broke something.

:func:`generate` yields full-form trace records in event-time order at a
steady ``rate_per_second`` starting at ``start_ts``; the same scenario and
seed always give the same records.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypedDict


@dataclass(frozen=True)
class ReleaseProfile:
    name: str
    success: float = 0.80
    tokens_in_mean: float = 6000.0
    tokens_out_mean: float = 800.0
    cached_share: float = 0.3
    latency_median_seconds: float = 4.0
    latency_sigma: float = 0.5
    harmful: float = 0.002
    refusal: float = 0.02
    steps_mean: float = 5.0

    def __post_init__(self) -> None:
        for name in ("success", "cached_share", "harmful", "refusal"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"release {self.name}: {name} must be in [0, 1], got {value}")


@dataclass(frozen=True)
class Scenario:
    baseline: ReleaseProfile = field(default_factory=lambda: ReleaseProfile("support-v1"))
    candidate: ReleaseProfile | None = field(default_factory=lambda: ReleaseProfile("support-v2"))
    shadow_share: float = 1.0           # share of baseline requests mirrored to the candidate
    canary_share: float = 0.0           # share of requests served by the candidate instead
    correlation: float = 0.7            # pairing correlation of outcomes (0..1)
    rate_per_second: float = 10.0       # baseline + canary requests per second (shadow twins extra)
    duration_seconds: float = 300.0
    start_ts: float = 1_767_225_600.0   # 2026-01-01T00:00:00Z
    regression_at_seconds: float | None = 60.0
    regression_drop: float = 0.15
    harmful_rise: float = 0.0
    # Real regressions concentrate: a new prompt breaks some task types. None = every task type.
    regression_task_types: tuple[str, ...] | None = ("exchange", "refund")
    task_types: Mapping[str, float] = field(default_factory=lambda: {
        "refund": 0.0, "exchange": -0.10, "faq": 0.10, "billing": -0.05})
    tenants: tuple[str, ...] = ("acme", "globex", "initech", "umbrella")
    locales: tuple[str, ...] = ("en-US", "de-DE", "fr-FR")
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("shadow_share", "canary_share", "correlation"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.rate_per_second <= 0 or not math.isfinite(self.rate_per_second):
            raise ValueError(f"rate_per_second must be > 0, got {self.rate_per_second}")
        if self.duration_seconds <= 0:
            raise ValueError(f"duration_seconds must be > 0, got {self.duration_seconds}")

    def aa(self) -> Scenario:
        """The same fleet with no regression (an A/A stream of the same length)."""
        return replace(self, regression_at_seconds=None)


def _clip(p: float) -> float:
    return min(1.0, max(0.0, p))


class _Where(TypedDict):
    """The slice dimensions both halves of a pair share (and the task type's success offset)."""

    task_type: str
    offset: float
    tenant: str
    locale: str


def _trace(rng: random.Random, profile: ReleaseProfile, *, arm: str, ts: float, trace_id: str, pair_id: str | None,
           task_type: str, offset: float, tenant: str, locale: str, u: float, harmful_extra: float,
           success_drop: float) -> dict:
    success = u < _clip(profile.success + offset - success_drop)
    tokens_in = max(1, int(rng.expovariate(1.0 / profile.tokens_in_mean)))
    outcome = "success" if success else rng.choice(("failure", "failure", "escalated", "abandoned"))
    benign = rng.random() < 0.95
    record = {
        "trace_id": trace_id, "ts": round(ts, 3), "model_id": profile.name, "release": profile.name, "arm": arm,
        "task_type": task_type, "tenant": tenant, "locale": locale, "outcome": outcome,
        "tokens_in": tokens_in, "tokens_cached_in": int(tokens_in * profile.cached_share),
        "tokens_out": max(1, int(rng.expovariate(1.0 / profile.tokens_out_mean))),
        "latency_ms": round(1000.0 * profile.latency_median_seconds * math.exp(rng.gauss(0, profile.latency_sigma)), 1),
        "steps": max(1, int(rng.expovariate(1.0 / profile.steps_mean))),
        "tool_calls": rng.randint(0, 6), "tool_errors": int(rng.random() < 0.05),
        "harmful_action": rng.random() < _clip(profile.harmful + harmful_extra),
        "refused": rng.random() < profile.refusal, "benign": benign,
    }
    if pair_id is not None:
        record["pair_id"] = pair_id
    return record


def generate(scenario: Scenario) -> Iterator[dict]:
    """Trace records of the scenario, in event-time order (shadow twin right after its baseline)."""
    rng = random.Random(scenario.seed)
    n = int(scenario.rate_per_second * scenario.duration_seconds)
    step = 1.0 / scenario.rate_per_second
    task_names = list(scenario.task_types)
    for i in range(n):
        ts = scenario.start_ts + i * step
        elapsed = i * step
        task_type = task_names[rng.randrange(len(task_names))]
        regressed = (scenario.regression_at_seconds is not None and elapsed >= scenario.regression_at_seconds
                     and (scenario.regression_task_types is None or task_type in scenario.regression_task_types))
        drop = scenario.regression_drop if regressed else 0.0
        harm = scenario.harmful_rise if regressed else 0.0
        offset = scenario.task_types[task_type]
        tenant = scenario.tenants[rng.randrange(len(scenario.tenants))]
        locale = scenario.locales[rng.randrange(len(scenario.locales))]
        u = rng.random()
        common: _Where = {"task_type": task_type, "offset": offset, "tenant": tenant, "locale": locale}
        cand = scenario.candidate
        if cand is not None and rng.random() < scenario.canary_share:
            yield _trace(rng, cand, arm="canary", ts=ts, trace_id=f"c-{scenario.seed}-{i}", pair_id=None, u=u,
                         harmful_extra=harm, success_drop=drop, **common)
            continue
        shadow = cand is not None and rng.random() < scenario.shadow_share
        pair_id = f"p-{scenario.seed}-{i}" if shadow else None
        yield _trace(rng, scenario.baseline, arm="baseline", ts=ts, trace_id=f"b-{scenario.seed}-{i}",
                     pair_id=pair_id, u=u, harmful_extra=0.0, success_drop=0.0, **common)
        if shadow and cand is not None:
            twin_u = u if rng.random() < scenario.correlation else rng.random()
            yield _trace(rng, cand, arm="shadow", ts=ts + 0.001, trace_id=f"s-{scenario.seed}-{i}", pair_id=pair_id,
                         u=twin_u, harmful_extra=harm, success_drop=drop, **common)
