"""The answers' field tables (client/triggerhook_client/answer_fields.py)
against their three readers: the daemon's rendering emits only their fields,
the OpenAPI document shows each answer as its table says, and the client
checks every field it reads."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from triggerhook_client import answer_fields as af
from triggerhook_client.answer_fields import AnswerField, AnswerFields, Kind
from triggerhook_client.answers import UNCHECKED, decoded
from triggerhook_client.errors import ApiError

from triggerhook.api import http, openapi
from triggerhook.api.http import _created
from triggerhook.api.render import due_json, series_json, task_json, timeline_json
from triggerhook.app import Scheduled
from triggerhook.domain.listing import Timeline
from triggerhook.domain.meta import LateKind, LatePolicy, Meta, make_meta, meta_json
from triggerhook.domain.outcomes import INSERT_OUTCOMES, Outcome
from triggerhook.domain.recurrence import Recurrence
from triggerhook.domain.task import InsertOutcome, Task, TaskInfo, TaskState

DOC = openapi.document(65_536, 10_000)
TABLES: dict[str, AnswerFields] = {
    name: value
    for name, value in vars(af).items()
    if name.isupper() and isinstance(value, tuple) and value and isinstance(value[0], AnswerField)
}
SCHEDULES = [
    Recurrence(every_ms=60_000, until_ms=1_900_000_000_000, occurrence=2, stopped=True),
    Recurrence(cron="0 9 * * *", timezone="Europe/Berlin", until_ms=1_900_000_000_000),
    Recurrence(
        cron="30 2 * * *", timezone="Europe/Berlin", dst_repeated="last", dst_skipped="skip"
    ),
    # Its missed-occurrences policy, paused (resuming at an occurrence).
    Recurrence(
        every_ms=60_000,
        catch_up="all",
        catch_up_max=5,
        paused=True,
        resume_ms=1_900_000_000_000,
    ),
]


def every_meta(recur: Recurrence | None) -> Meta:
    """Metadata with every field set (and ``recur``)."""
    return make_meta(
        tags=["b", "a"],
        content_type="application/json",
        content_encoding="identity",
        headers={"tenant": "7", "attempt": 3, "urgent": True},
        late=LatePolicy(LateKind.DEADLINE, 1_900_000_000_123),
        recur=recur,
        dedup_window_ms=86_400_000,
    )


def infos() -> Iterator[TaskInfo]:
    """Tasks with every field set that an answer can show (each payload kind,
    each schedule, throttled and firing after its due time)."""
    for payload in (b"text", b"\xff\x00"):
        for recur in (None, *SCHEDULES):
            meta = every_meta(recur)
            task = Task("t-1", 1_800_000_000_500, "k", payload, meta=meta)
            yield TaskInfo(task, TaskState.FIRING)
            yield TaskInfo(task, TaskState.SCHEDULED, True, 1_800_000_009_000)


def names(fields: AnswerFields) -> set[str]:
    return set(af.names(fields))


def test_the_tables_hold_each_name_once() -> None:
    assert {"CREATED", "SHOWN", "LISTED", "PAGE", "TIMELINE", "BULK_CANCELLED"} <= set(TABLES)
    for name, fields in TABLES.items():
        assert len(names(fields)) == len(fields), name


def test_every_key_the_rendering_can_emit_is_a_field_of_its_table() -> None:
    shown: set[str] = set()
    listed: set[str] = set()
    for info in infos():
        lookup, listing = task_json(info), task_json(info, payload=False)
        assert set(af.required(af.SHOWN)) <= set(lookup) <= names(af.SHOWN)
        assert set(af.required(af.LISTED)) <= set(listing) <= names(af.LISTED)
        assert lookup["throttled"] is info.throttled  # always said, true or false
        shown |= set(lookup)
        listed |= set(listing)
    assert shown == names(af.SHOWN)  # and no field of the tables is never emitted
    assert listed == names(af.LISTED)
    assert set(due_json("t", 1)) == names(af.CREATED)
    for outcome in InsertOutcome:  # a create's answer, for each outcome it can have
        if INSERT_OUTCOMES[outcome].ok:
            assert set(_created(Scheduled(Task("t", 1, "k"), outcome))[1]) == names(af.CREATE)
    assert set(timeline_json(Timeline(0, 1000, 2, {"k": [1, 0]}))) == names(af.TIMELINE)
    for changed in (Outcome.PAUSED, Outcome.PAUSED_AFTER_THIS, Outcome.RESUMED, Outcome.ENDED):
        assert set(series_json("s", changed)) == names(af.SERIES_DONE)
    copy = Scheduled(Task("s:1", 1, "k"), InsertOutcome.EXISTS)
    for copying in (Outcome.TRIGGERED, Outcome.BACKFILLED):
        copied = series_json("s", copying, [copy])
        assert set(copied) == names(af.COPIED)
        assert [set(c) for c in copied["copies"]] == [names(af.COPY)]


def test_every_key_meta_json_can_emit_is_a_field_of_the_tables() -> None:
    emitted: set[str] = set()
    for recur in SCHEDULES:
        meta = every_meta(recur)
        for seconds in (False, True):
            emitted |= set(meta_json(meta, seconds=seconds))
    assert emitted == names(af.META) | names(af.SERIES)


def _literal_answers(path: Path) -> Iterator[tuple[int, set[str]]]:
    """(line, keys) of each dict literal of string keys a handler answers with
    (``_response(status, {...})``, ``json_answer(...)``, ``web.json_response({...})``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("_response", "json_response", "json_answer"):
            continue
        for arg in node.args:
            if isinstance(arg, ast.Dict) and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in arg.keys
            ):
                yield node.lineno, {str(k.value) for k in arg.keys if isinstance(k, ast.Constant)}


