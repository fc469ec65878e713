"""``fleetmon stats``: per-slice and overall counts read through the store API.

Without ``since`` the figures are the cumulative all-time totals (the
``t:`` hashes); with ``since`` they are the merged windows of one resolution
(default ``1m``) overlapping ``[now - since, now + 300 s)`` — the upper
bound admits traces stamped up to the schema's allowed clock skew ahead.
Counters (``dlq``, ``late``, ``folded:<dim>``, ``grouping_folded:<grouping>``,
``traces``) are pipeline-wide and all-time in both cases.

Every trace is stored once per slice grouping (:mod:`monitor.groupings`), so
the whole-fleet ``totals`` are the sum of one grouping's rows (the base
``release × arm`` grouping, counted once); each slice row names its
``grouping`` (its dimensions other than release and arm, joined with ``,``;
``""`` for release × arm) and rows are listed grouping by grouping. Works with any :class:`monitor.store.base.Store`.
"""

from __future__ import annotations

from typing import Any

from monitor.aggregate import Aggregate
from monitor.groupings import FOLDED_COUNTER_PREFIX, grouping_name
from monitor.schema import MAX_FUTURE_SKEW_SECONDS
from monitor.slices import parse_slice_id
from monitor.store.base import Store, merged


def summarise(agg: Aggregate) -> dict[str, Any]:
    return {"traces": agg.traces, "successes": agg.successes,
            "tokens_in": int(agg.tokens("tokens_in")), "tokens_out": int(agg.tokens("tokens_out")),
            "tokens_cached_in": int(agg.tokens("tokens_cached_in")),
            "fees_usd": float(agg.get("fees_usd"))}


def collect_stats(store: Store, *, now: float, since_seconds: float | None = None,
                  resolution: str = "1m") -> dict[str, Any]:
    """The stats document (see the module docstring)."""
    window: dict[str, Any] | None = None
    if since_seconds is None:
        per_slice = store.totals()
    else:
        start, end = now - since_seconds, now + MAX_FUTURE_SKEW_SECONDS
        res = {r.name: r for r in store.resolutions}.get(resolution)
        if res is None:
            raise ValueError(f"--resolution must be one of {[r.name for r in store.resolutions]}, "
                             f"got {resolution!r}")
        slice_ids = sorted(store.active_slices(since=start))
        per_slice = {sid: agg for sid, agg in store.window_aggregates(resolution, start, end, slice_ids).items()
                     if agg.traces}
        window = {"resolution": resolution, "start": start, "end": end,
                  "retention_seconds": res.retention_seconds,
                  "complete": since_seconds <= res.retention_seconds}
    counters = store.counters()
    keys = {sid: parse_slice_id(sid) for sid in per_slice}
    slices = sorted(((sid, summarise(agg)) for sid, agg in per_slice.items()),
                    key=lambda item: (grouping_name(keys[item[0]]), -item[1]["traces"], item[0]))
    # each grouping's rows sum to the whole fleet: the totals are the base grouping's, counted once
    base = {sid: agg for sid, agg in per_slice.items() if grouping_name(keys[sid]) == ""}
    return {
        "since_seconds": since_seconds,
        "window": window,
        "totals": summarise(merged(base)),
        "slices": [{"slice": sid, "grouping": grouping_name(keys[sid]), "dimensions": dict(keys[sid]), **figures}
                   for sid, figures in slices],
        "dlq": int(counters.get("dlq", 0)),
        "late": int(counters.get("late", 0)),
        "traces_folded_all_time": int(counters.get("traces", 0)),
        "folded": {k.split(":", 1)[1]: int(v) for k, v in counters.items() if k.startswith("folded:")},
        "grouping_folded": {k[len(FOLDED_COUNTER_PREFIX):]: int(v) for k, v in counters.items()
                            if k.startswith(FOLDED_COUNTER_PREFIX)},
        "applied_offsets": store.applied_offsets(),
    }


def render_stats(doc: dict[str, Any], limit: int = 30) -> str:
    """A readable text form of :func:`collect_stats`'s document."""
    totals = doc["totals"]
    if doc["window"] is None:
        scope = "all time"
    else:
        w = doc["window"]
        scope = f"last {doc['since_seconds']:g} s ({w['resolution']} windows)"
        if not w["complete"]:
            scope += f"; only {w['retention_seconds']} s are retained at this resolution"
    rate = f"{totals['successes'] / totals['traces']:.1%}" if totals["traces"] else "n/a"
    lines = [
        f"fleetmon stats — {scope}",
        f"  traces {totals['traces']:,}   successes {totals['successes']:,} ({rate})   "
        f"tokens in {totals['tokens_in']:,} / out {totals['tokens_out']:,} (cached in {totals['tokens_cached_in']:,})",
        f"  dead-lettered {doc['dlq']:,}   late {doc['late']:,}   "
        + ("folded into __other__: " + ", ".join(f"{k} {v:,}" for k, v in sorted(doc["folded"].items()))
           if doc["folded"] else "no slice values folded"),
    ]
    if doc.get("grouping_folded"):
        lines.append("  past a grouping's budget, folded into __other__: "
                     + ", ".join(f"{k or 'release×arm'} {v:,}" for k, v in sorted(doc["grouping_folded"].items())))
    lines.append("")
    slices = doc["slices"]
    if not slices:
        lines.append("  (no slices)")
        return "\n".join(lines)
    width = min(70, max(len(s["slice"]) for s in slices[:limit]))
    gwidth = max(8, *(len(s["grouping"]) for s in slices[:limit]))
    lines.append(f"  {'grouping':<{gwidth}}  {'slice':<{width}}  {'traces':>10}  {'success':>8}  {'tokens_in':>12}  "
                 f"{'tokens_out':>12}")
    for s in slices[:limit]:
        name = s["slice"] if len(s["slice"]) <= width else s["slice"][:width - 1] + "…"
        share = s["successes"] / s["traces"] if s["traces"] else float("nan")
        lines.append(f"  {s['grouping'] or '-':<{gwidth}}  {name:<{width}}  {s['traces']:>10,}  {share:>8.1%}  "
                     f"{s['tokens_in']:>12,}  {s['tokens_out']:>12,}")
    if len(slices) > limit:
        lines.append(f"  ... {len(slices) - limit} more slices (use --limit or --json)")
    return "\n".join(lines)
