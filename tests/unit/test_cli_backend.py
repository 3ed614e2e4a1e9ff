"""The CLI's task commands over the library backend (database mode), on the
in-memory store: the backend's answers in the outcome vocabulary, its errors as
BackendError, and the commands' output and exit codes (the HTTP backend and the
whole CLI are tested as processes in tests/integration/test_cli.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from support.fakes import DEFAULT_NOW_MS, FakeClock, FakePublisher

from triggerhook.cli import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TOO_LATE,
    EXIT_USAGE,
    TASK_COMMANDS,
    _parser,
)
from triggerhook.cli.backends import BackendError, Found, LibraryBackend, Moved, Stored
from triggerhook.domain.outcomes import Outcome
from triggerhook.domain.task import TaskState
from triggerhook.settings import Settings
from triggerhook.store.memory import MemoryStore
from triggerhook.wiring import assemble

NOW_MS = int(DEFAULT_NOW_MS)
AT = "2030-01-01T00:00:00.250Z"
AT_MS = 1_893_456_000_250


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def backend(store: MemoryStore) -> Iterator[LibraryBackend]:
    settings = Settings(instance_id="unit", max_payload_bytes=64, default_routing_key="rk")
    hook = assemble(settings, store, FakeClock(), lambda buffer, sink, retry, fail: FakePublisher())
    with LibraryBackend(hook) as library:
        yield library


def schedule(backend: LibraryBackend, task_id: str | None = "t-1", **kw: object) -> Stored:
    args: dict[str, object] = {"at": AT, "delay_ms": None, "routing_key": None, "payload": None}
    args.update(kw)
    return backend.schedule(task_id, **args)  # type: ignore[arg-type]


def arm(store: MemoryStore) -> None:
    """Another instance commits every stored task to firing."""
    acquired = store.acquire("other", store.shard_count(), 2**40)
    assert store.arm("other", [a.lease for a in acquired], 2**53, 100).tasks


# -- the backend ----------------------------------------------------------------------


def test_schedule_created_then_exists_then_conflict(backend: LibraryBackend) -> None:
    assert schedule(backend, payload="x") == Stored("t-1", AT_MS, created=True)
    assert schedule(backend, payload="x") == Stored("t-1", AT_MS, created=False)
    with pytest.raises(BackendError) as info:
        schedule(backend, payload="other")
    assert info.value.outcome is Outcome.CONFLICT
    assert str(info.value) == "task 't-1' already exists with different content"


def test_schedule_with_a_delay_and_a_new_id(backend: LibraryBackend) -> None:
    stored = schedule(backend, None, at=None, delay_ms=250)
    assert stored.due_ms == NOW_MS + 250 and stored.created
    assert len(stored.id) == 36


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"task_id": "bad id!"}, "id: "),
        ({"routing_key": "bad key!"}, "routing_key: "),
        ({"payload": "x" * 65}, "payload: "),
        ({"at": None, "delay_ms": -1}, "in: "),  # the library's delay_ms is the CLI's --in
        ({"at": "notatime"}, "at: "),
    ],
)
def test_schedule_invalid_names_the_field(
    backend: LibraryBackend, store: MemoryStore, kw: dict[str, object], message: str
) -> None:
    task_id = kw.pop("task_id", "t-1")
    with pytest.raises(BackendError) as info:
        schedule(backend, task_id, **kw)  # type: ignore[arg-type]
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 0


def test_reschedule_outcomes(backend: LibraryBackend, store: MemoryStore) -> None:
    schedule(backend)
    moved = backend.reschedule("t-1", at=None, delay_ms=60_000)
    assert moved == Moved(Outcome.RESCHEDULED, NOW_MS + 60_000)
    assert backend.reschedule("nope", at=AT, delay_ms=None) == Moved(Outcome.NOT_FOUND)
    arm(store)
    assert backend.reschedule("t-1", at=AT, delay_ms=None) == Moved(Outcome.TOO_LATE)
    with pytest.raises(BackendError) as info:
        backend.reschedule("t-1", at=None, delay_ms=-5)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("in: ")


def test_cancel_outcomes(backend: LibraryBackend, store: MemoryStore) -> None:
    schedule(backend, "a")
    schedule(backend, "b", at="2031-01-01T00:00:00Z")
    assert backend.cancel("a") is Outcome.CANCELLED
    assert backend.cancel("a") is Outcome.NOT_FOUND
    arm(store)
    assert backend.cancel("b") is Outcome.TOO_LATE
    with pytest.raises(BackendError) as info:
        backend.cancel("bad id!")
    assert info.value.outcome is Outcome.INVALID


def test_get(backend: LibraryBackend) -> None:
    schedule(backend, payload="héllo", routing_key="orders.expire")
    assert backend.get("t-1") == Found(
        "t-1", AT_MS, "orders.expire", "héllo".encode(), TaskState.SCHEDULED
    )
    assert backend.get("nope") is None
    with pytest.raises(BackendError) as info:
        backend.get("bad id!")
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("id: ")


def test_a_store_failure_is_unavailable(
    backend: LibraryBackend, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triggerhook.errors import StoreUnavailable

    def down(_task_id: str) -> None:
        raise StoreUnavailable("db1:3306 refused")

    monkeypatch.setattr(store, "get", down)
    with pytest.raises(BackendError) as info:
        backend.get("t-1")
    assert info.value.outcome is Outcome.UNAVAILABLE
    assert str(info.value) == "db1:3306 refused"  # the CLI prints the detail


# -- the commands over it ---------------------------------------------------------------


def run(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, dict[str, object]]:
    args = _parser().parse_args(argv)
    code = TASK_COMMANDS[args.command](backend, args)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return code, json.loads(out)


def test_commands_print_and_exit(
    backend: LibraryBackend, store: MemoryStore, capsys: pytest.CaptureFixture[str]
) -> None:
    sched = ("schedule", "--id", "c-1", "--at", AT, "--payload", "\xff")
    assert run(backend, capsys, *sched) == (
        EXIT_OK,
        {"id": "c-1", "due_ms": AT_MS, "created": True},
    )
    assert run(backend, capsys, *sched)[1]["created"] is False
    assert run(backend, capsys, "get", "c-1") == (
        EXIT_OK,
        {
            "id": "c-1",
            "due_ms": AT_MS,
            "routing_key": "rk",
            "payload": "\xff",
            "state": "scheduled",
        },
    )
    assert run(backend, capsys, "reschedule", "c-1", "--in", "1m") == (
        EXIT_OK,
        {"id": "c-1", "due_ms": NOW_MS + 60_000, "result": "rescheduled"},
    )
    assert run(backend, capsys, "cancel", "c-1") == (
        EXIT_OK,
        {"id": "c-1", "result": "cancelled"},
    )
    gone = {"id": "c-1", "result": "not_found"}
    for argv in (("cancel", "c-1"), ("get", "c-1"), ("reschedule", "c-1", "--in", "5s")):
        assert run(backend, capsys, *argv) == (EXIT_NOT_FOUND, gone), argv

    run(backend, capsys, "schedule", "--id", "c-2", "--in", "1h")
    arm(store)
    late = {"id": "c-2", "result": "too_late"}
    assert run(backend, capsys, "cancel", "c-2") == (EXIT_TOO_LATE, late)
    assert run(backend, capsys, "reschedule", "c-2", "--in", "1m") == (EXIT_TOO_LATE, late)
    assert run(backend, capsys, "get", "c-2")[1]["state"] == "firing"


def test_a_binary_payload_is_shown_as_base64(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule(backend, "bin", payload=b"\xff\x00")
    assert run(backend, capsys, "get", "bin")[1]["payload"] == {"base64": "/wA="}


def test_main_renders_a_backend_error_through_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from triggerhook import cli

    def refuse(_backend: object, _args: object) -> int:
        raise BackendError(Outcome.UNAUTHORIZED, "missing or wrong bearer token")

    monkeypatch.setitem(cli.TASK_COMMANDS, "get", refuse)
    monkeypatch.setattr(cli, "build", lambda settings: None)
    monkeypatch.setattr(cli, "LibraryBackend", _Nothing)
    assert cli.main(["get", "x"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "triggerhook: error: missing or wrong bearer token"
        " (the daemon's api_token: --api-token or TRIGGERHOOK_API_TOKEN)\n"
    )


class _Nothing:
    def __init__(self, _hook: object) -> None:
        pass

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass
