"""Validity bench: false alarms, flapping, recovery and detection, driven through the real alert engine.

Run: ``.venv/bin/python bench/validity.py [--quick] [--runs R] [--seed S] [--budget-minutes M]``.
Every scenario is a seeded shadow comparison simulated in event time by
:mod:`tests.support.validity`: one ``AlertEngine.tick`` per simulated minute
over a :class:`MemoryStore` holding cumulative paired counts per slice (the
whole fleet and each task type), the same engine and lifecycle as ``fleetmon
run``. Rates come with exact 95% upper bounds (Clopper-Pearson for shares of
runs, Garwood for Poisson rates per day). Prints a table, the targets of issue
11 met or missed, then as its LAST line one JSON object with a key per figure.

Runs are interleaved across scenarios and shared by at most 2 worker
processes; when the wall-clock budget is spent the bench stops submitting,
reports the runs it completed (each scenario's run count is in the table and
the JSON) and says so. Canary scenarios run through
:mod:`tests.support.canary_sim` (minute windows per release, arm and task
type; the engine's canary ledger matches the pairs). Cost and latency
scenarios draw paired values per pair (log-normal sigma 2 vs 1 and Pareto
1.8 vs exponential with equal means, exchangeable log-normals, a 30%
increase) and feed the capped sums the workers keep.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from tests.support.canary_sim import CanaryScenario, as_run_result, simulate_canary
from tests.support.paired_sim import correlation_for_discordance, paired_cell_probs
from tests.support.validity import (
    RunResult,
    Scenario,
    Segment,
    clopper_pearson,
    mcnemar_fixed_n,
    poisson_upper,
    simulate,
)

ALPHA = 0.05
P, CORR = 0.7, 0.5                     # 21% discordance
DAY = 1440
NOT_COVERED: tuple[str, ...] = ()


@dataclass(frozen=True)
class Spec:
    """A scenario, what it measures (``measure``) and its share of the run count (``runs_share``)."""

    scenario: Scenario | CanaryScenario
    measure: str          # "false_alarm" | "persistent" | "recovery" | "detection"
    runs_share: float = 1.0
    fix_minute: int = 0   # recovery: the minute the fix lands
    drop: float = 0.0     # detection: the true drop


def specs(quick: bool) -> list[Spec]:
    aa_pairs = 50_000 if quick else 200_000
    ppm = 1200                                     # 20 pairs/s: 200,000 pairs = 167 looks, one a minute
    aa_minutes = math.ceil(aa_pairs / ppm)
    day = 360 if quick else DAY                    # persistent drops: 6 h quick, 24 h full
    out: list[Spec] = []

    def aa(name: str, seg: Segment, **kw: Any) -> None:
        out.append(Spec(Scenario(name, (seg,), ppm, stop_at_first=("*",), **kw), "false_alarm"))

    for disc in (0.01, 0.10, 0.40):
        aa(f"aa_disc{round(disc * 100)}", Segment(aa_minutes, 0.6, 0.6, correlation_for_discordance(0.6, disc)))
    aa("aa_p02", Segment(aa_minutes, 0.02, 0.02, 0.5))
    aa("aa_p98", Segment(aa_minutes, 0.98, 0.98, 0.5))
    aa("aa_slices20", Segment(aa_minutes, P, P, CORR), task_types=20)
    aa("union_kinds", Segment(aa_minutes, P, P, CORR, harm_baseline=0.01, harm_candidate=0.01, benign_share=0.3,
                              refusal_baseline=0.05, refusal_candidate=0.05),
       policy=(("harmful_threshold", 0.01), ("over_refusal_threshold", 0.05)))
    for drop in (0.005, 0.010, 0.015, 0.020):
        aa(f"subfloor{round(drop * 1000):02d}", Segment(aa_minutes, P, P - drop, CORR))
    for share in (0.5, 0.8):
        aa(f"threshold{round(share * 10):02d}x",
           Segment(aa_minutes, P, P, CORR, harm_baseline=0.01 * share, harm_candidate=0.01 * share,
                   benign_share=0.3, refusal_baseline=0.05 * share, refusal_candidate=0.05 * share),
           policy=(("harmful_threshold", 0.01), ("over_refusal_threshold", 0.05)))
    for model in ("lognormal2v1", "pareto18", "exchangeable"):  # cost and latency A/A (capped-mean tests)
        aa(f"values_{model}", Segment(aa_minutes, P, P, CORR, values=model))
    out.append(Spec(Scenario("detect_cost30", (Segment(600 if quick else 2000, P, P, CORR, values="increase30"),), 10,
                             stop_at_first=("cost_regression",)), "value_detection", runs_share=0.5, drop=0.30))
    for drop in (0.03, 0.05):
        out.append(Spec(Scenario(f"persistent{round(drop * 100)}", (Segment(day, P, P - drop, CORR),), 120),
                        "persistent", runs_share=0.25))
    fix = 60
    out.append(Spec(Scenario("recovery", (Segment(fix, P, P - 0.05, CORR), Segment((360 if quick else 720) - fix)),
                             120), "recovery", runs_share=0.25, fix_minute=fix))
    for drop, ppm_detect, horizon in ((0.02, 50, 400), (0.05, 10, 2000), (0.10, 10, 600)):
        out.append(Spec(Scenario(f"detect{round(drop * 100)}", (Segment(horizon, P, P - drop, CORR),), ppm_detect,
                                 stop_at_first=("success_regression",)), "detection", runs_share=0.5, drop=drop))
    # Canary (disjoint traffic, 50 traces a minute, a look every minute; see tests.support.canary_sim).
    canary_days = 1 if quick else 3
    out.append(Spec(CanaryScenario("canary_mix_shift", canary_days * DAY, 50.0, (0.1, 0.1),
                                   baseline_mix=((0.6, 0.3, 0.1), (0.6, 0.3, 0.1)),
                                   canary_mix=((0.6, 0.3, 0.1), (0.1, 0.3, 0.6)), p_start=(0.95, 0.7, 0.3),
                                   p_end=(0.95, 0.7, 0.3)), "false_alarm"))
    out.append(Spec(CanaryScenario("canary_ramp_drift", 360, 300.0, (0.02, 0.20), p_start=(0.9, 0.75, 0.55),
                                   p_end=(0.75, 0.6, 0.4)), "false_alarm"))
    out.append(Spec(CanaryScenario("canary_detect10", 2 * DAY, 50.0, (0.1, 0.1), effect=0.10), "canary_detection",
                    runs_share=0.5, drop=0.10))
    return out


def _one(task: tuple[Scenario | CanaryScenario, int, int]) -> RunResult:
    scenario, seed, run = task
    if isinstance(scenario, CanaryScenario):
        return as_run_result(simulate_canary(scenario, seed, run))
    return simulate(scenario, seed, run)


def run_all(all_specs: list[Spec], runs: int, seed: int, budget_seconds: float,
            workers: int) -> tuple[dict[str, list[RunResult]], bool]:
    """Every scenario's runs, interleaved (run 0 of every scenario first); (results, stopped by the budget)."""
    counts = {s.scenario.name: max(2, round(runs * s.runs_share)) for s in all_specs}
    tasks = [(s.scenario, seed, r) for r in range(max(counts.values()))
             for s in all_specs if r < counts[s.scenario.name]]
    results: dict[str, list[RunResult]] = defaultdict(list)
    deadline = time.monotonic() + budget_seconds
    stopped = False
    with mp.get_context("fork").Pool(workers) as pool:
        for result in pool.imap_unordered(_one, tasks, chunksize=1):
            results[result.scenario].append(result)
            if time.monotonic() > deadline:
                stopped = True
                pool.terminate()
                break
    return results, stopped


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 6)


