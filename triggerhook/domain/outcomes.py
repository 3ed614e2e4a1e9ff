"""Every outcome a caller can get, in one vocabulary: pure, no I/O.

Each :class:`Outcome` has a stable code (its value: the ``error.code`` of an
HTTP answer or an AMQP reply, the ``result`` word the CLI prints) and a
message template. The interfaces render an outcome each in one table of their
own: HTTP (``triggerhook.api.http.HTTP_RENDERING``: status and code), the AMQP
command channel (``triggerhook.api.command_messages.AMQP_RENDERING``: ``ok``,
``error.code``, what becomes of the message) and the CLI
(``triggerhook.cli.CLI_RENDERING``: exit code, and the ``result``
word printed for cancel and reschedule: the outcome's code). Every table names
every outcome, so a new outcome is a decision in each interface.

Outcomes come from the library's results (:class:`InsertOutcome`,
:class:`CancelResult`, :class:`RescheduleResult`) and from its errors
(:func:`error_outcome`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from triggerhook.domain.task import CancelResult, InsertOutcome, RescheduleResult, SeriesResult
from triggerhook.errors import (
    AlreadyFiredError,
    BrokerUnavailable,
    ConflictError,
    Forbidden,
    Interrupted,
    NotRunningError,
    Overloaded,
    OverQuota,
    StoreUnavailable,
    TooCostly,
    TooLateError,
    TransientError,
    TriggerHookError,
    ValidationError,
)


class Outcome(enum.Enum):
    """What became of a call; the value is the outcome's stable code."""

    # success
    CREATED = "created"  # a new task is stored
    EXISTS = "exists"  # the same task (same content) existed: a safe retry, nothing written
    REPLACED = "replaced"  # on_conflict replace: the new task replaced the stored one
    KEPT = "kept"  # on_conflict keep: the stored task (other content) stays
    RESCHEDULED = "rescheduled"  # it fires at the new time, and only then
    CANCELLED = "cancelled"  # it will never fire
    FOUND = "found"  # a lookup found the task
    PAUSED = "paused"  # a series: no occurrence fires until it is resumed
    PAUSED_AFTER_THIS = "paused_after_this"  # the occurrence being published fires; none after
    RESUMED = "resumed"  # a series fires on its schedule again
    ENDED = "ended"  # a series resumed with no occurrence left: it is deleted
    TRIGGERED = "triggered"  # an extra occurrence of a series fires now
    BACKFILLED = "backfilled"  # a series' past occurrences in a range fire now
    # the task's state says no
    CONFLICT = "conflict"  # same id, other content: nothing written
    NOT_FOUND = "not_found"  # unknown, or fired already
    TOO_LATE = "too_late"  # being published: too late to cancel, move or replace
    NOT_A_SERIES = "not_a_series"  # a one-off task: a series' operation does not apply
    ALREADY_FIRED = "already_fired"  # it fired within its dedup window: nothing written
    # bad input: nothing written, never worth retrying as is
    INVALID = "invalid"  # a field's value (``field`` names it)
    MALFORMED_JSON = "malformed_json"  # the body is not (UTF-8) JSON
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # HTTP: not application/json
    TOO_LARGE = "too_large"  # HTTP: the body is over the limit
    REQUEST_TIMEOUT = "request_timeout"  # HTTP: the body did not arrive in time
    UNKNOWN_TYPE = "unknown_type"  # AMQP: no such command
    UNAUTHORIZED = "unauthorized"  # missing or wrong bearer token
    FORBIDDEN = "forbidden"  # the token may not: its namespace or scopes (the rule named)
    FORBIDDEN_REPLY_TO = "forbidden_reply_to"  # AMQP: a reply_to not allowed
    TOO_COSTLY = "too_costly"  # a read over its bounds (time, answer size): narrow the filter
    # not now: retry (nothing, or the same thing, was written)
    UNAVAILABLE = "unavailable"  # a dependency (database, broker) is down
    OVERLOADED = "overloaded"  # too many calls already wait
    OVER_QUOTA = "over_quota"  # a create over its namespace's quota (the quota named)
    STOPPING = "stopping"  # the daemon is stopping
    # a bug or an unexpected failure
    INTERNAL = "internal"

    @property
    def code(self) -> str:
        return self.value

    @property
    def ok(self) -> bool:
        return self in SUCCESSES

    @property
    def template(self) -> str:
        return MESSAGES[self]

    def message(self, **values: Any) -> str:
        """The message, the template filled with ``values`` (``id``, ``detail``, ...)."""
        return MESSAGES[self].format(**values)


