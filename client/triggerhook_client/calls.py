"""What the clients send and how they read the answers: every request built
and every answer parsed, in one place for :class:`~triggerhook_client.Client`
and :class:`~triggerhook_client.AsyncClient` (which differ only in how they
send and wait: no I/O here). See the package docstring for the retry policy.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, Literal, TypeGuard, TypeVar

import httpx

from triggerhook_client.backoff import Backoff
from triggerhook_client.errors import (
    RETRIED_STATUSES,
    ApiError,
    InvalidRequest,
    Unavailable,
    error_from,
)
from triggerhook_client.rules import (
    DUE_RULE,
    ID_PATTERN,
    ID_RULE,
    MAX_DUE_MS,
    MIN_DUE_MS,
    TaskState,
)

# The name it had inside the daemon's distribution: logging set up for it applies.
log = logging.getLogger("triggerhook.client")

T = TypeVar("T")
At = datetime | float | str  # a datetime (naive = UTC), epoch seconds, or RFC 3339 text
HeaderValue = str | int | bool
# A late-fire policy, as the API writes it: "fire", {"skip_after_ms": N} or
# {"deadline": At} (the daemon shows a deadline as epoch seconds).
Late = Literal["fire"] | Mapping[str, int | At]
State = TaskState | str  # a listing's state filter: scheduled or firing

DEFAULT_TIMEOUT_S = 30.0
# A bulk cancel blocks until every matching task is cancelled: minutes for a
# million tasks (500 per transaction).
DEFAULT_BULK_TIMEOUT_S = 900.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 0.1
# Tasks per request when walking a listing: the API's largest page, the fewest requests.
DEFAULT_PAGE_SIZE = 1000
_BACKOFF_MAX_S = 2.0
_RETRY_AFTER_MAX_S = 5.0
# Transport failures worth another attempt; others (a bad URL scheme, a client
# protocol error) would fail the same way again.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_JSON_HEADERS = {"Content-Type": "application/json"}
# The answers each call reads as success (or, for a lookup and a probe, as a result).
_OK_CREATED, _OK_BATCH, _OK_MOVED = frozenset({200, 201}), frozenset({201}), frozenset({200})
_OK_CANCELLED, _OK_GET, _OK_HEALTH = frozenset({204}), frozenset({200, 404}), frozenset({200, 503})
_OK_STATUS = frozenset({200})
# Not task ids in a path: /v1/tasks/<these> are other endpoints (the daemon
# refuses to create tasks with these ids).
RESERVED_IDS = frozenset({"batch", "count", "timeline", "cancel"})


# -- results ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """One task to schedule, for :meth:`Client.schedule_many`: the arguments of
    :meth:`Client.schedule` (exactly one of ``at`` and ``delay_s``; a series,
    with ``every`` or ``cron``, may give neither)."""

    id: str | None = None
    at: At | None = None
    delay_s: float | None = None
    routing_key: str | None = None
    payload: str | bytes | None = None
    _: KW_ONLY
    tags: Iterable[str] | None = None
    content_type: str | None = None
    content_encoding: str | None = None
    headers: Mapping[str, HeaderValue] | None = None
    late: Late | None = None
    every: str | None = None  # a series: an ISO 8601 duration (PT15M, P1D)
    cron: str | None = None  # a series: 5 cron fields, in ``timezone``
    timezone: str | None = None  # an IANA name, for cron (default UTC)
    until: At | None = None  # a series' end (inclusive)


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A stored task's id and due time (epoch ms). ``created`` is False when the
    same task existed already (a safe repeat), and always False for a reschedule."""

    id: str
    at_ms: int
    created: bool


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """A stored task not yet fired, as a listing shows it (no payload).

    The metadata is what the task was scheduled with: ``tags`` (sorted, a
    set), the event's ``content_type``, ``content_encoding`` and ``headers``,
    and ``late`` (None: the daemon's ``late_policy``; a deadline is shown as
    epoch seconds). Passing them back to ``schedule`` makes the same task.

    A series shows its schedule — ``every`` (normalized: ``PT15M``, ``P1D``)
    or ``cron`` and ``timezone`` — its end ``until_ms`` (epoch ms), and
    ``occurrence``: which occurrence ``at_ms`` is (1, 2, ...; None: not a
    series). ``stopping``: a cancel came while this occurrence was being
    published, so it is the series' last. Once an occurrence has fired, the
    row stands for the next one: scheduling it again as shown is a conflict.
    """

    id: str
    at_ms: int
    routing_key: str
    state: TaskState  # SCHEDULED (cancellable) or FIRING (being published)
    _: KW_ONLY
    tags: tuple[str, ...] = ()
    content_type: str | None = None
    content_encoding: str | None = None
    # Left out of the hash (a dict has none); still compared.
    headers: dict[str, HeaderValue] = field(default_factory=dict, hash=False)
    late: Late | None = field(default=None, hash=False)
    every: str | None = None
    cron: str | None = None
    timezone: str | None = None
    until_ms: int | None = None
    occurrence: int | None = None
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class TaskStatus(TaskSummary):
    """A stored task not yet fired, as ``GET /v1/tasks/{id}`` describes it: a
    :class:`TaskSummary` and its payload."""

    payload: bytes = b""


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