def summarise(spec: Spec, results: list[RunResult]) -> dict[str, Any]:
    name, n = spec.scenario.name, len(results)
    out: dict[str, Any] = {f"{name}_runs": n}
    if spec.measure == "false_alarm":
        k = sum(1 for r in results if r.pages)
        out[f"{name}_false_alarm"] = k / n if n else math.nan
        out[f"{name}_false_alarm_upper95"] = clopper_pearson(k, n)[1]
        out[f"{name}_looks"] = spec.scenario.minutes
        kinds = sorted({r.pages[0].kind for r in results if r.pages})
        out[f"{name}_false_kinds"] = ",".join(kinds)
    elif spec.measure == "persistent":
        # One incident per alert (fingerprint) that fired: every further page of it within the run
        # is a re-page, every "recovered" resolution a false one (the drop never ends).
        days = spec.scenario.minutes / DAY
        alerts = sum(len({p.fingerprint for p in r.pages}) for r in results)
        extra = sum(len(r.pages) for r in results) - alerts
        false_res = sum(1 for r in results for x in r.resolutions if x.reason == "recovered")
        exposure = alerts * days
        out[f"{name}_alerts_per_run"] = alerts / n if n else math.nan
        out[f"{name}_pages_per_incident_day"] = 1.0 + extra / exposure if exposure else math.nan
        out[f"{name}_pages_per_incident_day_upper95"] = 1.0 + poisson_upper(extra, exposure)
        out[f"{name}_false_resolutions_per_day"] = false_res / exposure if exposure else math.nan
        out[f"{name}_false_resolutions_per_day_upper95"] = poisson_upper(false_res, exposure)
        out[f"{name}_alert_days"] = exposure
    elif spec.measure == "recovery":
        fix = spec.fix_minute
        minutes, refired, resolved, early = [], 0, 0, 0
        for r in results:
            for fp in {p.fingerprint for p in r.pages if p.minute <= fix}:
                early += sum(1 for x in r.resolutions if x.fingerprint == fp and x.minute <= fix)
                after = [x.minute for x in r.resolutions if x.fingerprint == fp and x.minute > fix]
                minutes.append(after[0] - fix if after else math.inf)
                if after:
                    resolved += 1
                    refired += any(p.fingerprint == fp and p.minute > after[0] for p in r.pages)
        arr = np.array(minutes, dtype=float) if minutes else np.array([math.inf])
        out[f"{name}_alerts"] = len(minutes)
        out[f"{name}_median_minutes_to_resolve"] = _quantile(arr, 0.5)
        out[f"{name}_resolved_within_30min"] = float(np.mean(arr <= 30))
        out[f"{name}_resolved_by_end"] = float(np.mean(np.isfinite(arr)))
        out[f"{name}_refire_rate"] = refired / resolved if resolved else math.nan
        out[f"{name}_refire_rate_upper95"] = clopper_pearson(refired, resolved)[1]
        out[f"{name}_resolutions_before_fix"] = early
    elif spec.measure == "value_detection":
        first = [r.first_page("cost_regression") for r in results]
        cost_pairs = np.array([p.pairs if p else math.inf for p in first], dtype=float)
        out[f"{name}_detected"] = float(np.mean(np.isfinite(cost_pairs))) if n else math.nan
        out[f"{name}_median_pairs"] = _quantile(cost_pairs, 0.5)
        out[f"{name}_p80_pairs"] = _quantile(cost_pairs, 0.8)
        assert isinstance(spec.scenario, Scenario)
        out[f"{name}_horizon_pairs"] = spec.scenario.minutes * spec.scenario.pairs_per_minute
    elif spec.measure == "canary_detection":
        first = [r.first_page("success_regression") for r in results]
        traces = np.array([p.pairs if p else math.inf for p in first], dtype=float)
        page_minutes = np.array([p.minute if p else math.inf for p in first], dtype=float)
        out[f"{name}_detected"] = float(np.mean(np.isfinite(traces))) if n else math.nan
        out[f"{name}_median_canary_traces"] = _quantile(traces, 0.5)
        out[f"{name}_p80_canary_traces"] = _quantile(traces, 0.8)
        out[f"{name}_median_minutes"] = _quantile(page_minutes, 0.5)
    else:  # detection
        first = [r.first_page("success_regression") for r in results]
        pairs = np.array([p.pairs if p else math.inf for p in first], dtype=float)
        assert isinstance(spec.scenario, Scenario)
        _, worse, better, _ = paired_cell_probs(P, P - spec.drop, CORR)
        alpha_kind = next((p_alpha for p_alpha in (_page_alpha(r) for r in results) if p_alpha), None)
        out[f"{name}_detected"] = float(np.mean(np.isfinite(pairs))) if n else math.nan
        out[f"{name}_median_pairs"] = _quantile(pairs, 0.5)
        out[f"{name}_p80_pairs"] = _quantile(pairs, 0.8)
        out[f"{name}_horizon_pairs"] = spec.scenario.minutes * spec.scenario.pairs_per_minute
        for power in (0.5, 0.8):
            out[f"{name}_fixed_n{round(power * 100)}"] = mcnemar_fixed_n(worse, better, ALPHA, power)
        if alpha_kind:
            out[f"{name}_alpha_success"] = alpha_kind
            out[f"{name}_fixed_n50_at_alpha_success"] = mcnemar_fixed_n(worse, better, alpha_kind, 0.5)
        out[f"{name}_median_over_fixed_n50"] = out[f"{name}_median_pairs"] / out[f"{name}_fixed_n50"]
        out[f"{name}_p80_over_fixed_n80"] = out[f"{name}_p80_pairs"] / out[f"{name}_fixed_n80"]
    return out