SUCCESSES = frozenset(
    {
        Outcome.CREATED,
        Outcome.EXISTS,
        Outcome.REPLACED,
        Outcome.KEPT,
        Outcome.RESCHEDULED,
        Outcome.CANCELLED,
        Outcome.FOUND,
        Outcome.PAUSED,
        Outcome.PAUSED_AFTER_THIS,
        Outcome.RESUMED,
        Outcome.ENDED,
        Outcome.TRIGGERED,
        Outcome.BACKFILLED,
    }
)

# The message templates (str.format; ``{id!r}`` is the task id quoted).
MESSAGES: dict[Outcome, str] = {
    Outcome.CREATED: "task {id!r} created",
    Outcome.EXISTS: "task {id!r} exists with the same content; nothing written",
    Outcome.REPLACED: "task {id!r} replaced",
    Outcome.KEPT: "task {id!r} exists with other content, kept; nothing written",
    Outcome.RESCHEDULED: "task {id!r} rescheduled",
    Outcome.CANCELLED: "task {id!r} cancelled: it will never fire",
    Outcome.FOUND: "task {id!r} found",
    Outcome.PAUSED: "series {id!r} paused: no occurrence fires until it is resumed",
    Outcome.PAUSED_AFTER_THIS: (
        "series {id!r} paused after the occurrence being published, which still fires"
    ),
    Outcome.RESUMED: "series {id!r} resumed",
    Outcome.ENDED: "series {id!r} had no occurrence left when resumed: it ended",
    Outcome.TRIGGERED: "series {id!r} triggered: an extra occurrence fires now",
    Outcome.BACKFILLED: "series {id!r} backfilled",
    Outcome.CONFLICT: "task {id!r} already exists with different content",
    Outcome.NOT_FOUND: "task {id!r} is unknown or has fired",
    Outcome.TOO_LATE: "task {id!r} is being published",
    Outcome.NOT_A_SERIES: "task {id!r} is not a series (no every or cron)",
    Outcome.ALREADY_FIRED: "task {id!r} fired at {fired_ms} (epoch ms), within its dedup window",
    Outcome.INVALID: "{detail}",  # the field's rule; the field is given apart
    Outcome.MALFORMED_JSON: "body is not {what}: {detail}",
    Outcome.UNSUPPORTED_MEDIA_TYPE: "Content-Type must be application/json",
    Outcome.TOO_LARGE: "body is over the limit of {limit} bytes",
    Outcome.REQUEST_TIMEOUT: "body did not arrive within {timeout_s}s",
    Outcome.UNKNOWN_TYPE: "{given}; expected one of {expected}",
    Outcome.UNAUTHORIZED: "missing or wrong bearer token",
    Outcome.FORBIDDEN: "{detail}",  # the rule: the namespace or the scope
    Outcome.FORBIDDEN_REPLY_TO: "{detail}",
    Outcome.TOO_COSTLY: "{detail}",  # what was over which bound
    Outcome.UNAVAILABLE: "{what} unavailable; retry",
    Outcome.OVERLOADED: "temporarily unavailable; retry",
    Outcome.OVER_QUOTA: "{detail}",  # which quota, and how full
    Outcome.STOPPING: "the daemon is stopping; retry on another",
    Outcome.INTERNAL: "internal error; see the daemon's log",
}

CANCEL_OUTCOMES: dict[CancelResult, Outcome] = {
    CancelResult.CANCELLED: Outcome.CANCELLED,
    CancelResult.NOT_FOUND: Outcome.NOT_FOUND,
    CancelResult.TOO_LATE: Outcome.TOO_LATE,
}

RESCHEDULE_OUTCOMES: dict[RescheduleResult, Outcome] = {
    RescheduleResult.RESCHEDULED: Outcome.RESCHEDULED,
    RescheduleResult.NOT_FOUND: Outcome.NOT_FOUND,
    RescheduleResult.TOO_LATE: Outcome.TOO_LATE,
}

