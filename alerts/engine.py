"""The alert engine: gathers evidence from a store, decides, advances the lifecycle, notifies.

``AlertEngine.tick(now)`` is one evaluation; whoever owns the clock (the
``fleetmon alerts`` loop, ``fleetmon run``, a test) calls it. It never opens
a connection itself: the store and the notifier are passed in.

Evidence:

* **shadow** comparisons come from the typed paired counts the workers keep
  (:func:`monitor.pairing.read_paired_evidence`), cumulative since the first pair;
* **canary** comparisons come from the canary ledger (:mod:`alerts.canary`):
  cumulative matched pairs made in closed time blocks within each task type
  from the 1-minute windows, saved as engine state ``canary`` (it survives
  restarts and ``fleetmon rebuild``), tested like shadow pairs.

The **baseline's own drop** (the environment label of shadow findings) is
read from the hour windows: per shadow baseline release and comparison
slice, the baseline arm's success over the hour windows overlapping the last
``baseline_current_seconds`` against the ``baseline_trailing_seconds`` of
hour windows before them (:func:`alerts.decide.trailing_drop`). A store
without ``1h`` windows gives no label. The trailing part is read once per hour.

Delivery is per destination and at-least-once: each destination
(:func:`alerts.notifiers.destinations`) has its own outbox of undelivered
events, saved with the lifecycle state; a failed destination keeps its
events and gets them (before newer ones) at the next tick, the others are
not sent them again. Failures are logged and counted per destination
(``delivery_failures``). After the changes every destination's ``refresh``
gets the alerts still firing (Alertmanager re-posts them). A restarted engine
loads state and outboxes and neither re-pages nor forgets.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from alerts import comparison_state, environment, identity
from alerts.baseline import BASELINE_ARM, BaselineDrops, arm_counts
from alerts.canary import CanaryLedger
from alerts.decide import Finding, Policy, decide_comparison
from alerts.evidence import ArmCounts, CanaryStrata, Comparison
from alerts.lifecycle import AlertEvent, AlertState, LifecycleConfig, active_events, evaluate, fingerprint
from alerts.notifiers import Notifier, NotifyError, destinations
from alerts.saved_findings import FINDINGS_STATE_NAME
from monitor.groupings import STRATUM_DIMENSION, comparison_feeds
from monitor.pairing import PairedCounts, read_paired_evidence
from monitor.schema import COMPARISON_ARMS
from monitor.slices import WHOLE_FLEET, SliceKey, parse_slice_id
from monitor.store.base import Store

log = logging.getLogger("fleetmon.alerts")

STATE_NAME = "alerts"
OUTBOX_SUFFIX = ".outbox"
#: Undelivered events kept per destination; older ones are dropped (and logged) beyond it.
OUTBOX_LIMIT = 1000
CANARY_STATE_NAME = "canary"
ENVIRONMENT_STATE_NAME = "environment"
SHADOW_ARM, CANARY_ARM = COMPARISON_ARMS


@dataclass(frozen=True)
class EngineConfig:
    policy: Policy = field(default_factory=Policy)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    #: How far back a new canary ledger starts (and the most it catches up after downtime).
    canary_lookback_seconds: float = 6 * 3600.0
    canary_block_seconds: float = 600.0
    canary_grace_seconds: float = 120.0
    #: FleetmonEnvironmentDrop: mean hours to a false page per baseline release (alerts.environment).
    environment_arl_hours: float = 8760.0
    active_seconds: float = 2 * 3600.0
    baseline_current_seconds: float = 3600.0
    baseline_trailing_seconds: float = 7 * 86400.0
    #: After the store lost its state: how long no alert changes while the workers rebuild it from Kafka
    #: (``alerts.restore_hold`` in fleetmon.toml, wired by :func:`alerts.wiring.engine_config`).
    restore_hold_seconds: float = 300.0


def shadow_evidence(store: Store) -> dict[Comparison, dict[SliceKey, PairedCounts]]:
    """Paired counts per comparison and slice."""
    evidence: dict[Comparison, dict[SliceKey, PairedCounts]] = {}
    for found in read_paired_evidence(store.paired_evidence()):
        comparison = Comparison(found.baseline_release, found.candidate_release, SHADOW_ARM)
        evidence.setdefault(comparison, {})[found.slice_key] = found.counts
    return evidence


def canary_cells(store: Store, start: float, end: float) -> dict[Comparison, dict[SliceKey, CanaryStrata]]:
    """Canary-vs-baseline counts per comparison slice and task type over the 1-minute windows of [start, end).

    One comparison per release seen with arm ``canary``, against the baseline
    release with the most traffic in the same windows; one entry per :func:`monitor.slices.comparison_slices`, split by
    ``task_type``. Each comparison slice is read from the one grouping that
    holds it split by task type (:func:`monitor.groupings.comparison_feeds`:
    the whole fleet and ``task_type`` from ``release × arm × task_type``, ``d``
    from ``release × arm × task_type × d``), so every trace counts once per cell.
    """
    ids = [sid for sid in store.active_slices(since=start)]
    if not any(f"arm={CANARY_ARM}" in sid for sid in ids):  # cheap test before parsing every id
        return {}
    keys = {sid: parse_slice_id(sid) for sid in ids}
    parsed = {sid: dict(key) for sid, key in keys.items()}
    canaries = {d.get("release") for d in parsed.values() if d.get("arm") == CANARY_ARM}
    if not canaries:
        return {}
    stratum = STRATUM_DIMENSION if any(STRATUM_DIMENSION in d for d in parsed.values()) else None
    feeds = {sid: comparison_feeds(key, stratum) for sid, key in keys.items()}
    wanted = sorted(sid for sid in ids if feeds[sid] and parsed[sid].get("arm") in (CANARY_ARM, BASELINE_ARM))
    aggregates = store.window_aggregates("1m", start, end, wanted)
    baseline_volume: dict[str, int] = {}
    for sid in wanted:  # the rows of the whole fleet's grouping: each trace once
        dims = parsed[sid]
        if dims.get("arm") == BASELINE_ARM and any(key == WHOLE_FLEET for key, _ in feeds[sid]):
            volume_of = dims.get("release", "")
            baseline_volume[volume_of] = baseline_volume.get(volume_of, 0) + aggregates[sid].traces
    if not any(baseline_volume.values()):
        return {}
    baseline_release = max(sorted(baseline_volume), key=baseline_volume.__getitem__)
    out: dict[Comparison, dict[SliceKey, CanaryStrata]] = {}
    for candidate in sorted(c for c in canaries if c):
        cells: dict[SliceKey, dict[str, list[ArmCounts]]] = {}
        for sid in wanted:
            dims = parsed[sid]
            arm, release = dims.get("arm"), dims.get("release")
            if not feeds[sid] or not ((arm == CANARY_ARM and release == candidate)
                                      or (arm == BASELINE_ARM and release == baseline_release)):
                continue
            counts = arm_counts(aggregates[sid])
            if counts.n == 0:
                continue
            for key, level in feeds[sid]:
                pair = cells.setdefault(key, {}).setdefault(level, [ArmCounts(), ArmCounts()])
                side = 1 if arm == CANARY_ARM else 0
                pair[side] = pair[side].merge(counts)
        comparison = Comparison(baseline_release, candidate, CANARY_ARM)
        out[comparison] = {key: CanaryStrata({s: (b, c) for s, (b, c) in strata.items()})
                           for key, strata in cells.items()}
    return out


def update_canary_ledger(store: Store, ledger: CanaryLedger, now: float, config: EngineConfig) -> bool:
    """Fold every closed block not yet in ``ledger`` (see :mod:`alerts.canary`); True if it changed."""
    minute = {r.name: r for r in store.resolutions}.get("1m")
    if minute is None:
        return False
    missed = ledger.missed_blocks
    before = ledger.next_block
    oldest = now - minute.retention_seconds + minute.size_seconds
    due = ledger.due_blocks(now, config.canary_grace_seconds, max(now - config.canary_lookback_seconds, oldest),
                            oldest=oldest)
    if ledger.missed_blocks > missed:
        log.error("canary ledger: %d block(s) of %.0f s could not be read any more (older than the minute "
                  "windows' retention) and are not in the canary evidence", ledger.missed_blocks - missed,
                  ledger.block_seconds)
    for start in due:
        ledger.add_block(start, canary_cells(store, start, start + ledger.block_seconds))
    return bool(due) or ledger.next_block != before or ledger.missed_blocks != missed


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
        self.destinations = destinations(notifier)
        self.names = _unique_names([getattr(d, "name", type(d).__name__) for d in self.destinations])
        saved_outbox = store.get_state(state_name + OUTBOX_SUFFIX) or {}
        self.outbox: dict[str, list[AlertEvent]] = {
            name: [AlertEvent(**e) for e in saved_outbox.get(name, [])] for name in self.names}
        #: Failed deliveries (send or refresh) per destination name since start.
        self.delivery_failures: Counter[str] = Counter()
        saved_ledger = store.get_state(CANARY_STATE_NAME)
        block = self.config.canary_block_seconds
        self.canary = (CanaryLedger.from_dict(saved_ledger, block) if saved_ledger
                       else CanaryLedger(block_seconds=block))
        self.environment = environment.EnvironmentWatch.from_dict(
            store.get_state(ENVIRONMENT_STATE_NAME) or {}, arl_hours=self.config.environment_arl_hours,
            floor=self.config.policy.floors.success_points, runbook_base=self.config.lifecycle.runbook_base)
        self.baseline_drops = BaselineDrops(self.config.baseline_current_seconds,
                                            self.config.baseline_trailing_seconds)
        #: Times this engine saw the store lose its state (see _holding_after_lost_state).
        self.state_losses = 0
        self._generation = store.generation()
        self._hold_until = float("-inf")

    def decide(self, now: float) -> list[Finding]:
        policy = self.config.policy
        findings: list[Finding] = []
        shadow = shadow_evidence(self.store)
        drops = self.baseline_drops(self.store, {c.baseline_release for c in shadow}, now)
        for comparison, evidence in sorted(shadow.items(), key=lambda kv: repr(kv[0])):
            findings += decide_comparison(comparison, evidence, policy,
                                          baseline_drops=drops.get(comparison.baseline_release))
        if update_canary_ledger(self.store, self.canary, now, self.config):
            self.store.put_state(CANARY_STATE_NAME, self.canary.to_dict())
        for comparison, paired in sorted(self.canary.evidence().items(), key=lambda kv: repr(kv[0])):
            findings += decide_comparison(comparison, paired, policy)
        return identity.annotate(findings, self.store.release_identities())  # what changed: on every page

    def tick(self, now: float) -> list[AlertEvent]:
        """One evaluation at ``now``: returns the state changes it produced (delivered or queued)."""
        if self._holding_after_lost_state(now):  # firing alerts are re-posted; nothing pages or resolves
            self.store.put_state(self.state_name, self.state.to_dict())
            self.deliver([], now)
            return []
        findings = self.decide(now)
        state, events = evaluate(self.state, findings, now, self.config.lifecycle)
        self.findings = findings
        self.state = state
        self.store.put_state(self.state_name, state.to_dict())
        events += self.watch_environment(now)
        self.deliver(events, now)
        # The exporter (another process) serves these as fleetmon_comparison_* gauges.
        self.store.put_state(FINDINGS_STATE_NAME, {"ts": now, "findings": findings_snapshot(findings, state)})
        return events

    def watch_environment(self, now: float) -> list[AlertEvent]:
        """FleetmonEnvironmentDrop for every baseline release of a comparison (alerts.environment)."""
        releases = {f.comparison.baseline_release for f in self.findings}
        before = self.environment.next_hour
        events = environment.update(self.environment, self.store, releases, now,
                                    self.config.baseline_trailing_seconds)
        if events or self.environment.next_hour != before:
            self.store.put_state(ENVIRONMENT_STATE_NAME, self.environment.to_dict())
        return events

    def deliver(self, events: Sequence[AlertEvent], now: float) -> None:
        """Each destination: its queued events and ``events`` (once), then ``refresh`` with the firing alerts."""
        active = active_events(self.state, now, self.config.lifecycle) + self.environment.active(now)
        changed = False
        for name, destination in zip(self.names, self.destinations, strict=True):
            queue = self.outbox[name] + list(events)
            try:
                if queue:
                    destination.send(queue)
                sent, queue = {e.fingerprint for e in queue}, []
                refresh = getattr(destination, "refresh", None)  # a send-only object wants changes only
                if refresh is not None:
                    refresh([e for e in active if e.fingerprint not in sent], now)
            except NotifyError as exc:
                self.delivery_failures[name] += 1
                log.error("alert delivery to %s failed (%d event(s) queued, retried at the next tick): %s",
                          name, len(queue), exc)
                if len(queue) > OUTBOX_LIMIT:
                    log.error("alert outbox of %s over %d events: dropping the %d oldest", name, OUTBOX_LIMIT,
                              len(queue) - OUTBOX_LIMIT)
                    queue = queue[-OUTBOX_LIMIT:]
            changed = changed or queue != self.outbox[name]
            self.outbox[name] = queue
        if changed:
            self.store.put_state(self.state_name + OUTBOX_SUFFIX,
                                 {name: [asdict(e) for e in queue] for name, queue in self.outbox.items()})

    def _holding_after_lost_state(self, now: float) -> bool:
        """Notice a store that lost its state (its generation changed, or a worker restored it from Kafka):
        keep this engine's lifecycle, outboxes, canary ledger and environment detectors, write them back,
        count and log it, and hold alert changes for ``restore_hold_seconds`` while the workers rebuild the
        evidence. True while holding (docs/operating.md, "Lost Redis state")."""
        seen = self.store.generation()
        known, self._generation = self._generation, seen
        if known.id is not None and (seen.id != known.id or seen.restores > known.restores):
            self.state_losses += 1
            self._hold_until = now + self.config.restore_hold_seconds
            firing = sum(1 for r in self.state.records.values() if r.status == "firing")
            log.error("the store lost state (generation %s -> %s, restores %d -> %d): keeping and re-writing this "
                      "engine's %d alert record(s), %d firing; no alert changes for %.0f s while the workers "
                      "rebuild the evidence from Kafka", known.id, seen.id or "none", known.restores, seen.restores,
                      len(self.state.records), firing, self.config.restore_hold_seconds)
            self.store.put_state(self.state_name + OUTBOX_SUFFIX,
                                 {name: [asdict(e) for e in queue] for name, queue in self.outbox.items()})
            self.store.put_state(CANARY_STATE_NAME, self.canary.to_dict())
            self.store.put_state(ENVIRONMENT_STATE_NAME, self.environment.to_dict())
        return now < self._hold_until

    def firing(self) -> list[Mapping[str, Any]]:
        """Records currently firing (for views and /metrics)."""
        return [{"alertname": r.alertname, "labels": r.labels, "evidence": r.evidence, "starts_at": r.starts_at}
                for r in self.state.records.values() if r.status == "firing"]


def _unique_names(names: Sequence[str]) -> list[str]:
    """``names`` with repeats suffixed (``webhook``, ``webhook-2``), so each destination has its own outbox."""
    seen: Counter[str] = Counter()
    out = []
    for name in names:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def findings_snapshot(findings: Sequence[Finding], state: AlertState | None = None) -> list[dict[str, Any]]:
    """JSON-able rows of what the last evaluation decided (for /metrics in any process); ``state`` (the
    lifecycle after it) gives each row its ``state`` (:mod:`alerts.comparison_state`)."""
    rows = []
    status = comparison_state.statuses(state.records if state is not None else {})
    for f in findings:
        rows.append({"baseline": f.comparison.baseline_release, "candidate": f.comparison.candidate_release,
                     "arm": f.comparison.arm, "metric": f.kind, "slice": [list(p) for p in f.slice_key],
                     "effect": f.effect, "effect_lower": f.effect_low, "effect_upper": f.effect_high,
                     "e_value": f.e_value, "pairs": f.n_pairs, "b": f.b, "c": f.c, "firing": f.fires,
                     "state": comparison_state.state_of(f, status.get(fingerprint(f))),
                     "pairs_needed": comparison_state.pairs_needed(f)})
    return rows


def findings_by_slice(findings: Sequence[Finding], kind: str = "success_regression") -> list[Finding]:
    """The findings of one kind, in a stable order (for views and metrics)."""
    return sorted((f for f in findings if f.kind == kind),
                  key=lambda f: (f.comparison.arm, f.comparison.baseline_release, f.comparison.candidate_release,
                                 f.slice_key))


def from_engine(engine: AlertEngine) -> Callable[[], list[dict[str, Any]]]:
    """Finding snapshots of ``engine``'s last evaluation (same process), read at each call."""
    return lambda: findings_snapshot(engine.findings, engine.state)
