"""One page per regression: a comparison's findings of one kind grouped into one alert, with its localization.

:func:`group` turns an evaluation's findings into :class:`Page` s, one per
(comparison, kind, and metric for thresholds): the family whose slices share
the kind's α by e-BH (:mod:`alerts.fdr`). Guarantees:

* the fingerprint (:func:`fingerprint`) has no slice: a regression in any
  number of slices is one alert, one lifecycle record;
* a page fires when any slice's finding fires; its ``localization`` lists the
  firing slices, which are the e-BH selection, so they carry the same error
  control as the decision;
* the evidence is the whole-fleet finding's (``slice`` = ``"all"``) plus
  ``localization`` and ``tracked_slice`` (the slice whose counters drive the
  lifecycle, chosen by :meth:`Page.lead`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from alerts.decide import Finding
from monitor.slices import WHOLE_FLEET, SliceKey

ALERT_NAMES = {
    "success_regression": "FleetmonSuccessRegression",
    "cost_regression": "FleetmonCostRegression",
    "latency_regression": "FleetmonLatencyRegression",
    "safety_regression": "FleetmonSafetyRegression",
    "safety_threshold": "FleetmonSafetyThreshold",
    "over_refusal_regression": "FleetmonOverRefusalRegression",
}
#: How alert labels, evidence and fingerprints spell :data:`monitor.slices.WHOLE_FLEET`.
WHOLE_FLEET_LABEL = "all"
_SEVERITY_RANK = {"warning": 1, "critical": 2}


def slice_label(key: SliceKey) -> str:
    """A slice for humans and alert labels: ``"task_type=code,tenant=acme"``, or ``"all"`` for the whole fleet."""
    return ",".join(f"{dim}={value}" for dim, value in key) if key != WHOLE_FLEET else WHOLE_FLEET_LABEL


def fingerprint(finding: Finding) -> str:
    """Stable across processes and restarts: sha256 of alert name, releases, arm (and metric); no slice."""
    c = finding.comparison
    parts = [ALERT_NAMES[finding.kind], c.baseline_release, c.candidate_release, c.arm,
             str(finding.detail.get("metric", ""))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def _json_number(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def evidence_of(finding: Finding) -> dict[str, Any]:
    """One finding's evidence: who, where, counts, effect with interval, test statistic, floor, α, test."""
    c = finding.comparison
    ev = {"baseline_release": c.baseline_release, "candidate_release": c.candidate_release, "arm": c.arm,
          "slice": slice_label(finding.slice_key), "kind": finding.kind, "n_pairs": finding.n_pairs,
          "b": finding.b, "c": finding.c, "effect": finding.effect, "effect_low": finding.effect_low,
          "effect_high": finding.effect_high, "e_value": finding.e_value, "floor": finding.floor,
          "alpha": finding.alpha, "test": finding.detail.get("test", ""), "severity": finding.severity,
          "significant": finding.significant, "beyond_floor": finding.beyond_floor}
    for key in ("cause", "cause_reason", "metric", "unit", "alpha_family", "family_size", "rejections",
                "baseline_identity", "candidate_identity", "changed", "identity_changes"):  # alerts.identity
        if key in finding.detail:
            ev[key] = finding.detail[key]
    return {k: _json_number(v) for k, v in ev.items()}


@dataclass(frozen=True)
class Page:
    """A family's findings (one per slice) for one evaluation; ``fingerprint`` is shared by all of them."""

    fingerprint: str
    findings: tuple[Finding, ...]

    @property
    def fires(self) -> bool:
        return any(f.fires for f in self.findings)

    @property
    def whole(self) -> Finding | None:
        return next((f for f in self.findings if f.slice_key == WHOLE_FLEET), None)

    def at(self, label: str | None) -> Finding | None:
        """The finding of the slice spelled ``label`` (``None``: the whole fleet), if this evaluation has one."""
        wanted = WHOLE_FLEET_LABEL if label is None else label
        return next((f for f in self.findings if slice_label(f.slice_key) == wanted), None)

    def lead(self) -> Finding:
        """The finding a new alert's lifecycle runs on: the whole fleet when it fires, else the firing slice
        with the largest effect (ties: the first in slice order), else the whole fleet (or the first slice)."""
        whole = self.whole
        if whole is not None and whole.fires:
            return whole
        firing = sorted((f for f in self.findings if f.fires), key=lambda f: (-f.effect, f.slice_key))
        return firing[0] if firing else (whole or self.findings[0])

    def localization(self) -> list[dict[str, Any]]:
        """The firing slices (the e-BH selection), by effect descending: slice, effect, interval, n_pairs."""
        firing = sorted((f for f in self.findings if f.fires), key=lambda f: (-f.effect, f.slice_key))
        return [{k: _json_number(v) for k, v in (("slice", slice_label(f.slice_key)), ("effect", f.effect),
                                                  ("effect_low", f.effect_low), ("effect_high", f.effect_high),
                                                  ("n_pairs", f.n_pairs))}
                for f in firing]

    def evidence(self, tracked: Finding) -> dict[str, Any]:
        """The whole-fleet evidence (``tracked``'s when there is no whole-fleet finding), localization and
        the tracked slice."""
        ev = evidence_of(self.whole or tracked)
        ev["localization"] = self.localization()
        ev["tracked_slice"] = slice_label(tracked.slice_key)
        return ev

    def labels(self, tracked: Finding) -> dict[str, str]:
        """Alert labels without a slice; severity is the most severe of the firing findings (else ``tracked``'s)."""
        c = tracked.comparison
        severities = [f.severity for f in self.findings if f.fires] or [tracked.severity]
        labels = {"alertname": ALERT_NAMES[tracked.kind],
                  "severity": max(severities, key=lambda s: _SEVERITY_RANK.get(s, 0)),
                  "baseline_release": c.baseline_release, "candidate_release": c.candidate_release, "arm": c.arm}
        for key in ("metric", "cause"):
            if key in tracked.detail:
                labels[key] = str(tracked.detail[key])
        return labels


def group(findings: Sequence[Finding]) -> list[Page]:
    """One :class:`Page` per fingerprint, in first-seen order; each page's findings keep their order."""
    families: dict[str, list[Finding]] = {}
    for f in findings:
        families.setdefault(fingerprint(f), []).append(f)
    return [Page(fp, tuple(members)) for fp, members in families.items()]
