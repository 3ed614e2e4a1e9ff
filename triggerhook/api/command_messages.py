"""One command of the AMQP command channel: parse, apply, answer — no AMQP here.

See :mod:`triggerhook.api.commands` for the channel itself (the consumer) and
the message format. The bodies are parsed by :mod:`triggerhook.api.bodies`,
exactly as the HTTP API parses them. The types: ``create``, ``cancel``,
``reschedule``, and a series' ``pause``, ``resume``, ``trigger`` and
``backfill`` (:data:`COMMAND_TYPES`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from triggerhook.api.bodies import (
    BACKFILL_FIELDS,
    RESCHEDULE_FIELDS,
    parse_backfill,
    parse_cancel,
    parse_create,
    parse_reschedule,
)
from triggerhook.api.render import due_json, series_json
from triggerhook.api.scoped import ScopedHook
from triggerhook.app import Copied, TaskSpec
from triggerhook.domain.outcomes import (
    CANCEL_OUTCOMES,
    INSERT_OUTCOMES,
    RESCHEDULE_OUTCOMES,
    SERIES_OUTCOMES,
    Outcome,
)
from triggerhook.domain.task import RescheduleResult, SeriesResult, Task, TaskInfo
from triggerhook.errors import (
    AlreadyFiredError,
    ConflictError,
    Forbidden,
    OverQuota,
    TooLateError,
    ValidationError,
)

# A series' life: pause, resume, trigger, backfill (docs/api.md, "A series' life").
SERIES_TYPES = ("pause", "resume", "trigger", "backfill")
COMMAND_TYPES = ("create", "cancel", "reschedule", *SERIES_TYPES)
_ID_FIELD = frozenset({"id"})

Reply = dict[str, object]


class Disposition(enum.Enum):
    """What becomes of a command message with a given outcome."""

    ANSWERED = "answered"  # replied (if reply_to) and acked
    DEAD_LETTERED = "dead_lettered"  # replied (if reply_to) and dead-lettered: never retried
    REFUSED = "refused"  # dead-lettered before it was read, without a reply
    RETRIED = "retried"  # not answered: retried with back-off, or left to redeliver


@dataclass(frozen=True, slots=True)
class AmqpRendering:
    """An outcome on the command channel: the reply's ``ok``, its ``error.code``
    (``code``, else the outcome's) and message (``message``: this channel's
    template where it words the outcome its own way), the message's fate, and
    the values of its message the error object carries as fields of their own
    (``shows``: ``fired_ms`` of ``already_fired``, as the HTTP API's)."""

    ok: bool
    disposition: Disposition
    code: str | None = None
    message: str | None = None
    shows: tuple[str, ...] = ()


_ANSWERED = AmqpRendering(True, Disposition.ANSWERED)
_DEAD = AmqpRendering(False, Disposition.DEAD_LETTERED)
_REFUSED = AmqpRendering(False, Disposition.REFUSED)
_RETRIED = AmqpRendering(False, Disposition.RETRIED)

# Every outcome as the command channel answers it; None: it never gives it.
AMQP_RENDERING: dict[Outcome, AmqpRendering | None] = {
    Outcome.CREATED: _ANSWERED,
    Outcome.EXISTS: _ANSWERED,
    Outcome.REPLACED: _ANSWERED,
    Outcome.KEPT: _ANSWERED,
    Outcome.RESCHEDULED: _ANSWERED,
    Outcome.CANCELLED: _ANSWERED,
    Outcome.FOUND: None,  # no lookup command
    Outcome.PAUSED: _ANSWERED,
    Outcome.PAUSED_AFTER_THIS: _ANSWERED,
    Outcome.RESUMED: _ANSWERED,
    Outcome.ENDED: _ANSWERED,
    Outcome.TRIGGERED: _ANSWERED,
    Outcome.BACKFILLED: _ANSWERED,
    Outcome.CONFLICT: AmqpRendering(False, Disposition.ANSWERED),
    Outcome.NOT_FOUND: AmqpRendering(
        False, Disposition.ANSWERED, message="task {id!r} not found (unknown, or fired already)"
    ),
    Outcome.TOO_LATE: AmqpRendering(
        False, Disposition.ANSWERED, message="task {id!r} is being fired; too late to {action}"
    ),
    # The task's state says no, as not_found does: answered, never dead-lettered.
    Outcome.NOT_A_SERIES: AmqpRendering(False, Disposition.ANSWERED),
    # Refused like a conflict (answered), saying when the id fired.
    Outcome.ALREADY_FIRED: AmqpRendering(False, Disposition.ANSWERED, shows=("fired_ms",)),
    Outcome.INVALID: _DEAD,  # an oversized body too: field "body"
    Outcome.MALFORMED_JSON: _DEAD,
    Outcome.UNSUPPORTED_MEDIA_TYPE: None,  # HTTP's
    Outcome.TOO_LARGE: None,  # HTTP's; here an oversized body is INVALID
    Outcome.REQUEST_TIMEOUT: None,  # HTTP's
    Outcome.UNKNOWN_TYPE: _DEAD,
    Outcome.UNAUTHORIZED: _REFUSED,
    # Out of the token's namespace or scopes: refused as invalid input is.
    Outcome.FORBIDDEN: _DEAD,
    Outcome.FORBIDDEN_REPLY_TO: _REFUSED,
    Outcome.TOO_COSTLY: None,  # no command reads tasks in bulk
    Outcome.UNAVAILABLE: _RETRIED,
    Outcome.OVERLOADED: _RETRIED,
    # Answered and dead-lettered, not retried: a worker waiting on one
    # namespace's quota would hold up every other namespace's commands.
    Outcome.OVER_QUOTA: _DEAD,
    Outcome.STOPPING: _RETRIED,
    # After three failures in a row (triggerhook.api.commands). The error
    # itself goes to the daemon's log only: its text (a driver's message, a
    # user@host, SQL) is not for whoever may publish a command.
    Outcome.INTERNAL: AmqpRendering(False, Disposition.DEAD_LETTERED, code="internal_error"),
}


def _rendering(outcome: Outcome) -> AmqpRendering:
    rendering = AMQP_RENDERING[outcome]
    assert rendering is not None, f"{outcome} is not a command channel outcome"
    return rendering


def code_of(outcome: Outcome) -> str:
    """The ``error.code`` of ``outcome``'s reply (and dead letter)."""
    return _rendering(outcome).code or outcome.code


def message_of(outcome: Outcome, **values: object) -> str:
    """``outcome``'s message as this channel words it."""
    template = _rendering(outcome).message or outcome.template
    return template.format(**values)


def answer(outcome: Outcome, field: str | None = None, **values: object) -> Reply:
    """The reply of an outcome that is not a success (with the values it ``shows``)."""
    rendering = _rendering(outcome)
    assert not rendering.ok, f"{outcome} is a success"
    shown = {name: values[name] for name in rendering.shows}
    return _error(code_of(outcome), message_of(outcome, **values), field, shown)


def _success(outcome: Outcome, /, **fields: object) -> Reply:
    assert _rendering(outcome).ok, f"{outcome} is not a success"
    return {"ok": True, **fields}


def max_body_bytes(max_payload_bytes: int) -> int:
    """Largest command body accepted: room for the largest payload JSON-escaped
    (up to 6 bytes per byte) plus the other fields."""
    return 8 * max_payload_bytes + 65536


@dataclass(frozen=True, slots=True)
class Command:
    """A message as received: its AMQP ``type``, body and ``message_id``."""

    type: str | None
    body: bytes
    message_id: str | None = None
    redelivered: bool = False


class Rejected(Exception):
    """A malformed command: dead-lettered, never retried."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    @property
    def reason(self) -> str:
        """The text of the dead letter's error header."""
        if self.field is None:
            return f"{self.code}: {self.message}"
        return f"{self.code}: {self.field}: {self.message}"

    def reply(self) -> Reply:
        return _error(self.code, self.message, self.field)

    @classmethod
    def of(cls, outcome: Outcome, field: str | None = None, **values: object) -> Rejected:
        """A rejection for ``outcome``, its message filled with ``values``."""
        assert _rendering(outcome).disposition is not Disposition.ANSWERED, outcome
        return cls(code_of(outcome), message_of(outcome, **values), field)


def _error(
    code: str, message: str, field: str | None = None, shown: Mapping[str, object] | None = None
) -> Reply:
    error: dict[str, object] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    error.update(shown or {})
    return {"ok": False, "error": error}


def _invalid(exc: ValidationError) -> Rejected:
    return Rejected.of(Outcome.INVALID, exc.field, detail=exc.message)


def execute(hook: ScopedHook, command: Command, body_limit: int) -> Reply:
    """Apply one command, as far as ``hook``'s token may, and return its
    answer; returns once committed.

    Raises :class:`Rejected` for a malformed command, or one outside the
    token's namespace or scopes (nothing written), and lets
    :class:`~triggerhook.errors.TransientError` through (retry it).
    """
    if command.type not in COMMAND_TYPES:
        given = "no type property" if command.type is None else f"type {command.type!r}"
        raise Rejected.of(Outcome.UNKNOWN_TYPE, given=given, expected=", ".join(COMMAND_TYPES))
    document = decode(command.body, body_limit)
    try:
        if command.type == "create":
            return _create(hook, document, command)
        if command.type == "cancel":
            return _cancel(hook, document)
        if command.type == "reschedule":
            return _reschedule(hook, document)
        return _series(hook, command.type, document)
    except Forbidden as exc:
        raise Rejected.of(Outcome.FORBIDDEN, detail=exc) from None
    except OverQuota as exc:
        raise Rejected.of(Outcome.OVER_QUOTA, detail=exc) from None


def oversized(size: int, body_limit: int) -> Rejected:
    """The rejection of a body of ``size`` bytes, over ``body_limit``."""
    return Rejected.of(
        Outcome.INVALID, "body", detail=f"is {size} bytes, over the limit of {body_limit}"
    )


def decode(body: bytes, body_limit: int) -> object:
    """The JSON document of a command body (UTF-8; NaN and Infinity refused)."""
    if len(body) > body_limit:
        raise oversized(len(body), body_limit)
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise Rejected.of(Outcome.MALFORMED_JSON, what="UTF-8", detail=exc.reason) from None
    except (ValueError, RecursionError) as exc:
        raise Rejected.of(Outcome.MALFORMED_JSON, what="valid JSON", detail=exc) from None


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _create(hook: ScopedHook, document: object, command: Command) -> Reply:
    try:
        spec = parse_create(document)
        named = hook.id_of_message(command.message_id) if spec.id is None else None
        if named is not None:
            # The message id names the task, so a redelivered command is applied once.
            spec = dataclasses.replace(spec, id=named)
        scheduled = hook.schedule(spec)
    except ValidationError as exc:
        raise _invalid(exc) from None
    except TooLateError as exc:
        return answer(Outcome.TOO_LATE, id=exc.task_id, action="replace")
    except AlreadyFiredError as exc:  # a redelivery's own task, fired since, too
        return _already_fired(exc)
    except ConflictError as exc:
        stored = _redelivered_delay(hook, command, spec)
        if stored is None:
            return answer(Outcome.CONFLICT, id=exc.task_id)
        return _created(Outcome.EXISTS, stored)
    return _created(INSERT_OUTCOMES[scheduled.outcome], scheduled.task)


def _already_fired(exc: AlreadyFiredError) -> Reply:
    return answer(Outcome.ALREADY_FIRED, id=exc.task_id, fired_ms=exc.fired_ms)


def _created(outcome: Outcome, task: Task) -> Reply:
    """A create's reply: the task's id and due time (the stored task's when
    KEPT), ``created`` (kept for older callers) and the outcome."""
    return _success(
        outcome,
        **due_json(task.id, task.due_ms),
        created=outcome is Outcome.CREATED,
        outcome=outcome.code,
    )


def _redelivered_delay(hook: ScopedHook, command: Command, spec: TaskSpec) -> Task | None:
    """The stored task, if this conflict is a redelivered ``delay`` create meeting
    its own earlier application (the due time, computed from the time of
    receipt, is all that differs)."""
    if not command.redelivered or spec.delay_ms is None:
        return None
    task = hook.resolve(spec)  # valid: the conflict came after its validation
    info: TaskInfo | None = hook.get(task.id)
    if info is None:
        return None
    stored = info.task
    if stored.routing_key == task.routing_key and stored.payload == task.payload:
        return stored
    return None


def _cancel(hook: ScopedHook, document: object) -> Reply:
    try:
        task_id = parse_cancel(document)
        result = hook.cancel(task_id)
    except ValidationError as exc:
        raise _invalid(exc) from None
    outcome = CANCEL_OUTCOMES[result]
    if outcome.ok:
        return _success(outcome, id=task_id)
    return answer(outcome, id=task_id, action="cancel")


def _reschedule(hook: ScopedHook, document: object) -> Reply:
    try:
        when = parse_reschedule(document, extra=_ID_FIELD)
        task_id = parse_cancel(document, extra=RESCHEDULE_FIELDS)
        moved = hook.reschedule(task_id, at_ms=when.at_ms, delay_ms=when.delay_ms)
    except ValidationError as exc:
        raise _invalid(exc) from None
    if moved.result is RescheduleResult.RESCHEDULED and moved.task is not None:
        return _success(Outcome.RESCHEDULED, **due_json(task_id, moved.task.due_ms))
    outcome = RESCHEDULE_OUTCOMES[moved.result]
    if outcome.ok:  # rescheduled, and yet no task: it is gone
        outcome = Outcome.NOT_FOUND
    return answer(outcome, id=task_id, action="reschedule")


def _series(hook: ScopedHook, type_: str, document: object) -> Reply:
    """A series' pause, resume, trigger (``{"id"}``) or backfill (``{"id",
    "from_ms", "to_ms"}``): replied as the HTTP API answers it, with ``ok``."""
    try:
        if type_ == "backfill":
            span = parse_backfill(document, extra=_ID_FIELD)
            task_id = parse_cancel(document, extra=BACKFILL_FIELDS)
            done: Copied | SeriesResult = hook.backfill(
                task_id, from_ms=span.from_ms, to_ms=span.to_ms
            )
        else:
            task_id = parse_cancel(document)
            done = _SERIES_CALLS[type_](hook, task_id)
    except ValidationError as exc:
        raise _invalid(exc) from None
    except AlreadyFiredError as exc:  # a trigger's copy fired within the series' window
        return _already_fired(exc)
    except ConflictError as exc:  # a copy's id holds another task
        return answer(Outcome.CONFLICT, id=exc.task_id)
    result, copies = (done.result, done.copies) if isinstance(done, Copied) else (done, None)
    outcome = SERIES_OUTCOMES[result]
    if not outcome.ok:
        return answer(outcome, id=task_id)
    return _success(outcome, **series_json(task_id, outcome, copies))


_SERIES_CALLS: dict[str, Callable[[ScopedHook, str], Copied | SeriesResult]] = {
    "pause": ScopedHook.pause,
    "resume": ScopedHook.resume,
    "trigger": ScopedHook.trigger,
}
