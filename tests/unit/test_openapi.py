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
import importlib.util
import itertools
import json
import os
import re
import zoneinfo
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from multidict import MultiDict
from support import schemathesis_cli
from triggerhook_client.rules import RESERVED_IDS

from triggerhook.api import fields_task, openapi, openapi_schedule
from triggerhook.api.bodies import (
    parse_batch,
    parse_create,
    parse_reschedule,
)
from triggerhook.api.fields_task import MAX_DELAY_MS
from triggerhook.api.listing import (
    parse_bulk_cancel,
    parse_filter,
    query_values,
    timeline_bucket_ms,
)
from triggerhook.api.render import task_json, timeline_json
from triggerhook.domain.bounds import MAX_DUE_MS as LATEST_MS
from triggerhook.domain.listing import (
    MAX_BUCKET_MS,
    MAX_PAGE,
    MIN_BUCKET_MS,
    Timeline,
    encode_cursor,
    page_limit,
    timeline_span,
)
from triggerhook.domain.meta import MAX_DEDUP_WINDOW_MS, LateKind, LatePolicy, make_meta
from triggerhook.domain.recurrence import (
    Recurrence,
    every_text,
    parse_cron,
    parse_every,
    parse_zone,
)
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
    return _validator(json.dumps(schema, sort_keys=True))


@functools.cache
def _validator(schema: str) -> jsonschema_rs.Validator:
    # Cached: the components hold large patterns (cron), slow to compile each time.
    root = {**json.loads(schema), "components": DOC["components"]}
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


def batch_created(body: object) -> bool:
    """Whether ``POST /v1/tasks/batch`` takes the body."""

    def parse() -> None:
        for index, spec in enumerate(parse_batch(body, 10_000)):
            resolve(spec, NOW_MS, RULES, f"tasks[{index}]")

    return accepts(parse)


CREATE = validator({"$ref": "#/components/schemas/CreateTask"})


def create_field(name: str) -> jsonschema_rs.Validator:
    """The validator of one field of a create body."""
    return validator(DOC["components"]["schemas"]["CreateTask"]["properties"][name])


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
        "/v1/tasks/{id}/pause": {"post"},
        "/v1/tasks/{id}/resume": {"post"},
        "/v1/tasks/{id}/trigger": {"post"},
        "/v1/tasks/{id}/backfill": {"post"},
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
    assert len(labels) == 18
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
        {"late": {"deadline_ms": 1_800_000_000_500}},
        {"late": {"deadline_ms": 1_800_000_000_000.0}},  # JSON Schema: an integer
        {"late": {"deadline_ms": -5}},  # past
        {"late": {"deadline_ms": LATEST_MS}},
        {"dedup_window_ms": 0},
        {"dedup_window_ms": 1},
        {"dedup_window_ms": 86_400_000.0},  # JSON Schema: an integer
        {"dedup_window_ms": 30 * 86_400_000},
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
        {"late": {"deadline_ms": 5.5}},
        {"late": {"deadline_ms": "5"}},
        {"late": {"deadline_ms": True}},
        {"late": {"deadline_ms": LATEST_MS + 1}},
        {"late": {"deadline_ms": 5, "deadline": 5}},
        {"late": {"never": 1}},
        {"dedup_window_ms": -1},
        {"dedup_window_ms": 30 * 86_400_000 + 1},
        {"dedup_window_ms": 1.5},
        {"dedup_window_ms": "1000"},
        {"dedup_window_ms": True},
        {"dedup_window_ms": {"ms": 1}},
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
    assert "8-digit integer (20261201) is refused" in fields_task.AT_SCHEMA["description"]
    assert not created({"at": 20_261_201})
    assert created({"at": 20_261_201.0}) and created({"at": 120_261_201})


# -- the due time: at_ms, delay_ms, at as text; at and delay as numbers (deprecated) ------------


@pytest.mark.parametrize(
    "when",
    [
        {"at_ms": FAR_S * 1000},
        {"at_ms": 0},
        {"at_ms": -(10**30)},  # past: fires at once
        {"at_ms": LATEST_MS},
        {"at_ms": 1_800_000_000_000.0},  # JSON Schema: an integer
        {"delay_ms": 0},
        {"delay_ms": 1},
        {"delay_ms": MAX_DELAY_MS},
        {"delay_ms": 60_000.0},
        {"at": "2030-12-01T09:00:00.250Z"},
        {"at": FAR_S},  # deprecated: epoch seconds
        {"delay": 1.5},  # deprecated: seconds
    ],
    ids=str,
)
def test_a_due_time_the_document_admits_is_accepted(when: dict[str, object]) -> None:
    assert CREATE.is_valid(when)
    assert created(when)
    reschedule = validator(body_schema("/v1/tasks/{id}", "patch"))
    assert reschedule.is_valid(when)
    assert accepts(lambda: parse_reschedule(when))


