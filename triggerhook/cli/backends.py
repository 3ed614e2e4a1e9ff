"""Where the CLI's task commands go: one :class:`Backend` protocol, implemented
over the library (:class:`LibraryBackend`: the database, through
:class:`~triggerhook.app.TriggerHook`) and over a daemon's HTTP API
(:class:`HttpBackend`, with ``--url``: through :class:`triggerhook.client.Client`).

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
from typing import Any, Protocol, Self, TypeVar

from triggerhook.app import TaskSpec, TriggerHook
from triggerhook.client import (
    ApiError,
    Client,
    Conflict,
    InvalidRequest,
    NotFound,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook.domain.outcomes import (
    CANCEL_OUTCOMES,
    RESCHEDULE_OUTCOMES,
    Outcome,
    error_outcome,
)
from triggerhook.domain.task import TaskState
from triggerhook.errors import ConfigError, SchemaError, TriggerHookError, ValidationError
from triggerhook.settings import Settings

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stored:
    """A scheduled task: created, or the same task existed (``created`` False)."""

    id: str
    due_ms: int
    created: bool


@dataclass(frozen=True, slots=True)
class Moved:
    """A reschedule's outcome; ``due_ms`` is the new due time when it moved."""

    outcome: Outcome
    due_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """A stored task, as ``get`` shows it."""

    id: str
    due_ms: int
    routing_key: str
    payload: bytes
    state: TaskState


class BackendError(TriggerHookError):
    """A call that failed: its outcome, and the message to print."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class Backend(Protocol):
    """What the task commands need. ``delay_ms`` and ``at`` (exactly one) are
    the CLI's ``--in`` and ``--at``; an error names ``--in`` as ``in``."""

    def schedule(
        self,
        task_id: str | None,
        *,
        at: str | None,
        delay_ms: int | None,
        routing_key: str | None,
        payload: str | None,
    ) -> Stored: ...

    def reschedule(self, task_id: str, *, at: str | None, delay_ms: int | None) -> Moved: ...

    def cancel(self, task_id: str) -> Outcome: ...

    def get(self, task_id: str) -> Found | None: ...

    def close(self) -> None: ...


_SETUP_ERRORS = (ConfigError, SchemaError)


class LibraryBackend:
    """The database, through the library (the engine is not started)."""

    def __init__(self, hook: TriggerHook) -> None:
        self._hook = hook

    def schedule(
        self,
        task_id: str | None,
        *,
        at: str | None,
        delay_ms: int | None,
        routing_key: str | None,
        payload: str | None,
    ) -> Stored:
        with _library_errors():
            result = self._hook.schedule(
                TaskSpec(
                    task_id, at=at, delay_ms=delay_ms, routing_key=routing_key, payload=payload
                )
            )
        return Stored(result.task.id, result.task.due_ms, result.created)

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
        return Found(task.id, task.due_ms, task.routing_key, task.payload, info.state)

    def close(self) -> None:
        self._hook.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextmanager
def _library_errors() -> Iterator[None]:
    try:
        yield
    except _SETUP_ERRORS:
        raise
    except ValidationError as exc:
        # The library's ``delay_ms`` is the CLI's ``--in``.
        renamed = ValidationError("in", exc.message) if exc.field == "delay_ms" else exc
        raise BackendError(Outcome.INVALID, str(renamed)) from None
    except TriggerHookError as exc:
        raise BackendError(error_outcome(exc), str(exc)) from None


# Client errors -> outcomes (a NotFound or TooLate a call does not expect, say
# from a proxy, is a failure like any other unexpected answer).
_CLIENT_OUTCOMES: tuple[tuple[type[ApiError], Outcome], ...] = (
    (InvalidRequest, Outcome.INVALID),
    (Conflict, Outcome.CONFLICT),
    (Unauthorized, Outcome.UNAUTHORIZED),
    (Unavailable, Outcome.UNAVAILABLE),
)


class HttpBackend:
    """A running daemon's HTTP API (``--url``), token: the ``api_token`` setting."""

    def __init__(self, url: str, settings: Settings) -> None:
        if settings.log_level.upper() != "DEBUG":
            # The answer, or one error line, is the output: not each request or retry.
            for name in ("httpx", "triggerhook.client"):
                logging.getLogger(name).setLevel(logging.ERROR)
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
    ) -> Stored:
        delay_s = _seconds(delay_ms)
        result = self._call(
            lambda: self._client.schedule(
                task_id, at=at, delay_s=delay_s, routing_key=routing_key, payload=payload
            )
        )
        return Stored(result.id, result.at_ms, result.created)

    def reschedule(self, task_id: str, *, at: str | None, delay_ms: int | None) -> Moved:
        delay_s = _seconds(delay_ms)
        try:
            moved = self._call(
                lambda: self._client.reschedule(task_id, at=at, delay_s=delay_s), answers=True
            )
        except _Answered as answered:
            return Moved(answered.outcome)
        return Moved(Outcome.RESCHEDULED, moved.at_ms)

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
        return Found(status.id, status.at_ms, status.routing_key, status.payload, status.state)

    def status(self) -> dict[str, Any]:
        """The daemon's live figures (not a task command: HTTP only)."""
        return self._call(self._client.status)

    def _call(self, call: Callable[[], T], answers: bool = False) -> T:
        """``call``'s result; with ``answers``, a 404 or a 409 too_late is raised
        as :class:`_Answered` (the call's outcome), else as a failure."""
        try:
            return call()
        except (NotFound, TooLate) as exc:
            if not answers:
                raise _client_error(exc) from None
            raise _Answered(
                Outcome.NOT_FOUND if isinstance(exc, NotFound) else Outcome.TOO_LATE
            ) from None
        except ApiError as exc:
            raise _client_error(exc) from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Answered(Exception):
    """Internal: the daemon answered with an outcome that is a result (404, 409
    too_late), not a failure, for the calls that expect one."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.code)
        self.outcome = outcome


def _client_error(exc: ApiError) -> BackendError:
    if isinstance(exc, InvalidRequest) and exc.field == "delay_s":
        # The client's ``delay_s`` is the CLI's ``--in``.
        exc = InvalidRequest(exc.status, exc.code, exc.message, "in")
    outcome = next((o for kind, o in _CLIENT_OUTCOMES if isinstance(exc, kind)), Outcome.INTERNAL)
    return BackendError(outcome, str(exc))


def _seconds(delay_ms: int | None) -> float | None:
    return None if delay_ms is None else delay_ms / 1000
