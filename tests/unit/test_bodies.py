"""The JSON bodies shared by the HTTP API and the AMQP command channel."""

from __future__ import annotations

import pytest

from triggerhook.api.bodies import (
    Backfill,
    MalformedJson,
    When,
    decode_json,
    parse_backfill,
    parse_batch,
    parse_cancel,
    parse_create,
    parse_id,
    parse_no_fields,
    parse_reschedule,
)
from triggerhook.api.fields_task import MAX_DELAY_MS, MAX_DELAY_S
from triggerhook.app import TaskSpec
from triggerhook.domain.meta import FIRE, NO_META, LateKind, LatePolicy, Meta
from triggerhook.domain.spec import TaskRules, resolve
from triggerhook.domain.task import MAX_DUE_MS
from triggerhook.errors import ValidationError


def test_a_full_create_body() -> None:
    spec = parse_create(
        {"id": "a", "at": 1_800_000_000.5, "routing_key": "k", "payload_b64": "AP8="}
    )
    assert spec == TaskSpec(id="a", at_ms=1_800_000_000_500, routing_key="k", payload=b"\x00\xff")


def test_delay_is_kept_relative_and_rounds_up() -> None:
    assert parse_create({"delay": 0.0001}) == TaskSpec(delay_ms=1)
    assert parse_create({"delay": 2, "payload": "hé"}) == TaskSpec(delay_ms=2000, payload="hé")


def test_the_due_time_in_milliseconds() -> None:
    assert parse_create({"at_ms": 1_800_000_000_250}) == TaskSpec(at_ms=1_800_000_000_250)
    assert parse_create({"at_ms": 1_800_000_000_000.0}).at_ms == 1_800_000_000_000  # JSON's 5.0
    assert parse_create({"at_ms": -(10**400)}).at_ms == 0  # past: fires at once
    assert parse_create({"at_ms": MAX_DUE_MS}).at_ms == MAX_DUE_MS
    assert parse_create({"delay_ms": 1500}) == TaskSpec(delay_ms=1500)
    assert parse_create({"delay_ms": MAX_DELAY_MS}) == TaskSpec(delay_ms=MAX_DELAY_MS)
    assert parse_reschedule({"at_ms": 7}) == When(at_ms=7)
    assert parse_reschedule({"delay_ms": 7.0}) == When(delay_ms=7)


@pytest.mark.parametrize(
    ("body", "field", "named"),
    [
        ({"at": "2030-01-01T00:00:00Z", "at_ms": 1}, "at", "at, at_ms"),
        ({"at_ms": 1, "delay_ms": 1}, "at_ms", "at_ms, delay_ms"),
        ({"delay_ms": 1, "delay": 1}, "delay_ms", "delay_ms, delay"),
        ({"at": 1, "at_ms": 1, "delay_ms": 1, "delay": 1}, "at", "at, at_ms, delay_ms, delay"),
    ],
)
def test_more_than_one_due_time_is_refused_naming_them(
    body: dict[str, object], field: str, named: str
) -> None:
    for parse in (parse_create, parse_reschedule):
        with pytest.raises(ValidationError) as info:
            parse(body)
        assert info.value.field == field
        assert info.value.message == f"give exactly one of at, at_ms and delay_ms (given: {named})"
    with pytest.raises(ValidationError) as batch:
        parse_batch({"tasks": [{"delay_ms": 1}, body]}, 10)
    assert batch.value.field == f"tasks[1].{field}"
    with pytest.raises(ValidationError) as series:
        parse_create({"every": "PT1M", **body})  # a series may give none, never two
    assert series.value.field == field


def test_the_deprecated_spellings_mean_what_they_did() -> None:
    # at as a number: epoch seconds; delay: seconds (both rounded up to the ms).
    assert parse_create({"at": 1_800_000_000.0001}) == parse_create({"at_ms": 1_800_000_000_001})
    assert parse_create({"delay": 1.5}) == parse_create({"delay_ms": 1500})
    assert parse_create({"at": "2030-01-01T00:00:00"}) == parse_create(
        {"at": "2030-01-01T00:00:00Z"}
    )  # text without an offset: UTC