@pytest.mark.parametrize(
    "when",
    [
        {"at_ms": 1.5},
        {"at_ms": "1800000000000"},
        {"at_ms": True},
        {"at_ms": None},
        {"at_ms": LATEST_MS + 1},
        {"delay_ms": -1},
        {"delay_ms": 0.5},
        {"delay_ms": MAX_DELAY_MS + 1},
        {"delay_ms": "5"},
        {"at": "tomorrow"},
        {"at_ms": 1, "delay_ms": 1},
        {"at": FAR_S, "at_ms": 1},
        {"delay": 1, "delay_ms": 1},
        {"at": "2030-12-01T09:00:00Z", "delay_ms": 1},
        {},
    ],
    ids=str,
)
def test_a_due_time_the_document_refuses_is_refused(when: dict[str, object]) -> None:
    assert not CREATE.is_valid(when)
    assert not created(when)
    reschedule = validator(body_schema("/v1/tasks/{id}", "patch"))
    assert not reschedule.is_valid(when)
    assert not accepts(lambda: parse_reschedule(when))


def test_text_without_an_offset_is_utc() -> None:
    # The document's date-time (RFC 3339) has an offset; the server, like
    # test_a_time_parameter_is_epoch_seconds_or_rfc_3339_only's, takes more.
    properties = DOC["components"]["schemas"]["CreateTask"]["properties"]
    for name in ("at", "until"):
        assert "without an offset it is UTC" in properties[name]["description"], name
    naive = parse_create({"at": "2030-12-01T09:00:00", "late": {"deadline": "2030-12-01"}})
    utc = parse_create({"at": "2030-12-01T09:00:00Z", "late": {"deadline": "2030-12-01T00:00Z"}})
    assert naive == utc


def test_the_deprecated_spellings_are_marked_so() -> None:
    properties = DOC["components"]["schemas"]["CreateTask"]["properties"]
    assert properties["delay"]["deprecated"] is True
    for name in ("at", "until"):
        number = [s for s in properties[name]["oneOf"] if s.get("type") == "number"]
        assert number and number[0]["deprecated"] is True, name
        text = [s for s in properties[name]["oneOf"] if s.get("type") == "string"]
        assert "deprecated" not in text[0], name
    for name in ("at_ms", "delay_ms", "until_ms"):
        assert "deprecated" not in properties[name], name
    assert "without an offset it is UTC" in properties["at"]["description"]
    for path, method, status in (
        ("/v1/tasks", "post", "201"),
        ("/v1/tasks/{id}", "patch", "200"),
    ):
        answer = answer_schema(path, method, status)
        assert answer["properties"]["at"]["deprecated"] is True
        assert "deprecated" not in answer["properties"]["due_ms"]
        assert answer["required"] == ["id", "due_ms", "at"]


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


# -- null, and integral floats ------------------------------------------------------------------

NULLABLE_NOWHERE = [
    "tags",
    "content_type",
    "content_encoding",
    "headers",
    "late",
    "dedup_window_ms",
    "every",
    "cron",
    "timezone",
    "until",
]


@pytest.mark.parametrize("field", NULLABLE_NOWHERE)
def test_null_is_refused(field: str) -> None:
    body = {"at": FAR_S, field: None}
    assert not CREATE.is_valid(body)
    assert not created(body)
    assert not batch_created({"tasks": [body]})


