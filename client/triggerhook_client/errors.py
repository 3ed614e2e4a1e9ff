"""The exceptions of :mod:`triggerhook_client`, one per kind of API error answer.

The daemon answers errors as ``{"error": {"code", "message", "field"?}}``
(``already_fired`` also with ``fired_ms``);
:func:`error_from` turns such an answer (or any other non-success answer, such
as a proxy's HTML page) into the matching :class:`ApiError` subclass.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

# Answers that mean "not now": the client retries them (see triggerhook_client).
RETRIED_STATUSES = frozenset({502, 503, 504})


class TriggerHookError(Exception):
    """Base class of every error raised by triggerhook: this client's, and the
    daemon's library (``triggerhook.errors`` takes this class from here)."""


class ApiError(TriggerHookError):
    """An error answer of the API (or a failure to get one).

    ``status``: the HTTP status, None when there was no answer (or the client
    refused the input itself); ``code``: the API's error code (``invalid``,
    ``conflict``, ``too_late``, ``already_fired``, ``not_found``, ``not_a_series``,
    ``unauthorized``, ``forbidden``, ``unavailable``, ...); ``field``: the offending field,
    when the API named one. Other unexpected answers (500, 405, a proxy's
    HTML page) raise this base class.
    """

    def __init__(self, status: int | None, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class InvalidRequest(ApiError):
    """Bad input (400 malformed JSON, 408 body not sent in time, 413 too large,
    415 media type, 422 invalid): ``field`` names it, as the caller passed it
    (``delay_s``, ``tasks[3].id``). Nothing was written."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class Unauthorized(ApiError):
    """401: missing or wrong bearer token (the daemon's ``api_token``)."""


class Forbidden(ApiError):
    """403 ``forbidden``: the token may not do this — the task id or routing
    key is outside its namespace, or it lacks the scope; the message names
    the rule. Nothing was written."""


class OverQuota(ApiError):
    """429 ``over_quota``: a create over its namespace's quota (creates a
    second, or pending tasks); the message names it. Nothing was written. Not
    retried by the client: sending it again at once only adds to the load;
    ``Retry-After`` says when to (1 s)."""


class NotFound(ApiError):
    """404: the task is unknown, or it fired and was deleted."""


class Conflict(ApiError):
    """409 ``conflict``: a task with this id exists with different content."""


class AlreadyFired(Conflict):
    """409 ``already_fired``: a task of this id fired within its dedup window
    (``dedup_window_ms``), at ``fired_ms`` (epoch ms; None if the answer did
    not say); nothing was written. A :class:`Conflict`, so code that catches
    conflicts catches it too."""

    def __init__(
        self,
        status: int | None,
        code: str,
        message: str,
        field: str | None = None,
        fired_ms: int | None = None,
    ):
        super().__init__(status, code, message, field)
        self.fired_ms = fired_ms


class TooLate(ApiError):
    """409 ``too_late``: the task is being published at its old time; it can no
    longer be cancelled or moved."""


class NotASeries(ApiError):
    """409 ``not_a_series``: the task is a one-off task (no ``every`` or
    ``cron``): a series' pause, resume, trigger or backfill does not apply.
    Nothing was written."""


class Unavailable(ApiError):
    """The daemon could not do it now — 503 (database unavailable, daemon
    stopping), 502/504 from a proxy, or no answer at all (``status`` None) —
    after the retries. Writes are safe to retry later."""


def error_from(response: httpx.Response, rename: Mapping[str, str]) -> ApiError:
    """The error an answer means; ``rename`` maps API field names to the caller's."""
    status = response.status_code
    code, message, name = f"http_{status}", f"{status} {response.reason_phrase}", None
    fired_ms = None
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
        name = error.get("field")
        fired_ms = error.get("fired_ms")
    except (ValueError, KeyError, TypeError, AttributeError):
        pass  # not the API's error shape (a proxy's page): keep the status line
    if not isinstance(name, str):
        name = None
    field = name and rename.get(name, name)
    kind = _error_class(status, code)
    if kind is AlreadyFired:
        when = fired_ms if isinstance(fired_ms, int) and not isinstance(fired_ms, bool) else None
        return AlreadyFired(status, code, message, field, when)
    return kind(status, code, message, field)


# 409's codes other than conflict.
_CONFLICTS: dict[str, type[ApiError]] = {
    "too_late": TooLate,
    "not_a_series": NotASeries,
    "already_fired": AlreadyFired,
}


def _error_class(status: int, code: str) -> type[ApiError]:
    if status in (400, 408, 413, 415, 422):
        return InvalidRequest
    if status == 409:
        return _CONFLICTS.get(code, Conflict)
    return {401: Unauthorized, 403: Forbidden, 404: NotFound, 429: OverQuota}.get(
        status, Unavailable if status in RETRIED_STATUSES else ApiError
    )
