"""The asyncio client: :class:`AsyncClient` (httpx.AsyncClient); every
request and answer is :mod:`triggerhook_client.calls`'s, shared with the
blocking client."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Sequence
from typing import Self, Unpack

import httpx

from triggerhook_client import methods
from triggerhook_client.bodies import DUE_RANGE_KEYS, WHERE_KEYS, DueRange, Filter, Where
from triggerhook_client.calls import (
    DEFAULT_BACKOFF_S,
    DEFAULT_BULK_TIMEOUT_S,
    DEFAULT_PAGE_SIZE,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    BaseClient,
    BatchScheduled,
    BulkCancelled,
    Call,
    Retry,
    T,
    TaskPage,
    TaskRequest,
    TaskSummary,
)
from triggerhook_client.errors import ApiError
from triggerhook_client.methods import awaited

# Connections per daemon: enough for the concurrency of one service. Every one
# is kept alive (httpx keeps 20 by default: with more requests in flight it
# would open and close a connection for each request above that).
_POOL_SIZE = 100
_LIMITS = httpx.Limits(max_connections=_POOL_SIZE, max_keepalive_connections=_POOL_SIZE)


class AsyncClient(BaseClient):
    """The asyncio twin of :class:`Client`: the same arguments and methods, as
    coroutines (:meth:`list` is an async iterator: ``async for task in
    client.list(...)``). ``transport`` replaces httpx's: for fault injection in
    tests, or for throughput (httpx's asyncio transport costs more per request
    than aiohttp: docs/api.md, "Python client"). Close it with :meth:`aclose`
    (or use ``async with``)."""

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
            transport=transport,
            limits=_LIMITS,
        )

    async def _run(self, call: Call[T]) -> T:
        attempts = self._attempts()
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = await self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    content=call.body,
                    headers=call.headers,
                    timeout=self._timeout_s(call),
                )
            except httpx.TransportError as exc:
                answer = exc
            try:
                return attempts.result(call, answer)
            except Retry as retry:
                if self._http.is_closed:
                    raise retry.error from None
                await asyncio.sleep(retry.delay_s)

    # One call each: the arguments, docstring and call are triggerhook_client.methods'.
    schedule = awaited(methods.schedule)
    reschedule = awaited(methods.reschedule)
    cancel = awaited(methods.cancel)
    pause = awaited(methods.pause)
    resume = awaited(methods.resume)
    trigger = awaited(methods.trigger)
    backfill = awaited(methods.backfill)
    get = awaited(methods.get)
    list_page = awaited(methods.list_page)
    count = awaited(methods.count)
    timeline = awaited(methods.timeline)
    status = awaited(methods.status)
    health = awaited(methods.health)

    async def schedule_many(self, tasks: Sequence[TaskRequest]) -> builtins.list[str]:
        """See :meth:`Client.schedule_many`."""
        if not tasks:
            return []
        return await self._run(self._schedule_many_call(tasks))

    async def schedule_batch(self, tasks: Sequence[TaskRequest]) -> builtins.list[BatchScheduled]:
        """See :meth:`Client.schedule_batch`."""
        if not tasks:
            return []
        return await self._run(self._schedule_batch_call(tasks))

    def list(
        self, *, page_size: int = DEFAULT_PAGE_SIZE, **filters: Unpack[Where]
    ) -> AsyncIterator[TaskSummary]:
        """See :meth:`Client.list`: ``async for task in client.list(...)``
        (not awaited; the arguments are checked at the call)."""
        where = Filter.of(filters, WHERE_KEYS, "list")
        first = self._list_call(where, page_size, None, "page_size")
        return self._walk(first, where, page_size)

    async def _walk(
        self, call: Call[TaskPage], where: Filter, page_size: int
    ) -> AsyncIterator[TaskSummary]:
        while True:
            page = await self._run(call)
            for task in page.tasks:
                yield task
            if page.next_cursor is None:
                return
            call = self._list_call(where, page_size, page.next_cursor, "page_size")

    async def cancel_where(
        self, *, timeout_s: float = DEFAULT_BULK_TIMEOUT_S, **filters: Unpack[DueRange]
    ) -> BulkCancelled:
        """See :meth:`Client.cancel_where` (idempotent, so retried safely)."""
        where = Filter.of(filters, DUE_RANGE_KEYS, "cancel_where")
        done, cursor = await self._run(self._cancel_where_call(where, timeout_s))
        while cursor is not None:  # the daemon stopped at its time limit: go on
            more, cursor = await self._run(self._cancel_where_call(where, timeout_s, cursor))
            done = BulkCancelled(done.cancelled + more.cancelled, done.too_late + more.too_late)
        return done

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