class Retry(Exception):
    """Internal: wait ``delay_s``, then send the call again."""

    def __init__(self, delay_s: float, error: ApiError) -> None:
        super().__init__(delay_s)
        self.delay_s = delay_s
        self.error = error


# -- one call: its request and how to read its answer --------------------------------------


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    ok: frozenset[int]  # statuses ``parse`` reads; any other is an error
    parse: Callable[[httpx.Response], T]
    body: bytes | None = None  # encoded once: every attempt sends the same bytes
    rename: Mapping[str, str] = field(default_factory=dict)  # API field -> caller's name
    retry: bool = True
    params: Mapping[str, str] = field(default_factory=dict)  # the query string
    timeout_s: float | None = None  # per attempt; None: the client's

    @property
    def headers(self) -> dict[str, str]:
        return _JSON_HEADERS if self.body is not None else {}


class _Attempts:
    """The retry state of one call: judges each attempt's outcome."""

    def __init__(self, retries: int, backoff_s: float) -> None:
        self._left = retries
        self._backoff = Backoff(initial_s=backoff_s, max_s=_BACKOFF_MAX_S)

    def result(self, call: Call[T], answer: httpx.Response | httpx.TransportError) -> T:
        """The call's result; or raises the final :class:`ApiError`, or
        :class:`Retry` when another attempt is due."""
        if isinstance(answer, httpx.Response):
            if answer.status_code in call.ok:
                return call.parse(answer)
            error = error_from(answer, call.rename)
            retryable = answer.status_code in RETRIED_STATUSES
            wait_s = _retry_after_s(answer)
        else:
            error = Unavailable(
                None, "unreachable", f"no answer from the daemon ({_describe(answer)})"
            )
            error.__cause__ = answer
            retryable = isinstance(answer, _TRANSIENT)
            wait_s = 0.0
        if not (retryable and call.retry and self._left > 0):
            raise error
        self._left -= 1
        delay_s = max(self._backoff.next_delay_s(), wait_s)
        log.warning("%s %s failed (%s); retrying in %.2fs", call.method, call.path, error, delay_s)
        raise Retry(delay_s, error)


def _describe(exc: httpx.TransportError) -> str:
    try:
        where = f"{exc.request.method} {exc.request.url}: "
    except RuntimeError:  # raised before a request existed
        where = ""
    return where + (str(exc) or type(exc).__name__)


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", 0)), _RETRY_AFTER_MAX_S)
    except ValueError:  # an HTTP date: not worth parsing, back-off applies
        return 0.0


# -- reading answers ---------------------------------------------------------------------


def _bad_answer(response: httpx.Response, what: str) -> ApiError:
    return ApiError(response.status_code, "bad_response", f"unexpected answer: {what}")


