"""The statistics issue 14 adds to the report, each against a direct computation from the raw trials.

The references rebuild every figure from the records with plain loops (math.comb, np.quantile of the
expanded resample, statsmodels' multipletests, pareto_frontier per resample) on the same bootstrap
draws (``resample_counts`` with the report's seed), so they check the report's arithmetic, not its luck.
"""

import math
from collections import defaultdict

import numpy as np
import pytest
from scipy.stats import norm
from statsmodels.stats.multitest import multipletests

from monitor.offline.compare import compare_many
from monitor.offline.loaders import read_trials
from monitor.offline.trials import group_trials
from monitor.pricing import PriceMap
from monitor.stats.pareto import Point, pareto_frontier
from monitor.stats.resample import resample_counts
from tests.support.compare_data import trial_records, write_jsonl

R, SEED, CONF = 400, 3, 0.95


def _ci(draws):
    finite = draws[np.isfinite(draws)]
    return list(np.quantile(finite, [0.025, 0.975]))


def _p(draws):
    finite = draws[np.isfinite(draws)]
    return min(1.0, 2 * min(float(np.mean(finite <= 0)), float(np.mean(finite >= 0))))


def _counts(n):
    return np.vstack(list(resample_counts(n, R, SEED)))


def _by_task(records, threshold=1.0):
    tasks = defaultdict(list)
    for r in records:
        score = r.get("score")
        ok = r["ok"] if "ok" in r else score >= threshold
        tasks[r["task"]].append((float(ok), score if score is not None else float(ok), r))
    return tasks


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stats")
    a = trial_records("A", tasks=30, trials=4, skill=0.55, seed=1, score=True, harmful_rate=0.05, refusal_rate=0.1)
    b = trial_records("B", tasks=30, trials=4, skill=0.7, seed=2, score=True, latency_scale=1.5, cost_scale=2,
                      harmful_rate=0.1, refusal_rate=0.3)
    b = [r for r in b if r["task"] not in ("t3", "t17")]  # B skips two tasks
    c = trial_records("C", tasks=30, trials=4, skill=0.5, seed=3, cost_scale=0.5)
    prices = PriceMap.load()
    agents, records = [], {}
    for name, rows in (("A", a), ("B", b), ("C", c)):
        traces, scores = read_trials(write_jsonl(folder / f"{name}.jsonl", rows), success_threshold=0.8)
        agents.append(group_trials(name, traces, prices, scores))
        records[name] = rows
    report = compare_many(agents, ks=(1, 2, 4), slice_by=["category"], n_resamples=R, seed=SEED,
                          success_threshold=0.8)
    return report, records, agents


def test_micro_success_score_and_gap(setup):
    report, records, _ = setup
    block = report["agents"]["A"]
    tasks = _by_task(records["A"], 0.8)
    ids = list(tasks)
    succ = np.array([sum(t[0] for t in tasks[i]) for i in ids])
    trials = np.array([len(tasks[i]) for i in ids], float)
    score = np.array([sum(t[1] for t in tasks[i]) / len(tasks[i]) for i in ids])
    W = _counts(len(ids))
    assert block["success_micro"]["rate"] == pytest.approx(succ.sum() / trials.sum(), rel=1e-12)
    assert block["success_micro"]["ci"] == pytest.approx(_ci((W @ succ) / (W @ trials)), rel=1e-9)
    s = block["score"]
    assert s["mean"] == pytest.approx(score.mean(), rel=1e-12)
    assert s["ci"] == pytest.approx(_ci(W @ score / len(ids)), rel=1e-9)
    assert s["success_rate"] == pytest.approx(np.mean(succ / trials), rel=1e-12)
    gap = score - succ / trials
    assert s["gap"]["point"] == pytest.approx(gap.mean(), rel=1e-9, abs=1e-12)
    assert s["gap"]["ci"] == pytest.approx(_ci(W @ gap / len(ids)), rel=1e-9, abs=1e-12)
    assert report["agents"]["C"]["score"] is None  # C carries no scores


