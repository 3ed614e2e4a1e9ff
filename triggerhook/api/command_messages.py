"""One command of the AMQP command channel: parse, apply, answer — no AMQP here.

See :mod:`triggerhook.api.commands` for the channel itself (the consumer) and
the message format. The bodies are parsed by :mod:`triggerhook.api.bodies`,
exactly as the HTTP API parses them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from triggerhook.api.bodies import (
    RESCHEDULE_FIELDS,
    parse_cancel,
    parse_create,
    parse_reschedule,
    rename_field,
)
from triggerhook.app import TaskSpec, TriggerHook
from triggerhook.domain.task import ID_PATTERN, CancelResult, RescheduleResult, Task, TaskInfo
from triggerhook.errors import ConflictError, ValidationError
from triggerhook.settings import Settings

COMMAND_TYPES = ("create", "cancel", "reschedule")
_ID_FIELD = frozenset({"id"})

Reply = dict[str, object]


def max_body_bytes(settings: Settings) -> int:
    """Largest command body accepted: room for the largest payload JSON-escaped
    (up to 6 bytes per byte) plus the other fields."""
    return 8 * settings.max_payload_bytes + 65536


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


def _error(code: str, message: str, field: str | None = None) -> Reply:
    error: dict[str, object] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return {"ok": False, "error": error}


def _invalid(exc: ValidationError) -> Rejected:
    renamed = rename_field(exc)
    return Rejected("invalid", renamed.message, renamed.field)


def _seconds(due_ms: int) -> float:
    return due_ms / 1000


def execute(hook: TriggerHook, command: Command, body_limit: int) -> Reply:
    """Apply one command and return its answer; returns once committed.

    Raises :class:`Rejected` for a malformed command (nothing written) and lets
    :class:`~triggerhook.errors.TransientError` through (retry it).
    """
    if command.type not in COMMAND_TYPES:
        given = "no type property" if command.type is None else f"type {command.type!r}"
        raise Rejected("unknown_type", f"{given}; expected one of {', '.join(COMMAND_TYPES)}")
    document = decode(command.body, body_limit)
    if command.type == "create":
        return _create(hook, document, command)
    if command.type == "cancel":
        return _cancel(hook, document)
    return _reschedule(hook, document)


def decode(body: bytes, body_limit: int) -> object:
    """The JSON document of a command body (UTF-8; NaN and Infinity refused)."""
    if len(body) > body_limit:
        raise Rejected("invalid", f"is {len(body)} bytes, over the limit of {body_limit}", "body")
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise Rejected("malformed_json", f"body is not UTF-8: {exc.reason}") from None
    except (ValueError, RecursionError) as exc:
        raise Rejected("malformed_json", f"body is not valid JSON: {exc}") from None


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _create(hook: TriggerHook, document: object, command: Command) -> Reply:
    try:
        spec = parse_create(document)
        if spec.id is None and command.message_id and ID_PATTERN.fullmatch(command.message_id):
            # The message id names the task, so a redelivered command is applied once.
            spec = dataclasses.replace(spec, id=command.message_id)
        task = hook.task_from(spec)
        scheduled = hook.schedule(
            task.id, at_ms=task.due_ms, routing_key=task.routing_key, payload=task.payload
        )
    except ValidationError as exc:
        raise _invalid(exc) from None
    except ConflictError as exc:
        stored = _redelivered_delay(hook, command, spec, task)
        if stored is None:
            return _error("conflict", str(exc))
        return {"ok": True, "id": task.id, "at": _seconds(stored.due_ms), "created": False}
    return {
        "ok": True,
        "id": task.id,
        "at": _seconds(scheduled.task.due_ms),
        "created": scheduled.created,
    }


def _redelivered_delay(
    hook: TriggerHook, command: Command, spec: TaskSpec, task: Task
) -> Task | None:
    """The stored task, if this conflict is a redelivered ``delay`` create meeting
    its own earlier application (the due time, computed from the time of
    receipt, is all that differs)."""
    if not command.redelivered or spec.delay_ms is None:
        return None
    info: TaskInfo | None = hook.get(task.id)
    if info is None:
        return None
    stored = info.task
    if stored.routing_key == task.routing_key and stored.payload == task.payload:
        return stored
    return None


def _cancel(hook: TriggerHook, document: object) -> Reply:
    try:
        task_id = parse_cancel(document)
        result = hook.cancel(task_id)
    except ValidationError as exc:
        raise _invalid(exc) from None
    if result is CancelResult.CANCELLED:
        return {"ok": True, "id": task_id}
    if result is CancelResult.NOT_FOUND:
        return _error("not_found", f"task {task_id!r} not found (unknown, or fired already)")
    return _error("too_late", f"task {task_id!r} is being fired; too late to cancel")


def _reschedule(hook: TriggerHook, document: object) -> Reply:
    try:
        when = parse_reschedule(document, extra=_ID_FIELD)
        task_id = parse_cancel(document, extra=RESCHEDULE_FIELDS)
        moved = hook.reschedule(task_id, at_ms=when.at_ms, delay_ms=when.delay_ms)
    except ValidationError as exc:
        raise _invalid(exc) from None
    if moved.result is RescheduleResult.RESCHEDULED and moved.task is not None:
        return {"ok": True, "id": task_id, "at": _seconds(moved.task.due_ms)}
    if moved.result is RescheduleResult.TOO_LATE:
        return _error("too_late", f"task {task_id!r} is being fired; too late to reschedule")
    return _error("not_found", f"task {task_id!r} not found (unknown, or fired already)")
