"""Recovery and re-arm statistics for a firing alert: an e-detector for "fixed", a fresh e-process for "back".

Covered kinds are those whose finding carries ``detail["counters_kind"]``
``"flip"`` (cumulative ``{"n", "worse", "better"}``: paired net flip, X = +1
when the candidate is worse, -1 when better), ``"rate"`` (``{"n", "x"}``: a
binary rate) or ``"capped_mean"`` (the capped sums of
:mod:`monitor.stats.capped_mean`: the relative increase of capped cost or
latency means, whose empirical-Bernstein factors also multiply over pairs),
with the effect on that scale and ``finding.floor`` its floor (0 for the
paired safety kinds, the threshold for ``safety_threshold``).

Recovery (firing -> resolved): a CUSUM e-detector (Shin, Ramdas & Rinaldo
2022) for H0: "the effect is still >= floor", on the evidence since firing. Per
bet j of ``monitor.stats.betting`` (reverse direction, weights w_j), at each
evaluation L_j <- max(L_j, 0) + log-factor_j(counts added since the previous
evaluation); the alert resolves when D = sum_j w_j exp(L_j) >= A
(``recovery_arl``).

* Guarantee: if every pair (trace) since firing has conditional mean >= floor
  given the past, the expected number of evaluations to a false resolution is
  >= A, whatever the batch sizes, discordance or dependence. D is bounded by
  the mixture of Shiryaev-Roberts e-detectors S_t = sum_j w_j (S_{t-1,j} + 1)
  F_{t,j}, whose batch factors F have conditional mean <= 1 under H0, so
  S_t - t is a supermartingale and optional stopping gives E[tau] >= A.
  At one evaluation a minute, A = 144,000 is a mean of >= 100 days to a false
  resolution (<= 0.01 a day on average).
* Assumed: the counters are cumulative counts of the same pairs the finding
  tests, each pair counted once; evaluations need not be regular, but a
  faster schedule spends the budget faster (the bound is in evaluations).
  Counters that go backwards (store rebuilt) restart the detector at the
  current counts (L_j = 0), which only lowers D.
* A true effect exactly at the floor never resolves (on average): recovery
  needs the effect strictly under the level it tests. For the kinds whose
  floor is 0 (harmful-action and over-refusal regressions) that level is
  :data:`ZERO_FLOOR_RECOVERY_LEVEL` instead (0.2 points), so a candidate back
  at the baseline's rate can resolve; a false resolution then means "the rise
  was under 0.2 points", bounded as above.

Re-arm (resolved -> pending): only on a fresh e-process on the counts since the
resolution (now - then), ``flip_e_value`` / ``rate_e_value`` against the floor,
at ``rearm_alpha``: a fixed regression re-fires with probability <= rearm_alpha
over the rest of its life (Ville). Never on the cumulative finding.

Every kind the engine produces today is covered. Counters of another kind (a
state saved by an older version: ``"mean"``, ``"strata"``) keep the
tumbling-epoch point-estimate rule (``epoch_effect``, ``epoch_still_beyond``)
until those records are forgotten.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from alerts.decide import Finding, effect_since_epoch, still_beyond_floor
from monitor.stats import betting, capped_mean

#: Counter kinds with an anytime-valid recovery and re-arm rule.
COVERED_COUNTERS = ("flip", "rate", "capped_mean")
_KEYS = {"flip": ("n", "worse", "better"), "rate": ("n", "x"), "capped_mean": ("n", "b", "c", "bb", "cc", "bc")}
_LOG_WEIGHTS = np.log(np.array(betting.BET_WEIGHTS, dtype=np.float64))


def covered(finding: Finding) -> bool:
    """Does this finding's kind recover by the e-detector (counters_kind "flip" or "rate")?"""
    return finding.detail.get("counters_kind") in COVERED_COUNTERS


def counters_of(finding: Finding) -> dict[str, Any]:
    """The finding's cumulative counters, copied (JSON-able)."""
    return dict(finding.detail.get("counters", {}))


