"""The requests' bodies, paths and query strings, built from the caller's
arguments and checked as far as the client can (no I/O here).

Each builder returns what it sends and, where the client sends a field under
another name than the caller gave (a delay sent as the absolute ``at_ms``),
the renames that make the daemon's errors name the caller's argument.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypedDict, cast

from triggerhook_client import times
from triggerhook_client.checks import deprecated, invalid, is_int, utf8
from triggerhook_client.results import At, State, TaskRequest
from triggerhook_client.rules import (
    DUE_RANGE_FIELDS,
    ID_PATTERN,
    ID_RULE,
    RESERVED_IDS,
    SELECTION_FIELDS,
    STATE_FIELD,
    TaskState,
    in_ms,
)
from triggerhook_client.times import (
    delay_at_ms,
    delay_s_at_ms,
    due_ms,
    epoch_ms,
    every_ms,
    instant,
    instant_field,
)

_ONE_WHEN = "give exactly one of at, at_ms and delay_ms"

Body = dict[str, object]
Renames = dict[str, str]  # API field -> the caller's name


def when_body(
    at: object, at_ms: object, delay_ms: object, delay_s: object, prefix: str = ""
) -> tuple[Body, Renames]:
    """The due time of a body: ``at`` (RFC 3339 text) or ``at_ms``. A delay is
    made absolute here, so that a retry sends the same instant."""
    given = {"at": at, "at_ms": at_ms, "delay_ms": delay_ms, "delay_s": delay_s}
    named = [name for name, value in given.items() if value is not None]
    if len(named) != 1:
        listed = f" (given: {', '.join(named)})" if named else ""
        raise invalid(f"{prefix}{named[0] if named else 'at'}", _ONE_WHEN + listed)
    [name] = named
    field = f"{prefix}{name}"
    if name == "at_ms":
        return {"at_ms": epoch_ms(at_ms, field)}, {}
    if name == "delay_ms":
        return {"at_ms": delay_at_ms(delay_ms, field)}, {f"{prefix}at_ms": field}
    if name == "delay_s":
        deprecated("delay_s is deprecated: give delay_ms (milliseconds)")
        return {"at_ms": delay_s_at_ms(delay_s, field)}, {f"{prefix}at_ms": field}
    return _instant_body("at", at, prefix)


def _instant_body(key: str, value: object, prefix: str) -> tuple[Body, Renames]:
    """An instant the caller gave as ``key``: sent as text under ``key``, or
    (a deprecated number) in ms under ``<key>_ms``, the daemon's errors on
    which name ``key``."""
    sent = instant(value, f"{prefix}{key}")
    if isinstance(sent, str):
        return {key: sent}, {}
    return {f"{key}_ms": sent}, {f"{prefix}{key}_ms": f"{prefix}{key}"}


def _task_when(task: TaskRequest, prefix: str) -> tuple[Body, Renames]:
    """The due time of a task's body, and the field renames. A series given no
    time gets the one the daemon would choose had it received the request as
    it is sent: one ``every`` from now, or for ``cron`` now itself, which the
    daemon moves to the first matching minute at or after it (as it does to
    an untimed series on arrival) — so that a retry names the same first
    occurrence instead of the daemon choosing a later one."""
    every = None if task.every is None else every_ms(task.every, f"{prefix}every")
    given = (task.at, task.at_ms, task.delay_ms, task.delay_s)
    if any(value is not None for value in given):
        return when_body(*given, prefix)
    if every is None and task.cron is None:
        raise invalid(f"{prefix}at", f"{_ONE_WHEN} (a series, with every or cron, may give none)")
    source = "every" if every is not None else "cron"
    at_ms = due_ms(math.ceil(times.now_ms()) + (every or 0), f"{prefix}{source}")
    return {"at_ms": at_ms}, {f"{prefix}at_ms": f"{prefix}{source}"}


def task_body(task: TaskRequest, prefix: str = "") -> tuple[Body, Renames]:
    # A missing id is chosen here, not by the daemon: a retry must name the same task.
    body: Body = {"id": str(uuid.uuid4()) if task.id is None else task.id}
    when, rename = _task_when(task, prefix)
    body.update(when)
    if task.routing_key is not None:
        body["routing_key"] = task.routing_key
    if isinstance(task.payload, bytes | bytearray):
        body["payload_b64"] = base64.b64encode(task.payload).decode("ascii")
    elif isinstance(task.payload, str):
        body["payload"] = utf8(task.payload, f"{prefix}payload")
    elif task.payload is not None:
        raise invalid(f"{prefix}payload", "must be bytes or text")
    meta, renamed = _meta_body(task, prefix)
    body.update(meta)
    rename.update(renamed)
    series, renamed = _series_body(task, prefix)
    body.update(series)
    rename.update(renamed)
    if task.on_conflict is not None:  # its values are the daemon's to check
        body["on_conflict"] = utf8(task.on_conflict, f"{prefix}on_conflict")
    return body, rename


def _series_body(task: TaskRequest, prefix: str) -> tuple[Body, Renames]:
    """A series' fields as given (``every`` already parsed; the daemon checks the
    cron expression, the time zone and the policies' values)."""
    body: Body = {}
    for name in ("every", "cron", "timezone", "dst_repeated", "dst_skipped", "catch_up"):
        value = getattr(task, name)
        if value is not None:
            body[name] = utf8(value, f"{prefix}{name}")
    if task.catch_up_max is not None:  # its bounds, and that it needs catch_up all: the daemon's
        if not is_int(task.catch_up_max):
            raise invalid(f"{prefix}catch_up_max", "must be a whole number")
        body["catch_up_max"] = task.catch_up_max
    if task.until is not None and task.until_ms is not None:
        raise invalid(f"{prefix}until", "give at most one of until and until_ms")
    if task.until_ms is not None:
        body["until_ms"] = epoch_ms(task.until_ms, f"{prefix}until_ms")
    if task.until is None:
        return body, {}
    until, rename = _instant_body("until", task.until, prefix)
    return {**body, **until}, rename


