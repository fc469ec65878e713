"""The native fast path's hand-written reader (``native/src/scan.rs``) against its serde reader and Python.

The scanner reads the common record — one flat object of unescaped strings, unsigned integers and
decimals — and hands anything it is not sure of to the serde reader. It may never change a decision:
for every record, ``Folder.reader_disagreements`` compares what the two native readers make of it
(taken or left to Python, and every value the fold reads), and the batch is decoded natively and in
Python (same rejections with the same reasons, same delta). The records are built from raw JSON
text, so that they sit on the scanner's edges: keys that share a first byte, a length or a prefix
with known fields, escaped keys, duplicate keys, every kind of whitespace (and some that JSON does
not allow), numbers at the bounds of ``u64``, ``f64`` and ``monitor.limits``, literals, nesting,
control characters and non-ASCII text, and malformed objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor import limits
from monitor.aggregate import Aggregate
from monitor.schema import KNOWN_FIELDS
from monitor.slices import CardinalityGuard, Slicer
from monitor.windows import Resolution
from streams.batch import decode_batch, fold_batch
from streams.native import NativeFolder
from tests.support.batches import Rec

NOW = 1_800_000_000.0
DIMENSIONS = ("release", "arm", "task_type", "tenant", "model_id", "team", "ts")   # "team", "ts": tags
RESOLUTIONS = (Resolution("1m", 60, 3600), Resolution("1h", 3600, 86400))

# near misses of the known fields: same first byte, same length, a prefix, a suffix, another case
KEYS = ["trace_id", "ts", "model_id", "outcome", "arm", "tags", "trial", "fees_usd", "latency_ms", "user_signal",
        "scaffold_hash", "prompt_hash", "release", "pair_id", "task_type", "tenant", "locale", "task_id", "steps",
        "tool_calls", "tool_errors", "tokens_in", "tokens_out", "tokens_cached_in", "side_effects",
        "harmful_action", "refused", "prompt_injection", "ok", "benign", "recontact_24h", "tool_schema_hash",
        "config_hash", "team", "t", "tx", "tokens_inx", "token", "trace_ie", "trace_i", "trace_idd", "Ts", "OK",
        "okk", "o", "arms", "tagz", "release ", " release", "relaese", "refusee", "tool_schema_hasH",
        "tokens_cached_im", "gen_ai.request.model", "_lat_seconds", "gen_ai.agent.version", "", "é", "ts\u00e9",
        "x" * 300, "k\x7f"]
# and each known field with one byte changed where a lookup keyed by length, ends and middle cannot see it
KEYS += sorted({key[:at] + chr(ord(key[at]) ^ 1) + key[at + 1:] for key in KNOWN_FIELDS
                for at in {1, len(key) // 2 + 1, len(key) - 2} if 0 < at < len(key) - 1})
SCALARS = ['"r1"', '"r2"', '""', '"success"', '"failure"', '"baseline"', '"shadow"', '"canary"', '"down"', '"up"',
           '"m1"', '"t1"', '"é☃"', '"a\\"b"', '"\\u0072\\u0031"', '"\\ud800"', '"a\x01b"', '"a\tb"', '"\x7f"',
           '"x"', '"' + "x" * 257 + '"', '"p1"', "true", "false", "null", "tru", "nul", "True", "NaN", "Infinity",
           "0", "1", "2", "01", "00", "-0", "-1", "1.0", "1.", ".5", "1e2", "1E+2", "1e-2", "0.1e1", "0e0", "3.0",
           "-0.0", "1e308", "1e309", "5e-324", "2.2250738585072011e-308", "0.30000000000000004",
           "123456789012345678901234567890.5", str(2**64 - 1), str(2**64), str(2**63), "99999999999999999999",
           str(limits.MAX_TOKENS), str(limits.MAX_TOKENS + 1), str(limits.MAX_COUNT), str(limits.MAX_COUNT + 1),
           str(limits.MAX_LATENCY_MS), str(limits.MAX_LATENCY_MS) + ".001", repr(limits.MAX_FEES_USD),
           "1000000.000001", str(int(NOW) - 10), repr(NOW - 10.5), repr(NOW + 3600), str(int(NOW) + 10**6),
           "[]", "[1, 2]", "{}", '{"a": 1}', "{", "[", '"unterminated']
BAD = {"tru", "nul", "True", "NaN", "Infinity", "01", "00", "1.", ".5", "{", "[", '"unterminated', '"a\x01b"',
       '"a\tb"'}   # not JSON
FINE = [v for v in SCALARS if v not in BAD]
TAG_VALUES = st.dictionaries(st.sampled_from(["team", "k", "ts", "t", "é", "a\u202e", ""]),
                             st.one_of(*[st.sampled_from(FINE)] * 8, st.sampled_from(sorted(BAD))), max_size=3)
SPACE = st.sampled_from(["", "", "", "", "", "", " ", "  ", "\t", "\n", "\r\n", " \t\n\r "])   # JSON's four


def key_text(key: str, escaped: bool) -> str:
    if escaped and key:   # the first character as a \u escape: the same key to a JSON reader
        return f'"\\u{ord(key[0]):04x}' + json.dumps(key[1:], ensure_ascii=False)[1:]
    return json.dumps(key, ensure_ascii=False)


@st.composite
def tags_text(draw) -> str:
    tags = draw(TAG_VALUES)
    sp = draw(SPACE)
    return "{" + sp + ("," + sp).join(f"{json.dumps(k, ensure_ascii=False)}:{sp}{v}" for k, v in tags.items()) + "}"


VALUE = st.one_of(*[st.sampled_from(FINE)] * 8, st.sampled_from(sorted(BAD)), tags_text())
GOOD = {"trace_id": '"t2"', "ts": str(int(NOW) - 5), "model_id": '"m2"', "outcome": '"failure"', "arm": '"shadow"',
        "release": '"r2"', "tenant": '"t1"', "tokens_in": "7", "tokens_out": "0", "tokens_cached_in": "0",
        "latency_ms": "12.5", "fees_usd": "0.25", "steps": "3", "ok": "true", "benign": "false", "team": '"red"'}


@st.composite
def record(draw, plain: bool = False) -> bytes:
    """A mostly valid trace with a few members drawn from the edges (``plain``: valid values only,
    in any order and spacing), as raw JSON text."""
    members = [("trace_id", '"t"'), ("ts", repr(NOW - 10)), ("model_id", '"m1"'), ("outcome", '"success"')]
    members = [m for m in members if plain or draw(st.integers(0, 9)) > 0]
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3, 5]))):
        key = draw(st.sampled_from(sorted(GOOD) if plain else KEYS))
        good = key in GOOD and (plain or draw(st.booleans()))   # a valid value: the record may still be taken
        members.append((key, GOOD[key] if good else draw(VALUE)))
    if members and draw(st.integers(0, 5)) == 0:   # a duplicate key, the later value differing or not
        members.append((draw(st.sampled_from(members))[0], draw(VALUE)))
    order = draw(st.permutations(range(len(members))))
    parts = []
    for i in order:
        key, value = members[i]
        parts.append(draw(SPACE) + key_text(key, draw(st.integers(0, 12)) == 0) + draw(SPACE) + ":"
                     + draw(SPACE) + value + draw(SPACE))
    text = draw(SPACE) + "{" + ",".join(parts) + "}" + draw(SPACE)
    mutation = "none" if plain else draw(st.sampled_from(["none"] * 20 + ["truncate", "comma", "insert", "double"]))
    if mutation == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif mutation == "comma":   # a trailing comma
        text = text.rstrip()[:-1] + ",}"
    elif mutation == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from([",", ":", '"', "}", "{", "\\", "\x00", "0", " ", "\f", "\v",
                                                 "\u00a0", "\u2028"])) + text[at:]
    elif mutation == "double":
        text = text + text
    return text.encode()


records = st.one_of(record(), record(plain=True))


def folder() -> NativeFolder:
    return NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=4096)


def assert_native_is_python(values: list[bytes]) -> None:
    results = []
    for native in (None, folder()):
        batch = decode_batch([("t", 0, [Rec(i, v) for i, v in enumerate(values)])], NOW, max_record_bytes=4096,
                             native=native)
        results.append((batch, fold_batch(batch, Slicer(DIMENSIONS, CardinalityGuard(3)), NOW, RESOLUTIONS)))
    (py_batch, py_delta), (na_batch, na_delta) = results
    py_part, na_part = py_batch.parts[0], na_batch.parts[0]
    assert [(r.offset, r.reasons) for r in py_part.rejections] == [(r.offset, r.reasons) for r in na_part.rejections]
    assert (py_part.trace_count, py_part.latest_ts) == (na_part.trace_count, na_part.latest_ts)
    assert py_delta.counters == na_delta.counters
    assert py_delta.identities == na_delta.identities
    assert_same_aggregates(py_delta.windows, na_delta.windows)
    assert_same_aggregates(py_delta.totals, na_delta.totals)


def assert_same_aggregates(mine: Mapping[Any, Aggregate], theirs: Mapping[Any, Aggregate]) -> None:
    assert mine.keys() == theirs.keys()
    for key in mine:
        assert mine[key].counts == theirs[key].counts, key      # exact, floats included
        assert mine[key].latency.buckets == theirs[key].latency.buckets, key
        assert mine[key].latency.zero_count == theirs[key].latency.zero_count, key


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=8))
def test_the_scanner_and_the_serde_reader_agree_on_every_record(values):
    assert folder()._folder.reader_disagreements(values, NOW) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records, min_size=1, max_size=8))
def test_native_and_python_agree_on_edge_text(values):
    assert_native_is_python(values)


SAMPLES = [
    b'{"trace_id":"t","ts":1799999990.5,"model_id":"m1","outcome":"success","tokens_in":5,"tokens_out":3,'
    b'"tokens_cached_in":1,"tool_calls":2,"tool_errors":0,"task_type":"code","tenant":"t1","release":"r1",'
    b'"arm":"baseline","latency_ms":780.1,"fees_usd":0.0005,"tags":{"team":"red"},"pair_id":"p1"}',
    b' \t{ "trace_id" : "t" ,\n"ts":1799999990,\r\n"model_id":"m1", "outcome":"failure", "team":"blue" } \n',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","ok":1,"steps":3,"latency_ms":0,"fees_usd":1e-3,"tags":null}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","outcome":"success","ts_":"x","tokens":7,"t":null}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","outcome":"success","tags":{"ts":"a","k":1.5}}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"\xc3\xa9","outcome":"success","tenant":"\xe2\x98\x83"}',
]
UNSURE = [   # each one the scanner hands to the serde reader, which decides it as before
    b'{"trace_id":"t","ts":1799999990,"model_id":"m\\u0031","outcome":"success"}',
    b'{"\\u0074race_id":"t","ts":1799999990,"model_id":"m1","outcome":"success"}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","outcome":"success","x":-1}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","outcome":"success","x":18446744073709551616}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","outcome":"success","x":1e400}',
    b'{"trace_id":"t","ts":1799999990,"model_id":"m1","outcome":"success","fees_usd":-0.0}',
]


def test_the_samples_are_read_natively_by_either_reader():
    """The scanner's common cases are taken (so the agreement above is not only about refusals)."""
    native = folder()
    fold = native.fold(SAMPLES + UNSURE, NOW)
    assert fold.slow == [len(SAMPLES) + 4]   # only 1e400: the escapes, -1, 2**64 and -0.0 are taken
    assert native._folder.reader_disagreements(SAMPLES + UNSURE, NOW) == []
    assert_native_is_python(SAMPLES + UNSURE)


def folded(fold) -> tuple:
    """Everything a native fold returns, in comparable form."""
    groups = [(key, group.latest, group.first, group.aggregate.counts, group.aggregate.latency.buckets,
               group.aggregate.latency.zero_count) for key, group in fold.groups]
    return groups, fold.slow, fold.parts, fold.identities, fold.halves


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(records, min_size=60, max_size=120), st.integers(2, 4), st.integers(1, 4))
def test_reading_on_threads_folds_the_same(values, threads, parts):
    """``threads`` > 1 splits the reading, not the grouping: the same groups, positions and halves."""
    values = values * 12   # past the size under which one thread reads everything
    lengths = [len(values) // parts] * (parts - 1)
    lengths.append(len(values) - sum(lengths))
    one, many = (NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=4096, native_join=False, threads=n)
                 for n in (1, threads))
    assert folded(one.fold(values, NOW, lengths)) == folded(many.fold(values, NOW, lengths))
