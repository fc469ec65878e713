"""The fold's placement (:func:`monitor.fold.place_groups`) against a fold in trace order.

The placement sums the groups per grouping projection and coarser window
before merging them into the rows, so a window or a total adds its float
fields in another association than trace by trace. The reference here adds every
trace on its own to each row's window at every resolution and to each
row's total, in trace order; integer fields and sketch buckets must equal
it exactly, the two float fields must lie within the bound any order of
summation of the same n terms keeps to the exact sum (``math.fsum``):
``gamma(n - 1) * sum(|x|)``, with ``gamma(k) = k u / (1 - k u)`` and
``u = 2**-53`` (Higham, *Accuracy and Stability of Numerical Algorithms*,
2nd ed., eq. 4.4, which holds for any summation tree).

Which tree is part of the contract too (the native and Python paths are
compared to the bit), so a second reference spells the placement's sums out
with nothing shared or skipped — every sum a dict of its parts, each a left
fold, the first part copied — and the delta must equal it to the bit, in
insertion order, on batches where most raw slices are new (every group its
own sum at every level) as well as on ones where slices repeat.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.delta import BatchDelta
from monitor.fold import Group, GroupKey, fold, group_traces, place_groups
from monitor.groupings import grouping_set, guard_admit, of_slicer
from monitor.schema import Trace
from monitor.slices import UNKNOWN, CardinalityGuard, Slicer, slice_id
from monitor.windows import Resolution

NOW = 1_800_000_000.0
DIMENSIONS = ("release", "arm", "task_type", "tenant", "model_id")   # the default groupings: two widest
# minute windows older than 30 minutes are late; hour windows older than 3 hours too
RESOLUTIONS = (Resolution("1m", 60, 1800), Resolution("1h", 3600, 3 * 3600))
U = 2.0 ** -53


@dataclass
class RecordingGuard(CardinalityGuard):
    """A guard that records every question it is asked, in order."""

    asked: list[tuple[str, str]] = field(default_factory=list)

    def admit_capped(self, dim: str, value: str, cap: int) -> str:
        self.asked.append((dim, value))
        return super().admit_capped(dim, value, cap)


def random_traces(seed: int, n: int, span: float, tenants: int = 5) -> list[Trace]:
    """``tenants`` > 5: tenant ``t<k>``, k drawn from that many (most traces a new raw slice when large)."""
    rng = random.Random(seed)
    names = ("a", "b", "c", "d", "e") if tenants <= 5 else [f"t{k}" for k in range(tenants)]
    out = []
    for i in range(n):
        latency = rng.choice([None, 0.0, rng.lognormvariate(0.0, 1.5)])
        out.append(Trace(
            trace_id=f"t{i}", ts=NOW - rng.uniform(0, span), model_id=rng.choice(("m1", "m2")),
            release=rng.choice(("r1", "r2", "r3")), arm=rng.choice(("baseline", "canary")),
            task_type=rng.choice(("code", "chat", None)), tenant=rng.choice(names),
            success=rng.random() < 0.6, outcome=rng.choice(("success", "failure", None)),
            tokens_in=rng.randint(0, 5000), tokens_out=rng.randint(0, 900), steps=rng.randint(0, 9),
            fees_usd=rng.choice([0.0, rng.uniform(0, 1), 0.1, 1e-9 * rng.random()]), latency_seconds=latency))
    return out


def reference(traces: list[Trace], slicer: Slicer, now: float):
    """Each trace on its own into each row's window at every resolution and each row's total, in trace order;
    also each window's and total's float terms."""
    rows, admit = of_slicer(slicer), guard_admit(slicer.guard)
    sids_of: dict[tuple[str, ...], list[str]] = {}
    windows: dict = {}
    totals: dict = {}
    terms: dict = {}
    expire_at: dict = {}
    last_seen: dict = {}
    late = 0
    for trace in traces:
        values = tuple(trace.dimension(dim) or UNKNOWN for dim in slicer.dimensions)
        if values not in sids_of:
            sids_of[values] = [slice_id(row) for _, row, _ in rows.rows(slicer.key_for(values), admit)]
        one = Aggregate().update(trace)
        expired = False
        ts = float(trace.ts)  # type: ignore[arg-type]  # every trace here has one
        for sid in sids_of[values]:
            places: list[tuple[dict, object]] = []
            for res in RESOLUTIONS:
                start = res.start(ts)
                if res.expired(start, now):
                    expired = True
                    continue
                places.append((windows, (res.name, start, sid)))
                expire_at[(res.name, start)] = res.expire_at(start)
            places.append((totals, sid))
            for store, key in places:
                store.setdefault(key, Aggregate()).merge(one)
                for name in FLOAT_FIELDS:
                    if name in one.counts:
                        terms.setdefault((key, name), []).append(one.counts[name])
            last_seen[sid] = max(last_seen.get(sid, 0.0), ts)
        late += expired
    return windows, totals, terms, expire_at, last_seen, late


def assert_like(got: dict, want: dict, terms: dict) -> None:
    assert got.keys() == want.keys()
    for key, agg in want.items():
        mine = got[key]
        assert {k: v for k, v in mine.counts.items() if k not in FLOAT_FIELDS} == \
            {k: v for k, v in agg.counts.items() if k not in FLOAT_FIELDS}, key
        assert mine.latency.buckets == agg.latency.buckets and mine.latency.zero_count == agg.latency.zero_count
        assert mine.latency.count == agg.latency.count, key
        for name in FLOAT_FIELDS:
            assert (name in mine.counts) == (name in agg.counts), (key, name)
            if name in agg.counts:
                xs = terms[(key, name)]
                k = len(xs) - 1
                bound = k * U / (1 - k * U) * math.fsum(map(abs, xs))
                assert abs(mine.counts[name] - math.fsum(xs)) <= bound, (key, name, mine.counts[name], math.fsum(xs))


def stored(delta: BatchDelta) -> list[Aggregate]:
    return [*delta.windows.values(), *delta.totals.values()]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 400), span=st.sampled_from([50.0, 900.0, 4 * 3600.0]),
       cap=st.sampled_from([2, 3, 100]), budget=st.sampled_from([1, 3, 1000]),
       extra=st.sampled_from([(), (("tenant", "model_id"),), (("task_type", "tenant", "model_id"),)]))
def test_placement_equals_a_fold_trace_by_trace(seed, n, span, cap, budget, extra):
    traces = random_traces(seed, n, span)
    sums = grouping_set(DIMENSIONS, extra, budget)   # small caps and budgets: the order of admission matters
    guard, ref_guard = RecordingGuard(cap), RecordingGuard(cap)
    delta = BatchDelta()
    place_groups(group_traces(traces, DIMENSIONS, RESOLUTIONS).items(), Slicer(DIMENSIONS, guard, sums), NOW,
                 RESOLUTIONS, delta)
    windows, totals, terms, expire_at, last_seen, late = reference(traces, Slicer(DIMENSIONS, ref_guard, sums), NOW)
    assert guard.asked == ref_guard.asked        # once per raw slice, in order of first appearance
    assert_like(delta.windows, windows, terms)
    assert_like(delta.totals, totals, terms)
    assert delta.expire_at == expire_at
    assert delta.last_seen == last_seen
    assert delta.counters.get("late", 0) == late and delta.counters["traces"] == n
    # no aggregate is stored twice, so merging into one window never changes another
    aggs = stored(delta)
    assert len({id(a) for a in aggs}) == len({id(a.counts) for a in aggs}) == len({id(a.latency) for a in aggs}) \
        == len(aggs)


def test_a_late_minute_still_counts_in_its_hour_and_the_totals_once_per_trace():
    start = int(NOW // 3600 * 3600) - 2 * 3600   # two hours back: its minutes are gone, the hour is kept
    old = [Trace(trace_id=f"o{i}", ts=start + 60 * i + 1, model_id="m", release="r1", arm="baseline",
                 fees_usd=0.25, latency_seconds=0.5 + i) for i in range(3)]   # minutes long past retention
    fresh = Trace(trace_id="f", ts=NOW - 10, model_id="m", release="r1", arm="baseline", fees_usd=0.5)
    slicer = Slicer(("release", "arm"), CardinalityGuard(10))
    delta = fold([*old, fresh], slicer, NOW, RESOLUTIONS)
    sid = slice_id(slicer.key_for(("r1", "baseline")))
    assert delta.counters["late"] == 3 and delta.counters["traces"] == 4
    assert not [key for key in delta.windows if key[0] == "1m" and key[1] < start + 3600]
    assert delta.windows[("1h", start, sid)].traces == 3
    assert delta.windows[("1h", start, sid)].latency.count == 3
    assert delta.totals[sid].traces == 4 and delta.totals[sid].get("fees_usd") == 1.25
    assert delta.last_seen[sid] == fresh.ts
    assert ("1m", start) not in delta.expire_at and ("1h", start) in delta.expire_at


def test_a_group_is_never_merged_into_after_being_stored():
    """Two raw slices sharing a row, one window each: the first one's group is stored (owned) in the
    shared row's window and the second is merged into it — the first slice's own rows must not see it."""
    traces = [Trace(trace_id="a", ts=NOW - 5, model_id="m", release="r1", arm="baseline", tenant="a", steps=1),
              Trace(trace_id="b", ts=NOW - 5, model_id="m", release="r1", arm="baseline", tenant="b", steps=2)]
    slicer = Slicer(("release", "arm", "tenant"), CardinalityGuard(10))
    groups = group_traces(traces, slicer.dimensions, RESOLUTIONS)
    delta = BatchDelta()
    place_groups(groups.items(), slicer, NOW, RESOLUTIONS, delta)
    for tenant, steps in (("a", 1), ("b", 2)):
        sid = slice_id(slicer.key_for(("r1", "baseline", tenant)))
        assert delta.totals[sid].get("steps") == steps
        assert all(delta.windows[(res.name, res.start(NOW - 5), sid)].get("steps") == steps for res in RESOLUTIONS)
    base = slice_id(slicer.key_for(("r1", "baseline", "a"))[:2])
    assert delta.totals[base].get("steps") == 3


def spelt_out(items: list[tuple[GroupKey, Group]], slicer: Slicer, now: float, resolutions: tuple[Resolution, ...],
              ) -> tuple[dict, dict, list]:
    """The placement's sums with nothing shared: a sum per (level, grouping, projection of the raw values,
    window starts from the level on), its parts in order of first position — at level 0 of a widest
    grouping the groups, above that its own sums a level below; for any other grouping the same level's
    sums of its narrowest wider grouping (the first of equals) — each a left fold of its parts' sums (the
    first copied); each window (a late one skipped) or total a left fold of its sums, level by level,
    grouping by grouping, in order of first position. Returns the windows, the totals and the expiry
    entries in the order they are set. Reads the groups' aggregates, never changes them."""
    rows, admit = of_slicer(slicer), guard_admit(slicer.guard)
    dims = [frozenset(g.dimensions) for g in rows.groupings]
    where = [[slicer.dimensions.index(d) for d in g.dimensions] for g in rows.groupings]
    source = [min((k for k, theirs in enumerate(dims) if theirs > mine), key=lambda k: len(dims[k]), default=None)
              for mine in dims]
    depth = len(resolutions)
    parts: dict[tuple, list] = {}
    sid_of: dict[tuple, str] = {}
    row_ids: dict[tuple[str, ...], list[str]] = {}
    for i, ((values, starts), _) in enumerate(items):
        if values not in row_ids:
            row_ids[values] = [slice_id(row) for _, row, _ in rows.rows(slicer.key_for(values), admit)]
        at = [[(level, j, tuple(values[p] for p in where[j]), starts[level:]) for j in range(len(dims))]
              for level in range(depth + 1)]
        for level in range(depth + 1):
            for j in range(len(dims)):
                k = source[j]
                part = at[level][k] if k is not None else at[level - 1][j] if level else i
                mine = parts.setdefault(at[level][j], [])
                if part not in mine:
                    mine.append(part)
                sid_of[at[level][j]] = row_ids[values][j]
    sums: dict[Any, Aggregate] = {}

    def value(part: Any) -> Aggregate:
        if isinstance(part, int):
            return items[part][1].aggregate
        if part not in sums:
            first, *rest = [value(p) for p in parts[part]]
            total = sums[part] = first.copy()
            for other in rest:
                total.merge(other)
        return sums[part]

    for part in parts:
        value(part)
    windows: dict = {}
    totals: dict = {}
    expiring: list = []
    for level in range(depth + 1):
        for j in range(len(dims)):
            for part in [p for p in parts if p[:2] == (level, j)]:
                slot: Any
                if level == depth:
                    store, slot = totals, sid_of[part]
                else:
                    res, start = resolutions[level], part[3][0]
                    if res.expired(start, now):
                        continue
                    expiring.append(((res.name, start), res.expire_at(start)))
                    store, slot = windows, (res.name, start, sid_of[part])
                if slot in store:
                    store[slot].merge(sums[part])
                else:
                    store[slot] = sums[part].copy()
    return windows, totals, expiring


