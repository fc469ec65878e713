"""The terminal view of ``fleetmon run`` (rich): health per release, comparisons, alerts.

:func:`render` is a function of the pipeline's state and ``now``; the run
loop wraps it in ``rich.live.Live``. Every rate is shown with its interval;
harmful-action and over-refusal always side by side.
"""

from __future__ import annotations

import math
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from alerts.engine import findings_by_slice
from alerts.lifecycle import slice_label
from monitor.fmt import fixed
from monitor.run.pipeline import Pipeline
from monitor.slices import WHOLE_FLEET


def _rate(value: float, low: float | None = None, high: float | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = fixed(value, 3)
    if low is not None and high is not None:
        text += f" [{fixed(low, 3)}, {fixed(high, 3)}]"
    return text


def _usd(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else "$" + fixed(value, 4)


def _seconds(value: float) -> str:
    return "-" if value is None or math.isnan(value) else fixed(value, 2) + " s"


def health_table(pipeline: Pipeline, now: float) -> Table:
    table = Table(title="Health, last 5 minutes (micro within each row)", expand=True)
    for name in ("release", "arm", "traces", "success [95% CI]", "cost/solved", "p95 latency",
                 "harmful-action", "over-refusal"):
        table.add_column(name, no_wrap=True)
    for group, h in pipeline.release_health(now):
        s, safety = h["success"], h["safety"]
        table.add_row(group.get("release", ""), group.get("arm", ""), str(h["traces"]),
                      _rate(s["rate"], s["low"], s["high"]), _usd(h["cost_per_solved_usd"]),
                      _seconds(h["latency_seconds"]["p95"]),
                      _rate(safety["harmful_action_rate"], *safety["harmful_action_ci"]),
                      _rate(safety["over_refusal_rate"], *safety["over_refusal_ci"]))
    return table


def comparisons_table(pipeline: Pipeline, limit: int = 8) -> Table:
    table = Table(title="Comparisons: success, candidate vs baseline (effect > 0 = candidate worse)", expand=True)
    for name in ("comparison", "slice", "pairs", "b", "c", "effect [CS]", "e-value", "decision"):
        table.add_column(name, no_wrap=True)
    findings = findings_by_slice(pipeline.engine.findings)
    findings.sort(key=lambda f: (f.slice_key != WHOLE_FLEET, -f.e_value))
    for f in findings[:limit]:
        c = f.comparison
        decision = Text("FIRES", style="bold red") if f.fires else (
            Text("significant, below floor", style="yellow") if f.significant else Text("no evidence", style="green"))
        e_value = "inf" if math.isinf(f.e_value) else f"{f.e_value:.3g}"
        effect = fixed(f.effect, 3, sign=True)
        if math.isfinite(f.effect_low) and math.isfinite(f.effect_high):
            effect += f" [{fixed(f.effect_low, 3, sign=True)}, {fixed(f.effect_high, 3, sign=True)}]"
        table.add_row(f"{c.candidate_release} vs {c.baseline_release} ({c.arm})", slice_label(f.slice_key),
                      str(f.n_pairs), str(f.b), str(f.c), effect, e_value, decision)
    return table


def _signed(value: Any) -> str:
    return f"{value:+.3f}" if isinstance(value, (int, float)) else str(value)  # "inf" and None stay as they are


def alerts_panel(pipeline: Pipeline, limit: int = 6, localized: int = 4) -> Panel:
    """One line per firing page, then its localization (the firing slices, largest effect first)."""
    firing = pipeline.engine.firing()
    lines: list[Any] = []
    for alert in firing[:limit]:
        ev = alert["evidence"]
        e_value = ev.get("e_value")
        e_text = f"{e_value:.3g}" if isinstance(e_value, (int, float)) else str(e_value)
        lines.append(Text(f"FIRING {alert['alertname']} {ev.get('candidate_release')} vs {ev.get('baseline_release')} "
                          f"({ev.get('arm')}) slice {ev.get('slice')}: effect {_signed(ev.get('effect'))} "
                          f"[{_signed(ev.get('effect_low'))}, {_signed(ev.get('effect_high'))}], e-value {e_text}, "
                          f"n_pairs {ev.get('n_pairs')}", style="bold red"))
        lines += [Text(f"    in {s.get('slice')}: effect {_signed(s.get('effect'))} [{_signed(s.get('effect_low'))}, "
                       f"{_signed(s.get('effect_high'))}], n_pairs {s.get('n_pairs')}", style="red")
                  for s in ev.get("localization", [])[:localized]]
    if len(firing) > limit:
        lines.append(Text(f"... and {len(firing) - limit} more firing"))
    recent = [e for e in pipeline.stats.events if e.status == "resolved"][-3:]
    for event in recent:
        lines.append(Text(f"resolved {event.alertname} {event.labels.get('candidate_release')} vs "
                          f"{event.labels.get('baseline_release')} ({event.labels.get('arm')})", style="green"))
    if not lines:
        lines.append(Text("no alerts", style="green"))
    return Panel(Group(*lines), title=f"Alerts ({len(firing)} firing)")


def render(pipeline: Pipeline, now: float, source: str) -> Group:
    stats = pipeline.stats
    counters = pipeline.store.counters()
    header = Text(f"fleetmon run — {source} — traces {stats.traces:,}  invalid {stats.invalid:,}  "
                  f"pairs {int(counters.get('pairs', 0)):,}  late {int(counters.get('late', 0)):,}  "
                  f"evaluations {stats.ticks:,}  (Ctrl-C to stop)", style="bold")
    return Group(header, health_table(pipeline, now), comparisons_table(pipeline), alerts_panel(pipeline))
