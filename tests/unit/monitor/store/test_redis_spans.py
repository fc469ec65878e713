"""The exporter cache's arithmetic (monitor/store/redis/spans.py) against plain merges, no Redis needed."""

from __future__ import annotations

import random
from array import array

import orjson
import pytest

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.store.redis.span_plan import plan
from monitor.store.redis.span_sums import stale
from monitor.store.redis.spans import Change, fresh_spans, updated
from tests.support.traces import make_traces

STEP = 60


def encoded(agg: Aggregate, rng: random.Random) -> bytes:
    """A window as the fetch script sends it: the JSON of its plain fields, then its sketch buckets."""
    fields = {k: repr(float(v)) if k in FLOAT_FIELDS else str(int(v)) for k, v in agg.to_dict().items()}
    items = list(fields.items())
    rng.shuffle(items)
    plain = [x for k, v in items if not (k.startswith("latency:") and k != "latency:z") for x in (k, v)]
    buckets = [x for k, v in items if k.startswith("latency:") and k != "latency:z" for x in (k[8:], v)]
    return orjson.dumps(plain) + b"\n" + " ".join(buckets).encode()


def windows(seed: int, starts: list[int]) -> dict[int, Aggregate]:
    rng = random.Random(seed)
    traces = make_traces(600, seed=seed)
    return {start: Aggregate.of(rng.sample(traces, rng.randint(1, 40))) for start in starts if rng.random() < 0.8}


def merged(aggs: dict[int, Aggregate], span: tuple[int, ...]) -> Aggregate:
    total = Aggregate()
    for start in span:  # in window order, as the store merges them
        if start in aggs:
            total.merge(aggs[start])
    return total


@pytest.mark.parametrize("seed", range(6))
def test_fresh_sums_and_incremental_updates_equal_plain_merges(seed):
    rng = random.Random(seed)
    range_ = tuple(range(0, 61 * STEP, STEP))
    suffixes = (6, 61)
    content = windows(seed, list(range_))
    content.setdefault(range_[10], Aggregate.of(make_traces(3, seed=seed)))  # an old window with traces
    state = fresh_spans("1", {s: encoded(a, rng) for s, a in content.items()}, range_, suffixes)
    for k, length in enumerate(suffixes):
        assert state.sums[k].to_dict() == merged(content, range_[-length:]).to_dict()
    version, in_place = 1, 0
    for step in range(8):  # writes into the newest minutes (cached), then into an old one (not cached)
        start = range_[-2 - step % 3] if step < 7 else range_[10]
        extra = Aggregate.of(make_traces(rng.randint(1, 9), seed=100 * seed + step))
        content[start] = content[start].copy().merge(extra) if start in content else extra
        version += extra.traces
        counts = [content[s].traces if s in content else 0 for s in range_]
        if step % 2:  # as the reader parses them (compared natively), or a list (in Python): the same plan
            counts = array("q", counts)
        change = plan("s", str(version), counts, range_, suffixes, state, state.version)
        assert change.fresh == (step == 7) and change.shortcut != change.fresh
        was = [agg.to_dict() for agg in state.sums]
        update = updated(change, state, {s: encoded(content[s], rng) for s in change.wanted}, range_, suffixes, True)
        assert update is not None
        for k, span_ops in enumerate(update.ops):
            if span_ops:  # a changed sum is another object: moved in place (its windows only gained), or a copy
                assert update.spans.sums[k] is not state.sums[k]
                if stale(state.sums[k]):  # moved in place: its dicts are the new sum's, not copied
                    in_place += 1
                else:
                    assert state.sums[k].to_dict() == was[k]  # the copy's original left as it was
        state = update.spans
        for k, length in enumerate(suffixes):
            assert state.sums[k].to_dict() == merged(content, range_[-length:]).to_dict(), (step, k)
    assert in_place > 0


def test_a_count_that_went_down_is_a_fresh_sum():
    rng = random.Random(1)
    range_ = tuple(range(0, 5 * STEP, STEP))
    content = windows(1, list(range_))
    state = fresh_spans("9", {s: encoded(a, rng) for s, a in content.items()}, range_, (5,))
    counts = [max(0, (content[s].traces if s in content else 0) - 1) for s in range_]
    change = plan("s", "5", counts, range_, (5,), state, "9")
    assert isinstance(change, Change) and change.fresh and not change.shortcut
    assert change.wanted == [s for s, c in zip(range_, counts) if c]


def test_buckets_that_do_not_come_in_pairs_are_refused():
    with pytest.raises(ValueError, match="counts >= 0 in pairs"):
        fresh_spans("1", {0: b'["traces","1"]\n7 -2'}, (0,), (1,))