def _object(response: httpx.Response) -> Mapping[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise _bad_answer(response, "not JSON") from None
    if not isinstance(data, dict):
        raise _bad_answer(response, "not a JSON object")
    return data


def _text(response: httpx.Response, data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _bad_answer(response, f"{key} is not a string")
    return value


def _ms(response: httpx.Response, data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not _is_number(value) or not math.isfinite(value):
        raise _bad_answer(response, f"{key} is not a number")
    return round(value * 1000)


def _count(response: httpx.Response, data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not _is_int(value) or value < 0:
        raise _bad_answer(response, f"{key} is not a count")
    return value


def _scheduled(response: httpx.Response) -> Scheduled:
    data = _object(response)
    return Scheduled(
        _text(response, data, "id"), _ms(response, data, "at"), response.status_code == 201
    )


def _moved(response: httpx.Response) -> Scheduled:
    return replace(_scheduled(response), created=False)


def _ids(response: httpx.Response) -> list[str]:
    ids = _object(response).get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _bad_answer(response, "ids is not a list of strings")
    return ids


def _status(response: httpx.Response) -> TaskStatus | None:
    if response.status_code == 404:
        return None
    data = _object(response)
    return TaskStatus(**_task_fields(response, data), payload=_payload(response, data))


def _task_fields(response: httpx.Response, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a :class:`TaskSummary` in a task's JSON."""
    try:
        state = TaskState(data.get("state"))
    except ValueError:
        raise _bad_answer(response, "unknown state") from None
    return {
        "id": _text(response, data, "id"),
        "at_ms": _ms(response, data, "at"),
        "routing_key": _text(response, data, "routing_key"),
        "state": state,
        **_meta_fields(response, data),
        **_series_fields(response, data),
    }


def _meta_fields(response: httpx.Response, data: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a task's JSON shows (each absent when unset)."""
    fields: dict[str, Any] = {}
    if "tags" in data:
        tags = data["tags"]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise _bad_answer(response, "tags is not a list of strings")
        fields["tags"] = tuple(tags)
    for key in ("content_type", "content_encoding"):
        if key in data:
            fields[key] = _text(response, data, key)
    if "headers" in data:
        headers = data["headers"]
        if not isinstance(headers, dict) or not all(
            isinstance(v, str | int) for v in headers.values()
        ):
            raise _bad_answer(response, "headers is not an object of strings and integers")
        fields["headers"] = headers
    if "late" in data:
        fields["late"] = _late_answer(response, data["late"])
    return fields


def _series_fields(response: httpx.Response, data: Mapping[str, Any]) -> dict[str, Any]:
    """A series' schedule and occurrence, as a task's JSON shows them (absent: not a series)."""
    fields: dict[str, Any] = {}
    for key in ("every", "cron", "timezone"):
        if key in data:
            fields[key] = _text(response, data, key)
    if "until" in data:
        fields["until_ms"] = _ms(response, data, "until")
    if "occurrence" in data:
        occurrence = data["occurrence"]
        if not _is_int(occurrence) or occurrence < 1:
            raise _bad_answer(response, "occurrence is not an occurrence number")
        fields["occurrence"] = occurrence
    if "stopping" in data:
        if data["stopping"] is not True:
            raise _bad_answer(response, "stopping is not true")
        fields["stopping"] = True
    return fields


def _late_answer(response: httpx.Response, late: object) -> Late:
    if late == "fire":
        return "fire"
    if isinstance(late, dict) and len(late) == 1:
        if _is_int(late.get("skip_after_ms")):
            return {"skip_after_ms": late["skip_after_ms"]}
        if _is_number(late.get("deadline")):
            return {"deadline": late["deadline"]}
    raise _bad_answer(response, "late is not a late-fire policy")


def _payload(response: httpx.Response, data: Mapping[str, Any]) -> bytes:
    """The payload: text, base64, or absent (a daemon older than this client)."""
    if "payload_b64" in data:
        try:
            return base64.b64decode(_text(response, data, "payload_b64"), validate=True)
        except ValueError:
            raise _bad_answer(response, "payload_b64 is not base64") from None
    return _text(response, data, "payload").encode("utf-8") if "payload" in data else b""


def _page(response: httpx.Response) -> TaskPage:
    data = _object(response)
    tasks, cursor = data.get("tasks"), data.get("next_cursor")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise _bad_answer(response, "tasks is not a list of objects")
    if cursor is not None and not isinstance(cursor, str):
        raise _bad_answer(response, "next_cursor is not a string")
    return TaskPage(tuple(TaskSummary(**_task_fields(response, t)) for t in tasks), cursor)


def _counted(response: httpx.Response) -> int:
    return _count(response, _object(response), "count")


def _timeline(response: httpx.Response) -> Timeline:
    data = _object(response)
    keys = data.get("routing_keys")
    buckets = _count(response, data, "buckets")
    if not isinstance(keys, dict) or not all(
        isinstance(counts, list) and len(counts) == buckets and all(_is_int(n) for n in counts)
        for counts in keys.values()
    ):
        raise _bad_answer(response, "routing_keys is not an object of counts per bucket")
    return Timeline(
        _ms(response, data, "start"),
        _ms(response, data, "bucket"),
        buckets,
        {key: tuple(counts) for key, counts in keys.items()},
    )


def _bulk_cancelled(response: httpx.Response) -> BulkCancelled:
    data = _object(response)
    return BulkCancelled(_count(response, data, "cancelled"), _count(response, data, "too_late"))


def _health(response: httpx.Response) -> Health:
    if response.status_code == 200:
        return Health(True)
    reasons = _object(response).get("reasons")
    if not isinstance(reasons, list):  # a 503 that is not the daemon's: unavailable
        raise error_from(response, {})
    return Health(False, tuple(str(r) for r in reasons))


# -- building requests ---------------------------------------------------------------------


def _invalid(name: str | None, message: str) -> InvalidRequest:
    return InvalidRequest(None, "invalid", message, name)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _utf8(value: object, name: str) -> str:
    """``value`` if it is text with a UTF-8 form: a lone surrogate (a
    non-UTF-8 byte from argv) would make the daemon refuse the whole body as
    malformed JSON, naming no field."""
    if not isinstance(value, str):
        raise _invalid(name, "must be a string")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _invalid(name, f"is not valid UTF-8 text: {exc.reason}") from None
    return value


def _now_ms() -> Decimal:
    """This machine's clock, in epoch ms (exact: no float rounding)."""
    return Decimal(time.time_ns()) / 1_000_000


def _due_ms(at_ms: int, name: str) -> int:
    if not MIN_DUE_MS <= at_ms <= MAX_DUE_MS:
        raise _invalid(name, DUE_RULE)
    return at_ms


def _delay_at_ms(delay_s: object, name: str) -> int:
    """Now + ``delay_s`` in epoch ms, rounded up: the delay never ends early."""
    if not _is_number(delay_s) or not math.isfinite(delay_s) or delay_s < 0:
        raise _invalid(name, "must be a finite, non-negative number of seconds")
    return _due_ms(math.ceil(_now_ms() + Decimal(str(delay_s)) * 1000), name)


# An ISO 8601 duration as the daemon takes it (triggerhook/domain/recurrence.py's
# parse_every, which the client may not import; tests/unit/test_client_contract.py holds them
# to the same answers): weeks, days, hours, minutes, seconds to the millisecond.
_DURATION = re.compile(
    r"P(?:([0-9]{1,9})W)?(?:([0-9]{1,9})D)?"
    r"(?:T(?:([0-9]{1,9})H)?(?:([0-9]{1,9})M)?(?:([0-9]{1,9})(?:[.,]([0-9]{1,3}))?S)?)?"
)
_DURATION_UNIT_MS = (7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000)
_MIN_EVERY_MS = 1000


def _every_ms(every: object, name: str) -> int:
    """``every``'s length in ms: the client needs it for a series' first time."""
    found = _DURATION.fullmatch(every) if isinstance(every, str) and len(every) <= 64 else None
    if found is None or every in ("P", "PT") or str(every).endswith("T"):
        raise _invalid(
            name,
            "must be an ISO 8601 duration such as PT15M or P1D (no months or years: use cron)",
        )
    *parts, fraction = found.groups()
    ms = sum(int(part) * unit for part, unit in zip(parts, _DURATION_UNIT_MS, strict=True) if part)
    ms += int((fraction or "0").ljust(3, "0"))
    if ms < _MIN_EVERY_MS:
        raise _invalid(name, "must be at least 1 s (PT1S)")
    if ms > MAX_DUE_MS:  # at most 1970 to 9999
        raise _invalid(name, "is too long (more than 8,000 years)")
    return ms


def _moment(value: object, name: str) -> object:
    """A time as the API takes it: a datetime as RFC 3339 (naive = UTC);
    epoch seconds and text as given (the daemon parses them)."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return moment.isoformat()
    if isinstance(value, str) or (_is_number(value) and math.isfinite(value)):
        return value
    raise _invalid(name, "must be a datetime, epoch seconds or an RFC 3339 string")


def _moment_param(value: object, name: str) -> str:
    """A time in a query string: epoch seconds written out in full (``1e-05``
    is no number to the daemon)."""
    moment = _moment(value, name)
    if isinstance(moment, float):
        return format(Decimal(repr(moment)), "f")
    return _utf8(moment, name) if isinstance(moment, str) else str(moment)


def _when(at: object, delay_s: object, prefix: str) -> tuple[dict[str, object], dict[str, str]]:
    """The ``at`` of a body (a delay made absolute), and the field renames."""
    if (at is None) == (delay_s is None):
        raise _invalid(f"{prefix}at", "give exactly one of at and delay_s")
    if delay_s is not None:
        # Epoch ms up to 9999 have 15 digits: the float's repr is exact.
        at_s = _delay_at_ms(delay_s, f"{prefix}delay_s") / 1000
        return {"at": at_s}, {f"{prefix}at": f"{prefix}delay_s"}
    return {"at": _moment(at, f"{prefix}at")}, {}


def _task_when(task: TaskRequest, prefix: str) -> tuple[dict[str, object], dict[str, str]]:
    """The ``at`` of a task's body, and the field renames. A series given no
    time gets the one the daemon would choose had it received the request as
    it is sent: one ``every`` from now, or for ``cron`` now itself, which the
    daemon moves to the first matching minute at or after it (as it does to
    an untimed series on arrival) — so that a retry names the same first
    occurrence instead of the daemon choosing a later one."""
    every_ms = None if task.every is None else _every_ms(task.every, f"{prefix}every")
    if task.at is not None or task.delay_s is not None:
        return _when(task.at, task.delay_s, prefix)
    if every_ms is None and task.cron is None:
        raise _invalid(
            f"{prefix}at",
            "give exactly one of at and delay_s (a series, with every or cron, may give neither)",
        )
    now_ms = math.ceil(_now_ms())
    source = "every" if every_ms is not None else "cron"
    at_ms = _due_ms(now_ms + (every_ms or 0), f"{prefix}{source}")
    return {"at": at_ms / 1000}, {f"{prefix}at": f"{prefix}{source}"}


def _task_body(task: TaskRequest, prefix: str = "") -> tuple[dict[str, object], dict[str, str]]:
    # A missing id is chosen here, not by the daemon: a retry must name the same task.
    body: dict[str, object] = {"id": str(uuid.uuid4()) if task.id is None else task.id}
    when, rename = _task_when(task, prefix)
    body.update(when)
    if task.routing_key is not None:
        body["routing_key"] = task.routing_key
    if isinstance(task.payload, bytes | bytearray):
        body["payload_b64"] = base64.b64encode(task.payload).decode("ascii")
    elif isinstance(task.payload, str):
        body["payload"] = _utf8(task.payload, f"{prefix}payload")
    elif task.payload is not None:
        raise _invalid(f"{prefix}payload", "must be bytes or text")
    body.update(_meta_body(task, prefix))
    body.update(_series_body(task, prefix))
    return body, rename


def _series_body(task: TaskRequest, prefix: str) -> dict[str, object]:
    """A series' fields as given (``every`` already parsed; the daemon checks the
    cron expression and the time zone)."""
    body: dict[str, object] = {}
    for name in ("every", "cron", "timezone"):
        value = getattr(task, name)
        if value is not None:
            body[name] = _utf8(value, f"{prefix}{name}")
    if task.until is not None:
        body["until"] = _moment(task.until, f"{prefix}until")
    return body


def _meta_body(task: TaskRequest, prefix: str) -> dict[str, object]:
    """The metadata fields given (their rules are the daemon's: it names the
    offending field, ``tags[1]``, ``headers.x-foo``); checked here only as far
    as the body needs to be JSON the daemon can read."""
    body: dict[str, object] = {}
    if task.tags is not None:
        body["tags"] = _tags_body(task.tags, f"{prefix}tags")
    if task.content_type is not None:
        body["content_type"] = _utf8(task.content_type, f"{prefix}content_type")
    if task.content_encoding is not None:
        body["content_encoding"] = _utf8(task.content_encoding, f"{prefix}content_encoding")
    if task.headers is not None:
        body["headers"] = _headers_body(task.headers, f"{prefix}headers")
    if task.late is not None:
        body["late"] = _late_body(task.late, f"{prefix}late")
    return body


def _tags_body(tags: object, name: str) -> list[str]:
    # One string is a common slip for one tag: it would be sent as its letters.
    if isinstance(tags, str | bytes) or not isinstance(tags, Iterable):
        raise _invalid(name, "must be a collection of strings (not one string)")
    # In the caller's order, so that the daemon's tags[i] names the caller's i-th.
    return [_utf8(tag, f"{name}[{index}]") for index, tag in enumerate(tags)]


def _headers_body(headers: object, name: str) -> dict[str, object]:
    if not isinstance(headers, Mapping):
        raise _invalid(name, "must be a mapping of header names to values")
    body: dict[str, object] = {}
    for key, value in headers.items():
        field_name = f"{name}.{_utf8(key, name)}"
        if isinstance(value, str):
            _utf8(value, field_name)
        elif not isinstance(value, int):  # bool is an int
            raise _invalid(field_name, "must be a string, an integer or a boolean")
        body[key] = value
    return body


def _late_body(late: object, name: str) -> object:
    """``"fire"``, ``{"skip_after_ms": N}`` or ``{"deadline": At}`` (as ``at``)."""
    if late == "fire":
        return "fire"
    if isinstance(late, Mapping) and len(late) == 1:
        ((key, value),) = late.items()
        if key == "skip_after_ms":
            if not _is_int(value) or value < 0:
                raise _invalid(
                    f"{name}.skip_after_ms", "must be a non-negative integer number of milliseconds"
                )
            return {"skip_after_ms": value}
        if key == "deadline":
            return {"deadline": _moment(value, f"{name}.deadline")}
        raise _invalid(f"{name}.{key}", "unknown (allowed: skip_after_ms, deadline)")
    raise _invalid(name, 'must be "fire", {"skip_after_ms": N} or {"deadline": time}')


def _encode(body: Mapping[str, object]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _task_path(task_id: str) -> str:
    if not isinstance(task_id, str) or not ID_PATTERN.fullmatch(task_id):
        raise _invalid("id", ID_RULE)
    if task_id in RESERVED_IDS:
        # /v1/tasks/count is the count, not a task: never ask for it as one.
        raise _invalid("id", f"{task_id!r} is reserved (a path of the API), never a task id")
    # Dots encoded: httpx would resolve an id of "." or ".." as a path segment.
    return "/v1/tasks/" + task_id.replace(".", "%2E")


def _positive(value: object, name: str) -> str:
    """A whole number >= 1 for the query string (the daemon checks its upper bound)."""
    if not _is_int(value) or value < 1:
        raise _invalid(name, "must be a whole number >= 1")
    return str(value)


@dataclass(frozen=True, slots=True)
class Filter:
    """Which tasks a listing, count, timeline or bulk cancel is about (every
    field given must match): the keyword arguments of those calls."""

    prefix: str | None = None  # of the id
    routing_key: str | None = None
    tag: str | None = None
    due_after: At | None = None  # inclusive
    due_before: At | None = None  # exclusive
    state: TaskState | str | None = None

    @property
    def narrowed(self) -> bool:
        """It names tasks by id prefix, tag or routing key, as a bulk cancel must."""
        return any(v is not None for v in (self.prefix, self.tag, self.routing_key))

    def params(self) -> dict[str, str]:
        """As query parameters (the names the daemon's errors use are these)."""
        params: dict[str, str] = {}
        for name in ("prefix", "routing_key", "tag"):
            value = getattr(self, name)
            if value is not None:
                params[name] = _utf8(value, name)
        for name in ("due_after", "due_before"):
            value = getattr(self, name)
            if value is not None:
                params[name] = _moment_param(value, name)
        if isinstance(self.state, TaskState):
            params["state"] = self.state.value
        elif self.state is not None:
            params["state"] = _utf8(self.state, "state")
        return params

    def body(self) -> dict[str, object]:
        """As a bulk cancel's body (times as ``at`` is sent)."""
        body: dict[str, object] = {}
        for name in ("prefix", "routing_key", "tag"):
            value = getattr(self, name)
            if value is not None:
                body[name] = _utf8(value, name)
        for name in ("due_after", "due_before"):
            value = getattr(self, name)
            if value is not None:
                body[name] = _moment(value, name)
        return body


class BaseClient:
    """Configuration, and every request built and answer read: the two client
    classes only send."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        timeout_s: float,
        retries: int,
        backoff_s: float,
    ) -> None:
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL:
            url = httpx.URL()
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if retries < 0 or backoff_s < 0 or timeout_s <= 0:
            raise ValueError("retries and backoff_s must be >= 0 and timeout_s > 0")
        self.base_url = base_url
        self.timeout_s = timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _attempts(self) -> _Attempts:
        return _Attempts(self._retries, self._backoff_s)

    def _timeout_s(self, call: Call[Any]) -> float:
        return self.timeout_s if call.timeout_s is None else call.timeout_s

    @staticmethod
    def _schedule_call(task: TaskRequest) -> Call[Scheduled]:
        body, rename = _task_body(task)
        return Call("POST", "/v1/tasks", _OK_CREATED, _scheduled, _encode(body), rename)

    @staticmethod
    def _schedule_many_call(tasks: Sequence[TaskRequest]) -> Call[list[str]]:
        bodies, rename = [], {}
        for index, task in enumerate(tasks):
            body, renamed = _task_body(task, f"tasks[{index}].")
            bodies.append(body)
            rename.update(renamed)
        content = _encode({"tasks": bodies})
        return Call("POST", "/v1/tasks/batch", _OK_BATCH, _ids, content, rename)

    @staticmethod
    def _reschedule_call(task_id: str, at: At | None, delay_s: float | None) -> Call[Scheduled]:
        path = _task_path(task_id)
        body, rename = _when(at, delay_s, "")
        return Call("PATCH", path, _OK_MOVED, _moved, _encode(body), rename)

    @staticmethod
    def _cancel_call(task_id: str) -> Call[None]:
        return Call("DELETE", _task_path(task_id), _OK_CANCELLED, lambda _answer: None)

    @staticmethod
    def _get_call(task_id: str) -> Call[TaskStatus | None]:
        return Call("GET", _task_path(task_id), _OK_GET, _status)

    @staticmethod
    def _list_call(
        where: Filter, limit: int | None, cursor: str | None, limit_name: str = "limit"
    ) -> Call[TaskPage]:
        """One page; ``limit_name``: what the caller calls the page size."""
        params = where.params()
        if limit is not None:
            params["limit"] = _positive(limit, limit_name)
        if cursor is not None:
            params["cursor"] = _utf8(cursor, "cursor")
        rename = {"limit": limit_name}
        return Call("GET", "/v1/tasks", _OK_STATUS, _page, rename=rename, params=params)

    @staticmethod
    def _count_call(where: Filter) -> Call[int]:
        return Call("GET", "/v1/tasks/count", _OK_STATUS, _counted, params=where.params())

    @staticmethod
    def _timeline_call(
        where: Filter, bucket_s: int | None, buckets: int | None, start: At | None
    ) -> Call[Timeline]:
        params = where.params()
        if bucket_s is not None:
            params["bucket"] = _positive(bucket_s, "bucket_s")
        if buckets is not None:
            params["buckets"] = _positive(buckets, "buckets")
        if start is not None:
            params["start"] = _moment_param(start, "start")
        rename = {"bucket": "bucket_s"}
        return Call(
            "GET", "/v1/tasks/timeline", _OK_STATUS, _timeline, rename=rename, params=params
        )

    @staticmethod
    def _cancel_where_call(where: Filter, timeout_s: float) -> Call[BulkCancelled]:
        if not where.narrowed:
            # Never "every task": the daemon refuses it too; no request for it.
            raise _invalid(None, "give at least one of prefix, tag and routing_key")
        if not (_is_number(timeout_s) and timeout_s > 0):
            raise _invalid("timeout_s", "must be a number of seconds > 0")
        content = _encode(where.body())
        return Call(
            "POST",
            "/v1/tasks/cancel",
            _OK_STATUS,
            _bulk_cancelled,
            content,
            timeout_s=timeout_s,
        )

    @staticmethod
    def _status_call() -> Call[dict[str, Any]]:
        return Call("GET", "/v1/status", _OK_STATUS, lambda answer: dict(_object(answer)))

    @staticmethod
    def _health_call() -> Call[Health]:
        # A probe answers now or not at all: no retries.
        return Call("GET", "/readyz", _OK_HEALTH, _health, retry=False)
