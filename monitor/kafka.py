"""Kafka client options: the one place that turns ``[kafka]`` of the configuration into client keyword arguments.

Every Kafka client of the project (the emitter, the worker's consumer and
admin, the rebuild, the DLQ producer's Faust app, the ``fleetmon dlq`` reader,
``fleetmon simulate --kafka``, ``fleetmon run --kafka`` and the exporter's
consumer lag) is built with the options returned here, so security settings
(SASL mechanism and credentials, TLS files, ``security_protocol``) reach every
client or none. ``tests/integration/test_secure.py`` runs them on a SASL_SSL
(SCRAM-SHA-512) listener.

Pure: no Kafka library is imported. kafka-python takes TLS file names;
aiokafka and Faust take an :class:`ssl.SSLContext`, built here with the
standard library the way ``aiokafka.helpers.create_ssl_context`` builds it
(server authentication, hostname checked, system CAs unless ``ssl_cafile``).
Extra keyword arguments of a builder (client tuning) are applied last, so a
caller replaces an option only by naming it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from monitor.config import KafkaConfig


def bootstrap_servers(kafka: KafkaConfig) -> list[str]:
    """``kafka.bootstrap`` (``host:port[,host:port...]``) as a list, blanks stripped."""
    return [host.strip() for host in kafka.bootstrap.split(",") if host.strip()]


def ssl_context(kafka: KafkaConfig) -> ssl.SSLContext:
    """A client TLS context from ``ssl_cafile`` / ``ssl_certfile`` / ``ssl_keyfile`` / ``ssl_password``."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=kafka.ssl_cafile or None)
    if kafka.ssl_certfile:
        context.load_cert_chain(kafka.ssl_certfile, kafka.ssl_keyfile or None, kafka.ssl_password or None)
    return context


# -- kafka-python -----------------------------------------------------------------------------
def kafka_python_security(kafka: KafkaConfig) -> dict[str, Any]:
    """Security options of a kafka-python client (``security_protocol`` always, the rest when set)."""
    out: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    for key in ("sasl_mechanism", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
        if getattr(kafka, key):
            out[key] = getattr(kafka, key)
    if kafka.sasl_username:
        out["sasl_plain_username"] = kafka.sasl_username
        out["sasl_plain_password"] = kafka.sasl_password
    return out


def _kafka_python(kafka: KafkaConfig, client_id: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"bootstrap_servers": bootstrap_servers(kafka)}
    if client_id is not None:
        options["client_id"] = client_id
    options.update(kafka_python_security(kafka))
    options.update(extra)
    return options


def kafka_python_producer(kafka: KafkaConfig, *, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``kafka.KafkaProducer``."""
    return _kafka_python(kafka, client_id, extra)


def kafka_python_consumer(kafka: KafkaConfig, *, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``kafka.KafkaConsumer`` (topics are positional, not options)."""
    return _kafka_python(kafka, client_id, extra)


def kafka_python_admin(kafka: KafkaConfig, *, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``kafka.admin.KafkaAdminClient``."""
    return _kafka_python(kafka, client_id, extra)


# -- aiokafka ---------------------------------------------------------------------------------
def aiokafka_security(kafka: KafkaConfig) -> dict[str, Any]:
    """Security options of an aiokafka client: nothing for PLAINTEXT, an SSL context for *SSL."""
    if kafka.security_protocol == "PLAINTEXT":
        return {}
    options: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if "SSL" in kafka.security_protocol:
        options["ssl_context"] = ssl_context(kafka)
    if kafka.sasl_mechanism:
        options["sasl_mechanism"] = kafka.sasl_mechanism
        options["sasl_plain_username"] = kafka.sasl_username
        options["sasl_plain_password"] = kafka.sasl_password
    return options


def _aiokafka(kafka: KafkaConfig, client_id: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"bootstrap_servers": bootstrap_servers(kafka)}
    if client_id is not None:
        options["client_id"] = client_id
    options.update(aiokafka_security(kafka))
    options.update(extra)
    return options


def aiokafka_consumer(kafka: KafkaConfig, *, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``aiokafka.AIOKafkaConsumer``."""
    return _aiokafka(kafka, client_id, extra)


def aiokafka_producer(kafka: KafkaConfig, *, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``aiokafka.AIOKafkaProducer``."""
    return _aiokafka(kafka, client_id, extra)


def aiokafka_admin(kafka: KafkaConfig, *, client_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """Keyword arguments of ``aiokafka.admin.AIOKafkaAdminClient``."""
    return _aiokafka(kafka, client_id, extra)


# -- faust ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FaustCredentials:
    """What ``faust.App(broker_credentials=...)`` needs, without importing Faust.

    ``kind`` is ``"sasl"`` (``faust.SASLCredentials(username=, password=, mechanism=, ssl_context=)``)
    or ``"ssl"`` (``faust.SSLCredentials(ssl_context)``).
    """

    kind: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:  # the password never shows
        return f"FaustCredentials(kind={self.kind!r}, mechanism={self.mechanism!r}, username={self.username!r})"


def faust_broker(kafka: KafkaConfig) -> list[str]:
    """``faust.App(broker=...)``: one ``kafka://host:port`` URL per bootstrap server."""
    return [f"kafka://{host}" for host in bootstrap_servers(kafka)]


def faust_credentials(kafka: KafkaConfig) -> FaustCredentials | None:
    """Faust's form of the security settings (None for PLAINTEXT)."""
    options = aiokafka_security(kafka)
    if not options:
        return None
    if "sasl_mechanism" in options:
        return FaustCredentials("sasl", options.get("ssl_context"), options["sasl_mechanism"],
                                options["sasl_plain_username"], options["sasl_plain_password"])
    return FaustCredentials("ssl", options["ssl_context"])
