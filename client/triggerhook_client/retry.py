"""One call (:class:`Call`: its request and how to read its answer) and its
retry policy (:class:`Attempts`): see the package docstring. No I/O here: the
clients send, and hand each attempt's outcome to :meth:`Attempts.result`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import httpx

from triggerhook_client.backoff import Backoff
from triggerhook_client.errors import RETRIED_STATUSES, ApiError, Unavailable, error_from

# The name it had inside the daemon's distribution: logging set up for it applies.
log = logging.getLogger("triggerhook.client")

T = TypeVar("T")

_BACKOFF_MAX_S = 2.0
_RETRY_AFTER_MAX_S = 5.0
# Transport failures worth another attempt; others (a bad URL scheme, a client
# protocol error) would fail the same way again.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_JSON_HEADERS = {"Content-Type": "application/json"}


class Retry(Exception):
    """Internal: wait ``delay_s``, then send the call again."""

    def __init__(self, delay_s: float, error: ApiError) -> None:
        super().__init__(delay_s)
        self.delay_s = delay_s
        self.error = error


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


class Attempts:
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
