"""Python clients of the daemon's HTTP API: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio), with the same methods.

::

    with Client("http://127.0.0.1:8080", token="s3cret") as hook:
        hook.schedule("invoice-42", delay_s=30, routing_key="billing.charge", payload=b"{}")
        hook.reschedule("invoice-42", at="2026-12-01T09:00:00Z")
        hook.get("invoice-42")  # TaskStatus(...) or None
        hook.cancel("invoice-42")  # raises NotFound / TooLate

Both keep connections alive between calls (one httpx connection pool per
client object; share the object, it is safe across threads / tasks).

Retries. Every write is made safe to send twice before the first attempt:
``delay_s`` becomes an absolute ``at`` (epoch seconds, rounded *up* to the
millisecond) and a missing task id becomes a new UUIDv4, both on the client,
so a retry carries byte-identical content and the daemon answers it as a safe
repeat (``created=False``) rather than a conflict. A call is retried only
after a transient failure: no connection, a timeout, a dropped connection, or
a 502/503/504 answer — up to ``retries`` times (default 3), waiting a capped
(2 s), jittered exponential back-off starting at ``backoff_s`` (default 0.1 s),
or the answer's ``Retry-After`` (capped at 5 s) when that is longer. Any other
answer, and every 4xx, is final. After a retry, the answer may reflect an
earlier attempt that did reach the daemon: ``schedule`` then says
``created=False``, and ``cancel`` may raise :class:`NotFound` for a task that
the lost attempt cancelled.

Errors mirror the API's answers (``{"error": {"code", "message", "field"?}}``):
see :class:`ApiError` and its subclasses. Input the client can check itself
(both or neither of ``at``/``delay_s``, a malformed task id in a path) raises
:class:`InvalidRequest` with ``status=None`` without asking the daemon.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, Self, TypeGuard, TypeVar

import httpx

from triggerhook.client_errors import (
    RETRIED_STATUSES,
    ApiError,
    Conflict,
    InvalidRequest,
    NotFound,
    TooLate,
    Unauthorized,
    Unavailable,
    error_from,
)
from triggerhook.client_transport import AiohttpTransport
from triggerhook.domain.task import TaskState, new_task_id, validate_due_ms, validate_id
from triggerhook.errors import ValidationError
from triggerhook.retry import Backoff

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "Conflict",
    "Health",
    "InvalidRequest",
    "NotFound",
    "Scheduled",
    "TaskRequest",
    "TaskStatus",
    "TooLate",
    "Unauthorized",
    "Unavailable",
]

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


class _Retry(Exception):
    """Internal: wait ``delay_s``, then send the call again."""

    def __init__(self, delay_s: float, error: ApiError) -> None:
        super().__init__(delay_s)
        self.delay_s = delay_s
        self.error = error


# -- one call: its request and how to read its answer --------------------------------------


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
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

    def result(self, call: _Call[T], answer: httpx.Response | httpx.TransportError) -> T:
        """The call's result; or raises the final :class:`ApiError`, or
        :class:`_Retry` when another attempt is due."""
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
        raise _Retry(delay_s, error)


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


class _Base:
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
    def _schedule_call(task: TaskRequest) -> _Call[Scheduled]:
        body, rename = _task_body(task)
        return _Call("POST", "/v1/tasks", _OK_CREATED, _scheduled, _encode(body), rename)

    @staticmethod
    def _schedule_many_call(tasks: Sequence[TaskRequest]) -> _Call[list[str]]:
        bodies, rename = [], {}
        for index, task in enumerate(tasks):
            body, renamed = _task_body(task, f"tasks[{index}].")
            bodies.append(body)
            rename.update(renamed)
        content = _encode({"tasks": bodies})
        return _Call("POST", "/v1/tasks/batch", _OK_BATCH, _ids, content, rename)

    @staticmethod
    def _reschedule_call(task_id: str, at: At | None, delay_s: float | None) -> _Call[Scheduled]:
        path = _task_path(task_id)
        body, rename = _when(at, delay_s, "")
        return _Call("PATCH", path, _OK_MOVED, _moved, _encode(body), rename)

    @staticmethod
    def _cancel_call(task_id: str) -> _Call[None]:
        return _Call("DELETE", _task_path(task_id), _OK_CANCELLED, lambda _answer: None)

    @staticmethod
    def _get_call(task_id: str) -> _Call[TaskStatus | None]:
        return _Call("GET", _task_path(task_id), _OK_GET, _status)

    @staticmethod
    def _status_call() -> _Call[dict[str, Any]]:
        return _Call("GET", "/v1/status", _OK_STATUS, lambda answer: dict(_object(answer)))

    @staticmethod
    def _health_call() -> _Call[Health]:
        # A probe answers now or not at all: no retries.
        return _Call("GET", "/readyz", _OK_HEALTH, _health, retry=False)


class Client(_Base):
    """A blocking client of the daemon's HTTP API; thread-safe.

    ``base_url`` like ``http://127.0.0.1:8080``; ``token``: the daemon's
    ``api_token`` (sent as ``Authorization: Bearer``); ``timeout_s``: per
    attempt; ``retries``/``backoff_s``: see the module docstring. ``transport``
    replaces httpx's (for fault injection in tests). Close it (or use ``with``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout_s, retries, backoff_s)
        self._closed = threading.Event()  # ends a back-off wait at close()
        self._http = httpx.Client(
            base_url=base_url, headers=self._headers, timeout=timeout_s, transport=transport
        )

    def _run(self, call: _Call[T]) -> T:
        attempts = self._attempts()
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = self._http.request(
                    call.method, call.path, content=call.body, headers=call.headers
                )
            except httpx.TransportError as exc:
                answer = exc
            try:
                return attempts.result(call, answer)
            except _Retry as retry:
                if self._closed.wait(retry.delay_s):
                    raise retry.error from None

    def schedule(
        self,
        id: str | None = None,
        *,
        at: At | None = None,
        delay_s: float | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
    ) -> Scheduled:
        """Store one task, due ``at`` or after ``delay_s`` seconds (exactly one).

        ``payload``: bytes, or text (sent as UTF-8). Scheduling an existing id
        with the same content returns ``created=False``; with other content
        raises :class:`Conflict`. Also :class:`InvalidRequest` (``field`` names
        the argument), :class:`Unauthorized`, :class:`Unavailable`.
        """
        return self._run(self._schedule_call(TaskRequest(id, at, delay_s, routing_key, payload)))

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> list[str]:
        """Store all the tasks or none (one request, at most the daemon's
        ``http_max_batch_tasks``); returns their ids in order. Errors name the
        task: ``tasks[3].routing_key``."""
        if not tasks:
            return []
        return self._run(self._schedule_many_call(tasks))

    def reschedule(
        self, id: str, *, at: At | None = None, delay_s: float | None = None
    ) -> Scheduled:
        """Move a task not yet firing to a new due time (exactly one of ``at``,
        ``delay_s``): it then fires at that time only. Raises :class:`NotFound`,
        :class:`TooLate` (being published at its old time)."""
        return self._run(self._reschedule_call(id, at, delay_s))

    def cancel(self, id: str) -> None:
        """Cancel a task: when this returns, it will never fire. Raises
        :class:`NotFound` (unknown or fired) or :class:`TooLate` (being published)."""
        self._run(self._cancel_call(id))

    def get(self, id: str) -> TaskStatus | None:
        """The stored task, or None when it is unknown or fired."""
        return self._run(self._get_call(id))

    def status(self) -> dict[str, Any]:
        """The daemon's live figures (``GET /v1/status``; fields: docs/metrics.md)."""
        return self._run(self._status_call())

    def health(self) -> Health:
        """The daemon's readiness (``GET /readyz``, no retries); raises
        :class:`Unavailable` when it does not answer."""
        return self._run(self._health_call())

    def ready(self) -> bool:
        """True when the daemon answers and is ready; False otherwise."""
        try:
            return self.health().ready
        except ApiError:
            return False

    def close(self) -> None:
        self._closed.set()
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`: the same arguments and methods, as
    coroutines. Requests go through aiohttp (see
    :mod:`triggerhook.client_transport`) unless ``transport`` gives another
    httpx async transport. Close it with :meth:`aclose` (or use ``async with``)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout_s, retries, backoff_s)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=self._headers,
            timeout=timeout_s,
            transport=transport or AiohttpTransport(),
        )

    async def _run(self, call: _Call[T]) -> T:
        attempts = self._attempts()
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = await self._http.request(
                    call.method, call.path, content=call.body, headers=call.headers
                )
            except httpx.TransportError as exc:
                answer = exc
            try:
                return attempts.result(call, answer)
            except _Retry as retry:
                if self._http.is_closed:
                    raise retry.error from None
                await asyncio.sleep(retry.delay_s)

    async def schedule(
        self,
        id: str | None = None,
        *,
        at: At | None = None,
        delay_s: float | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
    ) -> Scheduled:
        """See :meth:`Client.schedule`."""
        return await self._run(
            self._schedule_call(TaskRequest(id, at, delay_s, routing_key, payload))
        )

    async def schedule_many(self, tasks: Sequence[TaskRequest]) -> list[str]:
        """See :meth:`Client.schedule_many`."""
        if not tasks:
            return []
        return await self._run(self._schedule_many_call(tasks))

    async def reschedule(
        self, id: str, *, at: At | None = None, delay_s: float | None = None
    ) -> Scheduled:
        """See :meth:`Client.reschedule`."""
        return await self._run(self._reschedule_call(id, at, delay_s))

    async def cancel(self, id: str) -> None:
        """See :meth:`Client.cancel`."""
        await self._run(self._cancel_call(id))

    async def get(self, id: str) -> TaskStatus | None:
        """See :meth:`Client.get`."""
        return await self._run(self._get_call(id))

    async def status(self) -> dict[str, Any]:
        """See :meth:`Client.status`."""
        return await self._run(self._status_call())

    async def health(self) -> Health:
        """See :meth:`Client.health`."""
        return await self._run(self._health_call())

    async def ready(self) -> bool:
        """See :meth:`Client.ready`."""
        try:
            return (await self.health()).ready
        except ApiError:
            return False

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