def exactly(aggs: dict) -> list:
    """Keys in insertion order and their aggregates, float fields as their exact value."""
    return [(key, sorted((k, v.hex() if isinstance(v, float) else v) for k, v in agg.counts.items()),
             sorted(agg.latency.buckets.items()), agg.latency.zero_count, agg.latency.count)
            for key, agg in aggs.items()]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), span=st.sampled_from([50.0, 900.0, 4 * 3600.0]),
       tenants=st.sampled_from([5, 40, 100_000]), cap=st.sampled_from([2, 30, 100]),
       budget=st.sampled_from([1, 20, 1000]), shuffled=st.booleans(),
       extra=st.sampled_from([(), (("tenant", "model_id"),), (("task_type", "tenant", "model_id"),)]),
       resolutions=st.sampled_from([RESOLUTIONS, RESOLUTIONS[:1], (), (Resolution("90s", 90, 1800), RESOLUTIONS[1])]))
def test_placement_equals_its_sums_spelt_out_to_the_bit(seed, n, span, tenants, cap, budget, shuffled, extra,
                                                        resolutions):
    traces = random_traces(seed, n, span, tenants)
    sums = grouping_set(DIMENSIONS, extra, budget)
    items = list(group_traces(traces, DIMENSIONS, resolutions).items())
    if shuffled:   # any order of groups (a batch's comes from two paths): the sums follow it
        random.Random(seed).shuffle(items)
    guard, ref_guard = RecordingGuard(cap), RecordingGuard(cap)
    windows, totals, expiring = spelt_out(items, Slicer(DIMENSIONS, ref_guard, sums), NOW, resolutions)
    delta = BatchDelta()
    place_groups(items, Slicer(DIMENSIONS, guard, sums), NOW, resolutions, delta)
    assert guard.asked == ref_guard.asked
    assert exactly(delta.windows) == exactly(windows)
    assert exactly(delta.totals) == exactly(totals)
    assert list(delta.expire_at.items()) == list(dict(expiring).items())
