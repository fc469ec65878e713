"""RowFolds against a fresh merge: every row equal field for field and in field order (hypothesis)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.aggregate import Aggregate
from monitor.exporter.folds import RowFolds, merge_fresh
from monitor.store.redis.span_sums import moved_in_place, stale
from tests.support.traces import make_traces

MODELS = ("m1", "m2", "m3")


def traffic(seed: int, n: int) -> Aggregate:
    """An aggregate of ``n`` traces over a few models (so the counters' order matters to the cost)."""
    rng = random.Random(seed)
    return Aggregate.of(dataclasses.replace(t, model_id=rng.choice(MODELS)) for t in make_traces(n, seed=seed))


def same(got: Aggregate, want: Aggregate) -> None:
    assert list(got.counts.items()) == list(want.counts.items())  # values and order, floats exactly
    assert got.latency.buckets == want.latency.buckets
    assert (got.latency.zero_count, got.latency.count) == (want.latency.zero_count, want.latency.count)


#: One scrape's change per member: 0 unchanged, 1 traffic with the step reported, 2 traffic without
#: (the fold takes the difference), 3 the member leaves the row, 4 the member's traffic taken out (a
#: window sliding away: reported as an op that subtracts), 5 a member recomputed with fewer traces
#: (a rebuild: the fold must merge afresh).
change = st.sampled_from([0, 0, 1, 1, 2, 3, 4, 4, 5])


@settings(max_examples=60, deadline=None)
@given(scrapes=st.lists(st.lists(change, min_size=6, max_size=6), min_size=1, max_size=6),
       joins=st.lists(st.booleans(), min_size=6, max_size=6), seed=st.integers(0, 1000))
def test_rows_equal_a_fresh_merge_of_their_members(scrapes, joins, seed):
    rng = random.Random(seed)
    parts: dict[str, list[Aggregate]] = {f"s{i}": [traffic(rng.randrange(10**6), rng.randint(1, 30))]
                                         for i in range(6)}
    members = {sid: agg[0] for sid, agg in parts.items()}
    folds = RowFolds()
    for scrape in scrapes:
        steps = {}
        for (sid, before), what, join in zip(sorted(members.items()), scrape, joins):
            if what in (1, 2):
                extra = traffic(rng.randrange(10**6), rng.randint(1, 10))
                now = before.copy().merge(extra)
                parts[sid].append(extra)
                if what == 1:
                    steps[(-1, sid)] = (before, now, ((True, extra),))
                members[sid] = now
            elif what == 3 and len(members) > 2:
                del members[sid]
            elif what == 4 and len(parts[sid]) > 1:
                gone = parts[sid].pop(0)
                now = merge_fresh(parts[sid])
                steps[(-1, sid)] = (before, now, ((False, gone),))
                members[sid] = now
            elif what == 5:
                members[sid] = parts[sid][0] = traffic(rng.randrange(10**6), 1)
                del parts[sid][1:]
            if join and what == 3 and sid not in members:
                members[sid + "x"] = traffic(rng.randrange(10**6), 3)
                parts[sid + "x"] = [members[sid + "x"]]
        names = sorted(members)
        folds.start()
        got = folds.row((-1, "other"), names, members, steps)
        folds.finish()
        same(got, merge_fresh([members[sid] for sid in names]))


def test_an_unchanged_row_is_the_same_object_and_a_changed_one_is_moved():
    members = {f"s{i}": traffic(i, 20) for i in range(4)}
    folds = RowFolds()
    rows = []
    for _ in range(2):
        folds.start()
        rows.append(folds.row((0, "other"), sorted(members), members, {}))
        folds.finish()
    assert rows[1] is rows[0] and folds.last == {"reused": 1, "moved": 0, "merged": 0}
    extra = traffic(99, 5)
    before = members["s1"]
    members["s1"] = before.copy().merge(extra)
    folds.start()
    moved = folds.row((0, "other"), sorted(members), members, {(0, "s1"): (before, members["s1"], ((True, extra),))})
    folds.finish()
    assert folds.last == {"reused": 0, "moved": 1, "merged": 0}
    same(moved, merge_fresh([members[sid] for sid in sorted(members)]))
    assert folds.row((0, "lonely"), ["s2"], members, {}) is members["s2"]  # one member: the reader's own object


def test_members_moved_in_place_are_never_read_stale():
    """The reader moves a changed sum in place under a new object (the old one is left stale): a row
    takes such a member out through its step, and merges afresh when no step leads to it."""
    members = {f"s{i}": traffic(i, 20) for i in range(5)}
    folds = RowFolds()
    folds.start()
    folds.row((0, "other"), sorted(members), members, {})
    folds.finish()
    before = members["s4"]
    extra = traffic(77, 6)
    members["s4"] = moved_in_place(before).merge(extra)
    assert stale(before)
    with pytest.raises(AttributeError):
        before.counts  # noqa: B018 - its content is gone: a stale read fails loudly
    steps = {(0, "s4"): (before, members["s4"], ((True, extra),))}
    rest = ["s0", "s1", "s2", "s3"]
    folds.start()
    row = folds.row((0, "other"), rest, members, steps)  # s4 left (served alone): out through its step
    folds.finish()
    assert folds.last == {"reused": 0, "moved": 1, "merged": 0}
    same(row, merge_fresh([members[sid] for sid in rest]))
    for member, reported in (("s2", lambda b, now, x: {(0, "s2"): (b, b, ((True, x),))}), ("s3", lambda *_: {})):
        before, extra = members[member], traffic(78, 4)
        members[member] = moved_in_place(before).merge(extra)
        folds.start()  # a stale member without a step that leads to its current object: merged afresh
        row = folds.row((0, "other"), rest, members, reported(before, members[member], extra))
        folds.finish()
        assert folds.last == {"reused": 0, "moved": 0, "merged": 1}
        same(row, merge_fresh([members[sid] for sid in rest]))
    before, extra = members["s1"], traffic(79, 4)
    members["s1"] = moved_in_place(before).merge(extra)
    folds.start()  # and a stale member that left without a step
    row = folds.row((0, "other"), ["s0", "s2", "s3"], members, {})
    folds.finish()
    assert folds.last == {"reused": 0, "moved": 0, "merged": 1}
    same(row, merge_fresh([members[sid] for sid in ("s0", "s2", "s3")]))
