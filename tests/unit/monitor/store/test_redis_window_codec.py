"""The native reader of packed hashes (native/src/window.rs) gives exactly what the Python reader gives.

Both halves of the exporter's reads that use it: one hash decoded (``wire.decode_hash``) and a
slice's windows summed per span (``span_sums.fresh_sums``). On any text the native codec either
returns the Python result to the last bit and in the same field order, or hands the text back
(None) and Python decides; on the texts the stores write it must not hand any back.
"""

from __future__ import annotations

import math
import random
import sys
from array import array

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.aggregate import Aggregate
from monitor.store.redis import span_sums, wire
from monitor.store.redis.packed import pack
from tests.support.traces import make_traces

CODEC = wire.CODEC
pytestmark = pytest.mark.skipif(CODEC is None, reason="fleetmon_native is not built (make install)")


def windows(seed: int, n: int = 12) -> list[Aggregate]:
    rng = random.Random(seed)
    traces = make_traces(300, seed=seed)
    out = [Aggregate.of(rng.sample(traces, rng.randint(1, 60))) for _ in range(n)]
    odd = Aggregate({"traces": 3, 'tokens_in:m/"x"\u00e9': 12, "fees_usd": 0.1 + 0.2})  # escapes, non-ASCII
    for seconds in (0.0, 0.0004, 0.2, 30.0):  # the zero bucket, negative and positive indices
        odd.latency.add(seconds)
    return [*out, odd, Aggregate({"traces": 1})]


def same_aggregate(got: Aggregate, want: Aggregate) -> None:
    assert repr(list(got.counts.items())) == repr(list(want.counts.items()))  # values (nan too), field order
    assert [type(v) for v in got.counts.values()] == [type(v) for v in want.counts.values()]
    assert list(got.latency.buckets.items()) == list(want.latency.buckets.items())
    assert (got.latency.zero_count, got.latency.count) == (want.latency.zero_count, want.latency.count)


def outcome(read, *args):
    """The reader's result, or the error it raised (a broken text: Python names it as before)."""
    try:
        return read(*args)
    except Exception as exc:  # noqa: BLE001 - compared below, type and message
        return exc


@pytest.mark.parametrize("seed", range(3))
def test_a_packed_window_decodes_natively_as_in_python(seed):
    for agg in windows(seed):
        text = pack(agg).encode()
        assert CODEC.decode(text) is not None  # the stores' own texts stay on the native path
        same_aggregate(wire.decode_hash(text), wire.decode_hash_python(text))
        interned = wire.decode_interned(text.decode())
        same_aggregate(interned, wire.decode_hash_python(text))
        assert all(key is __import__("sys").intern(key) for key in interned.counts)


#: Values around what the native reader accepts: what Lua and Python print, and what only Python reads.
VALUES = ["0", "7", "-3", "007", "1.5", "-0.0", "1e-05", "2.5E+3", "1.", ".5", "12345678901234567",
          "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1e400", "inf", "nan", "+3",
          " 3", "3 ", "1_0", "", "0x10", "1e", "--1", "١"]
NAMES = ["traces", "successes", "fees_usd", "latency_sum_seconds", "latency:z", "latency:3", "tokens_in:a/b",
         'q"uote', "é", "outcome:none"]


@st.composite
def near_misses(draw: st.DrawFn) -> bytes:
    """Hash texts near the stores' format: odd values, names, escapes, whitespace, broken pairs."""
    value = st.sampled_from(VALUES[:9] * 8 + VALUES)  # mostly what the stores write
    name = st.sampled_from(NAMES[:4] * 4 + NAMES)
    pairs = draw(st.lists(st.tuples(name, value), max_size=6))
    flat = [x for pair in pairs for x in pair]
    if draw(st.integers(0, 9)) == 0 and flat:
        flat.pop()  # an odd list
    head = orjson.dumps(flat)
    if draw(st.integers(0, 2)) == 0:
        head = draw(st.sampled_from([head.replace(b",", b", "), head.replace(b"/", b"\\/"), b"{}", b" [ ] ",
                                     b"[1,2]", b'["a"', b"", head + b"x"]))
    count = st.one_of(st.sampled_from(["0", "1", "5", "40"]),
                      st.sampled_from(["-2", "-7", "x", "1.5", "99999999999999999999"]))
    tokens = [x for pair in draw(st.lists(st.tuples(st.sampled_from(["1", "-2", "3", "1", "40"]), count),
                                          max_size=6)) for x in pair]
    if draw(st.integers(0, 9)) == 0:
        tokens.append("7")  # odd
    sep = draw(st.sampled_from([" ", "  ", "\t", " \n "]))
    return head + b"\n" + sep.join(tokens).encode()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_misses())
