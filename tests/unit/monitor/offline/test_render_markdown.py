"""The Markdown report: verdict first, tables a CommonMark + GFM-tables parser reads, user text literal.

Each document is parsed with markdown-it (CommonMark with GFM tables and raw
HTML allowed, as GitHub renders job summaries and comments), and the checks
are on what a reader sees: the text of the parsed elements.
"""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser

import numpy as np
import pytest
from markdown_it import MarkdownIt

from monitor.cli.output import dumps
from monitor.offline.render import render
from monitor.offline.render.markdown import MAX_CHARS
from monitor.offline.render.sections import MAX_SLICE_ROWS
from monitor.offline.render.view import interval, p_value, points
from tests.support.render_reports import (
    AGENTS,
    HOSTILE_AGENT,
    HOSTILE_SLICE,
    MARKDOWN_AGENT,
    legacy_report,
    many_agent_report,
)

PARSER = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


class Page(HTMLParser):
    """The parsed document: the text of each top-level block, each table's rows of cell texts, every tag seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.blocks: list[tuple[str, str]] = []
        self.tables: list[list[list[str]]] = []
        self._stack: list[str] = []
        self._text: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        if tag in ("h2", "h3", "li", "p", "summary"):
            self._stack.append(tag)
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        if self._stack and tag == self._stack[-1]:
            self.blocks.append((self._stack.pop(), "".join(self._text).strip()))

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(report: dict) -> Page:
    page = Page()
    page.feed(PARSER.render(render(report, "markdown")))
    return page


def texts(page: Page, tag: str) -> list[str]:
    return [text for t, text in page.blocks if t == tag]


def test_the_verdict_comes_first_and_quotes_the_report():
    report = legacy_report()
    page = parse(report)
    diff = report["bootstrap"]["success_diff"]
    first = texts(page, "li")[0]
    assert page.blocks[0][0] == "h2" and page.blocks[1][0] == "li"  # title, then the verdict list
    assert first.startswith("🟢 B vs A: success")
    assert f"{points(diff['point'])} {interval(diff['ci'], 100, 1, True)}, p {p_value(diff['p'])}" in first
    assert first.endswith("→ better")


def test_many_agents_gate_first_then_one_verdict_per_candidate():
    report = many_agent_report()
    items = texts(parse(report), "li")
    assert items[0].startswith("❌ Gate FAILED: " + HOSTILE_AGENT)
    for item, candidate in zip(items[1:], AGENTS[1:]):
        comparison = report["comparisons"][candidate]
        diff = comparison["bootstrap"]["success_diff"]
        significant = comparison["p_adjusted"]["success"] <= 0.05
        word = ("better" if diff["point"] > 0 else "worse") if significant else "no clear difference"
        assert item[0] == {"better": "🟢", "worse": "🔴"}.get(word, "⚪")
        assert f" {candidate} vs baseline-v1: success {points(diff['point'])}" in item
        assert item.endswith(f"→ {word}") and f"p {p_value(comparison['p_adjusted']['success'])} (bh)" in item
    frontier = next(i for i in items if i.startswith("Cost–success frontier"))
    assert [name in frontier for name in report["frontier"]] == [True] * len(report["frontier"])


def test_every_table_is_rectangular_and_names_every_agent():
    report = many_agent_report()
    page = parse(report)
    assert len(page.tables) >= 5
    for table in page.tables:
        assert len({len(row) for row in table}) == 1, table[0]  # a "|" in a name would add a cell
    agents_table = page.tables[0]
    assert [row[0].removesuffix(" (baseline)") for row in agents_table[1:]] == list(AGENTS)
    slice_rows = [row[0] for table in page.tables for row in table[1:]]
    assert HOSTILE_SLICE in slice_rows


def test_user_text_is_literal_never_markup():
    page = parse(many_agent_report())
    assert not [tag for tag, _ in page.tags if tag in ("script", "img", "a", "code", "em", "del", "iframe")]
    strong = "".join(text for _, text in page.blocks)
    assert MARKDOWN_AGENT in strong and HOSTILE_AGENT in strong  # shown as typed
    raw = render(many_agent_report(), "markdown")
    assert "@octocat" not in raw  # no mention notification from a PR comment
    assert "<script" not in raw and "<img" not in raw


def test_escaping_survives_newlines_and_pipes_in_a_slice_value():
    report = many_agent_report()
    report["slices"]["category"]["multi\nline | value"] = report["slices"]["category"]["code"]
    page = parse(report)
    table = next(t for t in page.tables if t[0][0] == "value")
    assert "multi line | value" in [row[0] for row in table]
    assert len({len(row) for row in table}) == 1


def test_opposite_sign_slices_are_flagged_in_their_row():
    report = many_agent_report()
    tests = report["slice_comparisons"]["category"]
    flagged = {(c, v) for c, per in tests.items() for v, t in per.items() if t["opposite_sign"]}
    assert flagged  # the fixture has a Simpson case, else this test checks nothing
    page = parse(report)
    table = next(t for t in page.tables if t[0][0] == "value")
    header = table[0]
    for row in table[1:]:
        for c in AGENTS[1:]:
            cell = row[header.index(f"Δ {c}")]
            assert ("⚠️ opposite sign" in cell) == ((c, row[0]) in flagged)


def test_long_slice_tables_are_cut_with_a_note():
    report = many_agent_report()
    cell = report["slices"]["category"]["code"]
    report["slices"] = {"repo": {f"repo-{i:03d}": copy.deepcopy(cell) for i in range(MAX_SLICE_ROWS + 7)}}
    del report["slice_comparisons"]
    page = parse(report)
    table = next(t for t in page.tables if t[0][0] == "value")
    assert len(table) == 1 + MAX_SLICE_ROWS
    assert any("… and 7 more values" in text for text in texts(page, "p"))
    assert any(text.startswith(f"By repo ({MAX_SLICE_ROWS + 7} values") for text in texts(page, "summary"))


def test_missing_sections_are_left_out():
    page = parse({"baseline": "only", "agents": {"only": {"n_tasks": 3}}})
    headings = texts(page, "h3")
    assert headings == ["Agents"]
    assert page.tables[0][1][:2] == ["only (baseline)", "3 / -"]


def test_the_two_agent_report_shows_its_sentences_and_passk():
    report = legacy_report()
    page = parse(report)
    assert report["pareto"] in texts(page, "li")
    assert report["iso_cost"] in texts(page, "li")
    reliability = next(t for t in page.tables if "pass@1" in t[0])
    assert reliability[1][reliability[0].index("pass^4")] == f"{100 * report['agents']['A']['pass_hat_k']['4']:.1f}%"


@pytest.mark.parametrize(("report", "fmt", "message"), [
    ({"baseline": "A", "agents": {"A": {}}}, "pdf", "fmt must be one of markdown, html, got 'pdf'"),
    ({"baseline": "Z", "agents": {"A": {}}}, "markdown", "report['baseline'] must name one of report['agents'] (A)"),
    ({"baseline": "A"}, "markdown", "report['agents'] must be a non-empty mapping"),
])
def test_bad_input_names_the_key(report, fmt, message):
    with pytest.raises(ValueError) as info:
        render(report, fmt)
    assert message in str(info.value)


def test_a_report_too_long_for_a_comment_drops_its_slice_tables():
    report = many_agent_report()
    cell = report["slices"]["category"]["code"]
    report["slices"] = {f"tag{j}": {f"value-{i:03d}": copy.deepcopy(cell) for i in range(MAX_SLICE_ROWS)}
                        for j in range(12)}
    del report["slice_comparisons"]
    text = render(report, "markdown")
    assert len(text) <= MAX_CHARS
    assert "Left out to fit a pull-request comment" in text and "value-000" not in text
    assert texts(parse(report), "h3") == ["Agents", "Against the baseline (baseline-v1)", "Cost–success frontier",
                                           "Reliability", "Slices", "Gate"]


def test_without_a_p_value_the_interval_decides():
    report = legacy_report()
    diff = report["bootstrap"]["success_diff"]
    del diff["p"]
    assert texts(parse(report), "li")[0].endswith("→ better")  # [+0.15, +0.45] excludes 0
    diff["ci"] = [-0.05, 0.45]
    assert texts(parse(report), "li")[0].endswith("→ no clear difference")


def test_infinite_and_missing_figures_are_shown_not_crashed_on():
    report = legacy_report()
    report["agents"]["A"]["cost_per_solved_usd"] = "inf"  # what --json writes for +inf (nothing solved)
    report["agents"]["A"]["cost_per_solved_ci"] = [None, None]
    report["agents"]["B"]["latency_s"] = None
    row_a, row_b = parse(report).tables[0][1:3]
    assert row_a[4] == "inf" and row_b[5] == "- / -"


def test_an_in_process_report_with_numpy_numbers_renders_as_its_json():
    """compare may hand render() numpy scalars (its JSON writer converts them): same document either way."""
    report = many_agent_report()

    def to_numpy(node):
        if isinstance(node, dict):
            return {k: to_numpy(v) for k, v in node.items()}
        if isinstance(node, list):
            return [to_numpy(v) for v in node]
        if isinstance(node, bool) or node is None or isinstance(node, str):
            return node
        return np.int64(node) if isinstance(node, int) else np.float64(node)

    assert render(to_numpy(report), "markdown") == render(json.loads(dumps(report)), "markdown")
