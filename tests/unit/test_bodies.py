"""The JSON bodies shared by the HTTP API and the AMQP command channel."""

from __future__ import annotations

import pytest

from triggerhook.api.bodies import (
    MAX_DELAY_S,
    MalformedJson,
    When,
    decode_json,
    parse_batch,
    parse_create,
    parse_id,
    parse_reschedule,
)
from triggerhook.app import TaskSpec
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
