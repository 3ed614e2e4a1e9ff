"""Connection and body limits of the HTTP API, enforced before authentication.

aiohttp closes idle keep-alive connections (``keepalive_timeout``) but has no
deadline for a request head that arrives a byte at a time, no cap on open
connections and no deadline for a body. This module adds them:

* :class:`ConnectionGuard` makes the protocol objects (one per connection): at
  ``max_connections`` open ones it refuses a new connection at once (closed,
  counted, one rate-limited WARNING line); every connection gets a deadline for
  its next request head (``header_timeout_s`` after it opened or after its
  previous response), which one sweep task checks every second.
  :meth:`ConnectionGuard.middleware` clears the deadline while a request is
  handled and sets it again when the response is done.
* :func:`read_body` reads a request body of at most ``limit_bytes`` within a
  deadline, holding no more than the limit (plus aiohttp's small read buffer)
  even when the body is chunked and declares no length.
* :class:`GuardedSite` listens through the guard (aiohttp's ``TCPSite`` would
  hand connections straight to the server).

Everything runs on the event-loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

# How often the sweep looks for connections past their head deadline; a slow
# client is cut off at most this much after its deadline.
SWEEP_INTERVAL_S = 1.0
# Repeated WARNINGs (refused connections, slow heads) are summed into one line
# at most this often.
WARNING_INTERVAL_S = 10.0

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BodyTooLarge(Exception):
    """The body is longer than the limit (declared or while reading)."""


class BodyTimeout(Exception):
    """The body did not arrive in full within its deadline."""


class ThrottledWarning:
    """One WARNING line per ``interval_s`` at most: events in between are
    counted and reported with the next line (or by :meth:`flush`)."""

    def __init__(self, logger: logging.Logger, message: str, interval_s: float) -> None:
        self._logger = logger
        self._message = message  # formatted with (count, interval_s, *args)
        self._interval_s = interval_s
        self._last_s = -interval_s  # the first event is logged at once
        self._pending = 0
        self._args: tuple[object, ...] = ()

    def event(self, *args: object) -> None:
        self._pending += 1
        self._args = args
        self.flush()

    def flush(self) -> None:
        now_s = time.monotonic()
        if self._pending and now_s - self._last_s >= self._interval_s:
            self._logger.warning(self._message, self._pending, self._interval_s, *self._args)
            self._pending = 0
            self._last_s = now_s


class _Refused(asyncio.Protocol):
    """A connection over the cap: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection handler, known to the guard from connect to close."""

    __slots__ = ("_guard", "got_bytes", "head_deadline_s")

    def __init__(self, guard: ConnectionGuard, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        # Loop time by which the next request head must have arrived; None while
        # a request is being handled (its body has its own deadline).
        self.head_deadline_s: float | None = None
        self.got_bytes = False  # since the connection opened or its last response

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._guard.opened(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        super().data_received(data)


class ConnectionGuard:
    """Counts the open connections of one server, refuses those over the cap
    and closes those that send no complete request head in time."""

    def __init__(
        self,
        max_connections: int,
        header_timeout_s: float,
        handler_args: dict[str, Any],
    ) -> None:
        self._max_connections = max_connections
        self._header_timeout_s = header_timeout_s
        self._handler_args = handler_args  # keyword arguments of aiohttp's RequestHandler
        # Made (or about to be: the loop calls connection_made soon after the factory).
        self._open: set[GuardedHandler] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self.refused_total = 0
        self.header_timeouts_total = 0
        self.body_timeouts_total = 0  # counted by the API's body reader
        self._refused_log = ThrottledWarning(
            log,
            "refused %d HTTP connections in the last %.0fs: %d open, the most allowed "
            "(http_max_connections)",
            WARNING_INTERVAL_S,
        )
        self._slow_log = ThrottledWarning(
            log,
            "closed %d HTTP connections in the last %.0fs that sent no complete request "
            "head within %ss (http_header_timeout_s)",
            WARNING_INTERVAL_S,
        )

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def counters(self) -> dict[str, int]:
        """Totals since start, for ``/metrics``."""
        return {
            "http_connections_refused": self.refused_total,
            "http_header_timeouts": self.header_timeouts_total,
            "http_body_timeouts": self.body_timeouts_total,
        }

    # -- the protocol factory ------------------------------------------------------

    def factory(self, server: web.Server) -> Callable[[], asyncio.BaseProtocol]:
        """The protocol factory for ``loop.create_server``: a handler of ``server``
        per connection, or a refusal once ``max_connections`` are open."""
        loop = asyncio.get_running_loop()

        def make() -> asyncio.BaseProtocol:
            # Counted here, not in connection_made: the loop may accept a burst
            # of connections before calling any connection_made.
            if len(self._open) >= self._max_connections:
                self.refused_total += 1
                self._refused_log.event(len(self._open))
                return _Refused()
            handler = GuardedHandler(self, server, loop=loop, **self._handler_args)
            handler.head_deadline_s = loop.time() + self._header_timeout_s
            self._open.add(handler)
            return handler

        return make

    def opened(self, handler: GuardedHandler) -> None:
        self._open.add(handler)  # already there unless the sweep gave up on it

    def closed(self, handler: GuardedHandler) -> None:
        self._open.discard(handler)

    # -- request marks (the middleware) and the sweep ----------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        protocol = request.protocol
        guarded = protocol if isinstance(protocol, GuardedHandler) else None
        if guarded is not None:
            guarded.head_deadline_s = None
        try:
            return await handler(request)
        finally:
            if guarded is not None:
                # From the end of this request (the response is about to be written).
                guarded.got_bytes = False
                guarded.head_deadline_s = asyncio.get_running_loop().time() + (
                    self._header_timeout_s
                )

    def sweep(self) -> None:
        """Close every connection past its head deadline."""
        now_s = asyncio.get_running_loop().time()
        expired = [
            h for h in self._open if h.head_deadline_s is not None and h.head_deadline_s <= now_s
        ]
        for handler in expired:
            if handler.got_bytes:  # a head begun, never finished: a slow client
                self.header_timeouts_total += 1
                self._slow_log.event(self._header_timeout_s)
            else:
                log.debug("closing an HTTP connection idle for %ss", self._header_timeout_s)
            handler.head_deadline_s = None
            # Forget it now: a handler whose connection was never made would
            # otherwise hold a slot for ever.
            self._open.discard(handler)
            handler.force_close()
        self._refused_log.flush()
        self._slow_log.flush()

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                self.sweep()
            except Exception:  # never let one bad connection end the sweeping
                log.exception("http connection sweep failed")


def attach_server(site: web.BaseSite, server: asyncio.AbstractServer) -> None:
    """Make ``server`` the one ``site`` listens with, so that aiohttp's
    ``BaseSite.stop`` and ``BaseRunner.cleanup`` close it as their own.

    aiohttp 3.14.5: ``BaseSite._server`` (a slot, set by ``TCPSite.start``;
    aiohttp has no public way to start a site on a server of one's own).
    """
    site._server = server


class GuardedSite(web.BaseSite):
    """A TCP site whose connections go through a :class:`ConnectionGuard`."""

    __slots__ = ("_factory", "_host", "_listening", "_port", "_reuse_port")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        factory: Callable[[], asyncio.BaseProtocol],
        backlog: int = 128,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self._factory = factory
        self._reuse_port = reuse_port
        self._listening: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the requested one until started)."""
        sockets = self._listening.sockets if self._listening is not None else ()
        return int(sockets[0].getsockname()[1]) if sockets else self._port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._listening = await loop.create_server(
            self._factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_port=self._reuse_port or None,
        )
        attach_server(self, self._listening)


async def read_body(request: web.BaseRequest, limit_bytes: int, timeout_s: float) -> bytes:
    """The whole body, or :class:`BodyTooLarge` as soon as more than
    ``limit_bytes`` arrived (or were declared), or :class:`BodyTimeout` when it
    has not arrived within ``timeout_s``."""
    if request.content_length is not None and request.content_length > limit_bytes:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                # Never ask for more than one byte past the limit: what is held
                # stays bounded whatever the client sends.
                chunk = await request.content.read(limit_bytes + 1 - size)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit_bytes:
                    raise BodyTooLarge
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeout from None
    return b"".join(chunks)
