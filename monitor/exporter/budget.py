"""The exporter's series budget: slices past it are folded into one ``__other__`` row per release and arm (pure).

A scrape exports a fixed number of series per slice (its counters, and per
window its gauges when the slice is active). When the slices would need more
than ``max_series``, the slices with the most traces (over their totals) are
kept whole and every other slice is merged into the row of its release and
arm whose other dimensions read ``__other__`` — so every sum over a
release or an arm, and the whole fleet's, stays exact, and only the split of
the smallest slices is lost. Room is kept for those rows first. What was
folded is reported (``fleetmon_exporter_folded_slices``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from monitor.aggregate import Aggregate
from monitor.slices import parse_slice_id, slice_id

OTHER = "__other__"
_KEPT_DIMENSIONS = ("release", "arm")


def other_id(sid: str) -> str:
    """The ``__other__`` row a slice folds into: its release and arm, every other dimension ``__other__``."""
    return slice_id(tuple((dim, value if dim in _KEPT_DIMENSIONS else OTHER) for dim, value in parse_slice_id(sid)))


@dataclass(frozen=True)
class Folded:
    """The totals and window aggregates to export, and how many slices were folded."""

    totals: dict[str, Aggregate]
    windows: list[dict[str, Aggregate]]
    folded_slices: int


def apply_budget(totals: Mapping[str, Aggregate], windows: Sequence[Mapping[str, Aggregate]], max_series: int,
                 series_per_slice: int, series_per_window: int) -> Folded:
    """Keep the busiest slices within ``max_series`` and fold the rest (see the module docstring).

    ``windows`` are the windowed aggregates per window (of the active slices);
    a slice costs ``series_per_slice`` plus ``series_per_window`` per window it is in.
    """
    def cost(sid: str) -> int:
        return series_per_slice + series_per_window * sum(1 for w in windows if sid in w)

    needed = sum(cost(sid) for sid in totals)
    if needed <= max_series:
        return Folded(dict(totals), [dict(w) for w in windows], 0)
    rows = {other_id(sid) for sid in totals}
    room = max_series - len(rows) * (series_per_slice + series_per_window * len(windows))
    kept: set[str] = set()
    for sid in sorted(totals, key=lambda s: (-totals[s].traces, s)):
        c = cost(sid)
        if c <= room:
            kept.add(sid)
            room -= c
    out_totals = {sid: agg for sid, agg in totals.items() if sid in kept}
    out_windows = [{sid: agg for sid, agg in w.items() if sid in kept} for w in windows]
    for sid, agg in totals.items():
        if sid not in kept:
            row = other_id(sid)
            out_totals.setdefault(row, Aggregate()).merge(agg)
            for w, out in zip(windows, out_windows):
                if sid in w:
                    out.setdefault(row, Aggregate()).merge(w[sid])
    return Folded(out_totals, out_windows, len(totals) - len(kept))
