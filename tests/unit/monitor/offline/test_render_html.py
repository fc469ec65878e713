"""The HTML report without a browser: self-contained, escaped, and each plot's data is the report's.

That the page draws in a real browser is tests/integration/test_render_browser.py.
"""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import numpy as np
import pytest

from monitor.offline.render import figures, render
from monitor.offline.render.view import view
from tests.support.render_reports import (
    AGENTS,
    HOSTILE_AGENT,
    HOSTILE_SLICE,
    MARKDOWN_AGENT,
    legacy_report,
    many_agent_report,
)


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in_script = False if tag == "script" else self._in_script

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


@pytest.fixture(scope="module")
def full_page() -> tuple[str, Tags]:
    page = render(many_agent_report(), "html")
    tags = Tags()
    tags.feed(page)
    return page, tags


def test_the_page_needs_no_network(full_page):
    page, tags = full_page
    linked = [(t, a) for t, a in tags.tags for key in ("src", "href", "srcset", "data") if a.get(key)]
    assert linked == []  # nothing to fetch: no src, href, ...
    assert [t for t, _ in tags.tags if t in ("link", "iframe", "object", "embed", "img")] == []
    assert len(tags.scripts) == 3 and len(tags.scripts[0]) > 1_000_000  # plotly.js itself, inline
    assert "@import" not in page and "url(" not in page.split("<script>", 1)[0]


def test_user_text_cannot_become_markup(full_page):
    _, tags = full_page
    assert [t for t, _ in tags.tags].count("script") == 3  # the agent named <script> did not add one
    assert "img" not in [t for t, _ in tags.tags]          # nor the slice value with an <img>
    text = " ".join(" ".join(tags.text).split())
    for name in (HOSTILE_AGENT, MARKDOWN_AGENT, HOSTILE_SLICE):
        assert name in text


def test_the_figure_json_cannot_close_its_script(full_page):
    _, tags = full_page
    block = tags.scripts[1]
    assert "<" not in block and ">" not in block and "&" not in block
    data = json.loads(block)
    assert sorted(data) == ["plot-forest", "plot-frontier", "plot-grid", "plot-pass-k"]
    labels = [name for trace in data["plot-frontier"]["data"] for name in trace.get("text", [])]
    assert html.escape(HOSTILE_AGENT, quote=False) in labels and HOSTILE_AGENT not in labels


def test_missing_inputs_say_what_is_missing_instead_of_a_plot():
    page = render(legacy_report(), "html")
    tags = Tags()
    tags.feed(page)
    plots = [a["id"] for t, a in tags.tags if t == "div" and a.get("class") == "fm-plot"]
    assert plots == ["plot-frontier", "plot-pass-k"]
    text = " ".join(tags.text)
    assert "Not shown: this report has no per-slice paired tests" in text
    assert "Not shown: this report has no per-task outcomes" in text


def test_frontier_points_and_intervals_are_the_report_s():
    report = many_agent_report()
    fig = figures.frontier(view(report))
    drawn = {}
    for trace in fig.data:
        if trace.mode == "markers+text":
            for name, x, y, plus, minus in zip(trace.customdata, trace.x, trace.y, trace.error_y.array,
                                               trace.error_y.arrayminus):
                drawn[html.unescape(name)] = (x, y, y + plus, y - minus, trace.name)
    assert sorted(drawn) == sorted(AGENTS)
    for a in AGENTS:
        s = report["agents"][a]
        x, y, high, low, group = drawn[a]
        assert x == s["cost_per_trial_usd"] and y == pytest.approx(100 * s["success"]["rate"])
        assert (low, high) == pytest.approx((100 * s["success"]["ci"][0], 100 * s["success"]["ci"][1]))
        assert group == ("on the frontier" if a in report["frontier"] else "dominated")


