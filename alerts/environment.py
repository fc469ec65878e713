"""``FleetmonEnvironmentDrop``: the baseline's own success drop against its trailing level, as an e-detector (pure).

A fault in the environment (a tool down, a dependency slow, a data source
gone) hits the baseline too; the paired tests cancel it by design, so it gets
its own page, from the baseline arm alone. Per baseline release, once per
closed hour h (``observe``): the reference is q_h = p_T − floor, where p_T is
the baseline's success rate over the trailing window before h (7 days of hour
windows) — known before hour h, i.e. predictable — and the hour's traces
test H0_h: "this hour's success probability is >= q_h" with the reverse
bets of :func:`monitor.stats.betting.rate_log_factors`. A CUSUM e-detector
(Shin, Ramdas & Rinaldo 2022, as in :mod:`alerts.recovery`) adds them:
L_j <- max(L_j, 0) + log-factor_j(hour); the alert fires when
D = sum_j w_j exp(L_j) >= A.

Guarantee: if in every hour the baseline's success probability (given the
past) is at least its trailing rate minus the floor, the expected number of
hours to a false page is >= A (``arl_hours``; from
``alerts.environment_false_pages_per_year``: A = 8,760 hours / that rate), for
each baseline release. Nonasymptotic; no assumption on how the rate moves
between hours. Hours whose trailing window has fewer than
``min_trailing`` traces, or whose reference is not in (0, 1), are skipped.

Once firing, the alert resolves when D falls back under 1 (the hours since
the drop have cancelled its evidence): hysteresis between A and 1, so a drop
that persists is one incident.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alerts.baseline import HOUR, HOUR_SECONDS, baseline_cells, baseline_ids
from alerts.evidence import ArmCounts
from alerts.lifecycle import AlertEvent
from alerts.recovery import log_mixture
from monitor.slices import WHOLE_FLEET
from monitor.stats import betting
from monitor.store.base import Store

ALERTNAME = "FleetmonEnvironmentDrop"
TEST = ("CUSUM e-detector on the baseline's hourly success vs its trailing rate minus the floor "
        "(reverse betting e-processes; anytime-valid, ARL in hours)")


@dataclass
class Detector:
    """One baseline release: the detector's log wealth per bet and what it last saw."""

    log_wealth: list[float] = field(default_factory=lambda: [0.0] * len(betting.BET_WEIGHTS))
    firing: bool = False
    starts_at: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class EnvironmentWatch:
    """Every baseline release's detector; ``next_hour`` is the first hour window not yet observed."""

    arl_hours: float = 8760.0
    floor: float = 0.02
    min_trailing: int = 1000
    runbook_base: str = "docs/runbook.md"
    next_hour: float | None = None
    detectors: dict[str, Detector] = field(default_factory=dict)

    def observe(self, release: str, hour_start: float, current: ArmCounts, trailing: ArmCounts,
                now: float) -> AlertEvent | None:
        """Add one closed hour of ``release``'s baseline; returns the state change it caused, if any."""
        det = self.detectors.setdefault(release, Detector())
        if trailing.n < self.min_trailing or current.n == 0:
            return None
        reference = trailing.successes / trailing.n - self.floor
        if not 0.0 < reference < 1.0:
            return None
        factors = betting.rate_log_factors(current.successes, current.n, reference, "less")
        det.log_wealth = [float(v) for v in np.maximum(np.asarray(det.log_wealth), 0.0) + factors]
        log_d = log_mixture(det.log_wealth)
        det.evidence = {"kind": "environment_drop", "release": release, "hour_start": hour_start,
                        "current_rate": current.successes / current.n, "current_traces": current.n,
                        "trailing_rate": trailing.successes / trailing.n, "trailing_traces": trailing.n,
                        "reference": reference, "floor": self.floor, "statistic": _finite(math.exp(min(log_d, 700))),
                        "threshold": self.arl_hours, "test": TEST}
        if not det.firing and log_d >= math.log(self.arl_hours):
            det.firing, det.starts_at = True, now
            return self._event(release, det, now, "firing")
        if det.firing and log_d < 0.0:
            det.firing = False
            event = self._event(release, det, now, "resolved")
            det.starts_at = None
            return event
        return None

    def active(self, now: float) -> list[AlertEvent]:
        """A firing event per firing detector (for destinations that re-post)."""
        return [self._event(r, d, now, "firing") for r, d in sorted(self.detectors.items()) if d.firing]

    def _event(self, release: str, det: Detector, now: float, status: str) -> AlertEvent:
        ev = det.evidence
        summary = (f"environment drop: baseline {release} success {ev['current_rate']:.3f} in the last hour vs "
                   f"{ev['trailing_rate']:.3f} trailing")
        description = (f"the baseline's own success fell under its trailing rate minus the floor ({ev['floor']:g}); "
                       f"e-detector {ev['statistic']:.4g} (threshold {ev['threshold']:g}); test: {TEST}. "
                       "Paired comparisons cancel a fault that hits both arms: look at tools, dependencies, data.")
        if status == "resolved":
            description += " Resolved: the hours since have cancelled the drop's evidence."
        fp = hashlib.sha256(f"{ALERTNAME}\x1f{release}".encode()).hexdigest()[:16]
        return AlertEvent(ts=now, status=status, alertname=ALERTNAME,
                          labels={"alertname": ALERTNAME, "severity": "critical", "baseline_release": release,
                                  "cause": "environment"},
                          annotations={"summary": summary, "description": description,
                                       "runbook_url": f"{self.runbook_base}#{ALERTNAME.lower()}"},
                          evidence=dict(ev), fingerprint=fp,
                          starts_at=float(now if det.starts_at is None else det.starts_at),
                          ends_at=None if status == "firing" else now)

    def to_dict(self) -> dict[str, Any]:
        return {"next_hour": self.next_hour,
                "detectors": {r: {"log_wealth": d.log_wealth, "firing": d.firing, "starts_at": d.starts_at,
                                  "evidence": d.evidence} for r, d in self.detectors.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], **config: Any) -> EnvironmentWatch:
        watch = cls(**config, next_hour=d.get("next_hour"))
        size = len(betting.BET_WEIGHTS)
        for release, raw in d.get("detectors", {}).items():
            wealth = list(raw.get("log_wealth", []))
            watch.detectors[release] = Detector(wealth if len(wealth) == size else [0.0] * size,
                                                bool(raw.get("firing")), raw.get("starts_at"),
                                                dict(raw.get("evidence", {})))
        return watch


