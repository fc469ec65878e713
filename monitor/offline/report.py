"""Plain-text rendering of a compare report (a pure function of the report dict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.offline.report_sections import added_sections, many_agent_lines, slice_matrix_lines
from monitor.offline.textfmt import _ci, _num, _usd


def render_compare(report: Mapping[str, Any]) -> str:
    """The terminal report: the two-agent table and tests, or the many-agent table; then the added sections."""
    names = list(report.get("agent_order") or [report["baseline"], report["candidate"]])
    if "candidate" in report:
        lines = _two_agent_lines(report)
    else:
        lines = many_agent_lines(report)
    for tag, values in report.get("slices", {}).items():
        lines.append("")
        if len(names) > 3:
            lines += slice_matrix_lines(tag, values, names)
            continue
        lines.append(f"by {tag} (macro success, tasks):")
        key_width = max([len(tag)] + [len(v) for v in values])
        for value, per_agent in values.items():
            cells = [f"{n}: {_num(per_agent[n]['rate'])} ({per_agent[n]['n_tasks']})" if n in per_agent
                     else f"{n}: -" for n in names]
            lines.append("  " + value.ljust(key_width + 2) + "   ".join(cells))
    lines += added_sections(report)
    gate = report.get("gate")
    if gate:
        lines.append("")
        lines.append("gate: " + ("PASSED" if gate["passed"] else "FAILED"))
        for check in gate["checks"]:
            who = f"{check['candidate']}: " if "candidate" not in report and "candidate" in check else ""
            lines.append(f"  [{'FAIL' if check['failed'] else 'ok'}] {who}{check['check']}: {check['detail']}")
    return "\n".join(lines)


def _two_agent_lines(report: Mapping[str, Any]) -> list[str]:
    names = [report["baseline"], report["candidate"]]
    agents = report["agents"]
    width = max(12, *(len(n) for n in names))
    lines = [f"fleetmon compare: baseline {names[0]} vs candidate {names[1]}", ""]
    rows: list[tuple[str, list[str]]] = [
        ("tasks / trials", [f"{agents[n]['n_tasks']} / {agents[n]['n_trials']}" for n in names]),
        ("success (macro)", [f"{_num(agents[n]['success']['rate'])} {_ci(agents[n]['success']['ci'])}"
                             for n in names]),
        ("any-pass (Wilson)", [f"{_num(agents[n]['any_pass']['rate'])} {_ci(agents[n]['any_pass']['ci'])}"
                               for n in names]),
    ]
    for k in agents[names[0]]["pass_at_k"]:
        rows.append((f"pass@{k}", [_num(agents[n]["pass_at_k"].get(k)) for n in names]))
    for k in agents[names[0]]["pass_hat_k"]:
        rows.append((f"pass^{k}", [_num(agents[n]["pass_hat_k"].get(k)) for n in names]))
    rows += [
        ("cost / trial", [_usd(agents[n]["cost_per_trial_usd"]) for n in names]),
        ("cost / solved", [f"{_usd(agents[n]['cost_per_solved_usd'])} {_ci(agents[n]['cost_per_solved_ci'], '.4f')}"
                           for n in names]),
        ("latency p50/p95/p99 s", ["/".join(_num(agents[n]["latency_s"][q], ".1f") for q in ("p50", "p95", "p99"))
                                   for n in names]),
        ("steps (solved, mean)", [_num(agents[n]["steps_solved_mean"], ".1f") for n in names]),
        ("tokens (solved, mean)", [_num(agents[n]["tokens_solved_mean"], ".0f") for n in names]),
        ("harmful-action rate", [_num(agents[n]["harmful_action_rate"]) for n in names]),
    ]
    label_width = max(len(r[0]) for r in rows)
    col = max(width, *(len(v) for _, vals in rows for v in vals))
    lines.append(" " * (label_width + 2) + "  ".join(n.ljust(col) for n in names))
    for label, values in rows:
        lines.append(label.ljust(label_width + 2) + "  ".join(v.ljust(col) for v in values))
    lines.append("")
    lines.append(f"tasks in common: {report['n_common_tasks']} (only baseline {report['only_baseline_tasks']}, "
                 f"only candidate {report['only_candidate_tasks']})")
    m = report.get("mcnemar")
    if m:
        lines.append(f"McNemar (task solved when success >= 0.5): b={m['b']} (baseline only), "
                     f"c={m['c']} (candidate only), discordant {m['n_discordant']}, "
                     f"exact p={_num(m['p_exact'], '.4g')}, "
                     f"chi2={_num(m['chi2'], '.2f')} (p={_num(m['p_chi2'], '.4g')}), "
                     f"net flip {_num(m['net_flip'], '+.3f')}")
    boot = report.get("bootstrap")
    if boot:
        s, c = boot["success_diff"], boot["cost_diff"]
        lines.append(f"paired bootstrap over tasks ({boot['n_resamples']} resamples, candidate - baseline):")
        lines.append(f"  success  {_num(s['point'], '+.3f')} {_ci(s['ci'], '+.3f')}  p={_num(s['p'], '.4g')}")
        lines.append(f"  cost/trial {'+' if c['point'] >= 0 else '-'}${abs(c['point']):.4f} "
                     f"[{_num(c['ci'][0], '+.4f')}, {_num(c['ci'][1], '+.4f')}]  p={_num(c['p'], '.4g')}")
    lines.append("")
    lines.append("Pareto: " + report["pareto"])
    lines.append("Iso-cost: " + report["iso_cost"])
    lines.append("Iso-success: " + report["iso_success"])
    return lines
