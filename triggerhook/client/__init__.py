"""Python clients of the daemon's HTTP API: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio), with the same methods.

::

    with Client("http://127.0.0.1:8080", token="s3cret") as hook:
        hook.schedule("invoice-42", delay_s=30, routing_key="billing.charge", payload=b"{}")
        hook.reschedule("invoice-42", at="2026-12-01T09:00:00Z")
        hook.get("invoice-42")  # TaskStatus(...) or None
        hook.cancel("invoice-42")  # raises NotFound / TooLate

Both keep connections alive between calls (one httpx connection pool per
client object; share the object, it is safe across threads / tasks).

Retries. Every write is made safe to send twice before the first attempt:
``delay_s`` becomes an absolute ``at`` (epoch seconds, rounded *up* to the
millisecond) and a missing task id becomes a new UUIDv4, both on the client,
so a retry carries byte-identical content and the daemon answers it as a safe
repeat (``created=False``) rather than a conflict. A call is retried only
after a transient failure: no connection, a timeout, a dropped connection, or
a 502/503/504 answer — up to ``retries`` times (default 3), waiting a capped
(2 s), jittered exponential back-off starting at ``backoff_s`` (default 0.1 s),
or the answer's ``Retry-After`` (capped at 5 s) when that is longer. Any other
answer, and every 4xx, is final. After a retry, the answer may reflect an
earlier attempt that did reach the daemon: ``schedule`` then says
``created=False``, and ``cancel`` may raise :class:`NotFound` for a task that
the lost attempt cancelled.

Errors mirror the API's answers (``{"error": {"code", "message", "field"?}}``):
see :class:`ApiError` and its subclasses. Input the client can check itself
(both or neither of ``at``/``delay_s``, a malformed task id in a path) raises
:class:`InvalidRequest` with ``status=None`` without asking the daemon.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Self

import httpx

from triggerhook.client.calls import (
    DEFAULT_BACKOFF_S,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    At,
    BaseClient,
    Call,
    Health,
    Retry,
    Scheduled,
    T,
    TaskRequest,
    TaskStatus,
)
from triggerhook.client.errors import (
    ApiError,
    Conflict,
    InvalidRequest,
    NotFound,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook.client.transport import AiohttpTransport

__all__ = [
    "ApiError",
    "AsyncClient",
    "At",
    "Client",
    "Conflict",
    "Health",
    "InvalidRequest",
    "NotFound",
    "Scheduled",
    "TaskRequest",
    "TaskStatus",
    "TooLate",
    "Unauthorized",
    "Unavailable",
]


class Client(BaseClient):
    """A blocking client of the daemon's HTTP API; thread-safe.

    ``base_url`` like ``http://127.0.0.1:8080``; ``token``: the daemon's
    ``api_token`` (sent as ``Authorization: Bearer``); ``timeout_s``: per
    attempt; ``retries``/``backoff_s``: see the module docstring. ``transport``
    replaces httpx's (for fault injection in tests). Close it (or use ``with``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout_s, retries, backoff_s)
        self._closed = threading.Event()  # ends a back-off wait at close()
        self._http = httpx.Client(
            base_url=base_url, headers=self._headers, timeout=timeout_s, transport=transport
        )

    def _run(self, call: Call[T]) -> T:
        attempts = self._attempts()
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = self._http.request(
                    call.method, call.path, content=call.body, headers=call.headers
                )
            except httpx.TransportError as exc:
                answer = exc
            try:
                return attempts.result(call, answer)
            except Retry as retry:
                if self._closed.wait(retry.delay_s):
                    raise retry.error from None

    def schedule(
        self,
        id: str | None = None,
        *,
        at: At | None = None,
        delay_s: float | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
    ) -> Scheduled:
        """Store one task, due ``at`` or after ``delay_s`` seconds (exactly one).

        ``payload``: bytes, or text (sent as UTF-8). Scheduling an existing id
        with the same content returns ``created=False``; with other content
        raises :class:`Conflict`. Also :class:`InvalidRequest` (``field`` names
        the argument), :class:`Unauthorized`, :class:`Unavailable`.
        """
        return self._run(self._schedule_call(TaskRequest(id, at, delay_s, routing_key, payload)))

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> list[str]:
        """Store all the tasks or none (one request, at most the daemon's
        ``http_max_batch_tasks``); returns their ids in order. Errors name the
        task: ``tasks[3].routing_key``."""
        if not tasks:
            return []
        return self._run(self._schedule_many_call(tasks))

    def reschedule(
        self, id: str, *, at: At | None = None, delay_s: float | None = None
    ) -> Scheduled:
        """Move a task not yet firing to a new due time (exactly one of ``at``,
        ``delay_s``): it then fires at that time only. Raises :class:`NotFound`,
        :class:`TooLate` (being published at its old time)."""
        return self._run(self._reschedule_call(id, at, delay_s))

    def cancel(self, id: str) -> None:
        """Cancel a task: when this returns, it will never fire. Raises
        :class:`NotFound` (unknown or fired) or :class:`TooLate` (being published)."""
        self._run(self._cancel_call(id))

    def get(self, id: str) -> TaskStatus | None:
        """The stored task, or None when it is unknown or fired."""
        return self._run(self._get_call(id))

    def status(self) -> dict[str, Any]:
        """The daemon's live figures (``GET /v1/status``; fields: docs/metrics.md)."""
        return self._run(self._status_call())

    def health(self) -> Health:
        """The daemon's readiness (``GET /readyz``, no retries); raises
        :class:`Unavailable` when it does not answer."""
        return self._run(self._health_call())

    def ready(self) -> bool:
        """True when the daemon answers and is ready; False otherwise."""
        try:
            return self.health().ready
        except ApiError:
            return False

    def close(self) -> None:
        self._closed.set()
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(BaseClient):
    """The asyncio twin of :class:`Client`: the same arguments and methods, as
    coroutines. Requests go through aiohttp (see
    :mod:`triggerhook.client.transport`) unless ``transport`` gives another
    httpx async transport. Close it with :meth:`aclose` (or use ``async with``)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout_s, retries, backoff_s)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=self._headers,
            timeout=timeout_s,
            transport=transport or AiohttpTransport(),
        )

    async def _run(self, call: Call[T]) -> T:
        attempts = self._attempts()
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = await self._http.request(
                    call.method, call.path, content=call.body, headers=call.headers
                )
            except httpx.TransportError as exc:
                answer = exc
            try:
                return attempts.result(call, answer)
            except Retry as retry:
                if self._http.is_closed:
                    raise retry.error from None
                await asyncio.sleep(retry.delay_s)

    async def schedule(
        self,
        id: str | None = None,
        *,
        at: At | None = None,
        delay_s: float | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
    ) -> Scheduled:
        """See :meth:`Client.schedule`."""
        return await self._run(
            self._schedule_call(TaskRequest(id, at, delay_s, routing_key, payload))
        )

    async def schedule_many(self, tasks: Sequence[TaskRequest]) -> list[str]:
        """See :meth:`Client.schedule_many`."""
        if not tasks:
            return []
        return await self._run(self._schedule_many_call(tasks))

    async def reschedule(
        self, id: str, *, at: At | None = None, delay_s: float | None = None
    ) -> Scheduled:
        """See :meth:`Client.reschedule`."""
        return await self._run(self._reschedule_call(id, at, delay_s))

    async def cancel(self, id: str) -> None:
        """See :meth:`Client.cancel`."""
        await self._run(self._cancel_call(id))

    async def get(self, id: str) -> TaskStatus | None:
        """See :meth:`Client.get`."""
        return await self._run(self._get_call(id))

    async def status(self) -> dict[str, Any]:
        """See :meth:`Client.status`."""
        return await self._run(self._status_call())

    async def health(self) -> Health:
        """See :meth:`Client.health`."""
        return await self._run(self._health_call())

    async def ready(self) -> bool:
        """See :meth:`Client.ready`."""
        try:
            return (await self.health()).ready
        except ApiError:
            return False

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
