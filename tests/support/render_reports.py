"""Compare reports for the renderers: the many-agent shape (H1's keys) built from seeded data, hostile names included.

``many_agent_report`` is a dict in the shape ``fleetmon compare --json`` prints
for several agents (``agent_order``, ``comparisons``, ``frontier``,
``reliability``, ``slice_comparisons``, ``task_outcomes``, ``gate``). Its
figures are computed from seeded per-task outcomes with plain numpy (they are
not the product's statistics, only inputs to draw): the renderers are tested on
what they show, not on how the numbers were made.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tests.support.paths import ROOT

#: Names that would break out of Markdown or HTML if they were not escaped.
HOSTILE_AGENT = '<script>alert("agent")</script>'
MARKDOWN_AGENT = "a|b*_[x](javascript:alert(1))` @octocat"
HOSTILE_SLICE = "</td><img src=x onerror=alert(1)>"
AGENTS = ("baseline-v1", HOSTILE_AGENT, MARKDOWN_AGENT, "cheap-mini")


def legacy_report() -> dict[str, Any]:
    """The two-agent report of the compare demo, as ``fleetmon compare --json`` printed it (golden file)."""
    data: dict[str, Any] = json.loads((ROOT / "tests/support/compare_golden/demo_AB.json").read_text())
    return data


def _ci(values: np.ndarray, rng: np.random.Generator, resamples: int = 200) -> list[float]:
    draws = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    return [float(x) for x in np.quantile(draws, [0.025, 0.975])]


def many_agent_report(n_tasks: int = 60, trials: int = 4, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    ability = {"baseline-v1": 0.0, HOSTILE_AGENT: 0.6, MARKDOWN_AGENT: -0.4, "cheap-mini": -1.0}
    cost = {"baseline-v1": 0.40, HOSTILE_AGENT: 0.55, MARKDOWN_AGENT: 0.30, "cheap-mini": 0.05}
    difficulty = rng.normal(0.0, 1.5, n_tasks)
    tags = [("code" if i % 3 else HOSTILE_SLICE) for i in range(n_tasks)]
    tasks = [f"task-{i:03d}" for i in range(n_tasks)]
    fractions = {}
    for a in AGENTS:
        p = 1.0 / (1.0 + np.exp(-(ability[a] - difficulty)))
        fractions[a] = rng.binomial(trials, p) / trials
    agents: dict[str, Any] = {}
    for a in AGENTS:
        f = fractions[a]
        rate = float(f.mean())
        per_k = {str(k): {"point": float(np.mean(f ** k)), "ci": _ci(f ** k, rng)} for k in (1, 2, 4)}
        at_k = {str(k): {"point": float(np.mean(1 - (1 - f) ** k)), "ci": _ci(1 - (1 - f) ** k, rng)}
                for k in (1, 2, 4)}
        agents[a] = {
            "n_tasks": n_tasks, "n_trials": n_tasks * trials,
            "success": {"rate": rate, "ci": _ci(f, rng), "unit": "task (macro)", "method": "bootstrap over tasks"},
            "success_micro": {"rate": rate, "ci": _ci(f, rng), "unit": "trial (micro)"},
            "pass_at_k": {k: v["point"] for k, v in at_k.items()},
            "pass_hat_k": {k: v["point"] for k, v in per_k.items()},
            "reliability": {"pass_at_k": at_k, "pass_hat_k": per_k,
                            "consistency": {"point": float(np.mean((2 * f - 1) ** 2)),
                                            "ci": _ci((2 * f - 1) ** 2, rng)},
                            "variance": {"icc": 0.6, "design_effect": 2.8}},
            "score": {"mean": rate + 0.05, "ci": [rate, rate + 0.1], "gap": {"point": 0.05, "ci": [0.02, 0.08]}},
            "cost_usd": cost[a] * n_tasks * trials, "cost_per_trial_usd": cost[a],
            "cost_per_solved_usd": cost[a] / rate if rate else "inf", "cost_per_solved_ci": [cost[a], 2 * cost[a]],
            "latency_s": {"p50": 10.0, "p95": 40.0, "p99": 60.0}, "harmful_action_rate": 0.0,
        }
    base = fractions["baseline-v1"]
    comparisons, slice_tests = {}, {}
    for a in AGENTS[1:]:
        diff = fractions[a] - base
        solved_b, solved_c = base >= 0.5, fractions[a] >= 0.5
        ci = _ci(diff, rng)
        comparisons[a] = {
            "n_common_tasks": n_tasks, "only_baseline_tasks": 0, "only_candidate_tasks": 0,
            "mcnemar": {"b": int((solved_b & ~solved_c).sum()), "c": int((~solved_b & solved_c).sum()), "n": n_tasks,
                        "p_exact": 0.03, "net_flip": float(np.mean(solved_c) - np.mean(solved_b))},
            "bootstrap": {"confidence": 0.95,
                          "success_diff": {"point": float(diff.mean()), "ci": ci, "p": 0.01 if ci[0] > 0 or ci[1] < 0
                                           else 0.5},
                          "cost_diff": {"point": cost[a] - cost["baseline-v1"], "ci": [-0.01, 0.01], "p": 0.5},
                          "cost_per_solved_ratio": {"point": 1.1, "ci": [0.9, 1.3]}},
            "p_adjusted": {"mcnemar": 0.06, "success": 0.02 if ci[0] > 0 or ci[1] < 0 else 0.6},
        }
        per_value = {}
        for value in sorted(set(tags)):
            idx = np.array([t == value for t in tags])
            d = diff[idx]
            per_value[value] = {"n_common_tasks": int(idx.sum()), "diff": {"point": float(d.mean()),
                                                                           "ci": _ci(d, rng), "p": 0.2},
                                "p_adjusted": 0.4, "opposite_sign": bool(np.sign(d.mean()) != np.sign(diff.mean()))}
        slice_tests[a] = per_value
    # A planted Simpson case: the slice moves against the overall difference.
    planted = slice_tests[MARKDOWN_AGENT][HOSTILE_SLICE]
    planted["diff"] = {"point": 0.04, "ci": [-0.05, 0.13], "p": 0.4}
    planted["opposite_sign"] = True
    slices = {"category": {value: {a: {"rate": float(fractions[a][[t == value for t in tags]].mean()),
                                       "n_tasks": tags.count(value), "ci": [0.1, 0.9]} for a in AGENTS}
                           for value in sorted(set(tags))}}
    frontier = sorted((a for a in AGENTS if a != MARKDOWN_AGENT), key=lambda a: cost[a])
    return {
        "baseline": "baseline-v1", "agent_order": list(AGENTS), "adjust": "bh", "confidence": 0.95,
        "success_threshold": 1.0, "agents": agents, "comparisons": comparisons,
        "frontier": frontier, "frontier_probability": {a: (0.9 if a in frontier else 0.1) for a in AGENTS},
        "frontier_statements": [{"from": frontier[0], "to": frontier[1],
                                 "iso_cost": f"{frontier[1]} costs more than {frontier[0]} <b>for</b> more success",
                                 "iso_success": f"{frontier[0]} is cheaper | than {frontier[1]}"}],
        "slices": slices, "slice_comparisons": {"category": slice_tests},
        "task_outcomes": {"task_ids": tasks, "success": {a: fractions[a].tolist() for a in AGENTS},
                          "flipped": {a: [t for t, x, y in zip(tasks, base, fractions[a]) if (x >= 0.5) != (y >= 0.5)]
                                      for a in AGENTS[1:]}},
        "gate": {"passed": False, "reasons": [f"{HOSTILE_AGENT}: success drop beyond 0.02"],
                 "checks": [{"check": "max_success_drop", "failed": True, "candidate": HOSTILE_AGENT,
                             "detail": "drop <b>3</b> points"}]},
    }
