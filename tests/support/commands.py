"""A client of the AMQP command channel for tests (a pika BlockingConnection).

* :meth:`CommandClient.send`: publish a command (``type`` property, JSON or raw
  body) to the command queue, optionally asking for a reply.
* :meth:`CommandClient.reply`: wait for the reply with a correlation id on the
  client's own reply queue: exclusive, auto-delete, named
  ``<reply_prefix><uuid>`` (the daemon's default ``command_reply_prefix``), or
  direct reply-to (``amq.rabbitmq.reply-to``) with ``direct_reply=True``.
* With ``token``, every command carries ``authorization: Bearer <token>``;
  ``user_id=True`` sets the ``user_id`` property to the connection's user.
* :meth:`CommandClient.dead_letters`: take messages from ``<queue>.dead``.
* :meth:`CommandClient.depth`: ready messages in a queue (unacked ones are not
  counted; close the consumer's connection first to count those too).
* :func:`delete_queues`: remove the command and dead-letter queues after a test.
* :class:`Consumers`: in-process CommandConsumers of a test, all stopped at its end.
* :func:`rabbitmq_user`: a temporary RabbitMQ user (``rabbitmqctl``), deleted after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions

from support.hook import settings_of
from support.waiting import wait_for
from triggerhook import TriggerHook
from triggerhook.amqp.connection import amqp_parameters
from triggerhook.api.commands import CommandConsumer
from triggerhook.wiring import command_config

CONNECT_TIMEOUT_S = 20.0
_RABBITMQCTL_TIMEOUT_S = 60.0

DEFAULT_REPLY_PREFIX = "triggerhook.reply."
DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


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

    def __init__(
        self,
        amqp_url: str,
        queue: str,
        *,
        token: str | None = None,
        reply_prefix: str = DEFAULT_REPLY_PREFIX,
        direct_reply: bool = False,
    ) -> None:
        self.queue = queue
        self.dead_queue = f"{queue}.dead"
        self.token = token
        parameters = pika.URLParameters(amqp_url)
        self.user = str(parameters.credentials.username)
        self._connection: Any = pika.BlockingConnection(parameters)
        self._channel: Any = self._connection.channel()
        self._channel.confirm_delivery()
        if direct_reply:
            self.reply_queue = DIRECT_REPLY_TO  # consumed (no-ack) before any publish
        else:
            self.reply_queue = f"{reply_prefix}{uuid.uuid4()}"
            self._channel.queue_declare(queue=self.reply_queue, exclusive=True, auto_delete=True)
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
        reply_to: str | None = None,
        user_id: bool = False,
    ) -> str | None:
        """Publish a command (``body`` as JSON, or ``raw`` bytes) with publisher
        confirms; returns the correlation id when ``reply`` is asked for.

        ``reply_to`` replaces the client's reply queue (with ``reply``); the
        client's token header is added unless ``headers`` has its own."""
        data = raw if raw is not None else json.dumps(body).encode()
        correlation_id = str(uuid.uuid4()) if reply else None
        all_headers = dict(headers or {})
        if self.token is not None:
            all_headers.setdefault("authorization", f"Bearer {self.token}")
        self._channel.basic_publish(
            exchange="",
            routing_key=self.queue,
            body=data,
            properties=pika.BasicProperties(
                type=type_,
                content_type="application/json",
                message_id=message_id,
                correlation_id=correlation_id,
                reply_to=(reply_to or self.reply_queue) if reply else None,
                headers=all_headers or None,
                delivery_mode=2 if persistent else 1,
                user_id=self.user if user_id else None,
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

    def declare_queue(self, queue: str) -> None:
        """Declare an exclusive, auto-delete queue (gone with this client)."""
        self._channel.queue_declare(queue=queue, exclusive=True, auto_delete=True)

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


class Consumers:
    """CommandConsumers started by a test; all stopped at its end."""

    def __init__(self) -> None:
        self.failures: list[tuple[str, BaseException]] = []
        self._started: list[CommandConsumer] = []

    def start(self, hook: TriggerHook, queue: str, **overrides: Any) -> CommandConsumer:
        settings = dataclasses.replace(settings_of(hook), command_queue=queue, **overrides)
        params = amqp_parameters(settings.amqp_url)
        consumer = CommandConsumer(hook, command_config(settings), params, self._failed)
        self._started.append(consumer)
        consumer.start()
        wait_for(consumer.is_connected, CONNECT_TIMEOUT_S, "command consumer not connected")
        return consumer

    def _failed(self, name: str, exc: BaseException) -> None:
        self.failures.append((name, exc))

    def close(self) -> None:
        for consumer in reversed(self._started):
            consumer.stop(5.0)
            assert consumer.join(5.0), "command consumer threads still running"


class RabbitmqctlUnavailable(Exception):
    """``rabbitmqctl`` is missing or cannot manage users here (tests skip)."""


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(
        ["rabbitmqctl", *args],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=_RABBITMQCTL_TIMEOUT_S,
    )


@contextlib.contextmanager
def rabbitmq_user(amqp_url: str, name: str) -> Iterator[str]:
    """A new RabbitMQ user with full permissions on ``amqp_url``'s vhost; yields
    ``amqp_url`` with that user's credentials. The user is deleted afterwards.

    Raises :class:`RabbitmqctlUnavailable` (before yielding) when ``rabbitmqctl``
    is missing or cannot add the user.
    """
    if shutil.which("rabbitmqctl") is None:
        raise RabbitmqctlUnavailable("rabbitmqctl is not installed: cannot create a RabbitMQ user")
    url = urllib.parse.urlsplit(amqp_url)
    vhost = urllib.parse.unquote(url.path[1:]) if len(url.path) > 1 else "/"
    password = uuid.uuid4().hex
    try:
        _rabbitmqctl("add_user", name, password)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise RabbitmqctlUnavailable(f"rabbitmqctl cannot add a user here: {exc!r}") from exc
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, name, ".*", ".*", ".*")
        netloc = f"{name}:{password}@{url.hostname}:{url.port or 5672}"
        yield urllib.parse.urlunsplit(url._replace(netloc=netloc))
    finally:
        _rabbitmqctl("delete_user", name)