def test_pass_hat_k_intervals_consistency_and_variance(setup):
    report, records, _ = setup
    tasks = _by_task(records["C"])
    ids = list(tasks)
    n = [len(tasks[i]) for i in ids]
    c = [int(sum(t[0] for t in tasks[i])) for i in ids]
    W = _counts(len(ids))
    rel = report["agents"]["C"]["reliability"]
    for k in (1, 2, 4):
        hat = np.array([math.comb(ci, k) / math.comb(ni, k) for ni, ci in zip(n, c)])
        at = np.array([1 - math.comb(ni - ci, k) / math.comb(ni, k) for ni, ci in zip(n, c)])
        assert rel["pass_hat_k"][str(k)]["point"] == pytest.approx(hat.mean(), rel=1e-12, abs=1e-15)
        assert rel["pass_hat_k"][str(k)]["ci"] == pytest.approx(_ci(W @ hat / len(ids)), rel=1e-9, abs=1e-12)
        assert rel["pass_at_k"][str(k)]["ci"] == pytest.approx(_ci(W @ at / len(ids)), rel=1e-9, abs=1e-12)
    p = np.array(c) / np.array(n)
    assert rel["consistency"]["point"] == pytest.approx(np.mean((2 * p - 1) ** 2), rel=1e-12)
    # one-way ANOVA written out over the trials
    outcomes = [[t[0] for t in tasks[i]] for i in ids]
    total = sum(n)
    grand = sum(map(sum, outcomes)) / total
    msb = sum(len(o) * (np.mean(o) - grand) ** 2 for o in outcomes) / (len(ids) - 1)
    msw = sum(sum((y - np.mean(o)) ** 2 for y in o) for o in outcomes) / (total - len(ids))
    n0 = (total - sum(x * x for x in n) / total) / (len(ids) - 1)
    between = max(0.0, (msb - msw) / n0)
    icc = between / (between + msw)
    v = rel["variance"]
    assert v["icc"] == pytest.approx(icc, rel=1e-9)
    assert v["design_effect"] == pytest.approx(1 + (total / len(ids) - 1) * icc, rel=1e-9)
    half = norm.ppf(0.975) * math.sqrt(grand * (1 - grand) / total)
    assert v["pooled_trial_ci"] == pytest.approx([grand - half, grand + half], rel=1e-9)
    wide = half * math.sqrt(v["design_effect"])
    assert v["design_adjusted_ci"] == pytest.approx([grand - wide, grand + wide], rel=1e-9)


def test_paired_score_latency_and_over_refusal(setup):
    report, records, _ = setup
    ta, tb = _by_task(records["A"], 0.8), _by_task(records["B"], 0.8)
    common = [t for t in ta if t in tb]
    W = _counts(len(common))
    boot = report["comparisons"]["B"]["bootstrap"]
    d = np.array([np.mean([x[1] for x in tb[t]]) - np.mean([x[1] for x in ta[t]]) for t in common])
    assert boot["score_diff"]["point"] == pytest.approx(d.mean(), rel=1e-9)
    assert boot["score_diff"]["ci"] == pytest.approx(_ci(W @ d / len(common)), rel=1e-9)
    over = {name: (np.array([sum(x[2]["refused"] for x in tasks[t]) for t in common], float),
                   np.array([len(tasks[t]) for t in common], float)) for name, tasks in (("A", ta), ("B", tb))}
    draws = (W @ over["B"][0]) / (W @ over["B"][1]) - (W @ over["A"][0]) / (W @ over["A"][1])
    assert boot["over_refusal_diff"]["ci"] == pytest.approx(_ci(draws), rel=1e-9)
    # p95 latency: pooled trials of the drawn tasks, np.quantile of the expanded multiset
    rows = np.vstack(list(resample_counts(len(common), min(R, 1000), SEED)))
    lat = {name: [(i, x[2]["lat"]) for i, t in enumerate(common) for x in tasks[t]]
           for name, tasks in (("A", ta), ("B", tb))}

    def p95(pairs, row):
        return np.quantile(np.repeat([v for _, v in pairs], [int(row[i]) for i, _ in pairs]), 0.95)

    diffs = np.array([p95(lat["B"], row) - p95(lat["A"], row) for row in rows])
    ratio = np.array([p95(lat["B"], row) / p95(lat["A"], row) for row in rows])
    point = np.percentile([v for _, v in lat["B"]], 95) - np.percentile([v for _, v in lat["A"]], 95)
    got = boot["p95_latency_diff"]
    assert got["point"] == pytest.approx(point, rel=1e-12)
    assert got["ci"] == pytest.approx(_ci(diffs), rel=1e-9)
    assert got["p"] == pytest.approx(_p(diffs))
    assert got["ratio_ci"] == pytest.approx(_ci(ratio), rel=1e-9)


def test_adjusted_p_values_match_statsmodels(setup):
    report, _, _ = setup
    blocks = [report["comparisons"][n] for n in ("B", "C")]
    raw = [b["mcnemar"]["p_exact"] for b in blocks]
    assert [b["p_adjusted"]["mcnemar"] for b in blocks] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))
    raw = [b["bootstrap"]["success_diff"]["p"] for b in blocks]
    assert [b["p_adjusted"]["success"] for b in blocks] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))


