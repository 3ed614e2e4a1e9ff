"""The Python client (``triggerhook.client``, which imports none of the daemon's
modules) reads every answer of the HTTP API as the daemon means it.

The daemon's side is its table of outcomes, ``triggerhook.api.http.HTTP_RENDERING``
(status, error code and headers per :class:`~triggerhook.domain.outcomes.Outcome`),
and the bodies it builds from them; the client's side is
``triggerhook.client.errors`` (status and code -> exception class,
``RETRIED_STATUSES``) and ``triggerhook.client.calls`` (which statuses each
call reads as its result, and the retry decision). The answers fed to the
client are the daemon's own (its ``ApiError.response()`` and body builders), not
hand-written copies.

Every test iterates over the daemon's table, so an outcome added to it (or a
status or code changed) fails here until the client's reading of it is decided
in :data:`ERROR_READING` or :data:`SUCCESS_CALLS` below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from triggerhook.api.http import HTTP_RENDERING, HttpRendering
from triggerhook.api.http import ApiError as DaemonError
from triggerhook.api.render import at_s as _at
from triggerhook.api.render import task_json as _info
from triggerhook.client import (
    ApiError,
    Conflict,
    InvalidRequest,
    NotFound,
    Scheduled,
    TaskRequest,
    TaskStatus,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook.client.calls import BaseClient, Call, Retry, _Attempts
from triggerhook.client.errors import RETRIED_STATUSES, error_from
from triggerhook.domain.outcomes import Outcome
from triggerhook.domain.task import Task, TaskInfo, TaskState

AT_MS = 1_893_456_000_250
AT_S = AT_MS / 1000

# The daemon's HTTP answers: errors (with a code in the body) and successes.
ERRORS: dict[Outcome, HttpRendering] = {
    outcome: rendering
    for outcome, rendering in HTTP_RENDERING.items()
    if rendering is not None and rendering.code is not None
}
SUCCESSES: dict[Outcome, HttpRendering] = {
    outcome: rendering
    for outcome, rendering in HTTP_RENDERING.items()
    if rendering is not None and rendering.code is None
}

# How a caller catches each error the daemon answers, and whether the client
# sends the request again (docs/api.md, "Errors" and "Python client"; the
# groups of triggerhook/domain/outcomes.py: the task's state says no, bad
# input, not now, a bug).
ERROR_READING: dict[Outcome, tuple[type[ApiError], bool]] = {
    Outcome.CONFLICT: (Conflict, False),
    Outcome.NOT_FOUND: (NotFound, False),
    Outcome.TOO_LATE: (TooLate, False),
    Outcome.INVALID: (InvalidRequest, False),
    Outcome.MALFORMED_JSON: (InvalidRequest, False),
    Outcome.UNSUPPORTED_MEDIA_TYPE: (InvalidRequest, False),
    Outcome.TOO_LARGE: (InvalidRequest, False),
    # Bad input too ("nothing written, never worth retrying as is").
    Outcome.REQUEST_TIMEOUT: (InvalidRequest, False),
    Outcome.UNAUTHORIZED: (Unauthorized, False),
    Outcome.UNAVAILABLE: (Unavailable, True),
    Outcome.OVERLOADED: (Unavailable, True),  # answered as unavailable
    Outcome.STOPPING: (Unavailable, True),
    Outcome.INTERNAL: (ApiError, False),  # the base class: an unexpected failure
}

# Where the client reads an error today other than the daemon means it (none:
# an entry here makes its case an expected failure, strict).
KNOWN_GAPS: dict[Outcome, str] = {}

# The fields the daemon names in these answers (the client renames them to the caller's).
FIELDS: dict[Outcome, str] = {Outcome.INVALID: "at", Outcome.CONFLICT: "id"}
RENAME = {"at": "delay_s"}


def daemon_answer(outcome: Outcome) -> tuple[httpx.Response, DaemonError]:
    """The daemon's own error answer for ``outcome``, as the client receives it."""
    error = DaemonError(
        outcome,
        field=FIELDS.get(outcome),
        # The values any message template takes (str.format ignores the rest).
        id="t-1",
        detail="must be a number",
        what="database",
        limit=1024,
        timeout_s=60,
    )
    return as_received(error.response()), error


def as_received(response: Any) -> httpx.Response:
    """An aiohttp ``web.Response`` as httpx hands it to the client."""
    body = response.body
    assert body is None or isinstance(body, bytes)
    return httpx.Response(
        response.status, headers=list(response.headers.items()), content=body or b""
    )


def each(table: dict[Outcome, HttpRendering], gaps: dict[Outcome, str]) -> list[Any]:
    """The outcomes of ``table`` as parameters, those in ``gaps`` xfail (strict)."""
    return [
        pytest.param(
            outcome,
            id=outcome.code,
            marks=[pytest.mark.xfail(strict=True, reason=gaps[outcome])] if outcome in gaps else [],
        )
        for outcome in table
    ]


# -- errors -------------------------------------------------------------------------------------


def test_every_http_answer_of_the_daemon_has_a_decided_client_reading() -> None:
    assert set(ERRORS) == set(ERROR_READING), (
        "an error outcome was added to (or removed from) HTTP_RENDERING: decide how the "
        "client reads it (client/errors.py) and record it in ERROR_READING"
    )
    assert set(SUCCESSES) == set(SUCCESS_CALLS), (
        "a success outcome was added to (or removed from) HTTP_RENDERING: decide which "
        "client call reads it and record it in SUCCESS_CALLS"
    )
    assert ERRORS and SUCCESSES  # the table is read as it is meant


