"""Request bodies of the HTTP API and the AMQP command channel, parsed from JSON.

Pure functions: a decoded JSON value in, a :class:`~triggerhook.domain.spec.TaskSpec`
(or a due time) out, or a :class:`ValidationError` naming the offending field
as the caller wrote it (``at_ms``, ``tasks[3].payload_b64``). Both interfaces use
these, so they accept exactly the same bodies. :func:`decode_json` turns the
HTTP API's body bytes into such a value.

Units (docs/api.md, "Units"): an instant is epoch milliseconds in a field named
``*_ms`` (``at_ms``, ``until_ms``, ``deadline_ms``) or RFC 3339 text in one
without a suffix (``at``, ``until``, ``deadline``; no offset: UTC); a duration
is milliseconds (``delay_ms``). The older spellings still work, deprecated: a
number in ``at``, ``until`` or ``deadline`` (epoch seconds) and ``delay``
(seconds). The due time is checked here in full (1970-9999, any past time
meaning now; a delay at most ``MAX_DELAY_S``), so the library never refuses it.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from triggerhook_client.rules import RESERVED_IDS

from triggerhook.api.fields import names
from triggerhook.api.fields_task import (
    BACKFILL_BODY,
    CREATE_FIELDS,
    MAX_DELAY_MS,
    MAX_DELAY_S,
    WHEN,
    WHEN_BODY,
)
from triggerhook.domain.meta import LateKind, LatePolicy, parse_late
from triggerhook.domain.spec import TaskSpec
from triggerhook.domain.task import MAX_DUE_MS, MIN_DUE_MS, validate_due_ms
from triggerhook.domain.timeparse import parse_at, seconds_to_ms
from triggerhook.errors import ValidationError

# The fields each body may give, and the delay's bound, are defined once with
# their schemas (triggerhook.api.fields_task, which the OpenAPI document states).
WHEN_FIELDS = WHEN  # the ways to say when a task is due: exactly one (a series may give none)
RESCHEDULE_FIELDS = names(WHEN_BODY)
BACKFILL_FIELDS = names(BACKFILL_BODY)

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
    """A create body: ``{"id"?, "at" | "at_ms" | "delay_ms" | "delay",
    "routing_key"?, "payload"? | "payload_b64"?, "tags"?, "content_type"?,
    "content_encoding"?, "headers"?, "late"?, "dedup_window_ms"?, "every"? | "cron"?,
    "timezone"?, "until"? | "until_ms"?, "dst_repeated"?, "dst_skipped"?, "catch_up"?,
    "catch_up_max"?, "on_conflict"?}``
    (the metadata is checked by domain/meta.py, a series by
    domain/recurrence.py, which also gives its first time when it has none of
    the due-time fields; ``on_conflict`` by domain/spec.py)."""
    fields = _object(body, prefix, CREATE_FIELDS)
    series = "every" in fields or "cron" in fields
    untimed = series and not any(name in fields for name in WHEN_FIELDS)
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
        dedup_window_ms=_unchecked(fields, "dedup_window_ms", prefix),  # by make_meta
        every=_every(fields, prefix),
        cron=_unchecked(fields, "cron", prefix),
        timezone=_unchecked(fields, "timezone", prefix),
        until=_unchecked(fields, "until", prefix),
        until_ms=_until_ms(fields, prefix),
        dst_repeated=_unchecked(fields, "dst_repeated", prefix),
        dst_skipped=_unchecked(fields, "dst_skipped", prefix),
        catch_up=_unchecked(fields, "catch_up", prefix),
        catch_up_max=_count(fields, "catch_up_max", prefix),
        on_conflict=_unchecked(fields, "on_conflict", prefix),  # checked by conflict_rule
    )


def _until_ms(fields: Mapping[str, object], prefix: str) -> int | None:
    """``until_ms`` (resolve() parses ``until``, and refuses both)."""
    return epoch_ms(fields["until_ms"], _name(prefix, "until_ms")) if "until_ms" in fields else None


def _unchecked(fields: Mapping[str, object], key: str, prefix: str) -> Any:
    """A metadata field as given: resolve() checks it (domain/meta.py's make_meta);
    null is refused here (absent means "none", as for every other field)."""
    if key in fields and fields[key] is None:
        raise ValidationError(_name(prefix, key), "must not be null (leave the field out)")
    return fields.get(key)


def _count(fields: Mapping[str, object], key: str, prefix: str) -> Any:
    """A whole number as JSON gives it (5.0 is 5, as JSON Schema's integer
    admits it); resolve() checks its range, and refuses anything else."""
    value = _unchecked(fields, key, prefix)
    whole = _integral(value)
    return value if whole is None else whole


def _every(fields: Mapping[str, object], prefix: str) -> str | None:
    """``every`` as text only (the library's int of milliseconds is not JSON's)."""
    value = _unchecked(fields, "every", prefix)
    if value is not None and not isinstance(value, str):
        raise ValidationError(_name(prefix, "every"), "must be an ISO 8601 duration such as PT15M")
    return value


def _late(value: object, field: str) -> LatePolicy:
    """``"fire"``, ``{"skip_after_ms": N}``, ``{"deadline_ms": N}`` (as ``at_ms``)
    or ``{"deadline": time}`` (as ``at``)."""
    if isinstance(value, Mapping) and len(value) == 1 and "deadline" in value:
        return LatePolicy(LateKind.DEADLINE, _time(value["deadline"], f"{field}.deadline"))
    if isinstance(value, Mapping) and len(value) == 1 and "deadline_ms" in value:
        return LatePolicy(LateKind.DEADLINE, epoch_ms(value["deadline_ms"], f"{field}.deadline_ms"))
    if isinstance(value, Mapping) and len(value) == 1 and "skip_after_ms" not in value:
        ((key, _),) = value.items()
        raise ValidationError(
            f"{field}.{key}", "unknown (allowed: skip_after_ms, deadline_ms, deadline)"
        )
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
    """A reschedule body: ``{"at" | "at_ms" | "delay_ms" | "delay"}`` (plus
    ``extra`` fields the caller reads)."""
    return _when(_object(body, "", RESCHEDULE_FIELDS | extra), "")


@dataclass(frozen=True, slots=True)
class Backfill:
    """A backfill's range of epoch ms: ``from_ms`` included, ``to_ms`` not."""

    from_ms: int
    to_ms: int


def parse_backfill(body: object, extra: frozenset[str] = frozenset()) -> Backfill:
    """A backfill body: ``{"from_ms", "to_ms"}`` (plus ``extra`` fields the
    caller reads). Each is an instant within the due-time bounds; how they
    relate (``to_ms`` after ``from_ms``, not after now, few enough
    occurrences between) the library checks, against the series."""
    fields = _object(body, "", BACKFILL_FIELDS | extra)
    return Backfill(_range_end(fields, "from_ms"), _range_end(fields, "to_ms"))


def _range_end(fields: Mapping[str, object], key: str) -> int:
    """Strict, unlike ``at_ms``: a past time does not mean "now" here."""
    if key not in fields:
        raise ValidationError(key, "is required")
    ms = _integral(fields[key])
    if ms is None or not MIN_DUE_MS <= ms <= MAX_DUE_MS:
        raise ValidationError(
            key, f"must be a whole number of epoch milliseconds, {MIN_DUE_MS} to {MAX_DUE_MS}"
        )
    return ms


def parse_no_fields(body: object) -> None:
    """A body that names nothing: a pause's, resume's or trigger's over HTTP,
    when one is sent at all (``{}``)."""
    _object(body, "", frozenset())


def parse_cancel(body: object, extra: frozenset[str] = frozenset()) -> str:
    """A cancel command's body ``{"id"}`` (plus ``extra`` fields the caller
    reads): the id. Also a pause's, resume's and trigger's."""
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
    given = [name for name in WHEN_FIELDS if name in fields]
    if len(given) != 1:
        named = f" (given: {', '.join(given)})" if given else ""
        raise ValidationError(
            _name(prefix, given[0] if given else "at"),
            f"give exactly one of at, at_ms and delay_ms{named}",
        )
    [name] = given
    field, value = _name(prefix, name), fields[name]
    if name == "at":
        return When(at_ms=_time(value, field))
    if name == "at_ms":
        return When(at_ms=epoch_ms(value, field))
    if name == "delay_ms":
        return When(delay_ms=_whole_delay_ms(value, field))
    return When(delay_ms=_delay_ms(value, field))


def _time(value: object, field: str) -> int:
    """``at``, ``until`` or a ``deadline``: RFC 3339 text (or, deprecated, epoch
    seconds) to epoch ms. Any past time means "now"; before 1970 it is the epoch."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError(field, "must be an RFC 3339 string (or epoch seconds, a number)")
    return parse_at(value, field, past_ok=True)


def epoch_ms(value: object, field: str) -> int:
    """An instant in epoch milliseconds (``at_ms``, ``until_ms``, ``deadline_ms``):
    a whole number (JSON's 5.0 too) up to 9999-12-31T23:59:59.999Z; as for
    ``at``, any past time means "now" (before 1970: the epoch)."""
    ms = _integral(value)
    if ms is None:
        raise ValidationError(field, "must be a whole number of epoch milliseconds")
    try:
        return validate_due_ms(max(ms, MIN_DUE_MS))
    except ValidationError as exc:
        raise ValidationError(field, exc.message) from None


def _whole_delay_ms(value: object, field: str) -> int:
    delay_ms = _integral(value)
    if delay_ms is None or not 0 <= delay_ms <= MAX_DELAY_MS:
        raise ValidationError(field, f"must be a whole number of milliseconds, 0 to {MAX_DELAY_MS}")
    return delay_ms


def _integral(value: object) -> int | None:
    """An int, or a float with no fraction (JSON's 5.0) as one; None: neither."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _delay_ms(value: object, field: str) -> int:
    """``delay``, deprecated: seconds (a fraction allowed, rounded up to the ms)."""
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