def test_frontier_and_its_bootstrap_probability(setup):
    report, _, agents = setup
    points = [Point(a.name, a.cost_usd.sum() / a.n_trials, float(np.mean(a.successes / a.trials))) for a in agents]
    assert report["frontier"] == [p.name for p in pareto_frontier(points)]
    union = list(dict.fromkeys(t for a in agents for t in a.task_ids))
    W = _counts(len(union))
    hits = defaultdict(int)
    for row in W:
        pts = []
        for a in agents:
            w = np.array([row[union.index(t)] for t in a.task_ids])
            if w.sum() == 0:
                continue
            success = float(w @ (a.successes / a.trials) / w.sum())
            pts.append(Point(a.name, float(w @ a.cost_usd / (w @ a.trials)), success))
        for p in pareto_frontier(pts):
            hits[p.name] += 1
    for a in agents:
        assert report["frontier_probability"][a.name] == pytest.approx(hits[a.name] / R)
    pairs = list(zip(report["frontier"], report["frontier"][1:]))
    assert [(s["from"], s["to"]) for s in report["frontier_statements"]] == pairs


def test_slice_intervals_paired_differences_and_adjustment(setup):
    report, records, agents = setup
    a = next(x for x in agents if x.name == "A")
    values = sorted({r["category"] for r in records["A"]})
    W = _counts(len(a.task_ids))
    rates = a.successes / a.trials
    for value in values:
        member = np.array([tags["category"] == value for tags in a.task_tags], float)
        cell = report["slices"]["category"][value]["A"]
        assert cell["ci"] == pytest.approx(_ci((W @ (rates * member)) / (W @ member)), rel=1e-9)
    b = next(x for x in agents if x.name == "B")
    common = [t for t in a.task_ids if t in b.index]
    diff = np.array([b.successes[b.index[t]] / b.trials[b.index[t]] - rates[a.index[t]] for t in common])
    Wc = _counts(len(common))
    rows = report["slice_comparisons"]["category"]["B"]
    raw = []
    for value in values:
        member = np.array([a.task_tags[a.index[t]]["category"] == value for t in common], float)
        with np.errstate(invalid="ignore"):  # a resample without the slice: nan, dropped as in the report
            draws = (Wc @ (diff * member)) / (Wc @ member)
        row = rows[value]
        assert row["diff"]["point"] == pytest.approx(diff[member > 0].mean(), rel=1e-12, abs=1e-15)
        assert row["diff"]["ci"] == pytest.approx(_ci(draws), rel=1e-9, abs=1e-12)
        assert row["diff"]["p"] == pytest.approx(_p(draws))
        assert row["opposite_sign"] == bool(diff[member > 0].mean() * diff.mean() < 0)
        raw.append(row["diff"]["p"])
    assert [rows[v]["p_adjusted"] for v in values] == pytest.approx(list(multipletests(raw, method="fdr_bh")[1]))


def test_simpson_flag_on_a_constructed_reversal(tmp_path):
    """B is better overall (it wins the big slice) but worse on the small one: that slice is flagged."""
    def rows(agent, good_big, good_small):
        out = []
        for t in range(40):
            big = t < 30
            p_ok = good_big if big else good_small
            for k in range(4):
                out.append({"agent": agent, "task": f"t{t}", "trial": k, "ok": (k / 4) < p_ok,
                            "kind": "big" if big else "small"})
        return out
    prices = PriceMap.load()
    agents = []
    for name, big, small in (("A", 0.5, 0.75), ("B", 0.75, 0.25)):
        traces, scores = read_trials(write_jsonl(tmp_path / f"{name}.jsonl", rows(name, big, small)))
        agents.append(group_trials(name, traces, prices, scores))
    report = compare_many(agents, slice_by=["kind"], n_resamples=500)
    rows_b = report["slice_comparisons"]["kind"]["B"]
    assert report["bootstrap"]["success_diff"]["point"] > 0
    assert rows_b["small"]["opposite_sign"] and not rows_b["big"]["opposite_sign"]
    assert rows_b["small"]["diff"]["point"] == pytest.approx(-0.5)


def test_task_outcome_grid_and_flips(setup):
    report, _, agents = setup
    grid = report["task_outcomes"]
    assert grid["task_ids"] == list(dict.fromkeys(t for a in agents for t in a.task_ids))
    b = next(a for a in agents if a.name == "B")
    assert grid["success"]["B"].count(None) == len(grid["task_ids"]) - len(b.task_ids)
    for name, block in report["comparisons"].items():
        assert len(grid["flipped"][name]) == block["mcnemar"]["b"] + block["mcnemar"]["c"]
