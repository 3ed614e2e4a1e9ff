"""Where the CLI's task commands go: one :class:`Backend` protocol, implemented
over the library (:class:`LibraryBackend`: the database, through
:class:`~triggerhook.app.TriggerHook`) and over a daemon's HTTP API
(:class:`HttpBackend`, with ``--url``: through :class:`triggerhook_client.Client`).

Both answer in the outcome vocabulary (:mod:`triggerhook.domain.outcomes`) and
raise every failure of a call as :class:`BackendError` (its outcome and the
message to print), so the commands and their exit codes are written once.
Setup errors (:class:`~triggerhook.errors.ConfigError`,
:class:`~triggerhook.errors.SchemaError`) are not outcomes: they go through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar, cast

from triggerhook_client import (
    AlreadyFired,
    ApiError,
    Client,
    Conflict,
    Copies,
    Forbidden,
    InvalidRequest,
    Late,
    NotASeries,
    NotFound,
    OverQuota,
    TaskSummary,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook_client.bodies import DueRange, Filter
from triggerhook_client.bodies import Where as WhereArgs

from triggerhook.api.listing import parse_filter
from triggerhook.app import Copied, TaskSpec, TriggerHook
from triggerhook.cli.task_args import NO_METADATA, Metadata
from triggerhook.domain.listing import BulkCancelled, TaskFilter
from triggerhook.domain.meta import FIRE, NO_META, LateKind, LatePolicy, Meta
from triggerhook.domain.outcomes import (
    CANCEL_OUTCOMES,
    INSERT_OUTCOMES,
    RESCHEDULE_OUTCOMES,
    SERIES_OUTCOMES,
    Outcome,
    error_outcome,
)
from triggerhook.domain.recurrence import (
    Recurrence,
    parse_catch_up,
    parse_dst_repeated,
    parse_dst_skipped,
    parse_every,
)
from triggerhook.domain.task import TaskInfo, TaskState
from triggerhook.errors import (
    AlreadyFiredError,
    ConfigError,
    SchemaError,
    TriggerHookError,
    ValidationError,
)
from triggerhook.settings import Settings

T = TypeVar("T")
# The library's and the client's names of the fields the CLI takes as flags
# of other names: errors name the flag (``--in``, ``--from``, ``--to``).
_FLAG_NAMES = {
    "delay_ms": "in",
    "from_ms": "from",
    "to_ms": "to",
    "dedup_window_ms": "dedup_window",
}


@dataclass(frozen=True, slots=True)
class Stored:
    """A scheduled task, and the create's outcome: CREATED, EXISTS (the same
    task existed), REPLACED or KEPT (``--on-conflict``; then ``due_ms`` is
    the stored task's)."""

    id: str
    due_ms: int
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Moved:
    """A reschedule's outcome; ``due_ms`` is the new due time when it moved."""

    outcome: Outcome
    due_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """A stored task, as ``get`` shows it; ``throttled`` and ``fire_ms`` as
    :class:`~triggerhook.domain.task.TaskInfo` has them."""

    id: str
    due_ms: int
    routing_key: str
    payload: bytes
    state: TaskState
    meta: Meta = NO_META
    throttled: bool = False
    fire_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Listed:
    """A stored task, as ``list`` shows it (no payload)."""

    id: str
    due_ms: int
    routing_key: str
    state: TaskState
    meta: Meta = NO_META
    throttled: bool = False
    fire_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of ``list``; ``cursor``: where the next starts (None: the last)."""

    tasks: list[Listed]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class Copying:
    """A series' trigger or backfill: TRIGGERED or BACKFILLED with the copies
    written (each CREATED, or EXISTS: an earlier backfill's), or NOT_FOUND,
    NOT_A_SERIES with none."""

    outcome: Outcome
    copies: tuple[Stored, ...] = ()


# The filters of ``list``, ``count`` and a bulk ``cancel``, as given on the
# command line (times as ``--at`` takes them): the client's, which each
# backend checks (the library's through the HTTP API's parser).
Where = Filter


class BackendError(TriggerHookError):
    """A call that failed: its outcome, and the message to print."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class Backend(Protocol):
    """What the task commands need. ``delay_ms`` and ``at`` (exactly one; a
    series may give neither) are the CLI's ``--in`` and ``--at``; an error
    names ``--in`` as ``in``."""

    def schedule(
        self,
        task_id: str | None,
        *,
        at: str | None,
        delay_ms: int | None,
        routing_key: str | None,
        payload: str | None,
        meta: Metadata = NO_METADATA,
    ) -> Stored: ...

    def reschedule(self, task_id: str, *, at: str | None, delay_ms: int | None) -> Moved: ...

    def cancel(self, task_id: str) -> Outcome: ...

    def get(self, task_id: str) -> Found | None: ...

    def list_page(self, where: Where, limit: int, cursor: str | None) -> Listing: ...

    def count(self, where: Where) -> int: ...

    def cancel_where(self, where: Where) -> BulkCancelled: ...

    def pause(self, task_id: str) -> Outcome: ...

    def resume(self, task_id: str) -> Outcome: ...

    def trigger(self, task_id: str) -> Copying: ...

    def backfill(self, task_id: str, from_ms: int, to_ms: int) -> Copying: ...

    def close(self) -> None: ...


_SETUP_ERRORS = (ConfigError, SchemaError)


class _Closing:
    """A backend as a context manager: closed when the block ends."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class LibraryBackend(_Closing):
    """The database, through the library (the engine is not started).
    ``settings``: the CLI's, to keep the library's retry warnings (a bulk
    cancel's batches) off stderr below DEBUG."""

    def __init__(self, hook: TriggerHook, settings: Settings | None = None) -> None:
        if settings is not None:
            _quiet(settings, "triggerhook.engine.bulk")
        self._hook = hook

    def schedule(
        self,
        task_id: str | None,
        *,
        at: str | None,
        delay_ms: int | None,
        routing_key: str | None,
        payload: str | None,
        meta: Metadata = NO_METADATA,
    ) -> Stored:
        with _library_errors():
            spec = TaskSpec(
                task_id,
                at=at,
                delay_ms=delay_ms,
                routing_key=routing_key,
                payload=payload,
                late=None if meta.late is None else meta.late.policy(),
                **meta.arguments(),
            )
            result = self._hook.schedule(spec)
        return Stored(result.task.id, result.task.due_ms, INSERT_OUTCOMES[result.outcome])

    def reschedule(self, task_id: str, *, at: str | None, delay_ms: int | None) -> Moved:
        with _library_errors():
            moved = self._hook.reschedule(task_id, at=at, delay_ms=delay_ms)
        outcome = RESCHEDULE_OUTCOMES[moved.result]
        if not outcome.ok or moved.task is None:
            return Moved(Outcome.NOT_FOUND if outcome.ok else outcome)
        return Moved(outcome, moved.task.due_ms)

    def cancel(self, task_id: str) -> Outcome:
        with _library_errors():
            return CANCEL_OUTCOMES[self._hook.cancel(task_id)]

    def get(self, task_id: str) -> Found | None:
        with _library_errors():
            info = self._hook.get(task_id)
        if info is None:
            return None
        task = info.task
        return Found(
            task.id,
            task.due_ms,
            task.routing_key,
            task.payload,
            info.state,
            task.meta,
            info.throttled,
            info.fire_ms,
        )

    def list_page(self, where: Where, limit: int, cursor: str | None) -> Listing:
        with _library_errors():
            page = self._hook.list_tasks(_library_filter(where), limit=limit, cursor=cursor)
        return Listing([_listed(info) for info in page.tasks], page.cursor)

    def count(self, where: Where) -> int:
        with _library_errors():
            return self._hook.count(_library_filter(where))

    def cancel_where(self, where: Where) -> BulkCancelled:
        with _library_errors():
            return self._hook.cancel_where(_library_filter(where))

    def pause(self, task_id: str) -> Outcome:
        with _library_errors():
            return SERIES_OUTCOMES[self._hook.pause(task_id)]

    def resume(self, task_id: str) -> Outcome:
        with _library_errors():
            return SERIES_OUTCOMES[self._hook.resume(task_id)]

    def trigger(self, task_id: str) -> Copying:
        with _library_errors():
            return _copying(self._hook.trigger(task_id))

    def backfill(self, task_id: str, from_ms: int, to_ms: int) -> Copying:
        with _library_errors():
            return _copying(self._hook.backfill(task_id, from_ms=from_ms, to_ms=to_ms))

    def close(self) -> None:
        self._hook.close()


def _copying(done: Copied) -> Copying:
    copies = tuple(
        Stored(c.task.id, c.task.due_ms, INSERT_OUTCOMES[c.outcome]) for c in done.copies
    )
    return Copying(SERIES_OUTCOMES[done.result], copies)


def _listed(info: TaskInfo) -> Listed:
    task = info.task
    return Listed(
        task.id, task.due_ms, task.routing_key, info.state, task.meta, info.throttled, info.fire_ms
    )


def _library_filter(where: Where) -> TaskFilter:
    """The filter the HTTP API makes of these (its parser: times parsed as it does)."""
    return parse_filter(where.given())


@contextmanager
def _library_errors() -> Iterator[None]:
    try:
        yield
    except _SETUP_ERRORS:
        raise
    except ValidationError as exc:
        renamed = ValidationError(_FLAG_NAMES.get(exc.field, exc.field), exc.message)
        raise BackendError(Outcome.INVALID, str(renamed)) from None
    except AlreadyFiredError as exc:  # its message says when, as the daemon's answer does
        message = Outcome.ALREADY_FIRED.message(id=exc.task_id, fired_ms=exc.fired_ms)
        raise BackendError(Outcome.ALREADY_FIRED, message) from None
    except TriggerHookError as exc:
        raise BackendError(error_outcome(exc), str(exc)) from None


# Client errors -> outcomes (a NotFound or TooLate a call does not expect, say
# from a proxy, is a failure like any other unexpected answer).
_CLIENT_OUTCOMES: tuple[tuple[type[ApiError], Outcome], ...] = (
    (InvalidRequest, Outcome.INVALID),
    (AlreadyFired, Outcome.ALREADY_FIRED),  # a Conflict: first
    (Conflict, Outcome.CONFLICT),
    (Unauthorized, Outcome.UNAUTHORIZED),
    (Forbidden, Outcome.FORBIDDEN),
    (OverQuota, Outcome.OVER_QUOTA),
    (Unavailable, Outcome.UNAVAILABLE),
)


class HttpBackend(_Closing):
    """A running daemon's HTTP API (``--url``), token: the ``api_token`` setting."""

    def __init__(self, url: str, settings: Settings) -> None:
        _quiet(settings, "httpx", "triggerhook.client")
        try:
            self._client = Client(url, token=settings.api_token or None)
        except ValueError as exc:
            raise ConfigError(f"--url: {exc}") from None

    def schedule(
        self,
        task_id: str | None,
        *,
        at: str | None,
        delay_ms: int | None,
        routing_key: str | None,
        payload: str | None,
        meta: Metadata = NO_METADATA,
    ) -> Stored:
        result = self._call(
            lambda: self._client.schedule(
                task_id,
                at=at,
                delay_ms=delay_ms,
                routing_key=routing_key,
                payload=payload,
                late=None if meta.late is None else meta.late.for_client(),
                **meta.arguments(),
            )
        )
        return Stored(result.id, result.due_ms, Outcome(result.outcome))

    def reschedule(self, task_id: str, *, at: str | None, delay_ms: int | None) -> Moved:
        try:
            moved = self._call(
                lambda: self._client.reschedule(task_id, at=at, delay_ms=delay_ms), answers=True
            )
        except _Answered as answered:
            return Moved(answered.outcome)
        return Moved(Outcome.RESCHEDULED, moved.due_ms)

    def cancel(self, task_id: str) -> Outcome:
        try:
            self._call(lambda: self._client.cancel(task_id), answers=True)
        except _Answered as answered:
            return answered.outcome
        return Outcome.CANCELLED

    def get(self, task_id: str) -> Found | None:
        status = self._call(lambda: self._client.get(task_id))
        if status is None:
            return None
        return Found(
            status.id,
            status.due_ms,
            status.routing_key,
            status.payload,
            status.state,
            _meta_of(status),
            status.throttled,
            status.fire_ms,
        )

    def list_page(self, where: Where, limit: int, cursor: str | None) -> Listing:
        page = self._call(
            lambda: self._client.list_page(limit=limit, cursor=cursor, **_arguments(where))
        )
        listed = [
            Listed(t.id, t.due_ms, t.routing_key, t.state, _meta_of(t), t.throttled, t.fire_ms)
            for t in page.tasks
        ]
        return Listing(listed, page.next_cursor)

    def count(self, where: Where) -> int:
        return self._call(lambda: self._client.count(**_arguments(where)))

    def cancel_where(self, where: Where) -> BulkCancelled:
        done = self._call(lambda: self._client.cancel_where(**cast(DueRange, _arguments(where))))
        return BulkCancelled(done.cancelled, done.too_late)

    def pause(self, task_id: str) -> Outcome:
        return self._series(lambda: self._client.pause(task_id).outcome)

    def resume(self, task_id: str) -> Outcome:
        return self._series(lambda: self._client.resume(task_id).outcome)

    def trigger(self, task_id: str) -> Copying:
        return self._copying(lambda: self._client.trigger(task_id))

    def backfill(self, task_id: str, from_ms: int, to_ms: int) -> Copying:
        return self._copying(lambda: self._client.backfill(task_id, from_ms=from_ms, to_ms=to_ms))

    def _series(self, call: Callable[[], str]) -> Outcome:
        """A pause's or resume's outcome (NOT_FOUND and NOT_A_SERIES answered)."""
        try:
            return _answered_outcome(self._call(call, answers=True))
        except _Answered as answered:
            return answered.outcome

    def _copying(self, call: Callable[[], Copies]) -> Copying:
        try:
            done = self._call(call, answers=True)
        except _Answered as answered:
            return Copying(answered.outcome)
        copies = tuple(Stored(c.id, c.due_ms, _answered_outcome(c.outcome)) for c in done.copies)
        return Copying(_answered_outcome(done.outcome), copies)

    def status(self) -> dict[str, Any]:
        """The daemon's live figures (not a task command: HTTP only)."""
        return self._call(self._client.status)

    def _call(self, call: Callable[[], T], answers: bool = False) -> T:
        """``call``'s result; with ``answers``, a 404 or a 409 too_late or
        not_a_series is raised as :class:`_Answered` (the call's outcome),
        else as a failure."""
        try:
            return call()
        except (NotFound, TooLate, NotASeries) as exc:
            if not answers:
                raise _client_error(exc) from None
            raise _Answered(_ANSWERED[type(exc)]) from None
        except ApiError as exc:
            raise _client_error(exc) from None

    def close(self) -> None:
        self._client.close()


def _arguments(where: Where) -> WhereArgs:
    """The filters given, as the client's calls take them (a bulk cancel's
    have no state: the command has no --state)."""
    return cast(WhereArgs, where.given())


# The error answers that are a call's outcome (for the calls that expect them).
_ANSWERED: dict[type[ApiError], Outcome] = {
    NotFound: Outcome.NOT_FOUND,
    TooLate: Outcome.TOO_LATE,
    NotASeries: Outcome.NOT_A_SERIES,
}


class _Answered(Exception):
    """Internal: the daemon answered with an outcome that is a result (404, 409
    too_late), not a failure, for the calls that expect one."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.code)
        self.outcome = outcome


def _answered_outcome(code: str) -> Outcome:
    """The outcome a daemon's answer names (one unknown here: a failure, not a traceback)."""
    try:
        return Outcome(code)
    except ValueError:
        raise BackendError(Outcome.INTERNAL, f"unexpected answer: outcome {code!r}") from None


def _client_error(exc: ApiError) -> BackendError:
    if isinstance(exc, InvalidRequest) and exc.field in _FLAG_NAMES:
        exc = InvalidRequest(exc.status, exc.code, exc.message, _FLAG_NAMES[exc.field])
    outcome = next((o for kind, o in _CLIENT_OUTCOMES if isinstance(exc, kind)), Outcome.INTERNAL)
    return BackendError(outcome, str(exc))


def _quiet(settings: Settings, *loggers: str) -> None:
    """The answer, or one error line, is the output: not each request or retry
    (unless the log level is DEBUG)."""
    if settings.log_level.upper() != "DEBUG":
        for name in loggers:
            logging.getLogger(name).setLevel(logging.ERROR)


def _meta_of(task: TaskSummary) -> Meta:
    """The client's view of a task's metadata as the library's (what ``get``
    and ``list`` print, over either backend)."""
    return Meta(
        tags=task.tags,
        content_type=task.content_type,
        content_encoding=task.content_encoding,
        headers=tuple(sorted(task.headers.items())),
        late=_policy(task.late),
        recur=_recurrence(task),
        dedup_window_ms=task.dedup_window_ms or 0,
    )


def _recurrence(task: TaskSummary) -> Recurrence | None:
    """A series as the client read it, as the library keeps it (None: a one-off task)."""
    if task.occurrence is None:
        return None
    try:
        every_ms = None if task.every is None else parse_every(task.every)
        dst_repeated = parse_dst_repeated(task.dst_repeated)
        dst_skipped = parse_dst_skipped(task.dst_skipped)
        catch_up = parse_catch_up(task.catch_up)
    except ValidationError as exc:
        message = f"unexpected answer: {exc.field} is {getattr(task, exc.field)!r}"
        raise BackendError(Outcome.INTERNAL, message) from None
    return Recurrence(
        every_ms=every_ms,
        cron=task.cron,
        timezone=task.timezone or "UTC",
        dst_repeated=dst_repeated,
        dst_skipped=dst_skipped,
        catch_up=catch_up,
        catch_up_max=task.catch_up_max,
        until_ms=task.until_ms,
        occurrence=task.occurrence,
        stopped=task.stopping,
        paused=task.paused,
        resume_ms=task.resume_ms,
    )


def _policy(late: Late | None) -> LatePolicy | None:
    if late is None or isinstance(late, str):  # the client reads only "fire" as text
        return None if late is None else FIRE
    skip, deadline_ms = late.get("skip_after_ms"), late.get("deadline_ms")
    if isinstance(skip, int):
        return LatePolicy(LateKind.SKIP_AFTER, skip)
    if isinstance(deadline_ms, int):
        return LatePolicy(LateKind.DEADLINE, deadline_ms)
    raise BackendError(Outcome.INTERNAL, f"unexpected answer: late is {late!r}")
