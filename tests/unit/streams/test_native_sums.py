"""The native sums (:class:`streams.native.NativeSums`, ``native/src/held.rs``) against Python's.

:func:`monitor.fold.place_groups` plans which parts each sum adds and in what order; the native sums
must then give exactly what :class:`monitor.fold.AggregateSums` gives: every window and total with
the same fields and sketch buckets in the same dict order, integers equal, floats equal to the bit
(compared by ``float.hex``), and the same packed text in the store's payload. Checked on random and
edge batches (the native path's groups, with Python's for the records it leaves to Python), on a
replay-shaped batch, and on random aggregates and plans outside any fold.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.aggregate import FLOAT_FIELDS, Aggregate
from monitor.delta import BatchDelta
from monitor.fold import AggregateSums, Group
from monitor.sketch import LogSketch
from monitor.slices import CardinalityGuard, Slicer
from monitor.store.redis.packed import pack_python
from monitor.store.redis.store import RedisStore
from streams import native as native_module
from streams.batch import decode_batch, fold_batch
from tests.support.batches import Rec
from tests.support.native_records import DIMENSIONS, EDGES, NOW, RESOLUTIONS, encoded, variant

pytestmark = pytest.mark.skipif(not native_module.available(), reason="fleetmon_native is not built")


def exact(agg: Aggregate) -> tuple:
    """Everything of an aggregate, in dict order, floats by their bits."""
    return ([(name, type(value).__name__, value.hex() if isinstance(value, float) else value)
             for name, value in agg.counts.items()],
            list(agg.latency.buckets.items()), agg.latency.zero_count, agg.latency.count)


def exact_delta(delta: BatchDelta) -> tuple:
    return ([(key, exact(agg)) for key, agg in delta.windows.items()],
            [(sid, exact(agg)) for sid, agg in delta.totals.items()],
            delta.counters, delta.last_seen, list(delta.expire_at.items()), delta.identities)


def folder() -> native_module.NativeFolder:
    return native_module.NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=4096)


def store() -> RedisStore:
    return RedisStore(redis.Redis(), prefix="test")   # payload() only: nothing is sent


def both_sums(parts: list[list[bytes | None]], *, max_values: int = 3, resolutions=RESOLUTIONS,
              dimensions=DIMENSIONS) -> tuple[tuple, tuple, bytes, bytes, BatchDelta]:
    """Decode ``parts`` natively and fold them with the native sums and with Python's (each on its
    own decode); returns both deltas exactly, both payloads, and the native-sums delta."""
    out = []
    for native_sums in (True, False):
        spec, offset = [], 0
        for p, values in enumerate(parts):
            spec.append(("t", p, [Rec(offset + i, v) for i, v in enumerate(values)]))
            offset += len(values)
        native = native_module.NativeFolder(dimensions, resolutions, max_record_bytes=4096)
        batch = decode_batch(spec, NOW, max_record_bytes=4096, native=native)
        slicer = Slicer(dimensions, CardinalityGuard(max_values))
        delta = fold_batch(batch, slicer, NOW, resolutions, native_sums=native_sums)
        payload = store().payload(delta)    # before the windows are read: the native packer's text
        out.append((delta, payload))
    (na, na_payload), (py, py_payload) = out
    return exact_delta(na), exact_delta(py), na_payload, py_payload, na


def assert_same(parts, **options) -> BatchDelta:
    na, py, na_payload, py_payload, delta = both_sums(parts, **options)
    assert na == py
    assert na_payload == py_payload
    return delta


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(encoded(), max_size=12), min_size=1, max_size=3))
def test_native_sums_equal_pythons_on_random_batches(parts):
    assert_same(parts)


@pytest.mark.parametrize("value", EDGES, ids=range(len(EDGES)))
def test_native_sums_equal_pythons_on_edges(value):
    assert_same([[value, variant(), variant(model_id="m2", latency_ms=3.0, fees_usd=0.25)]])


def replay(n: int, seed: int, span: float = 3600.0) -> list[bytes]:
    """Bench-shaped traces over ``span`` seconds before NOW (many windows per slice)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
    from throughput import traces
    return [value for _, value in traces(n, seed, NOW, 0.0, span)]


