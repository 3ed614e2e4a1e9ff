"""Where the local publisher sends an event: stdout (one JSON line) or a
webhook (one HTTP POST). A sink delivers or raises :class:`Undelivered`;
each runs on a thread of its own (:mod:`triggerhook.local.lanes`), so a slow
one never holds up another.

The webhook's request is the AMQP message in HTTP terms: body = the payload,
headers = the event's headers (``x-due-ms``, ``x-fired-ms``, ``x-rev``,
``x-occurrence``, a dead letter's, the task's own), ``Content-Type`` and
``Content-Encoding`` from the task, and ``x-message-id`` and
``x-routing-key`` for the AMQP properties HTTP has no place for. Header
values are sent as UTF-8. A task header the request must not carry is left
out, with a warning (the stdout line shows it): a credential
(``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``Set-Cookie``: a
task's data is no credential of this process to hand on), a hop-by-hop
header, one the request sets itself (``Content-Length``, ``Host``, ...), a
name that is not an HTTP token, a value with a line break.

A webhook call has one deadline for all of it (the name's resolution,
connect, send, the answer's head and the little of its body that is read); a
peer that trickles bytes is cut there. Of an answer's body at most
:data:`ANSWER_PREFIX_BYTES` are read, for the log. The webhook's URL is
never logged whole: :func:`url_origin`.

Given secrets, a request is signed (``x-triggerhook-timestamp``,
``x-triggerhook-signature``: :func:`triggerhook.domain.webhooks.signature`).
Without ``allow_private``, the URL's host is resolved at each call and the
call refused (never made, and not retried) when any of its addresses is one
:func:`~triggerhook.domain.webhooks.address_refusal` names; an http call then
connects to the address checked, so a name that resolves anew in between
(DNS rebinding) cannot slip past; an https one connects to it too, with SNI
and the certificate's check on the name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import math
import re
import socket
import time
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from typing import Protocol, TextIO, cast
from urllib.parse import urlsplit

import httpx

from triggerhook.domain.event import describe
from triggerhook.domain.meta import HeaderValue
from triggerhook.domain.webhooks import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Verdict,
    address_refusal,
    retry_after_s,
    signature,
    verdict,
)
from triggerhook.logs import url_origin
from triggerhook.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

MESSAGE_ID, ROUTING_KEY = "x-message-id", "x-routing-key"
# Set by the request itself (or meaningless in one): a task header of such a
# name would break or confuse it. Hop-by-hop headers (RFC 9110 7.6.1) too.
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
        "proxy-authenticate",
        "te",
        "trailer",
        "trailers",
        "upgrade",
        "expect",
    }
)
# Credentials: never forwarded, whatever a task says.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")  # RFC 9110 field names
_LINE_BREAK = re.compile(rb"[\x00\r\n\f\v]")  # what no header value may hold
_LOG_EVERY_S = 60.0
ANSWER_PREFIX_BYTES = 256  # of an answer's body: what the log shows, and all that is read


class Undelivered(Exception):
    """The sink did not take the event. ``refused``: it answered no (a
    non-2xx status); else it could not be reached (refused, timed out).
    ``retry``: trying again may help (False: a 4xx but 408/429, or an
    address not allowed: ``host_refused``); ``retry_after_s``: the answer's
    Retry-After."""

    def __init__(
        self,
        reason: str,
        refused: bool = False,
        retry: bool = True,
        retry_after_s: float | None = None,
        host_refused: bool = False,
    ) -> None:
        super().__init__(reason)
        self.refused = refused
        self.retry = retry
        self.retry_after_s = retry_after_s
        self.host_refused = host_refused  # not called: an address not allowed


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
    """Used by one thread (its lane's), but for :meth:`cut`."""

    name: str

    def deliver(self, event: Event, deadline_s: float) -> None:
        """Deliver ``event`` or raise :class:`Undelivered`; give up by
        ``deadline_s`` (``time.monotonic``; ``math.inf``: the sink's own bound)."""
        ...

    def cut(self, deadline_s: float) -> None:
        """Any thread: end a delivery in flight by ``deadline_s`` (a stop's)."""
        ...

    def close(self) -> None: ...


class StdoutSink:
    """One JSON object per event and line (:func:`triggerhook.domain.event.describe`,
    as ``triggerhook tail`` prints them), flushed at once. A write is not cut:
    a reader that stops reading a pipe holds this sink (and only it) up."""

    name = "stdout"

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def deliver(self, event: Event, deadline_s: float = math.inf) -> None:
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

    def cut(self, deadline_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class WebhookSink:
    """An HTTP POST per event to ``url``; a 2xx answer is a delivery, whole
    within ``timeout_s``. The environment's proxy settings are not used (a
    proxy would make the address check meaningless). ``secrets``: the
    request is signed with each (none: not signed); ``allow_private``: any
    address may be called (see the module's doc); ``retry_after_max_s``:
    the most of an answer's Retry-After that is passed on.

    Thread: built by the wiring, then used by its lane's thread only, where
    its event loop and HTTP client live (made at the first delivery); only
    :meth:`cut` comes from another thread (the engine's, stopping).
    """

    name = "webhook"

    def __init__(
        self,
        url: str,
        timeout_s: float,
        *,
        allow_private: bool,
        secrets: tuple[bytes, ...] = (),
        retry_after_max_s: float = 60.0,
    ) -> None:
        self._url = url
        self._parsed = httpx.URL(url)
        self.shown = url_origin(url)
        self._timeout_s = timeout_s
        self._allow_private = allow_private
        self._secrets = secrets
        self._retry_after_max_s = retry_after_max_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._call: asyncio.Timeout | None = None  # the call in flight's (loop thread)
        self._left_out = RateLimitedLog(log, _LOG_EVERY_S)
        # httpx logs each request's URL (at INFO, shown with log_level DEBUG).
        self._hide = _HideUrl(url, self.shown)
        logging.getLogger("httpx").addFilter(self._hide)

    def deliver(self, event: Event, deadline_s: float = math.inf) -> None:
        deadline_s = min(deadline_s, time.monotonic() + self._timeout_s)
        headers = list(self._headers(event))
        if self._secrets:
            now_s = int(time.time())
            headers.append((TIMESTAMP_HEADER.encode(), str(now_s).encode()))
            signed = signature(self._secrets, now_s, event.body)
            headers.append((SIGNATURE_HEADER.encode(), signed.encode()))
        loop = self._loop_now()
        loop.run_until_complete(self._post(loop, event.body, headers, deadline_s))

    def cut(self, deadline_s: float) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile: nothing in flight
            loop.call_soon_threadsafe(self._cut_sooner, loop, deadline_s)

    def _cut_sooner(self, loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        call = self._call
        when = _loop_time(loop, deadline_s)
        if call is not None and (call.when() or math.inf) > when:
            call.reschedule(when)

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._client = httpx.AsyncClient(
                timeout=self._timeout_s, follow_redirects=False, trust_env=False
            )
        return self._loop

    async def _post(
        self,
        loop: asyncio.AbstractEventLoop,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        deadline_s: float,
    ) -> None:
        assert self._client is not None  # made with the loop
        try:
            async with asyncio.timeout_at(_loop_time(loop, deadline_s)) as self._call:
                url, extensions = await self._destination(loop, headers)
                request = self._client.stream(
                    "POST", url, content=body, headers=headers, extensions=extensions
                )
                async with request as answer:
                    start = await _prefix(answer)
        except TimeoutError:
            raise Undelivered(f"webhook: no whole answer within {self._timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise Undelivered(f"webhook: {self._hide.text(repr(exc))}") from None
        finally:
            self._call = None
        if not answer.is_success:
            self._refused(answer, start)

    def _refused(self, answer: httpx.Response, start: bytes) -> None:
        said = start.decode("utf-8", "replace")
        wait_s = retry_after_s(
            answer.headers.get("retry-after"), time.time(), self._retry_after_max_s
        )
        raise Undelivered(
            f"webhook answered {answer.status_code}: {said!r}",
            refused=True,
            retry=verdict(answer.status_code) is Verdict.RETRY,
            retry_after_s=wait_s,
        )

    async def _destination(
        self, loop: asyncio.AbstractEventLoop, headers: list[tuple[bytes, bytes]]
    ) -> tuple[httpx.URL, dict[str, object]]:
        """Where the request goes: the URL, or (without ``allow_private``)
        the URL with the checked address for its host, the name in ``Host``
        (added to ``headers``) and in the TLS handshake."""
        url = self._parsed
        if self._allow_private:
            return url, {}
        host = url.host
        try:
            found = await loop.getaddrinfo(host, url.port or 0, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Undelivered(f"webhook: cannot resolve the host: {exc}") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found]
        for address in addresses:
            why = address_refusal(address)
            if why is not None:
                raise Undelivered(
                    f"webhook: address not allowed: {url.host} resolves to {why}"
                    " (allow_private = true allows it)",
                    retry=False,
                    host_refused=True,
                )
        if not addresses:
            raise Undelivered("webhook: the host resolves to no address")
        netloc = url.netloc.decode("ascii").rpartition("@")[2]
        headers.append((b"host", netloc.encode("ascii")))
        return url.copy_with(host=str(addresses[0])), {"sni_hostname": host}

    def _headers(self, event: Event) -> Iterator[tuple[bytes, bytes]]:
        yield MESSAGE_ID.encode(), event.message_id.encode()
        yield ROUTING_KEY.encode(), event.routing_key.encode()
        if event.content_type is not None:
            yield b"content-type", event.content_type.encode()
        if event.content_encoding is not None:
            yield b"content-encoding", event.content_encoding.encode()
        for name, value in event.headers.items():
            text = header_text(value)
            why = left_out(name, text)
            if why is None:
                yield name.encode(), text
                continue
            self._left_out.warning(
                name,
                "header %r left out of the webhook's request: %s",
                name,
                why,
                extra={"task_id": event.message_id},
            )

    def close(self) -> None:
        logging.getLogger("httpx").removeFilter(self._hide)
        if self._loop is None:
            return
        assert self._client is not None
        with contextlib.suppress(Exception):  # closing: nothing is left to deliver
            self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


async def _prefix(answer: httpx.Response) -> bytes:
    """The first :data:`ANSWER_PREFIX_BYTES` of ``answer``'s body, as sent
    (not decompressed); the rest is never read (the connection is then closed)."""
    start = b""
    # An async generator (closed here, not when the loop collects it).
    raw = cast(AsyncGenerator[bytes, None], answer.aiter_raw())
    async with contextlib.aclosing(raw) as chunks:
        async for chunk in chunks:
            start += chunk
            if len(start) >= ANSWER_PREFIX_BYTES:
                break
    return start[:ANSWER_PREFIX_BYTES]


def _loop_time(loop: asyncio.AbstractEventLoop, deadline_s: float) -> float:
    """``deadline_s`` (``time.monotonic``) on ``loop``'s clock."""
    return loop.time() + (deadline_s - time.monotonic())


class _HideUrl(logging.Filter):
    """Shows ``url`` as ``shown`` in every record of the logger it filters,
    and so the same URL with any other host (the address a request was sent
    to): its path and query may hold a secret.

    Thread: any (httpx logs on every sink's thread); immutable once made."""

    def __init__(self, url: str, shown: str) -> None:
        super().__init__()
        self._shown = shown
        parts = urlsplit(url)
        tail = url[len(f"{parts.scheme}://{parts.netloc}") :]
        # Scheme, any authority, the same path and query, then the URL's end.
        self._url = re.compile(
            re.escape(parts.scheme) + r"://[^\s/?#]*" + re.escape(tail) + r"(?=$|[\s\"'>)])"
        )

    def text(self, text: str) -> str:
        return self._url.sub(lambda _match: self._shown, text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = self.text(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        return True


def left_out(name: str, value: bytes) -> str | None:
    """Why a task header ``name: value`` is left out of the webhook's
    request (None: it is sent)."""
    lower = name.lower()
    if lower in CREDENTIAL_HEADERS:
        return "credentials are never forwarded"
    if not _TOKEN.fullmatch(name) or lower in _REQUEST_HEADERS or _LINE_BREAK.search(value):
        return "HTTP cannot carry it as it is"
    return None


def header_text(value: HeaderValue) -> bytes:
    """A header's value in an HTTP request: an integer in decimal, a boolean
    as ``true``/``false``, a string as UTF-8 without surrounding blanks
    (HTTP ignores them)."""
    if isinstance(value, bool):  # before int: a bool is an int
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    return value.encode("utf-8").strip(b" \t")
