"""A straightforward pure-Python implementation of the compare report (the bench baseline).

Loops and the standard library only, no numpy: the same statistics as
monitor.offline.compare (macro success with a bootstrap CI over tasks, any-pass
Wilson, pass@k / pass^k, cost per trial and per solved with CI, latency
percentiles, McNemar, paired bootstraps of success and cost differences).
"""

from __future__ import annotations

import math
import random
from math import comb


def wilson(s, n, z=1.959963984540054):
    if n == 0:
        return 0.0, 1.0
    p = s / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def percentile(values, q):
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def quantile_ci(draws, confidence=0.95):
    d = sorted(x for x in draws if math.isfinite(x))
    tail = (1 - confidence) / 2
    return percentile(d, tail), percentile(d, 1 - tail)


def group(traces, price):
    tasks = {}
    for t in traces:
        row = tasks.setdefault(t["task"], {"n": 0, "c": 0, "cost": 0.0, "lat": []})
        row["n"] += 1
        row["c"] += t["ok"]
        row["cost"] += (t["tin"] * price[0] + t["tout"] * price[1]) / 1e6
        row["lat"].append(t["lat"])
    return tasks


def agent_block(tasks, ks, resamples, rng):
    ids = list(tasks)
    rates = [tasks[i]["c"] / tasks[i]["n"] for i in ids]
    boot_rate, boot_cps = [], []
    for _ in range(resamples):
        s = cost = succ = 0.0
        for _ in ids:
            row = tasks[ids[rng.randrange(len(ids))]]
            s += row["c"] / row["n"]
            cost += row["cost"]
            succ += row["c"]
        boot_rate.append(s / len(ids))
        boot_cps.append(cost / succ if succ else math.inf)
    any_pass = sum(1 for i in ids if tasks[i]["c"] > 0)
    total_cost = sum(tasks[i]["cost"] for i in ids)
    total_succ = sum(tasks[i]["c"] for i in ids)
    trials = sum(tasks[i]["n"] for i in ids)
    lat = [x for i in ids for x in tasks[i]["lat"]]
    return {
        "success": sum(rates) / len(rates), "success_ci": quantile_ci(boot_rate),
        "any_pass": any_pass / len(ids), "any_pass_ci": wilson(any_pass, len(ids)),
        "pass_at_k": {k: sum(1 - comb(tasks[i]["n"] - tasks[i]["c"], k) / comb(tasks[i]["n"], k)
                             for i in ids) / len(ids) for k in ks},
        "pass_hat_k": {k: sum(comb(tasks[i]["c"], k) / comb(tasks[i]["n"], k) for i in ids) / len(ids) for k in ks},
        "cost_per_trial": total_cost / trials, "cost_per_solved": total_cost / total_succ if total_succ else math.inf,
        "cost_per_solved_ci": quantile_ci(boot_cps),
        "latency": {q: percentile(lat, q) for q in (0.5, 0.95, 0.99)},
    }


def report(base_traces, cand_traces, ks=(1, 2, 4), resamples=10_000, seed=0, price=(3.0, 15.0)):
    rng = random.Random(seed)
    a, b = group(base_traces, price), group(cand_traces, price)
    out = {"A": agent_block(a, ks, resamples, rng), "B": agent_block(b, ks, resamples, rng)}
    common = [t for t in a if t in b]
    solved_a = {t: a[t]["c"] / a[t]["n"] >= 0.5 for t in common}
    solved_b = {t: b[t]["c"] / b[t]["n"] >= 0.5 for t in common}
    bb = sum(1 for t in common if solved_a[t] and not solved_b[t])
    cc = sum(1 for t in common if solved_b[t] and not solved_a[t])
    n_disc = bb + cc
    p_exact = min(1.0, 2 * sum(comb(n_disc, i) for i in range(min(bb, cc) + 1)) / 2 ** n_disc) if n_disc else 1.0
    out["mcnemar"] = {"b": bb, "c": cc, "p_exact": p_exact,
                      "chi2": (max(abs(bb - cc) - 1, 0) ** 2 / n_disc) if n_disc else 0.0}
    sd, cd = [], []
    for _ in range(resamples):
        s = ca = cb = na = nb = 0.0
        for _ in common:
            t = common[rng.randrange(len(common))]
            s += b[t]["c"] / b[t]["n"] - a[t]["c"] / a[t]["n"]
            ca += a[t]["cost"]
            cb += b[t]["cost"]
            na += a[t]["n"]
            nb += b[t]["n"]
        sd.append(s / len(common))
        cd.append(cb / nb - ca / na)
    out["success_diff_ci"] = quantile_ci(sd)
    out["cost_diff_ci"] = quantile_ci(cd)
    return out
