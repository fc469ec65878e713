"""A straightforward pure-Python ``fleetmon compare`` (the whole-process baseline of bench/compare_bench.py).

Standard library only, no numpy: reads the JSONL files (json.loads, a plain field-by-field check of
every record), groups trials by task and computes the same report as ``fleetmon compare A B
--slice-by category --json`` for compact pass/fail logs: per agent macro and micro success, any-pass
(Wilson), pass@k / pass^k with bootstrap CIs, consistency, the random-effects variance split, cost
per trial / per solved with CI, latency quantiles; per candidate McNemar and paired bootstraps
(success, cost, harmful, cost-per-solved ratio, p95 latency on 1,000 resamples); per slice the CI
and the paired difference with BH-adjusted p; the frontier with its bootstrap probability. Each
bootstrap draws its task indices once per resample and accumulates every sum in that one pass —
the obvious way to write it, not a deliberately slow one.

    python bench/pure_compare.py A.jsonl B.jsonl [--resamples 10000]   # prints one JSON line
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from math import comb

PRICE = (3.0, 15.0)  # USD per million input / output tokens (the bundled map's "*" entry)
KS = (1, 2, 4)
FIELDS_INT = ("tin", "tout", "tin_cached", "steps", "trial")


def check(record: dict, where: str) -> None:
    for key in ("agent", "task"):
        if not isinstance(record.get(key), str) or not record[key] or len(record[key]) > 256:
            raise ValueError(f"{where}: {key} must be a non-empty string")
    if not isinstance(record.get("ok"), bool):
        raise ValueError(f"{where}: ok must be true or false")
    for key in FIELDS_INT:
        value = record.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10**12:
            raise ValueError(f"{where}: {key} must be an integer >= 0")
    for key in ("lat", "fees"):
        value = record.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{where}: {key} must be a finite number >= 0")
    for key, value in record.items():
        if key not in ("agent", "task", "ok", "lat", "fees", *FIELDS_INT) and not isinstance(value, (str, int, float)):
            raise ValueError(f"{where}: tag {key} must be a scalar")


def load(path: str) -> dict:
    tasks: dict[str, dict] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            check(record, f"{path} line {number}")
            row = tasks.setdefault(record["task"], {"n": 0, "c": 0, "cost": 0.0, "harm": 0, "lat": [],
                                                    "tag": str(record.get("category", "(none)"))})
            row["n"] += 1
            row["c"] += record["ok"]
            row["harm"] += bool(record.get("harmful_action", False))
            row["cost"] += (record.get("tin", 0) * PRICE[0] + record.get("tout", 0) * PRICE[1]) / 1e6 \
                + record.get("fees", 0.0)
            if "lat" in record:
                row["lat"].append(float(record["lat"]))
    return tasks


def percentile(values: list, q: float) -> float:
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def ci(draws: list) -> tuple:
    d = [x for x in draws if math.isfinite(x)]
    return (percentile(d, 0.025), percentile(d, 0.975)) if d else (math.nan, math.nan)


def p_value(draws: list) -> float:
    d = [x for x in draws if math.isfinite(x)]
    return min(1.0, 2 * min(sum(x <= 0 for x in d), sum(x >= 0 for x in d)) / len(d)) if d else math.nan


def wilson(s: int, n: int, z: float = 1.959963984540054) -> tuple:
    p = s / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def bh(ps: list) -> list:
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, ps[i] * m / rank)
        out[i] = running
    return out


def agent_block(tasks: dict, resamples: int, rng: random.Random) -> dict:
    ids = list(tasks)
    n = len(ids)
    rows = [tasks[i] for i in ids]
    rates = [r["c"] / r["n"] for r in rows]
    at = {k: [1 - comb(r["n"] - r["c"], k) / comb(r["n"], k) for r in rows] for k in KS}
    hat = {k: [comb(r["c"], k) / comb(r["n"], k) for r in rows] for k in KS}
    cons = [(2 * p - 1) ** 2 for p in rates]
    tags = sorted({r["tag"] for r in rows})
    draws: dict = {key: [] for key in ("rate", "micro", "cps", "cons", *(f"at{k}" for k in KS),
                                       *(f"hat{k}" for k in KS), *(f"s:{t}" for t in tags))}
    for _ in range(resamples):
        s_rate = s_c = s_n = s_cost = s_cons = 0.0
        s_at = dict.fromkeys(KS, 0.0)
        s_hat = dict.fromkeys(KS, 0.0)
        s_tag = {t: [0.0, 0] for t in tags}
        for _ in range(n):
            j = rng.randrange(n)
            r = rows[j]
            s_rate += rates[j]
            s_c += r["c"]
            s_n += r["n"]
            s_cost += r["cost"]
            s_cons += cons[j]
            for k in KS:
                s_at[k] += at[k][j]
                s_hat[k] += hat[k][j]
            cell = s_tag[r["tag"]]
            cell[0] += rates[j]
            cell[1] += 1
        draws["rate"].append(s_rate / n)
        draws["micro"].append(s_c / s_n)
        draws["cps"].append(s_cost / s_c if s_c else math.inf)
        draws["cons"].append(s_cons / n)
        for k in KS:
            draws[f"at{k}"].append(s_at[k] / n)
            draws[f"hat{k}"].append(s_hat[k] / n)
        for t in tags:
            draws[f"s:{t}"].append(s_tag[t][0] / s_tag[t][1] if s_tag[t][1] else math.nan)
    trials = sum(r["n"] for r in rows)
    successes = sum(r["c"] for r in rows)
    cost = sum(r["cost"] for r in rows)
    grand = successes / trials
    msb = sum(r["n"] * (r["c"] / r["n"] - grand) ** 2 for r in rows) / (n - 1)
    msw = sum(r["c"] - r["c"] ** 2 / r["n"] for r in rows) / (trials - n)
    n0 = (trials - sum(r["n"] ** 2 for r in rows) / trials) / (n - 1)
    between = max(0.0, (msb - msw) / n0)
    icc = between / (between + msw) if between + msw > 0 else math.nan
    lat = [x for r in rows for x in r["lat"]]
    any_pass = sum(1 for r in rows if r["c"] > 0)
    return {
        "success": sum(rates) / n, "success_ci": ci(draws["rate"]), "micro": grand, "micro_ci": ci(draws["micro"]),
        "any_pass": any_pass / n, "any_pass_ci": wilson(any_pass, n),
        "pass_at_k": {k: (sum(at[k]) / n, ci(draws[f"at{k}"])) for k in KS},
        "pass_hat_k": {k: (sum(hat[k]) / n, ci(draws[f"hat{k}"])) for k in KS},
        "consistency": (sum(cons) / n, ci(draws["cons"])),
        "icc": icc, "design_effect": 1 + (trials / n - 1) * icc,
        "cost_per_trial": cost / trials, "cost_per_solved": cost / successes, "cps_ci": ci(draws["cps"]),
        "latency": {q: percentile(lat, q) for q in (0.5, 0.95, 0.99)},
        "slices": {t: ci(draws[f"s:{t}"]) for t in tags},
    }


def paired(a: dict, b: dict, resamples: int, rng: random.Random) -> dict:
    common = [t for t in a if t in b]
    n = len(common)
    ra = [a[t]["c"] / a[t]["n"] for t in common]
    rb = [b[t]["c"] / b[t]["n"] for t in common]
    solved_a = [x >= 0.5 for x in ra]
    solved_b = [x >= 0.5 for x in rb]
    bb = sum(1 for x, y in zip(solved_a, solved_b) if x and not y)
    cc = sum(1 for x, y in zip(solved_a, solved_b) if y and not x)
    disc = bb + cc
    p_exact = min(1.0, 2 * sum(comb(disc, i) for i in range(min(bb, cc) + 1)) / 2 ** disc) if disc else 1.0
    tags = sorted({a[t]["tag"] for t in common})
    sd, cd, hd, ratio = [], [], [], []
    sl: dict = {t: [] for t in tags}
    for _ in range(resamples):
        s = ca = cb = na = nb = sa = sb = ha = hb = 0.0
        st = {t: [0.0, 0] for t in tags}
        for _ in range(n):
            j = rng.randrange(n)
            ta, tb = a[common[j]], b[common[j]]
            d = rb[j] - ra[j]
            s += d
            ca += ta["cost"]
            cb += tb["cost"]
            na += ta["n"]
            nb += tb["n"]
            sa += ta["c"]
            sb += tb["c"]
            ha += ta["harm"] / ta["n"]
            hb += tb["harm"] / tb["n"]
            cell = st[ta["tag"]]
            cell[0] += d
            cell[1] += 1
        sd.append(s / n)
        cd.append(cb / nb - ca / na)
        hd.append((hb - ha) / n)
        ratio.append((cb / sb) / (ca / sa) if sa and sb else math.nan)
        for t in tags:
            sl[t].append(st[t][0] / st[t][1] if st[t][1] else math.nan)
    p95 = []
    for _ in range(min(resamples, 1000)):
        la, lb = [], []
        for _ in range(n):
            j = rng.randrange(n)
            la += a[common[j]]["lat"]
            lb += b[common[j]]["lat"]
        p95.append(percentile(lb, 0.95) - percentile(la, 0.95))
    slice_p = [p_value(sl[t]) for t in tags]
    return {"mcnemar": {"b": bb, "c": cc, "p_exact": p_exact}, "success_diff": (sum(rb) / n - sum(ra) / n, ci(sd),
            p_value(sd)), "cost_diff_ci": ci(cd), "harmful_ci": ci(hd), "ratio_ci": ci(ratio),
            "p95_ci": ci(p95), "slices": {t: (ci(sl[t]), p, q) for t, p, q in zip(tags, slice_p, bh(slice_p))}}


def frontier_probability(agents: dict, resamples: int, rng: random.Random) -> dict:
    union = list(dict.fromkeys(t for tasks in agents.values() for t in tasks))
    hits = dict.fromkeys(agents, 0)
    for _ in range(resamples):
        sums = {name: [0.0, 0, 0.0, 0] for name in agents}
        for _ in range(len(union)):
            task = union[rng.randrange(len(union))]
            for name, tasks in agents.items():
                row = tasks.get(task)
                if row is not None:
                    cell = sums[name]
                    cell[0] += row["c"] / row["n"]
                    cell[1] += 1
                    cell[2] += row["cost"]
                    cell[3] += row["n"]
        points = {name: (s[2] / s[3], s[0] / s[1]) for name, s in sums.items() if s[1]}
        for name, (cost, success) in points.items():
            if not any((c <= cost and s >= success and (c < cost or s > success))
                       for other, (c, s) in points.items() if other != name):
                hits[name] += 1
    return {name: count / resamples for name, count in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("baseline")
    parser.add_argument("candidate")
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(0)
    a, b = load(args.baseline), load(args.candidate)
    out = {"A": agent_block(a, args.resamples, rng), "B": agent_block(b, args.resamples, rng),
           "paired": paired(a, b, args.resamples, rng),
           "frontier_probability": frontier_probability({"A": a, "B": b}, args.resamples, rng)}
    json.dump(out, sys.stdout, default=str)
    print()


if __name__ == "__main__":
    main()