def update(watch: EnvironmentWatch, store: Store, releases: set[str], now: float, trailing_seconds: float,
           grace_seconds: float = 120.0, max_catch_up_hours: int = 48) -> list[AlertEvent]:
    """Observe every hour window closed since the last call (the latest one only, the first time)."""
    if HOUR not in {r.name for r in store.resolutions}:
        return []
    last = math.floor((now - grace_seconds) / HOUR_SECONDS) * HOUR_SECONDS - HOUR_SECONDS
    first = last if watch.next_hour is None else max(watch.next_hour, last - (max_catch_up_hours - 1) * HOUR_SECONDS)
    events: list[AlertEvent] = []
    hours = [first + i * HOUR_SECONDS for i in range(int((last - first) // HOUR_SECONDS) + 1)] if last >= first else []
    if hours and releases:
        ids = baseline_ids(store, since=hours[0] - trailing_seconds)
        for hour in hours:
            current = baseline_cells(store, releases, ids, hour, hour + HOUR_SECONDS)
            trailing = baseline_cells(store, releases, ids, hour - trailing_seconds, hour)
            for release in sorted(releases):
                event = watch.observe(release, hour, current.get(release, {}).get(WHOLE_FLEET, ArmCounts()),
                                      trailing.get(release, {}).get(WHOLE_FLEET, ArmCounts()), now)
                if event is not None:
                    events.append(event)
    if hours:
        watch.next_hour = hours[-1] + HOUR_SECONDS
    return events


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 1e300
