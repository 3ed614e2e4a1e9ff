"""What the clients take and give back: :class:`TaskRequest`, and the results
(frozen dataclasses, every instant in epoch milliseconds, named ``*_ms``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Literal

from triggerhook_client.checks import deprecated
from triggerhook_client.rules import TaskState

# An instant: a datetime or RFC 3339 text (either without an offset: UTC); a
# number is epoch seconds, deprecated (give the ``*_ms`` argument instead).
At = datetime | str | float
HeaderValue = str | int | bool
# A late-fire policy, as the API writes it: "fire", {"skip_after_ms": N},
# {"deadline_ms": N} or {"deadline": At}.
Late = Literal["fire"] | Mapping[str, int | At]
State = TaskState | str  # a listing's state filter: scheduled or firing


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """One task to schedule, for :meth:`Client.schedule_many` and
    :meth:`Client.schedule_batch`: the arguments of
    :meth:`Client.schedule` (exactly one of ``at``, ``at_ms`` and
    ``delay_ms``; a series, with ``every`` or ``cron``, may give none).
    ``delay_s`` is deprecated: give ``delay_ms``."""

    id: str | None = None
    at: At | None = None
    delay_s: float | None = None  # deprecated: delay_ms
    routing_key: str | None = None
    payload: str | bytes | None = None
    _: KW_ONLY
    at_ms: int | None = None  # epoch milliseconds
    delay_ms: int | None = None  # milliseconds from now
    tags: Iterable[str] | None = None
    content_type: str | None = None
    content_encoding: str | None = None
    headers: Mapping[str, HeaderValue] | None = None
    late: Late | None = None
    dedup_window_ms: int | None = None  # once fired, its id is refused this long (None: daemon's)
    every: str | None = None  # a series: an ISO 8601 duration (PT15M, P1D)
    cron: str | None = None  # a series: 5 cron fields, in ``timezone``
    timezone: str | None = None  # an IANA name, for cron (default UTC)
    dst_repeated: str | None = None  # cron: a local time shown twice fires first, last, both
    dst_skipped: str | None = None  # cron: local times a gap skips shift to its end, or skip
    until: At | None = None  # a series' end (inclusive)
    until_ms: int | None = None  # the same in epoch milliseconds
    catch_up: str | None = None  # a series' missed occurrences: skip, one (None) or all
    catch_up_max: int | None = None  # with catch_up "all": at most this many fire (1-1000)
    on_conflict: str | None = None  # error (None), keep or replace


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A stored task's id and due time (epoch ms), and what the call did:
    ``outcome`` is ``created``, ``exists`` (the same task existed already: a
    safe repeat), ``replaced`` or ``kept`` (``on_conflict``; kept: the id and
    due time are the stored task's), or ``rescheduled``. ``created``: the
    outcome is ``created``."""

    id: str
    due_ms: int
    created: bool
    outcome: str

    @property
    def at_ms(self) -> int:
        """Deprecated: :attr:`due_ms`."""
        deprecated("Scheduled.at_ms is deprecated: use due_ms")
        return self.due_ms