@pytest.mark.parametrize("field", NULLABLE_NOWHERE)
def test_a_null_field_in_a_batch_is_named_with_its_task(field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_batch({"tasks": [{"at": FAR_S}, {"at": FAR_S, field: None}]}, 10)
    assert refused.value.field == f"tasks[1].{field}"


@pytest.mark.parametrize(
    "extra", [{"headers": {"h": 5.0}}, {"late": {"skip_after_ms": 1000.0}}], ids=str
)
def test_an_integral_float_is_an_integer(extra: dict[str, object]) -> None:
    body = {"at": FAR_S, **extra}
    assert CREATE.is_valid(body)  # JSON Schema: 5.0 is an integer
    assert created(body)


def test_the_dedup_window_has_the_domains_bounds_and_the_rules_default() -> None:
    schema = fields_task.DEDUP_WINDOW_SCHEMA
    assert (schema["minimum"], schema["maximum"]) == (0, MAX_DEDUP_WINDOW_MS)
    task = resolve(parse_create({"at": FAR_S, "dedup_window_ms": 1500.0}), NOW_MS, RULES)
    assert task.meta.dedup_window_ms == 1500 and type(task.meta.dedup_window_ms) is int
    # Absent: the rules' default; given (0 too): as given.
    windowed = TaskRules("k", 64, default_dedup_window_ms=60_000)
    assert resolve(parse_create({"at": FAR_S}), NOW_MS, windowed).meta.dedup_window_ms == 60_000
    none = parse_create({"at": FAR_S, "dedup_window_ms": 0})
    assert resolve(none, NOW_MS, windowed).meta.dedup_window_ms == 0


def test_an_integral_float_is_kept_as_the_integer() -> None:
    meta = resolve(parse_create({"at": FAR_S, "headers": {"h": 5.0}}), NOW_MS, RULES).meta
    assert meta.headers == (("h", 5),) and type(meta.headers[0][1]) is int
    task = resolve(parse_create({"at": FAR_S, "late": {"skip_after_ms": 7.0}}), NOW_MS, RULES)
    assert task.meta.late == LatePolicy(LateKind.SKIP_AFTER, 7)


# -- create bodies: series -----------------------------------------------------------------------

SERIES_END = "9999-12-31T00:00:00Z"


@pytest.mark.parametrize(
    "body",
    [
        {"every": "PT1S"},
        {"every": "PT15M", "at": FAR_S},
        {"every": "P1D", "delay": 5},
        {"every": "P2W3DT4H5M6.789S"},
        {"every": "PT1,5S"},
        {"every": "P000099999W"},  # 5 significant digits, 9 in all
        {"every": "PT999999999M999999999.999S"},
        {"every": "PT1S", "at": 5},  # already due: fires at once
        {"cron": "* * * * *"},
        {"cron": "*/15 9-17 * * MON-FRI", "timezone": "Europe/Berlin"},
        {"cron": "0 0 L * *", "at": FAR_S},
        {"cron": "0 9 * * 5#2,0L", "timezone": "America/New_York", "delay": 60},
        {"cron": " 0\t0\u00a029 feb *\n"},  # any whitespace; names in any case; a leap day
        {"cron": "0 0 30 2 1"},  # day of month or day of week: any Monday in February
        {"cron": "0 0 31 1-3/2 *"},  # January and March
        {"cron": "0 0 30,31 2,3 *"},
        {"cron": "00-059/007 0-23 LW,l jan-DEC/01 7,SUN-sat"},
        {"every": "PT1H", "until": SERIES_END},
        {"every": "PT1H", "until_ms": LATEST_MS},
        {"every": "PT1H", "at_ms": FAR_S * 1000, "until_ms": FAR_S * 1000 + 3_600_000},
        {"cron": "0 * * * *", "delay_ms": 60_000, "until": "9999-12-31T00:00:00+00:00"},
        {"cron": "0 * * * *", "until": 253_402_300_799.999, "at": FAR_S},
        {"cron": "0 * * * *", "timezone": "UTC", "routing_key": "a", "tags": ["t"]},
    ],
    ids=str,
)
def test_a_series_the_document_admits_is_accepted(body: dict[str, object]) -> None:
    assert CREATE.is_valid(body)
    assert created(body)
    assert batch_created({"tasks": [body, {"at": FAR_S}]})


@pytest.mark.parametrize(
    "body",
    [
        *[
            {"every": every}
            for every in [
                "",
                "P",
                "PT",
                "P1DT",
                "PT0S",
                "PT0.999S",
                "P0W0DT0H0M0,5S",
                "pt1s",
                "PT1.5555S",
                "PT1.S",
                "P1M",
                "P1Y",
                "PT1S ",
                " PT1S",
                "P0000000001W",
                "PT1M1H",
                "PT1H1H",
                "P1D1W",
                "PT1\u0661S",
                True,
                1.5,
                ["PT1S"],
            ]
        ],
        *[
            {"cron": cron}
            for cron in [
                "",
                " ",
                "* * * *",
                "* * * * * *",
                "@daily",
                "60 * * * *",
                "* 24 * * *",
                "* * 0 * *",
                "* * 32 * *",
                "* * * 13 *",
                "* * * 0 *",
                "* * * * 8",
                "5-1 * * * *",
                "*/0 * * * *",
                "*/ * * * *",
                "1/2/3 * * * *",
                "* * ? * *",
                "* * 15W * *",
                "L * * * *",
                "* * * * 5#6",
                "* * * * 5#0",
                "* * * * L",
                "* * * * MONL",
                "* * * JANUARY *",
                "* * * * MON#2/2",
                "1,,2 * * * *",
                "1, * * * *",
                "0 0 30 2 *",
                "0 0 31 4,6 *",
                "0 0 31 4-6/2 *",
                "0 0 30-31 feb */7",
                "0 0 31 apr/5 *,1",
                "*" + " " * 116 + "* * * *",  # 121 characters
                "\u0661 * * * *",
                "* * * * *\u200b",
                5,
            ]
        ],
        {"every": "PT1S", "cron": "* * * * *"},
        {"every": "PT1S", "at": FAR_S, "delay": 5},
        {"timezone": "Europe/Berlin", "at": FAR_S},
        {"every": "PT1S", "timezone": "UTC"},
        *[
            {"cron": "* * * * *", "timezone": zone}
            for zone in ["", "Mars/Base", "Factory", "localtime", "europe/berlin", "UTC ", 5]
        ],
        {"until": SERIES_END, "at": FAR_S},
        {"until_ms": LATEST_MS, "at_ms": FAR_S * 1000},
        {"every": "PT1S", "until_ms": 1.5},
        {"every": "PT1S", "until_ms": LATEST_MS + 1},
        {"every": "PT1S", "until": SERIES_END, "until_ms": LATEST_MS},
        {"every": "PT1S", "until": True},
        {"every": "PT1S", "until": "soon"},
        {},
    ],
    ids=str,
)
def test_a_series_the_document_refuses_is_refused(body: dict[str, object]) -> None:
    assert not CREATE.is_valid(body)
    assert not created(body)
    assert not batch_created({"tasks": [{"at": FAR_S}, body]})


@pytest.mark.parametrize("every", [5000, 1000, 86_400_000])
def test_every_is_a_duration_text_only(every: int) -> None:
    body = {"every": every}
    assert not CREATE.is_valid(body)
    assert not created(body)


_TIMING = {
    "at": FAR_S,
    "at_ms": FAR_S * 1000,
    "delay_ms": 60_000,
    "delay": 60,
    "every": "PT1H",
    "cron": "0 * * * *",
    "timezone": "Europe/Berlin",
    "until": SERIES_END,
    "until_ms": LATEST_MS,
}


@pytest.mark.parametrize(
    "names",
    [names for n in range(len(_TIMING) + 1) for names in itertools.combinations(_TIMING, n)],
    ids="+".join,
)
def test_which_times_and_schedules_a_body_may_give(names: tuple[str, ...]) -> None:
    """Exactly one of at, at_ms, delay_ms and delay, or none of them with every
    or cron (never both); every and cron exclusive; timezone only with cron,
    until or until_ms (not both) only with either."""
    body = {name: _TIMING[name] for name in names}
    assert CREATE.is_valid(body) == created(body), body


def test_an_until_before_the_first_occurrence_is_refused_as_described() -> None:
    until = DOC["components"]["schemas"]["CreateTask"]["properties"]["until"]
    assert "not before the first occurrence (else 422)" in until["description"]
    body = {"every": "PT1H", "at": FAR_S, "until": FAR_S - 1}
    assert CREATE.is_valid(body)  # no schema knows the first occurrence
    assert not created(body)
    assert created({**body, "until": FAR_S})  # inclusive


def test_a_first_cron_occurrence_after_9999_is_refused_as_described() -> None:
    cron = DOC["components"]["schemas"]["CreateTask"]["properties"]["cron"]
    assert "it must come by 9999-12-31T23:59:59.999Z (else 422)" in cron["description"]
    body = {"cron": "0 0 * * *", "at": 253_402_300_799}  # the next midnight is in 10000
    assert CREATE.is_valid(body)
    assert not created(body)
    assert created({**body, "cron": "* * * * *", "at": 253_402_300_000})


# every: durations, with numbers of 0-10 digits.
_UNIT_NUMBERS = st.builds(
    lambda zeros, number: "0" * zeros + str(number),
    st.integers(0, 2),
    st.integers(0, 10**8) | st.integers(0, 9) | st.sampled_from([99_999, 100_000, 10**6, 10**7]),
)


@st.composite
def durations(draw: st.DrawFn) -> str:
    text = "P" + "".join(f"{draw(_UNIT_NUMBERS)}{u}" for u in "WD" if draw(st.booleans()))
    clock = "".join(f"{draw(_UNIT_NUMBERS)}{u}" for u in "HM" if draw(st.booleans()))
    if draw(st.booleans()):
        fraction = draw(st.sampled_from(["", ".5", ",25", ".125", ".1250", "."]))
        clock += f"{draw(_UNIT_NUMBERS)}{fraction}S"
    return text + ("T" + clock if clock or draw(st.booleans()) else "")


def beyond_the_caps(text: str) -> bool:
    """Whether a number of ``text`` has more significant digits than the document admits."""
    return any(
        len(number.lstrip("0")) > openapi_schedule.EVERY_DIGITS[unit]
        for number, unit in re.findall(r"([0-9]+)([WDHMS])", text)
    )


@settings(deadline=None, max_examples=500)
@given(durations() | st.text(alphabet="PTWDHMS01.,", max_size=12))
@example("P100000W")
@example("P0000000001W")
def test_every_as_the_document_says(text: str) -> None:
    admitted = create_field("every").is_valid(text)
    accepted = accepts(lambda: parse_every(text))
    assert accepted or not admitted, text  # what the document admits is taken
    assert admitted or not accepted or beyond_the_caps(text), text


def test_the_every_caps_keep_every_sum_within_the_limit() -> None:
    caps = openapi_schedule.EVERY_DIGITS
    longest = "P{}W{}DT{}H{}M{}.999S".format(*("9" * caps[unit] for unit in "WDHMS"))
    assert create_field("every").is_valid(longest)
    assert parse_every(longest) <= LATEST_MS
    assert parse_every("P100000W") and not create_field("every").is_valid("P100000W")
    assert "longer periods within it are taken too" in openapi_schedule.EVERY_SCHEMA["description"]


def test_cron_fields_are_separated_by_pythons_whitespace() -> None:
    spaces = {c for c in map(chr, range(0x110000)) if c.isspace()}
    pattern = re.compile(f"[{openapi_schedule.CRON_SPACE}]")
    assert {c for c in map(chr, range(0x110000)) if pattern.fullmatch(c)} == spaces


# cron: expressions near the grammar, valid or just off it (out of range, descending, step 0, ...).
_NAMES = ["jan", "FEB", "Jun", "sep", "NOV", "sun", "MON", "Fri", "sat", "xyz", "MONDAY"]
_NUMBERS = st.sampled_from([0, 1, 2, 4, 5, 6, 7, 8, 9, 11, 12, 13, 23, 24, 29, 30, 31, 32, 59, 60])


@st.composite
def cron_values(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_NAMES))
    return "0" * draw(st.integers(0, 1)) + str(draw(_NUMBERS))


