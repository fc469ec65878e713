"""The alert engine: gathers evidence from a store, decides, advances the lifecycle, notifies.

``AlertEngine.tick(now)`` is one evaluation; whoever owns the clock (the
``fleetmon alerts`` loop, ``fleetmon run``, a test) calls it. It never opens
a connection itself: the store and the notifier are passed in.

Evidence:

* **shadow** comparisons come from the paired counters the workers keep
  (``pair:<baseline>:<candidate>:<slice>``), cumulative since the first pair;
* **canary** comparisons are built from the 1-minute windows of the last
  ``canary_lookback_seconds``: for each release seen with arm ``canary`` and
  the baseline release with the most traffic in the same windows, one
  comparison over ``all`` and one per single-dimension slice, each stratified
  by ``task_type`` (the canary's mix is the standard, so a shift in the mix
  cannot fake a regression).

Delivery is at-least-once: the lifecycle state is saved only after the
notifier accepted the events, so a failed delivery is retried at the next
tick (receivers dedupe by fingerprint); a restarted engine loads the state
and neither re-pages nor forgets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from alerts.decide import Finding, Policy, decide_comparison
from alerts.evidence import ArmCounts, CanaryStrata, Comparison, PairedCounts, SliceKey, slice_key
from alerts.lifecycle import AlertEvent, AlertState, LifecycleConfig, evaluate
from alerts.notifiers import Notifier, NotifyError
from monitor.aggregate import Aggregate
from monitor.pairing import pairs_from_extra
from monitor.slices import parse_slice_id
from monitor.store.base import Store

log = logging.getLogger("fleetmon.alerts")

STATE_NAME = "alerts"
FINDINGS_STATE_NAME = "findings"
STRATUM_DIMENSION = "task_type"
_NOT_SLICES = ("release", "arm", "model_id")


@dataclass(frozen=True)
class EngineConfig:
    policy: Policy = field(default_factory=Policy)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    canary_lookback_seconds: float = 6 * 3600.0
    active_seconds: float = 2 * 3600.0


def shadow_evidence(store: Store) -> tuple[dict[Comparison, dict[SliceKey, PairedCounts]],
                                           dict[Comparison, dict[SliceKey, tuple[float | None, float | None]]]]:
    """Paired counts per comparison and slice, and the baseline's mean cost and latency there."""
    evidence: dict[Comparison, dict[SliceKey, PairedCounts]] = {}
    means: dict[Comparison, dict[SliceKey, tuple[float | None, float | None]]] = {}
    for baseline, candidate, sid, fields in pairs_from_extra(store.extra("pair:")):
        comparison = Comparison(baseline, candidate, "shadow")
        key = slice_key(parse_slice_id(sid))
        evidence.setdefault(comparison, {})[key] = PairedCounts.from_dict(fields)
        cost_n, lat_n = fields.get("cost_n", 0), fields.get("latency_n", 0)
        means.setdefault(comparison, {})[key] = (
            fields.get("baseline_cost_sum", 0.0) / cost_n if cost_n else None,
            fields.get("baseline_latency_sum", 0.0) / lat_n if lat_n else None)
    return evidence, means


def _arm_counts(agg: Aggregate) -> ArmCounts:
    return ArmCounts(n=agg.traces, successes=agg.successes, harmful=int(agg.get("harmful_action")),
                     benign=int(agg.get("benign")), over_refusals=int(agg.get("refused_benign")))


