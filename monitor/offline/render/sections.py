"""The report's sections — verdict, agents, comparisons, frontier, reliability, slices, gate — for any dialect (pure).

A :class:`Dialect` says how to escape user text and how to write a heading, a
bullet list, a table, a note and a collapsible block; Markdown and HTML each
supply one, so both renderings show the same figures in the same order. Every
cell that holds user text (agent names, slice values, gate reasons, the
sentences that quote them) passes through ``Dialect.esc``. Sections whose keys
the report does not have are left out (empty list).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.offline.render.view import Verdict, View, get, interval, number, p_value, pct, points, usd

__all__ = ["MAX_SLICE_ROWS", "SECTIONS", "TITLE_CANDIDATES", "WIDE_SLICE_CANDIDATES", "Dialect", "title", "verdict"]

MAX_SLICE_ROWS = 50
WIDE_SLICE_CANDIDATES = 3  # more candidates than this: slice tables list only the notable tests
TITLE_CANDIDATES = 3       # more than this: the title counts the candidates instead of naming them
#: Status words a dialect draws as an icon (Markdown: emoji; HTML: a coloured mark).
ICONS = {"better": "🟢", "worse": "🔴", "no clear difference": "⚪", "not compared": "⚪", "pass": "✅", "fail": "❌",
         "warning": "⚠️"}
Lines = list[str]


@dataclass(frozen=True)
class Dialect:
    esc: Callable[[Any], str]                                    # user text -> literal text
    strong: Callable[[str], str]                                 # escaped text -> bold
    heading: Callable[[str], Lines]                              # escaped text -> a section heading
    bullets: Callable[[Sequence[str]], Lines]                    # escaped items -> a list
    table: Callable[[Sequence[str], Sequence[Sequence[str]], str], Lines]  # header, rows, align ("lrr...")
    note: Callable[[str], Lines]                                 # escaped text -> a small paragraph
    details: Callable[[str, Lines, bool], Lines]                 # summary, body, open -> a collapsible block
    icon: Callable[[str], str] = ICONS.__getitem__               # a status word of ICONS -> its mark


def _with_ci(point: str, ci: str) -> str:
    return f"{point} {ci}" if ci else point


def _adjusted(p: Any) -> str:
    return "" if p is None else f" ({p_value(p)})"


def _verdict_item(d: Dialect, v: View, verdict: Verdict) -> str:
    name, base = d.strong(d.esc(verdict.candidate)), d.strong(d.esc(v.baseline))
    if verdict.diff is None:
        return f"{d.icon('not compared')} {name} vs {base}: no paired comparison (no tasks in common)"
    diff = verdict.diff
    p_text = "" if verdict.p is None else (f", p {p_value(verdict.p)}"
                                          + (f" ({d.esc(v.adjust or 'adjusted')})" if verdict.adjusted else ""))
    return (f"{d.icon(verdict.word)} {name} vs {base}: success "
            f"{_with_ci(points(diff.get('point')), interval(diff.get('ci'), 100, 1, True))}{p_text} → "
            f"{d.strong(verdict.word)}")


def title(d: Dialect, v: View) -> str:
    """"fleetmon compare: B, C vs baseline A" (escaped), counting the candidates when there are many."""
    if not v.candidates:
        others = "no candidate"
    elif len(v.candidates) <= TITLE_CANDIDATES:
        others = ", ".join(d.strong(d.esc(c)) for c in v.candidates)
    else:
        others = f"{len(v.candidates)} candidates"
    return f"fleetmon compare: {others} vs baseline {d.strong(d.esc(v.baseline))}"


def verdict(d: Dialect, v: View) -> Lines:
    """The verdict list: the gate, each candidate against the baseline, the frontier, the detectable effect."""
    items = []
    gate = v.report.get("gate")
    if isinstance(gate, Mapping):
        if gate.get("passed"):
            items.append(d.icon("pass") + " " + d.strong("Gate passed"))
        else:
            reasons = [d.esc(r) for r in gate.get("reasons") or []]
            items.append(d.icon("fail") + " " + d.strong("Gate FAILED")
                         + (": " + "; ".join(reasons) if reasons else ""))
    items += [_verdict_item(d, v, x) for x in v.verdicts]
    frontier = v.report.get("frontier")
    if isinstance(frontier, Sequence) and not isinstance(frontier, str) and frontier:
        probs = v.report.get("frontier_probability") or {}
        shown = [d.strong(d.esc(a)) + (f" ({pct(probs.get(a), 0)})" if isinstance(probs, Mapping) and a in probs
                                       else "") for a in frontier]
        items.append("Cost–success frontier (cheapest first; bootstrap probability of being on it): "
                     + ", ".join(shown))
    elif isinstance(v.report.get("pareto"), str):
        items.append(d.esc(v.report["pareto"]))
    mde = v.report.get("minimum_detectable_effect")
    effect = mde.get("effect") if isinstance(mde, Mapping) else mde
    if isinstance(effect, numbers.Real) and not isinstance(effect, bool):
        power = get(mde, "power") or 0.8
        items.append(f"Smallest drop this task set detects at {pct(power, 0)} power (exact McNemar): "
                     f"{points(effect).lstrip('+')}")
    return d.bullets(items)


def agents(d: Dialect, v: View) -> Lines:
    has_micro = any(get(v.summaries, a, "success_micro") for a in v.agents)
    has_score = any(get(v.summaries, a, "score") for a in v.agents)
    header = ["agent", "tasks / trials", "success (macro, task)"]
    header += ["success (micro, trial)"] if has_micro else []
    header += ["mean score", "almost worked"] if has_score else []
    header += ["cost / trial", "cost / solved", "latency p50 / p95 s", "harmful"]
    rows = []
    for a in v.agents:
        s = v.summaries.get(a) or {}
        success = get(s, "success") or {}
        row = [d.strong(d.esc(a)) + (" (baseline)" if a == v.baseline else ""),
               f"{get(s, 'n_tasks') or '-'} / {get(s, 'n_trials') or '-'}",
               _with_ci(pct(success.get("rate")), interval(success.get("ci"), 100))]
        if has_micro:
            row.append(_with_ci(pct(get(s, "success_micro", "rate")), interval(get(s, "success_micro", "ci"), 100)))
        if has_score:
            row += [_with_ci(number(get(s, "score", "mean")), interval(get(s, "score", "ci"), 1, 3)),
                    _with_ci(points(get(s, "score", "gap", "point")).lstrip("+"),
                             interval(get(s, "score", "gap", "ci"), 100))]
        row += [usd(get(s, "cost_per_trial_usd")),
                _with_ci(usd(get(s, "cost_per_solved_usd")), interval(get(s, "cost_per_solved_ci"), 1, 4)),
                f"{number(get(s, 'latency_s', 'p50'), 1)} / {number(get(s, 'latency_s', 'p95'), 1)}",
                pct(get(s, "harmful_action_rate"), 2)]
        rows.append(row)
    return [*d.heading("Agents"), *d.table(header, rows, "")]


def comparisons(d: Dialect, v: View) -> Lines:
    if not v.comparisons:
        return []
    header = ["candidate", "common tasks", "Δ success", "p (adj.)", "McNemar b / c, exact p (adj.)",
              "Δ cost / trial", "cost / solved ×"]
    rows = []
    for c in v.candidates:
        comp = v.comparisons.get(c) or {}
        diff = get(comp, "bootstrap", "success_diff") or {}
        m = get(comp, "mcnemar") or {}
        cost = get(comp, "bootstrap", "cost_diff") or {}
        ratio = get(comp, "bootstrap", "cost_per_solved_ratio") or {}
        rows.append([d.strong(d.esc(c)), str(get(comp, "n_common_tasks") or "-"),
                     _with_ci(points(diff.get("point")), interval(diff.get("ci"), 100, 1, True)),
                     p_value(diff.get("p")) + _adjusted(get(comp, "p_adjusted", "success")),
                     f"{m.get('b', '-')} / {m.get('c', '-')}, {p_value(m.get('p_exact'))}"
                     + _adjusted(get(comp, "p_adjusted", "mcnemar")),
                     _with_ci(number(cost.get("point"), 4, True), interval(cost.get("ci"), 1, 4, True)),
                     _with_ci(number(ratio.get("point"), 2), interval(ratio.get("ci"), 1, 2))])
    note = "Candidate − baseline, paired bootstrap over common tasks"
    note += f"; p adjusted across the comparisons ({d.esc(v.adjust)})." if v.adjust else "."
    return [*d.heading(f"Against the baseline ({d.esc(v.baseline)})"), *d.table(header, rows, ""), *d.note(note)]


def frontier(d: Dialect, v: View) -> Lines:
    statements = v.report.get("frontier_statements")
    items: list[str] = []
    if isinstance(statements, Sequence) and not isinstance(statements, str):
        items = [d.esc(s[key]) for s in statements for key in ("iso_cost", "iso_success")
                 if isinstance(get(s, key), str)]
    else:
        items = [d.esc(v.report[key]) for key in ("iso_cost", "iso_success") if isinstance(v.report.get(key), str)]
    return [*d.heading("Cost–success frontier"), *d.bullets(items)] if items else []


def reliability(d: Dialect, v: View) -> Lines:
    ks_at, ks_hat = v.ks("pass_at_k"), v.ks("pass_hat_k")
    if not ks_at and not ks_hat:
        return []
    has_var = any(get(v.summaries, a, "reliability", "variance") for a in v.agents)
    has_cons = any(get(v.summaries, a, "reliability", "consistency") for a in v.agents)
    header = ["agent", *(f"pass@{k}" for k in ks_at), *(f"pass^{k}" for k in ks_hat)]
    header += (["consistency"] if has_cons else []) + (["ICC", "design effect"] if has_var else [])
    rows = []
    for a in v.agents:
        row = [d.strong(d.esc(a))]
        for key, ks in (("pass_at_k", ks_at), ("pass_hat_k", ks_hat)):
            for k in ks:
                point, ci = v.pass_k(a, key, k)
                row.append(_with_ci(pct(point), interval(ci, 100)))
        if has_cons:
            cons = get(v.summaries, a, "reliability", "consistency") or {}
            row.append(_with_ci(number(cons.get("point")), interval(cons.get("ci"), 1, 3)))
        if has_var:
            var = get(v.summaries, a, "reliability", "variance") or {}
            row += [number(var.get("icc")), number(var.get("design_effect"), 2)]
        rows.append(row)
    return [*d.heading("Reliability"), *d.table(header, rows, ""),
            *d.note("pass@k: at least one of k trials succeeds; pass^k: all k do (per task, averaged over tasks).")]


def _rate_cell(cell: Any) -> str:
    return (_with_ci(pct(get(cell, "rate")), interval(get(cell, "ci"), 100))
            + (f" (n={cell['n_tasks']})" if isinstance(cell, Mapping) and "n_tasks" in cell else ""))


def _diff_cell(d: Dialect, t: Any) -> str:
    if not isinstance(t, Mapping):
        return "-"
    flag = f" {d.icon('warning')} opposite sign" if get(t, "opposite_sign") else ""
    return (_with_ci(points(get(t, "diff", "point")), interval(get(t, "diff", "ci"), 100, 1, True))
            + f", p adj. {p_value(t.get('p_adjusted'))}{flag}")


def _wide_slice_table(d: Dialect, v: View, values: Mapping[str, Any], per_candidate: Mapping[str, Any]) -> Lines:
    """value × (every agent's rate, every candidate's difference): for a few candidates."""
    header = ["value", *(d.esc(a) for a in v.agents), *(f"Δ {d.esc(c)}" for c in per_candidate)]
    rows = [[d.esc(value), *(_rate_cell(get(cells, a)) for a in v.agents),
             *(_diff_cell(d, get(tests, value)) for tests in per_candidate.values())]
            for value, cells in list(values.items())[:MAX_SLICE_ROWS]]
    body = d.table(header, rows, "")
    if len(values) > MAX_SLICE_ROWS:
        body += d.note(f"… and {len(values) - MAX_SLICE_ROWS} more values (see the JSON report).")
    return body


def _p_or_one(p: Any) -> float:
    return float(p) if isinstance(p, numbers.Real) and not isinstance(p, bool) else 1.0


def _long_slice_table(d: Dialect, v: View, values: Mapping[str, Any], per_candidate: Mapping[str, Any]) -> Lines:
    """(value, candidate) rows for many candidates: only the tests significant after adjustment or of
    opposite sign, smallest adjusted p first."""
    found = [(value, c, t) for c, tests in per_candidate.items() for value, t in tests.items()
             if isinstance(t, Mapping) and (t.get("opposite_sign") or (isinstance(t.get("p_adjusted"), numbers.Real)
                                                                       and t["p_adjusted"] <= v.alpha))]
    found.sort(key=lambda row: _p_or_one(row[2].get("p_adjusted")))
    total = sum(len(tests) for tests in per_candidate.values())
    note = (f"{len(found)} of {total} (value, candidate) tests shown: those significant after adjustment "
            f"(p adj. ≤ {v.alpha:g}) or whose difference has the opposite sign of the overall one.")
    if not found:
        return d.note(note)
    rows = [[d.esc(value), d.esc(c), _rate_cell(get(values, value, v.baseline)), _rate_cell(get(values, value, c)),
             _diff_cell(d, t)] for value, c, t in found[:MAX_SLICE_ROWS]]
    header = ["value", "candidate", "baseline rate", "candidate rate", "Δ"]
    body = d.table(header, rows, "llrrr") + d.note(note)
    if len(found) > MAX_SLICE_ROWS:
        body += d.note(f"… and {len(found) - MAX_SLICE_ROWS} more (see the JSON report).")
    return body


def slices(d: Dialect, v: View) -> Lines:
    """Per dimension: a wide table for up to ``WIDE_SLICE_CANDIDATES`` candidates, else the notable tests only."""
    table = v.report.get("slices")
    if not isinstance(table, Mapping) or not table:
        return []
    tests = v.report.get("slice_comparisons")
    tests = tests if isinstance(tests, Mapping) else {}
    out: Lines = []
    for tag, values in table.items():
        if not isinstance(values, Mapping):
            continue
        per_candidate = {c: get(tests, tag, c) for c in v.candidates if isinstance(get(tests, tag, c), Mapping)}
        wide = len(per_candidate) <= WIDE_SLICE_CANDIDATES
        body = (_wide_slice_table if wide else _long_slice_table)(d, v, values, per_candidate)
        summary = f"By {d.esc(tag)} ({len(values)} values, macro success within each)"
        out += d.details(summary, body, len(values) <= 10 or not wide)
    if not out:
        return []
    return [*d.heading("Slices"), *out,
            *d.note("Δ: candidate − baseline on the slice's common tasks; p adjusted across the values of the "
                    f"dimension. {d.icon('warning')} marks a slice whose difference has the opposite sign of the "
                    "overall one.")]


def gate(d: Dialect, v: View) -> Lines:
    checks = get(v.report.get("gate"), "checks")
    if not isinstance(checks, Sequence) or not checks:
        return []
    rows = [[d.icon("fail" if get(c, "failed") else "pass"), d.esc(get(c, "candidate") or "-"),
             d.esc(get(c, "check") or "-"), d.esc(get(c, "detail") or "")] for c in checks]
    return [*d.heading("Gate"), *d.table(["", "candidate", "check", "detail"], rows, "clll")]


#: The sections after the verdict, in reading order.
SECTIONS: tuple[Callable[[Dialect, View], Lines], ...] = (agents, comparisons, frontier, reliability, slices, gate)
