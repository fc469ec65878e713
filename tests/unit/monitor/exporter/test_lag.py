"""KafkaLag reads the broker's offsets off the scrape path (monitor/exporter/lag.py).

No broker here: ``fetch`` is a function the tests control (a blocked broker is a fetch waiting on an
event), and the clock is passed in; the collector's ``fleetmon_consumer_lag_up`` is checked over the
in-memory store. The real broker paths run in tests/integration/test_prometheus.py
(lag read) and test_secure.py (a refused password)."""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import KafkaConfig
from monitor.delta import BatchDelta
from monitor.exporter.collector import build_registry
from monitor.exporter.lag import KafkaLag, Offsets
from monitor.kafka_auth import KafkaCredentialsRefused
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES

KAFKA = KafkaConfig(bootstrap="127.0.0.1:9")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scripted(answers: list[Offsets | Exception], clock: Clock) -> KafkaLag:
    """A lag read once from ``answers[0]`` (an exception: the broker failing), then refreshed by hand
    (no background reader: the test calls ``refresh``), stale after 60 s of ``clock``."""
    def fetch() -> Offsets:
        answer = answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    lag = KafkaLag(KAFKA, ["t"], cache_seconds=5, clock=clock, stale_seconds=60, fetch=fetch)
    assert lag.refresh()
    lag._thread = threading.current_thread()
    return lag


def test_a_scrape_does_not_wait_for_a_broker_that_does_not_answer() -> None:
    release, entered = threading.Event(), threading.Event()

    def blocked() -> Offsets:
        entered.set()
        release.wait()
        return {"t:0": (0, 10)}

    lag = KafkaLag(KAFKA, ["t"], first_wait_seconds=0.05, fetch=blocked)
    try:
        assert lag.lag({}) is None            # the first scrape waited first_wait_seconds only
        assert entered.is_set()
        assert lag.lag({"t:0": 3}) is None    # and the next ones not at all
    finally:
        release.set()
        lag.close()


def test_the_newest_reading_serves_until_it_is_stale() -> None:
    clock = Clock()
    answers: list[Offsets | Exception] = [{"t:0": (5, 20), "t:1": (0, 0)}]
    lag = scripted(answers, clock)
    assert lag.lag({"t:0": 9}) == {"t:0": 10, "t:1": 0}   # end - (applied + 1); nothing applied: end - begin
    assert lag.lag({}) == {"t:0": 15, "t:1": 0}
    answers[0] = ConnectionError("broker down")
    clock.now += 59
    assert not lag.refresh()
    assert lag.lag({"t:0": 19}) == {"t:0": 0, "t:1": 0}  # a minute-old reading still serves
    clock.now += 2
    assert lag.lag({}) is None                           # past stale_seconds: unknown, not exported
    answers[0] = {"t:0": (5, 30)}
    assert lag.refresh()
    assert lag.lag({"t:0": 19}) == {"t:0": 10}


def test_a_failure_streak_is_logged_once_and_its_end_too(caplog: pytest.LogCaptureFixture) -> None:
    failing = [True]

    def fetch() -> Offsets:
        if failing[0]:
            raise ConnectionError("Unable to bootstrap")
        return {}

    lag = KafkaLag(KAFKA, ["t"], fetch=fetch)
    with caplog.at_level(logging.INFO, logger="fleetmon.exporter"):
        for _ in range(3):
            assert not lag.refresh()
        failing[0] = False
        assert lag.refresh()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("consumer lag unknown" in m for m in messages) == 1, messages
    assert "Unable to bootstrap" in messages[0]
    assert any("consumer lag known again" in m for m in messages)


def test_close_stops_the_reader() -> None:
    calls: list[int] = []

    def fetch() -> Offsets:
        calls.append(1)
        return {}

    lag = KafkaLag(KAFKA, ["t"], cache_seconds=0.01, fetch=fetch)
    lag.lag({})
    lag.close()
    assert lag._thread is not None and not lag._thread.is_alive()
    seen = len(calls)
    lag._stop.wait(0.05)
    assert len(calls) == seen


# -- fleetmon_consumer_lag_up: an unknown lag is exported as 0, not just left out --------------------------
def _scrape(lag: KafkaLag | None) -> dict[str, list[float]]:
    store = MemoryStore()
    store.apply(BatchDelta(), "t:0", 0, 9)
    registry, _ = build_registry(store, PRICES, now=lambda: NOW, consumer_lag=lag)
    samples: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample.value)
    return samples


def test_lag_up_is_1_with_a_fresh_reading_and_0_once_it_is_stale() -> None:
    clock = Clock()
    answers: list[Offsets | Exception] = [{"t:0": (0, 15)}]
    lag = scripted(answers, clock)
    samples = _scrape(lag)
    assert samples["fleetmon_consumer_lag"] == [5]   # 15 - (9 + 1)
    assert samples["fleetmon_consumer_lag_up"] == [1]
    answers[0] = ConnectionError("broker down")
    clock.now += 59
    assert not lag.refresh()
    assert _scrape(lag)["fleetmon_consumer_lag_up"] == [1]  # a minute-old reading still serves
    clock.now += 2
    samples = _scrape(lag)
    assert "fleetmon_consumer_lag" not in samples
    assert samples["fleetmon_consumer_lag_up"] == [0]
    answers[0] = {"t:0": (0, 10)}
    assert lag.refresh()
    assert _scrape(lag)["fleetmon_consumer_lag_up"] == [1]


def test_lag_up_is_0_when_the_first_reading_fails() -> None:
    def refused() -> Offsets:
        raise KafkaCredentialsRefused("127.0.0.1:9", "[Error 58] SaslAuthenticationFailed")

    lag = KafkaLag(KAFKA, ["t"], cache_seconds=60, first_wait_seconds=10, fetch=refused)
    try:
        samples = _scrape(lag)  # the first scrape starts the reader and waits for its (failed) reading
    finally:
        lag.close()
    assert "fleetmon_consumer_lag" not in samples
    assert samples["fleetmon_consumer_lag_up"] == [0]
    assert samples["fleetmon_store_up"] == [1]        # the rest of the scrape is served


def test_lag_up_is_absent_without_a_lag_source() -> None:
    samples = _scrape(None)
    assert "fleetmon_consumer_lag" not in samples and "fleetmon_consumer_lag_up" not in samples
    assert samples["fleetmon_applied_offset"] == [9]
