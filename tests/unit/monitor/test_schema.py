import math

import pytest

from monitor.schema import TraceError, parse_ts, to_record, validate

BASE = {"trace_id": "t-1", "ts": 1_700_000_000, "model_id": "m-1", "outcome": "success"}


def problems(record, **kw):
    with pytest.raises(TraceError) as info:
        validate(record, **kw)
    return info.value.problems


def test_minimal_trace_gets_documented_defaults():
    trace = validate(BASE)
    assert trace.release == "m-1" and trace.arm == "baseline" and trace.success
    assert trace.tokens_in == 0 and trace.latency_seconds is None and trace.benign is None


def test_ok_wins_over_outcome_and_success_proxy_rules():
    assert validate({**BASE, "ok": False}).success is False
    assert validate({**BASE, "user_signal": "down"}).success is False
    assert validate({**BASE, "recontact_24h": True}).success is False
    assert validate({**BASE, "outcome": "escalated"}).success is False
    assert validate({**BASE, "outcome": "failure", "ok": True}).success is True


@pytest.mark.parametrize("field,value,needle", [
    ("tokens_in", -3, "tokens_in must be an integer >= 0, got -3"),
    ("latency_ms", float("nan"), "latency_ms must be a finite number >= 0"),
    ("latency_ms", -1, "latency_ms must be a finite number >= 0, got -1"),
    ("ts", "yesterday", "ts must be epoch seconds or an RFC 3339 string, got 'yesterday'"),
    ("ts", "2025-01-01T00:00:00", "needs an offset"),
    ("arm", "blue", "arm must be one of baseline, canary, shadow, got 'blue'"),
    ("outcome", "great", "outcome must be one of success, failure, escalated, abandoned"),
    ("harmful_action", "yes", "harmful_action must be true or false"),
    ("tokens_out", 1.5, "tokens_out must be an integer >= 0, got 1.5"),
    ("tokens_out", True, "tokens_out must be an integer >= 0, got True"),
])
def test_bad_values_name_field_value_and_rule(field, value, needle):
    found = problems({**BASE, field: value})
    assert any(needle in p for p in found), found


def test_every_problem_is_reported_at_once():
    found = problems({"ts": "x", "tokens_in": -1, "tokens_cached_in": 5})
    text = " | ".join(found)
    for needle in ("trace_id is required", "model_id is required", "ts must be", "an outcome is required",
                   "tokens_in must be"):
        assert needle in text


def test_cached_tokens_cannot_exceed_input():
    assert any("tokens_cached_in must be <= tokens_in (10), got 11" in p
               for p in problems({**BASE, "tokens_in": 10, "tokens_cached_in": 11}))


def test_future_timestamps_are_rejected_relative_to_now():
    assert any("ahead of now" in p for p in problems({**BASE, "ts": 2_000_000_000}, now=1_700_000_000))
    validate({**BASE, "ts": 1_700_000_100}, now=1_700_000_000)


