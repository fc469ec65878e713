"""Benchmark: ``fleetmon compare`` as a whole process (start, import, load, validate, report, print).

Writes synthetic compact trial logs (two agents, TASKS x TRIALS each, a ``category`` tag), then times

* ``fleetmon compare A.jsonl B.jsonl --slice-by category --json`` as a subprocess (median of --runs),
* ``bench/pure_compare.py A.jsonl B.jsonl`` — a straightforward pure-Python implementation of the same
  report, also a whole process (once; it is slow),

checks that their point estimates agree, and measures the scaling curve (total trials -> seconds) of
the fleetmon command up to 1,000,000 trials. Wall and CPU seconds are both reported: on a shared
machine the wall time depends on the neighbours (the load average is recorded), the CPU time much
less. Prints a table; the last line is one JSON object.

    python bench/compare_bench.py [--tasks 2000] [--trials 8] [--runs 3] [--scaling 10000,...] [--skip-pure]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_log(path: Path, agent: str, tasks: int, trials: int, skill: float, seed: int) -> None:
    rng = random.Random(seed)
    with path.open("w") as handle:
        for t in range(tasks):
            difficulty = random.Random(t).random()
            for k in range(trials):
                record = {"agent": agent, "task": f"t{t}", "trial": k, "ok": rng.random() < skill * (1.2 - difficulty),
                          "tin": rng.randint(5_000, 40_000), "tout": rng.randint(500, 5_000),
                          "steps": rng.randint(2, 20), "lat": round(rng.lognormvariate(2.5, 0.6), 3),
                          "category": f"c{t % 7}"}
                handle.write(json.dumps(record) + "\n")


def timed(command: list[str]) -> tuple[float, str]:
    """Wall seconds of a subprocess and its stdout; its CPU seconds go to CPU_SECONDS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, done.stdout


#: CPU seconds (user + system) of each timed subprocess, in order: on a shared machine the wall
#: time depends on the neighbours, the CPU time much less.
CPU_SECONDS: list[float] = []


def fleetmon(a: Path, b: Path, resamples: int) -> list[str]:
    return [sys.executable, "-m", "monitor.cli", "compare", str(a), str(b), "--slice-by", "category", "--json",
            "--resamples", str(resamples)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scaling", default="10000,32000,100000,320000,1000000",
                        help="total trials (both agents) for the scaling curve; empty to skip")
    parser.add_argument("--skip-pure", action="store_true", help="do not run the pure-Python baseline")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        a, b = Path(folder) / "A.jsonl", Path(folder) / "B.jsonl"
        write_log(a, "A", args.tasks, args.trials, 0.6, 1)
        write_log(b, "B", args.tasks, args.trials, 0.65, 2)
        runs = []
        for _ in range(args.runs):
            seconds, out = timed(fleetmon(a, b, args.resamples))
            runs.append(seconds)
        report = json.loads(out)
        seconds = statistics.median(runs)
        cpu = statistics.median(CPU_SECONDS)
        print(f"fleetmon compare, {args.tasks} tasks x {args.trials} trials x 2 agents, {args.resamples} resamples")
        shown = ", ".join(f"{r:.2f}" for r in runs)
        print(f"  whole process   {seconds:8.2f} s wall, {cpu:.2f} s CPU  (runs: {shown})")
        result = {"bench": "compare", "tasks": args.tasks, "trials": args.trials, "resamples": args.resamples,
                  "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3), "runs": [round(r, 3) for r in runs],
                  "load_average": round(os.getloadavg()[0], 2)}
        if not args.skip_pure:
            pure_seconds, pure_out = timed([sys.executable, "bench/pure_compare.py", str(a), str(b),
                                            "--resamples", str(args.resamples)])
            pure = json.loads(pure_out)
            pure_cpu = CPU_SECONDS[-1]
            agree = (abs(report["agents"]["A"]["success"]["rate"] - pure["A"]["success"]) < 1e-12
                     and abs(report["agents"]["B"]["success_micro"]["rate"] - pure["B"]["micro"]) < 1e-12
                     and abs(report["agents"]["B"]["reliability"]["pass_hat_k"]["4"]["point"]
                             - pure["B"]["pass_hat_k"]["4"][0]) < 1e-12
                     and abs(report["agents"]["A"]["reliability"]["variance"]["icc"] - pure["A"]["icc"]) < 1e-9
                     and report["mcnemar"]["b"] == pure["paired"]["mcnemar"]["b"]
                     and report["mcnemar"]["c"] == pure["paired"]["mcnemar"]["c"])
            print(f"  pure Python     {pure_seconds:8.2f} s wall, {pure_cpu:.2f} s CPU")
            print(f"  ratio           {pure_seconds / seconds:8.1f} x wall, {pure_cpu / cpu:.1f} x CPU   "
                  f"point estimates agree: {agree}")
            result.update(pure_seconds=round(pure_seconds, 2), pure_cpu_seconds=round(pure_cpu, 2),
                          ratio=round(pure_seconds / seconds, 1), cpu_ratio=round(pure_cpu / cpu, 1),
                          point_estimates_agree=agree)
        curve = []
        for total in [int(x) for x in args.scaling.split(",") if x.strip()]:
            tasks = max(1, total // (2 * args.trials))
            write_log(a, "A", tasks, args.trials, 0.6, 1)
            write_log(b, "B", tasks, args.trials, 0.65, 2)
            seconds, _ = timed(fleetmon(a, b, args.resamples))
            curve.append({"trials": 2 * tasks * args.trials, "tasks_per_agent": tasks, "seconds": round(seconds, 2),
                          "cpu_seconds": round(CPU_SECONDS[-1], 2)})
            print(f"  scaling: {2 * tasks * args.trials:>9,} trials ({tasks:,} tasks/agent)  {seconds:7.2f} s wall, "
                  f"{CPU_SECONDS[-1]:6.2f} s CPU")
        result["scaling"] = curve
    print(json.dumps(result))


if __name__ == "__main__":
    main()
