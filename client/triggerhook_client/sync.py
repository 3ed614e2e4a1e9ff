"""The blocking client: :class:`Client` (httpx.Client); every request and
answer is :mod:`triggerhook_client.calls`'s, shared with the async client."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator, Sequence
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
from triggerhook_client.methods import blocking


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
                if self._closed.wait(retry.delay_s):
                    raise retry.error from None

    # One call each: the arguments, docstring and call are triggerhook_client.methods'.
    schedule = blocking(methods.schedule)
    reschedule = blocking(methods.reschedule)
    cancel = blocking(methods.cancel)
    pause = blocking(methods.pause)
    resume = blocking(methods.resume)
    trigger = blocking(methods.trigger)
    backfill = blocking(methods.backfill)
    get = blocking(methods.get)
    list_page = blocking(methods.list_page)
    count = blocking(methods.count)
    timeline = blocking(methods.timeline)
    status = blocking(methods.status)
    health = blocking(methods.health)

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> builtins.list[str]:
        """Store all the tasks or none (one request, at most the daemon's
        ``http_max_batch_tasks``); returns their ids in order. Errors name the
        task: ``tasks[3].routing_key``."""
        if not tasks:
            return []
        return self._run(self._schedule_many_call(tasks))

    def schedule_batch(self, tasks: Sequence[TaskRequest]) -> builtins.list[BatchScheduled]:
        """:meth:`schedule_many`, answering what became of each task, in
        order: its id and outcome (:class:`BatchScheduled`) — ``created``,
        ``exists`` (the same task was stored: nothing written), ``kept`` or
        ``replaced`` (its ``on_conflict``). After a retry, a task the lost
        attempt created or replaced reads as ``exists``."""
        if not tasks:
            return []
        return self._run(self._schedule_batch_call(tasks))

    def list(
        self, *, page_size: int = DEFAULT_PAGE_SIZE, **filters: Unpack[Where]
    ) -> Iterator[TaskSummary]:
        """Every task matching all the filters given, in due order (ties by
        id), fetched ``page_size`` (1-1000) at a time as the iteration goes.

        ``prefix``: of the id; ``due_after`` inclusive, ``due_before``
        exclusive (as ``at``: a datetime or RFC 3339 text, without an offset
        UTC; epoch seconds, deprecated), or ``due_after_ms`` and
        ``due_before_ms`` in epoch ms (at most one of each pair);
        ``state``: ``scheduled`` or ``firing``. Pages follow each other by
        key, not by offset: a task is never seen twice, and tasks created or
        moved behind the walk meanwhile are not seen. Arguments are checked
        here; the daemon's errors are raised by the iteration.
        """
        where = Filter.of(filters, WHERE_KEYS, "list")
        first = self._list_call(where, page_size, None, "page_size")
        return self._walk(first, where, page_size)

    def _walk(self, call: Call[TaskPage], where: Filter, page_size: int) -> Iterator[TaskSummary]:
        while True:
            page = self._run(call)
            yield from page.tasks
            if page.next_cursor is None:
                return
            call = self._list_call(where, page_size, page.next_cursor, "page_size")

    def cancel_where(
        self, *, timeout_s: float = DEFAULT_BULK_TIMEOUT_S, **filters: Unpack[DueRange]
    ) -> BulkCancelled:
        """Cancel every task matching the filters — at least one of
        ``prefix``, ``tag`` and ``routing_key`` (else :class:`InvalidRequest`,
        nothing sent) — each exactly as :meth:`cancel` would; tasks being
        published count as ``too_late``. Blocks until done: a million tasks
        take minutes. The daemon answers each request within its
        ``bulk_cancel_timeout_s`` (5 minutes by default) with what it did
        and, when it stopped before the end, where to go on; this method
        sends the next request from there until the end, adding up the
        counts. ``timeout_s`` (per attempt, 15 minutes) covers one request.

        Retried like every call, after a timeout too: a bulk cancel is
        idempotent (a second run cancels nothing the first did not, and
        never more than the filters name; an attempt still running on the
        daemon cancels each task once with it). After a retry the counts are
        the last attempt's only.
        """
        where = Filter.of(filters, DUE_RANGE_KEYS, "cancel_where")
        done, cursor = self._run(self._cancel_where_call(where, timeout_s))
        while cursor is not None:  # the daemon stopped at its time limit: go on
            more, cursor = self._run(self._cancel_where_call(where, timeout_s, cursor))
            done = BulkCancelled(done.cancelled + more.cancelled, done.too_late + more.too_late)
        return done

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