@pytest.mark.parametrize("max_values", [2, 100])
def test_native_sums_equal_pythons_on_a_replay_batch(max_values):
    values = replay(4000, 7, span=7200.0)   # half of it past the minute windows' retention: late
    delta = assert_same([values[p::4] for p in range(4)], max_values=max_values,
                        dimensions=("release", "arm", "task_type", "tenant", "locale"))
    assert delta.counters["late"] > 0 and len(delta.windows) > 100


def test_the_batch_is_placed_in_python_when_the_native_sums_refuse(monkeypatch):
    values = [variant(fees_usd=0.5), variant(**{"gen_ai.request.model": "m1", "fees_usd": 0.5}), variant(fees_usd=0.5)]

    def refuse(self, delta, windows, totals):
        raise native_module.NativeRefused("planted")

    monkeypatch.setattr(native_module.NativeSums, "place", refuse)
    delta = assert_same([values])
    assert delta.held_windows is None and delta.windows    # placed in Python


def test_what_the_native_sums_refuse():
    def parts(*aggregates):
        summing = native_module.NativeSums(native_module.empty_held())
        return summing, [summing.part(Group(agg, 0.0, 0)) for agg in aggregates]

    summing, ids = parts(Aggregate({"fees_usd": 1.0}), Aggregate({"fees_usd": 2}))   # float + int
    summing.add(ids)
    with pytest.raises(native_module.NativeRefused, match="cannot add"):
        summing.place(BatchDelta(), [(("1m", 0, "a"), len(ids))], [])
    summing, ids = parts(Aggregate({"traces": 2**126}), Aggregate({"traces": 2**126}))   # past i128
    with pytest.raises(native_module.NativeRefused, match="overflows"):
        summing.place(BatchDelta(), [], [("a", ids[0]), ("a", ids[1])])
    for odd in (Aggregate({"traces": True}), Aggregate({"traces": 2**200}), Aggregate({7: 1}),
                Aggregate({}, LogSketch(0.02)), Aggregate({}, LogSketch.of_buckets({1: 2**64}))):
        with pytest.raises(native_module.NativeRefused):
            parts(odd)
    delta = BatchDelta()
    delta.windows[("1m", 0, "a")] = Aggregate()
    with pytest.raises(native_module.NativeRefused, match="holds windows"):
        parts(Aggregate())[0].place(delta, [], [])


def test_a_batch_folds_to_the_same_delta_twice_on_the_native_sums():
    spec = [("t", 0, [Rec(i, v) for i, v in enumerate(replay(600, 3))])]
    batch = decode_batch(spec, NOW, native=folder())
    slicer = Slicer(DIMENSIONS, CardinalityGuard(100))
    first = exact_delta(fold_batch(batch, slicer, NOW, RESOLUTIONS))
    assert exact_delta(fold_batch(batch, slicer, NOW, RESOLUTIONS)) == first


# -- random aggregates and plans, outside any fold -------------------------------------------------
names = st.sampled_from(["traces", "steps", "outcome:success", "tokens_in:m", "tokens_in:é", "fees_usd",
                         "latency_sum_seconds", "latency_count", 'a"b', "x\ny"])
floats = st.one_of(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
                   st.sampled_from([0.0, -0.0, 0.1, 1e-300, 5e-324, 1e16, 1.5e-5]))
ints = st.one_of(st.integers(-5, 5), st.integers(0, 2**62), st.sampled_from([2**63, -(2**63) - 1, 2**100]))


@st.composite
def aggregates(draw) -> Aggregate:
    counts: dict[str, float] = {}
    for name in draw(st.lists(names, unique=True, max_size=8)):
        counts[name] = draw(floats) if name in FLOAT_FIELDS else draw(ints)
    buckets = {k: draw(st.integers(1, 2**40)) for k in draw(st.lists(
        st.one_of(st.integers(-700, 700), st.integers(-2**62, 2**62)), unique=True, max_size=12))}
    return Aggregate(counts, LogSketch.of_buckets(buckets, draw(st.integers(0, 3))))


