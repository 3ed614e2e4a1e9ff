"""Reading the daemon's answers into results (no I/O here). An answer that is
not what the API documents is an :class:`ApiError` (``bad_response``), never
a result made up of it. Instants are read from the ``*_ms`` fields.

Each answer's fields are defined once, in :mod:`triggerhook_client.answer_fields`
(which the daemon's OpenAPI document is built from too); here is one check per
:class:`~triggerhook_client.answer_fields.Kind`, and :func:`decoded` reads an
answer by its table. What no table states stays here: a timeline's counts
per bucket match its ``buckets``, a batch has one outcome per id, a lookup's
payload is text or base64, and a 503 without ``reasons`` is not the daemon's
``/readyz``."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from triggerhook_client.answer_fields import (
    BULK_CANCELLED,
    COPIED,
    COPY,
    COUNTED,
    CREATE,
    CREATED,
    IDS,
    LISTED,
    PAGE,
    PAYLOAD,
    SERIES_DONE,
    TIMELINE,
    AnswerField,
    Kind,
)
from triggerhook_client.checks import is_int
from triggerhook_client.errors import ApiError, error_from
from triggerhook_client.results import (
    BatchScheduled,
    BulkCancelled,
    Copies,
    Health,
    Late,
    Scheduled,
    SeriesChange,
    TaskPage,
    TaskStatus,
    TaskSummary,
    Timeline,
)
from triggerhook_client.rules import TaskState


def _bad_answer(response: httpx.Response, what: str) -> ApiError:
    return ApiError(response.status_code, "bad_response", f"unexpected answer: {what}")


def json_object(response: httpx.Response) -> Mapping[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise _bad_answer(response, "not JSON") from None
    if not isinstance(data, dict):
        raise _bad_answer(response, "not a JSON object")
    return data


# -- one check per kind: the value (None when absent) as a result holds it --------------


class _Wrong(Exception):
    """The value is not of its kind: ``what`` the error says (``{}``: the field's name)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise _Wrong("{} is not a string")
    return value


def _base64(value: object) -> bytes:
    try:
        return base64.b64decode(_text(value), validate=True)
    except ValueError:
        raise _Wrong("{} is not base64") from None


def _ms(value: object) -> int:
    """An instant or a duration, in milliseconds (``due_ms``, ``bucket_ms``)."""
    if not is_int(value):
        raise _Wrong("{} is not a whole number of milliseconds")
    return value


def _count(value: object) -> int:
    if not is_int(value) or value < 0:
        raise _Wrong("{} is not a count")
    return value


def _occurrence(value: object) -> int:
    if not is_int(value) or value < 1:
        raise _Wrong("{} is not an occurrence number")
    return value


def _state(value: object) -> TaskState:
    try:
        return TaskState(value)
    except ValueError:
        raise _Wrong("unknown state") from None


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _Wrong("{} is not a list of strings")
    return tuple(value)


def _headers(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(v, str | int) for v in value.values()):
        raise _Wrong("{} is not an object of strings and integers")
    return value


def _late(late: object) -> Late:
    """The policy as ``schedule`` takes it back: a deadline as ``{"deadline_ms": N}``."""
    if late == "fire":
        return "fire"
    if isinstance(late, dict):
        if len(late) == 1 and is_int(late.get("skip_after_ms")):
            return {"skip_after_ms": late["skip_after_ms"]}
        if is_int(late.get("deadline_ms")):
            return {"deadline_ms": late["deadline_ms"]}
    raise _Wrong("{} is not a late-fire policy")


def _true(value: object) -> bool:
    if value is not True:
        raise _Wrong("{} is not true")
    return True


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Wrong("{} is not a boolean")
    return value


def _object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Wrong("{} is not an object")
    return value


def _cursor(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _Wrong("{} is not a string or null")
    return value


def _objects(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise _Wrong("{} is not a list of objects")
    return value


_COUNTS = "{} is not an object of counts per bucket"


def _counts(value: object) -> dict[str, list[int]]:
    """Per routing key, its counts (that each has one per bucket: :func:`timeline`)."""
    if not isinstance(value, dict) or not all(
        isinstance(counts, list) and all(is_int(n) for n in counts) for counts in value.values()
    ):
        raise _Wrong(_COUNTS)
    return value


_CHECKS: dict[Kind, Callable[[object], object]] = {
    Kind.TEXT: _text,
    Kind.BASE64: _base64,
    Kind.MS: _ms,
    Kind.COUNT: _count,
    Kind.STATE: _state,
    Kind.TEXTS: _texts,
    Kind.HEADERS: _headers,
    Kind.LATE: _late,
    Kind.OCCURRENCE: _occurrence,
    Kind.TRUE: _true,
    Kind.FLAG: _flag,
    Kind.OBJECT: _object,
    Kind.CURSOR: _cursor,
    Kind.OBJECTS: _objects,
    Kind.COUNTS: _counts,
}
# Never read: the deprecated epoch seconds (the client reads the *_ms twins).
UNCHECKED = frozenset({Kind.SECONDS})


def decoded(
    response: httpx.Response, data: Mapping[str, Any], fields: Iterable[AnswerField]
) -> dict[str, Any]:
    """The fields of ``data`` the client reads, checked by kind (as a result
    holds them: a state as :class:`TaskState`, a list of strings as a tuple, a
    late-fire policy as ``schedule`` takes it); an optional one only when present."""
    found: dict[str, Any] = {}
    for shown in fields:
        if not shown.read or (not shown.required and shown.name not in data):
            continue
        try:
            found[shown.name] = _CHECKS[shown.kind](data.get(shown.name))
        except _Wrong as wrong:
            raise _bad_answer(response, wrong.what.format(shown.name)) from None
    return found


# -- the answers ------------------------------------------------------------------------


def _outcome(response: httpx.Response, given: str | None) -> str:
    """A create's outcome; when the answer gives none (a daemon before
    2026-12), its status's: 201 created, else exists."""
    return given or ("created" if response.status_code == 201 else "exists")


def scheduled(response: httpx.Response) -> Scheduled:
    data = decoded(response, json_object(response), CREATE)
    created = response.status_code == 201
    return Scheduled(data["id"], data["due_ms"], created, _outcome(response, data.get("outcome")))


def moved(response: httpx.Response) -> Scheduled:
    data = decoded(response, json_object(response), CREATED)
    return Scheduled(data["id"], data["due_ms"], False, "rescheduled")


def series_change(response: httpx.Response) -> SeriesChange:
    data = decoded(response, json_object(response), SERIES_DONE)
    return SeriesChange(data["id"], data["outcome"])


def copies(response: httpx.Response) -> Copies:
    data = decoded(response, json_object(response), COPIED)
    made = tuple(_copy(response, copy) for copy in data["copies"])
    return Copies(data["id"], data["outcome"], made)


def _copy(response: httpx.Response, data: Mapping[str, Any]) -> Scheduled:
    copy = decoded(response, data, COPY)
    outcome = copy["outcome"]
    return Scheduled(copy["id"], copy["due_ms"], outcome == "created", outcome)


def batch(response: httpx.Response) -> list[BatchScheduled]:
    """Each task of a batch, in order: its id and outcome (none given: as
    :func:`scheduled` reads a create's that says none)."""
    data = decoded(response, json_object(response), IDS)
    ids: tuple[str, ...] = data["ids"]
    given: tuple[str | None, ...] = data.get("outcomes", (None,) * len(ids))
    if len(given) != len(ids):
        raise _bad_answer(response, "outcomes is not one outcome per id")
    outcomes = (_outcome(response, outcome) for outcome in given)
    return [
        BatchScheduled(task_id, outcome == "created", outcome)
        for task_id, outcome in zip(ids, outcomes, strict=True)
    ]


def ids(response: httpx.Response) -> list[str]:
    return [task.id for task in batch(response)]


def status(response: httpx.Response) -> TaskStatus | None:
    if response.status_code == 404:
        return None
    data = json_object(response)
    return TaskStatus(**decoded(response, data, LISTED), payload=_payload(response, data))


def _payload(response: httpx.Response, data: Mapping[str, Any]) -> bytes:
    """The payload: text, base64 (taken first), or absent (a daemon older than this client)."""
    given = decoded(response, data, PAYLOAD)
    text, b64 = (given.get(shown.name) for shown in PAYLOAD)
    if isinstance(b64, bytes):
        return b64
    return text.encode("utf-8") if isinstance(text, str) else b""


def page(response: httpx.Response) -> TaskPage:
    data = decoded(response, json_object(response), PAGE)
    tasks = tuple(TaskSummary(**decoded(response, t, LISTED)) for t in data["tasks"])
    return TaskPage(tasks, data["next_cursor"])


def counted(response: httpx.Response) -> int:
    count: int = decoded(response, json_object(response), COUNTED)["count"]
    return count


def timeline(response: httpx.Response) -> Timeline:
    data = decoded(response, json_object(response), TIMELINE)
    buckets, keys = data["buckets"], data["routing_keys"]
    if not all(len(counts) == buckets for counts in keys.values()):
        raise _bad_answer(response, _COUNTS.format("routing_keys"))
    return Timeline(
        data["start_ms"],
        data["bucket_ms"],
        buckets,
        {key: tuple(counts) for key, counts in keys.items()},
    )


def bulk_cancelled(response: httpx.Response) -> tuple[BulkCancelled, str | None]:
    """What one bulk cancel request did, and its ``next_cursor``: None when it
    reached the end (or a daemon too old to stop early said nothing)."""
    data = decoded(response, json_object(response), BULK_CANCELLED)
    return BulkCancelled(data["cancelled"], data["too_late"]), data["next_cursor"]


def health(response: httpx.Response) -> Health:
    if response.status_code == 200:
        return Health(True)
    reasons = json_object(response).get("reasons")  # of UNREADY
    if not isinstance(reasons, list):  # a 503 that is not the daemon's: unavailable
        raise error_from(response, {})
    return Health(False, tuple(str(r) for r in reasons))
