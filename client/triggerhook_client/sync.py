"""The blocking client: :class:`Client` (httpx.Client); every request and
answer is :mod:`triggerhook_client.calls`'s, shared with the async client."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
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

    def schedule(
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
        """Store one task, due ``at``, ``at_ms`` or after ``delay_ms``
        (exactly one), or a series of them.

        ``at``: a datetime or RFC 3339 text (``"2026-12-01T09:00:00Z"``); either
        without an offset is UTC, not local time. ``at_ms``: epoch
        milliseconds; ``delay_ms``: milliseconds from now, made absolute
        before the first attempt (see the module docstring). Deprecated, still
        taken with a :class:`DeprecationWarning`: ``delay_s`` (seconds) and a
        number as ``at`` or ``until`` (epoch seconds).

        ``payload``: bytes, or text (sent as UTF-8). ``tags`` (at most 8) find
        it again (:meth:`list`, :meth:`count`, :meth:`cancel_where`);
        ``content_type``, ``content_encoding`` and ``headers`` (names not
        starting with ``x-``) go out with its event; ``late``: what to do if
        it is found late when published — ``"fire"`` anyway,
        ``{"skip_after_ms": N}`` (dead-letter it if more than N ms late) or
        ``{"deadline_ms": N}`` / ``{"deadline": time}`` (dead-letter it after
        that time, given as ``at_ms`` / ``at``); None: the daemon's ``late_policy``.

        A series fires again and again with this id: ``every`` an ISO 8601
        duration (``PT15M``, ``P1D``: elapsed time, at least ``PT1S``) or
        ``cron`` 5 fields (``"0 9 * * 1-5"``) in ``timezone`` (IANA, default
        UTC), until ``until`` (inclusive, a time like ``at``) or ``until_ms``.
        The due time gives its first occurrence (for cron: the first matching
        minute at or after it); without one it is one ``every`` from now,
        or the next matching minute — fixed by the client before the first
        attempt, see the module docstring.

        Scheduling an existing id with the same content (metadata and
        schedule included) returns ``created=False``; with other content
        raises :class:`Conflict`. Also :class:`InvalidRequest` (``field``
        names the argument: ``tags[1]``, ``headers.x-foo``, ``cron``),
        :class:`Unauthorized`, :class:`Unavailable`.
        """
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
        return self._run(self._schedule_call(request))

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> builtins.list[str]:
        """Store all the tasks or none (one request, at most the daemon's
        ``http_max_batch_tasks``); returns their ids in order. Errors name the
        task: ``tasks[3].routing_key``."""
        if not tasks:
            return []
        return self._run(self._schedule_many_call(tasks))

    def reschedule(
        self,
        id: str,
        *,
        at: At | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        delay_s: float | None = None,
    ) -> Scheduled:
        """Move a task not yet firing to a new due time (exactly one of ``at``,
        ``at_ms`` and ``delay_ms``, as :meth:`schedule` takes them; ``delay_s``
        is deprecated): it then fires at that time only. Raises
        :class:`NotFound`, :class:`TooLate` (being published at its old time)."""
        return self._run(self._reschedule_call(id, at, at_ms, delay_ms, delay_s))

    def cancel(self, id: str) -> None:
        """Cancel a task: when this returns, it will never fire. Raises
        :class:`NotFound` (unknown or fired) or :class:`TooLate` (being published)."""
        self._run(self._cancel_call(id))

    def get(self, id: str) -> TaskStatus | None:
        """The stored task with its payload and metadata, or None when it is
        unknown or fired."""
        return self._run(self._get_call(id))

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

    def _walk(self, call: Call[TaskPage], where: Filter, page_size: int) -> Iterator[TaskSummary]:
        while True:
            page = self._run(call)
            yield from page.tasks
            if page.next_cursor is None:
                return
            call = self._list_call(where, page_size, page.next_cursor, "page_size")

    def list_page(
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
        """One page of :meth:`list`: at most ``limit`` (1-1000, default 100)
        tasks from the start, or after ``cursor`` (a page's ``next_cursor``,
        with the same filters). A page shorter than ``limit`` is the last; a
        full one always has a cursor (its next page may be empty)."""
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
        return self._run(self._list_call(where, limit, cursor))

    def count(
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
        """How many tasks match the filters (those of :meth:`list`); exact,
        which costs the daemon a read of every match (and is refused,
        ``InvalidRequest`` code ``too_costly``, past its time limit), or with
        ``up_to`` at most that many, reading no more: a count equal to
        ``up_to`` means at least that many."""
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
        return self._run(self._count_call(where, up_to))

    def timeline(
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
        """How many matching tasks are due per routing key in each of
        ``buckets`` (1-1440, default 60) spans of ``bucket_ms`` milliseconds
        (1 s to 31 days, default 60,000) from ``start`` (as ``at``) or
        ``start_ms`` (epoch ms), at most one (default: the start of the
        current span). ``bucket_s`` (whole seconds) is deprecated."""
        where = Filter(prefix, routing_key, tag)
        return self._run(
            self._timeline_call(where, Span(bucket_ms, buckets, start, start_ms, bucket_s))
        )

    def cancel_where(
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
        where = Filter(
            prefix,
            routing_key,
            tag,
            due_after,
            due_before,
            due_after_ms=due_after_ms,
            due_before_ms=due_before_ms,
        )
        done, cursor = self._run(self._cancel_where_call(where, timeout_s))
        while cursor is not None:  # the daemon stopped at its time limit: go on
            more, cursor = self._run(self._cancel_where_call(where, timeout_s, cursor))
            done = BulkCancelled(done.cancelled + more.cancelled, done.too_late + more.too_late)
        return done

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
