"""Task validation: every rejected input raises ValidationError naming its field."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.domain.meta import NO_META, Meta
from triggerhook.domain.task import (
    MAX_DUE_MS,
    MIN_DUE_MS,
    Task,
    make_task,
    new_task_id,
    validate_due_ms,
    validate_id,
    validate_payload,
    validate_routing_key,
)
from triggerhook.errors import ValidationError

DUE = 1_700_000_000_000


def build(
    task_id: str | None = "t-1",
    due_ms: int = DUE,
    routing_key: str = "billing.charge",
    payload: object = b"x",
    max_payload_bytes: int = 16,
) -> Task:
    return make_task(
        task_id=task_id,
        due_ms=due_ms,
        routing_key=routing_key,
        payload=payload,
        max_payload_bytes=max_payload_bytes,
    )


# -- id -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task_id",
    ["a", "A-z_0.9:x", "x" * 64, "550e8400-e29b-41d4-a716-446655440000", "order:42.retry-1"],
)
def test_valid_ids_are_kept(task_id: str) -> None:
    assert validate_id(task_id) == task_id
    assert build(task_id=task_id).id == task_id


@pytest.mark.parametrize(
    "task_id",
    [
        "",
        "x" * 65,
        "has space",
        "slash/not-allowed",
        "tab\t",
        "trailing-newline\n",
        "ünicode",
        "semi;colon",
        "quote'",
        "star*",
    ],
)
def test_bad_ids_are_rejected_naming_id(task_id: str) -> None:
    with pytest.raises(ValidationError) as info:
        build(task_id=task_id)
    assert info.value.field == "id"
    assert str(info.value).startswith("id: ")


@pytest.mark.parametrize("task_id", [42, b"bytes-id", ["list"]])
def test_non_string_id_is_rejected(task_id: object) -> None:
    with pytest.raises(ValidationError) as info:
        validate_id(task_id)
    assert info.value.field == "id"


def test_missing_id_gets_a_fresh_uuid4() -> None:
    first = build(task_id=None)
    second = build(task_id=None)
    assert first.id != second.id
    for generated in (first.id, second.id, new_task_id()):
        parsed = uuid.UUID(generated)
        assert parsed.version == 4
        assert str(parsed) == generated  # canonical lowercase, hyphenated form
        assert validate_id(generated) == generated  # generated ids obey the id rule


# -- routing key -----------------------------------------------------------------


@pytest.mark.parametrize("key", ["a", "billing.charge", "a/b:c-d_e.f", "k" * 255])
def test_valid_routing_keys_are_kept(key: str) -> None:
    assert validate_routing_key(key) == key
    assert build(routing_key=key).routing_key == key


@pytest.mark.parametrize("key", ["", "k" * 256, "has space", "star.*", "hash.#", "ü", 7, None])
def test_bad_routing_keys_are_rejected_naming_routing_key(key: object) -> None:
    with pytest.raises(ValidationError) as info:
        validate_routing_key(key)
    assert info.value.field == "routing_key"


def test_make_task_rejects_bad_routing_key() -> None:
    with pytest.raises(ValidationError) as info:
        build(routing_key="bad key")
    assert info.value.field == "routing_key"


# -- payload ---------------------------------------------------------------------


def test_text_payload_is_utf8_encoded() -> None:
    assert build(payload="héllo").payload == "héllo".encode()


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (None, b""),
        (b"", b""),
        (b"\x00\xff", b"\x00\xff"),
        (bytearray(b"ab"), b"ab"),
        (memoryview(b"abc"), b"abc"),
    ],
)
def test_payload_forms_become_bytes(payload: object, expected: bytes) -> None:
    data = validate_payload(payload, 16)
    assert type(data) is bytes
    assert data == expected


def test_payload_exactly_at_the_limit_is_accepted() -> None:
    assert build(payload=b"x" * 16, max_payload_bytes=16).payload == b"x" * 16
    # The limit counts encoded bytes: 'é' is two bytes in UTF-8.
    assert validate_payload("é" * 8, 16) == "é".encode() * 8


def test_payload_over_the_limit_is_rejected_naming_payload() -> None:
    with pytest.raises(ValidationError) as info:
        build(payload=b"x" * 17, max_payload_bytes=16)
    assert info.value.field == "payload"
    assert "17" in info.value.message
    assert "16" in info.value.message


def test_text_payload_limit_counts_utf8_bytes() -> None:
    with pytest.raises(ValidationError) as info:
        validate_payload("é" * 8 + "a", 16)  # 9 characters, 17 bytes
    assert info.value.field == "payload"


def test_zero_limit_allows_only_empty_payload() -> None:
    assert validate_payload(b"", 0) == b""
    assert validate_payload(None, 0) == b""
    with pytest.raises(ValidationError):
        validate_payload(b"x", 0)


@pytest.mark.parametrize("payload", [5, 1.5, ["a"], {"a": 1}, object()])
def test_non_bytes_payload_is_rejected_naming_payload(payload: object) -> None:
    with pytest.raises(ValidationError) as info:
        build(payload=payload)
    assert info.value.field == "payload"


# -- due -------------------------------------------------------------------------


def test_due_bounds_are_1970_and_9999() -> None:
    assert MIN_DUE_MS == 0
    end = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert (end - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1) == MAX_DUE_MS


@pytest.mark.parametrize("due_ms", [MIN_DUE_MS, 1, DUE, MAX_DUE_MS])
def test_due_in_range_is_kept(due_ms: int) -> None:
    assert validate_due_ms(due_ms) == due_ms
    assert build(due_ms=due_ms).due_ms == due_ms


@pytest.mark.parametrize("due_ms", [MIN_DUE_MS - 1, -DUE, MAX_DUE_MS + 1, 10**20])
def test_due_out_of_range_is_rejected_naming_due(due_ms: int) -> None:
    with pytest.raises(ValidationError) as info:
        build(due_ms=due_ms)
    assert info.value.field == "due"


# -- the task itself ---------------------------------------------------------------


def test_make_task_builds_an_immutable_task() -> None:
    task = build(task_id="t-9", due_ms=DUE + 5, routing_key="a.b", payload="p")
    assert task == Task("t-9", DUE + 5, "a.b", b"p")
    with pytest.raises(AttributeError):
        task.due_ms = 0  # type: ignore[misc]


# attempts, rev, shard, epoch, fire_ms: which copy a task is.
_COPY = st.tuples(*[st.integers(0, 3)] * 5)


@given(
    a=st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.sampled_from(["k", "l"])),
    b=st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.sampled_from(["k", "l"])),
    payloads=st.tuples(st.sampled_from([b"", b"x"]), st.sampled_from([b"", b"x"])),
    tagged=st.tuples(st.booleans(), st.booleans()),
    copies=st.tuples(_COPY, _COPY),
)
def test_tasks_are_equal_exactly_when_their_content_is(
    a: tuple[str, int, str],
    b: tuple[str, int, str],
    payloads: tuple[bytes, bytes],
    tagged: tuple[bool, bool],
    copies: tuple[tuple[int, int, int, int, int], tuple[int, int, int, int, int]],
) -> None:
    """Content (id, due time, routing key, payload, metadata) decides; which
    copy it is (attempts, revision, shard, epoch, retry time) does not; == and
    != agree, and equal tasks hash alike (a set of tasks keeps one of each)."""
    metas = [Meta(tags=("t",)) if t else NO_META for t in tagged]
    first, second = (
        Task(*fields, payload, *copy, meta=meta)
        for fields, payload, meta, copy in zip((a, b), payloads, metas, copies, strict=True)
    )
    same = a == b and payloads[0] == payloads[1] and tagged[0] == tagged[1]
    assert (first == second) is same
    assert (first != second) is not same
    if same:
        assert hash(first) == hash(second)
        assert len({first, second}) == 1


def test_replace_changes_only_the_fields_named() -> None:
    task = Task("t", DUE, "k", b"p", attempts=1, rev=2, shard=3, epoch=4, fire_ms=5)
    retry = task.replace(attempts=2, fire_ms=DUE + 9)
    assert (retry.attempts, retry.fire_ms, retry.fire_at_ms) == (2, DUE + 9, DUE + 9)
    assert (retry.id, retry.due_ms, retry.rev, retry.shard, retry.epoch) == ("t", DUE, 2, 3, 4)
    assert (task.attempts, task.fire_ms) == (1, 5)  # the original is unchanged


def test_validation_error_is_a_value_error_with_field_and_message() -> None:
    with pytest.raises(ValueError, match=r"^routing_key: must be 1-255 characters") as info:
        validate_routing_key("")
    assert isinstance(info.value, ValidationError)
    assert info.value.message.startswith("must be")
