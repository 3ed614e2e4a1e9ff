"""The clients' methods that make one call each, written once: each function
here takes the method's arguments and gives its :class:`Call` (no I/O).
:class:`~triggerhook_client.Client` makes a blocking method of each
(:func:`blocking`: the result), :class:`~triggerhook_client.AsyncClient` a
coroutine (:func:`awaited`); both take the name, signature and docstring
from here. The methods of more than one call (``list``, ``cancel_where``,
``schedule_many``, ``schedule_batch``, ``ready``) are the clients' own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, Unpack

from triggerhook_client.bodies import SELECTION_KEYS, WHERE_KEYS, Filter, Selection, Span, Where
from triggerhook_client.calls import BaseClient
from triggerhook_client.results import (
    At,
    Copies,
    HeaderValue,
    Health,
    Late,
    Scheduled,
    SeriesChange,
    TaskPage,
    TaskRequest,
    TaskStatus,
    Timeline,
)
from triggerhook_client.retry import Call

P = ParamSpec("P")
T = TypeVar("T")


class Runs(Protocol):
    """A blocking client: sends a call until it has its result."""

    def _run(self, call: Call[T]) -> T: ...


class RunsAsync(Protocol):
    """An asyncio client: sends a call until it has its result."""

    async def _run(self, call: Call[T]) -> T: ...


R = TypeVar("R", bound=Runs)
A = TypeVar("A", bound=RunsAsync)


def blocking(build: Callable[P, Call[T]]) -> Callable[Concatenate[R, P], T]:
    """A blocking client's method: ``build``'s call, sent."""

    def method(self: R, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(build(*args, **kwargs))

    return functools.wraps(build)(method)


def awaited(build: Callable[P, Call[T]]) -> Callable[Concatenate[A, P], Coroutine[Any, Any, T]]:
    """An asyncio client's method: ``build``'s call, sent (a coroutine)."""

    async def method(self: A, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(build(*args, **kwargs))

    return functools.wraps(build)(method)


def schedule(
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
    dst_repeated: str | None = None,
    dst_skipped: str | None = None,
    until: At | None = None,
    until_ms: int | None = None,
    catch_up: str | None = None,
    catch_up_max: int | None = None,
    delay_s: float | None = None,
    on_conflict: str | None = None,
    dedup_window_ms: int | None = None,
) -> Call[Scheduled]:
    """Store one task, due ``at``, ``at_ms`` or after ``delay_ms``
    (exactly one), or a series of them.

    ``at``: a datetime or RFC 3339 text (``"2026-12-01T09:00:00Z"``); either
    without an offset is UTC, not local time. ``at_ms``: epoch
    milliseconds; ``delay_ms``: milliseconds from now, made absolute
    before the first attempt (see the package docstring). Deprecated, still
    taken with a :class:`DeprecationWarning`: ``delay_s`` (seconds) and a
    number as ``at`` or ``until`` (epoch seconds).

    ``payload``: bytes, or text (sent as UTF-8). ``tags`` (at most 8) find
    it again (``list``, ``count``, ``cancel_where``);
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
    attempt, see the package docstring. A cron series' daylight-saving
    policy: ``dst_repeated`` (``"first"``, ``"last"`` or ``"both"`` passes
    of a local time the clocks show twice) and ``dst_skipped`` (``"shift"``
    to the end of the gap, or ``"skip"``); None: cron's rule for the kind of
    entry (docs/api.md). Occurrences a series misses while nothing can fire
    them (an outage, a pause): ``catch_up`` ``"one"`` (None: the first fires
    once, late), ``"skip"`` (none fires) or ``"all"`` (each fires, at most
    ``catch_up_max``, 1-1000, default 100, as one-off tasks ``<id>:<due ms>``).

    Scheduling an existing id with the same content (metadata and
    schedule included) returns ``outcome="exists"``; with other content,
    by ``on_conflict``: ``"error"`` (None) raises :class:`Conflict`;
    ``"keep"`` returns ``outcome="kept"`` and the stored task's due time;
    ``"replace"`` returns ``outcome="replaced"`` (this content and due time
    replace it; a debounce: ``delay_ms`` the quiet period), or raises
    :class:`TooLate` when it is being published.

    ``dedup_window_ms`` (0 to 30 days; None: the daemon's ``dedup_window_ms``,
    and the field is not sent, as older daemons want): once the task fired,
    scheduling its id again within this many ms raises :class:`AlreadyFired`
    (its ``fired_ms``: when it fired) and writes nothing. Also
    :class:`InvalidRequest` (``field`` names the argument: ``tags[1]``,
    ``headers.x-foo``, ``cron``), :class:`Unauthorized`, :class:`Unavailable`.
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
        dedup_window_ms=dedup_window_ms,
        every=every,
        cron=cron,
        timezone=timezone,
        dst_repeated=dst_repeated,
        dst_skipped=dst_skipped,
        until=until,
        until_ms=until_ms,
        catch_up=catch_up,
        catch_up_max=catch_up_max,
        on_conflict=on_conflict,
    )
    return BaseClient._schedule_call(request)