@st.composite
def cron_terms(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from(["L", "LW", "lw", "W", "L/3", "5L", "7l", "?", "L5"]))
    if kind == 1:
        return f"{draw(cron_values())}#{draw(st.sampled_from(['0', '1', '5', '6', '05', '']))}"
    base = draw(st.sampled_from(["*", "{v}", "{v}-{w}", "{v}-{w}", "{v}-{v}"]))
    text = base.format(v=draw(cron_values()), w=draw(cron_values()))
    if draw(st.booleans()):
        text += "/" + draw(
            st.sampled_from(["0", "1", "2", "5", "7", "11", "12", "31", "99", "007"])
        )
    return text


_DAYS_OF_MONTH = ["30", "31", "30,31", "30-31", "31/3", "30/2", "29-31/2", "31-31"]
_SHORT_MONTHS = ["2", "feb", "2-4/2", "4/5", "9/2", "4,6", "2/11", "FEB-mar/2", "apr-jun/2"]


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    fields = draw(st.lists(st.lists(cron_terms(), min_size=1, max_size=3), min_size=4, max_size=6))
    texts = [",".join(terms) for terms in fields]
    if len(texts) == 5 and draw(st.booleans()):  # near a day no month has
        texts[2] = draw(st.sampled_from(_DAYS_OF_MONTH))
        texts[3] = draw(st.sampled_from(_SHORT_MONTHS))
        texts[4] = draw(st.sampled_from(["*", "*/2", "*,1", "1", "*/8", "5#5"]))
    spaces = st.sampled_from(["", " ", "  ", "\t", "\u2003", "\x1c", "\n"])
    gaps = [draw(spaces.filter(bool)) for _ in texts[1:]]
    inner = texts[0] + "".join(gap + text for gap, text in zip(gaps, texts[1:], strict=True))
    return draw(spaces) + inner + draw(spaces)


