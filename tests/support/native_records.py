"""Records for the native path's differential tests (``tests/unit/streams/test_native*.py``): random
ones from hypothesis, built to sit on the edges of the schema (wrong types, negative and huge
numbers, -0, escapes, duplicate keys, aliases, the compact form, tags), and a list of hand-picked
ones that random search may miss."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from monitor.schema import MAX_FUTURE_SKEW_SECONDS
from monitor.windows import Resolution

NOW = 1_800_000_000.0
DIMENSIONS = ("release", "arm", "task_type", "tenant", "model_id", "team")   # "team" is a tag
RESOLUTIONS = (Resolution("1m", 60, 3600), Resolution("1h", 3600, 86400))


# -- random records on the edges of the schema -------------------------------------------------------
numbers = st.one_of(
    st.integers(-3, 40), st.integers(2**40 - 2, 2**40 + 2), st.integers(2**63, 2**64 + 5),
    st.sampled_from([10**9, 10**9 + 1, 10**12, 10**12 + 1, 10**6, 1e6 + 0.5, 604_800_000, 604_800_000.5, 1e300]),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=5e4), st.just(-0.0), st.just(3.0))
texts = st.one_of(st.sampled_from(["", "a", "b", "c", "é", "x|y=z%", "success", "baseline", "shadow", "down"]),
                  st.text(max_size=4), st.sampled_from(["a\x00", "\x1b[31m", "a\rb", "\x7f", "\x9f", "\u202e",
                                                        "\u2069", "x" * 256, "é" * 257]))
anything = st.one_of(st.none(), st.booleans(), numbers, texts,
                     st.lists(st.integers(0, 2), max_size=2), st.dictionaries(st.sampled_from(["team", "k"]),
                                                                              texts, max_size=2))
field_values = {
    "trace_id": st.one_of(texts, st.integers(0, 9), anything),
    "ts": st.one_of(st.floats(NOW - 7200, NOW + 2 * MAX_FUTURE_SKEW_SECONDS), st.integers(int(NOW) - 7200, int(NOW)),
                    st.just("2027-01-15T08:00:00Z"), anything),
    "model_id": st.one_of(st.sampled_from(["m1", "m2", ""]), anything),
    "outcome": st.one_of(st.sampled_from(["success", "failure", "escalated", "abandoned", "oops"]), anything),
    "ok": st.one_of(st.booleans(), st.sampled_from([0, 1, 2, -0.0]), anything),
    "arm": st.one_of(st.sampled_from(["baseline", "canary", "shadow", "x"]), anything),
    "user_signal": st.one_of(st.sampled_from(["up", "down", "none", "meh"]), anything),
    "release": st.one_of(st.sampled_from(["r1", "r2", ""]), anything),
    "task_type": st.one_of(st.sampled_from(["code", "chat", "", "__other__"]), anything),
    "tenant": st.one_of(st.sampled_from(["t1", "t2", "t3", "t4"]), anything),
    "locale": texts, "scaffold_hash": texts, "prompt_hash": texts, "task_id": texts,
    "tool_schema_hash": st.one_of(texts, anything), "config_hash": st.one_of(texts, anything),
    "pair_id": st.one_of(st.none(), st.just("p1")),
    "steps": numbers, "tool_calls": numbers, "tool_errors": numbers, "tokens_in": numbers,
    "tokens_out": numbers, "tokens_cached_in": numbers, "side_effects": numbers, "trial": numbers,
    "harmful_action": st.one_of(st.booleans(), numbers, anything), "refused": st.one_of(st.booleans(), anything),
    "prompt_injection": st.one_of(st.booleans(), anything), "benign": st.one_of(st.booleans(), anything),
    "recontact_24h": st.one_of(st.booleans(), anything),
    "fees_usd": st.one_of(st.floats(0, 1), numbers, anything),
    "latency_ms": st.one_of(st.floats(0, 1e6), st.sampled_from([0, 1e-6, 1e-3, 0.002]), numbers, anything),
    "tags": st.one_of(st.dictionaries(st.sampled_from(["team", "k", "x"]), anything, max_size=3), anything),
    "team": anything, "extra": anything, "agent": texts, "task": texts, "lat": numbers,
    "gen_ai.request.model": texts, "_lat_seconds": numbers,
}
# mostly-valid records, so that the fast path is exercised as much as the slow one
plain = st.fixed_dictionaries(
    {"trace_id": st.sampled_from(["a", "b"]), "ts": st.floats(NOW - 7200, NOW),
     "model_id": st.sampled_from(["m1", "m2"]),
     "outcome": st.sampled_from(["success", "failure"])},
    optional={name: strategy for name, strategy in field_values.items() if name in (
        "ok", "arm", "user_signal", "release", "task_type", "tenant", "steps", "tokens_in", "tokens_out",
        "tokens_cached_in", "fees_usd", "latency_ms", "tags", "team", "benign", "refused", "recontact_24h",
        "harmful_action", "pair_id", "extra", "scaffold_hash", "prompt_hash", "tool_schema_hash",
        "config_hash")})
wild = st.fixed_dictionaries({}, optional=field_values)


@st.composite
def encoded(draw) -> bytes | None:
    record = draw(st.one_of(plain, plain, wild))
    text = json.dumps(record, ensure_ascii=draw(st.booleans()))
    kind = draw(st.sampled_from(["json"] * 8 + ["duplicate", "truncate", "bytes", "none", "array", "deep"]))
    if kind == "duplicate" and len(record) > 1:  # a key repeated: the later value wins in Python
        key = draw(st.sampled_from(sorted(record)))
        text = text[:-1] + ", " + json.dumps(key) + ": " + json.dumps(draw(anything)) + "}"
    elif kind == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif kind == "bytes":
        raw = bytearray(text.encode())
        raw.insert(draw(st.integers(0, len(raw))), draw(st.sampled_from([0xFF, 0xC3, 0x00, 0x22])))
        return bytes(raw)
    elif kind == "none":
        return None
    elif kind == "array":
        text = "[" + text + "]"
    elif kind == "deep" and text.endswith("}"):   # a tag nested past every parser's limit, or just past flat
        depth = draw(st.sampled_from([2, 127, 129, 1100, 5000]))
        text = text[:-1] + (", " if len(text) > 2 else "") + '"deep": ' + "[" * depth + "]" * depth + "}"
    return text.encode()


# -- hand-picked edges ---------------------------------------------------------------------------------
BASE = {"trace_id": "t", "ts": NOW - 10, "model_id": "m1", "outcome": "success"}


def variant(**changes) -> bytes:
    record = dict(BASE)
    for key, value in changes.items():
        if value is ...:
            record.pop(key, None)
        else:
            record[key] = value
    return json.dumps(record).encode()


EDGES = [
    variant(), variant(ts=int(NOW) - 10), variant(ts=NOW + MAX_FUTURE_SKEW_SECONDS + 1),
    variant(ts=NOW + MAX_FUTURE_SKEW_SECONDS), variant(ts=-0.0), variant(ts="2027-01-15T08:00:00Z"),
    variant(ts=None), variant(ts=...), variant(outcome=..., ok=1), variant(outcome=..., ok=0), variant(outcome=...),
    variant(ok=False), variant(user_signal="down"), variant(recontact_24h=True), variant(recontact_24h=1),
    variant(release=""), variant(release=None), variant(arm=None), variant(arm="canary"), variant(task_type=""),
    variant(tokens_in=5, tokens_cached_in=6), variant(tokens_in=2**40, tokens_out=2**40 + 1),
    variant(tokens_in=2**64), variant(steps=3.0), variant(steps=-1), variant(fees_usd=2**64),
    variant(fees_usd=0), variant(fees_usd=1e-300), variant(latency_ms=0), variant(latency_ms=1e-3),
    variant(latency_ms=1e-4), variant(latency_ms=123456.789), variant(latency_ms=7),
    variant(tags={"team": "red"}), variant(tags={"team": 7}), variant(tags={"team": None}), variant(tags=[]),
    variant(tags=""), variant(tags="x"), variant(tags=None), variant(team="blue"), variant(team=7),
    variant(team="blue", tags={"team": "red"}), variant(model_id=""), variant(model_id=7), variant(trace_id=7),
    variant(trace_id=""), variant(**{"gen_ai.request.model": "m9"}), variant(_lat_seconds=2),
    variant(benign=True, refused=True), variant(harmful_action=1, prompt_injection=True, side_effects=2),
    variant(trial=3), variant(trial=-3), variant(pair_id="p", arm="shadow"), variant(tenant="é\u2603"),
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m\\u0031", "outcome": "success", "tenant": "a\\"b"}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "steps": -0}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "steps": 1e400}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": 18446744073709551616}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": "\\ud800"}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success"} ',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success"} x',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "outcome": "failure"}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": "a\x01b"}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": "\xff"}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": "\\q"}',
    b'{"agent": "a", "task": "b", "ok": true, "ts": 1799999990}', b"", b"null", b"[]", b"\xff", None,
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "nested": {"a": [1, {"b": 2}]}}',
    # the bounds of monitor.limits, on both sides of each
    variant(tokens_in=10**12, tokens_cached_in=10**12, tokens_out=10**12), variant(tokens_in=10**12 + 1),
    variant(tokens_out=2**63), variant(tokens_in=2**70, tokens_cached_in=2**70), variant(steps=10**9),
    variant(steps=10**9 + 1), variant(tool_calls=2**63), variant(tool_errors=10**9 + 1),
    variant(side_effects=2**64 - 1), variant(trial=10**9), variant(trial=10**9 + 1),
    variant(latency_ms=604_800_000), variant(latency_ms=604_800_000.001), variant(latency_ms=1e300),
    variant(fees_usd=10**6), variant(fees_usd=1e6 + 1e-6), variant(fees_usd=1e300), variant(ts="1796110000"),
    variant(tokens_in="5321"), variant(ts=1e300),
    variant(release="a\x00b"), variant(task_type="\x1b[2J"), variant(tenant="a\rb"), variant(locale="a\nb"),
    variant(release="a\x7f"), variant(tenant="a\x85"), variant(tenant="a\u202eb"), variant(release="\u2066x"),
    variant(model_id="m\x00"), variant(trace_id="t\u202e"), variant(pair_id="p\x00", arm="shadow"),
    variant(tenant="x" * 256), variant(tenant="x" * 257), variant(trace_id="t" * 257), variant(release="é" * 257),
    variant(tags={"team": "a\x00"}), variant(tags={"k": "a\x1b"}), variant(tags={"k\u202e": "a"}),
    variant(tags={"k": "x" * 257}), variant(team="a\u2069"), variant(extra="x" * 257), variant(**{"x" * 257: 1}),
    variant(**{"k\x00": None}), variant(tags={"k\x00": None}),
    variant(tags={"team": {"a": 1}}), variant(tags={"k": {"a": 1}}), variant(tags={"k": []}), variant(extra=[1]),
    variant(extra={"a": {"b": {}}}),
    # the version tuple's optional strings (monitor.identity)
    variant(tool_schema_hash="ts1", config_hash="c1"), variant(tool_schema_hash=""), variant(config_hash=None),
    variant(tool_schema_hash=7), variant(config_hash="a\x00"), variant(tool_schema_hash="x" * 257),
    variant(release="", prompt_hash="p", scaffold_hash="s"), variant(config_hash={"a": 1}),
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "bogus", "outcome": "success"}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": 1, "x": 1}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": 1, "\\u0078": 2}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "tags": {"k": 1, "k": 2}}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "tags": {"team": "a", "team": "b"}}',
    b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "x": "\\":"}',
    *(b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "tags": {"k": '
      + b"[" * depth + b"]" * depth + b"}}" for depth in (1, 127, 129, 1025, 5000)),
    *(b'{"trace_id": "t", "ts": 1799999990, "model_id": "m1", "outcome": "success", "deep": '
      + b"{\"a\":" * depth + b"1" + b"}" * depth + b"}" for depth in (2, 200, 5000)),
]
