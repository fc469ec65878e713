"""Planning bench: how long ``fleetmon power``'s two computations take, and what they answer, over a grid of drops.

Run: ``.venv/bin/python bench/power_bench.py [--runs R]``. For each drop (70%
baseline, 21% discordance, the validity bench's traffic) it times the exact
McNemar sample size (:func:`monitor.stats.power.tasks_needed`) and the seeded
live simulation (:func:`alerts.planning.simulate_live_test`, R runs at the
default policy's success level and floor), in this process, after one warm-up
call. Prints a table, then as its LAST line one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from alerts.planning import live_level, simulate_live_test
from alerts.policy import Policy
from monitor.stats.power import paired_cells, tasks_needed

BASELINE, DISCORDANCE = 0.7, 0.21
DROPS = (0.10, 0.05, 0.03, 0.025)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    policy = Policy()
    level, floor = live_level(policy), policy.floors.success_points
    tasks_needed(BASELINE, 0.1, DISCORDANCE)  # warm-up: imports and first calls
    simulate_live_test(*paired_cells(BASELINE, 0.1, DISCORDANCE), floor, level, runs=2)
    figures: dict[str, object] = {"bench": "power", "runs": args.runs, "baseline_rate": BASELINE,
                                  "discordance": DISCORDANCE, "level": level, "floor": floor}
    print(f"{'drop':>6} {'tasks':>8} {'tasks_s':>8} {'median pairs':>13} {'p80 pairs':>10} {'live_s':>7}")
    for drop in DROPS:
        t0 = time.perf_counter()
        n = tasks_needed(BASELINE, drop, DISCORDANCE)
        t1 = time.perf_counter()
        plan = simulate_live_test(*paired_cells(BASELINE, drop, DISCORDANCE), floor, level, runs=args.runs)
        t2 = time.perf_counter()
        key = f"drop{round(drop * 1000):03d}"
        figures.update({f"{key}_tasks": n, f"{key}_tasks_seconds": round(t1 - t0, 4),
                        f"{key}_median_pairs": plan.median_pairs, f"{key}_p80_pairs": plan.p80_pairs,
                        f"{key}_live_seconds": round(t2 - t1, 3)})
        print(f"{drop:>6.3f} {n:>8} {t1 - t0:>8.3f} {plan.median_pairs:>13,.0f} {plan.p80_pairs:>10,.0f} "
              f"{t2 - t1:>7.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