def test_until_in_milliseconds() -> None:
    spec = parse_create({"every": "PT1M", "until_ms": 1_900_000_000_123.0})
    assert spec == TaskSpec(every="PT1M", until_ms=1_900_000_000_123)
    recur = resolve(spec, NOW_MS, RULES).meta.recur
    assert recur is not None and recur.until_ms == 1_900_000_000_123
    seconds = parse_create({"every": "PT1M", "until": 1_900_000_000.123})
    assert resolve(seconds, NOW_MS, RULES).meta == resolve(spec, NOW_MS, RULES).meta
    both = parse_create({"every": "PT1M", "until": 1, "until_ms": 1})
    with pytest.raises(ValidationError) as info:
        resolve(both, NOW_MS, RULES, "tasks[2]")
    assert info.value.field == "tasks[2].until"
    assert "at most one of until and until_ms" in info.value.message


def test_rfc3339_and_past_times() -> None:
    assert parse_create({"at": "2026-01-01T00:00:00.001Z"}).at_ms == 1_767_225_600_001
    assert parse_create({"at": "1960-01-01T00:00:00Z"}).at_ms == 0  # past: fires at once


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (None, "body"),
        ({"at": 1, "delay": 1}, "at"),
        ({}, "at"),
        ({"at": None}, "at"),
        ({"at_ms": None}, "at_ms"),
        ({"at_ms": 1.5}, "at_ms"),
        ({"at_ms": "1"}, "at_ms"),
        ({"at_ms": True}, "at_ms"),
        ({"at_ms": MAX_DUE_MS + 1}, "at_ms"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"delay_ms": 0.5}, "delay_ms"),
        ({"delay_ms": MAX_DELAY_MS + 1}, "delay_ms"),
        ({"delay_ms": False}, "delay_ms"),
        ({"delay_ms": 1, "until_ms": 1.5}, "until_ms"),
        ({"delay_ms": 1, "until_ms": None}, "until_ms"),
        ({"delay": True}, "delay"),
        ({"delay": float("inf")}, "delay"),
        ({"delay": 1, "id": None}, "id"),
        ({"delay": 1, "routing_key": None}, "routing_key"),
        ({"delay": 1, "id": "batch"}, "id"),
        ({"delay": 1, "payload": "a", "payload_b64": ""}, "payload"),
        ({"delay": 1, "payload_b64": "@@@"}, "payload_b64"),
        ({"delay": 1, "extra": 1}, "extra"),
    ],
)
def test_invalid_create_bodies_name_the_field(body: object, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_create(body)
    assert info.value.field == field


def test_batch_errors_name_index_and_field() -> None:
    with pytest.raises(ValidationError) as info:
        parse_batch({"tasks": [{"delay": 1}, {"delay": -1}]}, 10)
    assert info.value.field == "tasks[1].delay"
    bodies: list[dict[str, object]] = [
        {"tasks": []},
        {"tasks": [{"delay": 1}] * 3},
        {"tasks": {}},
        {},
    ]
    for body in bodies:
        with pytest.raises(ValidationError) as bad:
            parse_batch(body, 2)
        assert bad.value.field == "tasks"
    with pytest.raises(ValidationError) as extra:
        parse_batch({"tasks": [{"delay": 1}], "more": 1}, 2)
    assert extra.value.field == "more"


def test_reschedule_and_id() -> None:
    assert parse_reschedule({"delay": 1}) == When(delay_ms=1000)
    assert parse_reschedule({"id": "x", "at": 2}, extra=frozenset({"id"})) == When(at_ms=2000)
    with pytest.raises(ValidationError) as info:
        parse_reschedule({"id": "x", "at": 2})
    assert info.value.field == "id"
    assert parse_id({"id": "x"}) == "x"
    for body, field in (([], "body"), ({}, "id"), ({"id": 5}, "id")):
        with pytest.raises(ValidationError) as bad:
            parse_id(body)
        assert bad.value.field == field


@pytest.mark.parametrize(
    "body",
    [
        {"at": 0},
        {"at": -1e9},  # a past time means now; before 1970, the epoch
        {"at": "9999-12-31T23:59:59.999Z"},
        {"at": 253_402_300_799.999},
        {"delay": MAX_DELAY_S},
        {"delay": 0},
        {"at_ms": -1},
        {"at_ms": MAX_DUE_MS},
        {"delay_ms": MAX_DELAY_MS},
        {"delay_ms": 0},
    ],
)
def test_every_due_time_a_body_accepts_the_library_accepts(body: dict[str, object]) -> None:
    # So the interfaces never see an error under the library's own names
    # (at_ms, delay_ms): the body is the whole check of its due time.
    now_ms = 4_102_444_800_000  # 2100-01-01, later than any test runs
    task = resolve(parse_create(body), now_ms, TaskRules("rk", 64))
    assert 0 <= task.due_ms <= MAX_DUE_MS


def test_decode_json_reads_what_json_loads_read() -> None:
    raw = b'{"tasks": [{"id": "a", "at": 1.5, "payload": "h\\u00e9"}], "n": 123456789012345678901}'
    assert decode_json(raw) == {
        "tasks": [{"id": "a", "at": 1.5, "payload": "h\u00e9"}],
        "n": 123456789012345678901,
    }
    # Beyond the float range: infinite, as json.loads made it (then a 422 on the field).
    assert decode_json(b'{"at": 1e400, "delay": -1e999}') == {
        "at": float("inf"),
        "delay": float("-inf"),
    }
    with pytest.raises(ValidationError) as info:
        parse_create(decode_json(b'{"at": 1e400}'))
    assert info.value.field == "at"


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b'{"at": NaN}', b"[Infinity]", b"\xff\xfe{}", b'"\xff"', b"[" * 60_000, b"{} x"],
)
def test_decode_json_refuses_what_is_not_json(raw: bytes) -> None:
    with pytest.raises(MalformedJson):
        decode_json(raw)


