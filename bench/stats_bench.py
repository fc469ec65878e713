"""Benchmark: the compare report (numpy) vs a pure-Python implementation of it.

2,000 tasks x 8 trials x 2 agents, 10,000 bootstrap resamples, both timed in
the same run on the same synthetic traces. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pure_report

from monitor.offline.compare import compare, group_trials
from monitor.pricing import PriceMap
from monitor.schema import validate


def make_records(agent: str, tasks: int, trials: int, skill: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for t in range(tasks):
        difficulty = rng.random()
        for k in range(trials):
            ok = rng.random() < skill * (1.2 - difficulty)
            records.append({"agent": agent, "task": f"t{t}", "trial": k, "ok": ok,
                            "tin": rng.randint(5_000, 40_000), "tout": rng.randint(500, 5_000),
                            "steps": rng.randint(2, 20), "lat": rng.lognormvariate(2.5, 0.6),
                            "category": f"c{t % 7}"})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args()

    records_a = make_records("A", args.tasks, args.trials, 0.6, 1)
    records_b = make_records("B", args.tasks, args.trials, 0.65, 2)
    traces_a = [validate(r) for r in records_a]
    traces_b = [validate(r) for r in records_b]
    prices = PriceMap.load()

    start = time.perf_counter()
    report = compare(group_trials("A", traces_a, prices), group_trials("B", traces_b, prices),
                     slice_by=["category"], n_resamples=args.resamples)
    seconds = time.perf_counter() - start

    start = time.perf_counter()
    baseline = pure_report.report(records_a, records_b, resamples=args.resamples)
    baseline_seconds = time.perf_counter() - start

    same = (abs(report["agents"]["A"]["success"]["rate"] - baseline["A"]["success"]) < 1e-12
            and report["mcnemar"]["b"] == baseline["mcnemar"]["b"]
            and abs(report["agents"]["B"]["pass_hat_k"]["4"] - baseline["B"]["pass_hat_k"][4]) < 1e-12)
    print(f"compare report, {args.tasks} tasks x {args.trials} trials x 2 agents, {args.resamples} resamples")
    print(f"  fleetmon (numpy)     {seconds:8.3f} s")
    print(f"  pure Python baseline {baseline_seconds:8.3f} s")
    print(f"  ratio                {baseline_seconds / seconds:8.1f} x   point estimates agree: {same}")
    print(json.dumps({"bench": "stats", "tasks": args.tasks, "trials": args.trials, "resamples": args.resamples,
                      "seconds": round(seconds, 4), "baseline_seconds": round(baseline_seconds, 3),
                      "ratio": round(baseline_seconds / seconds, 1), "point_estimates_agree": same}))


if __name__ == "__main__":
    main()