def canary_evidence(store: Store, now: float, lookback_seconds: float) -> dict[Comparison, dict[SliceKey, CanaryStrata]]:
    """Stratified canary-vs-baseline counts from the 1-minute windows of the lookback."""
    ids = [sid for sid in store.active_slices(since=now - lookback_seconds)]
    if not any("arm=canary" in sid for sid in ids):  # cheap test before parsing every id
        return {}
    parsed = {sid: dict(parse_slice_id(sid)) for sid in ids}
    canaries = {d.get("release") for d in parsed.values() if d.get("arm") == "canary"}
    if not canaries:
        return {}
    aggregates = store.window_aggregates("1m", now - lookback_seconds, now + 60, ids)
    baseline_volume: dict[str, int] = {}
    for sid, dims in parsed.items():
        if dims.get("arm") == "baseline":
            baseline_volume[dims.get("release", "")] = baseline_volume.get(dims.get("release", ""), 0) + aggregates[sid].traces
    if not baseline_volume:
        return {}
    baseline_release = max(baseline_volume, key=baseline_volume.__getitem__)
    out: dict[Comparison, dict[SliceKey, CanaryStrata]] = {}
    for candidate in sorted(c for c in canaries if c):
        cells: dict[SliceKey, dict[str, list[ArmCounts]]] = {}
        for sid, dims in parsed.items():
            arm, release = dims.get("arm"), dims.get("release")
            if not ((arm == "canary" and release == candidate) or (arm == "baseline" and release == baseline_release)):
                continue
            counts = _arm_counts(aggregates[sid])
            if counts.n == 0:
                continue
            stratum = dims.get(STRATUM_DIMENSION, "unknown")
            slices = [()] + [((d, v),) for d, v in dims.items() if d not in _NOT_SLICES and v != "unknown"]
            for key in slices:
                pair = cells.setdefault(key, {}).setdefault(stratum, [ArmCounts(), ArmCounts()])
                side = 1 if arm == "canary" else 0
                pair[side] = pair[side].merge(counts)
        comparison = Comparison(baseline_release, candidate, "canary")
        out[comparison] = {key: CanaryStrata({s: (b, c) for s, (b, c) in strata.items()})
                           for key, strata in cells.items()}
    return out


class AlertEngine:
    """Evaluates every comparison in the store; see the module docstring."""

    def __init__(self, store: Store, notifier: Notifier, config: EngineConfig | None = None,
                 state_name: str = STATE_NAME) -> None:
        self.store = store
        self.notifier = notifier
        self.config = config or EngineConfig()
        self.state_name = state_name
        saved = store.get_state(state_name)
        self.state = AlertState.from_dict(saved) if saved else AlertState()
        self.findings: list[Finding] = []
        self.delivery_failures = 0

    def decide(self, now: float) -> list[Finding]:
        policy = self.config.policy
        findings: list[Finding] = []
        shadow, means = shadow_evidence(self.store)
        for comparison, evidence in sorted(shadow.items(), key=lambda kv: repr(kv[0])):
            findings += decide_comparison(comparison, evidence, policy, baseline_means=means[comparison])
        canary = canary_evidence(self.store, now, self.config.canary_lookback_seconds)
        for comparison, strata in sorted(canary.items(), key=lambda kv: repr(kv[0])):
            findings += decide_comparison(comparison, strata, policy)
        return findings

    def tick(self, now: float) -> list[AlertEvent]:
        """One evaluation at ``now``: returns the events delivered (empty if delivery failed)."""
        findings = self.decide(now)
        state, events = evaluate(self.state, findings, now, self.config.lifecycle)
        self.findings = findings
        if events:
            try:
                self.notifier.send(events)
            except NotifyError as exc:
                self.delivery_failures += 1
                log.error("alert delivery failed, will retry at the next tick: %s", exc)
                return []
        self.state = state
        self.store.put_state(self.state_name, state.to_dict())
        # The exporter (another process) serves these as fleetmon_comparison_* gauges.
        self.store.put_state(FINDINGS_STATE_NAME, {"ts": now, "findings": findings_snapshot(findings)})
        return events

    def firing(self) -> list[Mapping[str, Any]]:
        """Records currently firing (for views and /metrics)."""
        return [{"alertname": r.alertname, "labels": r.labels, "evidence": r.evidence, "starts_at": r.starts_at}
                for r in self.state.records.values() if r.status == "firing"]


def findings_snapshot(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """JSON-able rows of what the last evaluation decided (for /metrics in any process)."""
    rows = []
    for f in findings:
        rows.append({"baseline": f.comparison.baseline_release, "candidate": f.comparison.candidate_release,
                     "arm": f.comparison.arm, "metric": f.kind, "slice": [list(p) for p in f.slice_key],
                     "effect": f.effect, "effect_lower": f.effect_low, "effect_upper": f.effect_high,
                     "e_value": f.e_value, "pairs": f.n_pairs, "b": f.b, "c": f.c, "firing": f.fires})
    return rows


def findings_by_slice(findings: Sequence[Finding], kind: str = "success_regression") -> list[Finding]:
    """The findings of one kind, in a stable order (for views and metrics)."""
    return sorted((f for f in findings if f.kind == kind),
                  key=lambda f: (f.comparison.arm, f.comparison.baseline_release, f.comparison.candidate_release,
                                 f.slice_key))
