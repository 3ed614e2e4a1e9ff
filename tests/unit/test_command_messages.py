"""Parsing and applying AMQP commands (triggerhook.api.command_messages.execute), against
a TriggerHook on the in-memory FakeStore (never started: calls write directly).
The consumer itself is tested against RabbitMQ in tests/integration/test_commands.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from support.dedup import refuse_as_fired
from support.fakes import DEFAULT_NOW_MS, FakeClock, FakePublisher, FakeStore

from triggerhook.api.command_messages import Command, Rejected, execute, max_body_bytes
from triggerhook.api.scoped import ScopedHook
from triggerhook.app import TriggerHook
from triggerhook.domain.namespaces import ALL
from triggerhook.domain.task import Task
from triggerhook.errors import StoreUnavailable
from triggerhook.settings import Settings
from triggerhook.wiring import assemble

NOW_MS = int(DEFAULT_NOW_MS)
LIMIT = 4096


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def hook(store: FakeStore, clock: FakeClock) -> Iterator[TriggerHook]:
    settings = Settings(instance_id="unit", max_payload_bytes=64)
    yield assemble(settings, store, clock, lambda buffer, sink, retry, fail: FakePublisher())


def run(
    hook: TriggerHook,
    type_: str | None,
    body: object,
    message_id: str | None = None,
    redelivered: bool = False,
) -> dict[str, object]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return execute(ScopedHook(hook, ALL), Command(type_, raw, message_id, redelivered), LIMIT)


def rejected(hook: TriggerHook, type_: str | None, body: object) -> Rejected:
    with pytest.raises(Rejected) as info:
        run(hook, type_, body)
    return info.value


# -- create ---------------------------------------------------------------------------


def test_create_reply_and_row(hook: TriggerHook, store: FakeStore) -> None:
    reply = run(
        hook,
        "create",
        {"id": "a", "at": 1_800_000_000.25, "routing_key": "x.y", "payload": "hi"},
    )
    assert reply == {
        "ok": True,
        "id": "a",
        "due_ms": 1_800_000_000_250,
        "at": 1_800_000_000.25,  # deprecated: epoch seconds
        "created": True,
        "outcome": "created",
    }
    assert store.ids() == {"a"}
    row = store.row("a")
    assert row is not None
    assert row.task == Task("a", 1_800_000_000_250, "x.y", b"hi")


def test_create_again_is_a_no_op_and_other_content_conflicts(hook: TriggerHook) -> None:
    body = {"id": "a", "at": 1_800_000_000}
    assert run(hook, "create", body)["created"] is True
    assert run(hook, "create", body) == {
        "ok": True,
        "id": "a",
        "due_ms": 1_800_000_000_000,
        "at": 1_800_000_000.0,
        "created": False,
        "outcome": "exists",
    }
    reply = run(hook, "create", {**body, "payload": "other"})
    assert reply["ok"] is False
    error = reply["error"]
    assert isinstance(error, dict)
    assert error["code"] == "conflict"
    assert "a" in str(error["message"])


def test_create_delay_and_payload_b64(hook: TriggerHook, store: FakeStore) -> None:
    reply = run(hook, "create", {"id": "d", "delay": 1.5, "payload_b64": "AAH/"})
    assert (reply["due_ms"], reply["at"]) == (NOW_MS + 1500, (NOW_MS + 1500) / 1000)
    row = store.row("d")
    assert row is not None
    assert row.task.payload == b"\x00\x01\xff"
    assert row.task.routing_key == "triggerhook.fire"


def test_create_with_at_ms_and_delay_ms(hook: TriggerHook, store: FakeStore) -> None:
    assert run(hook, "create", {"id": "ms", "at_ms": 1_800_000_000_001})["due_ms"] == (
        1_800_000_000_001
    )
    assert run(hook, "create", {"id": "dm", "delay_ms": 1500})["due_ms"] == NOW_MS + 1500
    for task_id, due_ms in (("ms", 1_800_000_000_001), ("dm", NOW_MS + 1500)):
        row = store.row(task_id)
        assert row is not None and row.task.due_ms == due_ms


def test_create_takes_a_valid_message_id_as_task_id(hook: TriggerHook, store: FakeStore) -> None:
    assert run(hook, "create", {"delay": 60}, message_id="msg-1")["id"] == "msg-1"
    again = run(hook, "create", {"delay": 60}, message_id="msg-1")
    assert again["created"] is False
    # The body's id wins over the message id.
    assert run(hook, "create", {"id": "body-id", "delay": 60}, message_id="msg-2")["id"] == (
        "body-id"
    )
    # An invalid message id is not an error: the task gets a new UUID.
    other = run(hook, "create", {"delay": 60}, message_id="not a valid id!")
    assert uuid.UUID(str(other["id"])).version == 4
    assert store.ids() == {"msg-1", "body-id", str(other["id"])}


def test_redelivered_delay_create_is_the_same_command(hook: TriggerHook, clock: FakeClock) -> None:
    first = run(hook, "create", {"delay": 10}, message_id="m")
    clock.advance(500)  # the due time computed at redelivery differs
    assert run(hook, "create", {"delay": 10}, message_id="m", redelivered=True) == {
        "ok": True,
        "id": "m",
        "due_ms": first["due_ms"],
        "at": first["at"],
        "created": False,
        "outcome": "exists",
    }
    # Not redelivered: the same id with another due time is a conflict.
    reply = run(hook, "create", {"delay": 10}, message_id="m")
    assert reply["ok"] is False
    # Redelivered, but other content: still a conflict.
    reply = run(hook, "create", {"delay": 10, "payload": "x"}, message_id="m", redelivered=True)
    assert reply["ok"] is False


# -- cancel and reschedule ------------------------------------------------------------


def test_cancel_outcomes(hook: TriggerHook, store: FakeStore) -> None:
    store.put(Task("c", NOW_MS + 60_000, "r"))
    store.put(Task("armed", NOW_MS + 100, "r"), armed=True)
    assert run(hook, "cancel", {"id": "c"}) == {"ok": True, "id": "c"}
    assert store.ids() == {"armed"}
    assert _code(run(hook, "cancel", {"id": "c"})) == "not_found"
    assert _code(run(hook, "cancel", {"id": "armed"})) == "too_late"


def test_reschedule_outcomes(hook: TriggerHook, store: FakeStore) -> None:
    store.put(Task("r", NOW_MS + 60_000, "k"))
    store.put(Task("armed", NOW_MS + 100, "k"), armed=True)
    assert run(hook, "reschedule", {"id": "r", "at": 1_800_000_000.5}) == {
        "ok": True,
        "id": "r",
        "due_ms": 1_800_000_000_500,
        "at": 1_800_000_000.5,
    }
    row = store.row("r")
    assert row is not None
    assert row.task.due_ms == 1_800_000_000_500
    assert run(hook, "reschedule", {"id": "r", "delay": 2})["at"] == (NOW_MS + 2000) / 1000
    assert run(hook, "reschedule", {"id": "r", "at_ms": 1_800_000_000_001})["due_ms"] == (
        1_800_000_000_001
    )
    assert run(hook, "reschedule", {"id": "r", "delay_ms": 2500})["due_ms"] == NOW_MS + 2500
    assert _code(run(hook, "reschedule", {"id": "gone", "delay": 1})) == "not_found"
    assert _code(run(hook, "reschedule", {"id": "armed", "delay": 1})) == "too_late"


def _code(reply: dict[str, object]) -> object:
    assert reply["ok"] is False
    error = reply["error"]
    assert isinstance(error, dict)
    return error["code"]


# -- malformed commands ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "body", "code", "field"),
    [
        (None, {"delay": 1}, "unknown_type", None),
        ("delete", {"id": "x"}, "unknown_type", None),
        ("CREATE", {"delay": 1}, "unknown_type", None),
        ("create", b"{not json", "malformed_json", None),
        ("create", b"\xff\xfe{}", "malformed_json", None),
        ("create", b'{"delay": NaN}', "malformed_json", None),
        ("create", b"", "malformed_json", None),
        ("create", [1, 2], "invalid", "body"),
        ("create", {"at": 1, "delay": 1}, "invalid", "at"),
        ("create", {"at_ms": 1, "delay_ms": 1}, "invalid", "at_ms"),
        ("create", {"delay_ms": 1, "delay": 1}, "invalid", "delay_ms"),
        ("create", {"at_ms": 1.5}, "invalid", "at_ms"),
        ("create", {}, "invalid", "at"),
        ("create", {"delay": -1}, "invalid", "delay"),
        ("create", {"at": "tomorrow"}, "invalid", "at"),
        ("create", {"at": 1e15}, "invalid", "at"),
        ("create", {"delay": 1, "colour": "red"}, "invalid", "colour"),
        ("create", {"delay": 1, "routing_key": "bad key"}, "invalid", "routing_key"),
        ("create", {"delay": 1, "id": "bad id"}, "invalid", "id"),
        ("create", {"delay": 1, "payload": "x" * 65}, "invalid", "payload"),
        ("create", {"delay": 1, "payload_b64": "***"}, "invalid", "payload_b64"),
        ("cancel", {}, "invalid", "id"),
        ("cancel", {"id": 7}, "invalid", "id"),
        ("cancel", {"id": "bad id"}, "invalid", "id"),
        ("cancel", {"id": "x", "at": 1}, "invalid", "at"),
        ("cancel", "x", "invalid", "body"),
        ("reschedule", {"id": "x"}, "invalid", "at"),
        ("reschedule", {"at": 1}, "invalid", "id"),
        ("reschedule", {"id": "x", "delay": "soon"}, "invalid", "delay"),
        ("reschedule", {"id": "x", "at": "2030-01-01T00:00:00Z", "at_ms": 1}, "invalid", "at"),
        ("reschedule", {"id": "x", "delay_ms": -1}, "invalid", "delay_ms"),
        ("reschedule", {"id": "x", "delay": 1, "payload": ""}, "invalid", "payload"),
    ],
)
def test_malformed_commands_are_rejected_and_write_nothing(
    hook: TriggerHook,
    store: FakeStore,
    type_: str | None,
    body: object,
    code: str,
    field: str | None,
) -> None:
    error = rejected(hook, type_, body)
    assert (error.code, error.field) == (code, field)
    assert error.message
    reply_error = error.reply()["error"]
    assert isinstance(reply_error, dict)
    assert reply_error["code"] == code
    assert reply_error.get("field") == field
    assert error.reason.startswith(f"{code}: ")
    if field is not None:
        assert error.reason.startswith(f"{code}: {field}: ")
    assert store.ids() == set()


def test_body_size_limit(hook: TriggerHook) -> None:
    error = rejected(hook, "create", b" " * (LIMIT + 1))
    assert (error.code, error.field) == ("invalid", "body")
    assert max_body_bytes(65536) > 6 * 65536


def test_transient_errors_pass_through(hook: TriggerHook, store: FakeStore) -> None:
    store.fail_next("insert", StoreUnavailable("database down"))
    with pytest.raises(StoreUnavailable):
        run(hook, "create", {"id": "t", "delay": 1})
    assert run(hook, "create", {"id": "t", "delay": 1})["created"] is True


# -- a series' life: pause, resume, trigger, backfill -------------------------------------------

SERIES_FIRST_MS = NOW_MS + 600_000


def _series(hook: TriggerHook, task_id: str = "s") -> None:
    reply = run(hook, "create", {"id": task_id, "at_ms": SERIES_FIRST_MS, "every": "PT1M"})
    assert reply["outcome"] == "created"


def test_pause_and_resume_reply_as_the_http_api_answers(
    hook: TriggerHook, store: FakeStore
) -> None:
    _series(hook)
    assert run(hook, "pause", {"id": "s"}) == {"ok": True, "id": "s", "outcome": "paused"}
    info = hook.get("s")
    assert info is not None and info.task.meta.recur is not None
    assert (info.task.meta.recur.paused, info.task.meta.recur.resume_ms) == (True, SERIES_FIRST_MS)
    assert run(hook, "resume", {"id": "s"}) == {"ok": True, "id": "s", "outcome": "resumed"}
    row = store.row("s")
    assert row is not None and row.task.due_ms == SERIES_FIRST_MS


def test_trigger_and_backfill_reply_with_their_copies(hook: TriggerHook, store: FakeStore) -> None:
    _series(hook)
    assert run(hook, "trigger", {"id": "s"}) == {
        "ok": True,
        "id": "s",
        "outcome": "triggered",
        "copies": [{"id": f"s:{NOW_MS}", "due_ms": NOW_MS, "outcome": "created"}],
    }
    span = {"id": "s", "from_ms": NOW_MS - 120_000, "to_ms": NOW_MS}
    dues = [NOW_MS - 120_000, NOW_MS - 60_000]  # the series' phase: whole minutes from it
    for outcome in ("created", "exists"):  # copies still pending answer exists
        assert run(hook, "backfill", span) == {
            "ok": True,
            "id": "s",
            "outcome": "backfilled",
            "copies": [{"id": f"s:{due}", "due_ms": due, "outcome": outcome} for due in dues],
        }
    assert store.ids() == {"s", f"s:{NOW_MS}", *(f"s:{due}" for due in dues)}


@pytest.mark.parametrize("type_", ["pause", "resume", "trigger", "backfill"])
def test_a_series_command_on_a_one_off_or_an_unknown_id_is_answered(
    hook: TriggerHook, store: FakeStore, type_: str
) -> None:
    store.put(Task("once", NOW_MS + 60_000, "k"))
    span = {"from_ms": NOW_MS - 1, "to_ms": NOW_MS} if type_ == "backfill" else {}
    assert run(hook, type_, {"id": "once", **span}) == {
        "ok": False,
        "error": {
            "code": "not_a_series",
            "message": "task 'once' is not a series (no every or cron)",
        },
    }
    assert _code(run(hook, type_, {"id": "gone", **span})) == "not_found"
    assert store.ids() == {"once"}


def test_a_trigger_whose_copy_id_holds_other_content_is_a_conflict(
    hook: TriggerHook, store: FakeStore
) -> None:
    _series(hook)
    store.put(Task(f"s:{NOW_MS}", NOW_MS + 60_000, "other"))
    assert _code(run(hook, "trigger", {"id": "s"})) == "conflict"


# -- the dedup window ---------------------------------------------------------------------

FIRED_MS = NOW_MS - 5_000
DAY_MS = 86_400_000


def test_a_create_takes_a_dedup_window_as_the_http_api_does(
    hook: TriggerHook, store: FakeStore
) -> None:
    body = {"id": "w", "at_ms": NOW_MS + 60_000, "dedup_window_ms": DAY_MS}
    assert run(hook, "create", body)["outcome"] == "created"
    row = store.row("w")
    assert row is not None and row.task.meta.dedup_window_ms == DAY_MS
    assert run(hook, "create", body)["outcome"] == "exists"
    assert _code(run(hook, "create", {**body, "dedup_window_ms": 1})) == "conflict"
    for bad in (-1, 30 * DAY_MS + 1, "1d", None):
        error = rejected(hook, "create", {**body, "id": "bad", "dedup_window_ms": bad})
        assert (error.code, error.field) == ("invalid", "dedup_window_ms")
    assert store.ids() == {"w"}


def test_a_create_of_an_id_fired_within_its_window_is_answered_already_fired(
    hook: TriggerHook, store: FakeStore
) -> None:
    refuse_as_fired(store, {"f": FIRED_MS})
    expected = {
        "ok": False,
        "error": {
            "code": "already_fired",
            "message": f"task 'f' fired at {FIRED_MS} (epoch ms), within its dedup window",
            "fired_ms": FIRED_MS,
        },
    }
    body = {"id": "f", "at_ms": NOW_MS + 60_000, "dedup_window_ms": DAY_MS}
    assert run(hook, "create", body) == expected
    # A redelivery too (its first delivery's task may be the one that fired).
    assert run(hook, "create", body, redelivered=True) == expected
    assert run(hook, "create", {"delay_ms": 1000}, message_id="f") == expected
    assert store.ids() == set()


def test_a_backfill_answers_a_copy_fired_within_the_window_and_writes_the_others(
    hook: TriggerHook, store: FakeStore
) -> None:
    _series(hook)
    span = {"id": "s", "from_ms": NOW_MS - 120_000, "to_ms": NOW_MS}
    fired, other = f"s:{NOW_MS - 60_000}", f"s:{NOW_MS - 120_000}"
    refuse_as_fired(store, {fired: FIRED_MS})
    reply = run(hook, "backfill", span)
    assert reply["ok"] is True, reply
    copies = reply["copies"]
    assert isinstance(copies, list)
    outcomes = {copy["id"]: copy["outcome"] for copy in copies}
    assert outcomes == {other: "created", fired: "already_fired"}
    assert store.ids() == {"s", other}  # the fired copy not written again


@pytest.mark.parametrize(
    ("type_", "body", "field"),
    [
        ("pause", {}, "id"),
        ("resume", {"id": 5}, "id"),
        ("trigger", {"id": "s", "at_ms": 1}, "at_ms"),
        ("backfill", {"id": "s", "to_ms": NOW_MS}, "from_ms"),
        ("backfill", {"from_ms": 0, "to_ms": NOW_MS}, "id"),
        ("backfill", {"id": "s", "from_ms": 0.5, "to_ms": NOW_MS}, "from_ms"),
        ("backfill", {"id": "s", "from_ms": 0, "to_ms": NOW_MS, "every": "PT1M"}, "every"),
        ("backfill", {"id": "s", "from_ms": NOW_MS - 1, "to_ms": NOW_MS + 1}, "to_ms"),
    ],
    ids=str,
)
def test_a_malformed_series_command_is_rejected_naming_the_field(
    hook: TriggerHook, store: FakeStore, type_: str, body: dict[str, object], field: str
) -> None:
    _series(hook)
    error = rejected(hook, type_, body)
    assert (error.code, error.field) == ("invalid", field)
    assert store.ids() == {"s"}
    info = hook.get("s")
    assert info is not None and info.task.meta.recur is not None
    assert not info.task.meta.recur.paused


def test_a_series_command_passes_a_database_down_through_to_be_retried(
    hook: TriggerHook, store: FakeStore
) -> None:
    _series(hook)
    store.fail_next("pause", StoreUnavailable("database down"))
    with pytest.raises(StoreUnavailable):
        run(hook, "pause", {"id": "s"})
    assert run(hook, "pause", {"id": "s"})["outcome"] == "paused"
