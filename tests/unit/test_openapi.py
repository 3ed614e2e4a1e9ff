"""The OpenAPI document (triggerhook/api/openapi.py) against the code it describes.

Its schemas are evaluated as OpenAPI 3.1 does (JSON Schema 2020-12, with
jsonschema_rs, the validator Schemathesis uses) and compared with the parsers
the handlers call: a value a schema admits must be accepted, and one it refuses
must be refused. The answers the handlers render must match the answer schemas.
Limits JSON Schema cannot state (bytes of UTF-8, the headers' total size) are
only described, and not compared here. tests/integration/test_http_fuzz.py
checks the same against a real daemon.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from triggerhook.api import openapi
from triggerhook.api.bodies import RESERVED_IDS, parse_create
from triggerhook.api.listing import parse_bulk_cancel, parse_filter
from triggerhook.api.render import task_json, timeline_json
from triggerhook.domain.listing import (
    MAX_PAGE,
    Timeline,
    encode_cursor,
    page_limit,
    timeline_span,
)
from triggerhook.domain.meta import LateKind, LatePolicy, make_meta
from triggerhook.domain.spec import TaskRules, resolve
from triggerhook.domain.task import MAX_DUE_MS, Task, TaskInfo, TaskState
from triggerhook.errors import ValidationError

MAX_PAYLOAD = 65_536
DOC = openapi.document(MAX_PAYLOAD, 10_000)
RULES = TaskRules(default_routing_key="triggerhook.fire", max_payload_bytes=MAX_PAYLOAD)
NOW_MS = 1_800_000_000_000
FAR_S = 4_000_000_000

JsonSchema = dict[str, Any]


def validator(schema: JsonSchema) -> jsonschema_rs.Validator:
    """A 2020-12 validator of ``schema``, whose ``#/components/...`` refs resolve."""
    root = {**schema, "components": DOC["components"]}
    return jsonschema_rs.Draft202012Validator(root, validate_formats=True)


@functools.cache
def param_validator(path: str, name: str) -> jsonschema_rs.Validator:
    return validator(param_schema(path, name))


def body_schema(path: str, method: str) -> JsonSchema:
    schema: JsonSchema = DOC["paths"][path][method]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    return schema


def answer_schema(path: str, method: str, status: str = "200") -> JsonSchema:
    schema: JsonSchema = DOC["paths"][path][method]["responses"][status]["content"][
        "application/json"
    ]["schema"]
    return schema


def param_schema(path: str, name: str, method: str = "get") -> JsonSchema:
    [param] = [p for p in DOC["paths"][path][method]["parameters"] if p["name"] == name]
    assert param["in"] == "query"
    schema: JsonSchema = param["schema"]
    return schema


def accepts(parse: Callable[[], object]) -> bool:
    try:
        parse()
    except ValidationError:
        return False
    return True


def created(body: object) -> bool:
    """Whether ``POST /v1/tasks`` takes the body (what its handler checks)."""
    return accepts(lambda: resolve(parse_create(body), NOW_MS, RULES))


CREATE = validator({"$ref": "#/components/schemas/CreateTask"})


# -- the document --------------------------------------------------------------------------------


def test_every_operation_is_documented() -> None:
    assert DOC["openapi"] == "3.1.0"
    methods = {path: set(item) - {"parameters"} for path, item in DOC["paths"].items()}
    assert methods == {
        "/v1/tasks": {"get", "post"},
        "/v1/tasks/batch": {"post"},
        "/v1/tasks/count": {"get"},
        "/v1/tasks/timeline": {"get"},
        "/v1/tasks/cancel": {"post"},
        "/v1/tasks/{id}": {"get", "patch", "delete"},
        "/healthz": {"get"},
        "/readyz": {"get"},
        "/v1/status": {"get"},
        "/metrics": {"get"},
        "/openapi.json": {"get"},
    }


def test_the_new_operations_answer_as_the_document_conventions_say() -> None:
    for path, method, other in (
        ("/v1/tasks", "get", "GET, POST"),
        ("/v1/tasks/count", "get", "GET"),
        ("/v1/tasks/timeline", "get", "GET"),
        ("/v1/tasks/cancel", "post", "POST"),
    ):
        operation = DOC["paths"][path][method]
        responses = operation["responses"]
        assert {"200", "401", "405", "422", "503"} <= set(responses), path
        for status in ("401", "405", "422", "503"):
            error = responses[status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}
        assert f"(Allow: {other})" in responses["405"]["description"]
        assert operation["security"] == [{"bearer": []}, {}]


