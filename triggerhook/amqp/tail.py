"""``triggerhook tail``: watch the events the daemon publishes, without the
management UI or a consumer of one's own.

:func:`tail` binds a queue of its own (server-named, exclusive: it goes with
the connection) to the exchange with a routing-key pattern, and hands each
event to the caller as a JSON-ready dict (:func:`describe`). The exchange is
declared as the daemon declares it (durable topic), so tailing can start
before the daemon does. Events published before the queue was bound are not
seen: it is a window on the exchange, not a reader of anyone's queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.domain.event import describe as describe_event
from triggerhook.errors import BrokerUnavailable

# How long one wait for an event lasts: a stop and the deadline are seen this often.
_POLL_S = 0.5


def describe(routing_key: str, properties: Any, body: bytes) -> dict[str, Any]:
    """One event as a JSON-ready dict (:func:`triggerhook.domain.event.describe`:
    the engine's headers as fields, the task's AMQP properties and headers,
    the payload as text or ``{"base64": ...}``). ``properties``: pika's
    ``BasicProperties``."""
    return describe_event(
        properties.message_id,
        routing_key,
        properties.headers or {},
        body,
        getattr(properties, "content_type", None),
        getattr(properties, "content_encoding", None),
    )


def tail(
    amqp_url: str,
    exchange: str,
    pattern: str,
    on_event: Callable[[dict[str, Any]], bool],
    timeout_s: float | None = None,
    on_bound: Callable[[], None] = lambda: None,
    stop: threading.Event | None = None,
) -> bool:
    """Hand every event published to ``exchange`` whose routing key matches
    ``pattern`` (topic syntax: ``#``, ``billing.*``) to ``on_event`` until it
    returns False (then True is returned) or ``timeout_s`` passes (False).
    ``on_bound`` is called once the queue is bound: from then on every
    matching event is seen. ``stop`` set (Ctrl-C): it ends as at the deadline.
    :class:`BrokerUnavailable` when the broker cannot be reached or drops the
    connection; :class:`ConfigError` for a malformed URL."""
    params = amqp_parameters(amqp_url)
    deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        conn = pika.BlockingConnection(list(params))  # tried in order
    except pika.exceptions.AMQPError as exc:
        raise BrokerUnavailable(f"message broker unavailable: {exc!r}") from exc
    try:
        channel = conn.channel()
        queue = _bind(channel, exchange, pattern)
        on_bound()
        return _consume(channel, queue, on_event, deadline_s, stop or threading.Event())
    except pika.exceptions.AMQPError as exc:
        raise BrokerUnavailable(f"message broker: {exc!r}") from exc
    finally:
        if conn.is_open:
            conn.close()


def _bind(channel: Any, exchange: str, pattern: str) -> str:
    """A queue of its own bound to ``exchange`` with ``pattern``: its name."""
    channel.exchange_declare(exchange=exchange, exchange_type="topic", durable=True)
    queue = channel.queue_declare(queue="", exclusive=True, auto_delete=True).method.queue
    channel.queue_bind(queue=queue, exchange=exchange, routing_key=pattern)
    return str(queue)


def _consume(
    channel: Any,
    queue: str,
    on_event: Callable[[dict[str, Any]], bool],
    deadline_s: float | None,
    stop: threading.Event,
) -> bool:
    events = channel.consume(queue, auto_ack=True, inactivity_timeout=_POLL_S)
    for method, properties, body in events:  # (None, None, None): _POLL_S without one
        if method is not None and not on_event(describe(method.routing_key, properties, body)):
            channel.cancel()
            return True
        if stop.is_set() or (deadline_s is not None and time.monotonic() >= deadline_s):
            break
    channel.cancel()
    return False
