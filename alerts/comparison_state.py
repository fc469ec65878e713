"""Where each comparison stands — warming, no evidence, pending, firing, resolved — and the pairs it needs (pure).

Per finding (one comparison, kind and slice), :func:`state_of` picks exactly
one of :data:`STATES`, first match wins, from the finding and the lifecycle
status of its alert (one alert per comparison and kind, :mod:`alerts.pages`):

* ``firing``: the alert is firing (its hold passed, not yet resolved) and this
  row is the whole comparison or a slice whose finding fires now;
* ``pending``: the alert is in its hold (``for_seconds``) and this row is the
  whole comparison or a slice whose finding fires now;
* ``resolved``: the alert resolved (recovered or stale) and its record is still
  kept (``retention_seconds``, 24 h by default) — every row of the alert;
* ``warming``: no alert for this row, and the evidence is too thin to detect a
  regression at the floor yet: no pairs, the test is not eligible (a cost or
  latency test whose cap does not match the workers'), or fewer pairs than
  :func:`pairs_needed`;
* ``no_evidence``: enough pairs, and no evidence of a regression beyond the floor.

:func:`pairs_needed` is a fixed-horizon planning estimate for the success
regression (shadow and canary pairs alike): the pairs a one-sided test of
H0: drop <= floor at level α' needs for power :data:`PLANNING_POWER` when the
true drop is twice the floor (one floor beyond the null)::

    n = ceil((z_{1-α'} + z_{power})² · ψ / floor²),   ψ = (b + c + 1) / (n_pairs + 2)

ψ is the discordance rate (pairs where exactly one side succeeded), smoothed
so that it is positive and 1/2 before any pair; α' is the family's α share
(``alpha_family``, else the finding's α). The anytime-valid test the engine
runs pays for looking at every evaluation: it typically needs more pairs than
this (the validity bench reports the ratio), so read the estimate as a lower
bound. Other kinds have no estimate (None): their floors are relative to a
variance the snapshot does not carry, or zero (safety).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

from alerts.policy import Finding
from monitor.slices import WHOLE_FLEET

STATES = ("warming", "no_evidence", "pending", "firing", "resolved")
PLANNING_POWER = 0.8
_PLANNED_KINDS = ("success_regression",)


def pairs_needed(finding: Finding, power: float = PLANNING_POWER) -> int | None:
    """The planning estimate of the module docstring; None for kinds without one or a floor <= 0."""
    if finding.kind not in _PLANNED_KINDS or not finding.floor > 0:
        return None
    alpha = float(finding.detail.get("alpha_family", finding.alpha))
    if not 0 < alpha < 1:
        return None
    normal = NormalDist()
    z = normal.inv_cdf(1.0 - alpha) + normal.inv_cdf(power)
    psi = (finding.b + finding.c + 1) / (finding.n_pairs + 2)
    return math.ceil(z * z * psi / finding.floor ** 2)


def state_of(finding: Finding, alert_status: str | None) -> str:
    """The row's state (see the module docstring); ``alert_status`` is its alert's lifecycle status or None."""
    carries = finding.slice_key == WHOLE_FLEET or finding.fires
    if alert_status == "firing" and carries:
        return "firing"
    if alert_status == "pending" and carries:
        return "pending"
    if alert_status == "resolved":
        return "resolved"
    needed = pairs_needed(finding)
    if finding.n_pairs == 0 or not finding.detail.get("eligible", True) or (
            needed is not None and finding.n_pairs < needed):
        return "warming"
    return "no_evidence"


def statuses(records: Mapping[str, object]) -> dict[str, str]:
    """Fingerprint → lifecycle status of an :class:`alerts.lifecycle.AlertState`'s records."""
    return {fp: str(getattr(rec, "status", "")) for fp, rec in records.items()}