def schemas_in(value: object) -> Iterator[JsonSchema]:
    """Every schema object of the document (what ``schema`` keys hold)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "schema" and isinstance(item, dict):
                yield item
            else:
                yield from schemas_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from schemas_in(item)


def test_every_schema_is_valid_json_schema_2020_12() -> None:
    schemas = [*schemas_in(DOC["paths"]), *DOC["components"]["schemas"].values()]
    assert len(schemas) > 40
    for schema in schemas:
        jsonschema_rs.meta.validate(schema)
        validator(schema)  # every pattern compiles, every $ref resolves


def test_the_document_loads_in_schemathesis() -> None:
    import schemathesis
    from schemathesis.core.result import Ok

    labels = set()
    for result in schemathesis.openapi.from_dict(DOC).get_all_operations():
        assert isinstance(result, Ok), result
        labels.add(result.ok().label)
    assert len(labels) == 14
    assert {"GET /v1/tasks", "GET /v1/tasks/timeline", "POST /v1/tasks/cancel"} <= labels


# -- create bodies: the metadata -----------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {"tags": []},
        {"tags": [f"t{i}" for i in range(8)]},
        {"tags": ["a", "a"]},  # a set: duplicates dropped
        {"tags": ["x" * 64, "tenant:7/a-b_c.d"]},
        {"content_type": "application/json", "content_encoding": "gzip"},
        {"content_type": " ~" * 127 + "!"},  # 255 printable ASCII characters
        {"headers": {}},
        {"headers": {"h": "v", "n": -(2**63), "m": 2**63 - 1, "b": True}},
        {"headers": {f"h{i}": i for i in range(16)}},
        {"headers": {"n" * 128: 1}},
        {"headers": {"x": 1, "X": 2, "xy": 3, "X_": 4, "-x-": 5, "~": 6, "!": 7}},
        {"headers": {"h": "v" * 1024}},
        {"late": "fire"},
        {"late": {"skip_after_ms": 0}},
        {"late": {"skip_after_ms": 2**63 - 1}},
        {"late": {"deadline": 1_800_000_000.5}},
        {"late": {"deadline": -5}},  # past: dead-lettered when published
        {"late": {"deadline": "2026-12-01T00:00:00Z"}},
    ],
)
def test_metadata_the_document_admits_is_accepted(extra: dict[str, object]) -> None:
    body = {"at": FAR_S, **extra}
    assert CREATE.is_valid(body)
    assert created(body)


@pytest.mark.parametrize(
    "extra",
    [
        {"tags": "one"},
        {"tags": [f"t{i}" for i in range(9)]},
        {"tags": ["ok", "not ok"]},
        {"tags": [""]},
        {"tags": ["x" * 65]},
        {"tags": [1]},
        {"content_type": ""},
        {"content_type": "x" * 256},
        {"content_encoding": "gzip\n"},
        {"content_encoding": "é"},
        {"headers": ["h"]},
        {"headers": {"x-due-ms": 1}},
        {"headers": {"X-Mine": "a"}},
        {"headers": {"x-": "a"}},
        {"headers": {"": 1}},
        {"headers": {"has space": 1}},
        {"headers": {"é": 1}},
        {"headers": {"n" * 129: 1}},
        {"headers": {f"h{i}": i for i in range(17)}},
        {"headers": {"h": 1.5}},
        {"headers": {"h": 2**63}},
        {"headers": {"h": -(2**63) - 1}},
        {"headers": {"h": [1]}},
        {"headers": {"h": {"a": 1}}},
        {"headers": {"h": "v" * 1025}},
        {"late": "skip"},
        {"late": {}},
        {"late": {"skip_after_ms": -1}},
        {"late": {"skip_after_ms": 2**63}},
        {"late": {"skip_after_ms": 1.5}},
        {"late": {"skip_after_ms": "5"}},
        {"late": {"skip_after_ms": 1, "deadline": 5}},
        {"late": {"deadline": "someday"}},
        {"late": {"deadline": True}},
        {"late": {"deadline_ms": 5}},
        {"late": {"never": 1}},
    ],
)
def test_metadata_the_document_refuses_is_refused(extra: dict[str, object]) -> None:
    body = {"at": FAR_S, **extra}
    assert not CREATE.is_valid(body)
    assert not created(body)


@pytest.mark.parametrize("task_id", sorted(RESERVED_IDS))
def test_the_reserved_ids_are_refused_at_create(task_id: str) -> None:
    body = {"id": task_id, "at": FAR_S}
    assert not CREATE.is_valid(body)
    assert not created(body)
    assert CREATE.is_valid({**body, "id": f"{task_id}2"})


def test_an_8_digit_integer_at_is_described() -> None:
    # JSON Schema cannot tell 20261201 (refused: 1970 or a date?) from 20261201.0.
    assert "8-digit integer (20261201) is refused" in openapi.AT_SCHEMA["description"]
    assert not created({"at": 20_261_201})
    assert created({"at": 20_261_201.0}) and created({"at": 120_261_201})


# Header names: what the engine's check reads (printable ASCII, no space, not x-).
_NAME_ALPHABET = "".join(chr(c) for c in range(0x1F, 0x80)) + "é\u00a0"


@settings(deadline=None)
@given(st.text(alphabet=_NAME_ALPHABET, max_size=130))
@example("x-")
@example("X-a")
@example("x")
@example("n" * 128)
def test_header_names_as_the_document_says(name: str) -> None:
    body = {"at": FAR_S, "headers": {name: 1}}
    assert CREATE.is_valid(body) == accepts(lambda: make_meta(headers={name: 1}))


# -- known mismatches between the server and the document ----------------------------------------


@pytest.mark.xfail(strict=True, reason="server: a null metadata field is taken as absent")
@pytest.mark.parametrize("field", ["tags", "content_type", "content_encoding", "headers"])
def test_null_metadata_is_refused(field: str) -> None:
    body = {"at": FAR_S, field: None}
    assert not CREATE.is_valid(body)
    assert not created(body)


@pytest.mark.xfail(strict=True, reason="server: an integral float (5.0) is no integer to it")
@pytest.mark.parametrize(
    "extra", [{"headers": {"h": 5.0}}, {"late": {"skip_after_ms": 1000.0}}], ids=str
)
def test_an_integral_float_is_an_integer(extra: dict[str, object]) -> None:
    body = {"at": FAR_S, **extra}
    assert CREATE.is_valid(body)  # JSON Schema: 5.0 is an integer
    assert created(body)


# -- finding tasks: query parameters -------------------------------------------------------------


# Epoch seconds as text: a sign, digits, points.
number_like = st.builds(
    str.__add__, st.sampled_from(["", "+", "-"]), st.text(alphabet="0123456789.", max_size=20)
)
_TIME_EXAMPLES = [
    "0",
    "-0",
    "+5",
    "5.",
    "-12345678",
    "12345678",
    "+12345678",
    "00000000",
    "000000001",
    "12345678.0",
    "253402300799",
    "253402300799.999",
    "253402300799.9990",
    "253402300799.9991",
    "253402300800",
    "0253402300799.5",
    "-999999999999999999999",
    "2026-12-01T10:00:00Z",
    "2026-12-01T10:00:00.123456789+05:30",
    "1960-01-01T00:00:00Z",
    "0001-01-01T00:00:00+05:00",
    "2026-13-01T10:00:00Z",
    "soon",
    "",
]


@settings(deadline=None)
@given(number_like | st.sampled_from(_TIME_EXAMPLES))
def test_a_time_parameter_as_the_document_says(text: str) -> None:
    for path, name in (
        ("/v1/tasks", "due_after"),
        ("/v1/tasks/count", "due_before"),
        ("/v1/tasks/timeline", "start"),
    ):
        admitted = param_validator(path, name).is_valid(text)
        assert admitted == accepts(lambda: parse_filter({"due_after": text})), (path, text)


@pytest.mark.xfail(strict=True, reason="server: takes any ISO 8601 form, and strips blanks")
@pytest.mark.parametrize(
    "text", ["2026-12-01", "2026-W49-2", "20261201T100000", "2026-12-01 10:00:00Z", " 5", "5\t"]
)
def test_a_time_parameter_is_epoch_seconds_or_rfc_3339_only(text: str) -> None:
    assert not accepts(lambda: parse_filter({"due_after": text}))


_FILTER_ALPHABET = "aZ09._:/- é"


@settings(deadline=None)
@given(
    st.sampled_from(["prefix", "tag", "routing_key"]),
    st.text(alphabet=_FILTER_ALPHABET, max_size=70) | st.text(alphabet="a", min_size=250),
)
def test_filter_parameters_as_the_document_says(name: str, value: str) -> None:
    admitted = param_validator("/v1/tasks", name).is_valid(value)
    assert admitted == accepts(lambda: parse_filter({name: value}))
    assert param_validator("/v1/tasks/timeline", name).is_valid(value) == admitted


@pytest.mark.parametrize("value", ["scheduled", "firing", "done", ""])
def test_the_state_parameter(value: str) -> None:
    admitted = validator(param_schema("/v1/tasks", "state")).is_valid(value)
    assert admitted == accepts(lambda: parse_filter({"state": value}))


@pytest.mark.parametrize("limit", [0, 1, 100, MAX_PAGE, MAX_PAGE + 1])
def test_the_page_limit(limit: int) -> None:
    admitted = validator(param_schema("/v1/tasks", "limit")).is_valid(limit)
    assert admitted == accepts(lambda: page_limit(limit))


@pytest.mark.parametrize(
    ("bucket", "buckets"), [(1, 1), (2_678_400, 1440), (0, 1), (2_678_401, 1), (60, 0), (60, 1441)]
)
def test_the_timeline_span(bucket: int, buckets: int) -> None:
    admitted = validator(param_schema("/v1/tasks/timeline", "bucket")).is_valid(
        bucket
    ) and validator(param_schema("/v1/tasks/timeline", "buckets")).is_valid(buckets)
    assert admitted == accepts(lambda: timeline_span(bucket * 1000, buckets))


def test_the_timeline_has_no_state_and_count_no_page() -> None:
    names = {p["name"] for p in DOC["paths"]["/v1/tasks/timeline"]["get"]["parameters"]}
    assert names == {"prefix", "routing_key", "tag", "start", "bucket", "buckets"}
    names = {p["name"] for p in DOC["paths"]["/v1/tasks/count"]["get"]["parameters"]}
    assert names == {"prefix", "routing_key", "tag", "due_after", "due_before", "state"}


@pytest.mark.parametrize(
    "key", [(0, "a"), (MAX_DUE_MS, "z" * 64), (1_800_000_000_000, "tenant:7-ab.c")]
)
def test_every_cursor_the_api_gives_out_is_one_the_document_admits(key: tuple[int, str]) -> None:
    cursor = encode_cursor(key)
    assert validator(param_schema("/v1/tasks", "cursor")).is_valid(cursor)
    page = {"tasks": [], "next_cursor": cursor}
    assert validator(answer_schema("/v1/tasks", "get")).is_valid(page)


# -- bulk cancel ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"prefix": "tenant-7"},
        {"tag": "t", "due_after": "2026-01-01T00:00:00Z", "due_before": FAR_S},
        {"routing_key": "fire.a/b", "due_after": -5},
        {"prefix": "p", "tag": "t", "routing_key": "r"},
        {},
        {"due_before": FAR_S},
        {"state": "firing", "tag": "a"},
        {"tag": "a", "colour": "red"},
        {"prefix": "bad prefix"},
        {"tag": ""},
        {"routing_key": 5},
        {"prefix": "p", "due_after": None},
        {"prefix": "p", "tag": None},
        {"prefix": "p", "due_after": "soon"},
        ["a"],
    ],
    ids=str,
)
def test_a_bulk_cancel_body_as_the_document_says(body: object) -> None:
    admitted = validator(body_schema("/v1/tasks/cancel", "post")).is_valid(body)
    assert admitted == accepts(lambda: parse_bulk_cancel(body))


# -- answers -------------------------------------------------------------------------------------


def full_task(payload: bytes) -> TaskInfo:
    meta = make_meta(
        tags=["b", "a"],
        content_type="application/json",
        content_encoding="identity",
        headers={"tenant": "7", "attempt": 3, "urgent": True},
        late=LatePolicy(LateKind.DEADLINE, 1_900_000_000_123),
    )
    task = Task("t-1", 1_800_000_000_500, "fire.a", payload, meta=meta)
    return TaskInfo(task, TaskState.FIRING)


@pytest.mark.parametrize("payload", [b'{"n": 1}', b"\xff\x00"])
def test_a_lookup_answer_matches_its_schema(payload: bytes) -> None:
    shown = task_json(full_task(payload))
    assert shown["late"] == {"deadline": 1_900_000_000.123}
    assert validator(answer_schema("/v1/tasks/{id}", "get")).is_valid(shown)
    for late in ("fire", {"skip_after_ms": 5}):
        assert validator(answer_schema("/v1/tasks/{id}", "get")).is_valid({**shown, "late": late})
    listed = task_json(full_task(payload), payload=False)
    page = validator(answer_schema("/v1/tasks", "get"))
    assert page.is_valid({"tasks": [listed], "next_cursor": None})
    assert not page.is_valid({"tasks": [shown], "next_cursor": None})  # no payload in a listing


def test_count_timeline_and_bulk_cancel_answers_match_their_schemas() -> None:
    assert validator(answer_schema("/v1/tasks/count", "get")).is_valid({"count": 0})
    line = timeline_json(Timeline(1_800_000_000_000, 60_000, 3, {"fire.a": [1, 0, 2]}))
    assert validator(answer_schema("/v1/tasks/timeline", "get")).is_valid(line)
    done = {"cancelled": 3, "too_late": 1}
    assert validator(answer_schema("/v1/tasks/cancel", "post")).is_valid(done)
