"""Whether Kafka refuses fleetmon's SASL credentials, asked once before a kafka-python client is built.

The kafka-python clients (``fleetmon replay``, ``fleetmon dlq``, ``fleetmon run --kafka``, the
emitter library, the exporter's consumer lag) cannot tell a wrong password from an unreachable
broker: kafka-python 3.0 loses the broker's SaslAuthenticate error when the broker closes the
connection after it, and retries until its bootstrap timeout (30 s), then says only that it
could not bootstrap. aiokafka, which the worker
uses, reads that error. :func:`refused_credentials` opens one aiokafka connection to each
bootstrap server and returns the broker's words when it refuses the credentials; anything else
(unreachable, slow, TLS) is left to the caller's own client, its retries and its errors.
"""

from __future__ import annotations

import asyncio
import threading

from monitor.config import KafkaConfig
from monitor.kafka import aiokafka_security, bootstrap_servers

#: Seconds allowed for each server's connection and SASL exchange.
PROBE_TIMEOUT_SECONDS = 10.0


def refused_credentials(kafka: KafkaConfig, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> str | None:
    """The broker's refusal of ``kafka``'s credentials (``[Error 58] SaslAuthenticationFailed: ...``), or None.

    None also when SASL is not configured, or when no server answered at all (the caller's client
    reports that in its own words).
    """
    if not kafka.sasl_mechanism:
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop on this thread: run one here
        return asyncio.run(_probe(kafka, timeout_seconds))
    # Called from a coroutine (an agent building its emitter inside asyncio): asyncio.run would
    # refuse, so the probe runs its own loop on a thread of its own.
    answer: list[str | None] = [None]

    def probe() -> None:
        answer[0] = asyncio.run(_probe(kafka, timeout_seconds))

    thread = threading.Thread(target=probe, name="fleetmon-credentials-check", daemon=True)
    thread.start()
    thread.join()
    return answer[0]


async def _probe(kafka: KafkaConfig, timeout_seconds: float) -> str | None:
    from aiokafka.conn import create_conn
    from aiokafka.errors import KafkaError, SaslAuthenticationFailed

    security = aiokafka_security(kafka)
    for server in bootstrap_servers(kafka):
        host, _, port = server.rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(host.strip("[]"), int(port), client_id="fleetmon-credentials-check",
                            request_timeout_ms=int(timeout_seconds * 1000), **security),
                timeout_seconds)
        except SaslAuthenticationFailed as exc:
            return str(exc)
        except (TimeoutError, OSError, KafkaError):
            continue
        conn.close()
        return None
    return None


class KafkaCredentialsRefused(ConnectionError):
    """The broker refused the configured SASL credentials; the message carries the broker's words."""

    def __init__(self, bootstrap: str, refusal: str) -> None:
        self.bootstrap = bootstrap
        self.refusal = refusal
        super().__init__(f"Kafka at {bootstrap} refused the credentials: {refusal} "
                         "(check kafka.sasl_username / sasl_password, or FLEETMON_KAFKA_SASL_*)")


def check_credentials(kafka: KafkaConfig, timeout_seconds: float = PROBE_TIMEOUT_SECONDS) -> None:
    """Raise :class:`KafkaCredentialsRefused` when the broker refuses ``kafka``'s credentials."""
    refusal = refused_credentials(kafka, timeout_seconds)
    if refusal is not None:
        raise KafkaCredentialsRefused(kafka.bootstrap, refusal)