@pytest.mark.parametrize("outcome", each(ERRORS, KNOWN_GAPS))
def test_an_error_answer_raises_the_class_the_daemon_means(outcome: Outcome) -> None:
    expected, _retried = ERROR_READING[outcome]
    response, sent = daemon_answer(outcome)
    error = error_from(response, RENAME)
    assert type(error) is expected, (outcome, sent.status, sent.code, type(error))
    field = FIELDS.get(outcome)
    assert (error.status, error.code, error.message, error.field) == (
        sent.status,
        sent.code,
        sent.message,
        RENAME.get(field, field) if field is not None else None,
    )


@pytest.mark.parametrize("outcome", each(ERRORS, {}))
def test_only_the_answers_that_mean_not_now_are_retried(outcome: Outcome) -> None:
    expected, retried = ERROR_READING[outcome]
    response, sent = daemon_answer(outcome)
    assert (sent.status in RETRIED_STATUSES) is retried, (outcome, sent.status)
    # The decision itself, as both clients take it after an answer.
    call = BaseClient._schedule_call(TaskRequest("t-1", at=AT_S))
    attempts = _Attempts(retries=1, backoff_s=0.0)
    with pytest.raises((Retry, ApiError)) as raised:
        attempts.result(call, response)
    if retried:
        assert isinstance(raised.value, Retry), (outcome, raised.value)
        assert isinstance(raised.value.error, expected)
        # After the daemon's Retry-After (the back-off here is 0).
        assert raised.value.delay_s == float(sent.headers.get("Retry-After", 0))
    else:
        assert isinstance(raised.value, ApiError), (outcome, raised.value)
        assert not isinstance(raised.value, Unavailable)
        assert raised.value.status == sent.status


def test_a_lookup_of_an_unknown_task_is_no_task_rather_than_an_error() -> None:
    response, _sent = daemon_answer(Outcome.NOT_FOUND)
    call = BaseClient._get_call("t-1")
    assert response.status_code in call.ok
    assert call.parse(response) is None
    # Every other call reads 404 as NotFound.
    for other in (BaseClient._cancel_call("t-1"), BaseClient._reschedule_call("t-1", AT_S, None)):
        assert response.status_code not in other.ok
        assert type(error_from(response, other.rename)) is NotFound


# -- successes ---------------------------------------------------------------------------------


def _json(status: int, data: object) -> httpx.Response:
    return httpx.Response(status, json=data)


def _created(status: int) -> httpx.Response:
    # As HttpApi.create and reschedule build it.
    return _json(status, {"id": "t-1", "at": _at(AT_MS)})


def _empty(status: int) -> httpx.Response:
    return httpx.Response(status)  # as HttpApi.cancel answers: no body


def _found(payload: bytes) -> Callable[[int], httpx.Response]:
    def make(status: int) -> httpx.Response:
        task = Task("t-1", AT_MS, "billing.charge", payload)
        return _json(status, _info(TaskInfo(task, TaskState.FIRING)))

    return make


# Per success outcome: the client calls that get it, the daemon's answer body
# (given the status) and the result the client must read from it.
SUCCESS_CALLS: dict[Outcome, list[tuple[Call[Any], Callable[[int], httpx.Response], object]]] = {
    Outcome.CREATED: [
        (
            BaseClient._schedule_call(TaskRequest("t-1", at=AT_S)),
            _created,
            Scheduled("t-1", AT_MS, True),
        ),
        (
            BaseClient._schedule_many_call([TaskRequest("t-1", at=AT_S)]),
            lambda status: _json(status, {"ids": ["t-1"]}),
            ["t-1"],
        ),
    ],
    Outcome.EXISTS: [
        (
            BaseClient._schedule_call(TaskRequest("t-1", at=AT_S)),
            _created,
            Scheduled("t-1", AT_MS, False),  # a safe repeat: nothing written
        ),
    ],
    Outcome.RESCHEDULED: [
        (
            BaseClient._reschedule_call("t-1", AT_S, None),
            _created,
            Scheduled("t-1", AT_MS, False),
        ),
    ],
    Outcome.CANCELLED: [
        (BaseClient._cancel_call("t-1"), _empty, None),
    ],
    Outcome.FOUND: [
        (
            BaseClient._get_call("t-1"),
            _found(b"text"),
            TaskStatus("t-1", AT_MS, "billing.charge", TaskState.FIRING, b"text"),
        ),
        (
            BaseClient._get_call("t-1"),
            _found(b"\xff\x00"),  # not UTF-8: sent as payload_b64
            TaskStatus("t-1", AT_MS, "billing.charge", TaskState.FIRING, b"\xff\x00"),
        ),
    ],
}


@pytest.mark.parametrize("outcome", each(SUCCESSES, {}))
def test_a_success_answer_is_read_as_the_result_the_daemon_means(outcome: Outcome) -> None:
    status = SUCCESSES[outcome].status
    calls = SUCCESS_CALLS[outcome]
    assert calls
    for call, answer, result in calls:
        assert status in call.ok, (outcome, call.method, call.path, status)
        assert call.parse(answer(status)) == result, (outcome, call.method, call.path)