@pytest.mark.parametrize("seed", range(6))
def test_sums_follow_the_range_as_it_moves_on(seed):
    """The minute's slide (the range moved on by one or more windows, some cached, some not) and a
    change of the spans' lengths: the sums, counts and floats equal those of a fresh sum."""
    rng = random.Random(seed)
    starts = list(range(0, 160 * STEP, STEP))
    content = windows(seed, starts)
    first, suffixes = 0, (6, 61)
    range_ = tuple(starts[:61])
    state = fresh_spans("1", {s: encoded(content[s], rng) for s in range_ if s in content}, range_, suffixes)
    version = 1
    for step in range(10):
        first = min(first + (rng.choice((0, 1, 1, 2, 5, 7, 61)) if step != 6 else 1), len(starts) - 61)
        if step == 6:
            suffixes = (5, 61)  # another length: the general path
        range_ = tuple(starts[first:first + 61])
        for start in [*rng.sample(range_[-8:], 2), rng.choice(range_)]:  # writes, mostly into the newest minutes
            extra = Aggregate.of(make_traces(rng.randint(1, 9), seed=1000 * seed + step))
            content[start] = content[start].copy().merge(extra) if start in content else extra
            version += extra.traces
        counts = array("q", [content[s].traces if s in content else 0 for s in range_])
        change = plan("s", str(version), counts, range_, suffixes, state, state.version)
        update = updated(change, state, {s: encoded(content[s], rng) for s in change.wanted}, range_, suffixes, True)
        assert update is not None, step
        state = update.spans
        fresh = fresh_spans("x", {s: encoded(content[s], rng) for s in range_ if s in content}, range_, suffixes)
        assert list(state.counts) == list(fresh.counts)
        assert repr(list(state.floats)) == repr(list(fresh.floats))
        for k, length in enumerate(suffixes):
            assert state.sums[k].to_dict() == merged(content, range_[-length:]).to_dict(), (step, k)


@pytest.mark.parametrize("seed", range(8))
def test_the_only_gained_path_is_the_general_path(seed, monkeypatch):
    """An update where nothing slid and every changed window only gained (or got its first traces),
    taken by ``spans._only_gained``, equals the general path's on a copy of the same cache: sums
    (fields in order, floats to the bit), counts, floats, kept windows, increments and ops."""
    import copy

    import monitor.store.redis.spans as spans

    rng = random.Random(seed)
    range_ = tuple(range(0, 61 * STEP, STEP))
    suffixes = (6, 61)
    content = windows(seed, list(range_))
    state = fresh_spans("1", {s: encoded(a, rng) for s, a in content.items()}, range_, suffixes)
    version, taken = 1, 0
    for step in range(10):
        for start in rng.sample(range_[-5:], rng.randint(1, 3)):  # newest minutes: mostly cached, or empty before
            extra = Aggregate.of(make_traces(rng.randint(1, 9), seed=100 * seed + step))
            content[start] = content[start].copy().merge(extra) if start in content else extra
            version += extra.traces
        counts = array("q", [content[s].traces if s in content else 0 for s in range_])
        change = plan("s", str(version), counts, range_, suffixes, state, state.version)
        fetched = {s: encoded(content[s], rng) for s in change.wanted}
        other = copy.deepcopy(state)
        fast = spans._only_gained(change, state, fetched, range_, suffixes, str(version))
        with monkeypatch.context() as m:
            m.setattr(spans, "_only_gained", lambda *args: None)
            general = updated(change, other, fetched, range_, suffixes, True)
        assert general is not None
        if fast is None:
            state = general.spans  # (a window's old content not cached: the general path only)
            continue
        taken += 1
        got, want = fast.spans, general.spans
        for a, b in zip(got.sums, want.sums):
            assert list(a.counts.items()) == list(b.counts.items())
            assert list(a.latency.buckets.items()) == list(b.latency.buckets.items())
            assert (a.latency.zero_count, a.latency.count) == (b.latency.zero_count, b.latency.count)
        assert (got.version, got.starts, got.suffixes) == (want.version, want.starts, want.suffixes)
        assert list(got.counts) == list(want.counts) and repr(list(got.floats)) == repr(list(want.floats))
        assert list(got.recent.items()) == list(want.recent.items())
        assert {s: a.to_dict() for s, a in fast.gained.items()} == \
               {s: a.to_dict() for s, a in general.gained.items() if a is not None}
        assert [None if o is None else [(add, p.to_dict()) for add, p in o] for o in fast.ops] == \
               [None if o is None else [(add, p.to_dict()) for add, p in o] for o in general.ops]
        state = fast.spans
        for k, length in enumerate(suffixes):
            assert state.sums[k].to_dict() == merged(content, range_[-length:]).to_dict(), (step, k)
    assert taken >= 4