def test_near_miss_texts_decode_as_in_python_or_go_back_to_python(text):
    want = outcome(wire.decode_hash_python, text)
    native = CODEC.decode(text)
    if native is not None:
        assert not isinstance(want, Exception), (text, want)
        same_aggregate(wire.decode_hash(text), want)
    got = outcome(wire.decode_hash, text)
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
    else:
        same_aggregate(got, want)


def same_sums(got: span_sums.FreshSums, want: span_sums.FreshSums) -> None:
    assert got.counts == want.counts
    assert array("d", got.floats).tobytes() == array("d", want.floats).tobytes()  # nan where absent, bit for bit
    assert len(got.sums) == len(want.sums)
    for a, b in zip(got.sums, want.sums):
        same_aggregate(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_a_slices_windows_sum_natively_as_in_python(seed):
    rng = random.Random(seed)
    pool = windows(seed)
    range_ = tuple(range(1000, 1000 + 60 * 61, 60))
    fetched: dict[int, bytes | str] = {}
    for start in range_:
        if rng.random() < 0.8:
            text = pack(rng.choice(pool))
            fetched[start] = text if rng.random() < 0.5 else text.encode()  # a client may decode replies
    expired = rng.choice(range_)
    fetched[expired] = pack(Aggregate({"fees_usd": 0.25}))  # traces 0: absent, its floats still listed
    for suffixes in ((5, 61), (61,), (1, 5, 61), (0, 61)):
        raws = [fetched.get(s) for s in range_]
        assert CODEC.sums([r.encode() if isinstance(r, str) else r for r in raws], list(suffixes)) is not None
        same_sums(span_sums.fresh_sums(fetched, range_, suffixes), span_sums.fresh_sums_python(fetched, range_,
                                                                                                suffixes))
    empty = span_sums.fresh_sums({}, range_, (5, 61))
    same_sums(empty, span_sums.fresh_sums_python({}, range_, (5, 61)))
    assert all(math.isnan(v) for v in empty.floats)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.none(), near_misses()), min_size=1, max_size=6), st.data())
def test_near_miss_windows_sum_as_in_python_or_go_back_to_python(texts, data):
    suffixes = tuple(data.draw(st.lists(st.integers(0, len(texts)), min_size=1, max_size=3)))
    sums_as_in_python(texts, suffixes)


def sums_as_in_python(raws: list[bytes | None], suffixes: tuple[int, ...]) -> None:
    """The sums of windows ``raws`` (None: absent) over the spans: the native codec's or, where it
    declines, Python's, equal to Python's (an error, the same error)."""
    range_ = tuple(range(len(raws)))
    fetched = {i: t for i, t in enumerate(raws) if t is not None}
    want = outcome(span_sums.fresh_sums_python, fetched, range_, suffixes)
    if CODEC.sums(list(raws), list(suffixes)) is not None:
        assert not isinstance(want, Exception), (raws, want)
    got = outcome(span_sums.fresh_sums, fetched, range_, suffixes)
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
    else:
        same_sums(got, want)


NUMBERS = st.one_of(st.integers(-5, 2**70), st.floats(allow_nan=False, width=64), st.sampled_from([0, 0.0, -0.0]))
DICTS = st.dictionaries(st.one_of(st.sampled_from(["traces", "fees_usd", "a", "b"]), st.integers(-3, 5)), NUMBERS,
                        max_size=8)