# -- metadata (issue 14) -------------------------------------------------------------

RULES = TaskRules("rk", 64)
NOW_MS = 1_700_000_000_000


def test_a_create_body_with_every_metadata_field() -> None:
    spec = parse_create(
        {
            "id": "m",
            "delay": 1,
            "tags": ["b", "a", "b"],
            "content_type": "application/json",
            "content_encoding": "gzip",
            "headers": {"n": 1, "b": True, "s": "x"},
            "late": {"skip_after_ms": 250},
        }
    )
    assert spec == TaskSpec(
        id="m",
        delay_ms=1000,
        tags=["b", "a", "b"],
        content_type="application/json",
        content_encoding="gzip",
        headers={"n": 1, "b": True, "s": "x"},
        late=LatePolicy(LateKind.SKIP_AFTER, 250),
    )
    meta = resolve(spec, NOW_MS, RULES).meta
    assert meta == Meta(
        tags=("a", "b"),
        content_type="application/json",
        content_encoding="gzip",
        headers=(("b", True), ("n", 1), ("s", "x")),
        late=LatePolicy(LateKind.SKIP_AFTER, 250),
    )
    assert resolve(parse_create({"delay": 1}), NOW_MS, RULES).meta is NO_META


@pytest.mark.parametrize(
    ("late", "policy"),
    [
        ("fire", FIRE),
        ({"skip_after_ms": 0}, LatePolicy(LateKind.SKIP_AFTER, 0)),
        ({"skip_after_ms": 2**63 - 1}, LatePolicy(LateKind.SKIP_AFTER, 2**63 - 1)),
        ({"deadline": 1_800_000_000}, LatePolicy(LateKind.DEADLINE, 1_800_000_000_000)),
        ({"deadline": 1_800_000_000.5}, LatePolicy(LateKind.DEADLINE, 1_800_000_000_500)),
        ({"deadline": "1800000000.25"}, LatePolicy(LateKind.DEADLINE, 1_800_000_000_250)),
        ({"deadline": "2026-01-01T00:00:00Z"}, LatePolicy(LateKind.DEADLINE, 1_767_225_600_000)),
        (
            {"deadline": "2026-01-01T01:00:00.001+01:00"},
            LatePolicy(LateKind.DEADLINE, 1_767_225_600_001),
        ),
        ({"deadline": "1960-01-01T00:00:00Z"}, LatePolicy(LateKind.DEADLINE, 0)),  # past
        ({"deadline": "9999-12-31T23:59:59.999Z"}, LatePolicy(LateKind.DEADLINE, MAX_DUE_MS)),
        ({"deadline": "2026-01-01T00:00:00"}, LatePolicy(LateKind.DEADLINE, 1_767_225_600_000)),
        ({"deadline_ms": 1_800_000_000_250}, LatePolicy(LateKind.DEADLINE, 1_800_000_000_250)),
        ({"deadline_ms": 1_800_000_000_000.0}, LatePolicy(LateKind.DEADLINE, 1_800_000_000_000)),
        ({"deadline_ms": -5}, LatePolicy(LateKind.DEADLINE, 0)),  # past
        ({"deadline_ms": MAX_DUE_MS}, LatePolicy(LateKind.DEADLINE, MAX_DUE_MS)),
    ],
)
def test_late_forms(late: object, policy: LatePolicy) -> None:
    spec = parse_create({"delay": 1, "late": late})
    assert spec.late == policy
    assert resolve(spec, NOW_MS, RULES).meta.late == policy


