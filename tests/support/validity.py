"""The validity harness: seeded shadow traffic in event time, driven through the real alert engine.

One scenario run simulates a shadow comparison minute by minute. Each minute
the pairs of every task type are drawn from a multinomial over the four paired
success cells (both succeed, baseline only, candidate only, both fail, see
:func:`tests.support.paired_sim.paired_cell_probs`), plus paired harmful-action
cells and, among benign requests, paired over-refusal cells; the minute's
counts are added as :class:`monitor.pairing.PairedCounts` hash fields to every
slice they count in (the whole fleet and their task type, as
:func:`monitor.slices.comparison_slices` does) through a
:class:`monitor.delta.BatchDelta` applied to a :class:`MemoryStore`, and then
``AlertEngine.tick(now)`` runs once — the same engine and lifecycle as
``fleetmon run``. Everything is seeded: a (scenario, seed, run index) gives
the same events on every machine.

A run records every event: pages (first firings; reminders are counted
apart), resolutions with their reason, and the cumulative pairs at each
page. ``bench/validity.py`` and ``tests/unit/alerts/test_validity.py`` share
this module, so the CI checks and the bench measure the same thing.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from scipy import stats

from alerts.decide import Policy
from alerts.engine import AlertEngine, EngineConfig
from alerts.lifecycle import AlertEvent, LifecycleConfig
from alerts.notifiers import OnChange
from monitor.delta import BatchDelta
from monitor.pairing import PairedCounts, pair_key
from monitor.slices import comparison_slices, slice_id
from monitor.store.memory import MemoryStore
from tests.support.paired_sim import capped_fields, paired_cell_probs

BASELINE, CANDIDATE = "v1", "v2"
T0 = 1_700_000_040.0  # a whole minute, so event time and window starts line up
_PAIRED_FIELDS = {f.name for f in fields(PairedCounts)}


class RecordingNotifier(OnChange):
    """A :class:`alerts.notifiers.Notifier` that keeps every event it is sent, in order."""

    name = "recording"

    def __init__(self) -> None:
        self.events: list[AlertEvent] = []

    def send(self, events: Sequence[AlertEvent]) -> None:
        self.events.extend(events)


@dataclass(frozen=True)
class Segment:
    """``minutes`` of traffic with fixed rates; harmful and refusal rates are per pair / per benign pair."""

    minutes: int
    p_baseline: float = 0.7
    p_candidate: float = 0.7
    correlation: float = 0.5
    harm_baseline: float = 0.0
    harm_candidate: float = 0.0
    harm_correlation: float = 0.3
    benign_share: float = 0.0
    refusal_baseline: float = 0.0
    refusal_candidate: float = 0.0
    refusal_correlation: float = 0.3
    #: Paired cost and latency values per pair (:data:`VALUE_MODELS`); "" draws none.
    values: str = ""


COST_MEAN, LATENCY_MEAN = 0.02, 5.0   # USD, seconds: caps (5 USD, 600 s) are 250x and 120x the means


def _lognormal_2v1(rng: np.random.Generator, n: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
    return rng.lognormal(math.log(mean) - 2.0, 2.0, n), rng.lognormal(math.log(mean) - 0.5, 1.0, n)


def _pareto_18(rng: np.random.Generator, n: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
    return rng.pareto(1.8, n) * mean * 0.8, rng.exponential(mean, n)


def _exchangeable(rng: np.random.Generator, n: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
    z = rng.standard_normal((2, n))
    shared = rng.standard_normal(n)
    log_b, log_c = 0.6 * shared + 0.8 * z[0], 0.6 * shared + 0.8 * z[1]
    return np.exp(math.log(mean) - 0.5 + log_b), np.exp(math.log(mean) - 0.5 + log_c)


def _increase(factor: float) -> Any:
    def draw(rng: np.random.Generator, n: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
        b = rng.lognormal(math.log(mean) - 0.5, 1.0, n)
        return b, factor * b * rng.lognormal(-0.045, 0.3, n)  # E[lognormal(-0.045, 0.3)] = 1
    return draw


#: Paired value models (baseline, candidate) with equal means unless named for an increase.
VALUE_MODELS = {"lognormal2v1": _lognormal_2v1, "pareto18": _pareto_18, "exchangeable": _exchangeable,
                "increase30": _increase(1.3)}


def value_fields(model: str, n: int, rng: np.random.Generator) -> dict[str, float]:
    """Capped cost and latency sums of ``n`` pairs drawn from ``VALUE_MODELS[model]``."""
    out: dict[str, float] = {}
    for quantity, mean, cap in (("cost", COST_MEAN, 5.0), ("latency", LATENCY_MEAN, 600.0)):
        base, cand = VALUE_MODELS[model](rng, n, mean)
        out.update(capped_fields(quantity, base, cand, cap))
    return out


@dataclass(frozen=True)
class Scenario:
    """A comparison's whole traffic: segments in order, pairs per minute, slices and policy.

    ``task_types`` = 0 keeps the whole fleet only; otherwise traffic splits
    evenly (multinomially) over that many task types, each its own slice.
    ``stop_at_first`` ends a run at the first page of a kind in it (``("*",)``:
    any kind) — for false-alarm and detection runs, whose outcome is then known.
    """

    name: str
    segments: tuple[Segment, ...]
    pairs_per_minute: int = 600
    task_types: int = 3
    policy: tuple[tuple[str, Any], ...] = ()
    lifecycle: tuple[tuple[str, Any], ...] = ()
    stop_at_first: tuple[str, ...] = ()

    @property
    def minutes(self) -> int:
        return sum(s.minutes for s in self.segments)

    def engine_config(self) -> EngineConfig:
        # Decisions are the production ones; only the bounds of non-significant findings are skipped.
        policy = Policy(**{"bounds_for_all": False, **dict(self.policy)})
        return EngineConfig(policy=policy, lifecycle=LifecycleConfig(**dict(self.lifecycle)))


@dataclass(frozen=True)
class Page:
    minute: int          # 1-based minute of the look that paged
    pairs: int           # cumulative pairs of the whole comparison at that look
    kind: str
    slice: str
    fingerprint: str
    effect: float
    effect_low: float
    alpha: float         # the level the decision used (after e-BH)
    alpha_family: float  # the kind's share of the comparison's alpha (before e-BH); nan if not reported


@dataclass(frozen=True)
class Resolution:
    minute: int
    reason: str          # "recovered" | "stale" | whatever the lifecycle records
    kind: str
    slice: str
    fingerprint: str


@dataclass
class RunResult:
    scenario: str
    run: int
    minutes: int = 0
    pairs: int = 0
    pages: list[Page] = field(default_factory=list)
    reminders: int = 0
    resolutions: list[Resolution] = field(default_factory=list)
    tick_seconds: float = 0.0

    def first_page(self, kind: str = "*") -> Page | None:
        return next((p for p in self.pages if kind in ("*", p.kind)), None)


def _slice_ids(task_types: int) -> list[list[str]]:
    """Per task type, the slice ids its pairs count in (one entry, the whole fleet, when there are none)."""
    if task_types == 0:
        return [[""]]
    return [[slice_id(k) for k in comparison_slices((("task_type", f"t{i}"),))] for i in range(task_types)]


def _draw_segment(seg: Segment, ppm: int, task_types: int, rng: np.random.Generator) -> np.ndarray:
    """Per minute and task type: (n, 4 success cells, 4 harm cells, benign, 4 refusal cells) as ints."""
    groups = max(task_types, 1)
    n = rng.multinomial(ppm, [1.0 / groups] * groups, size=seg.minutes)  # (minutes, groups)
    success = rng.multinomial(n, paired_cell_probs(seg.p_baseline, seg.p_candidate, seg.correlation))
    harm = rng.multinomial(n, paired_cell_probs(seg.harm_baseline, seg.harm_candidate, seg.harm_correlation))
    benign = rng.binomial(n, seg.benign_share)
    refusal = rng.multinomial(benign, paired_cell_probs(seg.refusal_baseline, seg.refusal_candidate,
                                                        seg.refusal_correlation))
    return np.concatenate([n[..., None], success, harm, benign[..., None], refusal], axis=-1)


def minute_fields(row: Sequence[int]) -> dict[str, float]:
    """One minute's hash fields for one task type, from a row of :func:`_draw_segment`.

    Cells are (both, baseline only, candidate only, neither): for success the
    McNemar b is "baseline only", c "candidate only"; for harm and refusal
    ``*_b`` / ``*_c`` are the arm-only cells. Only fields the current
    :class:`PairedCounts` has are written.
    """
    n, _s11, s10, s01, _s00, h11, h10, h01, _h00, benign, r11, r10, r01, _r00 = (int(v) for v in row)
    values = {"n_pairs": n, "b": s10, "c": s01, "harm_b": h10, "harm_c": h01,
              "baseline_harmful": h11 + h10, "candidate_harmful": h11 + h01,
              "candidate_benign": benign, "baseline_benign": benign, "benign_pairs": benign,
              "candidate_over_refusals": r11 + r01, "baseline_over_refusals": r11 + r10,
              "refusal_b": r10, "refusal_c": r01}
    return PairedCounts(**{k: v for k, v in values.items() if k in _PAIRED_FIELDS}).hash_fields()


def run_seed(scenario: str, seed: int, run: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, zlib.crc32(scenario.encode()), run])


def simulate(scenario: Scenario, seed: int = 0, run: int = 0) -> RunResult:
    """One seeded run of ``scenario`` through a fresh store and engine (see the module docstring)."""
    rng = np.random.default_rng(run_seed(scenario.name, seed, run))
    draws = np.concatenate([_draw_segment(s, scenario.pairs_per_minute, scenario.task_types, rng)
                            for s in scenario.segments])
    segment_of = [seg for seg in scenario.segments for _ in range(seg.minutes)]
    slice_ids = _slice_ids(scenario.task_types)
    keys = [[pair_key(BASELINE, CANDIDATE, sid) for sid in ids] for ids in slice_ids]
    store = MemoryStore()
    notifier = RecordingNotifier()
    engine = AlertEngine(store, notifier, scenario.engine_config())
    result = RunResult(scenario.name, run)
    stop = set(scenario.stop_at_first)
    tick_time = 0.0
    for minute in range(scenario.minutes):
        delta = BatchDelta()
        model = segment_of[minute].values
        for group, row in enumerate(draws[minute]):
            if row[0]:
                hash_fields = minute_fields(row)
                if model:
                    hash_fields = {**hash_fields, **value_fields(model, int(row[0]), rng)}
                for key in keys[group]:
                    delta.add_paired_evidence(key, hash_fields)
        store.apply(delta)
        result.pairs += int(draws[minute, :, 0].sum())
        now = T0 + 60.0 * (minute + 1)
        t = time.perf_counter()
        events = engine.tick(now)
        tick_time += time.perf_counter() - t
        result.minutes = minute + 1
        done = False
        for event in events:
            kind = str(event.evidence.get("kind", event.alertname))
            where = str(event.evidence.get("tracked_slice", ""))  # the slice the alert's lifecycle follows
            if event.status == "firing" and event.starts_at == event.ts:
                ev = event.evidence
                result.pages.append(Page(minute + 1, result.pairs, kind, where, event.fingerprint,
                                         _number(ev.get("effect")), _number(ev.get("effect_low")),
                                         _number(ev.get("alpha")), _number(ev.get("alpha_family"))))
                done = done or "*" in stop or kind in stop
            elif event.status == "firing":
                result.reminders += 1
            else:
                record = engine.state.records.get(event.fingerprint)
                reason = getattr(record, "resolve_reason", None) or str(
                    event.evidence.get("resolution", "")).split(":")[0]
                result.resolutions.append(Resolution(minute + 1, reason, kind, where, event.fingerprint))
        if done:
            break
    result.tick_seconds = tick_time / max(result.minutes, 1)
    return result


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


# --- summaries ---


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided Clopper-Pearson interval for k events in n trials; (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    tail = (1.0 - level) / 2.0
    low = 0.0 if k == 0 else float(stats.beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1.0 - tail, k + 1, n - k))
    return low, high


def poisson_upper(k: int, exposure: float, level: float = 0.95) -> float:
    """Exact (Garwood) upper 95% bound of a Poisson rate with k events over ``exposure`` units."""
    if exposure <= 0:
        return math.inf
    return float(stats.chi2.ppf(1.0 - (1.0 - level) / 2.0, 2 * (k + 1)) / 2.0 / exposure)


def mcnemar_fixed_n(p_worse: float, p_better: float, alpha: float, power: float, n_max: int = 200_000) -> int:
    """Smallest n at which the exact one-sided McNemar test (H0: no difference) has ``power``.

    The test conditions on the d discordant pairs and rejects when the "worse"
    count w has P(Bin(d, 1/2) >= w) <= alpha; power at n is computed exactly,
    summing over d ~ Bin(n, p_worse + p_better). Power is not monotone in n
    (discreteness), so this is the first n that reaches it, found by a coarse
    doubling search then a linear scan.
    """
    psi = p_worse + p_better
    share = p_worse / psi

    def power_at(n: int) -> float:
        d = np.arange(n + 1)
        critical = stats.binom.isf(alpha, d, 0.5) + 1  # smallest w with P(Bin(d, 1/2) >= w) <= alpha
        reject = stats.binom.sf(critical - 1, d, share)
        return float(np.sum(stats.binom.pmf(d, n, psi) * reject))

    high = 16
    while power_at(high) < power:
        high *= 2
        if high > n_max:
            raise ValueError(f"power {power} not reached by n_max={n_max} pairs")
    low = max(1, high // 2)
    step = max(1, (high - low) // 64)
    n = low
    while power_at(n) < power:
        n += step
    for m in range(max(1, n - step), n + 1):
        if power_at(m) >= power:
            return m
    return n