@dataclass(frozen=True, slots=True)
class BatchScheduled:
    """One task of a batch (:meth:`Client.schedule_batch`): its id and what
    the batch did with it, as :class:`Scheduled` says it of one create.
    ``outcome`` is ``created``, ``exists``, ``replaced`` or ``kept``; a word
    a newer daemon adds is given as it comes. ``created``: the outcome is
    ``created``. No due time: the batch's answer gives none (a kept task's is
    the stored one's; :meth:`Client.get` shows it).

    A daemon before 2026-12 answers no outcomes: each task reads as
    ``created``, its batch's status (201), as :meth:`Client.schedule` reads a
    create's that says none — though a task that existed with the same
    content was not written again. Such a daemon refuses ``on_conflict``:
    never ``kept`` nor ``replaced`` then."""

    id: str
    created: bool
    outcome: str


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """A stored task not yet fired, as a listing shows it (no payload).

    The metadata is what the task was scheduled with: ``tags`` (sorted, a
    set), the event's ``content_type``, ``content_encoding`` and ``headers``,
    and ``late`` (None: the daemon's ``late_policy``; a deadline is shown as
    ``{"deadline_ms": N}``), ``dedup_window_ms`` (None: none). Passing them
    back to ``schedule`` makes the same task.

    A series shows its schedule — ``every`` (normalized: ``PT15M``, ``P1D``)
    or ``cron`` and ``timezone`` (and its daylight-saving policy, when given:
    ``dst_repeated``, ``dst_skipped``) — its end ``until_ms`` (epoch ms), and
    ``occurrence``: which occurrence ``due_ms`` is (1, 2, ...; None: not a
    series). ``stopping``: a cancel came while this occurrence was being
    published, so it is the series' last. Once an occurrence has fired, the
    row stands for the next one: scheduling it again as shown is a conflict.
    ``catch_up`` and ``catch_up_max``: its policy for missed occurrences, when
    given. ``paused``: no occurrence fires until it is resumed (``due_ms`` is
    then the latest due time there is, not an occurrence); ``resume_ms``: the
    occurrence it resumes at (None while the occurrence being published when
    it was paused still fires).

    ``throttled``: a rate limit holds it back and it waits in the database
    until ``fire_ms`` (epoch ms); ``fire_ms`` is also given for the next try
    of an event the broker did not take (None: it fires at ``due_ms``).
    A daemon before 2026-12 gives neither: False and None.
    """

    id: str
    due_ms: int
    routing_key: str
    state: TaskState  # SCHEDULED (cancellable) or FIRING (being published)
    _: KW_ONLY
    throttled: bool = False
    fire_ms: int | None = None
    tags: tuple[str, ...] = ()
    content_type: str | None = None
    content_encoding: str | None = None
    # Left out of the hash (a dict has none); still compared.
    headers: dict[str, HeaderValue] = field(default_factory=dict, hash=False)
    late: Late | None = field(default=None, hash=False)
    dedup_window_ms: int | None = None
    every: str | None = None
    cron: str | None = None
    timezone: str | None = None
    dst_repeated: str | None = None
    dst_skipped: str | None = None
    catch_up: str | None = None
    catch_up_max: int | None = None
    until_ms: int | None = None
    occurrence: int | None = None
    stopping: bool = False
    paused: bool = False
    resume_ms: int | None = None

    @property
    def at_ms(self) -> int:
        """Deprecated: :attr:`due_ms`."""
        deprecated(f"{type(self).__name__}.at_ms is deprecated: use due_ms")
        return self.due_ms


@dataclass(frozen=True, slots=True)
class TaskStatus(TaskSummary):
    """A stored task not yet fired, as ``GET /v1/tasks/{id}`` describes it: a
    :class:`TaskSummary` and its payload."""

    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class SeriesChange:
    """A series' pause or resume: its ``id`` and ``outcome``: ``paused``,
    ``paused_after_this`` (its occurrence being published still fires; none
    after it), ``resumed`` (also when it was not paused) or ``ended``
    (resumed with no occurrence left: it is deleted)."""

    id: str
    outcome: str


@dataclass(frozen=True, slots=True)
class Copies:
    """A series' trigger or backfill: the series' ``id``, ``outcome``
    (``triggered``, ``backfilled``) and ``copies``, the one-off tasks that
    fire its occurrences (ids ``<series id>:<due ms>``), each ``created`` or,
    written by an earlier attempt, ``exists`` (:class:`Scheduled`)."""

    id: str
    outcome: str
    copies: tuple[Scheduled, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of a listing, in due order (ties by id); ``next_cursor``: pass
    it to get the next page (None: this was the last)."""

    tasks: tuple[TaskSummary, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Timeline:
    """Tasks due per routing key in ``buckets`` spans of ``bucket_ms`` from
    ``start_ms``: ``counts[key][i]`` are due in ``[start_ms + i * bucket_ms,
    start_ms + (i + 1) * bucket_ms)``; keys with no task in the span are absent."""

    start_ms: int
    bucket_ms: int
    buckets: int
    counts: dict[str, tuple[int, ...]] = field(default_factory=dict, hash=False)

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.bucket_ms * self.buckets


@dataclass(frozen=True, slots=True)
class BulkCancelled:
    """What a bulk cancel did: tasks cancelled (they never fire), and matching
    tasks that were being published already (too late to cancel)."""

    cancelled: int
    too_late: int


@dataclass(frozen=True, slots=True)
class Health:
    """The daemon's readiness: MySQL and RabbitMQ reachable, engine threads alive."""

    ready: bool
    reasons: tuple[str, ...] = ()  # why not, when not ready