def increment(finding: Finding, then: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Counts added since ``then`` (the finding's counters minus ``then``), or None to re-base.

    None when ``then`` is missing, lacks a key, or any count went backwards or
    is inconsistent (worse + better > n, x > n; capped sums: another cap): the store was rebuilt.
    """
    kind = str(finding.detail["counters_kind"])
    keys = _KEYS[kind]
    now = finding.detail.get("counters", {})
    if then is None or any(k not in then or k not in now for k in keys):
        return None
    if kind == "capped_mean":
        diff_f = {k: float(now[k]) - float(then[k]) for k in keys}
        if then.get("cap") != now.get("cap") or diff_f["n"] < 0 or any(
                diff_f[k] < -1e-9 * max(1.0, abs(float(now[k]))) for k in ("b", "c", "bb", "cc")):
            return None
        return {**diff_f, "n": int(diff_f["n"]), "cap": now["cap"]}
    diff = {k: int(now[k]) - int(then[k]) for k in keys}
    if any(v < 0 for v in diff.values()) or sum(v for k, v in diff.items() if k != "n") > diff["n"]:
        return None
    return diff


#: The level recovery tests for kinds whose floor is 0 (H0 of recovery: effect >= this).
ZERO_FLOOR_RECOVERY_LEVEL = 0.002


def log_factors(finding: Finding, counts: Mapping[str, Any], direction: str) -> np.ndarray:
    """Per-bet log wealth factors of ``counts`` against ``finding.floor`` (``direction`` as in betting).

    The reverse ("less", recovery) direction tests :data:`ZERO_FLOOR_RECOVERY_LEVEL`
    where the floor is 0.
    """
    level = finding.floor if direction != "less" or finding.floor > 0 else ZERO_FLOOR_RECOVERY_LEVEL
    if finding.detail["counters_kind"] == "capped_mean":
        return capped_mean.log_factors(capped_mean.CappedSums.of(counts), level, direction)
    if finding.detail["counters_kind"] == "flip":
        return betting.flip_log_factors(counts["worse"], counts["better"], counts["n"], level, direction)
    return betting.rate_log_factors(counts["x"], counts["n"], level, direction)


def log_mixture(log_wealth: Sequence[float] | np.ndarray) -> float:
    """log sum_j w_j exp(L_j), computed without overflow."""
    terms = np.asarray(log_wealth, dtype=np.float64) + _LOG_WEIGHTS
    peak = float(terms.max())
    return peak + math.log(float(np.exp(terms - peak).sum()))


@dataclass(frozen=True)
class DetectorStep:
    """The detector after one evaluation: state to persist and its statistic D (as log D)."""

    log_wealth: list[float]
    counters: dict[str, Any]
    log_statistic: float
    rebased: bool

    def recovered(self, recovery_arl: float) -> bool:
        """D >= A: evidence that the effect is now under the floor."""
        return self.log_statistic >= math.log(recovery_arl)


def detector_step(finding: Finding, log_wealth: Sequence[float] | None,
                  last_counters: Mapping[str, Any] | None) -> DetectorStep:
    """Advance the e-detector by the counts added since ``last_counters`` (module notes).

    ``log_wealth`` None (a new detector) starts every L_j at 0 from
    ``last_counters``; counters that went backwards, or a state of the wrong
    length, re-base: L_j = 0 at the current counters.
    """
    size = len(betting.BET_WEIGHTS)
    added = increment(finding, last_counters)
    if added is None or (log_wealth is not None and len(log_wealth) != size):
        zeros = [0.0] * size
        return DetectorStep(zeros, counters_of(finding), log_mixture(zeros), rebased=True)
    start = np.zeros(size) if log_wealth is None else np.maximum(np.asarray(log_wealth, dtype=np.float64), 0.0)
    updated = start + log_factors(finding, added, "less")
    return DetectorStep([float(v) for v in updated], counters_of(finding), log_mixture(updated), rebased=False)


def rearm_e_value(finding: Finding, since: Mapping[str, Any] | None) -> float | None:
    """e-value of H0: effect <= floor on the counts since ``since`` (the resolution); None to re-base."""
    added = increment(finding, since)
    if added is None:
        return None
    if finding.detail["counters_kind"] == "capped_mean":
        return capped_mean.e_value(capped_mean.CappedSums.of(added), finding.floor)
    if finding.detail["counters_kind"] == "flip":
        return betting.flip_e_value(added["worse"], added["better"], added["n"], finding.floor)
    return betting.rate_e_value(added["x"], added["n"], finding.floor)


def upgrade_v1_counters(kind: str, counters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A version-1 epoch in today's names: paired ``{"n", "b", "c"}`` becomes flip ``{"n", "worse", "better"}``.

    success_regression: worse = b (baseline-only successes); safety_regression:
    worse = c (candidate-only harm). Other counters pass through unchanged.
    """
    if counters is None:
        return None
    if set(counters) == {"n", "b", "c"} and kind in ("success_regression", "safety_regression"):
        worse, better = ("b", "c") if kind == "success_regression" else ("c", "b")
        return {"n": counters["n"], "worse": counters[worse], "better": counters[better]}
    return dict(counters)


# --- the old rule, for counters "mean" / "strata" ---


def epoch_effect(finding: Finding, epoch: Mapping[str, Any] | None) -> tuple[int, float]:
    """(traces since the epoch, effect since the epoch); (-1, nan) when counters went backwards."""
    return effect_since_epoch(finding, epoch or {})


def epoch_still_beyond(finding: Finding, effect: float) -> bool:
    """The epoch rule's point-estimate test: is the effect since the epoch still beyond the floor?"""
    return still_beyond_floor(finding, effect)