def cron_accepted(text: str) -> bool:
    return accepts(lambda: parse_cron(text, "UTC"))


@settings(deadline=None, max_examples=400)
@given(cron_expressions())
@example("0 0 30 2 *")
@example("0 0 31 2-4/2 *")
@example("0 0 31 2-4 *")
def test_cron_as_the_document_says(text: str) -> None:
    assert create_field("cron").is_valid(text) == cron_accepted(text), text
    if cron_accepted(text):  # and as an answer shows it
        shown = validator({"$ref": "#/components/schemas/ShownCron"})
        assert shown.is_valid(parse_cron(text, "UTC")), text


def zone_database_names() -> set[str]:
    """Every file and directory name of the time-zone databases zoneinfo reads."""
    package = importlib.util.find_spec("tzdata")  # what zoneinfo falls back to
    assert package is not None and package.origin is not None
    roots = [*zoneinfo.TZPATH, os.path.join(os.path.dirname(package.origin), "zoneinfo")]
    names = set()
    for root in roots:
        for folder, dirs, files in os.walk(root):
            names |= {os.path.relpath(os.path.join(folder, n), root) for n in dirs + files}
    return names


ZONE_NAMES = sorted(zone_database_names())
ZONE_DIRECTORIES = [n for n in ZONE_NAMES if os.path.isdir(os.path.join(zoneinfo.TZPATH[0], n))]


def zone_taken(name: str) -> bool:
    return accepts(lambda: parse_zone(name))


def test_the_time_zones_are_the_ones_the_server_takes() -> None:
    zones = validator({"$ref": "#/components/schemas/TimeZone"})
    files = [n for n in ZONE_NAMES if n not in ZONE_DIRECTORIES and "__" not in n]
    assert len(files) > 500 and len(openapi_schedule.time_zones()) > 400
    for name in files:
        assert zones.is_valid(name) == zone_taken(name), name
    for name in ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5"]:
        assert zones.is_valid(name) and zone_taken(name)


@settings(deadline=None)
@given(
    st.from_regex(openapi_schedule.ZONE_NAME_PATTERN)
    | st.text(alphabet="Eu/rope_+-0. B", max_size=16)
)
def test_a_time_zone_as_the_document_says(name: str) -> None:
    zones = validator({"$ref": "#/components/schemas/TimeZone"})
    assert zones.is_valid(name) == zone_taken(name), name


# -- the fuzz test's harness (tests/support/schemathesis_cli.py) ---------------------------------


@settings(deadline=None, max_examples=150)
@given(schemathesis_cli.cron_expressions().filter(schemathesis_cli.matches_a_date))
def test_the_fuzzers_cron_expressions_are_admitted_and_taken(text: str) -> None:
    # Filtered by the pattern in the fuzzer too; most must pass it, or drawing is slow.
    assert create_field("cron").is_valid(text) or len(text) > 120, text
    assert len(text) > 120 or created({"cron": text}), text


