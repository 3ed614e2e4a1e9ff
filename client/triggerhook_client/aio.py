"""The asyncio client: :class:`AsyncClient` (httpx.AsyncClient); every
request and answer is :mod:`triggerhook_client.calls`'s, shared with the
blocking client."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Self

import httpx

from triggerhook_client.calls import (
    DEFAULT_BACKOFF_S,
    DEFAULT_BULK_TIMEOUT_S,
    DEFAULT_PAGE_SIZE,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    At,
    BaseClient,
    BulkCancelled,
    Call,
    Filter,
    HeaderValue,
    Health,
    Late,
    Retry,
    Scheduled,
    Span,
    State,
    T,
    TaskPage,
    TaskRequest,
    TaskStatus,
    TaskSummary,
    Timeline,
)
from triggerhook_client.errors import ApiError

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

    async def schedule(
        self,
        id: str | None = None,
        *,
        at: At | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
        tags: Iterable[str] | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        late: Late | None = None,
        every: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        until: At | None = None,
        until_ms: int | None = None,
        delay_s: float | None = None,
    ) -> Scheduled:
        """See :meth:`Client.schedule`."""
        request = TaskRequest(
            id,
            at,
            delay_s,
            routing_key,
            payload,
            at_ms=at_ms,
            delay_ms=delay_ms,
            tags=tags,
            content_type=content_type,
            content_encoding=content_encoding,
            headers=headers,
            late=late,
            every=every,
            cron=cron,
            timezone=timezone,
            until=until,
            until_ms=until_ms,
        )
        return await self._run(self._schedule_call(request))

    async def schedule_many(self, tasks: Sequence[TaskRequest]) -> builtins.list[str]:
        """See :meth:`Client.schedule_many`."""
        if not tasks:
            return []
        return await self._run(self._schedule_many_call(tasks))

    async def reschedule(
        self,
        id: str,
        *,
        at: At | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        delay_s: float | None = None,
    ) -> Scheduled:
        """See :meth:`Client.reschedule`."""
        return await self._run(self._reschedule_call(id, at, at_ms, delay_ms, delay_s))

    async def cancel(self, id: str) -> None:
        """See :meth:`Client.cancel`."""
        await self._run(self._cancel_call(id))

    async def get(self, id: str) -> TaskStatus | None:
        """See :meth:`Client.get`."""
        return await self._run(self._get_call(id))

    def list(
        self,
        *,
        prefix: str | None = None,
        routing_key: str | None = None,
        tag: str | None = None,
        due_after: At | None = None,
        due_after_ms: int | None = None,
        due_before: At | None = None,
        due_before_ms: int | None = None,
        state: State | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[TaskSummary]:
        """See :meth:`Client.list`: ``async for task in client.list(...)``
        (not awaited; the arguments are checked at the call)."""
        where = Filter(
            prefix,
            routing_key,
            tag,
            due_after,
            due_before,
            state,
            due_after_ms=due_after_ms,
            due_before_ms=due_before_ms,
        )
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

    async def list_page(
        self,
        *,
        prefix: str | None = None,
        routing_key: str | None = None,
        tag: str | None = None,
        due_after: At | None = None,
        due_after_ms: int | None = None,
        due_before: At | None = None,
        due_before_ms: int | None = None,
        state: State | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TaskPage:
        """See :meth:`Client.list_page`."""
        where = Filter(
            prefix,
            routing_key,
            tag,
            due_after,
            due_before,
            state,
            due_after_ms=due_after_ms,
            due_before_ms=due_before_ms,
        )
        return await self._run(self._list_call(where, limit, cursor))

    async def count(
        self,
        *,
        prefix: str | None = None,
        routing_key: str | None = None,
        tag: str | None = None,
        due_after: At | None = None,
        due_after_ms: int | None = None,
        due_before: At | None = None,
        due_before_ms: int | None = None,
        state: State | None = None,
        up_to: int | None = None,
    ) -> int:
        """See :meth:`Client.count`."""
        where = Filter(
            prefix,
            routing_key,
            tag,
            due_after,
            due_before,
            state,
            due_after_ms=due_after_ms,
            due_before_ms=due_before_ms,
        )
        return await self._run(self._count_call(where, up_to))

    async def timeline(
        self,
        *,
        prefix: str | None = None,
        routing_key: str | None = None,
        tag: str | None = None,
        bucket_ms: int | None = None,
        buckets: int | None = None,
        start: At | None = None,
        start_ms: int | None = None,
        bucket_s: int | None = None,
    ) -> Timeline:
        """See :meth:`Client.timeline`."""
        where = Filter(prefix, routing_key, tag)
        return await self._run(
            self._timeline_call(where, Span(bucket_ms, buckets, start, start_ms, bucket_s))
        )

    async def cancel_where(
        self,
        *,
        prefix: str | None = None,
        tag: str | None = None,
        routing_key: str | None = None,
        due_after: At | None = None,
        due_after_ms: int | None = None,
        due_before: At | None = None,
        due_before_ms: int | None = None,
        timeout_s: float = DEFAULT_BULK_TIMEOUT_S,
    ) -> BulkCancelled:
        """See :meth:`Client.cancel_where` (idempotent, so retried safely)."""
        where = Filter(
            prefix,
            routing_key,
            tag,
            due_after,
            due_before,
            due_after_ms=due_after_ms,
            due_before_ms=due_before_ms,
        )
        done, cursor = await self._run(self._cancel_where_call(where, timeout_s))
        while cursor is not None:  # the daemon stopped at its time limit: go on
            more, cursor = await self._run(self._cancel_where_call(where, timeout_s, cursor))
            done = BulkCancelled(done.cancelled + more.cancelled, done.too_late + more.too_late)
        return done

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
