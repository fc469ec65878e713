"""The four plots of the HTML report, as plotly figures built from a :class:`~monitor.offline.render.view.View`.

Each builder returns a ``plotly.graph_objects.Figure`` (validated by plotly)
or None when the report lacks what the plot needs. Text that plotly draws
(agent names, slice values, task ids) is HTML-escaped first, because plotly
reads a subset of HTML in labels: escaped, ``<b>`` shows as ``<b>``.

- **frontier**: success (macro, with its interval) against cost per trial, the
  frontier agents joined cheapest first; hover shows each agent's bootstrap
  probability of being on the frontier. Past eight agents only the frontier
  and the baseline are labelled on the plot. Not drawn when no agent costs
  anything (inputs without token counts or fees).
- **forest**: per-slice paired differences (candidate − baseline, points) with
  their intervals, under each candidate's overall difference (◆); slices whose
  difference has the opposite sign of the overall one in red. Up to
  ``MAX_FOREST_CANDIDATES`` candidates side by side, else one at a time from a
  drop-down.
- **pass_k**: pass@k (solid) and pass^k (dashed) against k, with intervals when
  the report has them.
- **grid**: task × agent success fraction (``task_outcomes.task_ids`` /
  ``success``); a task a candidate flips against the baseline
  (``task_outcomes.flipped``, else: solved by exactly one of them, success
  fraction >= ``solved_threshold``, default 0.5) is marked ▲ (gained) or ✕
  (lost). At most ``MAX_GRID_TASKS`` tasks: every flipped one first, the rest
  evenly spaced.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.colors import qualitative

from monitor.offline.render.view import View, get

__all__ = ["MAX_FOREST_CANDIDATES", "MAX_GRID_TASKS", "forest", "frontier", "grid", "pass_k"]

MAX_GRID_TASKS = 400
MAX_FOREST_CANDIDATES = 4
_FLAGGED = "#e63946"
_ALL_LABELS = 8  # more agents than this: only the frontier and the baseline are labelled (all have hover text)
_FOREST_COLORS = ("#1d3557", "#2a9d8f", "#8338ec", "#b68100")  # no red: red marks the opposite-sign slices
_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 30, "b": 50}, "hovermode": "closest",
           "font": {"size": 12}}


def _label(text: Any) -> str:
    return html.escape(str(text), quote=False)  # plotly decodes &lt; &gt; &amp; only


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(value) else None


def _ci(ci: Any) -> tuple[float, float] | None:
    if isinstance(ci, Sequence) and not isinstance(ci, str) and len(ci) == 2:
        low, high = _num(ci[0]), _num(ci[1])
        if low is not None and high is not None:
            return low, high
    return None


def _errors(points: Sequence[float], cis: Sequence[tuple[float, float] | None], scale: float = 1.0) -> dict[str, Any]:
    """plotly ``error_*`` of asymmetric intervals (0 where an interval is missing)."""
    plus = [max(0.0, (ci[1] - p) * scale) if ci else 0.0 for p, ci in zip(points, cis)]
    minus = [max(0.0, (p - ci[0]) * scale) if ci else 0.0 for p, ci in zip(points, cis)]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.2}


def frontier(v: View) -> go.Figure | None:
    rows = []
    for a in v.agents:
        x, y = _num(get(v.summaries, a, "cost_per_trial_usd")), _num(get(v.summaries, a, "success", "rate"))
        if x is not None and y is not None:
            rows.append((a, x, y, _ci(get(v.summaries, a, "success", "ci")),
                         _ci(get(v.summaries, a, "cost_per_trial_ci"))))
    if not rows or max(r[1] for r in rows) <= 0.0:  # no costs in the inputs: nothing to trade off
        return None
    on = v.report.get("frontier")
    on_frontier = [str(a) for a in on] if isinstance(on, Sequence) and not isinstance(on, str) else []
    given = v.report.get("frontier_probability")
    probs: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    fig = go.Figure()
    line = sorted((r for r in rows if r[0] in on_frontier), key=lambda r: r[1])
    if len(line) > 1:
        fig.add_trace(go.Scatter(x=[r[1] for r in line], y=[100 * r[2] for r in line], mode="lines",
                                 line={"color": "#2a9d8f", "width": 2}, name="frontier", hoverinfo="skip"))
    for inside, name, color in ((True, "on the frontier", "#2a9d8f"), (False, "dominated", "#8d99ae")):
        group = [r for r in rows if (r[0] in on_frontier) == inside]
        if not group:
            continue
        hover = [f"<b>{_label(r[0])}</b><br>success {100 * r[2]:.1f}%<br>cost/trial ${r[1]:.4f}"
                 + (f"<br>P(frontier) {100 * float(probs[r[0]]):.0f}%" if _num(probs.get(r[0])) is not None else "")
                 for r in group]
        fig.add_trace(go.Scatter(
            x=[r[1] for r in group], y=[100 * r[2] for r in group], mode="markers+text", name=name,
            text=[_label(r[0]) if len(rows) <= _ALL_LABELS or r[0] in on_frontier or r[0] == v.baseline else ""
                  for r in group], customdata=[_label(r[0]) for r in group],
            textposition="top center", hovertext=hover, hoverinfo="text",
            marker={"size": 10, "color": color}, error_y=_errors([r[2] for r in group], [r[3] for r in group], 100),
            error_x=_errors([r[1] for r in group], [r[4] for r in group])))
    costs = [r[1] for r in rows if r[1] > 0]
    log_x = bool(costs) and max(costs) / min(costs) > 20
    fig.update_layout(**_LAYOUT, height=460, xaxis={"title": {"text": "cost per trial (USD)"},
                                                    "type": "log" if log_x else "linear"},
                      yaxis={"title": {"text": "success, macro over tasks (%)"}})
    return fig


def forest(v: View) -> go.Figure | None:
    """One trace per candidate over the rows "overall" and "tag = value"; with more than
    ``MAX_FOREST_CANDIDATES`` candidates one is shown at a time, picked from a drop-down."""
    tests = v.report.get("slice_comparisons")
    if not isinstance(tests, Mapping):
        return None
    traces = []
    for i, c in enumerate(v.candidates):
        rows = [("overall", get(v.comparisons.get(c), "bootstrap", "success_diff"), False)]
        rows += [(f"{tag} = {value}", get(t, "diff"), bool(get(t, "opposite_sign")))
                 for tag, per in tests.items() for value, t in (get(per, c) or {}).items() if isinstance(t, Mapping)]
        kept = [(label, _num(get(d, "point")), _ci(get(d, "ci")), flag) for label, d, flag in rows
                if _num(get(d, "point")) is not None]
        if len(kept) < 2:  # the overall difference alone is not a forest
            continue
        color = _FOREST_COLORS[i % len(_FOREST_COLORS)]
        points = [float(p) for _, p, _, _ in kept if p is not None]
        traces.append(go.Scatter(
            x=[100 * p for p in points], y=[_label(label) if label != "overall" else "<b>overall</b>"
                                            for label, _, _, _ in kept],
            mode="markers", name=_label(c), error_x=_errors(points, [ci for _, _, ci, _ in kept], 100),
            marker={"size": 9, "symbol": ["diamond" if label == "overall" else "square" for label, *_ in kept],
                    "color": [_FLAGGED if flag else color for *_, flag in kept]},
            hovertemplate=f"{_label(c)}<br>%{{y}}<br>%{{x:+.1f}} pp<extra></extra>"))
    if not traces:
        return None
    shown = len(traces) if len(traces) <= MAX_FOREST_CANDIDATES else 1
    for i, trace in enumerate(traces):
        trace.visible = i < shown
    fig = go.Figure(traces)
    n_rows = len(traces[0].y)
    layout: dict[str, Any] = {}
    if shown < len(traces):
        layout["updatemenus"] = [{"type": "dropdown", "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom",
                                  "buttons": [{"label": t.name, "method": "update",
                                               "args": [{"visible": [j == i for j in range(len(traces))]}]}
                                              for i, t in enumerate(traces)]}]
    fig.add_vline(x=0, line={"color": "#555", "dash": "dot"})
    fig.update_layout(**_LAYOUT, **layout, height=140 + int(24 * n_rows * max(1.0, 0.6 * shown)),
                      scattermode="group", legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
                      xaxis={"title": {"text": "success difference, candidate − baseline (points)"}},
                      yaxis={"autorange": "reversed", "automargin": True, "type": "category"})
    return fig


def pass_k(v: View) -> go.Figure | None:
    fig = go.Figure()
    palette = qualitative.Dark24  # 24 distinct colours; more agents than that repeat them
    for i, a in enumerate(v.agents):
        color = palette[i % len(palette)]
        for key, dash, word in (("pass_at_k", "solid", "pass@k"), ("pass_hat_k", "dash", "pass^k")):
            ks, ys, cis = [], [], []
            for k in v.ks(key):
                point, ci = v.pass_k(a, key, k)
                if k.isdigit() and _num(point) is not None:
                    ks.append(int(k))
                    ys.append(float(point))
                    cis.append(_ci(ci))
            if ks:
                fig.add_trace(go.Scatter(x=ks, y=[100 * y for y in ys], mode="lines+markers",
                                         name=f"{_label(a)} {word}", legendgroup=_label(a),
                                         line={"color": color, "dash": dash}, error_y=_errors(ys, cis, 100)))
    if not any(len(trace.x) >= 2 for trace in fig.data):  # a curve needs two k (one trial per task gives k = 1)
        return None
    fig.update_layout(**_LAYOUT, height=420, xaxis={"title": {"text": "k (trials)"}, "type": "log", "dtick": 0.30103},
                      yaxis={"title": {"text": "share of tasks (%)"}, "range": [0, 102]})
    return fig


def _grid_columns(n_tasks: int, flipped: set[int]) -> list[int]:
    if n_tasks <= MAX_GRID_TASKS:
        return list(range(n_tasks))
    chosen = sorted(flipped)[:MAX_GRID_TASKS]
    rest = [i for i in range(n_tasks) if i not in flipped]
    room = MAX_GRID_TASKS - len(chosen)
    if room > 0 and rest:
        chosen += [rest[round(j * (len(rest) - 1) / max(room - 1, 1))] for j in range(min(room, len(rest)))]
    return sorted(set(chosen))


def grid(v: View) -> tuple[go.Figure, str] | None:
    """The outcome grid and a caption (how many tasks, flips, what was left out), or None without task outcomes."""
    outcomes = v.report.get("task_outcomes")
    tasks, success = get(outcomes, "task_ids"), get(outcomes, "success")
    if not isinstance(tasks, Sequence) or not isinstance(success, Mapping) or not tasks:
        return None
    threshold = _num(get(outcomes, "solved_threshold"))
    threshold = 0.5 if threshold is None else threshold
    agents = [a for a in v.agents if isinstance(success.get(a), Sequence)]
    if not agents:
        return None
    values = {a: [_num(x) for x in success[a]] + [None] * (len(tasks) - len(success[a])) for a in agents}
    base = values.get(v.baseline)
    given = get(outcomes, "flipped")
    column_of = {str(t): i for i, t in enumerate(tasks)}
    flips: dict[str, dict[int, bool]] = {}  # candidate -> task index -> gained?
    for a in agents:
        if a == v.baseline or base is None:
            continue
        listed = get(given, a)
        if isinstance(listed, Sequence) and not isinstance(listed, str):  # the report's own flips
            indices = [column_of[str(t)] for t in listed if str(t) in column_of]
        else:
            indices = [i for i, (x, y) in enumerate(zip(base, values[a]))
                       if x is not None and y is not None and (x >= threshold) != (y >= threshold)]
        flips[a] = {i: (values[a][i] or 0.0) >= threshold for i in indices}
    flipped = {i for per in flips.values() for i in per}
    columns = _grid_columns(len(tasks), flipped)
    names = [_label(tasks[i]) for i in columns]
    fig = go.Figure(go.Heatmap(
        z=[[values[a][i] for i in columns] for a in agents], x=names, y=[_label(a) for a in agents],
        zmin=0, zmax=1, colorscale="RdYlGn", colorbar={"title": {"text": "success"}},
        hovertemplate="task %{x}<br>%{y}<br>success %{z:.2f}<extra></extra>", xgap=1, ygap=1))
    for gained, symbol, word in ((True, "triangle-up", "gained"), (False, "x", "lost")):
        cells = [(i, a) for a in flips for i in columns if i in flips[a] and flips[a][i] == gained]
        xs, ys = [_label(tasks[i]) for i, _ in cells], [_label(a) for _, a in cells]
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"flipped: {word}",
                                     marker={"symbol": symbol, "size": 8, "color": "#111",
                                             "line": {"width": 1, "color": "#fff"}},
                                     hovertemplate=f"task %{{x}}<br>%{{y}}: {word}<extra></extra>"))
    fig.update_layout(**_LAYOUT, height=160 + 40 * len(agents), legend={"orientation": "h", "y": -0.15},
                      xaxis={"title": {"text": "task"}, "showticklabels": len(columns) <= 60, "type": "category"},
                      yaxis={"autorange": "reversed", "automargin": True, "type": "category"})
    n_flips = sum(len(per) for per in flips.values())
    caption = (f"{len(tasks)} tasks × {len(agents)} agents; {n_flips} flips against the baseline on "
               f"{len(flipped)} tasks (solved = success ≥ {threshold:g})")
    if len(columns) < len(tasks):
        caption += f"; showing {len(columns)} tasks: every flipped one first, the rest evenly spaced"
    return fig, caption