def _quantile(values: np.ndarray, q: float) -> float:
    """The q-quantile as an order statistic (the ceil(q n)-th smallest), so runs that never fired (inf) count."""
    if values.size == 0:
        return math.nan
    return float(np.sort(values)[max(0, math.ceil(q * values.size) - 1)])


def _page_alpha(r: RunResult) -> float | None:
    """The success family's alpha (before e-BH) the first success page of ``r`` reported, if any."""
    page = r.first_page("success_regression")
    return page.alpha_family if page and math.isfinite(page.alpha_family) else None


def targets(figures: dict[str, Any], all_specs: list[Spec]) -> list[tuple[str, bool, str]]:
    rows: list[tuple[str, bool, str]] = []
    worst = max(((figures[f"{s.scenario.name}_false_alarm_upper95"], s.scenario.name) for s in all_specs
                 if s.measure == "false_alarm"), default=(math.nan, ""))
    rows.append(("every A/A or at-floor false-alarm rate: upper95 <= 0.05", worst[0] <= ALPHA,
                 f"worst upper95 {worst[0]:.3f} ({worst[1]})"))
    for d in (3, 5):
        ppd, fr = figures.get(f"persistent{d}_pages_per_incident_day", math.nan), \
            figures.get(f"persistent{d}_false_resolutions_per_day_upper95", math.nan)
        rows.append((f"persistent {d}-point drop: <= 1.05 pages per incident-day", ppd <= 1.05, f"{ppd:.3f}"))
        rows.append((f"persistent {d}-point drop: false resolutions <= 0.01/day (upper95)", fr <= 0.01, f"{fr:.4f}"))
    med = figures.get("recovery_median_minutes_to_resolve", math.nan)
    refire = figures.get("recovery_refire_rate", math.nan)
    rows.append(("after a fix at 2 pairs/s: median resolve <= 30 min", med <= 30, f"{med:.0f} min"))
    rows.append(("after a fix: re-fires <= 1%", refire <= 0.01,
                 f"{refire:.3f} (upper95 {figures.get('recovery_refire_rate_upper95', math.nan):.3f})"))
    canary = [(figures.get(f"{n}_false_alarm_upper95", math.nan), n) for n in ("canary_ramp_drift", "canary_mix_shift")]
    rows.append(("canary ramp with a shared drift and canary mix shift: false alarms <= alpha (upper95)",
                 all(u <= ALPHA for u, _ in canary), ", ".join(f"{n} {u:.3f}" for u, n in canary)))
    ratio = figures.get("detect5_median_over_fixed_n50", math.nan)
    rows.append(("5-point drop at 21% discordance: median pairs <= 2.5x fixed-n (50% power)", ratio <= 2.5,
                 f"{ratio:.2f}x"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs and fewer of them (about 3 minutes)")
    parser.add_argument("--runs", type=int, default=None, help="runs per false-alarm scenario (others get a share)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-minutes", type=float, default=None, help="stop submitting runs after this")
    parser.add_argument("--workers", type=int, default=2, choices=(1, 2))
    parser.add_argument("--only", default="", help="comma-separated scenario name prefixes to run (default: all)")
    args = parser.parse_args()
    runs = args.runs or (6 if args.quick else 72)  # 0 alarms in 72 runs: upper95 0.0499
    budget = 60.0 * (args.budget_minutes or (3.0 if args.quick else 38.0))
    all_specs = specs(args.quick)
    if args.only:
        all_specs = [s for s in all_specs if s.scenario.name.startswith(tuple(args.only.split(",")))]
    started = time.monotonic()
    results, stopped = run_all(all_specs, runs, args.seed, budget, args.workers)
    wall = time.monotonic() - started
    ticks = sum(r.minutes for rs in results.values() for r in rs)
    tick_ms = 1000.0 * sum(r.tick_seconds * r.minutes for rs in results.values() for r in rs) / max(ticks, 1)

    figures: dict[str, Any] = {"mode": "quick" if args.quick else "full", "seed": args.seed,
                               "engine_ms_per_tick": round(tick_ms, 3), "ticks": ticks,
                               "wall_seconds": round(wall, 1), "stopped_by_budget": stopped,
                               "not_covered": list(NOT_COVERED)}
    for spec in all_specs:
        figures.update(summarise(spec, results.get(spec.scenario.name, [])))

    print(f"validity bench ({figures['mode']}, seed {args.seed}): {ticks} engine ticks, "
          f"{tick_ms:.2f} ms per tick, {wall:.0f} s wall" + ("; STOPPED BY THE BUDGET" if stopped else ""))
    print(f"{'scenario':<16}{'runs':>6}  figures")
    for spec in all_specs:
        name = spec.scenario.name
        shown = {k[len(name) + 1:]: v for k, v in figures.items() if k.startswith(name + "_") and k != f"{name}_runs"}
        text = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
        print(f"{name:<16}{figures[f'{name}_runs']:>6}  {text}")
    if NOT_COVERED:
        print("not covered this round: " + "; ".join(NOT_COVERED))
    print("targets:")
    rows = targets(figures, all_specs)
    for label, met, value in rows:
        print(f"  [{'met' if met else 'MISSED'}] {label}: {value}")
    figures["targets_met"] = all(met for _, met, _ in rows)
    print(json.dumps({k: (_num(v) if isinstance(v, float) else v) for k, v in figures.items()}, allow_nan=False))


if __name__ == "__main__":
    main()
