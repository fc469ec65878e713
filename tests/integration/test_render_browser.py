"""The HTML report in a real headless browser (Debian's chromium): it loads with no script error and every plot draws.

How: the page is written to a file, a copy gets a first ``<script>`` in its
``<head>`` that records every ``error`` event, unhandled promise rejection and
``console.error`` into an attribute of ``<html>``; chromium loads the copy from
``file://`` with every host name unresolvable (no network at view time), runs
it to quiescence (``--virtual-time-budget``) and prints the DOM it ended with
(``--dump-dom``). The DOM must carry the hook's mark and no error, and every
``div.fm-plot`` must be marked drawn by the page and hold plotly's SVG with
drawn marks (scatter points, or the heatmap's image). Pages: a many-agent
report with hostile names, the two-agent golden report, and the page
``fleetmon compare --format html`` prints for the bundled example. Two broken
pages (a script error; plotly.js missing) must fail the same checks, so the
checks can fail.

Chromium comes from ``scripts/services.sh start`` (``make test`` runs it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from monitor.offline.render import render
from tests.support.paths import ROOT
from tests.support.render_reports import AGENTS, legacy_report, many_agent_report

HOOK = """<script>(function () {
  var errors = [];
  function record(message) {
    errors.push(String(message));
    document.documentElement.setAttribute("data-fm-errors", JSON.stringify(errors));
  }
  window.addEventListener("error", function (e) {
    record("error: " + (e.message || e.type) + (e.filename ? " at " + e.filename + ":" + e.lineno : ""));
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    record("unhandled rejection: " + (e.reason && e.reason.message ? e.reason.message : e.reason));
  });
  var original = console.error;
  console.error = function () {
    record("console.error: " + Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
  window.addEventListener("load", function () { document.documentElement.setAttribute("data-fm-loaded", "1"); });
  document.documentElement.setAttribute("data-fm-hook", "installed");
})();</script>"""

VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed: `bash scripts/services.sh start` installs Debian's chromium")
    return path


def dump_dom(page: str, tmp_path: Path, name: str) -> str:
    hooked = tmp_path / f"{name}.html"
    assert page.count("<head>") == 1
    hooked.write_text(page.replace("<head>", "<head>" + HOOK, 1), encoding="utf-8")
    result = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         f"--user-data-dir={tmp_path / ('profile-' + name)}", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--virtual-time-budget=20000", "--dump-dom", hooked.as_uri()],
        capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, f"chromium exited {result.returncode}: {result.stderr[-3000:]}"
    return result.stdout


@dataclass
class Plot:
    attrs: dict[str, str | None]
    tags: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)


class Plots(HTMLParser):
    """Per ``div.fm-plot``: its attributes and the tags and classes of everything inside it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root: dict[str, str | None] = {}
        self.plots: dict[str, Plot] = {}
        self._current: str | None = None
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "html":
            self.root = attributes
        if self._current is None:
            if tag == "div" and "fm-plot" in (attributes.get("class") or "").split():
                self._current, self._depth = str(attributes["id"]), 1
                self.plots[self._current] = Plot(attributes)
            return
        plot = self.plots[self._current]
        plot.tags.append(tag)
        plot.classes.extend((attributes.get("class") or "").split())
        if tag not in VOID:
            self._depth += 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self._current is not None and tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if self._current is not None and tag not in VOID:
            self._depth -= 1
            if self._depth == 0:
                self._current = None


def problems(dom: str, expected_plots: list[str]) -> list[str]:
    """Everything wrong with a dumped page: script errors, missing hook, plots not drawn or without marks."""
    parsed = Plots()
    parsed.feed(dom)
    found = []
    if parsed.root.get("data-fm-hook") != "installed" or parsed.root.get("data-fm-loaded") != "1":
        found.append(f"the error hook did not run or the page did not finish loading: {parsed.root}")
    if parsed.root.get("data-fm-errors"):
        found.append("script errors: " + str(parsed.root["data-fm-errors"]))
    if sorted(parsed.plots) != sorted(expected_plots):
        found.append(f"plot divs {sorted(parsed.plots)}, expected {sorted(expected_plots)}")
    for name, plot in parsed.plots.items():
        classes, tags = plot.classes, plot.tags
        if plot.attrs.get("data-rendered") != "true":
            found.append(f"{name}: not drawn (data-rendered={plot.attrs.get('data-rendered')!r})")
        if "main-svg" not in classes:
            found.append(f"{name}: no plotly SVG")
        marks = classes.count("point") + tags.count("image")
        if marks == 0:
            found.append(f"{name}: the SVG has no drawn marks")
    return found


@pytest.fixture(scope="module")
def full_report() -> dict:
    return many_agent_report()


def test_the_full_report_loads_without_errors_and_draws_every_plot(tmp_path, full_report):
    dom = dump_dom(render(full_report, "html"), tmp_path, "full")
    assert problems(dom, ["plot-frontier", "plot-forest", "plot-pass-k", "plot-grid"]) == []
    plots = Plots()
    plots.feed(dom)
    frontier = plots.plots["plot-frontier"]
    assert frontier.classes.count("point") >= len(AGENTS)  # one marker per agent, at least
    assert plots.plots["plot-grid"].tags.count("image") >= 1  # the heatmap itself


def test_the_two_agent_report_draws_what_it_has(tmp_path):
    dom = dump_dom(render(legacy_report(), "html"), tmp_path, "legacy")
    assert problems(dom, ["plot-frontier", "plot-pass-k"]) == []


def test_the_compare_command_s_page_draws(tmp_path):
    """End to end: ``fleetmon compare --format html`` on the bundled example, as a user runs it."""
    demo = ROOT / "examples" / "compare_demo"
    done = subprocess.run([sys.executable, "-m", "monitor.cli", "compare", str(demo / "A.jsonl"), str(demo / "B.jsonl"),
                           "--slice-by", "category", "--format", "html"], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = dump_dom(done.stdout, tmp_path, "demo")
    assert problems(dom, ["plot-frontier", "plot-forest", "plot-pass-k", "plot-grid"]) == []


def test_the_checks_catch_a_script_error_and_a_plot_that_did_not_draw(tmp_path, full_report):
    page = render(full_report, "html")
    thrown = page.replace("</body>", '<script>throw new Error("planted");</script></body>', 1)
    found = problems(dump_dom(thrown, tmp_path, "thrown"), ["plot-frontier", "plot-forest", "plot-pass-k",
                                                            "plot-grid"])
    assert any("planted" in p for p in found)
    start = page.index("<script>", page.index("<style>")) + len("<script>")
    without_plotly = page[:start] + page[page.index("</script>", start):]
    found = problems(dump_dom(without_plotly, tmp_path, "no-plotly"), ["plot-frontier", "plot-forest",
                                                                        "plot-pass-k", "plot-grid"])
    assert any("not drawn (data-rendered='error')" in p for p in found)
    assert any("no plotly SVG" in p for p in found)
