"""The credentials check before a kafka-python client (the refusal itself is tested on the real SASL broker in
tests/integration/test_secure.py)."""

from __future__ import annotations

import socket

import pytest

from monitor import kafka_auth
from monitor.config import KafkaConfig


def test_without_sasl_no_connection_is_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a connection was opened for a PLAINTEXT config")

    monkeypatch.setattr("aiokafka.conn.create_conn", refuse)
    assert kafka_auth.refused_credentials(KafkaConfig(bootstrap="127.0.0.1:9")) is None


def test_a_server_that_does_not_answer_is_left_to_the_callers_client() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kafka = KafkaConfig(bootstrap=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="p")
    assert kafka_auth.refused_credentials(kafka, timeout_seconds=2.0) is None
