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