def _meta_body(task: TaskRequest, prefix: str) -> tuple[Body, Renames]:
    """The metadata fields given (their rules are the daemon's: it names the
    offending field, ``tags[1]``, ``headers.x-foo``); checked here only as far
    as the body needs to be JSON the daemon can read."""
    body: Body = {}
    rename: Renames = {}
    if task.tags is not None:
        body["tags"] = _tags_body(task.tags, f"{prefix}tags")
    if task.content_type is not None:
        body["content_type"] = utf8(task.content_type, f"{prefix}content_type")
    if task.content_encoding is not None:
        body["content_encoding"] = utf8(task.content_encoding, f"{prefix}content_encoding")
    if task.headers is not None:
        body["headers"] = _headers_body(task.headers, f"{prefix}headers")
    if task.late is not None:
        body["late"], rename = _late_body(task.late, f"{prefix}late")
    # Sent only when given: a daemon older than the dedup window refuses the field.
    if task.dedup_window_ms is not None:  # its bounds (0 to 30 days): the daemon's
        if not is_int(task.dedup_window_ms):
            raise invalid(f"{prefix}dedup_window_ms", "must be a whole number of milliseconds")
        body["dedup_window_ms"] = task.dedup_window_ms
    return body, rename


def _tags_body(tags: object, name: str) -> list[str]:
    # One string is a common slip for one tag: it would be sent as its letters.
    if isinstance(tags, str | bytes) or not isinstance(tags, Iterable):
        raise invalid(name, "must be a collection of strings (not one string)")
    # In the caller's order, so that the daemon's tags[i] names the caller's i-th.
    return [utf8(tag, f"{name}[{index}]") for index, tag in enumerate(tags)]


def _headers_body(headers: object, name: str) -> Body:
    if not isinstance(headers, Mapping):
        raise invalid(name, "must be a mapping of header names to values")
    body: Body = {}
    for key, value in headers.items():
        field_name = f"{name}.{utf8(key, name)}"
        if isinstance(value, str):
            utf8(value, field_name)
        elif not isinstance(value, int):  # bool is an int
            raise invalid(field_name, "must be a string, an integer or a boolean")
        body[key] = value
    return body


def _late_body(late: object, name: str) -> tuple[object, Renames]:
    """``"fire"``, ``{"skip_after_ms": N}``, ``{"deadline_ms": N}`` or
    ``{"deadline": At}`` (as ``at``)."""
    if late == "fire":
        return "fire", {}
    if isinstance(late, Mapping) and len(late) == 1:
        ((key, value),) = late.items()
        if key == "skip_after_ms":
            if not is_int(value) or value < 0:
                raise invalid(
                    f"{name}.skip_after_ms", "must be a non-negative integer number of milliseconds"
                )
            return {"skip_after_ms": value}, {}
        if key == "deadline_ms":
            return {"deadline_ms": epoch_ms(value, f"{name}.deadline_ms")}, {}
        if key == "deadline":
            return _instant_body("deadline", value, f"{name}.")
        raise invalid(f"{name}.{key}", "unknown (allowed: skip_after_ms, deadline_ms, deadline)")
    raise invalid(
        name, 'must be "fire", {"skip_after_ms": N}, {"deadline_ms": N} or {"deadline": time}'
    )