@settings(max_examples=200, deadline=None)
@given(DICTS, DICTS)
def test_dict_differences_natively_as_in_python(new, old):
    assert span_sums._difference is not None
    got, want = span_sums.difference(new, old), span_sums.difference(new, old, native=False)
    assert repr(None if got is None else list(got.items())) == repr(None if want is None else list(want.items()))
    grown = {k: v + abs(new.get(k, 0)) for k, v in old.items()}  # never below: mostly a difference
    got, want = span_sums.difference(grown, old), span_sums.difference(grown, old, native=False)
    assert repr(None if got is None else list(got.items())) == repr(None if want is None else list(want.items()))


@settings(max_examples=150, deadline=None)
@given(DICTS, DICTS, st.dictionaries(st.integers(-50, 50), st.integers(0, 2**66), max_size=6),
       st.dictionaries(st.integers(-50, 50), st.integers(0, 2**66), max_size=6))
def test_aggregate_merge_is_the_sum_written_out(a, b, buckets_a, buckets_b):
    """The sums and the exporter's rows add with ``Aggregate.merge`` (its dict loops native when built)."""
    def agg(counts: dict, buckets: dict) -> Aggregate:
        out = Aggregate(dict(counts))
        out.latency.buckets, out.latency.zero_count = dict(buckets), 2
        out.latency.count = 2 + sum(buckets.values())
        return out

    def added(x: dict, y: dict) -> dict:
        out = dict(x)
        for key, value in y.items():
            out[key] = out.get(key, 0) + value
        return out

    got = agg(a, buckets_a).merge(agg(b, buckets_b))
    want = agg(added(a, b), added(buckets_a, buckets_b))
    want.latency.zero_count, want.latency.count = 4, 4 + sum(buckets_a.values()) + sum(buckets_b.values())
    same_aggregate(got, want)
    assert list(got.counts) == list(want.counts) and list(got.latency.buckets) == list(want.latency.buckets)
    other = agg(b, buckets_b)
    other.latency.relative_accuracy = 0.05  # a sketch of other parameters is refused
    with pytest.raises(ValueError, match="different parameters"):
        agg(a, buckets_a).merge(other)


def test_native_dict_addition_is_the_python_loop_even_at_its_edges():
    from fleetmon_native import add_into

    def python(dst: dict, src: dict) -> dict:
        for k, v in list(src.items()):
            dst[k] = dst.get(k, 0) + v
        return dst

    for dst, src in [({"a": 1, "b": 2.5}, {"b": 1, "c": 3, "a": 2**70}), ({}, {"x": -1.5, 7: 0}),
                     ({"t": True}, {"t": 1})]:
        want = python(dict(dst), src)
        add_into(dst, src)
        assert repr(list(dst.items())) == repr(list(want.items()))
    same = {1: 2, 3: 4.5}
    add_into(same, same)  # a dict added to itself: each value doubled once
    assert same == {1: 4, 3: 9.0}
    with pytest.raises(TypeError, match="unsupported operand"):
        add_into({"a": 1}, {"a": "x"})  # Python's error, as the Python loop raises it
    with pytest.raises(TypeError):
        add_into({}, {"a": "x"})  # 0 + "x"


@pytest.mark.parametrize("seed", range(3))
def test_a_windows_increment_reads_natively_as_the_difference_of_its_decoded_texts(seed):
    rng = random.Random(seed)
    pool = windows(seed)
    for _ in range(40):
        old = rng.choice(pool)
        new = old.copy().merge(rng.choice(pool)) if rng.random() < 0.7 else rng.choice(pool)  # or unrelated
        for a, b in ((new, old), (old, old), (old, Aggregate({"traces": 1}))):
            raw_a, raw_b = pack(a).encode(), pack(b).encode()
            got = CODEC.delta(raw_a, raw_b)
            assert got is not None  # the stores' texts stay native
            same_increment(got, raw_a, raw_b)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(near_misses(), near_misses())
def test_near_miss_increments_read_as_in_python_or_go_back_to_python(new, old):
    got = CODEC.delta(new, old)
    if got is not None:  # both readable by Python then
        same_increment(got, new, old)


