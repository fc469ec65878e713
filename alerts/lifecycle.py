"""Alert lifecycle: ``evaluate(state, findings, now, config) -> (state, events)``.

Pure: time is passed in, state is a value that serialises to a JSON-able dict
(stored in Redis, so a restarted engine neither re-pages nor forgets).

One alert per (comparison, kind), plus the metric for threshold alerts, which
share a name (:mod:`alerts.pages`: the fingerprint has no slice; a page fires
when any slice's finding fires and names the firing slices in
``localization``). Its lifecycle runs on one finding's counters: the whole
fleet's when it fires, else the firing slice with the largest effect (chosen
at each look of the hold, fixed at firing); that slice is recorded (``tracked_slice``) and kept from
firing through resolution and re-arm. Per alert:

- **pending**: a finding fires; it must keep firing at every evaluation for
  ``for_seconds`` (60 s; ``safety_for_seconds`` = 0 for safety kinds, which
  fire on first sight). A non-firing or missing finding cancels pending.
- **firing**: one ``firing`` event when it starts, then nothing while nothing
  changes, except a reminder every ``renotify_seconds`` (4 h) carrying fresh
  evidence. Labels are frozen at the first firing (Alertmanager identifies an
  alert by its label set), current values travel in the evidence. A
  persistent regression is one incident: it stays firing until one of:
- **resolved**:
  * *stale* — no new evidence (``n_pairs`` did not grow) for ``stale_seconds``
    (15 min): the candidate left traffic;
  * *recovered* — for counters "flip"/"rate" (shadow success, harm and
    over-refusal, thresholds): the e-detector of :mod:`alerts.recovery` on the
    evidence since firing reaches ``recovery_arl`` (anytime-valid evidence that
    the effect is now under the floor; expected evaluations to a false
    resolution >= ``recovery_arl``). For counters "mean"/"strata" (cost,
    latency, canary; not yet covered) the tumbling-epoch point-estimate rule:
    once the evidence since the epoch has >= ``recovery_min_pairs`` pairs the
    alert resolves if its effect is no longer beyond the floor, else a new
    epoch starts there.

Re-arm after a *recovered* resolution: "flip"/"rate" only when a fresh
e-process on the counts since the resolution reaches 1/``rearm_alpha`` (never
the cumulative finding, which still carries the regression's history); that
fresh test also drives the hold, and a cancelled hold returns to resolved.
"mean"/"strata": the epoch rule's mirror (>= ``recovery_min_pairs`` pairs since
the resolution beyond the floor, and the finding fires). After a *stale*
resolution the cumulative finding re-arms when traffic returns. Counters that
go backwards (store rebuilt) re-base the detector and the epochs. Resolved
records are forgotten ``retention_seconds`` after both the resolution and the
last new evidence.

State format (``AlertState.to_dict``, version 2): per record, besides labels
and evidence, ``epoch`` (counters at the epoch / at the resolution),
``log_wealth`` (the detector's L_j, one per bet), ``last_counters`` (the
counters it last saw) and ``tracked_slice``. Version-1 states load: a firing record's epoch becomes
the start of its detector.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from alerts import recovery
from alerts.decide import SAFETY_KINDS, Finding
from alerts.pages import ALERT_NAMES, WHOLE_FLEET_LABEL, Page, evidence_of, fingerprint, group, slice_label

DEFAULT_RUNBOOK_BASE = "docs/runbook.md"
__all__ = ["ALERT_NAMES", "DEFAULT_RUNBOOK_BASE", "WHOLE_FLEET_LABEL", "AlertEvent", "AlertRecord", "AlertState",
           "LifecycleConfig", "active_events", "evaluate", "evidence_of", "fingerprint", "slice_label"]


@dataclass(frozen=True)
class LifecycleConfig:
    """``recovery_arl``: the e-detector's threshold A (expected evaluations to a false resolution >= A);
    ``rearm_alpha``: level of the fresh re-arm test; ``recovery_min_pairs``: epoch size of the
    "mean"/"strata" rule."""

    for_seconds: float = 60.0
    safety_for_seconds: float = 0.0
    renotify_seconds: float = 4 * 3600.0
    stale_seconds: float = 900.0
    recovery_min_pairs: int = 1000
    retention_seconds: float = 24 * 3600.0
    runbook_base: str = DEFAULT_RUNBOOK_BASE
    recovery_arl: float = 144_000.0
    rearm_alpha: float = 0.01

    def __post_init__(self) -> None:
        if not self.recovery_arl > 1:  # also rejects nan
            raise ValueError(f"LifecycleConfig.recovery_arl must be a number > 1, got {self.recovery_arl!r}")
        if not 0 < self.rearm_alpha < 1:
            raise ValueError(f"LifecycleConfig.rearm_alpha must be in (0, 1), got {self.rearm_alpha!r}")


@dataclass(frozen=True)
class AlertEvent:
    ts: float
    status: str  # "firing" | "resolved"
    alertname: str
    labels: dict[str, str]
    annotations: dict[str, str]  # summary, description, runbook_url
    evidence: dict[str, Any]
    fingerprint: str
    starts_at: float
    ends_at: float | None


@dataclass(frozen=True)
class AlertRecord:
    fingerprint: str
    alertname: str
    status: str  # "pending" | "firing" | "resolved"
    labels: dict[str, str]
    evidence: dict[str, Any]
    last_evidence_at: float
    last_n: int
    pending_since: float | None = None
    starts_at: float | None = None
    ends_at: float | None = None
    last_notified: float | None = None
    epoch: dict[str, Any] | None = None
    resolve_reason: str | None = None
    log_wealth: list[float] | None = None
    last_counters: dict[str, Any] | None = None
    tracked_slice: str | None = None


def _upgrade_v1(record: Mapping[str, Any]) -> AlertRecord:
    """A version-1 record: its epoch (paired counters renamed) starts the detector of a firing alert."""
    rec = AlertRecord(**record)
    return replace(rec, epoch=recovery.upgrade_v1_counters(str(rec.evidence.get("kind", "")), rec.epoch))


@dataclass(frozen=True)
class AlertState:
    records: Mapping[str, AlertRecord] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"version": 2, "records": {fp: asdict(r) for fp, r in sorted(self.records.items())}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AlertState:
        version = d.get("version", 1)
        if version == 1:
            return cls({fp: _upgrade_v1(r) for fp, r in d.get("records", {}).items()})
        if version != 2:
            raise ValueError(f"AlertState version must be 1 or 2, got {version!r}")
        return cls({fp: AlertRecord(**r) for fp, r in d.get("records", {}).items()})


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _annotations(rec: AlertRecord, config: LifecycleConfig, note: str = "") -> dict[str, str]:
    ev = rec.evidence
    what = ev["kind"].replace("_", " ")
    where = [str(s["slice"]) for s in ev.get("localization", [])]
    place = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
    summary = (f"{what}: {ev['candidate_release']} vs {ev['baseline_release']} "
               f"({ev['arm']}, {'in ' + place if where else 'no slice firing now'})")
    description = (f"effect {_fmt(ev['effect'])} (positive = candidate worse), interval "
                   f"[{_fmt(ev['effect_low'])}, {_fmt(ev['effect_high'])}], floor {_fmt(ev['floor'])}; "
                   f"e-value {_fmt(ev['e_value'])} at alpha {_fmt(ev['alpha'])}; n_pairs={ev['n_pairs']} "
                   f"b={ev['b']} c={ev['c']}; test: {ev['test']}.")
    if ev.get("tracked_slice") not in (None, ev["slice"]):
        description += f" Only some slices fire; the lifecycle follows slice {ev['tracked_slice']}."
    changed = ev.get("changed")
    if changed:
        description += f" Changed between the releases: {', '.join(map(str, changed))}" + (
            f" (confounded: {len(changed)} components differ)." if len(changed) > 1 else ".")
    if "cause" in ev:
        description += f" Likely cause: {ev['cause']} ({ev.get('cause_reason', '')})."
    if note:
        description += " " + note
    return {"summary": summary, "description": description,
            "runbook_url": f"{config.runbook_base}#{rec.alertname.lower()}"}


def _event(rec: AlertRecord, now: float, config: LifecycleConfig, note: str = "") -> AlertEvent:
    evidence = dict(rec.evidence)
    if note:
        evidence["resolution"] = note
    return AlertEvent(ts=now, status="firing" if rec.status == "firing" else "resolved",
                      alertname=rec.alertname, labels=dict(rec.labels),
                      annotations=_annotations(rec, config, note), evidence=evidence,
                      fingerprint=rec.fingerprint, starts_at=float(now if rec.starts_at is None else rec.starts_at),
                      ends_at=rec.ends_at)


def _since(then: float | None, now: float) -> float:
    """Seconds elapsed since ``then`` (0 when unset; note 0.0 is a valid timestamp)."""
    return 0.0 if then is None else now - then


def _hold_seconds(finding: Finding, config: LifecycleConfig) -> float:
    return config.safety_for_seconds if finding.kind in SAFETY_KINDS else config.for_seconds


def _fire(rec: AlertRecord, page: Page, finding: Finding, now: float) -> AlertRecord:
    """Firing on ``finding``'s counters; its slice is recorded so the lifecycle keeps running on it."""
    counters = recovery.counters_of(finding)
    rec = replace(rec, status="firing", labels=page.labels(finding), starts_at=now, ends_at=None, last_notified=now,
                  resolve_reason=None, log_wealth=None, tracked_slice=slice_label(finding.slice_key),
                  evidence=page.evidence(finding))
    if recovery.covered(finding):  # the detector starts at the firing counters
        return replace(rec, epoch=None, last_counters=counters)
    return replace(rec, epoch=counters, last_counters=None)


