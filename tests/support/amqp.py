"""RabbitMQ helpers for tests: unique names and a blocking event consumer."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions

# Errors after which the consumer reconnects (e.g. a test restarted the broker).
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.AMQPChannelError,
    pika.exceptions.StreamLostError,
    ConnectionError,
)
_RECONNECT_BACKOFF_S = 0.2


@dataclass(frozen=True)
class AmqpNames:
    """Per-test exchange and queue names (see the amqp_names fixture)."""

    exchange: str
    queue: str

    @property
    def commands(self) -> str:
        """The command queue a test daemon consumes (its dead-letter queue: + ``.dead``)."""
        return f"{self.exchange}.commands"

    @property
    def dead_letters(self) -> str:
        """The dead-letter queue a test engine declares for undeliverable events."""
        return f"{self.exchange}.dead"


@dataclass(frozen=True)
class Received:
    """One message as the consumer saw it."""

    routing_key: str
    body: bytes
    message_id: str | None
    delivery_mode: int | None
    timestamp: int | None
    headers: dict[str, object]
    received_ms: int  # time.time() * 1000 when the consumer got it
    content_type: str | None = None
    content_encoding: str | None = None


def _now_ms() -> int:
    return int(time.time() * 1000)


class EventConsumer:
    """Consumes everything published to ``names.exchange``.

    :meth:`declare` declares a durable topic exchange and a durable queue bound
    to it with routing key ``#``, so messages published from then on are kept
    even when nobody is collecting. :meth:`collect` and :meth:`drain_quiet`
    consume (with manual acks) on a BlockingConnection; messages that arrive
    beyond what a call asked for are kept for the next call. ``received_ms`` is
    only an accurate arrival time for messages that arrive while a call runs.

    If the connection breaks (broker restarted, proxy cut) the consumer
    reconnects within the same call's deadline; unacked messages are redelivered.
    """

    def __init__(
        self,
        amqp_url: str,
        names: AmqpNames,
        binding: str = "#",
        queue_arguments: dict[str, object] | None = None,
    ) -> None:
        self.amqp_url = amqp_url  # or several, space-separated: the nodes, tried in turn
        self.names = names
        self.binding = binding  # routing keys of the events kept
        self.queue_arguments = queue_arguments  # e.g. a quorum queue's type
        self._connection: Any = None
        self._channel: Any = None
        self._buffer: deque[Received] = deque()

    # -- lifecycle ---------------------------------------------------------------

    def declare(self) -> None:
        """Declare the exchange, queue and binding, and start consuming."""
        self._ensure_channel()

    def delete_queue(self) -> None:
        """Delete the queue (it is durable: left, it would keep every event)."""
        self._ensure_channel()
        self._channel.queue_delete(queue=self.names.queue)

    def close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(*_CONNECTION_ERRORS):
                connection.close()

    def __enter__(self) -> EventConsumer:
        self.declare()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- consuming ---------------------------------------------------------------

    def collect(self, count: int, timeout_s: float) -> list[Received]:
        """Return once ``count`` messages arrived or ``timeout_s`` passed.

        Returns at most ``count`` messages, fewer on timeout (check the length).
        """
        deadline = time.monotonic() + timeout_s
        while len(self._buffer) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._process(remaining)
        return [self._buffer.popleft() for _ in range(min(count, len(self._buffer)))]

    def drain_quiet(self, quiet_s: float, max_s: float = 60.0) -> list[Received]:
        """Collect until no message arrived for ``quiet_s`` (or ``max_s`` in total)."""
        hard_deadline = time.monotonic() + max_s
        quiet_deadline = min(time.monotonic() + quiet_s, hard_deadline)
        seen = len(self._buffer)
        while True:
            remaining = quiet_deadline - time.monotonic()
            if remaining <= 0:
                break
            self._process(remaining)
            if len(self._buffer) > seen:
                seen = len(self._buffer)
                quiet_deadline = min(time.monotonic() + quiet_s, hard_deadline)
        received = list(self._buffer)
        self._buffer.clear()
        return received

    # -- internals ---------------------------------------------------------------

    def _process(self, time_limit_s: float) -> None:
        """Process I/O for up to ``time_limit_s``; returns early when messages arrive."""
        try:
            self._ensure_channel()
            self._connection.process_data_events(time_limit=time_limit_s)
        except _CONNECTION_ERRORS:
            self.close()
            # Broker unreachable: back off briefly instead of spinning on refusals.
            time.sleep(min(_RECONNECT_BACKOFF_S, max(time_limit_s, 0.0)))

    def _ensure_channel(self) -> None:
        if self._channel is not None and self._channel.is_open:
            return
        self.close()
        connection = pika.BlockingConnection(
            [pika.URLParameters(url) for url in self.amqp_url.split()]
        )
        try:
            channel = connection.channel()
            channel.exchange_declare(
                exchange=self.names.exchange, exchange_type="topic", durable=True
            )
            channel.queue_declare(
                queue=self.names.queue, durable=True, arguments=self.queue_arguments
            )
            channel.queue_bind(
                queue=self.names.queue, exchange=self.names.exchange, routing_key=self.binding
            )
            channel.basic_consume(
                queue=self.names.queue, on_message_callback=self._on_message, auto_ack=False
            )
        except BaseException:
            connection.close()
            raise
        self._connection, self._channel = connection, channel

    def _on_message(self, channel: Any, method: Any, properties: Any, body: bytes) -> None:
        received_ms = _now_ms()
        self._buffer.append(
            Received(
                routing_key=str(method.routing_key),
                body=bytes(body),
                message_id=properties.message_id,
                delivery_mode=properties.delivery_mode,
                timestamp=properties.timestamp,
                headers=dict(properties.headers or {}),
                received_ms=received_ms,
                content_type=properties.content_type,
                content_encoding=properties.content_encoding,
            )
        )
        channel.basic_ack(delivery_tag=method.delivery_tag)


def delete_topology(amqp_url: str, names: AmqpNames) -> None:
    """Delete the exchange and the queues (events, commands); missing ones are fine."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    queues = (names.queue, names.commands, f"{names.commands}.dead", names.dead_letters)
    try:
        for kind, name in [*(("queue", q) for q in queues), ("exchange", names.exchange)]:
            channel = connection.channel()
            try:
                if kind == "queue":
                    channel.queue_delete(queue=name)
                else:
                    channel.exchange_delete(exchange=name)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise
                continue  # the broker closed this channel
            channel.close()
    finally:
        if connection.is_open:
            connection.close()