def same_increment(got, raw_new: bytes, raw_old: bytes) -> None:
    """``CODEC.delta``'s answer equals the Python reader's: the new count, its floats, what it gained."""
    want_a, want_b = wire.decode_hash_python(raw_new), wire.decode_hash_python(raw_old)
    assert got[0] == want_a.traces
    assert array("d", got[1]).tobytes() == array("d", span_sums.window_floats(want_a)).tobytes()
    want = span_sums.delta(want_a, want_b)
    assert (got[2] is None) == (want is None)
    if want is not None:
        same_aggregate(span_sums._sketched(*got[2]), want)


FLOATS_OR_ABSENT = st.one_of(st.floats(allow_nan=False, width=64), st.just(math.nan))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 70), st.data())
def test_float_fields_resum_natively_with_the_same_additions_in_the_same_order(n, data):
    assert span_sums._resum_floats is not None
    floats = array("d", data.draw(st.lists(FLOATS_OR_ABSENT, min_size=n * span_sums.N_FLOATS,
                                           max_size=n * span_sums.N_FLOATS)))
    range_ = tuple(range(0, 60 * n, 60))
    span = range_[n - data.draw(st.integers(0, n)):]
    got, want = Aggregate({"traces": 1, "fees_usd": 9.5}), Aggregate({"traces": 1, "fees_usd": 9.5})
    span_sums.resum_floats(got, floats, range_, span)
    span_sums.resum_floats(want, floats, range_, span, native=False)
    assert list(got.counts) == list(want.counts)  # a field no window holds is left out: the same keys, in order
    assert [float(v).hex() for v in got.counts.values()] == [float(v).hex() for v in want.counts.values()]
    listed = Aggregate({"traces": 1})  # not an array: the Python fold
    assert span_sums.resum_floats(listed, list(floats), range_, span).counts.keys() == want.counts.keys() | {"traces"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=70), st.lists(st.integers(-2**63, 2**63 - 1), max_size=70))
