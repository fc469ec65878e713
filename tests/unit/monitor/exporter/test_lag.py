"""KafkaLag reads the broker's offsets off the scrape path (monitor/exporter/lag.py).

No broker here: ``fetch`` is a function the tests control (a blocked broker is a fetch waiting on an
event), and the clock is passed in. The real broker paths run in tests/integration/test_prometheus.py
(lag read) and test_secure.py (a refused password)."""

from __future__ import annotations

import logging
import threading

import pytest

from monitor.config import KafkaConfig
from monitor.exporter.lag import KafkaLag, Offsets

KAFKA = KafkaConfig(bootstrap="127.0.0.1:9")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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

    def fetch() -> Offsets:
        answer = answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    lag = KafkaLag(KAFKA, ["t"], cache_seconds=5, clock=clock, stale_seconds=60, fetch=fetch)
    assert lag.refresh()
    lag._thread = threading.current_thread()  # no background reader: the test refreshes by hand
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