def test_forest_has_every_slice_test_and_each_overall_difference():
    report = many_agent_report()
    fig = figures.forest(view(report))
    tests = report["slice_comparisons"]["category"]
    assert [html.unescape(t.name) for t in fig.data if t.type == "scatter"] == list(AGENTS[1:])
    for trace in (t for t in fig.data if t.type == "scatter"):
        candidate = html.unescape(trace.name)
        expected = [100 * report["comparisons"][candidate]["bootstrap"]["success_diff"]["point"]]
        expected += [100 * t["diff"]["point"] for t in tests[candidate].values()]
        assert list(trace.x) == pytest.approx(expected)
        assert list(trace.y)[1:] == [f"category = {html.escape(v, quote=False)}" for v in tests[candidate]]
        flagged = [label for label, color in zip(trace.y, trace.marker.color) if color == "#e63946"]
        assert flagged == [f"category = {html.escape(v, quote=False)}" for v, t in tests[candidate].items()
                           if t["opposite_sign"]]
    assert any(t["opposite_sign"] for per in tests.values() for t in per.values())


def test_forest_of_many_candidates_shows_one_at_a_time():
    report = many_agent_report()
    for i in range(3):  # six candidates
        name = f"extra-{i}"
        report["agents"][name] = report["agents"]["cheap-mini"]
        report["comparisons"][name] = report["comparisons"]["cheap-mini"]
        report["slice_comparisons"]["category"][name] = report["slice_comparisons"]["category"]["cheap-mini"]
        report["agent_order"].append(name)
    fig = figures.forest(view(report))
    assert [t.visible for t in fig.data] == [True] + [False] * 5
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.args[0]["visible"].index(True) for b in buttons] == list(range(6))


def test_grid_marks_exactly_the_flipped_tasks():
    report = many_agent_report()
    fig, caption = figures.grid(view(report))
    outcomes = report["task_outcomes"]
    base = np.array(outcomes["success"]["baseline-v1"]) >= 0.5
    expected = set()
    for a in AGENTS[1:]:
        cand = np.array(outcomes["success"][a]) >= 0.5
        expected |= {(outcomes["task_ids"][i], html.escape(a, quote=False), bool(cand[i]))
                     for i in np.nonzero(base != cand)[0]}
    marked = {(x, y, t.name.endswith("gained")) for t in fig.data if t.type == "scatter" for x, y in zip(t.x, t.y)}
    assert marked == expected and expected
    assert f"{len(expected)} flips" in caption


def test_without_the_report_s_flips_the_grid_computes_them():
    report = many_agent_report()
    listed = figures.grid(view(report))[0]
    del report["task_outcomes"]["flipped"]
    computed = figures.grid(view(report))[0]
    assert [(t.x, t.y) for t in listed.data[1:]] == [(t.x, t.y) for t in computed.data[1:]]


def test_a_large_grid_keeps_every_flipped_task(monkeypatch):
    report = many_agent_report(n_tasks=300)
    outcomes = report["task_outcomes"]
    base = np.array(outcomes["success"]["baseline-v1"]) >= 0.5
    flipped = {outcomes["task_ids"][i] for a in AGENTS[1:]
               for i in np.nonzero(base != (np.array(outcomes["success"][a]) >= 0.5))[0]}
    monkeypatch.setattr(figures, "MAX_GRID_TASKS", len(flipped) + 10)
    fig, caption = figures.grid(view(report))
    (heatmap,) = [t for t in fig.data if t.type == "heatmap"]
    assert len(heatmap.x) == len(flipped) + 10 < 300
    assert flipped <= set(heatmap.x)
    assert f"showing {len(flipped) + 10} tasks" in caption


def test_a_report_of_one_agent_renders_with_every_plot_explained():
    page = render({"baseline": "only", "agents": {"only": {"n_tasks": 3, "success": {"rate": 0.5}}}}, "html")
    tags = Tags()
    tags.feed(page)
    assert [a.get("id") for t, a in tags.tags if t == "div" and a.get("class") == "fm-plot"] == []
    assert " ".join(tags.text).count("Not shown:") == 4
