"""The composition root: the one place that reads :class:`Settings` and builds
the parts, handing each only the values it needs.

:func:`build` wires the real adapters (MySQL store, AMQP publisher, system
clock, InfluxDB sink when ``metrics_url`` is set); :func:`assemble` wires the
engine and the façade around whatever store, clock and publisher it is given
(unit tests pass the memory store and fakes).
"""

from __future__ import annotations

import logging
import socket

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.amqp.publisher import AmqpPublisher
from triggerhook.app import TriggerHook
from triggerhook.clock import SystemClock
from triggerhook.domain.delivery import DeliveryPolicy
from triggerhook.domain.spec import TaskRules
from triggerhook.engine.engine import Engine, EngineConfig, PublisherFactory
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.errors import ConfigError
from triggerhook.interfaces import Clock, ConfirmSink, MetricsSink, RetryHandler, TaskStore
from triggerhook.logs import redact
from triggerhook.metrics.collector import Collector
from triggerhook.metrics.influx import InfluxV1Sink, InfluxV2Sink, check_url
from triggerhook.metrics.reporter import MetricsReporter
from triggerhook.runtime.worker import FailureHandler
from triggerhook.settings import Settings
from triggerhook.store.mysql import MySQLStore

log = logging.getLogger(__name__)


def build(settings: Settings) -> TriggerHook:
    """Wire the MySQL store, the AMQP publisher, the system clock and, when
    ``metrics_url`` is set, the InfluxDB metrics sink."""
    publisher = publisher_factory(settings)  # parses the URL first: fails fast if malformed
    sink = sink_from_settings(settings)
    store = MySQLStore(settings.database_url, settings.default_routing_key)
    return assemble(settings, store, SystemClock(), publisher, sink)


def assemble(
    settings: Settings,
    store: TaskStore,
    clock: Clock,
    publisher: PublisherFactory,
    metrics_sink: MetricsSink | None = None,
) -> TriggerHook:
    """The engine and the façade over ``store``, ``clock`` and ``publisher``."""
    engine = Engine(engine_config(settings), store, clock, publisher)
    tags = {"instance": engine.instance, "host": socket.gethostname()}

    def start_metrics() -> MetricsReporter:
        collector = Collector(
            engine, store, tags, settings.metrics_recount_s * 1000, int(clock.now_ms())
        )
        if metrics_sink is not None:
            log.info(
                "metrics: writing to %s every %d ms",
                redact(settings.metrics_url),
                settings.metrics_interval_ms,
            )
        return MetricsReporter(
            clock,
            collector,
            metrics_sink,
            settings.metrics_interval_ms,
            settings.metrics_buffer_points,
            join_timeout_s=settings.metrics_timeout_ms / 1000 + 1.0,
        )

    rules = TaskRules(settings.default_routing_key, settings.max_payload_bytes)
    return TriggerHook(engine, store, clock, rules, start_metrics)


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(
        instance=settings.resolved_instance_id(),
        max_tasks_in_memory=settings.max_tasks_in_memory,
        send_buffer_size=settings.send_buffer_size,
        preload_window_ms=settings.preload_window_ms,
        arm_ahead_ms=settings.arm_ahead_ms,
        claim_lease_ms=settings.claim_lease_ms,
        claim_batch_size=settings.claim_batch_size,
        poll_interval_ms=settings.poll_interval_ms,
        confirm_batch_size=settings.confirm_batch_size,
        confirm_max_delay_ms=settings.confirm_max_delay_ms,
        schedule_batch_size=settings.schedule_batch_size,
        commit_queue_max=settings.commit_queue_max,
        shutdown_timeout_s=settings.shutdown_timeout_s,
        switch_interval_us=settings.switch_interval_us,
    )


def publisher_factory(settings: Settings) -> PublisherFactory:
    """The AMQP publisher, built when the engine asks (it hands over its stages)."""
    params = amqp_parameters(settings.amqp_url)  # parsed once
    policy = DeliveryPolicy(
        settings.publish_max_attempts, settings.publish_max_age_ms, settings.publish_retry_max_ms
    )

    def publisher(
        buffer: SendBuffer, confirms: ConfirmSink, retry: RetryHandler, on_failure: FailureHandler
    ) -> AmqpPublisher:
        return AmqpPublisher(
            params,
            settings.exchange,
            buffer,
            confirms,
            retry,
            settings.max_unconfirmed,
            on_failure,
            policy,
            settings.dead_letter_routing_key,
            settings.dead_letter_queue,
        )

    return publisher


def sink_from_settings(settings: Settings) -> MetricsSink | None:
    """The sink ``settings`` ask for, or None when ``metrics_url`` is empty (off)."""
    if not settings.metrics_url:
        return None
    try:
        url = check_url(settings.metrics_url)
    except ValueError as exc:
        raise ConfigError(f"metrics_url: {exc}") from None
    timeout_s = settings.metrics_timeout_ms / 1000
    if settings.metrics_influx_version == 1:
        if not settings.metrics_database:
            raise ConfigError("metrics_database: must not be empty (metrics_influx_version = 1)")
        return InfluxV1Sink(
            url,
            settings.metrics_database,
            settings.metrics_retention_policy,
            settings.metrics_username,
            settings.metrics_password,
            timeout_s,
        )
    if not settings.metrics_bucket:
        raise ConfigError("metrics_bucket: must not be empty (metrics_influx_version = 2)")
    return InfluxV2Sink(
        url, settings.metrics_org, settings.metrics_bucket, settings.metrics_token, timeout_s
    )