def test_rfc3339_and_epoch_agree():
    assert parse_ts("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert parse_ts("2023-11-14T23:13:20+01:00") == 1_700_000_000.0
    assert validate({**BASE, "ts": "2023-11-14T22:13:20Z"}).ts == 1_700_000_000.0


def test_unknown_fields_become_tags_and_where_prefixes_errors():
    trace = validate({**BASE, "customer_tier": "gold", "retries": 2, "flag": True})
    assert trace.tags == {"customer_tier": "gold", "retries": "2", "flag": "true"}
    with pytest.raises(TraceError, match=r"^line 17 of traces.jsonl: tokens_in must be"):
        validate({**BASE, "tokens_in": -3}, where="line 17 of traces.jsonl")


def test_non_object_is_rejected():
    with pytest.raises(TraceError, match="must be a JSON object, got list"):
        validate([1, 2])


def test_compact_form_maps_fields_and_seconds():
    trace = validate({"agent": "A", "task": "t1", "trial": 2, "ok": True, "tin": 100, "tout": 20,
                      "tin_cached": 50, "steps": 3, "lat": 1.5, "fees": 0.01, "category": "refund"})
    assert (trace.model_id, trace.task_id, trace.trial, trace.success) == ("A", "t1", 2, True)
    assert (trace.tokens_in, trace.tokens_cached_in, trace.tokens_out) == (100, 50, 20)
    assert trace.latency_seconds == 1.5 and trace.fees_usd == 0.01 and trace.tags == {"category": "refund"}
    assert trace.ts is None


def test_csv_text_values_parse_strictly():
    trace = validate({"agent": "A", "task": "t1", "ok": "1", "fees": "0.25", "steps": "14"}, from_text=True)
    assert trace.success and trace.fees_usd == 0.25 and trace.steps == 14
    with pytest.raises(TraceError, match="ok must be true or false, got 'maybe'"):
        validate({"agent": "A", "task": "t1", "ok": "maybe"}, from_text=True)


def test_otel_aliases():
    trace = validate({"trace_id": "x", "ts": 1, "gen_ai.request.model": "gpt", "ok": True,
                      "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5})
    assert trace.model_id == "gpt" and trace.tokens_in == 10 and trace.tokens_out == 5


def test_otel_conversation_id_is_a_tag_not_a_pair_id():
    trace = validate({"trace_id": "x", "ts": 1, "model_id": "m", "ok": True, "gen_ai.conversation.id": "conv-7"})
    assert trace.pair_id is None and trace.tags == {"conversation_id": "conv-7"}
    paired = validate({"trace_id": "x", "ts": 1, "model_id": "m", "ok": True, "pair_id": "p1",
                       "gen_ai.conversation.id": "conv-7"})
    assert paired.pair_id == "p1" and paired.tags == {"conversation_id": "conv-7"}
    own = validate({"trace_id": "x", "ts": 1, "model_id": "m", "ok": True, "conversation_id": "c",
                    "gen_ai.conversation.id": "conv-7"})
    assert own.tags == {"conversation_id": "c"}


def test_record_round_trip():
    trace = validate({**BASE, "tokens_in": 10, "latency_ms": 250, "benign": True, "refused": True,
                      "tags": {"a": "b"}, "pair_id": "p"})
    again = validate(to_record(trace))
    assert again == trace
    assert math.isclose(again.latency_seconds, 0.25)


# -- bounds (monitor.limits): bad input is rejected, never clamped -------------------------------------
@pytest.mark.parametrize("field,value,needle", [
    ("tokens_in", 10**12 + 1, "tokens_in must be an integer <= 1000000000000, got 1000000000001"),
    ("tokens_out", 2**63, "tokens_out must be an integer <= 1000000000000"),
    ("tokens_cached_in", 2**70, "tokens_cached_in must be an integer <= 1000000000000"),
    ("steps", 10**9 + 1, "steps must be an integer <= 1000000000, got 1000000001"),
    ("tool_calls", 2**63, "tool_calls must be an integer <= 1000000000"),
    ("tool_errors", 1e10, "tool_errors must be an integer <= 1000000000"),
    ("side_effects", 2**64, "side_effects must be an integer <= 1000000000"),
    ("trial", 10**9 + 1, "trial must be an integer <= 1000000000"),
    ("latency_ms", 1e300, "latency_ms must be a number <= 604800000, got 1e+300"),
    ("latency_ms", float("inf"), "latency_ms must be a finite number >= 0"),
    ("fees_usd", 1e6 + 0.01, "fees_usd must be a number <= 1000000"),
    ("ts", 1e300, "ts must be finite epoch seconds in [0, 253402300799], got 1e+300"),
    ("ts", float("inf"), "ts must be finite epoch seconds"),
])
def test_values_beyond_the_documented_bounds_are_rejected(field, value, needle):
    record = {**BASE, field: value, **({"tokens_in": value} if field == "tokens_cached_in" else {})}
    found = problems(record)
    assert any(needle in p for p in found), found


def test_values_at_the_bounds_are_accepted():
    trace = validate({**BASE, "tokens_in": 10**12, "tokens_cached_in": 10**12, "tokens_out": 10**12,
                      "steps": 10**9, "trial": 10**9, "latency_ms": 7 * 86_400_000, "fees_usd": 1e6})
    assert trace.tokens_in == 10**12 and trace.steps == 10**9 and trace.latency_seconds == 7 * 86_400.0


def test_a_numeric_string_ts_is_rejected_like_any_numeric_field_unless_from_text():
    found = problems({**BASE, "ts": "1796110000"})
    assert any("ts must be a JSON number of epoch seconds or an RFC 3339 string, got '1796110000'" in p
               for p in found), found
    assert any("tokens_in must be an integer >= 0, got '5321'" in p for p in problems({**BASE, "tokens_in": "5321"}))
    assert validate({**BASE, "ts": "1796110000"}, from_text=True).ts == 1796110000.0
    assert validate({**BASE, "ts": "2026-12-01T00:00:00Z"}).ts == parse_ts("2026-12-01T00:00:00+00:00")


@pytest.mark.parametrize("bad", ["a\x00b", "a\x1bb", "a\rb", "a\nb", "a\x7fb", "a\x85b", "a\u202eb", "a\u2066b",
                                 "x" * 257])
@pytest.mark.parametrize("field", ["model_id", "release", "task_type", "tenant", "locale", "task_id", "scaffold_hash"])
def test_label_fields_must_be_short_printable_text(field, bad):
    found = problems({**BASE, field: bad})
    assert any(p.startswith(f"{field} must be ") and ("characters" in p) for p in found), found


@pytest.mark.parametrize("field", ["trace_id", "pair_id"])
def test_identifiers_are_bounded_in_length_only(field):
    assert getattr(validate({**BASE, field: "a\x00\u202e" + "x" * 253}), field) == "a\x00\u202e" + "x" * 253
    found = problems({**BASE, field: "x" * 257})
    assert any(f"{field} must be at most 256 characters long (got 257)" in p for p in found), found


@pytest.mark.parametrize("record,needle", [
    ({"tags": {"team": "a\x00b"}}, "tags.team must be printable text without control or bidi characters (found U+0000"),
    ({"tags": {"team": "x" * 300}}, "tags.team must be at most 256 characters long (got 300)"),
    ({"tags": {"a\u202eb": "x"}}, "(a tag name) must be printable text"),
    ({"team": "a\u202eb"}, "team must be printable text without control or bidi characters (found U+202E)"),
    ({"tags": {"team": {"a": {"b": 1}}}}, "tags.team must be a string, number or boolean (tags are flat)"),
    ({"tags": {"team": [1, 2]}}, "tags.team must be a string, number or boolean (tags are flat)"),
    ({"extra": {"a": 1}}, "extra must be a string, number or boolean (tags are flat)"),
])
def test_tags_are_a_flat_object_of_label_safe_scalars(record, needle):
    found = problems({**BASE, **record})
    assert any(needle in p for p in found), found
    assert validate({**BASE, "tags": {"team": "a b-c/é", "n": 3, "f": True}}).tags == {"team": "a b-c/é", "n": "3",
                                                                                    "f": "true"}


def test_duplicate_json_keys_are_rejected_by_the_decoder():
    from monitor.limits import DuplicateKeyError, loads
    for text in (b'{"outcome":"bogus","outcome":"success"}', b'{"tags": {"a": 1, "a": 2}}',
                 b'{"a": 1, "\\u0061": 2}', '{"x": [{"k": 1, "k" : 1}]}'):
        with pytest.raises(DuplicateKeyError, match="appears more than once"):
            loads(text)
    with pytest.raises(DuplicateKeyError, match=r"key 'outcome' appears more than once in an object \('bogus', then"):
        loads(b'{"outcome": "bogus", "outcome": "success"}')
    assert loads(b'{"a": "\\":", "b": "x\\" :"}') == {"a": '":', "b": 'x" :'}   # key-like text in values
    assert loads(b'{"a": 1}') == {"a": 1} and loads(b"[1]") == [1]
