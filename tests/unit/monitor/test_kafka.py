"""Kafka client options: one builder, security included, for every client flavour."""

import re
import ssl

from monitor.config import KafkaConfig
from monitor.kafka import (
    aiokafka_admin,
    aiokafka_consumer,
    aiokafka_producer,
    aiokafka_security,
    bootstrap_servers,
    faust_broker,
    faust_credentials,
    kafka_python_admin,
    kafka_python_consumer,
    kafka_python_producer,
    kafka_python_security,
)
from tests.support.paths import ROOT

SASL = KafkaConfig(bootstrap="k1:9093, k2:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                   sasl_username="fleetmon", sasl_password="hunter2")


def test_plaintext_passes_no_security_to_aiokafka_and_the_protocol_to_kafka_python():
    plain = KafkaConfig()
    assert aiokafka_security(plain) == {} and faust_credentials(plain) is None
    assert kafka_python_security(plain) == {"security_protocol": "PLAINTEXT"}
    assert kafka_python_consumer(plain, client_id="c", group_id=None) == {
        "bootstrap_servers": ["localhost:9092"], "client_id": "c", "security_protocol": "PLAINTEXT", "group_id": None}


def test_sasl_reaches_every_flavour():
    assert bootstrap_servers(SASL) == ["k1:9093", "k2:9093"]
    assert faust_broker(SASL) == ["kafka://k1:9093", "kafka://k2:9093"]
    for build in (kafka_python_producer, kafka_python_consumer, kafka_python_admin):
        options = build(SASL, client_id="x")
        assert (options["security_protocol"], options["sasl_mechanism"], options["sasl_plain_username"],
                options["sasl_plain_password"]) == ("SASL_SSL", "SCRAM-SHA-512", "fleetmon", "hunter2")
    for build in (aiokafka_consumer, aiokafka_producer, aiokafka_admin):
        options = build(SASL, client_id="x", acks=1)
        assert options["sasl_plain_password"] == "hunter2" and options["acks"] == 1
        assert isinstance(options["ssl_context"], ssl.SSLContext) and options["ssl_context"].check_hostname
    credentials = faust_credentials(SASL)
    assert credentials is not None and (credentials.kind, credentials.mechanism, credentials.username) == (
        "sasl", "SCRAM-SHA-512", "fleetmon")
    assert "hunter2" not in repr(credentials)


def test_tls_files_go_to_kafka_python_and_a_context_to_aiokafka_and_faust():
    tls = KafkaConfig(security_protocol="SSL", ssl_certfile="", ssl_cafile="")
    assert set(aiokafka_security(tls)) == {"security_protocol", "ssl_context"}
    assert kafka_python_security(KafkaConfig(security_protocol="SSL", ssl_cafile="/ca.pem")) == {
        "security_protocol": "SSL", "ssl_cafile": "/ca.pem"}
    credentials = faust_credentials(tls)
    assert credentials is not None and credentials.kind == "ssl" and credentials.ssl_context is not None


def test_no_product_module_builds_kafka_client_options_by_hand():
    """Every Kafka client goes through monitor.kafka: nobody else spells ``bootstrap_servers=``."""
    offenders = []
    for package in ("monitor", "streams", "alerts"):
        for path in (ROOT / package).rglob("*.py"):
            if path.relative_to(ROOT).as_posix() != "monitor/kafka.py" and re.search(
                    r"bootstrap_servers\s*=", path.read_text()):
                offenders.append(path.relative_to(ROOT).as_posix())
    assert offenders == []