@pytest.mark.parametrize(
    ("at", "moved"),
    [
        ("9999-12-31T23:59:59.999Z", "9599-12-31T23:59:59.999Z"),
        ("9952-02-29T00:00:00+01:00", "9552-02-29T00:00:00+01:00"),  # leap days stay
        ("9949-12-31T23:59:59Z", "9949-12-31T23:59:59Z"),
        (253_402_300_799.999, 253_402_300_799.999 - 400 * 365.2425 * 86_400),
        (4_000_000_000, 4_000_000_000),
    ],
)
def test_the_fuzzer_moves_a_cron_series_out_of_its_last_50_years(at: object, moved: object) -> None:
    body = {"cron": "0 0 29 2 *", "at": at, "until": 5}
    schemathesis_cli.series_in_time(body)
    assert body == {"cron": "0 0 29 2 *", "at": moved, "until": schemathesis_cli.LATEST_S}
    assert created(body)


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        (
            {
                "at": "2030-01-01T00:00:00Z",
                "at_ms": 5,
                "delay": 1,
                "payload": "a",
                "payload_b64": "",
            },
            {"at": "2030-01-01T00:00:00Z", "payload": "a"},
        ),
        (
            {"every": "PT1M", "cron": "* * * * *", "timezone": "UTC", "until": 5, "until_ms": 5},
            {"cron": "* * * * *", "timezone": "UTC", "until": 5},
        ),
        ({"every": "PT1M", "timezone": "UTC", "until_ms": 5}, {"every": "PT1M", "until_ms": 5}),
        ({"at_ms": 5, "timezone": "UTC", "until": 5, "until_ms": 5}, {"at_ms": 5}),
    ],
    ids=str,
)
def test_the_fuzzer_keeps_a_batch_tasks_dependencies(
    body: dict[str, object], kept: dict[str, object]
) -> None:
    assert not CREATE.is_valid(body)
    schemathesis_cli.dependencies_kept(body)
    assert body == kept
    assert CREATE.is_valid(body)


def test_the_fuzzer_keeps_one_parameter_of_each_pair() -> None:
    query = {
        **{"tag": "t", "due_after": "x", "due_after_ms": 5, "due_before": "y"},
        **{"start": "z", "start_ms": 6, "bucket": 1, "bucket_ms": 1000},
    }
    schemathesis_cli.one_of_each_pair(query)
    assert query == {
        **{"tag": "t", "due_after_ms": 5, "due_before": "y"},
        **{"start_ms": 6, "bucket_ms": 1000},
    }


@pytest.mark.parametrize(
    ("at_ms", "moved"),
    [
        (LATEST_MS, LATEST_MS - 146_097 * 86_400_000),
        (253_339_200_000_000, 253_339_200_000_000 - 146_097 * 86_400_000),  # 9998-01-01
        (4_000_000_000_000, 4_000_000_000_000),
    ],
)
def test_the_fuzzer_moves_a_cron_series_in_ms_out_of_its_last_50_years(
    at_ms: int, moved: int
) -> None:
    body = {"cron": "0 0 29 2 *", "at_ms": at_ms, "until_ms": 5}
    schemathesis_cli.series_in_time(body)
    assert body == {"cron": "0 0 29 2 *", "at_ms": moved, "until_ms": LATEST_MS}
    assert created(body)


# -- known mismatches between the server and the document ----------------------------------------


@pytest.mark.parametrize("cron", ["0 0 * * \u017fun", "0 0 * * fr\u0131", "0 0 * \u017fep *"])
def test_cron_names_are_ascii(cron: str) -> None:
    assert not create_field("cron").is_valid(cron)
    assert not cron_accepted(cron)


@pytest.mark.parametrize("name", ["Europe", "America/Argentina", "Etc"])
def test_a_directory_of_the_zone_database_is_refused(name: str) -> None:
    assert name in ZONE_DIRECTORIES
    assert not validator({"$ref": "#/components/schemas/TimeZone"}).is_valid(name)
    assert not created({"cron": "* * * * *", "timezone": name})


@pytest.mark.xfail(strict=True, reason='server: names the field "due", which no body has')
def test_a_first_cron_occurrence_after_9999_is_refused_naming_a_field_of_the_body() -> None:
    with pytest.raises(ValidationError) as refused:
        resolve(parse_create({"cron": "0 0 * * *", "at": 253_402_300_799}), NOW_MS, RULES)
    assert refused.value.field in ("at", "cron")


def test_a_cron_expression_no_date_matches_is_refused_as_described() -> None:
    cron = DOC["components"]["schemas"]["CreateTask"]["properties"]["cron"]
    assert "or none within 50 years (0 0 LW * */6" in cron["description"]
    body = {"cron": "0 0 LW * */6"}  # the last weekday of a month, on a Saturday or Sunday
    assert CREATE.is_valid(body)  # no pattern states it
    assert not created(body)


@pytest.mark.xfail(
    strict=True, reason="server: an expression no date matches is refused as due or until"
)
@pytest.mark.parametrize("body", [{}, {"at": FAR_S}, {"until": SERIES_END}], ids=str)
def test_a_cron_expression_no_date_matches_is_refused_naming_cron(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as refused:
        resolve(parse_create({"cron": "0 0 LW * */6", **body}), NOW_MS, RULES)
    assert refused.value.field == "cron"


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
    ("bucket", "buckets"),
    [(1, 1), (2_678_400, 12), (60, 1440), (0, 1), (2_678_401, 1), (60, 0), (60, 1441)],
)
def test_the_timeline_span(bucket: int, buckets: int) -> None:
    admitted = validator(param_schema("/v1/tasks/timeline", "bucket")).is_valid(
        bucket
    ) and validator(param_schema("/v1/tasks/timeline", "buckets")).is_valid(buckets)
    assert admitted == accepts(lambda: timeline_span(bucket * 1000, buckets))