def test_changed_positions_natively_as_in_python(new, old):
    assert span_sums._changed_positions is not None
    old = old + new[len(old):]  # mostly the same counts, some changed
    if old:
        old[len(old) // 2] ^= 1
    want = span_sums.changed(new, old, native=False)
    assert span_sums.changed(array("q", new), array("q", old)) == want == span_sums.changed(new, old)
    assert want == [i for i in range(min(len(new), len(old))) if new[i] != old[i]]


COUNT_TOKENS = st.one_of(st.integers(-2**63, 2**63 - 1).map(str), st.integers(0, 99).map(str),
                         st.sampled_from(["+5", "1_000", "0x1f", "", "-", "7.0", "\u0663", "99999999999999999999"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(COUNT_TOKENS, max_size=70), st.sampled_from([" ", "  ", "\t", " \n"]), st.integers(0, 72))
def test_a_counts_reply_reads_natively_as_in_python(tokens, separator, expected):
    assert wire._parse_counts is not None
    raw = separator.join(tokens).encode()
    try:
        want = array("q", map(int, raw.decode().split()))  # what the reader did before: Python's int decides
    except (ValueError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            wire.counts_of(raw, expected)
        return
    for got in (wire.counts_of(raw, expected), wire.counts_of(raw.decode(), expected),
                wire.counts_of(raw, len(want)), wire.counts_of(raw, expected, native=False)):
        assert got.typecode == "q" and got.tolist() == want.tolist()  # any other number of counts is read as it is


def test_the_native_counts_reader_fills_only_an_array_of_its_length_and_hands_back_what_it_cannot_read():
    out = array("q", [7, 7, 7])
    assert wire._parse_counts(b"1 2", out) == 2 and out.tolist() == [7, 7, 7]  # a wrong number: left as it was
    assert wire._parse_counts(b" 1\t2\n-3 ", out) == 3 and out.tolist() == [1, 2, -3]
    assert wire._parse_counts(b"1 +2 3", out) is None and out.tolist() == [1, 2, -3]  # Python's int decides
    with pytest.raises(ValueError, match="writable"):
        wire._parse_counts(b"1 2 3", memoryview(b"\0" * 24).cast("q"))


def test_the_codec_hands_out_interned_field_names_the_same_objects_call_after_call():
    raw = pack(windows(3)[0]).encode()
    first, again = CODEC.decode(raw)[0], CODEC.decode(raw)[0]
    assert list(first) == list(again)
    for a, b in zip(first, again):
        assert a is b and sys.intern(str(a)) is a  # the caches share one copy of each name


#: Bucket texts at the edges of the native tokenizer and of its dense tables (a text lists its sketch's
#: buckets in insertion order, not sorted): separators, signs, every token length up to past i64,
#: indices listed twice (once with a zero count), indices too far apart for a table (sorted instead),
#: counts whose sums pass i64, odd and broken pairs.
EDGE_TAILS = [
    b"", b" ", b"3 4", b"3 4 ", b" \t3\r\n4\x0c", b"3\x0b4", b"3 4\x0b", b"200 1 -5 2 7 3 0 4", b"-60 9 -61 0 230 7",
    b"1 0 1 5", b"1 5 1 5", b"2 0", b"-0 3 0 2", b"7 2 8 3 7 0",
    b"12345678 1 123456789 2", b"1 12345678", b"1 123456789012345678", b"1 1234567890123456789",
    b"1 9223372036854775807", b"1 9223372036854775808", b"-9223372036854775808 1", b"-9223372036854775809 1",
    b"1 00000000000000000000007", b"1 -", b"- 1", b"1 -2", b"1 +2", b"1 2x", b"1 \xd9\xa1", b"3 4 5",
    b"0 1 4611686018427387904 2 -4611686018427387904 3", b"0 1 9223372036854775807 1 -9223372036854775808 1",
    b"5 9223372036854775807 6 1", b"9 4611686018427387904",
]


def edge_texts() -> list[bytes]:
    head = pack(Aggregate({"traces": 5, "fees_usd": 0.5, "steps": 3})).encode().partition(b"\n")[0]
    return [head + b"\n" + tail for tail in EDGE_TAILS]


def test_bucket_texts_at_the_native_readers_edges_read_as_in_python_or_go_back_to_python():
    texts = edge_texts()
    native = [CODEC.decode(text) is not None for text in texts]
    assert sum(native) >= 15  # the edges that Python reads alike stay on the native path
    for text, read in zip(texts, native):
        want = outcome(wire.decode_hash_python, text)
        assert not (read and isinstance(want, Exception)), (text, want)
        got = outcome(wire.decode_hash, text)
        if isinstance(want, Exception):
            assert type(got) is type(want) and str(got) == str(want)
        else:
            same_aggregate(got, want)
    grown = [text + b" 999 1 -7 2" for text in texts]  # the same window with buckets added at its text's end
    for new, old in [*((a, b) for a in texts for b in texts), *zip(grown, texts), *zip(texts, grown)]:
        got = CODEC.delta(new, old)
        if got is not None:
            same_increment(got, new, old)
    assert sum(CODEC.delta(a, b) is not None for a, b in zip(grown, texts)) >= 15
    rng = random.Random(7)
    for _ in range(150):
        raws = [rng.choice([None, *texts, *grown]) for _ in range(rng.randint(1, 5))]
        sums_as_in_python(raws, tuple(rng.sample(range(len(raws) + 1), k=rng.randint(1, len(raws) + 1))))


def test_increments_of_texts_that_list_a_field_twice_read_as_in_python():
    """A repeated name keeps its first place and its last value, in the new text and in the old one
    (which the native reader checks apart when its names are not the new text's first ones)."""
    heads = [["traces", "1", "traces", "2"], ["traces", "3"], ["traces", "3", "steps", "1", "traces", "4"],
             ["steps", "1", "traces", "2", "steps", "5"], ["traces", "2", "fees_usd", "0.5", "fees_usd", "0.25"],
             ["traces", "5", "steps", "7"]]
    texts = [orjson.dumps(head) + b"\n1 2 3 4" for head in heads]
    for new in texts:
        for old in texts:
            got = CODEC.delta(new, old)
            assert got is not None
            same_increment(got, new, old)