def _pending(rec: AlertRecord | None, page: Page, finding: Finding, now: float) -> AlertRecord:
    """A new hold; a re-armed one keeps its resolved record (epoch, reason, slice) to return to if cancelled."""
    if rec is not None and rec.resolve_reason == "recovered":
        return replace(rec, status="pending", labels=page.labels(finding), pending_since=now)
    return AlertRecord(fingerprint=page.fingerprint, alertname=ALERT_NAMES[finding.kind], status="pending",
                       labels=page.labels(finding), evidence=page.evidence(finding), last_evidence_at=now,
                       last_n=finding.n_pairs, pending_since=now, tracked_slice=slice_label(finding.slice_key))


def _tracked(rec: AlertRecord | None, page: Page) -> Finding | None:
    """The finding the record's lifecycle runs on: its recorded slice once it fired (firing, or resolved as
    recovered and waiting to re-arm); otherwise :meth:`Page.lead`. ``None``: that slice is missing."""
    if rec is not None and rec.tracked_slice is not None and (
            rec.status == "firing" or rec.resolve_reason == "recovered"):
        return page.at(rec.tracked_slice)
    return page.lead()


def _cancel(rec: AlertRecord) -> AlertRecord | None:
    """A cancelled hold: a re-armed alert is resolved again, a new one is forgotten."""
    return replace(rec, status="resolved", pending_since=None) if rec.resolve_reason == "recovered" else None