def test_a_timeline_span_over_its_bound_is_refused_as_the_document_says() -> None:
    # A bound on a product of two parameters: the schemas cannot say it, the
    # description does (and the 422 it gets is documented).
    [buckets] = [
        p for p in DOC["paths"]["/v1/tasks/timeline"]["get"]["parameters"] if p["name"] == "buckets"
    ]
    assert "372 days" in buckets["description"]
    assert not accepts(lambda: timeline_span(2_678_400_000, 13))
    assert not accepts(lambda: timeline_span(86_400_000, 1440))


@pytest.mark.parametrize(
    "bucket_ms", [MIN_BUCKET_MS - 1, MIN_BUCKET_MS, 1500, MAX_BUCKET_MS, MAX_BUCKET_MS + 1]
)
def test_the_timeline_bucket_in_ms(bucket_ms: int) -> None:
    admitted = param_validator("/v1/tasks/timeline", "bucket_ms").is_valid(bucket_ms)
    values = query_values(MultiDict(bucket_ms=str(bucket_ms)), frozenset({"bucket_ms"}))
    assert admitted == accepts(lambda: timeline_span(timeline_bucket_ms(values), 1))
    assert admitted == accepts(lambda: timeline_bucket_ms(values))  # refused naming bucket_ms


def test_a_timeline_bucket_given_twice_is_refused() -> None:
    with pytest.raises(ValidationError) as both:
        timeline_bucket_ms({"bucket": "60", "bucket_ms": "60000"})
    assert both.value.field == "bucket"
    assert timeline_bucket_ms({"bucket": "2"}) == 2000  # deprecated: seconds
    assert timeline_bucket_ms({}) == 60_000


@settings(deadline=None)
@given(
    st.integers(min_value=-(10**20), max_value=10**20)
    | st.sampled_from([0, -1, MAX_DUE_MS, MAX_DUE_MS + 1])
)
def test_an_epoch_ms_parameter_as_the_document_says(ms: int) -> None:
    for path, name in (
        ("/v1/tasks", "due_after_ms"),
        ("/v1/tasks/count", "due_before_ms"),
        ("/v1/tasks/timeline", "start_ms"),
    ):
        admitted = param_validator(path, name).is_valid(ms)
        query = query_values(MultiDict({name: str(ms)}), frozenset({name}))
        assert admitted == accepts(functools.partial(parse_filter, {"due_after_ms": query[name]}))


@pytest.mark.parametrize(
    "text", ["1.5", "5e3", "", " 5", "+5", "0x10", "\u0665"]
)  # the last: ARABIC-INDIC DIGIT FIVE
def test_an_epoch_ms_parameter_is_digits_only(text: str) -> None:
    with pytest.raises(ValidationError) as refused:
        query_values(MultiDict(start_ms=text), frozenset({"start_ms"}))
    assert refused.value.field == "start_ms"


@pytest.mark.parametrize("name", ["due_after", "due_before"])
def test_a_bound_given_as_text_and_in_ms_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as both:
        parse_filter({name: "2030-01-01T00:00:00Z", f"{name}_ms": 5})
    assert both.value.field == name
    assert "given: both" in both.value.message


def test_the_timeline_has_no_state_and_count_no_page() -> None:
    names = {p["name"] for p in DOC["paths"]["/v1/tasks/timeline"]["get"]["parameters"]}
    assert names == {
        *("prefix", "routing_key", "tag", "start", "start_ms", "bucket_ms", "bucket", "buckets")
    }
    names = {p["name"] for p in DOC["paths"]["/v1/tasks/count"]["get"]["parameters"]}
    assert names == {
        *("prefix", "routing_key", "tag", "state", "up_to"),
        *("due_after", "due_after_ms", "due_before", "due_before_ms"),
    }


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
        {"tag": "t", "due_after_ms": -5, "due_before_ms": MAX_DUE_MS},
        {"tag": "t", "due_before_ms": MAX_DUE_MS + 1},
        {"tag": "t", "due_before_ms": 4e12},
        {"tag": "t", "due_before_ms": 4.5e12 + 0.5},
        {"tag": "t", "due_after_ms": "5"},
        {"tag": "t", "due_after_ms": True},
        {"tag": "t", "due_after": "2026-01-01T00:00:00Z", "due_after_ms": 5},
        {"tag": "t", "due_before": FAR_S, "due_before_ms": 5},
        {"tag": "t", "due_after": FAR_S, "due_before_ms": 5},
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
        dedup_window_ms=86_400_000,
    )
    task = Task("t-1", 1_800_000_000_500, "fire.a", payload, meta=meta)
    return TaskInfo(task, TaskState.FIRING)


@pytest.mark.parametrize("payload", [b'{"n": 1}', b"\xff\x00"])
def test_a_lookup_answer_matches_its_schema(payload: bytes) -> None:
    shown = task_json(full_task(payload))
    assert shown["late"] == {"deadline_ms": 1_900_000_000_123, "deadline": 1_900_000_000.123}
    assert (shown["due_ms"], shown["at"]) == (1_800_000_000_500, 1_800_000_000.5)
    assert validator(answer_schema("/v1/tasks/{id}", "get")).is_valid(shown)
    for late in ("fire", {"skip_after_ms": 5}):
        assert validator(answer_schema("/v1/tasks/{id}", "get")).is_valid({**shown, "late": late})
    listed = task_json(full_task(payload), payload=False)
    page = validator(answer_schema("/v1/tasks", "get"))
    assert page.is_valid({"tasks": [listed], "next_cursor": None})
    assert not page.is_valid({"tasks": [shown], "next_cursor": None})  # no payload in a listing


