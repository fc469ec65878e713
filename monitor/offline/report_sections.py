"""Text sections of a compare report beyond the two-agent table: many agents, score, reliability, frontier, slices.

Pure functions of the report dict (the one ``--format json`` prints), as
:mod:`monitor.offline.report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.offline.textfmt import _ci, _num, _usd


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return out


def many_agent_lines(report: Mapping[str, Any]) -> list[str]:
    """One row per agent, then each comparison with the baseline (adjusted p-values)."""
    names = list(report["agent_order"])
    agents = report["agents"]
    lines = [f"fleetmon compare: {len(names)} agents, baseline {report['baseline']} "
             f"(p-values adjusted: {report['adjust']})", ""]
    rows = []
    for n in names:
        a = agents[n]
        rows.append([n, f"{a['n_tasks']}/{a['n_trials']}",
                     f"{_num(a['success']['rate'])} {_ci(a['success']['ci'])}",
                     _num(a["success_micro"]["rate"]), _usd(a["cost_per_trial_usd"]),
                     _usd(a["cost_per_solved_usd"]),
                     _num(report.get("frontier_probability", {}).get(n), ".2f")])
    rows = [[f"#{i}", *row] for i, row in enumerate(rows, 1)]
    lines += _table(["#", "agent", "tasks/trials", "success (macro) CI", "micro", "cost/trial", "cost/solved",
                     "P(frontier)"], rows)
    lines.append("")
    lines.append("vs baseline (candidate - baseline, paired over common tasks):")
    rows = []
    for n, block in report["comparisons"].items():
        boot, m = block.get("bootstrap"), block.get("mcnemar")
        if not boot or not m:
            rows.append([n, "0", "-", "-", "-", "-", "-"])
            continue
        s = boot["success_diff"]
        rows.append([n, str(block["n_common_tasks"]), f"{_num(s['point'], '+.3f')} {_ci(s['ci'], '+.3f')}",
                     _num(s["p"], ".3g"), _num(block["p_adjusted"]["success"], ".3g"),
                     f"{m['b']}/{m['c']}", _num(block["p_adjusted"]["mcnemar"], ".3g")])
    lines += _table(["candidate", "common", "success diff CI", "p", "p adj", "McNemar b/c", "McNemar p adj"], rows)
    return lines


def slice_matrix_lines(tag: str, values: Mapping[str, Any], names: list[str]) -> list[str]:
    """Many agents: one row per slice value, one column per agent (#i as in the agent table)."""
    header = [tag, "tasks", *(f"#{i}" for i in range(1, len(names) + 1))]
    rows = []
    for value, per_agent in values.items():
        n_tasks = max((cell["n_tasks"] for cell in per_agent.values()), default=0)
        rows.append([value, str(n_tasks), *(_num(per_agent[n]["rate"], ".2f") if n in per_agent else "-"
                                            for n in names)])
    return [f"by {tag} (macro success):"] + ["  " + line for line in _table(header, rows)]


def _score_lines(report: Mapping[str, Any], names: list[str]) -> list[str]:
    rows = []
    for n in names:
        score = report["agents"][n].get("score")
        if score:
            rows.append([n, f"{_num(score['mean'])} {_ci(score['ci'])}", _num(score["success_rate"]),
                         f"{_num(score['gap']['point'], '+.3f')} {_ci(score['gap']['ci'], '+.3f')}"])
    if not rows:
        return []
    threshold = report.get("success_threshold", 1.0)
    return ["", f"graded score (macro; success = score >= {threshold:g}):"] + [
        "  " + line for line in _table(["agent", "mean score CI", "strict success", "gap (almost worked) CI"], rows)]


def _reliability_lines(report: Mapping[str, Any], names: list[str]) -> list[str]:
    first = report["agents"][names[0]]["reliability"]
    ks = list(first["pass_hat_k"])
    rows = []
    for n in names:
        rel = report["agents"][n]["reliability"]
        v = rel["variance"]
        cells = [n]
        for k in ks:
            entry = rel["pass_hat_k"].get(k)
            cells.append(f"{_num(entry['point'])} {_ci(entry['ci'])}" if entry else "-")
        cells += [_num(rel["consistency"]["point"]), _num(v["icc"]), _num(v["design_effect"], ".2f"),
                  _ci(v["pooled_trial_ci"]), _ci(v["design_adjusted_ci"])]
        rows.append(cells)
    header = ["agent", *(f"pass^{k} CI" for k in ks), "consistency", "ICC", "deff", "pooled-trial CI",
              "design-adjusted CI"]
    return ["", "reliability (bootstrap over tasks; ICC = share of variance between tasks, deff = design effect):"] \
        + ["  " + line for line in _table(header, rows)]


def _frontier_lines(report: Mapping[str, Any]) -> list[str]:
    frontier = report.get("frontier") or []
    probability = report.get("frontier_probability", {})
    lines = ["", "cost-success frontier (cost per trial, macro success): "
             + ", ".join(f"{n} (P={_num(probability.get(n), '.2f')})" for n in frontier)]
    for statement in report.get("frontier_statements", []):
        lines.append(f"  {statement['from']} -> {statement['to']}: {statement['iso_cost']}")
        lines.append(f"  {' ' * len(statement['from'])}    {statement['iso_success']}")
    return lines


def _slice_test_lines(report: Mapping[str, Any]) -> list[str]:
    """Per candidate and tag, the paired slice tests; with many agents only the flagged or significant rows."""
    lines: list[str] = []
    alpha = 1 - report.get("confidence", 0.95)
    several = len(report.get("comparisons", {})) > 1
    for tag, per_candidate in report.get("slice_comparisons", {}).items():
        for cand, rows in per_candidate.items():
            if several:
                rows = {v: r for v, r in rows.items()
                        if r["opposite_sign"] or (r["p_adjusted"] is not None and r["p_adjusted"] < alpha)}
            if not rows:
                continue
            lines += ["", f"by {tag}, {cand} - {report['baseline']} (paired success diff, p adjusted across "
                      f"{tag} values, ! = opposite sign to overall):"]
            table = [[value, str(row["n_common_tasks"]),
                      f"{_num(row['diff']['point'], '+.3f')} {_ci(row['diff']['ci'], '+.3f')}",
                      _num(row["diff"]["p"], ".3g"), _num(row["p_adjusted"], ".3g"),
                      "!" if row["opposite_sign"] else ""] for value, row in rows.items()]
            lines += ["  " + line for line in _table([tag, "tasks", "diff CI", "p", "p adj", ""], table)]
    return lines


def _change_lines(report: Mapping[str, Any]) -> list[str]:
    """Per candidate: what changed against the baseline (the version tuple) and the smallest detectable drop."""
    lines: list[str] = [""]
    for cand, block in report.get("comparisons", {}).items():
        changed = block.get("changed") or []
        lines.append(f"{cand} vs {report['baseline']}: changed: {', '.join(changed) if changed else 'none'}"
                     + (f"  (confounded: {len(changed)} components differ)" if len(changed) > 1 else ""))
        mde = block.get("minimum_detectable_effect") or {}
        if mde.get("effect") is not None:
            lines.append(f"  smallest drop these {mde['n_tasks']} tasks detect at {mde['power']:.0%} power "
                         f"(exact McNemar, alpha {mde['alpha']:g}): {100 * mde['effect']:.1f} points")
        elif mde:
            lines.append(f"  no drop is detectable at {mde['power']:.0%} power with these {mde['n_tasks']} tasks")
    return lines if len(lines) > 1 else []


def added_sections(report: Mapping[str, Any]) -> list[str]:
    """Score, reliability, frontier, per-slice tests and what changed, for any number of agents."""
    names = list(report.get("agent_order") or report["agents"])
    return (_score_lines(report, names) + _reliability_lines(report, names) + _frontier_lines(report)
            + _slice_test_lines(report) + _change_lines(report))
