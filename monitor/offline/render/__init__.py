"""Reports people read: the compare report as Markdown (CI summaries, PR comments) or one self-contained HTML page.

``render(report, fmt)`` is a pure function of the dict ``fleetmon compare
--json`` prints (see :mod:`monitor.offline.render.view` for which keys it
reads and how a missing one is shown). ``"markdown"``: GitHub-flavoured, verdict
first. ``"html"``: one file with plotly.js inlined (no network at view time) and
four plots — the cost–success frontier with intervals, a forest plot of
per-slice differences, pass@k and pass^k against k, a task × agent outcome grid
with the flipped tasks marked. User text is escaped in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["FORMATS", "render"]

FORMATS = ("markdown", "html")


def render(report: Mapping[str, Any], fmt: str) -> str:
    """The report in ``fmt`` (one of ``FORMATS``); raises ValueError naming ``fmt`` or a key it cannot do without."""
    if fmt == "markdown":
        from monitor.offline.render.markdown import render_markdown

        return render_markdown(report)
    if fmt == "html":
        from monitor.offline.render.html import render_html  # imports plotly: only when asked for

        return render_html(report)
    raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
