"""TraceEmitter and replay with an in-memory producer (the Kafka path is in tests/integration)."""

import io
import json

import orjson
import pytest

from monitor.emitter import EmitError, TraceEmitter
from monitor.schema import TraceError
from streams.replay import RateLimiter, replay

NOW = 1_800_000_000.0


class FakeFuture:
    def __init__(self, error=None):
        self.error = error
        self.errbacks = []

    def add_errback(self, fn, *args):
        self.errbacks.append((fn, args))


class FakeProducer:
    """Records sends; ``fail`` makes every send's errback fire at flush."""

    def __init__(self, fail=False):
        self.sent = []
        self.fail = fail
        self.futures = []
        self.closed = False

    def send(self, topic, value=None, key=None):
        self.sent.append((topic, key, orjson.loads(value)))
        future = FakeFuture()
        self.futures.append(future)
        return future

    def flush(self, timeout=None):
        if self.fail:
            for future in self.futures:
                for fn, args in future.errbacks:
                    fn(*args, RuntimeError("broker down"))
        self.futures = []

    def close(self, timeout=None):
        self.closed = True


def emitter(**kwargs):
    return TraceEmitter(topic="traces", producer=FakeProducer(**kwargs), clock=lambda: NOW)


def test_valid_trace_is_sent_in_canonical_form_keyed_by_trace_id():
    e = emitter()
    e.emit({"trace_id": "t1", "ts": NOW - 5, "model_id": "m", "outcome": "success", "tokens_in": 12,
            "customer_tier": "gold"})
    ((topic, key, value),) = e.producer.sent
    assert (topic, key) == ("traces", b"t1")
    assert value["release"] == "m" and value["tokens_in"] == 12 and value["ts"] == NOW - 5
    assert value["tags"] == {"customer_tier": "gold"}  # unknown fields travel as tags


def test_pair_id_is_the_key_so_both_halves_share_a_partition():
    e = emitter()
    e.emit({"trace_id": "a", "pair_id": "p9", "ts": NOW, "model_id": "m", "ok": True})
    e.emit({"trace_id": "b", "pair_id": "p9", "ts": NOW, "model_id": "m", "ok": False, "arm": "shadow"})
    assert [key for _, key, _ in e.producer.sent] == [b"p9", b"p9"]


def test_missing_ts_is_stamped_with_now():
    e = emitter()
    trace = e.emit({"trace_id": "t", "model_id": "m", "ok": True})
    assert trace.ts == NOW and e.producer.sent[0][2]["ts"] == NOW


def test_invalid_trace_raises_naming_the_field_and_sends_nothing():
    e = emitter()
    with pytest.raises(TraceError, match="tokens_in must be an integer >= 0, got -3") as info:
        e.emit({"trace_id": "t", "model_id": "m", "ok": True, "tokens_in": -3})
    assert info.value.problems == ["tokens_in must be an integer >= 0, got -3"]
    with pytest.raises(TraceError, match="ts must be at most"):
        e.emit({"trace_id": "t", "ts": NOW + 3600, "model_id": "m", "ok": True})
    assert e.producer.sent == []


def test_delivery_failures_surface_on_flush_and_close_flushes():
    e = emitter(fail=True)
    e.emit({"trace_id": "t7", "model_id": "m", "ok": True})
    with pytest.raises(EmitError, match="t7: RuntimeError"):
        e.flush()
    ok = emitter()
    with ok:
        ok.emit({"trace_id": "t", "model_id": "m", "ok": True})
    assert ok.producer.closed
    with pytest.raises(RuntimeError, match="closed"):
        ok.emit({"trace_id": "t", "model_id": "m", "ok": True})


def test_replay_sends_valid_lines_and_reports_every_invalid_one(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join([
        json.dumps({"trace_id": "t1", "ts": NOW - 1, "model_id": "m", "ok": True}),
        "{not json",
        json.dumps({"agent": "a", "task": "x", "trial": 1, "ok": True, "tin": 5, "tout": 1}),  # compact, no ts
        json.dumps({"trace_id": "t3", "ts": NOW, "model_id": "m", "ok": True, "tokens_out": -1}),
        "",
    ]) + "\n")
    e = emitter()
    report = io.StringIO()
    summary = replay(str(path), e, report=report, clock=lambda: NOW)
    assert (summary.sent, summary.skipped) == (2, 2)
    text = report.getvalue()
    assert f"{path} line 2: not valid JSON" in text
    assert f"{path} line 4: tokens_out must be an integer >= 0, got -1" in text
    compact = e.producer.sent[1][2]
    assert compact["ts"] == NOW and compact["model_id"] == "a" and compact["tokens_in"] == 5


def test_replay_reads_csv_with_text_values(tmp_path):
    path = tmp_path / "traces.csv"
    path.write_text("trace_id,ts,model_id,ok,tokens_in\nt1,1799999990,m,true,7\nt2,1799999991,m,perhaps,1\n")
    e = emitter()
    summary = replay(str(path), e, report=io.StringIO(), clock=lambda: NOW)
    assert (summary.sent, summary.skipped) == (1, 1)
    assert e.producer.sent[0][2]["tokens_in"] == 7


def test_rate_limiter_spaces_events_evenly():
    clock = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    limiter = RateLimiter(10.0, clock=lambda: clock[0], sleep=sleep)
    for _ in range(5):
        limiter.wait()
    assert clock[0] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="--rate must be > 0"):
        RateLimiter(0)


def test_the_producer_takes_the_kafka_section_security_and_bootstrap_wins(monkeypatch):
    import kafka

    from monitor.config import KafkaConfig

    built = {}

    class Recorder:
        def __init__(self, **options):
            built.update(options)

    monkeypatch.setattr(kafka, "KafkaProducer", Recorder)
    section = KafkaConfig(bootstrap="k:9093", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_username="u", sasl_password="p")
    TraceEmitter("other:9093", topic="t", kafka=section, linger_ms=50)
    assert built["bootstrap_servers"] == ["other:9093"] and built["sasl_plain_password"] == "p"
    assert (built["acks"], built["enable_idempotence"], built["linger_ms"], built["client_id"]) == (
        "all", True, 50, "fleetmon-emitter")
    built.clear()
    monkeypatch.setenv("FLEETMON_KAFKA_BOOTSTRAP", "env:9092")
    TraceEmitter(topic="t")
    assert built["bootstrap_servers"] == ["env:9092"] and built["security_protocol"] == "PLAINTEXT"
