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

import base64
import time
from collections.abc import Callable, Mapping
from typing import Any

import pika
import pika.exceptions

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.errors import BrokerUnavailable

# The headers the engine sets itself (README, "The event on the wire"), shown
# as fields of their own; any other header is the task's.
_ENGINE_HEADERS = {"x-due-ms": "due_ms", "x-fired-ms": "fired_ms", "x-rev": "rev"}
_OCCURRENCE = "x-occurrence"
_NOT_THE_TASKS = frozenset({*_ENGINE_HEADERS, _OCCURRENCE})
# How long one wait for an event lasts: Ctrl-C and the deadline are seen this often.
_POLL_S = 0.5


def describe(routing_key: str, properties: Any, body: bytes) -> dict[str, Any]:
    """One event as a JSON-ready dict: ``id``, ``routing_key``, ``due_ms``,
    ``fired_ms``, ``rev`` (and ``occurrence`` for a series), the AMQP
    properties the task set, its own headers, and the payload as text when it
    is UTF-8, else as ``{"base64": ...}``. ``properties``: pika's
    ``BasicProperties``."""
    headers: Mapping[str, Any] = properties.headers or {}
    event: dict[str, Any] = {"id": properties.message_id, "routing_key": routing_key}
    for header, field in _ENGINE_HEADERS.items():
        event[field] = headers.get(header)
    if _OCCURRENCE in headers:
        event["occurrence"] = headers[_OCCURRENCE]
    for name in ("content_type", "content_encoding"):
        value = getattr(properties, name, None)
        if value is not None:
            event[name] = value
    own = {k: _text(v) for k, v in headers.items() if k not in _NOT_THE_TASKS}
    if own:
        event["headers"] = own
    event["payload"] = _payload(body)
    return event


def _payload(body: bytes) -> str | dict[str, str]:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(body).decode("ascii")}


def _text(value: Any) -> Any:
    """A header value JSON can hold (pika gives long strings as bytes)."""
    if isinstance(value, bytes):
        return _payload(value)
    return value


def tail(
    amqp_url: str,
    exchange: str,
    pattern: str,
    on_event: Callable[[dict[str, Any]], bool],
    timeout_s: float | None = None,
    on_bound: Callable[[], None] = lambda: None,
) -> bool:
    """Hand every event published to ``exchange`` whose routing key matches
    ``pattern`` (topic syntax: ``#``, ``billing.*``) to ``on_event`` until it
    returns False (then True is returned) or ``timeout_s`` passes (False).
    ``on_bound`` is called once the queue is bound: from then on every
    matching event is seen.
    :class:`BrokerUnavailable` when the broker cannot be reached or drops the
    connection; :class:`ConfigError` for a malformed URL."""
    params = amqp_parameters(amqp_url)
    deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        conn = pika.BlockingConnection(params)
    except pika.exceptions.AMQPError as exc:
        raise BrokerUnavailable(f"message broker unavailable: {exc!r}") from exc
    try:
        channel = conn.channel()
        queue = _bind(channel, exchange, pattern)
        on_bound()
        return _consume(channel, queue, on_event, deadline_s)
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
) -> bool:
    events = channel.consume(queue, auto_ack=True, inactivity_timeout=_POLL_S)
    for method, properties, body in events:  # (None, None, None): _POLL_S without one
        if method is not None and not on_event(describe(method.routing_key, properties, body)):
            channel.cancel()
            return True
        if deadline_s is not None and time.monotonic() >= deadline_s:
            break
    channel.cancel()
    return False
