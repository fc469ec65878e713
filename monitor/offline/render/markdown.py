"""The compare report as GitHub-flavoured Markdown: a CI job summary or a pull-request comment (pure).

Verdict first (gate, then each candidate against the baseline, then the
frontier), then the tables of :mod:`monitor.offline.render.sections`. User
text goes through :func:`escape`: HTML entities for ``& < > @`` (no raw HTML, no
@-mentions) and a backslash before every character that opens inline Markdown
(code, emphasis, links and images, table cells, strike-through, math), so a
name cannot open a link, an image, a table cell, a mention or raw HTML.
Whitespace runs, newlines included, become one space. Slice tables sit in
``<details>`` blocks (open when short) and are cut at ``MAX_SLICE_ROWS`` values;
a document that would still pass ``MAX_CHARS`` leaves them out, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from monitor.offline.render.sections import SECTIONS, Dialect, Lines, title, verdict
from monitor.offline.render.view import pct, view

__all__ = ["MAX_CHARS", "escape", "render_markdown"]

MAX_CHARS = 60_000  # GitHub: 65,536 characters per comment; a job summary takes 1 MiB

_SPECIAL = re.compile(r"([\\`*_\[\]!|~$#<>])")


def escape(text: Any) -> str:
    """``text`` as literal Markdown (module notes)."""
    plain = " ".join(str(text).split())
    plain = _SPECIAL.sub(r"\\\1", plain.replace("&", "&amp;"))
    return plain.replace("\\<", "&lt;").replace("\\>", "&gt;").replace("@", "&#64;")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> Lines:
    align = align or "l" + "r" * (len(header) - 1)
    marks = {"l": ":---", "r": "---:", "c": ":---:"}
    return ["", "| " + " | ".join(header) + " |", "| " + " | ".join(marks[a] for a in align) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def _details(summary: str, body: Lines, is_open: bool) -> Lines:
    # Inside the raw HTML of <summary> Markdown escapes would show: keep only the entities.
    summary = summary.replace("\\", "")
    return ["", "<details open>" if is_open else "<details>", f"<summary>{summary}</summary>", *body, "", "</details>"]


MARKDOWN = Dialect(
    esc=escape,
    strong=lambda text: f"**{text}**",
    heading=lambda text: ["", f"### {text}"],
    bullets=lambda items: [f"- {item}" for item in items],
    table=_table,
    note=lambda text: ["", text],
    details=_details,
)


def render_markdown(report: Mapping[str, Any]) -> str:
    """The Markdown document (module notes); raises ValueError naming a key the report cannot do without.

    Longer than ``MAX_CHARS`` (GitHub's comment limit, with room for a header): the slice
    tables are left out, with a note saying so."""
    v = view(report)
    head = [f"## {title(MARKDOWN, v)}", "", *verdict(MARKDOWN, v)]
    foot = ["", f"<sub>Intervals: {pct(v.confidence, 0)}, bootstrap over tasks unless stated; success is macro "
                "(mean over tasks of each task's success fraction) unless labelled micro.</sub>"]
    parts = {section.__name__: section(MARKDOWN, v) for section in SECTIONS}
    text = "\n".join([*head, *(line for part in parts.values() for line in part), *foot]) + "\n"
    if len(text) <= MAX_CHARS or not parts.get("slices"):
        return text
    parts["slices"] = ["", "### Slices", "", f"Left out to fit a pull-request comment ({MAX_CHARS:,} characters): "
                       "see `--format html` or `--json`."]
    return "\n".join([*head, *(line for part in parts.values() for line in part), *foot]) + "\n"
