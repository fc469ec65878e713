"""The compare report as one self-contained HTML page: verdict, tables and four plotly plots (pure).

Self-contained: plotly.js is inlined (``plotly.offline.get_plotlyjs()``), so the
page draws with no network at view time and references no URL. The figures'
JSON sits in a ``<script type="application/json">`` block with ``<``, ``>`` and
``&`` written as ``\\u003c`` ``\\u003e`` ``\\u0026``, so no data can close the
script element; user text in the page is ``html.escape``-d, and in the plots
escaped once more for plotly's label markup (:mod:`monitor.offline.render.figures`).

Each plot is drawn into ``<div class="fm-plot" id=...>``; when plotly has drawn
it the div gets ``data-rendered="true"``, and if drawing fails the div shows
the error (and gets ``data-rendered="error"``) rather than staying blank.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from monitor.offline.render.figures import forest, frontier, grid, pass_k
from monitor.offline.render.sections import SECTIONS, Dialect, Lines, title, verdict
from monitor.offline.render.view import View, pct, view

__all__ = ["render_html"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:16px 24px;color:#1b1b1b}
h1{font-size:22px;margin:8px 0 12px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
ul.verdict{font-size:15px;padding-left:18px}ul.verdict li{margin:3px 0}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f5f5f5}td.l,th.l{text-align:left}td.c{text-align:center}
p.note,p.caption{color:#555;font-size:12px;margin:4px 0 12px}p.missing{color:#777;font-style:italic}
.fm-plot{width:100%;min-height:200px}.fm-plot[data-rendered="error"]{color:#b00020;white-space:pre-wrap}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}div.scroll{overflow-x:auto}td{white-space:nowrap}
.icon{font-weight:700}.better,.pass{color:#1a7f37}.worse,.fail{color:#cf222e}.warning{color:#bf8700}
.no-clear-difference,.not-compared{color:#8c959f}
"""

_DRAW = """
(function () {
  var figures = JSON.parse(document.getElementById("fm-figures").textContent);
  function fail(el, err) {
    el.setAttribute("data-rendered", "error");
    el.textContent = "This plot could not be drawn: " + (err && err.message ? err.message : String(err));
  }
  Object.keys(figures).forEach(function (id) {
    var el = document.getElementById(id), fig = figures[id];
    try {
      Plotly.newPlot(el, fig.data, fig.layout, {displaylogo: false, responsive: true})
        .then(function () { el.setAttribute("data-rendered", "true"); }, function (err) { fail(el, err); });
    } catch (err) { fail(el, err); }
  });
})();
"""


_TAGS = re.compile(r"<[^>]*>")
_MARKS = {"pass": "✔", "fail": "✘", "warning": "▲"}


def _esc(text: Any) -> str:
    return html.escape(" ".join(str(text).split()))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> Lines:
    align = align or "l" + "r" * (len(header) - 1)
    head = "".join(f'<th class="{a}">{h}</th>' for a, h in zip(align, header))
    body = ["<tr>" + "".join(f'<td class="{a}">{cell}</td>' for a, cell in zip(align, row)) + "</tr>" for row in rows]
    return [f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>', *body, "</tbody></table></div>"]


HTML = Dialect(
    esc=_esc,
    strong=lambda text: f"<b>{text}</b>",
    heading=lambda text: [f"<h2>{text}</h2>"],
    bullets=lambda items: ["<ul>", *(f"<li>{item}</li>" for item in items), "</ul>"],
    table=_table,
    note=lambda text: [f'<p class="note">{text}</p>'],
    details=lambda summary, body, is_open: [f"<details{' open' if is_open else ''}><summary>{summary}</summary>",
                                            *body, "</details>"],
    icon=lambda word: f'<span class="icon {word.replace(" ", "-")}">{_MARKS.get(word, "●")}</span>',
)


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no '<', '>' or '&' left to end it or open a comment."""
    return json.dumps(value, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _plots(v: View) -> tuple[Lines, dict[str, Any]]:
    """The plot sections (a div per plot, or a note saying what the report lacks) and the figures by div id."""
    out: Lines = []
    data: dict[str, Any] = {}
    outcome_grid = grid(v)
    plan = (("frontier", "Cost–success frontier", frontier(v), "",
             "success with its interval against cost per trial; the frontier joins the agents no other beats on "
             "both", "no agent has both a success rate and a cost per trial above 0"),
            ("forest", "Per-slice differences", forest(v), "",
             "candidate − baseline on each slice's common tasks, with intervals; red: opposite sign of the "
             "overall difference", "this report has no per-slice paired tests (slice_comparisons)"),
            ("pass-k", "pass@k and pass^k against k", pass_k(v), "",
             "pass@k (solid): at least one of k trials succeeds; pass^k (dashed): all k do",
             "this report has pass@k / pass^k for fewer than two values of k (one trial per task gives k = 1 "
             "only)"),
            ("grid", "Task × agent outcomes", outcome_grid[0] if outcome_grid else None,
             outcome_grid[1] if outcome_grid else "",
             "success fraction of each task; ▲ a task the candidate solves and the baseline does not, ✕ the reverse",
             "this report has no per-task outcomes (task_outcomes)"))
    for key, plot_title, fig, caption, note, missing in plan:
        out.append(f"<h2>{plot_title}</h2>")
        if fig is None:
            out.append(f'<p class="missing">Not shown: {missing}.</p>')
            continue
        div = f"plot-{key}"
        data[div] = json.loads(fig.to_json())
        out += [f'<div class="fm-plot" id="{div}"></div>',
                f'<p class="caption">{_esc(caption) + "; " if caption else ""}{note}.</p>']
    return out, data


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page (module notes); raises ValueError naming a key the report cannot do without."""
    from plotly.offline import get_plotlyjs

    v = view(report)
    heading = title(HTML, v)
    page_title = html.escape(html.unescape(_TAGS.sub("", heading)))  # the heading's text, without <b>
    plots, data = _plots(v)
    verdict_list = verdict(HTML, v)
    if verdict_list[:1] == ["<ul>"]:
        verdict_list[0] = '<ul class="verdict">'
    body = [f"<h1>{heading}</h1>", *verdict_list]
    tables: Lines = []
    for section in SECTIONS:
        tables += section(HTML, v)
    footer = (f'<p class="note">Intervals: {pct(v.confidence, 0)}, bootstrap over tasks unless stated; success is '
              "macro (mean over tasks of each task's success fraction) unless labelled micro. "
              "Made by fleetmon compare.</p>")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{page_title}</title>",
        f"<style>{_CSS}</style>", f"<script>{get_plotlyjs()}</script>", "</head>", "<body>",
        *body, *plots, *tables, footer,
        f'<script type="application/json" id="fm-figures">{_script_json(data)}</script>',
        f"<script>{_DRAW}</script>", "</body>", "</html>", ""])
