"""The Faust app that ``fleetmon worker`` runs.

The app declares the two topics (input ``fleetmon.traces`` and dead-letter
``fleetmon.traces.dlq``, names configurable, both raw bytes — no Faust codec
touches a record) and one service, :class:`AggregateService`, which runs
:class:`streams.loop.ConsumeLoop`: ingest (decode + validate, rejects to
the DLQ), aggregate (fold into windows and totals) and pair (join shadow
pairs on ``pair_id``) in one pass over each fetched batch, written by one
atomic Redis apply per fetch (covering every partition in it).

Faust's own consumer is switched off (:class:`_Boot`): the loop owns an
aiokafka consumer in the same consumer group protocol as any Kafka client,
because Faust's per-event agent path is an order of magnitude slower than
the throughput target (figures in docs/operating.md). What Faust still
does here: the worker process (signal handling, logging, ordered start and
graceful stop of services), topic declaration, and the producer the DLQ is
written with (``acks=all``, so a DLQ record is durable before the Redis
apply that counts it). Every Kafka client option comes from :mod:`monitor.kafka`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from typing import Any

import faust
import mode
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from faust.app.base import BootStrategy

from monitor.kafka import aiokafka_admin, faust_broker
from monitor.kafka import faust_credentials as faust_credential_options
from monitor.store.redis.open import open_store
from monitor.worker_settings import WorkerSettings
from streams.loop import ConsumeLoop, tune_gc

log = logging.getLogger("fleetmon.worker")

#: The broker's default record limit is 10 MiB; a DLQ record carries up to
#: ~8 MiB of base64 payload (streams.dlq) plus its reasons.
PRODUCER_MAX_REQUEST_BYTES = 10 * 1024 * 1024


class _Boot(BootStrategy):
    """Start the producer and our services, not Faust's consumer, tables or web server."""

    enable_kafka_consumer = False
    enable_web = False


class FleetmonApp(faust.App):
    BootStrategy = _Boot


class FaustDlqSink:
    """Writes DLQ records with the app's producer and waits for every acknowledgement."""

    def __init__(self, app: faust.App, topic: str) -> None:
        self.app = app
        self.topic = topic

    async def send(self, records: list[tuple[bytes, bytes]]) -> None:
        producer = self.app.producer
        pending = [await producer.send(self.topic, key, value, None, None, None) for key, value in records]
        await asyncio.gather(*pending)


async def ensure_topics(settings: WorkerSettings, names: list[str]) -> None:
    """Create the topics that do not exist yet (``settings.partitions`` each)."""
    admin = AIOKafkaAdminClient(**aiokafka_admin(settings.kafka, client_id="fleetmon-admin"))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                await admin.create_topics([NewTopic(n, settings.partitions, 1) for n in missing])
                log.info("created topics %s with %d partitions", missing, settings.partitions)
            except TopicAlreadyExistsError:
                pass  # another worker created it first
    finally:
        await admin.close()


class AggregateService(mode.Service):
    """Runs the consume loop for the life of the worker."""

    def __init__(self, app: faust.App, settings: WorkerSettings, **kwargs: Any) -> None:
        self.app = app
        self.settings = settings
        self.loop_runner: ConsumeLoop | None = None
        super().__init__(**kwargs)

    async def on_start(self) -> None:
        await ensure_topics(self.settings, [self.settings.topic, self.settings.dlq_topic])
        store = open_store(self.settings.redis_url, self.settings.prefix, self.settings.resolutions,
                           cluster=self.settings.redis_cluster)
        self.loop_runner = ConsumeLoop(self.settings, store, dlq=FaustDlqSink(self.app, self.settings.dlq_topic))
        await self.loop_runner.start()
        log.info("fleetmon worker consuming: %s", self.settings.describe())

    @mode.Service.task
    async def _consume(self) -> None:
        assert self.loop_runner is not None
        try:
            await self.loop_runner.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an infrastructure fault we cannot retry: stop the worker loudly
            log.exception("consume loop failed")
            await self.crash(exc)

    async def on_stop(self) -> None:
        if self.loop_runner is not None:
            self.loop_runner.request_stop()
            await self.loop_runner.close()


def faust_credentials(settings: WorkerSettings) -> Any:
    """Faust's form of the Kafka security settings (None for PLAINTEXT)."""
    options = faust_credential_options(settings.kafka)
    if options is None:
        return None
    if options.kind == "sasl":
        return faust.SASLCredentials(username=options.username, password=options.password,
                                     mechanism=options.mechanism, ssl_context=options.ssl_context)
    return faust.SSLCredentials(options.ssl_context)


def create_app(settings: WorkerSettings) -> FleetmonApp:
    """A fresh app for ``settings`` (no import-time singleton)."""
    datadir = os.path.join(tempfile.gettempdir(), f"fleetmon-faust-{os.getuid()}")
    app = FleetmonApp(
        f"fleetmon-{settings.group_id}",
        broker=faust_broker(settings.kafka),
        datadir=datadir,
        web_enabled=False,
        producer_acks=-1,
        producer_max_request_size=PRODUCER_MAX_REQUEST_BYTES,
        topic_partitions=settings.partitions,
        broker_credentials=faust_credentials(settings),
    )
    app.topic(settings.topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    app.topic(settings.dlq_topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    app.service(AggregateService(app, settings))  # type: ignore[arg-type]
    return app


def run_worker(settings: WorkerSettings, loglevel: str = "info") -> int:
    """Run the Faust worker until SIGINT/SIGTERM; returns the process exit code."""
    app = create_app(settings)
    tune_gc()
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
