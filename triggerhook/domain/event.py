"""A fired event as every sink sends it (pure, no I/O): its headers, and its
JSON view.

The AMQP publisher encodes the same headers straight into frames for speed
(``amqp/frames.py``; ``tests/unit/test_local_publisher.py`` holds the two to
the same set); the local sinks of ``triggerhook dev`` take them from
:func:`event_headers`. :func:`describe` is the one JSON line of an event,
for ``triggerhook tail`` and ``triggerhook dev`` alike.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from triggerhook.domain.meta import Headers, HeaderValue
from triggerhook.domain.task import Task

# The headers the engine sets itself (README, "The event on the wire").
DUE_MS, FIRED_MS, REV, OCCURRENCE = "x-due-ms", "x-fired-ms", "x-rev", "x-occurrence"
# A dead letter's own (README, same section).
DEAD_CAUSE = "x-triggerhook-dead-cause"
DEAD_REASON = "x-triggerhook-dead-reason"
DEAD_ATTEMPTS = "x-triggerhook-attempts"
DEAD_ROUTING_KEY = "x-triggerhook-routing-key"

# Shown as fields of their own in the JSON view; any other header is the task's
# (or a dead letter's).
_ENGINE_FIELDS = {DUE_MS: "due_ms", FIRED_MS: "fired_ms", REV: "rev"}
_NOT_THE_TASKS = frozenset({*_ENGINE_FIELDS, OCCURRENCE})


def event_headers(task: Task, fired_ms: int, extra: Headers = ()) -> dict[str, HeaderValue]:
    """The headers of ``task``'s event published at ``fired_ms``, in the
    order the AMQP frames carry them: the engine's, ``extra`` (a dead
    letter's, :func:`dead_letter_headers`), the task's own, its occurrence."""
    headers: dict[str, HeaderValue] = {DUE_MS: task.due_ms, FIRED_MS: fired_ms, REV: task.rev}
    headers.update(extra)
    headers.update(task.meta.headers)
    if task.meta.recur is not None:
        headers[OCCURRENCE] = task.meta.recur.occurrence
    return headers


def dead_letter_headers(cause: str, reason: str, attempts: int, routing_key: str) -> Headers:
    """What a dead letter carries besides the event's headers: why (``cause``:
    ``late`` or ``undeliverable``, and the ``reason`` in words), after how
    many failed deliveries, and the routing key it was meant for."""
    return (
        (DEAD_CAUSE, cause),
        (DEAD_REASON, reason),
        (DEAD_ATTEMPTS, attempts),
        (DEAD_ROUTING_KEY, routing_key),
    )


def describe(
    message_id: str,
    routing_key: str,
    headers: Mapping[str, Any],
    body: bytes,
    content_type: str | None = None,
    content_encoding: str | None = None,
) -> dict[str, Any]:
    """One event as a JSON-ready dict: ``id``, ``routing_key``, ``due_ms``,
    ``fired_ms``, ``rev`` (and ``occurrence`` for a series), the content type
    and encoding when set, the other headers, and the payload as text when it
    is UTF-8, else as ``{"base64": ...}``. A header value in bytes (pika gives
    long strings so) is shown as the payload is."""
    event: dict[str, Any] = {"id": message_id, "routing_key": routing_key}
    for header, name in _ENGINE_FIELDS.items():
        event[name] = headers.get(header)
    if OCCURRENCE in headers:
        event["occurrence"] = headers[OCCURRENCE]
    if content_type is not None:
        event["content_type"] = content_type
    if content_encoding is not None:
        event["content_encoding"] = content_encoding
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
    return _payload(value) if isinstance(value, bytes) else value
