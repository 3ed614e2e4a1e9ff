"""The one place that builds a :class:`TriggerHook` from :class:`Settings`."""

from __future__ import annotations

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.amqp.publisher import AmqpPublisher
from triggerhook.app import TriggerHook
from triggerhook.clock import SystemClock
from triggerhook.domain.delivery import DeliveryPolicy
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.interfaces import ConfirmSink, RetryHandler
from triggerhook.metrics.influx import sink_from_settings
from triggerhook.runtime.worker import FailureHandler
from triggerhook.settings import Settings
from triggerhook.store.mysql import MySQLStore


def build(settings: Settings) -> TriggerHook:
    """Wire the MySQL store, the AMQP publisher, the system clock and, when
    ``metrics_url`` is set, the InfluxDB metrics sink."""
    params = amqp_parameters(settings.amqp_url)  # parsed once; fails fast if malformed

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
            DeliveryPolicy(
                settings.publish_max_attempts,
                settings.publish_max_age_ms,
                settings.publish_retry_max_ms,
            ),
            settings.dead_letter_routing_key,
            settings.dead_letter_queue,
        )

    store = MySQLStore(settings.database_url, settings.default_routing_key)
    return TriggerHook(settings, store, SystemClock(), publisher, sink_from_settings(settings))