@pytest.mark.parametrize(
    ("late", "field"),
    [
        (None, "late"),
        ("FIRE", "late"),
        ("skip_after_ms=5", "late"),
        (5, "late"),
        ([], "late"),
        ({}, "late"),
        ({"skip_after_ms": 1, "deadline": 2}, "late"),
        ({"never": 1}, "late.never"),
        ({"deadline_ms": 1.5}, "late.deadline_ms"),
        ({"deadline_ms": "1800000000000"}, "late.deadline_ms"),
        ({"deadline_ms": None}, "late.deadline_ms"),
        ({"deadline_ms": MAX_DUE_MS + 1}, "late.deadline_ms"),
        ({"deadline_ms": 1, "deadline": 1}, "late"),
        ({"skip_after_ms": -1}, "late.skip_after_ms"),
        ({"skip_after_ms": 1.5}, "late.skip_after_ms"),
        ({"skip_after_ms": "250"}, "late.skip_after_ms"),
        ({"skip_after_ms": True}, "late.skip_after_ms"),
        ({"skip_after_ms": 2**63}, "late.skip_after_ms"),
        ({"deadline": True}, "late.deadline"),
        ({"deadline": None}, "late.deadline"),
        ({"deadline": [1]}, "late.deadline"),
        ({"deadline": "tomorrow"}, "late.deadline"),
        ({"deadline": "20260101"}, "late.deadline"),  # ambiguous
        ({"deadline": float("inf")}, "late.deadline"),
        ({"deadline": 10**20}, "late.deadline"),  # after 9999
        ({"deadline": "10000-01-01T00:00:00Z"}, "late.deadline"),
    ],
)
def test_bad_late_names_the_field(late: object, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_create({"delay": 1, "late": late})
    assert info.value.field == field
    with pytest.raises(ValidationError) as batch:
        parse_batch({"tasks": [{"delay": 1}, {"delay": 1}, {"delay": 1, "late": late}]}, 10)
    assert batch.value.field == f"tasks[2].{field}"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tags": "a"}, "tags"),
        ({"tags": [f"t{i}" for i in range(9)]}, "tags"),
        ({"tags": ["ok", "no space"]}, "tags[1]"),
        ({"tags": ["ok", 1]}, "tags[1]"),
        ({"content_type": ""}, "content_type"),
        ({"content_type": 5}, "content_type"),
        ({"content_encoding": "caf\u00e9"}, "content_encoding"),
        ({"content_encoding": "a" * 256}, "content_encoding"),
        ({"headers": []}, "headers"),
        ({"headers": {f"h{i}": 1 for i in range(17)}}, "headers"),
        ({"headers": {"a b": 1}}, "headers"),
        ({"headers": {"x-a": 1}}, "headers.x-a"),
        ({"headers": {"X-Rev": 1}}, "headers.X-Rev"),
        ({"headers": {"a": 1.5}}, "headers.a"),
        ({"headers": {"a": None}}, "headers.a"),
        ({"headers": {"a": 2**63}}, "headers.a"),
        ({"headers": {"a": "v" * 1025}}, "headers.a"),
        ({"headers": {f"h{i}": "v" * 1000 for i in range(5)}}, "headers"),
    ],
)
def test_bad_metadata_names_the_field(fields: dict[str, object], field: str) -> None:
    # The body passes metadata through as given; resolve() checks it, naming
    # the field as the caller wrote it, inside a batch with its index.
    spec = parse_create({"delay": 1, **fields})
    with pytest.raises(ValidationError) as info:
        resolve(spec, NOW_MS, RULES)
    assert info.value.field == field
    specs = parse_batch({"tasks": [{"delay": 1}, {"delay": 2}, {"delay": 1, **fields}]}, 10)
    with pytest.raises(ValidationError) as batch:
        for index, each in enumerate(specs):  # as TriggerHook.schedule_many resolves them
            resolve(each, NOW_MS, RULES, f"tasks[{index}]")
    assert batch.value.field == f"tasks[2].{field}"