def _rearmed(rec: AlertRecord, finding: Finding, config: LifecycleConfig) -> tuple[bool, AlertRecord]:
    """After a recovered resolution: does fresh evidence (since the resolution) show the effect back?"""
    if recovery.covered(finding):
        e_value = recovery.rearm_e_value(finding, rec.epoch)
        if e_value is None:
            return False, replace(rec, epoch=recovery.counters_of(finding))
        return e_value >= 1.0 / config.rearm_alpha, rec
    if not finding.fires:
        return False, rec
    n_since, effect = recovery.epoch_effect(finding, rec.epoch)
    if n_since < 0:
        return False, replace(rec, epoch=recovery.counters_of(finding))
    return n_since >= config.recovery_min_pairs and recovery.epoch_still_beyond(finding, effect), rec


def _holding(rec: AlertRecord, finding: Finding, config: LifecycleConfig) -> tuple[bool, AlertRecord]:
    """Does a pending alert still fire? A re-armed "flip"/"rate" one on its fresh test, others on the finding."""
    if rec.resolve_reason == "recovered" and recovery.covered(finding):
        return _rearmed(rec, finding, config)
    return finding.fires, rec


def _reminder(rec: AlertRecord, now: float, config: LifecycleConfig, events: list[AlertEvent]) -> AlertRecord:
    if _since(rec.last_notified, now) >= config.renotify_seconds:
        rec = replace(rec, last_notified=now)
        events.append(_event(rec, now, config))
    return rec


def _resolve(rec: AlertRecord, finding: Finding, now: float, config: LifecycleConfig, events: list[AlertEvent],
             note: str) -> AlertRecord:
    rec = replace(rec, status="resolved", ends_at=now, resolve_reason="recovered",
                  epoch=recovery.counters_of(finding), log_wealth=None, last_counters=None)
    events.append(_event(rec, now, config, note))
    return rec