SERIES_OUTCOMES: dict[SeriesResult, Outcome] = {
    SeriesResult.PAUSED: Outcome.PAUSED,
    SeriesResult.PAUSED_AFTER_THIS: Outcome.PAUSED_AFTER_THIS,
    SeriesResult.RESUMED: Outcome.RESUMED,
    SeriesResult.ENDED: Outcome.ENDED,
    SeriesResult.TRIGGERED: Outcome.TRIGGERED,
    SeriesResult.BACKFILLED: Outcome.BACKFILLED,
    SeriesResult.NOT_FOUND: Outcome.NOT_FOUND,
    SeriesResult.NOT_A_SERIES: Outcome.NOT_A_SERIES,
}

INSERT_OUTCOMES: dict[InsertOutcome, Outcome] = {
    InsertOutcome.CREATED: Outcome.CREATED,
    InsertOutcome.EXISTS: Outcome.EXISTS,
    InsertOutcome.REPLACED: Outcome.REPLACED,
    InsertOutcome.KEPT: Outcome.KEPT,
    InsertOutcome.CONFLICT: Outcome.CONFLICT,
    InsertOutcome.TOO_LATE: Outcome.TOO_LATE,
    InsertOutcome.ALREADY_FIRED: Outcome.ALREADY_FIRED,
}


# Library errors -> outcomes, the first class that matches (subclasses before
# their bases: TransientError, the base of the not-now ones, last).
_ERROR_OUTCOMES: tuple[tuple[type[BaseException], Outcome], ...] = (
    (ValidationError, Outcome.INVALID),
    (TooLateError, Outcome.TOO_LATE),
    (AlreadyFiredError, Outcome.ALREADY_FIRED),
    (ConflictError, Outcome.CONFLICT),
    (NotRunningError, Outcome.STOPPING),
    (Interrupted, Outcome.STOPPING),  # by the daemon's stop
    (TooCostly, Outcome.TOO_COSTLY),
    (Forbidden, Outcome.FORBIDDEN),
    (Overloaded, Outcome.OVERLOADED),
    (OverQuota, Outcome.OVER_QUOTA),
    (TransientError, Outcome.UNAVAILABLE),
)


def error_outcome(exc: BaseException) -> Outcome:
    """The outcome a library error means (anything unexpected is INTERNAL)."""
    for kind, outcome in _ERROR_OUTCOMES:
        if isinstance(exc, kind):
            return outcome
    return Outcome.INTERNAL


@dataclass(frozen=True, slots=True)
class Refusal:
    """A library error as every interface answers it: the outcome, the
    message (None: the outcome's template filled with ``values``), the
    field named."""

    outcome: Outcome
    message: str | None = None
    field: str | None = None
    values: Mapping[str, Any] = dataclass_field(default_factory=dict)  # Any: as keywords


def refusal_of(exc: TriggerHookError, id_field: str = "id") -> Refusal:
    """What a library error answers: a bad field names it; a create refused
    by what its id holds names the id as the request gave it (``id_field``:
    ``tasks[3].id`` in a batch) and, for already_fired, when it fired; a
    dependency's failure names the dependency, never its error text."""
    outcome = error_outcome(exc)
    if isinstance(exc, ValidationError):
        return Refusal(outcome, exc.message, exc.field)
    if isinstance(exc, ConflictError):
        fired_ms = exc.fired_ms if isinstance(exc, AlreadyFiredError) else None
        return Refusal(outcome, None, id_field, {"id": exc.task_id, "fired_ms": fired_ms})
    if outcome is Outcome.UNAVAILABLE:
        assert isinstance(exc, TransientError)
        return Refusal(outcome, values={"what": unavailable_what(exc)})
    return Refusal(outcome, values={"detail": exc})  # TOO_COSTLY says which bound


def unavailable_what(exc: TransientError) -> str:
    """Which dependency a transient failure names (no detail: that is for the log)."""
    if isinstance(exc, StoreUnavailable):
        return "database"
    if isinstance(exc, BrokerUnavailable):
        return "message broker"
    return "temporarily"
