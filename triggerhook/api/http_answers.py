"""The HTTP API's answers: every outcome's status and error code
(:data:`HTTP_RENDERING`), the error answer (:class:`ApiError`) and JSON
bodies. Apart from :mod:`triggerhook.api.http` so that the handler modules it
registers (:mod:`triggerhook.api.http_series`) answer the same way without
importing it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aiohttp import web

from triggerhook.domain.outcomes import Outcome

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class HttpRendering:
    """An outcome over HTTP: the status, and for an error the outcome whose code
    the body carries (``{"error": {"code", ...}}``), extra headers, and the
    values of its message the error object carries as fields of their own
    (``shows``: ``fired_ms`` of ``already_fired``)."""

    status: int
    reported_as: Outcome | None = None  # None: a success, no error body
    headers: tuple[tuple[str, str], ...] = ()
    shows: tuple[str, ...] = ()

    @property
    def code(self) -> str | None:
        return None if self.reported_as is None else self.reported_as.code


_RETRY_AFTER = (("Retry-After", "1"),)

# Every outcome as the HTTP API answers it; None: the HTTP API never gives it.
HTTP_RENDERING: dict[Outcome, HttpRendering | None] = {
    Outcome.CREATED: HttpRendering(201),
    Outcome.EXISTS: HttpRendering(200),
    Outcome.REPLACED: HttpRendering(200),
    Outcome.KEPT: HttpRendering(200),
    Outcome.RESCHEDULED: HttpRendering(200),
    Outcome.CANCELLED: HttpRendering(204),
    Outcome.FOUND: HttpRendering(200),
    Outcome.PAUSED: HttpRendering(200),
    Outcome.PAUSED_AFTER_THIS: HttpRendering(200),
    Outcome.RESUMED: HttpRendering(200),
    Outcome.ENDED: HttpRendering(200),
    # 200, not 201: the answer is the series', whose copies say what was written.
    Outcome.TRIGGERED: HttpRendering(200),
    Outcome.BACKFILLED: HttpRendering(200),
    Outcome.CONFLICT: HttpRendering(409, Outcome.CONFLICT),
    Outcome.NOT_FOUND: HttpRendering(404, Outcome.NOT_FOUND),
    Outcome.TOO_LATE: HttpRendering(409, Outcome.TOO_LATE),
    Outcome.NOT_A_SERIES: HttpRendering(409, Outcome.NOT_A_SERIES),
    # Refused like a conflict; the body says when it fired (epoch ms).
    Outcome.ALREADY_FIRED: HttpRendering(409, Outcome.ALREADY_FIRED, shows=("fired_ms",)),
    Outcome.INVALID: HttpRendering(422, Outcome.INVALID),
    Outcome.MALFORMED_JSON: HttpRendering(400, Outcome.MALFORMED_JSON),
    Outcome.UNSUPPORTED_MEDIA_TYPE: HttpRendering(415, Outcome.UNSUPPORTED_MEDIA_TYPE),
    Outcome.TOO_LARGE: HttpRendering(413, Outcome.TOO_LARGE),
    Outcome.REQUEST_TIMEOUT: HttpRendering(408, Outcome.REQUEST_TIMEOUT),
    Outcome.UNKNOWN_TYPE: None,  # a command channel's
    Outcome.UNAUTHORIZED: HttpRendering(
        401, Outcome.UNAUTHORIZED, (("WWW-Authenticate", "Bearer"),)
    ),
    Outcome.FORBIDDEN: HttpRendering(403, Outcome.FORBIDDEN),
    Outcome.FORBIDDEN_REPLY_TO: None,  # a command channel's
    Outcome.TOO_COSTLY: HttpRendering(422, Outcome.TOO_COSTLY),
    Outcome.UNAVAILABLE: HttpRendering(503, Outcome.UNAVAILABLE, _RETRY_AFTER),
    # Told apart from a dependency being down only in the daemon's log.
    Outcome.OVERLOADED: HttpRendering(503, Outcome.UNAVAILABLE, _RETRY_AFTER),
    # The caller's own doing, not the daemon's state: 429, as rate limits answer.
    Outcome.OVER_QUOTA: HttpRendering(429, Outcome.OVER_QUOTA, _RETRY_AFTER),
    Outcome.STOPPING: HttpRendering(503, Outcome.STOPPING),
    Outcome.INTERNAL: HttpRendering(500, Outcome.INTERNAL),
}


def _rendering(outcome: Outcome) -> HttpRendering:
    rendering = HTTP_RENDERING[outcome]
    assert rendering is not None, f"{outcome} is not an HTTP answer"
    return rendering


def status_of(outcome: Outcome) -> int:
    return _rendering(outcome).status


def json_answer(status: int, data: object, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(data).encode(), content_type=JSON, headers=headers
    )


class ApiError(Exception):
    """An error answer: an outcome (its status and code), message, field."""

    def __init__(
        self,
        outcome: Outcome,
        message: str | None = None,
        field: str | None = None,
        *,
        close: bool = False,
        **values: object,
    ) -> None:
        """``message``, or else the outcome's template filled with ``values``;
        the values the outcome ``shows`` are fields of the error object too."""
        rendering = _rendering(outcome)
        assert rendering.code is not None, f"{outcome} is not an error"
        text = outcome.message(**values) if message is None else message
        super().__init__(text)
        self.status = rendering.status
        self.code = rendering.code
        self.message = text
        self.field = field
        self.headers = dict(rendering.headers)
        self.shown = {name: values[name] for name in rendering.shows}
        self.close = close  # answer with Connection: close (the body was not read)

    def response(self) -> web.Response:
        error: dict[str, object] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        error.update(self.shown)
        response = json_answer(self.status, {"error": error}, self.headers)
        if self.close:
            response.force_close()
        return response


def error_response(
    status: int, code: str, message: str, field: str | None = None, **headers: str
) -> web.Response:
    """An error answer outside the outcome table (aiohttp's own: 404 route, 405)."""
    error: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return json_answer(status, {"error": error}, headers)