def reschedule(
    id: str,
    *,
    at: At | None = None,
    at_ms: int | None = None,
    delay_ms: int | None = None,
    delay_s: float | None = None,
) -> Call[Scheduled]:
    """Move a task not yet firing to a new due time (exactly one of ``at``,
    ``at_ms`` and ``delay_ms``, as ``schedule`` takes them; ``delay_s``
    is deprecated): it then fires at that time only. Raises
    :class:`NotFound`, :class:`TooLate` (being published at its old time)."""
    return BaseClient._reschedule_call(id, at, at_ms, delay_ms, delay_s)


def cancel(id: str) -> Call[None]:
    """Cancel a task: when this returns, it will never fire. Raises
    :class:`NotFound` (unknown or fired) or :class:`TooLate` (being published)."""
    return BaseClient._cancel_call(id)


def pause(id: str) -> Call[SeriesChange]:
    """Pause a series: no occurrence fires until :meth:`resume`. Outcome
    ``paused`` (also when it was paused already) or ``paused_after_this``
    (its occurrence being published still fires; none after it). Raises
    :class:`NotFound` (unknown, or ended) or :class:`NotASeries` (a one-off task)."""
    return BaseClient._series_change_call(id, "pause")


def resume(id: str) -> Call[SeriesChange]:
    """Resume a paused series at the occurrence it would have fired next; one
    missed while it was paused goes by its ``catch_up``. Outcome ``resumed``
    (also when it was not paused) or ``ended`` (no occurrence was left: it
    is deleted). Raises :class:`NotFound`, :class:`NotASeries`."""
    return BaseClient._series_change_call(id, "resume")


def trigger(id: str) -> Call[Copies]:
    """Fire one extra occurrence of a series now, its schedule unchanged: a
    one-off task ``<id>:<the daemon's now, epoch ms>`` (in ``copies``; cancel
    it by that id), outcome ``triggered``. Not retried: a retry after a lost
    answer would fire a second copy (a transient failure raises
    :class:`Unavailable`; ``list(prefix=id + ":")`` shows whether the copy
    was made). Raises :class:`NotFound`, :class:`NotASeries`."""
    return BaseClient._trigger_call(id)


def backfill(id: str, *, from_ms: int, to_ms: int) -> Call[Copies]:
    """Fire now the occurrences a series' schedule has in ``[from_ms,
    to_ms)`` (epoch ms, ``to_ms`` not after now; at most 1000), as one-off
    tasks ``<id>:<due ms>`` written in one transaction: ``copies``, in due
    order, each ``created`` or ``exists`` (a repeated backfill, for the copies
    still pending: those that fired are written, and fire, again); outcome
    ``backfilled``. Not retried, for that reason (a transient failure raises
    :class:`Unavailable`). Raises :class:`InvalidRequest` (``from_ms``, ``to_ms``:
    a bad range, one in the future or with more than 1000 occurrences),
    :class:`NotFound`, :class:`NotASeries`."""
    return BaseClient._backfill_call(id, from_ms, to_ms)


def get(id: str) -> Call[TaskStatus | None]:
    """The stored task with its payload and metadata, or None when it is
    unknown or fired."""
    return BaseClient._get_call(id)


def list_page(
    *, limit: int | None = None, cursor: str | None = None, **where: Unpack[Where]
) -> Call[TaskPage]:
    """One page of ``list``: at most ``limit`` (1-1000, default 100)
    tasks from the start, or after ``cursor`` (a page's ``next_cursor``,
    with the same filters). A page shorter than ``limit`` is the last; a
    full one always has a cursor (its next page may be empty)."""
    return BaseClient._list_call(Filter.of(where, WHERE_KEYS, "list_page"), limit, cursor)


def count(*, up_to: int | None = None, **where: Unpack[Where]) -> Call[int]:
    """How many tasks match the filters (those of ``list``); exact,
    which costs the daemon a read of every match (and is refused,
    ``InvalidRequest`` code ``too_costly``, past its time limit), or with
    ``up_to`` at most that many, reading no more: a count equal to
    ``up_to`` means at least that many."""
    return BaseClient._count_call(Filter.of(where, WHERE_KEYS, "count"), up_to)


def timeline(
    *,
    bucket_ms: int | None = None,
    buckets: int | None = None,
    start: At | None = None,
    start_ms: int | None = None,
    bucket_s: int | None = None,
    **where: Unpack[Selection],
) -> Call[Timeline]:
    """How many matching tasks (``prefix``, ``routing_key``, ``tag``) are
    due per routing key in each of ``buckets`` (1-1440, default 60) spans of
    ``bucket_ms`` milliseconds (1 s to 31 days, default 60,000) from
    ``start`` (as ``at``) or ``start_ms`` (epoch ms), at most one (default:
    the start of the current span). ``bucket_s`` (whole seconds) is
    deprecated."""
    return BaseClient._timeline_call(
        Filter.of(where, SELECTION_KEYS, "timeline"),
        Span(bucket_ms, buckets, start, start_ms, bucket_s),
    )


def status() -> Call[dict[str, Any]]:
    """The daemon's live figures (``GET /v1/status``; fields: docs/metrics.md)."""
    return BaseClient._status_call()


def health() -> Call[Health]:
    """The daemon's readiness (``GET /readyz``, no retries); raises
    :class:`Unavailable` when it does not answer."""
    return BaseClient._health_call()