def encode(body: Mapping[str, object]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def task_path(task_id: str) -> str:
    if not isinstance(task_id, str) or not ID_PATTERN.fullmatch(task_id):
        raise invalid("id", ID_RULE)
    if task_id in RESERVED_IDS:
        # /v1/tasks/count is the count, not a task: never ask for it as one.
        raise invalid("id", f"{task_id!r} is reserved (a path of the API), never a task id")
    # Dots encoded: httpx would resolve an id of "." or ".." as a path segment.
    return "/v1/tasks/" + task_id.replace(".", "%2E")


def series_path(task_id: str, action: str) -> str:
    """``/v1/tasks/<id>/<action>``: a series' pause, resume, trigger, backfill."""
    return f"{task_path(task_id)}/{action}"


def backfill_body(from_ms: object, to_ms: object) -> Body:
    """A backfill's range, epoch ms (that it is one, and past: the daemon's)."""
    return {"from_ms": epoch_ms(from_ms, "from_ms"), "to_ms": epoch_ms(to_ms, "to_ms")}


def positive(value: object, name: str) -> str:
    """A whole number >= 1 for the query string (the daemon checks its upper bound)."""
    if not is_int(value) or value < 1:
        raise invalid(name, "must be a whole number >= 1")
    return str(value)


class Selection(TypedDict, total=False):
    """Which tasks a timeline is about: the keyword arguments of the filters
    (:data:`~triggerhook_client.rules.SELECTION_FIELDS`) that name tasks."""

    prefix: str | None  # of the id
    routing_key: str | None
    tag: str | None


class DueRange(Selection, total=False):
    """Which tasks a bulk cancel is about: a :class:`Selection` and a due
    range, each bound given as a datetime or RFC 3339 text (epoch seconds,
    deprecated), or in epoch ms (``due_after_ms``), at most one of the two."""

    due_after: At | None  # inclusive
    due_after_ms: int | None
    due_before: At | None  # exclusive
    due_before_ms: int | None


class Where(DueRange, total=False):
    """Which tasks a listing or count is about: a :class:`DueRange` and the state."""

    state: State | None


SELECTION_KEYS = frozenset(SELECTION_FIELDS)
DUE_RANGE_KEYS = SELECTION_KEYS | {n for name in DUE_RANGE_FIELDS for n in (name, in_ms(name))}
WHERE_KEYS = DUE_RANGE_KEYS | {STATE_FIELD}


@dataclass(frozen=True, slots=True)
class Filter:
    """Which tasks a listing, count, timeline or bulk cancel is about (every
    field given must match): the keyword arguments of those calls
    (:class:`Where`), as one value."""

    prefix: str | None = None
    routing_key: str | None = None
    tag: str | None = None
    due_after: At | None = None
    due_before: At | None = None
    state: TaskState | str | None = None
    due_after_ms: int | None = None
    due_before_ms: int | None = None

    @staticmethod
    def of(where: Mapping[str, object], allowed: Collection[str], call: str) -> Filter:
        """The filter of ``call``'s keyword arguments ``where`` (``allowed``:
        the ones it takes; any other is a :class:`TypeError`, as Python's)."""
        for name in where:
            if name not in allowed:
                raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")
        return Filter(**cast(Where, where))

    @property
    def narrowed(self) -> bool:
        """It names tasks by id prefix, tag or routing key, as a bulk cancel must."""
        return any(getattr(self, name) is not None for name in SELECTION_FIELDS)

    def given(self) -> dict[str, object]:
        """The fields given, as the keyword arguments of the calls (:class:`Where`)."""
        return {name: value for name in WHERE_KEYS if (value := getattr(self, name)) is not None}

    def params(self) -> tuple[dict[str, str], Renames]:
        """As query parameters, and the renames of the fields the daemon's
        errors name to the caller's arguments."""
        params = self._selection()
        bounds, renames = self._due_range()
        params.update((name, str(value)) for name, value in bounds.items())
        if isinstance(self.state, TaskState):
            params[STATE_FIELD] = self.state.value
        elif self.state is not None:
            params[STATE_FIELD] = utf8(self.state, STATE_FIELD)
        return params, renames

    def body(self) -> tuple[dict[str, object], Renames]:
        """As a bulk cancel's body, and the renames (see :meth:`params`)."""
        bounds, renames = self._due_range()
        return {**self._selection(), **bounds}, renames

    def _due_range(self) -> tuple[dict[str, str | int], Renames]:
        sent: dict[str, str | int] = {}
        renames: Renames = {}
        for name in DUE_RANGE_FIELDS:
            bound, renamed = instant_field(name, getattr(self, name), getattr(self, in_ms(name)))
            sent.update(bound)
            renames.update(renamed)
        return sent, renames

    def _selection(self) -> dict[str, str]:
        selection: dict[str, str] = {}
        for name in SELECTION_FIELDS:
            value = getattr(self, name)
            if value is not None:
                selection[name] = utf8(value, name)
        return selection


@dataclass(frozen=True, slots=True)
class Span:
    """A timeline's buckets: their length (``bucket_ms``; ``bucket_s``
    deprecated), how many, and the first one's start (``start``, as ``at``,
    or ``start_ms``); None: the daemon's default."""

    bucket_ms: int | None = None
    buckets: int | None = None
    start: At | None = None
    start_ms: int | None = None
    bucket_s: int | None = None