def test_the_handlers_literal_answers_are_the_fields_of_a_table() -> None:
    api = Path(http.__file__).parent
    found = 0
    for module in ("http.py", "http_answers.py", "listing.py", "hosts.py"):
        for line, keys in _literal_answers(api / module):
            found += 1
            assert any(
                set(af.required(fields)) <= keys <= names(fields) for fields in TABLES.values()
            ), f"{module}:{line} answers {sorted(keys)}"
    assert found >= 8  # ids, health, readiness, figures, errors, count, bulk cancel, page


# (path, method, status) -> the table of its answer
ANSWERS = {
    ("/v1/tasks", "post", "201"): af.CREATE,
    ("/v1/tasks", "post", "200"): af.CREATE,
    ("/v1/tasks/{id}", "patch", "200"): af.CREATED,
    ("/v1/tasks/{id}", "get", "200"): af.SHOWN,
    ("/v1/tasks/batch", "post", "201"): af.IDS,
    ("/v1/tasks", "get", "200"): af.PAGE,
    ("/v1/tasks/count", "get", "200"): af.COUNTED,
    ("/v1/tasks/timeline", "get", "200"): af.TIMELINE,
    ("/v1/tasks/cancel", "post", "200"): af.BULK_CANCELLED,
    ("/healthz", "get", "200"): af.HEALTHY,
    ("/readyz", "get", "200"): af.HEALTHY,
    ("/readyz", "get", "503"): af.UNREADY,
    ("/v1/status", "get", "200"): af.FIGURES,
    ("/v1/tasks/{id}/pause", "post", "200"): af.SERIES_DONE,
    ("/v1/tasks/{id}/resume", "post", "200"): af.SERIES_DONE,
    ("/v1/tasks/{id}/trigger", "post", "200"): af.COPIED,
    ("/v1/tasks/{id}/backfill", "post", "200"): af.COPIED,
}


def _check_shown(schema: dict[str, object], fields: AnswerFields) -> None:
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert list(properties) == list(af.names(fields))
    assert schema.get("required", []) == af.required(fields)
    for field in fields:
        shown = properties[field.name]
        assert shown.get("deprecated", False) is field.deprecated, field.name
        if field.description:
            assert shown["description"] == field.description, field.name


@pytest.mark.parametrize(("where", "fields"), ANSWERS.items(), ids=str)
def test_the_document_shows_each_answer_as_its_table(
    where: tuple[str, str, str], fields: AnswerFields
) -> None:
    path, method, status = where
    answer = DOC["paths"][path][method]["responses"][status]
    _check_shown(answer["content"]["application/json"]["schema"], fields)


def test_the_document_shows_a_listed_task_and_an_error_as_their_tables() -> None:
    page = DOC["paths"]["/v1/tasks"]["get"]["responses"]["200"]
    _check_shown(
        page["content"]["application/json"]["schema"]["properties"]["tasks"]["items"], af.LISTED
    )
    for action in ("trigger", "backfill"):
        copied = DOC["paths"][f"/v1/tasks/{{id}}/{action}"]["post"]["responses"]["200"]
        schema = copied["content"]["application/json"]["schema"]
        _check_shown(schema["properties"]["copies"]["items"], af.COPY)
    error = DOC["components"]["schemas"]["Error"]
    _check_shown(error, af.ERROR)
    _check_shown(error["properties"]["error"], af.ERROR_DETAIL)


def _refused(fields: AnswerFields, data: dict[str, object]) -> str:
    with pytest.raises(ApiError) as caught:
        decoded(httpx.Response(200), data, fields)
    assert caught.value.code == "bad_response"
    return caught.value.message


def test_the_client_checks_every_field_it_reads() -> None:
    for name, fields in TABLES.items():
        for field in fields:
            if not field.read:
                continue
            assert field.kind not in UNCHECKED, (name, field.name)
            if field.kind is not Kind.CURSOR:  # absent reads as null: no cursor, then
                required = AnswerField(field.name, field.kind, required=True)
                _refused((required,), {})
                _refused((field,), {field.name: object()})


def test_the_client_names_the_field_it_refuses() -> None:
    task = {"id": "t", "due_ms": 1, "routing_key": "k", "state": "scheduled"}
    expected: dict[str, tuple[AnswerFields, dict[str, object]]] = {
        "id is not a string": (af.CREATED, {"id": 5, "due_ms": 1}),
        "due_ms is not a whole number of milliseconds": (af.CREATED, {"id": "t", "due_ms": 1.5}),
        "count is not a count": (af.COUNTED, {"count": -1}),
        "unknown state": (af.LISTED, {**task, "state": "gone"}),
        "tags is not a list of strings": (af.LISTED, {**task, "tags": [1]}),
        "headers is not an object of strings and integers": (af.LISTED, {**task, "headers": []}),
        "late is not a late-fire policy": (af.LISTED, {**task, "late": "later"}),
        "occurrence is not an occurrence number": (af.LISTED, {**task, "occurrence": 0}),
        "stopping is not true": (af.LISTED, {**task, "stopping": False}),
        "payload_b64 is not a string": (af.PAYLOAD, {"payload_b64": 5}),
        "payload_b64 is not base64": (af.PAYLOAD, {"payload_b64": "!"}),
        "tasks is not a list of objects": (af.PAGE, {"tasks": [1], "next_cursor": None}),
        "next_cursor is not a string or null": (
            af.BULK_CANCELLED,
            {"cancelled": 1, "too_late": 0, "next_cursor": 5},
        ),
    }
    for message, (fields, data) in expected.items():
        assert _refused(fields, data) == f"unexpected answer: {message}"
