"""Seeded canary traffic in event time: minute windows written to a store, the real engine ticking every minute.

Each minute, for each task type, the baseline and the canary get Poisson
numbers of traces (rates per minute, a task mix per arm that may shift over
time, a canary share that may ramp); each trace succeeds with the task type's
current rate (a drift shared by both arms), minus ``effect`` for the canary,
and is harmful with ``harm_baseline`` / ``harm_candidate``. The minute's
counts go into the 1-minute windows of slices (release, arm, task_type), as
the fold writes them, through a :class:`monitor.delta.BatchDelta` applied to a
:class:`MemoryStore`; then ``AlertEngine.tick(now)`` runs once.
``tests/unit/alerts/test_canary.py`` and ``bench/validity.py`` share it.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from alerts.engine import AlertEngine, EngineConfig
from alerts.lifecycle import AlertEvent, LifecycleConfig
from alerts.policy import Policy
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.slices import slice_id, slice_key
from monitor.store.memory import MemoryStore
from tests.support.validity import T0, Page, RecordingNotifier, RunResult

BASELINE, CANARY = "v1", "v2"


@dataclass(frozen=True)
class CanaryScenario:
    """``minutes`` of canary traffic; mixes are task-type weights (normalised), at the start and at the end.

    ``canary_share`` ramps linearly from its first to its second value of
    the total traffic (``traces_per_minute``); ``p_start`` / ``p_end`` are
    each task type's success rate at the start and at the end (linear drift,
    both arms); ``effect`` is subtracted from the canary's rate.
    """

    name: str
    minutes: int
    traces_per_minute: float = 50.0
    canary_share: tuple[float, float] = (0.1, 0.1)
    baseline_mix: tuple[tuple[float, ...], tuple[float, ...]] = ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    canary_mix: tuple[tuple[float, ...], tuple[float, ...]] = ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    p_start: tuple[float, ...] = (0.9, 0.7, 0.4)
    p_end: tuple[float, ...] = (0.9, 0.7, 0.4)
    effect: float = 0.0
    harm_baseline: float = 0.0
    harm_candidate: float = 0.0
    stop_at_first: bool = True
    block_seconds: float = 600.0

    def engine_config(self) -> EngineConfig:
        return EngineConfig(policy=Policy(bounds_for_all=False), lifecycle=LifecycleConfig(),
                            canary_block_seconds=self.block_seconds, canary_lookback_seconds=7 * 86400.0)


@dataclass
class CanaryRun:
    scenario: str
    run: int
    minutes: int = 0
    canary_traces: int = 0
    first_page_minute: int | None = None
    first_page_kind: str = ""
    pages: int = 0
    store: MemoryStore | None = None
    engine: AlertEngine | None = None


def as_run_result(run: CanaryRun) -> RunResult:
    """The run in the shadow harness's terms (``pairs`` = canary traces), for the bench's summaries."""
    pages = [] if run.first_page_minute is None else [
        Page(run.first_page_minute, run.canary_traces, run.first_page_kind, "", "", math.nan, math.nan, math.nan,
             math.nan)]
    return RunResult(run.scenario, run.run, minutes=run.minutes, pairs=run.canary_traces, pages=pages)


def _mix(pair: tuple[tuple[float, ...], tuple[float, ...]], f: float) -> np.ndarray:
    w = (1 - f) * np.asarray(pair[0], float) + f * np.asarray(pair[1], float)
    return w / w.sum()


def simulate_canary(scenario: CanaryScenario, seed: int = 0, run: int = 0) -> CanaryRun:
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(scenario.name.encode()), run]))
    store = MemoryStore()
    engine = AlertEngine(store, RecordingNotifier(), scenario.engine_config())
    result = CanaryRun(scenario.name, run, store=store, engine=engine)
    types = len(scenario.p_start)
    ids = {(arm, t): slice_id(slice_key({"release": release, "arm": arm, "task_type": f"t{t}"}))
           for arm, release in (("baseline", BASELINE), ("canary", CANARY)) for t in range(types)}
    for minute in range(scenario.minutes):
        f = minute / max(scenario.minutes - 1, 1)
        share = (1 - f) * scenario.canary_share[0] + f * scenario.canary_share[1]
        p = (1 - f) * np.asarray(scenario.p_start) + f * np.asarray(scenario.p_end)
        start = T0 + 60.0 * minute
        delta = BatchDelta()
        for arm, rate, mix, arm_p, harm in (
                ("baseline", (1 - share) * scenario.traces_per_minute, _mix(scenario.baseline_mix, f), p,
                 scenario.harm_baseline),
                ("canary", share * scenario.traces_per_minute, _mix(scenario.canary_mix, f),
                 np.clip(p - scenario.effect, 0.0, 1.0), scenario.harm_candidate)):
            n = rng.poisson(rate * mix)
            successes = rng.binomial(n, arm_p)
            harmful = rng.binomial(n, harm)
            for t in range(types):
                if n[t]:
                    sid = ids[(arm, t)]
                    delta.windows[("1m", int(start), sid)] = Aggregate(
                        {"traces": int(n[t]), "successes": int(successes[t]), "harmful_action": int(harmful[t])})
                    delta.last_seen[sid] = start + 59.0
                    if arm == "canary":
                        result.canary_traces += int(n[t])
        store.apply(delta)
        _record(result, engine.tick(start + 60.0), minute + 1)
        result.minutes = minute + 1
        if result.pages and scenario.stop_at_first:
            return result
    # last looks once every block of the run has closed (two: a finding must hold for ``for_seconds``)
    last = T0 + 60.0 * scenario.minutes + scenario.block_seconds + engine.config.canary_grace_seconds
    for look in (last + 60.0, last + 60.0 + engine.config.lifecycle.for_seconds):
        _record(result, engine.tick(look), scenario.minutes)
    return result


def _record(result: CanaryRun, events: list[AlertEvent], minute: int) -> None:
    for event in events:
        if event.status == "firing" and event.starts_at == event.ts:
            result.pages += 1
            if result.first_page_minute is None:
                result.first_page_minute = minute
                result.first_page_kind = str(event.evidence.get("kind", event.alertname))