def test_a_throttled_task_answer_matches_its_schema() -> None:
    info = full_task(b"p")
    waiting = TaskInfo(info.task, TaskState.SCHEDULED, throttled=True, fire_ms=1_800_000_009_000)
    shown = task_json(waiting)
    assert (shown["throttled"], shown["fire_ms"]) == (True, 1_800_000_009_000)
    lookup = validator(answer_schema("/v1/tasks/{id}", "get"))
    assert lookup.is_valid(shown)
    assert lookup.is_valid({**shown, "throttled": False})
    page = validator(answer_schema("/v1/tasks", "get"))
    assert page.is_valid({"tasks": [task_json(waiting, payload=False)], "next_cursor": None})
    for change in ({"throttled": 1}, {"throttled": None}, {"fire_ms": 1.5}, {"fire_ms": "x"}):
        assert not lookup.is_valid({**shown, **change}), change


SERIES = [
    Recurrence(every_ms=1000),
    Recurrence(every_ms=788_645_123, until_ms=LATEST_MS, occurrence=3),
    Recurrence(every_ms=1500, stopped=True, occurrence=2),
    Recurrence(every_ms=LATEST_MS),
    Recurrence(cron="*/15 9-17 * * MON-FRI", timezone="Europe/Berlin", occurrence=7),
    Recurrence(cron="0 0 L * *", timezone="UTC", until_ms=1_900_000_000_001, stopped=True),
]


@pytest.mark.parametrize("recur", SERIES, ids=str)
def test_a_series_answer_matches_its_schema(recur: Recurrence) -> None:
    meta = make_meta(tags=["s"], recur=recur)
    info = TaskInfo(Task("s-1", 1_800_000_000_000, "fire.s", b"", meta=meta), TaskState.SCHEDULED)
    shown = task_json(info)
    assert shown["occurrence"] == recur.occurrence
    if recur.until_ms is not None:
        assert (shown["until_ms"], shown["until"]) == (recur.until_ms, recur.until_ms / 1000)
    lookup = validator(answer_schema("/v1/tasks/{id}", "get"))
    assert lookup.is_valid(shown)
    listing = validator(answer_schema("/v1/tasks", "get"))
    assert listing.is_valid({"tasks": [task_json(info, payload=False)], "next_cursor": None})


@pytest.mark.parametrize(
    "change",
    [
        {"cron": "* * * * *", "timezone": "UTC"},  # with every
        {"every": None, "cron": "* * * * *"},  # no timezone
        {"every": None},  # an occurrence of no series
        {"stopping": False},
        {"occurrence": 0},
        {"every": "PT24H"},  # shown as P1D
        {"every": "P1W"},  # shown as P7D
        {"until": "2030-01-01T00:00:00Z"},  # epoch seconds
        {"until_ms": 1.5},  # epoch ms
        {"due_ms": 1_800_000_000_000.5},
    ],
    ids=str,
)
def test_a_series_answer_the_schema_refuses(change: dict[str, object]) -> None:
    meta = make_meta(recur=Recurrence(every_ms=60_000, occurrence=2))
    info = TaskInfo(Task("s-1", 1_800_000_000_000, "fire.s", b"", meta=meta), TaskState.SCHEDULED)
    shown = {**task_json(info), **change}
    shown = {key: value for key, value in shown.items() if value is not None}
    assert not validator(answer_schema("/v1/tasks/{id}", "get")).is_valid(shown)


@settings(deadline=None)
@given(st.integers(1000, LATEST_MS))
@example(1000)
@example(86_400_000)
@example(LATEST_MS)
def test_every_period_is_shown_as_the_answer_schema_says(every_ms: int) -> None:
    assert validator(openapi_schedule.EVERY_SHOWN_SCHEMA).is_valid(every_text(every_ms))


def test_count_timeline_and_bulk_cancel_answers_match_their_schemas() -> None:
    count = validator(answer_schema("/v1/tasks/count", "get"))
    assert count.is_valid({"count": 0, "at_least": False})
    assert not count.is_valid({"count": 0})  # this release always says whether it is exact
    line = timeline_json(Timeline(1_800_000_000_000, 60_000, 3, {"fire.a": [1, 0, 2]}))
    assert (line["start_ms"], line["bucket_ms"]) == (1_800_000_000_000, 60_000)
    assert (line["start"], line["bucket"]) == (1_800_000_000, 60)  # deprecated
    assert validator(answer_schema("/v1/tasks/timeline", "get")).is_valid(line)
    done = {"cancelled": 3, "too_late": 1, "next_cursor": None}
    assert validator(answer_schema("/v1/tasks/cancel", "post")).is_valid(done)
    stopped = {**done, "next_cursor": encode_cursor((1_800_000_000_000, "a"))}
    assert validator(answer_schema("/v1/tasks/cancel", "post")).is_valid(stopped)
