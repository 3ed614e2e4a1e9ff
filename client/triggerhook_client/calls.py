"""The calls the clients make: each request built and how its answer is read,
in one place for :class:`~triggerhook_client.Client` and
:class:`~triggerhook_client.AsyncClient` (which differ only in how they send
and wait: no I/O here). The parts: :mod:`~triggerhook_client.bodies` (request
bodies, paths, query strings), :mod:`~triggerhook_client.times` (instants and
durations), :mod:`~triggerhook_client.answers` (reading answers) and
:mod:`~triggerhook_client.retry` (a call and its retry policy). See the
package docstring for the retry policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import httpx

from triggerhook_client import answers
from triggerhook_client.bodies import (
    Filter,
    Span,
    backfill_body,
    encode,
    positive,
    series_path,
    task_body,
    task_path,
    when_body,
)
from triggerhook_client.checks import deprecated, invalid, is_number, utf8
from triggerhook_client.results import (
    At,
    BatchScheduled,
    BulkCancelled,
    Copies,
    HeaderValue,
    Health,
    Late,
    Scheduled,
    SeriesChange,
    State,
    TaskPage,
    TaskRequest,
    TaskStatus,
    TaskSummary,
    Timeline,
)
from triggerhook_client.retry import Attempts, Call, Retry, T
from triggerhook_client.rules import RESERVED_IDS
from triggerhook_client.times import instant_field

__all__ = [
    "DEFAULT_BACKOFF_S",
    "DEFAULT_BULK_TIMEOUT_S",
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "RESERVED_IDS",
    "At",
    "BaseClient",
    "BatchScheduled",
    "BulkCancelled",
    "Call",
    "Copies",
    "Filter",
    "HeaderValue",
    "Health",
    "Late",
    "Retry",
    "Scheduled",
    "SeriesChange",
    "Span",
    "State",
    "T",
    "TaskPage",
    "TaskRequest",
    "TaskStatus",
    "TaskSummary",
    "Timeline",
]

DEFAULT_TIMEOUT_S = 30.0
# A bulk cancel blocks until every matching task is cancelled: minutes for a
# million tasks (500 per transaction).
DEFAULT_BULK_TIMEOUT_S = 900.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 0.1
# Tasks per request when walking a listing: the API's largest page, the fewest requests.
DEFAULT_PAGE_SIZE = 1000
# The answers each call reads as success (or, for a lookup and a probe, as a result).
_OK_CREATED, _OK_BATCH, _OK_MOVED = frozenset({200, 201}), frozenset({201}), frozenset({200})
_OK_CANCELLED, _OK_GET, _OK_HEALTH = frozenset({204}), frozenset({200, 404}), frozenset({200, 503})
_OK_STATUS = frozenset({200})


class BaseClient:
    """Configuration, and every request built and answer read: the two client
    classes only send."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        timeout_s: float,
        retries: int,
        backoff_s: float,
    ) -> None:
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL:
            url = httpx.URL()
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if retries < 0 or backoff_s < 0 or timeout_s <= 0:
            raise ValueError("retries and backoff_s must be >= 0 and timeout_s > 0")
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _attempts(self) -> Attempts:
        return Attempts(self._retries, self._backoff_s)

    def _timeout_s(self, call: Call[Any]) -> float:
        return self.timeout_s if call.timeout_s is None else call.timeout_s

    @staticmethod
    def _schedule_call(task: TaskRequest) -> Call[Scheduled]:
        body, rename = task_body(task)
        return Call("POST", "/v1/tasks", _OK_CREATED, answers.scheduled, encode(body), rename)

    @staticmethod
    def _schedule_many_call(tasks: Sequence[TaskRequest]) -> Call[list[str]]:
        return _batch_call(tasks, answers.ids)

    @staticmethod
    def _schedule_batch_call(tasks: Sequence[TaskRequest]) -> Call[list[BatchScheduled]]:
        return _batch_call(tasks, answers.batch)

    @staticmethod
    def _reschedule_call(
        task_id: str,
        at: At | None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        delay_s: float | None = None,
    ) -> Call[Scheduled]:
        path = task_path(task_id)
        body, rename = when_body(at, at_ms, delay_ms, delay_s)
        return Call("PATCH", path, _OK_MOVED, answers.moved, encode(body), rename)

    @staticmethod
    def _cancel_call(task_id: str) -> Call[None]:
        return Call("DELETE", task_path(task_id), _OK_CANCELLED, lambda _answer: None)

    @staticmethod
    def _series_change_call(task_id: str, action: str) -> Call[SeriesChange]:
        """A pause or a resume (``action``): idempotent (a paused series is
        paused again, a running one resumed again, each with no change), so
        retried like any call."""
        path = series_path(task_id, action)
        return Call("POST", path, _OK_STATUS, answers.series_change)

    @staticmethod
    def _trigger_call(task_id: str) -> Call[Copies]:
        # The daemon names the copy by its own clock (<id>:<now ms>): a retry
        # after an answer was lost would fire a second one. Never retried.
        path = series_path(task_id, "trigger")
        return Call("POST", path, _OK_STATUS, answers.copies, retry=False)

    @staticmethod
    def _backfill_call(task_id: str, from_ms: int, to_ms: int) -> Call[Copies]:
        # The copies are named by their due times, so a retry finds those still
        # pending (exists); but past ones fire at once and are deleted, and a
        # retry after a lost answer would write and fire them again. Never retried.
        content = encode(backfill_body(from_ms, to_ms))
        path = series_path(task_id, "backfill")
        return Call("POST", path, _OK_STATUS, answers.copies, content, retry=False)

    @staticmethod
    def _get_call(task_id: str) -> Call[TaskStatus | None]:
        return Call("GET", task_path(task_id), _OK_GET, answers.status)

    @staticmethod
    def _list_call(
        where: Filter, limit: int | None, cursor: str | None, limit_name: str = "limit"
    ) -> Call[TaskPage]:
        """One page; ``limit_name``: what the caller calls the page size."""
        params, rename = where.params()
        if limit is not None:
            params["limit"] = positive(limit, limit_name)
        if cursor is not None:
            params["cursor"] = utf8(cursor, "cursor")
        rename["limit"] = limit_name
        return Call("GET", "/v1/tasks", _OK_STATUS, answers.page, rename=rename, params=params)

    @staticmethod
    def _count_call(where: Filter, up_to: int | None = None) -> Call[int]:
        params, rename = where.params()
        if up_to is not None:
            params["up_to"] = positive(up_to, "up_to")
        return Call(
            "GET", "/v1/tasks/count", _OK_STATUS, answers.counted, rename=rename, params=params
        )

    @staticmethod
    def _timeline_call(where: Filter, span: Span) -> Call[Timeline]:
        params, rename = where.params()
        if span.bucket_s is not None:
            if span.bucket_ms is not None:
                raise invalid("bucket_s", "give at most one of bucket_ms and bucket_s")
            deprecated("bucket_s is deprecated: give bucket_ms (milliseconds)")
            params["bucket_ms"] = str(int(positive(span.bucket_s, "bucket_s")) * 1000)
            rename["bucket_ms"] = "bucket_s"
        elif span.bucket_ms is not None:
            params["bucket_ms"] = positive(span.bucket_ms, "bucket_ms")
        if span.buckets is not None:
            params["buckets"] = positive(span.buckets, "buckets")
        start, renamed = instant_field("start", span.start, span.start_ms)
        params.update((name, str(value)) for name, value in start.items())
        rename.update(renamed)
        return Call(
            "GET", "/v1/tasks/timeline", _OK_STATUS, answers.timeline, rename=rename, params=params
        )

    @staticmethod
    def _cancel_where_call(
        where: Filter, timeout_s: float, cursor: str | None = None
    ) -> Call[tuple[BulkCancelled, str | None]]:
        """One request of a bulk cancel, from ``cursor`` (a previous one's
        ``next_cursor``): what it did, and where the next goes on (None: done)."""
        if not where.narrowed:
            # Never "every task": the daemon refuses it too; no request for it.
            raise invalid(None, "give at least one of prefix, tag and routing_key")
        if not (is_number(timeout_s) and timeout_s > 0):
            raise invalid("timeout_s", "must be a number of seconds > 0")
        body, rename = where.body()
        if cursor is not None:
            body["cursor"] = cursor
        content = encode(body)
        return Call(
            "POST",
            "/v1/tasks/cancel",
            _OK_STATUS,
            answers.bulk_cancelled,
            content,
            rename=rename,
            timeout_s=timeout_s,
        )

    @staticmethod
    def _status_call() -> Call[dict[str, Any]]:
        return Call(
            "GET", "/v1/status", _OK_STATUS, lambda answer: dict(answers.json_object(answer))
        )

    @staticmethod
    def _health_call() -> Call[Health]:
        # A probe answers now or not at all: no retries.
        return Call("GET", "/readyz", _OK_HEALTH, answers.health, retry=False)


def _batch_call(tasks: Sequence[TaskRequest], read: Callable[[httpx.Response], T]) -> Call[T]:
    """A batch create of ``tasks``, its answer read by ``read`` (the ids, or the outcomes)."""
    bodies, rename = [], {}
    for index, task in enumerate(tasks):
        body, renamed = task_body(task, f"tasks[{index}].")
        bodies.append(body)
        rename.update(renamed)
    content = encode({"tasks": bodies})
    return Call("POST", "/v1/tasks/batch", _OK_BATCH, read, content, rename)
