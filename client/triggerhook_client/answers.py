"""Reading the daemon's answers into results (no I/O here). An answer that is
not what the API documents is an :class:`ApiError` (``bad_response``), never
a result made up of it. Instants are read from the ``*_ms`` fields."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import httpx

from triggerhook_client.checks import is_int
from triggerhook_client.errors import ApiError, error_from
from triggerhook_client.results import (
    BulkCancelled,
    Health,
    Late,
    Scheduled,
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


def _text(response: httpx.Response, data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise _bad_answer(response, f"{key} is not a string")
    return value


def _ms(response: httpx.Response, data: Mapping[str, Any], key: str) -> int:
    """An instant or a duration, in milliseconds (``due_ms``, ``bucket_ms``)."""
    value = data.get(key)
    if not is_int(value):
        raise _bad_answer(response, f"{key} is not a whole number of milliseconds")
    return value


def _count(response: httpx.Response, data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not is_int(value) or value < 0:
        raise _bad_answer(response, f"{key} is not a count")
    return value


def scheduled(response: httpx.Response) -> Scheduled:
    data = json_object(response)
    return Scheduled(
        _text(response, data, "id"), _ms(response, data, "due_ms"), response.status_code == 201
    )


def moved(response: httpx.Response) -> Scheduled:
    return replace(scheduled(response), created=False)


def ids(response: httpx.Response) -> list[str]:
    found = json_object(response).get("ids")
    if not isinstance(found, list) or not all(isinstance(i, str) for i in found):
        raise _bad_answer(response, "ids is not a list of strings")
    return found


def status(response: httpx.Response) -> TaskStatus | None:
    if response.status_code == 404:
        return None
    data = json_object(response)
    return TaskStatus(**_task_fields(response, data), payload=_payload(response, data))


def _task_fields(response: httpx.Response, data: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a :class:`TaskSummary` in a task's JSON."""
    try:
        state = TaskState(data.get("state"))
    except ValueError:
        raise _bad_answer(response, "unknown state") from None
    return {
        "id": _text(response, data, "id"),
        "due_ms": _ms(response, data, "due_ms"),
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
        fields["late"] = _late(response, data["late"])
    return fields


def _series_fields(response: httpx.Response, data: Mapping[str, Any]) -> dict[str, Any]:
    """A series' schedule and occurrence, as a task's JSON shows them (absent: not a series)."""
    fields: dict[str, Any] = {}
    for key in ("every", "cron", "timezone"):
        if key in data:
            fields[key] = _text(response, data, key)
    if "until_ms" in data:
        fields["until_ms"] = _ms(response, data, "until_ms")
    if "occurrence" in data:
        occurrence = data["occurrence"]
        if not is_int(occurrence) or occurrence < 1:
            raise _bad_answer(response, "occurrence is not an occurrence number")
        fields["occurrence"] = occurrence
    if "stopping" in data:
        if data["stopping"] is not True:
            raise _bad_answer(response, "stopping is not true")
        fields["stopping"] = True
    return fields


def _late(response: httpx.Response, late: object) -> Late:
    """The policy as ``schedule`` takes it back: a deadline as ``{"deadline_ms": N}``."""
    if late == "fire":
        return "fire"
    if isinstance(late, dict):
        if len(late) == 1 and is_int(late.get("skip_after_ms")):
            return {"skip_after_ms": late["skip_after_ms"]}
        if is_int(late.get("deadline_ms")):
            return {"deadline_ms": late["deadline_ms"]}
    raise _bad_answer(response, "late is not a late-fire policy")


def _payload(response: httpx.Response, data: Mapping[str, Any]) -> bytes:
    """The payload: text, base64, or absent (a daemon older than this client)."""
    if "payload_b64" in data:
        try:
            return base64.b64decode(_text(response, data, "payload_b64"), validate=True)
        except ValueError:
            raise _bad_answer(response, "payload_b64 is not base64") from None
    return _text(response, data, "payload").encode("utf-8") if "payload" in data else b""


def page(response: httpx.Response) -> TaskPage:
    data = json_object(response)
    tasks, cursor = data.get("tasks"), data.get("next_cursor")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise _bad_answer(response, "tasks is not a list of objects")
    if cursor is not None and not isinstance(cursor, str):
        raise _bad_answer(response, "next_cursor is not a string")
    return TaskPage(tuple(TaskSummary(**_task_fields(response, t)) for t in tasks), cursor)


def counted(response: httpx.Response) -> int:
    return _count(response, json_object(response), "count")


def timeline(response: httpx.Response) -> Timeline:
    data = json_object(response)
    keys = data.get("routing_keys")
    buckets = _count(response, data, "buckets")
    if not isinstance(keys, dict) or not all(
        isinstance(counts, list) and len(counts) == buckets and all(is_int(n) for n in counts)
        for counts in keys.values()
    ):
        raise _bad_answer(response, "routing_keys is not an object of counts per bucket")
    return Timeline(
        _ms(response, data, "start_ms"),
        _ms(response, data, "bucket_ms"),
        buckets,
        {key: tuple(counts) for key, counts in keys.items()},
    )


def bulk_cancelled(response: httpx.Response) -> tuple[BulkCancelled, str | None]:
    """What one bulk cancel request did, and its ``next_cursor``: None when it
    reached the end (or a daemon too old to stop early said nothing)."""
    data = json_object(response)
    done = BulkCancelled(_count(response, data, "cancelled"), _count(response, data, "too_late"))
    cursor = data.get("next_cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise _bad_answer(response, "next_cursor is not a string or null")
    return done, cursor


def health(response: httpx.Response) -> Health:
    if response.status_code == 200:
        return Health(True)
    reasons = json_object(response).get("reasons")
    if not isinstance(reasons, list):  # a 503 that is not the daemon's: unavailable
        raise error_from(response, {})
    return Health(False, tuple(str(r) for r in reasons))