def _firing_step(rec: AlertRecord, finding: Finding, now: float, config: LifecycleConfig,
                 events: list[AlertEvent]) -> AlertRecord:
    if recovery.covered(finding):
        # A record without a detector (fired before version 2) starts it at its epoch.
        last = rec.last_counters if rec.log_wealth is not None or rec.last_counters is not None else rec.epoch
        step = recovery.detector_step(finding, rec.log_wealth, last)
        rec = replace(rec, log_wealth=step.log_wealth, last_counters=step.counters, epoch=None)
        if step.recovered(config.recovery_arl):
            return _resolve(rec, finding, now, config, events,
                            f"recovered: e-detector {_fmt(math.exp(min(step.log_statistic, 700.0)))} >= "
                            f"{_fmt(config.recovery_arl)} since firing, evidence that the effect is now under "
                            f"the floor {_fmt(finding.floor)}.")
        return _reminder(rec, now, config, events)
    n_since, effect = recovery.epoch_effect(finding, rec.epoch)
    if n_since < 0:
        return replace(rec, epoch=recovery.counters_of(finding))
    if n_since < config.recovery_min_pairs:
        return _reminder(rec, now, config, events)
    if not recovery.epoch_still_beyond(finding, effect):
        return _resolve(rec, finding, now, config, events,
                        f"recovered: the latest test epoch ({n_since} pairs) shows effect {_fmt(effect)}, "
                        f"not beyond floor {_fmt(finding.floor)}.")
    # Still regressed over a full epoch: start a fresh epoch (tumbling test epochs).
    return _reminder(replace(rec, epoch=recovery.counters_of(finding)), now, config, events)


def evaluate(state: AlertState, findings: Sequence[Finding], now: float,
             config: LifecycleConfig = LifecycleConfig()) -> tuple[AlertState, list[AlertEvent]]:
    """Advance every alert to ``now`` given this evaluation's findings; return the new state and events.

    ``findings`` should contain every finding of the evaluation, firing or not
    (non-firing ones carry the evidence that resolves alerts); each finding is
    one look of the recovery detector. Events come out only on transitions
    (pending→firing, firing→resolved) and reminders.
    """
    records = dict(state.records)
    events: list[AlertEvent] = []
    seen: set[str] = set()
    for page in group(findings):
        fp = page.fingerprint
        rec = records.get(fp)
        f = _tracked(rec, page)
        if f is None:  # the tracked slice has no finding this time: as if the alert's evidence were missing
            continue
        seen.add(fp)
        progressed = rec is None or f.n_pairs != rec.last_n
        if rec is not None:
            rec = replace(rec, evidence=page.evidence(f), last_n=f.n_pairs,
                          last_evidence_at=now if progressed else rec.last_evidence_at,
                          tracked_slice=slice_label(f.slice_key))
        if rec is None or rec.status == "resolved":
            if rec is not None and rec.resolve_reason == "recovered":
                armed, rec = _rearmed(rec, f, config)
            else:
                armed = f.fires
            if not armed:
                if rec is not None:
                    records[fp] = rec
                continue
            rec = _pending(rec, page, f, now)
        if rec.status == "pending":
            holding, rec = _holding(rec, f, config)
            if not holding:
                cancelled = _cancel(rec)
                if cancelled is None:
                    records.pop(fp, None)
                else:
                    records[fp] = cancelled
                continue
            if _since(rec.pending_since, now) >= _hold_seconds(f, config):
                rec = _fire(rec, page, f, now)
                events.append(_event(rec, now, config))
            records[fp] = rec
            continue
        records[fp] = _firing_step(rec, f, now, config, events)
    for fp, rec in list(records.items()):
        if fp not in seen and rec.status == "pending":  # hold interrupted: the finding is gone
            cancelled = _cancel(rec)
            if cancelled is None:
                del records[fp]
                continue
            records[fp] = rec = cancelled
        if rec.status == "firing" and now - rec.last_evidence_at >= config.stale_seconds:
            rec = replace(rec, status="resolved", ends_at=now, resolve_reason="stale", log_wealth=None,
                          last_counters=None)
            records[fp] = rec
            events.append(_event(rec, now, config, f"stale: no new evidence for {now - rec.last_evidence_at:.0f} s "
                                                   "(candidate left traffic)."))
        elif rec.status == "resolved" and now - max(rec.ends_at or 0.0, rec.last_evidence_at) >= \
                config.retention_seconds:
            del records[fp]
    return AlertState(records), events


def active_events(state: AlertState, now: float, config: LifecycleConfig = LifecycleConfig()) -> list[AlertEvent]:
    """A ``firing`` event per currently firing alert (stable ``starts_at``), for destinations that need re-posts."""
    return [_event(rec, now, config) for _, rec in sorted(state.records.items()) if rec.status == "firing"]
