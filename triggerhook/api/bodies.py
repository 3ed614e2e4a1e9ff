"""Request bodies of the HTTP API and the AMQP command channel, parsed from JSON.

Pure functions: a decoded JSON value in, a :class:`~triggerhook.domain.spec.TaskSpec`
(or a due time) out, or a :class:`ValidationError` naming the offending field
as the caller wrote it (``at``, ``tasks[3].payload_b64``). The due time is
checked here in full (``at`` in 1970-9999, ``delay`` at most ``MAX_DELAY_S``),
so the library never refuses it under its own names (``at_ms``, ``delay_ms``). Both interfaces use
these, so they accept exactly the same bodies. :func:`decode_json` turns the
HTTP API's body bytes into such a value.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from triggerhook.domain.meta import LateKind, LatePolicy, parse_late
from triggerhook.domain.spec import TaskSpec
from triggerhook.domain.timeparse import parse_at, seconds_to_ms
from triggerhook.errors import ValidationError

CREATE_FIELDS = frozenset(
    {
        "id",
        "at",
        "delay",
        "routing_key",
        "payload",
        "payload_b64",
        "tags",
        "content_type",
        "content_encoding",
        "headers",
        "late",
        "every",
        "cron",
        "timezone",
        "until",
    }
)
RESCHEDULE_FIELDS = frozenset({"at", "delay"})
# Longest delay accepted (about 6,300 years; also in the OpenAPI document).
MAX_DELAY_S = 200_000_000_000
# Not task ids over the interfaces: ``/v1/tasks/<these>`` are other endpoints.
RESERVED_IDS = frozenset({"batch", "count", "timeline", "cancel"})

# msgspec decodes a 4 MiB batch body about 2.5 times as fast as json.loads (the
# GIL is held for the whole decode, delaying the firing threads), and, like
# json.loads with parse_constant, rejects NaN and Infinity.
_DECODER = msgspec.json.Decoder()
# Only for bodies with a number beyond the float range, which _DECODER refuses:
# json.loads made such a number ±inf (then rejected as a field value, 422).
_WIDE_DECODER = msgspec.json.Decoder(float_hook=float)


class MalformedJson(ValueError):
    """The bytes are not one JSON document (UTF-8; no NaN or Infinity; nested
    at most a few hundred levels; integers of at most a few thousand digits)."""


def decode_json(raw: bytes) -> object:
    """The JSON value ``raw`` holds; :class:`MalformedJson` if it is not JSON."""
    try:
        try:
            return _DECODER.decode(raw)
        except msgspec.ValidationError:  # untyped: only a number out of range
            return _WIDE_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise MalformedJson(str(exc)) from None


@dataclass(frozen=True, slots=True)
class When:
    """A due time as given: exactly one of absolute ``at_ms`` or ``delay_ms``."""

    at_ms: int | None = None
    delay_ms: int | None = None


def parse_create(body: object, prefix: str = "") -> TaskSpec:
    """A create body: ``{"id"?, "at" | "delay", "routing_key"?, "payload"? |
    "payload_b64"?, "tags"?, "content_type"?, "content_encoding"?,
    "headers"?, "late"?, "every"? | "cron"?, "timezone"?, "until"?}`` (the
    metadata is checked by domain/meta.py, a series by domain/recurrence.py,
    which also gives its first time when it has neither at nor delay)."""
    fields = _object(body, prefix, CREATE_FIELDS)
    series = "every" in fields or "cron" in fields
    untimed = series and "at" not in fields and "delay" not in fields
    when = When() if untimed else _when(fields, prefix)
    if "payload" in fields and "payload_b64" in fields:
        raise ValidationError(_name(prefix, "payload"), "give at most one of payload, payload_b64")
    payload: bytes | str | None = None
    if "payload" in fields:
        payload = _string(fields, "payload", prefix)
    elif "payload_b64" in fields:
        payload = _base64(_string(fields, "payload_b64", prefix), _name(prefix, "payload_b64"))
    task_id = _optional_string(fields, "id", prefix)
    if task_id in RESERVED_IDS:
        raise ValidationError(_name(prefix, "id"), f"{task_id!r} is reserved")
    return TaskSpec(
        id=task_id,
        at_ms=when.at_ms,
        delay_ms=when.delay_ms,
        routing_key=_optional_string(fields, "routing_key", prefix),
        payload=payload,
        tags=_unchecked(fields, "tags", prefix),
        content_type=_unchecked(fields, "content_type", prefix),
        content_encoding=_unchecked(fields, "content_encoding", prefix),
        headers=_unchecked(fields, "headers", prefix),
        late=_late(fields["late"], _name(prefix, "late")) if "late" in fields else None,
        every=_every(fields, prefix),
        cron=_unchecked(fields, "cron", prefix),
        timezone=_unchecked(fields, "timezone", prefix),
        until=_unchecked(fields, "until", prefix),
    )


def _unchecked(fields: Mapping[str, object], key: str, prefix: str) -> Any:
    """A metadata field as given: resolve() checks it (domain/meta.py's make_meta);
    null is refused here (absent means "none", as for every other field)."""
    if key in fields and fields[key] is None:
        raise ValidationError(_name(prefix, key), "must not be null (leave the field out)")
    return fields.get(key)


def _every(fields: Mapping[str, object], prefix: str) -> str | None:
    """``every`` as text only (the library's int of milliseconds is not JSON's)."""
    value = _unchecked(fields, "every", prefix)
    if value is not None and not isinstance(value, str):
        raise ValidationError(_name(prefix, "every"), "must be an ISO 8601 duration such as PT15M")
    return value


def _late(value: object, field: str) -> LatePolicy:
    """``"fire"``, ``{"skip_after_ms": N}`` or ``{"deadline": time}`` (as ``at``)."""
    if isinstance(value, Mapping) and len(value) == 1 and "deadline" in value:
        deadline = value["deadline"]
        if isinstance(deadline, bool) or not isinstance(deadline, int | float | str):
            raise ValidationError(
                f"{field}.deadline", "must be epoch seconds (a number) or an RFC 3339 string"
            )
        return LatePolicy(LateKind.DEADLINE, parse_at(deadline, f"{field}.deadline", past_ok=True))
    if isinstance(value, Mapping) and "deadline_ms" in value:
        raise ValidationError(f"{field}.deadline_ms", "unknown (allowed: skip_after_ms, deadline)")
    return parse_late(value, field)


def parse_batch(body: object, max_tasks: int) -> list[TaskSpec]:
    """A batch body: ``{"tasks": [create body, ...]}`` with 1..``max_tasks`` tasks."""
    fields = _object(body, "", frozenset({"tasks"}))
    tasks = fields.get("tasks")
    if not isinstance(tasks, list):
        raise ValidationError("tasks", "must be a list of tasks")
    if not 1 <= len(tasks) <= max_tasks:
        raise ValidationError("tasks", f"must hold 1 to {max_tasks} tasks, got {len(tasks)}")
    return [parse_create(task, f"tasks[{index}]") for index, task in enumerate(tasks)]


def parse_reschedule(body: object, extra: frozenset[str] = frozenset()) -> When:
    """A reschedule body: ``{"at" | "delay"}`` (plus ``extra`` fields the caller reads)."""
    return _when(_object(body, "", RESCHEDULE_FIELDS | extra), "")


def parse_cancel(body: object, extra: frozenset[str] = frozenset()) -> str:
    """A cancel command's body ``{"id"}`` (plus ``extra`` fields the caller reads): the id."""
    return parse_id(_object(body, "", frozenset({"id"}) | extra))


def parse_id(body: object) -> str:
    """The ``id`` of a cancel or reschedule command body."""
    if not isinstance(body, Mapping):
        raise ValidationError("body", "must be a JSON object")
    if "id" not in body:
        raise ValidationError("id", "is required")
    value = body["id"]
    if not isinstance(value, str):
        raise ValidationError("id", "must be a string")
    return value


def _object(body: object, prefix: str, allowed: frozenset[str]) -> Mapping[str, object]:
    if not isinstance(body, Mapping):
        raise ValidationError(prefix or "body", "must be a JSON object")
    if body.keys() <= allowed:  # the usual case, checked in C
        return body
    for key in body:
        if key not in allowed:
            raise ValidationError(
                _name(prefix, str(key)), f"unknown field (allowed: {', '.join(sorted(allowed))})"
            )
    return body


def _when(fields: Mapping[str, object], prefix: str) -> When:
    if ("at" in fields) == ("delay" in fields):
        raise ValidationError(_name(prefix, "at"), "give exactly one of at and delay")
    if "at" in fields:
        at = fields["at"]
        if isinstance(at, bool) or not isinstance(at, int | float | str):
            raise ValidationError(
                _name(prefix, "at"), "must be epoch seconds (a number) or an RFC 3339 string"
            )
        # Any past time means "now"; before 1970 it is stored as the epoch.
        return When(at_ms=parse_at(at, _name(prefix, "at"), past_ok=True))
    return When(delay_ms=_delay_ms(fields["delay"], _name(prefix, "delay")))


def _delay_ms(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, "must be a number of seconds")
    # Compared before any conversion (an int may have thousands of digits).
    if (isinstance(value, float) and not math.isfinite(value)) or not 0 <= value <= MAX_DELAY_S:
        raise ValidationError(field, "must be a finite, non-negative number of seconds")
    # The one time parser: exact, and sub-millisecond parts round up (never early).
    return seconds_to_ms(value, field)


def _string(fields: Mapping[str, object], key: str, prefix: str) -> str:
    value = fields[key]
    if not isinstance(value, str):
        raise ValidationError(_name(prefix, key), "must be a string")
    return value


def _optional_string(fields: Mapping[str, object], key: str, prefix: str) -> str | None:
    return _string(fields, key, prefix) if key in fields else None


def _base64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(field, "is not valid base64") from None


def _name(prefix: str, field: str) -> str:
    return f"{prefix}.{field}" if prefix else field
