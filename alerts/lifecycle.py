"""Alert lifecycle: ``evaluate(state, findings, now, config) -> (state, events)``.

Pure: time is passed in, state is a value that serialises to a JSON-able dict
(stored in Redis, so a restarted engine neither re-pages nor forgets).

Per fingerprint (stable hash of alert name + comparison + slice, plus the
metric for threshold alerts, which share a name):

- **pending**: a finding fires; it must keep firing at every evaluation for
  ``for_seconds`` (60 s; ``safety_for_seconds`` = 0 for safety kinds, which
  fire on first sight). A non-firing or missing finding cancels pending.
- **firing**: one ``firing`` event when it starts, then nothing while nothing
  changes, except a reminder every ``renotify_seconds`` (4 h) carrying fresh
  evidence. Labels are frozen at the first firing (Alertmanager identifies an
  alert by its label set), current values travel in the evidence.
- **resolved**, by whichever comes first:
  * *stale* — no new evidence (``n_pairs`` did not grow) for ``stale_seconds``
    (15 min): the candidate left traffic;
  * *recovered* — the fresh-epoch rule: at firing the alert records the
    cumulative counters (the epoch); at each evaluation the evidence
    accumulated SINCE the epoch (counters now − counters then) is turned into
    the same effect as the finding's (``decide.effect_since_epoch``); once
    that fresh evidence has >= ``recovery_min_pairs`` pairs (1,000), the
    alert resolves if its effect is no longer beyond the floor
    (``decide.still_beyond_floor``: below the floor; for safety kinds, <= 0 or
    <= the threshold), and otherwise a new epoch starts there (tumbling
    epochs), so after a fix recovery is judged on post-fix evidence within
    at most two epochs. The cumulative test cannot do this: it still carries
    the regression's history.

After a *recovered* resolution the cumulative finding usually still fires, so
the alert is re-armed only when the evidence since the resolution again shows
the effect beyond the floor over >= ``recovery_min_pairs`` pairs (mirror of the
recovery rule). If counters go backwards (store rebuilt) the epoch is re-based
at the current counters. Resolved records are forgotten after
``retention_seconds``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from alerts.decide import SAFETY_KINDS, Finding, effect_since_epoch, still_beyond_floor
from monitor.slices import WHOLE_FLEET, SliceKey

ALERT_NAMES = {
    "success_regression": "FleetmonSuccessRegression",
    "cost_regression": "FleetmonCostRegression",
    "latency_regression": "FleetmonLatencyRegression",
    "safety_regression": "FleetmonSafetyRegression",
    "safety_threshold": "FleetmonSafetyThreshold",
}
DEFAULT_RUNBOOK_BASE = "https://github.com/fleetmon/fleetmon/blob/main/docs/runbook.md"
#: How alert labels, evidence and fingerprints spell :data:`monitor.slices.WHOLE_FLEET`.
WHOLE_FLEET_LABEL = "all"


def slice_label(key: SliceKey) -> str:
    """A slice for humans and alert labels: ``"task_type=code,tenant=acme"``, or ``"all"`` for the whole fleet."""
    return ",".join(f"{dim}={value}" for dim, value in key) if key != WHOLE_FLEET else WHOLE_FLEET_LABEL


@dataclass(frozen=True)
class LifecycleConfig:
    for_seconds: float = 60.0
    safety_for_seconds: float = 0.0
    renotify_seconds: float = 4 * 3600.0
    stale_seconds: float = 900.0
    recovery_min_pairs: int = 1000
    retention_seconds: float = 24 * 3600.0
    runbook_base: str = DEFAULT_RUNBOOK_BASE


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


@dataclass(frozen=True)
class AlertState:
    records: Mapping[str, AlertRecord] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"version": 1, "records": {fp: asdict(r) for fp, r in sorted(self.records.items())}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AlertState:
        if d.get("version", 1) != 1:
            raise ValueError(f"AlertState version must be 1, got {d.get('version')!r}")
        return cls({fp: AlertRecord(**r) for fp, r in d.get("records", {}).items()})


def fingerprint(finding: Finding) -> str:
    """Stable across processes and restarts: sha256 of alert name, releases, arm, slice (and metric)."""
    c = finding.comparison
    parts = [ALERT_NAMES[finding.kind], c.baseline_release, c.candidate_release, c.arm,
             slice_label(finding.slice_key), str(finding.detail.get("metric", ""))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def _json_number(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def evidence_of(finding: Finding) -> dict[str, Any]:
    """The evidence contract: who, where, counts, effect with interval, test statistic, floor, α, test."""
    c = finding.comparison
    ev = {"baseline_release": c.baseline_release, "candidate_release": c.candidate_release, "arm": c.arm,
          "slice": slice_label(finding.slice_key), "kind": finding.kind, "n_pairs": finding.n_pairs,
          "b": finding.b, "c": finding.c, "effect": finding.effect, "effect_low": finding.effect_low,
          "effect_high": finding.effect_high, "e_value": finding.e_value, "floor": finding.floor,
          "alpha": finding.alpha, "test": finding.detail.get("test", ""), "severity": finding.severity,
          "significant": finding.significant, "beyond_floor": finding.beyond_floor}
    for key in ("cause", "cause_reason", "metric", "unit", "alpha_family", "family_size", "rejections"):
        if key in finding.detail:
            ev[key] = finding.detail[key]
    return {k: _json_number(v) for k, v in ev.items()}


def _labels(finding: Finding) -> dict[str, str]:
    c = finding.comparison
    labels = {"alertname": ALERT_NAMES[finding.kind], "severity": finding.severity,
              "baseline_release": c.baseline_release, "candidate_release": c.candidate_release,
              "arm": c.arm, "slice": slice_label(finding.slice_key)}
    for key in ("metric", "cause"):
        if key in finding.detail:
            labels[key] = str(finding.detail[key])
    return labels


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _annotations(rec: AlertRecord, config: LifecycleConfig, note: str = "") -> dict[str, str]:
    ev = rec.evidence
    what = ev["kind"].replace("_", " ")
    summary = (f"{what}: {ev['candidate_release']} vs {ev['baseline_release']} "
               f"({ev['arm']}, slice {ev['slice']})")
    description = (f"effect {_fmt(ev['effect'])} (positive = candidate worse), interval "
                   f"[{_fmt(ev['effect_low'])}, {_fmt(ev['effect_high'])}], floor {_fmt(ev['floor'])}; "
                   f"e-value {_fmt(ev['e_value'])} at alpha {_fmt(ev['alpha'])}; n_pairs={ev['n_pairs']} "
                   f"b={ev['b']} c={ev['c']}; test: {ev['test']}.")
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


def _fire(rec: AlertRecord, finding: Finding, now: float) -> AlertRecord:
    return replace(rec, status="firing", labels=_labels(finding), starts_at=now, ends_at=None,
                   last_notified=now, epoch=dict(finding.detail.get("counters", {})), resolve_reason=None)


def _since_epoch(finding: Finding, rec: AlertRecord) -> tuple[int, float]:
    return effect_since_epoch(finding, rec.epoch or {})


def evaluate(state: AlertState, findings: Sequence[Finding], now: float,
             config: LifecycleConfig = LifecycleConfig()) -> tuple[AlertState, list[AlertEvent]]:
    """Advance every alert to ``now`` given this evaluation's findings; return the new state and events.

    ``findings`` should contain every finding of the evaluation, firing or not
    (non-firing ones carry the evidence that resolves alerts). Events come out
    only on transitions (pending→firing, firing→resolved) and reminders.
    """
    records = dict(state.records)
    events: list[AlertEvent] = []
    seen: set[str] = set()
    for f in findings:
        fp = fingerprint(f)
        seen.add(fp)
        rec = records.get(fp)
        progressed = rec is None or f.n_pairs != rec.last_n
        if rec is not None:
            rec = replace(rec, evidence=evidence_of(f), last_n=f.n_pairs,
                          last_evidence_at=now if progressed else rec.last_evidence_at)
        if rec is None or rec.status == "resolved":
            if not f.fires:
                if rec is not None:
                    records[fp] = rec
                continue
            if rec is not None and rec.resolve_reason == "recovered":
                n_since, effect = _since_epoch(f, rec)
                if n_since < 0:
                    records[fp] = replace(rec, epoch=dict(f.detail.get("counters", {})))
                    continue
                if n_since < config.recovery_min_pairs or not still_beyond_floor(f, effect):
                    records[fp] = rec
                    continue
            rec = AlertRecord(fingerprint=fp, alertname=ALERT_NAMES[f.kind], status="pending",
                              labels=_labels(f), evidence=evidence_of(f), last_evidence_at=now,
                              last_n=f.n_pairs, pending_since=now)
        if rec.status == "pending":
            if not f.fires:
                del records[fp]
                continue
            if _since(rec.pending_since, now) >= _hold_seconds(f, config):
                rec = _fire(rec, f, now)
                events.append(_event(rec, now, config))
            records[fp] = rec
            continue
        # firing
        n_since, effect = _since_epoch(f, rec)
        if n_since < 0:
            rec = replace(rec, epoch=dict(f.detail.get("counters", {})))
        elif n_since >= config.recovery_min_pairs and not still_beyond_floor(f, effect):
            rec = replace(rec, status="resolved", ends_at=now, resolve_reason="recovered",
                          epoch=dict(f.detail.get("counters", {})))
            events.append(_event(rec, now, config, f"recovered: the latest test epoch ({n_since} pairs) shows "
                                                   f"effect {_fmt(effect)}, not beyond floor {_fmt(f.floor)}."))
        elif n_since >= config.recovery_min_pairs:
            # Still regressed over a full epoch: start a fresh epoch, so that
            # evidence gathered after a fix is judged on its own rather than
            # diluted by the regression's history (tumbling test epochs).
            rec = replace(rec, epoch=dict(f.detail.get("counters", {})))
            if _since(rec.last_notified, now) >= config.renotify_seconds:
                rec = replace(rec, last_notified=now)
                events.append(_event(rec, now, config))
        elif _since(rec.last_notified, now) >= config.renotify_seconds:
            rec = replace(rec, last_notified=now)
            events.append(_event(rec, now, config))
        records[fp] = rec
    for fp, rec in list(records.items()):
        if fp in seen:
            pass
        elif rec.status == "pending":  # hold interrupted: the finding is gone
            del records[fp]
            continue
        if rec.status == "firing" and now - rec.last_evidence_at >= config.stale_seconds:
            rec = replace(rec, status="resolved", ends_at=now, resolve_reason="stale")
            records[fp] = rec
            events.append(_event(rec, now, config, f"stale: no new evidence for {now - rec.last_evidence_at:.0f} s "
                                                   "(candidate left traffic)."))
        elif rec.status == "resolved" and _since(rec.ends_at, now) >= config.retention_seconds:
            del records[fp]
    return AlertState(records), events
