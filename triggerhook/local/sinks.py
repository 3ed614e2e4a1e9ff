"""Where the local publisher sends an event: stdout (one JSON line) or a
webhook (one HTTP POST). A sink delivers or raises :class:`Undelivered`.

The webhook's request is the AMQP message in HTTP terms: body = the payload,
headers = the event's headers (``x-due-ms``, ``x-fired-ms``, ``x-rev``,
``x-occurrence``, a dead letter's, the task's own), ``Content-Type`` and
``Content-Encoding`` from the task, and ``x-message-id`` and
``x-routing-key`` for the AMQP properties HTTP has no place for. Header
values are sent as UTF-8. A task header HTTP cannot carry (a name that is
not an HTTP token, one the request sets itself such as ``Content-Length``,
or a value with a line break) is left out of the request, with a warning;
the stdout line shows it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, TextIO

import httpx

from triggerhook.domain.event import describe
from triggerhook.domain.meta import HeaderValue
from triggerhook.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

MESSAGE_ID, ROUTING_KEY = "x-message-id", "x-routing-key"
# Set by the request itself (or meaningless in one): a task header of such a
# name would break or confuse it.
_REQUEST_HEADERS = frozenset(
    {
        "content-type",
        "content-encoding",
        "content-length",
        "transfer-encoding",
        "host",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")  # RFC 9110 field names
_LINE_BREAK = re.compile(rb"[\x00\r\n\f\v]")  # what no header value may hold
_LOG_EVERY_S = 60.0


class Undelivered(Exception):
    """The sink did not take the event. ``refused``: it answered no (a
    non-2xx status); else it could not be reached (refused, timed out)."""

    def __init__(self, reason: str, refused: bool = False) -> None:
        super().__init__(reason)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Event:
    """One event as the sinks send it (the AMQP message's parts)."""

    message_id: str
    routing_key: str
    headers: dict[str, HeaderValue]
    body: bytes
    content_type: str | None = None
    content_encoding: str | None = None


class EventSink(Protocol):
    def deliver(self, event: Event) -> None:
        """Deliver ``event`` or raise :class:`Undelivered`."""
        ...

    def close(self) -> None: ...


class StdoutSink:
    """One JSON object per event and line (:func:`triggerhook.domain.event.describe`,
    as ``triggerhook tail`` prints them), flushed at once."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def deliver(self, event: Event) -> None:
        view = describe(
            event.message_id,
            event.routing_key,
            event.headers,
            event.body,
            event.content_type,
            event.content_encoding,
        )
        try:
            self._stream.write(json.dumps(view) + "\n")
            self._stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: the stream is closed
            raise Undelivered(f"stdout: {exc}") from exc

    def close(self) -> None:
        pass


class WebhookSink:
    """An HTTP POST per event to ``url``; a 2xx answer is a delivery. The
    environment's proxy settings are not used: the webhook of a local run is
    usually on this machine."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self._url = url
        self._client = httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False)
        self._left_out = RateLimitedLog(log, _LOG_EVERY_S)

    def deliver(self, event: Event) -> None:
        try:
            response = self._client.post(
                self._url, content=event.body, headers=list(self._headers(event))
            )
        except httpx.HTTPError as exc:
            raise Undelivered(f"webhook: {exc!r}") from exc
        if not response.is_success:
            raise Undelivered(f"webhook answered {response.status_code}", refused=True)

    def _headers(self, event: Event) -> Iterator[tuple[bytes, bytes]]:
        yield MESSAGE_ID.encode(), event.message_id.encode()
        yield ROUTING_KEY.encode(), event.routing_key.encode()
        if event.content_type is not None:
            yield b"content-type", event.content_type.encode()
        if event.content_encoding is not None:
            yield b"content-encoding", event.content_encoding.encode()
        for name, value in event.headers.items():
            text = header_text(value)
            if _sendable(name, text):
                yield name.encode(), text
                continue
            self._left_out.warning(
                name,
                "header %r left out of the webhook's request: HTTP cannot carry it as it is",
                name,
                extra={"task_id": event.message_id},
            )

    def close(self) -> None:
        self._client.close()


def _sendable(name: str, value: bytes) -> bool:
    return bool(
        _TOKEN.fullmatch(name)
        and name.lower() not in _REQUEST_HEADERS
        and not _LINE_BREAK.search(value)
    )


def header_text(value: HeaderValue) -> bytes:
    """A header's value in an HTTP request: an integer in decimal, a boolean
    as ``true``/``false``, a string as UTF-8 without surrounding blanks
    (HTTP ignores them)."""
    if isinstance(value, bool):  # before int: a bool is an int
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    return value.encode("utf-8").strip(b" \t")