@st.composite
def plans(draw):
    """Parts, then sums of two or more earlier ids, then window and total placements of any ids."""
    parts = draw(st.lists(aggregates(), min_size=1, max_size=6))
    sums: list[list[int]] = []
    for _ in range(draw(st.integers(0, 6))):
        built = len(parts) + len(sums)
        sums.append(draw(st.lists(st.integers(0, built - 1), min_size=2, max_size=5)))
    ids = st.integers(0, len(parts) + len(sums) - 1)
    windows = draw(st.lists(st.tuples(st.sampled_from([("1m", 0, "a"), ("1m", 60, "a"), ("1h", 0, "b")]), ids),
                            max_size=8))
    totals = draw(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), ids), max_size=6))
    return parts, sums, windows, totals


def run(summing, parts, sums, windows, totals) -> BatchDelta:
    delta = BatchDelta()
    for agg in parts:
        summing.part(Group(agg.copy(), 0.0, 0))
    for plan in sums:
        summing.add(plan)
    summing.place(delta, windows, totals)
    return delta


@settings(max_examples=400, deadline=None)
@given(plans())
def test_native_sums_equal_aggregate_sums_on_random_plans(plan):
    python = run(AggregateSums(), *plan)
    native = run(native_module.NativeSums(native_module.empty_held()), *plan)
    packed = native.held_windows.packed_windows(sorted(FLOAT_FIELDS), "latency:z")
    assert exact_delta(native) == exact_delta(python)
    for text, agg in zip(packed, python.windows.values(), strict=True):
        if text is None:   # left to Python: a name JSON escapes, or a number past i64
            assert any(not name.isprintable() or '"' in name for name in agg.counts) or \
                any(abs(v) >= 2**63 for name, v in agg.counts.items() if isinstance(v, int) and v)
        else:
            assert text == pack_python(agg)


def test_the_native_packer_writes_pythons_text_on_a_replay_batch():
    values = replay(3000, 11)
    spec = [("t", 0, [Rec(i, v) for i, v in enumerate(values)])]
    delta = fold_batch(decode_batch(spec, NOW, native=folder()), Slicer(DIMENSIONS, CardinalityGuard(100)),
                       NOW, RESOLUTIONS)
    held = delta.held_windows
    assert held is not None
    texts = held.packed_windows(sorted(FLOAT_FIELDS), "latency:z")
    assert None not in texts
    assert texts == [pack_python(agg) for agg in delta.windows.values()]
    assert json.loads(texts[0].partition("\n")[0])[0] == "traces"


def test_a_random_order_of_the_same_parts_still_matches():
    """Shuffled parts of a real batch: the dict orders differ from the fold's, and still agree."""
    values = replay(800, 5)
    batch = decode_batch([("t", 0, [Rec(i, v) for i, v in enumerate(values)])], NOW, native=folder(),
                         max_record_bytes=4096)
    groups = [group for _, group in batch.groups]
    rng = random.Random(1)
    rng.shuffle(groups)
    sums = [rng.sample(range(len(groups)), 3) for _ in range(20)]
    windows = [(("1m", 60 * (i % 7), "s"), rng.randrange(len(groups) + len(sums))) for i in range(30)]
    totals = [(f"s{i % 3}", rng.randrange(len(groups) + len(sums))) for i in range(10)]

    def go(summing):
        delta = BatchDelta()
        ids = [summing.part(group) for group in groups]
        for plan in sums:
            summing.add([ids[i] if i < len(ids) else i for i in plan])
        summing.place(delta, [(key, ids[i] if i < len(ids) else i) for key, i in windows],
                      [(sid, ids[i] if i < len(ids) else i) for sid, i in totals])
        return exact_delta(delta)

    assert go(native_module.NativeSums(batch.held)) == go(AggregateSums())
