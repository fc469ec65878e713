"""Invariants of the slice groupings through the real fold (hypothesis): every trace counts once per
grouping, each grouping's rows sum to the whole fleet, budgets are never exceeded, folded counts equal
the traces that moved."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import Aggregate
from monitor.fold import fold
from monitor.groupings import ADMITTED_PREFIX, BASE_DIMENSIONS, FOLDED_COUNTER_PREFIX, grouping_name, grouping_set
from monitor.schema import validate
from monitor.slices import OTHER, CardinalityGuard, Slicer, parse_slice_id, slice_id

NOW = 1_800_000_000.0
DIMENSIONS = ("release", "arm", "task_type", "tenant", "locale")

records = st.fixed_dictionaries({
    "ts": st.floats(min_value=NOW - 3 * 86400, max_value=NOW),
    "release": st.sampled_from(["r1", "r2", "r3"]),
    "arm": st.sampled_from(["baseline", "canary"]),
    "task_type": st.sampled_from(["code", "chat", "search", "math"]),
    "tenant": st.sampled_from([f"t{i}" for i in range(8)] + [OTHER]),
    "locale": st.sampled_from(["en", "de", "fr"]),
    "ok": st.booleans(),
    "tokens_in": st.integers(0, 1000),
})
batches = st.lists(st.lists(records, max_size=30), min_size=1, max_size=4)
extra_groupings = st.lists(st.lists(st.sampled_from(DIMENSIONS), min_size=1, max_size=4, unique=True), max_size=2)


def _traces(batch, offset):
    return [validate({"trace_id": f"t{offset + i}", "model_id": "m", **r}) for i, r in enumerate(batch)]


@settings(max_examples=150, deadline=None)
@given(batches, st.integers(1, 6), st.integers(1, 4), extra_groupings)
def test_groupings_count_each_trace_once_within_budget_and_count_what_they_fold(batches, budget, cap, extra):
    groupings = grouping_set(DIMENSIONS, extra, budget)
    slicer = Slicer(DIMENSIONS, CardinalityGuard(cap), groupings)
    traces, delta = [], None
    for batch in batches:  # several batches through one guard, as a worker does
        mine = _traces(batch, len(traces))
        delta = fold(mine, slicer, NOW, delta=delta)
        traces += mine
    assert delta is not None
    whole = Aggregate.of(traces)
    rows_by_grouping: dict[str, dict[str, Aggregate]] = {g.name: {} for g in groupings.groupings}
    for sid, agg in delta.totals.items():
        key = parse_slice_id(sid)
        name = grouping_name(key)
        grouping = groupings.get(name)
        assert grouping is not None and tuple(d for d, _ in key) == grouping.dimensions  # id → its grouping
        rows_by_grouping[name][sid] = agg
    for g in groupings.groupings:
        rows = rows_by_grouping[g.name]
        merged = Aggregate()
        for agg in rows.values():
            merged.merge(agg)
        assert merged == whole, g.name  # every trace exactly once per grouping; rows sum to the fleet
        # the budget: at most `budget` admitted combinations (rows), plus one __other__ row per release and arm
        real = {sid for sid in rows if any(v != OTHER for d, v in parse_slice_id(sid) if d not in BASE_DIMENSIONS)}
        assert len(real) <= g.budget or not g.extras
        others = set(rows) - real
        assert len(others) <= len({(t.release, t.arm) for t in traces})
        assert len(slicer.guard.admitted.get(ADMITTED_PREFIX + g.name, ())) <= g.budget
        # folded counts equal the traces that moved: those whose own combination is not their row's
        moved = 0
        for t in traces:
            own = dict(slicer.key(t))
            own_row = tuple((d, own[d]) for d in g.dimensions)
            extras = tuple((d, v) for d, v in own_row if d not in BASE_DIMENSIONS)
            admitted = slice_id(own_row) in slicer.guard.admitted.get(ADMITTED_PREFIX + g.name, set())
            if extras and any(v != OTHER for _, v in extras) and not admitted:
                moved += 1
        assert delta.counters.get(FOLDED_COUNTER_PREFIX + g.name, 0) == moved, g.name
    assert FOLDED_COUNTER_PREFIX not in delta.counters  # release × arm (name "") has nothing to fold


@settings(max_examples=100, deadline=None)
@given(batches, st.integers(1, 5))
def test_one_batch_or_many_give_the_same_rows(batches, budget):
    """The guard answers once per value, in order of first appearance: splitting the stream into
    batches changes nothing (a worker's batches and a rebuild's must agree)."""
    groupings = grouping_set(DIMENSIONS, budget=budget)
    traces = [t for i, b in enumerate(batches) for t in _traces(b, 1000 * i)]
    whole = fold(traces, Slicer(DIMENSIONS, CardinalityGuard(3), groupings), NOW)
    slicer = Slicer(DIMENSIONS, CardinalityGuard(3), groupings)
    parts = None
    start = 0
    for b in batches:
        parts = fold(traces[start:start + len(b)], slicer, NOW, delta=parts)
        start += len(b)
    assert parts is not None
    assert whole.totals == parts.totals
    assert whole.counters == parts.counters
