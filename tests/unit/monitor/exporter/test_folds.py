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


KEYS = st.one_of(st.sampled_from(["traces", "steps", "fees_usd", "latency_sum_seconds", "tokens_in:m1"]),
                 st.integers(-4, 4))  # hash(-1) == hash(-2): keys that share a hash
VALUES = st.one_of(st.integers(0, 50), st.integers(2**62, 2**64), st.floats(0, 10, allow_nan=False),
                   st.booleans())


def plain_int(v: object) -> bool:
    return type(v) is int and -2**63 <= v < 2**63  # not a bool, within 64 bits


@settings(max_examples=400, deadline=None)
@given(held=st.dictionaries(KEYS, VALUES, max_size=6),
       parts=st.lists(st.tuples(st.booleans(), st.dictionaries(KEYS, VALUES, max_size=6)), max_size=6))
def test_the_native_net_sum_of_a_rows_parts_is_the_part_by_part_arithmetic(held, parts):
    """``add_signed`` (native/src/signed.rs) against adding and taking out part by part in Python:
    the same integer counts when it applies (a count ending at 0 removed, a count whose net is 0 not
    touched, float values of FLOAT_FIELDS skipped); None for a value it does not take (anything but an
    int within 64 bits, or a float of such a field), False for a count that would end below 0, the
    first refusal in the keys' first-seen order deciding; the row unchanged whenever it refuses."""
    from fleetmon_native import add_signed

    from monitor.aggregate import FLOAT_FIELDS

    dst = dict(held)
    got = add_signed(dst, [part for _add, part in parts], [add for add, _part in parts], FLOAT_FIELDS)
    net: dict = {}  # first-seen order, as the native sum reads the parts
    refused = None
    for add, part in parts:
        for k, v in part.items():
            if type(v) is float and k in FLOAT_FIELDS:
                continue
            if not plain_int(v):
                refused = refused or "value"
                continue
            net[k] = net.get(k, 0) + (v if add else -v)
    if refused is None:
        for k, n in net.items():
            if n == 0:
                continue
            if k in held and not plain_int(held[k]):
                refused = "value"
            elif held.get(k, 0) + n < 0:
                refused = "below 0"
            elif not plain_int(held.get(k, 0) + n):
                refused = "value"
            if refused:
                break
    if refused is not None:
        assert got is (None if refused == "value" else False) and dst == held
        return
    assert got is True
    for k, v in held.items():
        if net.get(k, 0) == 0:
            assert dst[k] is v  # not touched
    for k, n in net.items():
        final = held.get(k, 0) + n
        if n == 0:
            assert dst.get(k, "absent") == held.get(k, "absent")
        elif final == 0:
            assert k not in dst
        else:
            assert dst[k] == final and type(dst[k]) is int
    assert set(dst) <= set(held) | set(net)
