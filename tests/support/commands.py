"""A client of the AMQP command channel for tests (a pika BlockingConnection).

* :meth:`CommandClient.send`: publish a command (``type`` property, JSON or raw
  body) to the command queue, optionally asking for a reply.
* :meth:`CommandClient.reply`: wait for the reply with a correlation id on the
  client's own reply queue (exclusive, auto-delete, server-named).
* :meth:`CommandClient.dead_letters`: take messages from ``<queue>.dead``.
* :meth:`CommandClient.depth`: ready messages in a queue (unacked ones are not
  counted; close the consumer's connection first to count those too).
* :func:`delete_queues`: remove the command and dead-letter queues after a test.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions


@dataclass(frozen=True)
class Message:
    """A message taken from a queue."""

    body: bytes
    properties: Any  # pika.spec.BasicProperties

    @property
    def headers(self) -> dict[str, object]:
        return dict(self.properties.headers or {})

    def json(self) -> Any:
        return json.loads(self.body)


class CommandClient:
    """Publishes commands to ``queue`` and collects replies and dead letters."""

    def __init__(self, amqp_url: str, queue: str) -> None:
        self.queue = queue
        self.dead_queue = f"{queue}.dead"
        self._connection: Any = pika.BlockingConnection(pika.URLParameters(amqp_url))
        self._channel: Any = self._connection.channel()
        self._channel.confirm_delivery()
        result = self._channel.queue_declare(queue="", exclusive=True, auto_delete=True)
        self.reply_queue = str(result.method.queue)
        self._replies: dict[str, Message] = {}
        self._channel.basic_consume(
            queue=self.reply_queue, on_message_callback=self._on_reply, auto_ack=True
        )

    def close(self) -> None:
        if self._connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError):
                self._connection.close()

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sending ---------------------------------------------------------------------

    def send(
        self,
        type_: str | None,
        body: object = None,
        *,
        raw: bytes | None = None,
        reply: bool = False,
        message_id: str | None = None,
        headers: dict[str, object] | None = None,
        persistent: bool = True,
    ) -> str | None:
        """Publish a command (``body`` as JSON, or ``raw`` bytes) with publisher
        confirms; returns the correlation id when ``reply`` is asked for."""
        data = raw if raw is not None else json.dumps(body).encode()
        correlation_id = str(uuid.uuid4()) if reply else None
        self._channel.basic_publish(
            exchange="",
            routing_key=self.queue,
            body=data,
            properties=pika.BasicProperties(
                type=type_,
                content_type="application/json",
                message_id=message_id,
                correlation_id=correlation_id,
                reply_to=self.reply_queue if reply else None,
                headers=headers,
                delivery_mode=2 if persistent else 1,
            ),
            mandatory=True,
        )
        return correlation_id

    def call(self, type_: str, body: object, timeout_s: float = 15.0, **kwargs: Any) -> Any:
        """Send a command asking for a reply and return the decoded reply."""
        correlation_id = self.send(type_, body, reply=True, **kwargs)
        assert correlation_id is not None
        return self.reply(correlation_id, timeout_s).json()

    # -- receiving -------------------------------------------------------------------

    def _on_reply(self, _channel: Any, _method: Any, properties: Any, body: bytes) -> None:
        self._replies[str(properties.correlation_id)] = Message(bytes(body), properties)

    def reply(self, correlation_id: str, timeout_s: float) -> Message:
        """The reply with ``correlation_id``; AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while correlation_id not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no reply {correlation_id} within {timeout_s}s")
            self._connection.process_data_events(time_limit=min(left, 0.2))
        return self._replies.pop(correlation_id)

    def replies_pending(self, quiet_s: float) -> int:
        """Process I/O for ``quiet_s``; the number of replies not yet taken."""
        self._connection.process_data_events(time_limit=quiet_s)
        return len(self._replies)

    def dead_letters(self, count: int, timeout_s: float) -> list[Message]:
        """Take ``count`` messages from the dead-letter queue (fewer on timeout)."""
        taken: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while len(taken) < count and time.monotonic() < deadline:
            method, properties, body = self._channel.basic_get(self.dead_queue, auto_ack=True)
            if method is None:
                self._connection.process_data_events(time_limit=0.05)
                continue
            taken.append(Message(bytes(body), properties))
        return taken

    def depth(self, queue: str) -> int:
        """Ready messages in ``queue`` (which must exist)."""
        result = self._channel.queue_declare(queue=queue, passive=True)
        return int(result.method.message_count)


def delete_queues(amqp_url: str, queue: str) -> None:
    """Delete ``queue`` and ``<queue>.dead``; missing ones are fine."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        for name in (queue, f"{queue}.dead"):
            channel = connection.channel()
            try:
                channel.queue_delete(queue=name)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise
                continue
            channel.close()
    finally:
        if connection.is_open:
            connection.close()