def test_a_batch_names_the_reserved_header() -> None:
    specs = parse_batch(
        {"tasks": [{"delay": 1}, {"delay": 1}, {"delay": 1, "headers": {"ok": 1, "x-a": "v"}}]}, 3
    )
    with pytest.raises(ValidationError) as info:
        [resolve(s, NOW_MS, RULES, f"tasks[{i}]") for i, s in enumerate(specs)]
    assert info.value.field == "tasks[2].headers.x-a"


def test_metadata_fields_are_create_fields_only() -> None:
    for name in ("tags", "headers", "late", "content_type", "content_encoding"):
        with pytest.raises(ValidationError) as info:
            parse_reschedule({"delay": 1, name: None})
        assert info.value.field == name


# -- a series' backfill, and the bodies that name nothing -----------------------------------------


def test_a_backfill_body_is_a_range_of_epoch_ms() -> None:
    assert parse_backfill({"from_ms": 5, "to_ms": 7}) == Backfill(5, 7)
    assert parse_backfill({"from_ms": 0, "to_ms": MAX_DUE_MS}) == Backfill(0, MAX_DUE_MS)
    assert parse_backfill({"from_ms": 5.0, "to_ms": 7.0}) == Backfill(5, 7)  # JSON's 5.0
    # The command's id is read by parse_cancel, each parser allowing the other's fields.
    command = {"id": "s", "from_ms": 5, "to_ms": 7}
    assert parse_backfill(command, extra=frozenset({"id"})) == Backfill(5, 7)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to_ms": 7}, "from_ms"),
        ({"from_ms": 5}, "to_ms"),
        ({"from_ms": None, "to_ms": 7}, "from_ms"),
        ({"from_ms": "5", "to_ms": 7}, "from_ms"),
        ({"from_ms": True, "to_ms": 7}, "from_ms"),
        ({"from_ms": 5.5, "to_ms": 7}, "from_ms"),
        ({"from_ms": -1, "to_ms": 7}, "from_ms"),  # strict: no "past means now" here
        ({"from_ms": 5, "to_ms": MAX_DUE_MS + 1}, "to_ms"),
        ({"from_ms": 5, "to_ms": 10**400}, "to_ms"),
        ({"from_ms": 5, "to_ms": 7, "id": "s"}, "id"),  # over HTTP the id is the path's
        ({"from_ms": 5, "to_ms": 7, "until_ms": 9}, "until_ms"),
        ([5, 7], "body"),
    ],
    ids=str,
)
def test_a_bad_backfill_body_names_the_field(body: object, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_backfill(body)
    assert info.value.field == field


def test_a_body_that_names_nothing_refuses_any_field() -> None:
    parse_no_fields({})
    for body, field in (({"id": "s"}, "id"), ([], "body"), ("x", "body")):
        with pytest.raises(ValidationError) as info:
            parse_no_fields(body)
        assert info.value.field == field
    # A pause, resume or trigger command: the id alone.
    assert parse_cancel({"id": "s"}) == "s"
