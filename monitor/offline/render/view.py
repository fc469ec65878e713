"""What both renderings read from a compare report: a tolerant view of the dict and the verdicts (pure).

The report is the dict ``fleetmon compare --json`` prints: the two-agent form
(top-level ``candidate``, ``mcnemar``, ``bootstrap``) or the many-agent form
(``agent_order``, ``comparisons``, ``frontier``, ``slice_comparisons`` ...).
Every key but ``baseline`` and ``agents`` may be missing: a missing figure is
shown as "-" and a missing section is left out, never an error.

Verdict of a candidate (vs the baseline, on macro success): "better" or
"worse" when the adjusted p of the paired bootstrap (``p_adjusted.success``,
else its unadjusted ``p``) is <= α = 1 − confidence, by the sign of the point
difference; with no p, when the interval excludes 0; else "no clear difference".
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.fmt import fixed

__all__ = ["Verdict", "View", "get", "number", "pct", "points", "usd", "view"]


def get(mapping: Any, *path: str | int) -> Any:
    """``mapping[p0][p1]...`` or None when any step is missing or not a mapping."""
    node = mapping
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(str(key))
    return node


def _finite(value: Any) -> float | None:
    if value in ("inf", "-inf"):
        return math.inf if value == "inf" else -math.inf
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return None if math.isnan(value) else float(value)


def number(value: Any, digits: int = 3, sign: bool = False) -> str:
    """A float with ``digits`` decimals ("-" when missing, "inf" for +inf)."""
    x = _finite(value)
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return fixed(x, digits, sign=sign)


def pct(value: Any, digits: int = 1) -> str:
    """A rate as a percentage: 0.6 -> "60.0%"."""
    x = _finite(value)
    return "-" if x is None or math.isinf(x) else fixed(100.0 * x, digits) + "%"


def points(value: Any, digits: int = 1) -> str:
    """A difference of rates in percentage points: 0.3 -> "+30.0 pp"."""
    x = _finite(value)
    return "-" if x is None or math.isinf(x) else fixed(100.0 * x, digits, sign=True) + " pp"


def usd(value: Any, digits: int = 4) -> str:
    x = _finite(value)
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else "$" + fixed(x, digits)


def interval(ci: Any, scale: float = 1.0, digits: int = 1, sign: bool = False) -> str:
    """``[low, high]`` times ``scale`` ("" when there is no interval)."""
    if not isinstance(ci, Sequence) or isinstance(ci, str) or len(ci) != 2:
        return ""
    low, high = _finite(ci[0]), _finite(ci[1])
    if low is None or high is None:
        return ""
    return f"[{number(low * scale, digits, sign)}, {number(high * scale, digits, sign)}]"


def p_value(value: Any) -> str:
    x = _finite(value)
    if x is None:
        return "-"
    return "<0.0001" if x < 1e-4 else f"{x:.4f}".rstrip("0").rstrip(".") if x < 1 else "1"


@dataclass(frozen=True)
class Verdict:
    candidate: str
    word: str                 # "better" | "worse" | "no clear difference" | "not compared"
    diff: Any                 # the success_diff block {point, ci, p} or None
    p: Any                    # the p used (adjusted when the report has it)
    adjusted: bool


@dataclass
class View:
    """The report seen through the keys the renderings use (module notes)."""

    report: Mapping[str, Any]
    baseline: str
    agents: list[str]
    summaries: Mapping[str, Any]
    comparisons: dict[str, Mapping[str, Any]]
    confidence: float
    adjust: str | None
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    @property
    def candidates(self) -> list[str]:
        return [a for a in self.agents if a != self.baseline]

    def ks(self, key: str) -> list[str]:
        """The k values of ``pass_at_k`` / ``pass_hat_k`` over all agents, in numeric order."""
        found: set[str] = set()
        for name in self.agents:
            for source in (get(self.summaries, name, "reliability", key), get(self.summaries, name, key)):
                if isinstance(source, Mapping):
                    found.update(str(k) for k in source)
        return sorted(found, key=lambda k: (int(k) if k.isdigit() else math.inf, k))

    def pass_k(self, agent: str, key: str, k: str) -> tuple[Any, Any]:
        """(point, ci) of pass@k (``key="pass_at_k"``) or pass^k, from ``reliability`` when present."""
        rich = get(self.summaries, agent, "reliability", key, k)
        if isinstance(rich, Mapping):
            return rich.get("point"), rich.get("ci")
        return get(self.summaries, agent, key, k), None


def _comparisons(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    given = report.get("comparisons")
    if isinstance(given, Mapping) and given:
        return {str(k): v for k, v in given.items() if isinstance(v, Mapping)}
    candidate = report.get("candidate")
    if candidate is None:
        return {}
    keys = ("n_common_tasks", "only_baseline_tasks", "only_candidate_tasks", "mcnemar", "bootstrap")
    return {str(candidate): {k: report.get(k) for k in keys}}


def _verdict(name: str, comparison: Mapping[str, Any] | None, alpha: float) -> Verdict:
    diff = get(comparison, "bootstrap", "success_diff")
    if not isinstance(diff, Mapping):
        return Verdict(name, "not compared", None, None, False)
    adjusted = _finite(get(comparison, "p_adjusted", "success"))
    p = adjusted if adjusted is not None else _finite(diff.get("p"))
    point = _finite(diff.get("point")) or 0.0
    ci = diff.get("ci")
    if p is not None:
        significant = p <= alpha
    else:
        low = _finite(ci[0]) if isinstance(ci, Sequence) and len(ci) == 2 else None
        high = _finite(ci[1]) if isinstance(ci, Sequence) and len(ci) == 2 else None
        significant = low is not None and high is not None and (low > 0 or high < 0)
    word = ("better" if point > 0 else "worse") if significant and point != 0 else "no clear difference"
    return Verdict(name, word, diff, p, adjusted is not None)


def view(report: Mapping[str, Any]) -> View:
    """The view of ``report``; raises ValueError naming the key when ``baseline`` or ``agents`` is unusable."""
    if not isinstance(report, Mapping):
        raise ValueError(f"report must be a mapping (the dict compare --json prints), got {type(report).__name__}")
    baseline, summaries = report.get("baseline"), report.get("agents")
    if not isinstance(summaries, Mapping) or not summaries:
        raise ValueError(f"report['agents'] must be a non-empty mapping of agent summaries, got {summaries!r:.80}")
    if not isinstance(baseline, str) or baseline not in summaries:
        raise ValueError(f"report['baseline'] must name one of report['agents'] ({', '.join(map(str, summaries))}), "
                         f"got {baseline!r}")
    order = report.get("agent_order")
    agents = [str(a) for a in order if a in summaries] if isinstance(order, Sequence) and order else []
    agents = agents or [baseline] + [str(a) for a in summaries if a != baseline]
    if baseline in agents:
        agents.remove(baseline)
    agents.insert(0, baseline)
    comparisons = _comparisons(report)
    confidence = _finite(report.get("confidence")) or _finite(get(next(iter(comparisons.values()), {}), "bootstrap",
                                                                  "confidence")) or 0.95
    adjust = report.get("adjust") if isinstance(report.get("adjust"), str) else None
    v = View(report, baseline, agents, summaries, comparisons, confidence, adjust)
    v.verdicts = [_verdict(c, comparisons.get(c), v.alpha) for c in v.candidates]
    return v
