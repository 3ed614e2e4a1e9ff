"""What the clients send and how they read the answers: every request built
and every answer parsed, in one place for :class:`~triggerhook.client.Client`
and :class:`~triggerhook.client.AsyncClient` (which differ only in how they
send and wait). See the package docstring for the retry policy.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, TypeGuard, TypeVar

import httpx

from triggerhook.client.errors import (
    RETRIED_STATUSES,
    ApiError,
    InvalidRequest,
    Unavailable,
    error_from,
)
from triggerhook.domain.task import TaskState, new_task_id, validate_due_ms, validate_id
from triggerhook.errors import ValidationError
from triggerhook.retry import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")
At = datetime | float | str  # a datetime (naive = UTC), epoch seconds, or RFC 3339 text

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 0.1
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


# -- results ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """One task to schedule, for :meth:`Client.schedule_many`: the arguments of
    :meth:`Client.schedule` (exactly one of ``at`` and ``delay_s``)."""

    id: str | None = None
    at: At | None = None
    delay_s: float | None = None
    routing_key: str | None = None
    payload: str | bytes | None = None


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A stored task's id and due time (epoch ms). ``created`` is False when the
    same task existed already (a safe repeat), and always False for a reschedule."""

    id: str
    at_ms: int
    created: bool


@dataclass(frozen=True, slots=True)
class TaskStatus:
    """A stored task not yet fired, as ``GET /v1/tasks/{id}`` describes it."""

    id: str
    at_ms: int
    routing_key: str
    state: TaskState  # SCHEDULED (cancellable) or FIRING (being published)
    payload: bytes = b""


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
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad_answer(response, f"{key} is not a number")
    return round(value * 1000)


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
    try:
        state = TaskState(data.get("state"))
    except ValueError:
        raise _bad_answer(response, "unknown state") from None
    return TaskStatus(
        _text(response, data, "id"),
        _ms(response, data, "at"),
        _text(response, data, "routing_key"),
        state,
        _payload(response, data),
    )


def _payload(response: httpx.Response, data: Mapping[str, Any]) -> bytes:
    """The payload: text, base64, or absent (a daemon older than this client)."""
    if "payload_b64" in data:
        try:
            return base64.b64decode(_text(response, data, "payload_b64"), validate=True)
        except ValueError:
            raise _bad_answer(response, "payload_b64 is not base64") from None
    return _text(response, data, "payload").encode("utf-8") if "payload" in data else b""


def _health(response: httpx.Response) -> Health:
    if response.status_code == 200:
        return Health(True)
    reasons = _object(response).get("reasons")
    if not isinstance(reasons, list):  # a 503 that is not the daemon's: unavailable
        raise error_from(response, {})
    return Health(False, tuple(str(r) for r in reasons))


# -- building requests ---------------------------------------------------------------------


def _invalid(name: str, message: str) -> InvalidRequest:
    return InvalidRequest(None, "invalid", message, name)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _delay_at_ms(delay_s: object, name: str) -> int:
    """Now + ``delay_s`` in epoch ms, rounded up: the delay never ends early."""
    if not _is_number(delay_s) or not math.isfinite(delay_s) or delay_s < 0:
        raise _invalid(name, "must be a finite, non-negative number of seconds")
    now_ms = Decimal(time.time_ns()) / 1_000_000
    at_ms = math.ceil(now_ms + Decimal(str(delay_s)) * 1000)
    try:
        return validate_due_ms(at_ms)
    except ValidationError as exc:
        raise _invalid(name, exc.message) from None


def _when(at: object, delay_s: object, prefix: str) -> tuple[dict[str, object], dict[str, str]]:
    """The ``at`` of a body (a delay made absolute), and the field renames."""
    if (at is None) == (delay_s is None):
        raise _invalid(f"{prefix}at", "give exactly one of at and delay_s")
    if delay_s is not None:
        # Epoch ms up to 9999 have 15 digits: the float's repr is exact.
        at_s = _delay_at_ms(delay_s, f"{prefix}delay_s") / 1000
        return {"at": at_s}, {f"{prefix}at": f"{prefix}delay_s"}
    if isinstance(at, datetime):
        moment = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        return {"at": moment.isoformat()}, {}
    if isinstance(at, str) or (_is_number(at) and math.isfinite(at)):
        return {"at": at}, {}
    raise _invalid(f"{prefix}at", "must be a datetime, epoch seconds or an RFC 3339 string")


def _task_body(task: TaskRequest, prefix: str = "") -> tuple[dict[str, object], dict[str, str]]:
    # A missing id is chosen here, not by the daemon: a retry must name the same task.
    body: dict[str, object] = {"id": new_task_id() if task.id is None else task.id}
    when, rename = _when(task.at, task.delay_s, prefix)
    body.update(when)
    if task.routing_key is not None:
        body["routing_key"] = task.routing_key
    if isinstance(task.payload, bytes | bytearray):
        body["payload_b64"] = base64.b64encode(task.payload).decode("ascii")
    elif isinstance(task.payload, str):
        if not task.payload.isascii():
            try:  # a lone surrogate (a non-UTF-8 byte from argv) has no UTF-8 form
                task.payload.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise _invalid(
                    f"{prefix}payload", f"is not valid UTF-8 text: {exc.reason}"
                ) from None
        body["payload"] = task.payload
    elif task.payload is not None:
        raise _invalid(f"{prefix}payload", "must be bytes or text")
    return body, rename


def _encode(body: Mapping[str, object]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _task_path(task_id: str) -> str:
    try:
        validate_id(task_id)
    except ValidationError as exc:
        raise _invalid(exc.field, exc.message) from None
    # Dots encoded: httpx would resolve an id of "." or ".." as a path segment.
    return "/v1/tasks/" + task_id.replace(".", "%2E")


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
    def _status_call() -> Call[dict[str, Any]]:
        return Call("GET", "/v1/status", _OK_STATUS, lambda answer: dict(_object(answer)))

    @staticmethod
    def _health_call() -> Call[Health]:
        # A probe answers now or not at all: no retries.
        return Call("GET", "/readyz", _OK_HEALTH, _health, retry=False)
