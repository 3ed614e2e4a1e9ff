"""The CLI's task commands over the library backend (database mode), on the
in-memory store: the backend's answers in the outcome vocabulary, its errors as
BackendError, and the commands' output and exit codes (the HTTP backend and the
whole CLI are tested as processes in tests/integration/test_cli.py), metadata,
list, count and bulk cancel included."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from support.dedup import refuse_as_fired
from support.fakes import DEFAULT_NOW_MS, FakeClock, FakePublisher
from triggerhook_client import AlreadyFired, InvalidRequest

from triggerhook import cli, logs
from triggerhook.cli import (
    CLI_RENDERING,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TOO_LATE,
    EXIT_USAGE,
    TASK_COMMANDS,
    _parser,
    backends,
)
from triggerhook.cli.backends import (
    BackendError,
    Found,
    LibraryBackend,
    Listed,
    Moved,
    Stored,
    Where,
)
from triggerhook.cli.task_args import LateArg, Metadata
from triggerhook.client import TaskSummary
from triggerhook.domain.listing import BulkCancelled
from triggerhook.domain.meta import FIRE, LateKind, LatePolicy, Meta
from triggerhook.domain.outcomes import Outcome, error_outcome
from triggerhook.domain.recurrence import Recurrence
from triggerhook.domain.task import TaskState
from triggerhook.errors import ValidationError
from triggerhook.interfaces import DeferOutcome, Deferral
from triggerhook.settings import Settings
from triggerhook.store.sqlite import SQLiteStore
from triggerhook.wiring import assemble

NOW_MS = int(DEFAULT_NOW_MS)
AT = "2030-01-01T00:00:00.250Z"
AT_MS = 1_893_456_000_250


@pytest.fixture
def store() -> SQLiteStore:
    return SQLiteStore(":memory:")


@pytest.fixture
def backend(store: SQLiteStore) -> Iterator[LibraryBackend]:
    settings = Settings(instance_id="unit", max_payload_bytes=64, default_routing_key="rk")
    hook = assemble(settings, store, FakeClock(), lambda buffer, sink, retry, fail: FakePublisher())
    with LibraryBackend(hook) as library:
        yield library


def schedule(backend: LibraryBackend, task_id: str | None = "t-1", **kw: object) -> Stored:
    args: dict[str, object] = {"at": AT, "delay_ms": None, "routing_key": None, "payload": None}
    args.update(kw)
    return backend.schedule(task_id, **args)  # type: ignore[arg-type]


def arm(store: SQLiteStore) -> None:
    """Another instance commits every stored task to firing."""
    acquired = store.acquire("other", store.shard_count(), 2**40)
    assert store.arm("other", [a.lease for a in acquired], 2**53, 100).tasks


# -- the backend ----------------------------------------------------------------------


def test_schedule_created_then_exists_then_conflict(backend: LibraryBackend) -> None:
    assert schedule(backend, payload="x") == Stored("t-1", AT_MS, Outcome.CREATED)
    assert schedule(backend, payload="x") == Stored("t-1", AT_MS, Outcome.EXISTS)
    with pytest.raises(BackendError) as info:
        schedule(backend, payload="other")
    assert info.value.outcome is Outcome.CONFLICT
    assert str(info.value) == "task 't-1' already exists with different content"


def test_schedule_on_conflict_keeps_or_replaces(
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    sched = ("schedule", "--id", "u-1", "--at", AT, "--payload", "a")
    assert run(backend, capsys, *sched)[1]["outcome"] == "created"
    keep = ("schedule", "--id", "u-1", "--in", "1m", "--payload", "b", "--on-conflict", "keep")
    assert run(backend, capsys, *keep) == (
        EXIT_OK,
        {"id": "u-1", "due_ms": AT_MS, "created": False, "outcome": "kept"},  # the stored one
    )
    replace = [*keep[:-1], "replace"]
    assert run(backend, capsys, *replace) == (
        EXIT_OK,
        {"id": "u-1", "due_ms": NOW_MS + 60_000, "created": False, "outcome": "replaced"},
    )
    assert run(backend, capsys, "get", "u-1")[1]["payload"] == "b"
    arm(store)
    with pytest.raises(BackendError) as info:
        run(backend, capsys, *sched[:-1], "c", "--on-conflict", "replace")
    assert info.value.outcome is Outcome.TOO_LATE
    assert CLI_RENDERING[info.value.outcome].exit == EXIT_TOO_LATE


def test_schedule_a_cron_series_with_a_dst_policy(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    berlin = ("--cron", "30 2 * * *", "--timezone", "Europe/Berlin")
    back = ("--at", "2030-10-27T00:00:00Z")  # Berlin's clocks go back at 01:00Z
    sched = ("schedule", "--id", "d-1", *berlin, *back, "--dst-repeated", "last")
    made = run(backend, capsys, *sched, "--dst-skipped", "skip")[1]
    assert made["due_ms"] == 1_919_289_600_000 + 5_400_000  # 02:30 CET: the second pass
    shown = run(backend, capsys, "get", "d-1")[1]
    assert (shown["dst_repeated"], shown["dst_skipped"]) == ("last", "skip")
    with pytest.raises(BackendError) as info:
        run(backend, capsys, "schedule", "--id", "d-2", "--every", "PT1M", "--dst-skipped", "skip")
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("dst_skipped: only with cron"), str(info.value)


def test_schedule_on_conflict_takes_only_its_three_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["schedule", "--in", "1m", "--on-conflict", "later"])
    assert info.value.code == EXIT_USAGE
    assert "choose from 'error', 'keep', 'replace'" in capsys.readouterr().err


# -- the dedup window ----------------------------------------------------------------------

FIRED_MS = NOW_MS - 5_000
DAY_MS = 86_400_000


def test_schedule_dedup_window_takes_a_duration_with_its_unit(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    def sched(task_id: str, *window: str) -> dict[str, object]:
        return run(backend, capsys, "schedule", "--id", task_id, "--at", AT, *window)[1]

    assert sched("w-1", "--dedup-window", "24h")["outcome"] == "created"
    assert run(backend, capsys, "get", "w-1")[1]["dedup_window_ms"] == DAY_MS
    # The same window, written otherwise: a safe repeat.
    assert sched("w-1", "--dedup-window", "1d")["outcome"] == "exists"
    assert sched("w-2", "--dedup-window", "1500ms")["outcome"] == "created"
    assert run(backend, capsys, "get", "w-2")[1]["dedup_window_ms"] == 1500
    assert sched("w-3")["outcome"] == "created"
    assert "dedup_window_ms" not in run(backend, capsys, "get", "w-3")[1]  # none
    with pytest.raises(BackendError) as info:
        sched("w-1", "--dedup-window", "1h")
    assert info.value.outcome is Outcome.CONFLICT


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("1500", "dedup_window: give its unit: 1500ms, or 90s, 24h, 7d"),
        ("2.5", "dedup_window: give its unit: 2.5ms, or 90s, 24h, 7d"),
        ("soon", "dedup_window: 'soon' is not a duration like 250ms, 5s, 2h or 1h30m"),
        ("-5s", "dedup_window: '-5s' is not a duration like 250ms, 5s, 2h or 1h30m"),
    ],
)
def test_schedule_dedup_window_refuses_a_bare_number_or_no_duration(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str], given: str, message: str
) -> None:
    with pytest.raises(ValidationError) as info:
        run(backend, capsys, "schedule", "--id", "w", "--at", AT, f"--dedup-window={given}")
    assert str(info.value) == message
    assert error_outcome(info.value) is Outcome.INVALID  # exit 2, as any bad flag


def test_schedule_dedup_window_over_30_days_is_refused_naming_the_flag(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(BackendError) as info:
        run(backend, capsys, "schedule", "--id", "w", "--at", AT, "--dedup-window", "31d")
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value) == "dedup_window: at most 2592000000 ms (30 days)"


def test_schedule_of_an_id_fired_within_its_window_is_refused_saying_when(
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    refuse_as_fired(store, {"f-1": FIRED_MS})
    with pytest.raises(BackendError) as info:
        run(backend, capsys, "schedule", "--id", "f-1", "--at", AT, "--dedup-window", "1d")
    assert info.value.outcome is Outcome.ALREADY_FIRED
    assert str(info.value) == (
        f"task 'f-1' fired at {FIRED_MS} (epoch ms), within its dedup window"
    )
    assert CLI_RENDERING[Outcome.ALREADY_FIRED].exit == EXIT_USAGE  # as a conflict
    assert backend.get("f-1") is None  # nothing written


def test_main_prints_an_already_fired_refusal_as_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], store: SQLiteStore
) -> None:
    settings = Settings(instance_id="unit", max_payload_bytes=64, default_routing_key="rk")
    hook = assemble(settings, store, FakeClock(), lambda buffer, sink, retry, fail: FakePublisher())
    refuse_as_fired(store, {"f-1": FIRED_MS})
    monkeypatch.setattr(cli, "build", lambda _settings: hook)
    # Logging stays off this test's stderr: main would point it there. (What
    # earlier tests left on a logger, the suite takes away: support/logstate.py.)
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    code = cli.main(["schedule", "--id", "f-1", "--at", AT, "--dedup-window", "24h"])
    assert code == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"triggerhook: error: task 'f-1' fired at {FIRED_MS} (epoch ms), within its dedup window\n"
    )


def test_the_http_backend_reads_already_fired_and_names_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remote = backends.HttpBackend("http://127.0.0.1:9", Settings())
    message = f"task 'f-1' fired at {FIRED_MS} (epoch ms), within its dedup window"
    answers: list[Exception] = [
        AlreadyFired(409, "already_fired", message, "id", FIRED_MS),
        InvalidRequest(422, "invalid", "at most 2592000000 ms (30 days)", "dedup_window_ms"),
    ]
    sent: list[dict[str, object]] = []

    def refuse(*args: object, **kwargs: object) -> object:
        sent.append(kwargs)
        raise answers.pop(0)

    monkeypatch.setattr(remote._client, "schedule", refuse)
    meta = Metadata(dedup_window_ms=DAY_MS)
    call = {"at": AT, "delay_ms": None, "routing_key": None, "payload": None, "meta": meta}
    with remote, pytest.raises(BackendError) as fired:
        remote.schedule("f-1", **call)  # type: ignore[arg-type]
    assert (fired.value.outcome, str(fired.value)) == (Outcome.ALREADY_FIRED, message)
    assert sent[0]["dedup_window_ms"] == DAY_MS
    with pytest.raises(BackendError) as invalid:
        remote.schedule("f-1", **call)  # type: ignore[arg-type]
    assert (invalid.value.outcome, str(invalid.value)) == (
        Outcome.INVALID,
        "dedup_window: at most 2592000000 ms (30 days)",
    )


def test_the_http_backend_shows_a_tasks_dedup_window() -> None:
    summary = TaskSummary("t", AT_MS, "k", TaskState.SCHEDULED, dedup_window_ms=1500)
    assert backends._meta_of(summary).dedup_window_ms == 1500
    assert backends._meta_of(TaskSummary("t", AT_MS, "k", TaskState.SCHEDULED)) == Meta()


def test_schedule_with_a_delay_and_a_new_id(backend: LibraryBackend) -> None:
    stored = schedule(backend, None, at=None, delay_ms=250)
    assert stored.due_ms == NOW_MS + 250 and stored.outcome is Outcome.CREATED
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
    backend: LibraryBackend, store: SQLiteStore, kw: dict[str, object], message: str
) -> None:
    task_id = kw.pop("task_id", "t-1")
    with pytest.raises(BackendError) as info:
        schedule(backend, task_id, **kw)  # type: ignore[arg-type]
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 0


def test_reschedule_outcomes(backend: LibraryBackend, store: SQLiteStore) -> None:
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


def test_cancel_outcomes(backend: LibraryBackend, store: SQLiteStore) -> None:
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
    backend: LibraryBackend, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
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
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    sched = ("schedule", "--id", "c-1", "--at", AT, "--payload", "\xff")
    assert run(backend, capsys, *sched) == (
        EXIT_OK,
        {"id": "c-1", "due_ms": AT_MS, "created": True, "outcome": "created"},
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
    def __init__(self, _hook: object, _settings: object = None) -> None:
        pass

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


# -- metadata ---------------------------------------------------------------------------------

META = Metadata(
    tags=("tenant:7", "billing"),
    content_type="application/json",
    content_encoding="identity",
    headers=(("tenant", "7"), ("attempt", "3")),
    late=LateArg(LateKind.SKIP_AFTER, ms=1500),
)
STORED_META = Meta(
    tags=("billing", "tenant:7"),
    content_type="application/json",
    content_encoding="identity",
    headers=(("attempt", "3"), ("tenant", "7")),
    late=LatePolicy(LateKind.SKIP_AFTER, 1500),
)


def test_schedule_and_get_with_metadata(backend: LibraryBackend) -> None:
    assert schedule(backend, meta=META) == Stored("t-1", AT_MS, Outcome.CREATED)
    assert schedule(backend, meta=META).outcome is Outcome.EXISTS  # the same content
    with pytest.raises(BackendError) as info:
        schedule(backend, meta=Metadata(tags=("billing",)))
    assert info.value.outcome is Outcome.CONFLICT
    found = backend.get("t-1")
    assert found == Found("t-1", AT_MS, "rk", b"", TaskState.SCHEDULED, STORED_META)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("fire", LateArg(LateKind.FIRE)),
        ("skip_after_ms=0", LateArg(LateKind.SKIP_AFTER, ms=0)),
        ("skip_after_ms=60000", LateArg(LateKind.SKIP_AFTER, ms=60_000)),
        ("deadline=2030-01-01T00:00:00.250Z", LateArg(LateKind.DEADLINE, deadline=AT)),
        ("deadline=1893456000.25", LateArg(LateKind.DEADLINE, deadline="1893456000.25")),
    ],
)
def test_late_flag_forms(text: str, parsed: LateArg) -> None:
    assert LateArg.parse(text) == parsed


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("skip", "late"),
        ("Fire", "late"),
        ("deadline=", "late"),
        ("never=5", "late"),
        ("skip_after_ms=", "late.skip_after_ms"),
        ("skip_after_ms=-1", "late.skip_after_ms"),
        ("skip_after_ms=1.5", "late.skip_after_ms"),
        ("skip_after_ms=" + "9" * 19, "late.skip_after_ms"),  # past 64 bits
    ],
)
def test_bad_late_flags_name_the_part(text: str, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        LateArg.parse(text)
    assert info.value.field == field


def test_a_deadline_is_parsed_like_at_and_may_be_past(backend: LibraryBackend) -> None:
    schedule(backend, "d-1", meta=Metadata(late=LateArg.parse("deadline=" + AT)))
    schedule(backend, "d-2", meta=Metadata(late=LateArg.parse("deadline=1970-01-01T00:00:01Z")))
    schedule(backend, "d-3", meta=Metadata(late=LateArg(LateKind.FIRE)))
    deadlines = [
        f.meta.late for f in (backend.get("d-1"), backend.get("d-2"), backend.get("d-3")) if f
    ]
    assert deadlines == [
        LatePolicy(LateKind.DEADLINE, AT_MS),
        LatePolicy(LateKind.DEADLINE, 1000),
        FIRE,
    ]
    with pytest.raises(BackendError) as info:
        schedule(backend, "d-4", meta=Metadata(late=LateArg.parse("deadline=someday")))
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("late.deadline: ")


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (Metadata(tags=("ok", "not ok")), "tags[1]: "),
        (Metadata(tags=tuple(f"t{i}" for i in range(9))), "tags: "),
        (Metadata(headers=(("x-mine", "a"),)), "headers.x-mine: "),
        (Metadata(headers=(("h", "v" * 1025),)), "headers.h: "),
        (Metadata(content_type=""), "content_type: "),
        (Metadata(content_encoding="gzip\n"), "content_encoding: "),
    ],
)
def test_bad_metadata_names_the_field(
    backend: LibraryBackend, store: SQLiteStore, meta: Metadata, message: str
) -> None:
    with pytest.raises(BackendError) as info:
        schedule(backend, meta=meta)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 0


# -- list, count, bulk cancel on the backend -----------------------------------------------------


def schedule_tenant(backend: LibraryBackend, count: int = 6) -> list[str]:
    """Tasks t-00.. due a second apart from AT, keys a and b in turn, tagged tenant."""
    ids = [f"t-{i:02}" for i in range(count)]
    for i, task_id in enumerate(ids):
        at = f"{1_893_456_000 + i}"
        schedule(backend, task_id, at=at, routing_key="ab"[i % 2], meta=Metadata(tags=("tenant",)))
    return ids


def test_list_page_count_and_cancel_where(backend: LibraryBackend, store: SQLiteStore) -> None:
    ids = schedule_tenant(backend)
    schedule(backend, "other", at="1893456000")
    first = backend.list_page(Where(tag="tenant"), 4, None)
    assert [t.id for t in first.tasks] == ids[:4] and first.cursor is not None
    assert first.tasks[1] == Listed(
        "t-01", 1_893_456_001_000, "b", TaskState.SCHEDULED, Meta(tags=("tenant",))
    )
    rest = backend.list_page(Where(tag="tenant"), 4, first.cursor)
    assert ([t.id for t in rest.tasks], rest.cursor) == (ids[4:], None)
    assert backend.count(Where(routing_key="b")) == 3
    assert backend.count(Where(due_after="1893456002", due_before="2030-01-01T00:00:04Z")) == 2
    assert backend.count(Where(prefix="t-", state="firing")) == 0
    assert backend.cancel_where(Where(tag="tenant", routing_key="a")) == BulkCancelled(3, 0)
    arm(store)
    assert backend.cancel_where(Where(prefix="t-")) == BulkCancelled(0, 3)
    assert backend.count(Where()) == 4


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (Where(prefix="bad prefix"), "prefix: "),
        (Where(tag=""), "tag: "),
        (Where(due_after="soon"), "due_after: "),
        (Where(due_before="10000-01-01T00:00:00Z"), "due_before: "),
    ],
)
def test_bad_filters_name_the_field(backend: LibraryBackend, where: Where, message: str) -> None:
    for call in (
        lambda: backend.count(where),
        lambda: backend.list_page(where, 10, None),
    ):
        with pytest.raises(BackendError) as info:
            call()
        assert info.value.outcome is Outcome.INVALID
        assert str(info.value).startswith(message), str(info.value)


def test_a_bad_cursor_is_invalid(backend: LibraryBackend) -> None:
    with pytest.raises(BackendError) as info:
        backend.list_page(Where(), 10, "bm9wZQ")
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("cursor: ")


# -- the new commands over it ------------------------------------------------------------------


def run_lines(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, list[dict[str, object]]]:
    """A command that prints one JSON object per line (any number of lines)."""
    args = _parser().parse_args(argv)
    code = TASK_COMMANDS[args.command](backend, args)
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_schedule_and_get_show_the_metadata(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    sched = ["schedule", "--id", "m-1", "--at", AT, "--tag", "tenant:7", "--tag", "billing"]
    sched += ["--header", "tenant=7", "--header", "note=a=b", "--header", "empty="]
    sched += ["--content-type", "application/json", "--content-encoding", "gzip"]
    sched += ["--late", "deadline=2030-01-01T00:00:01Z"]
    assert run(backend, capsys, *sched) == (
        EXIT_OK,
        {"id": "m-1", "due_ms": AT_MS, "created": True, "outcome": "created"},
    )
    assert run(backend, capsys, "get", "m-1") == (
        EXIT_OK,
        {
            "id": "m-1",
            "due_ms": AT_MS,
            "routing_key": "rk",
            "payload": "",
            "state": "scheduled",
            "tags": ["billing", "tenant:7"],
            "content_type": "application/json",
            "content_encoding": "gzip",
            "headers": {"empty": "", "note": "a=b", "tenant": "7"},  # values are strings
            "late": {"deadline_ms": 1_893_456_001_000},
        },
    )
    run(backend, capsys, "schedule", "--id", "m-2", "--at", AT, "--late", "skip_after_ms=500")
    assert run(backend, capsys, "get", "m-2")[1]["late"] == {"skip_after_ms": 500}
    run(backend, capsys, "schedule", "--id", "m-3", "--at", AT, "--late", "fire")
    assert run(backend, capsys, "get", "m-3")[1]["late"] == "fire"


def test_get_and_list_show_a_throttled_task_and_when_it_goes(
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule(backend, "slow")
    schedule(backend, "plain")
    acquired = store.acquire("other", store.shard_count(), 2**40)
    copies = {t.id: t for t in store.arm("other", [a.lease for a in acquired], 2**53, 100).tasks}
    # A rate limit's postponement (R8p) of one, a failed delivery's retry of none.
    waited = Deferral(copies["slow"], AT_MS + 60_000, postponed=True)
    assert store.defer("other", [waited]) == [DeferOutcome.DEFERRED]
    assert backend.get("slow") == Found(
        "slow", AT_MS, "rk", b"", TaskState.SCHEDULED, throttled=True, fire_ms=AT_MS + 60_000
    )
    shown = {"id": "slow", "due_ms": AT_MS, "routing_key": "rk", "state": "scheduled"}
    wait = {"throttled": True, "fire_ms": AT_MS + 60_000}
    assert run_lines(backend, capsys, "get", "slow") == (
        EXIT_OK,
        [{**shown, "payload": "", **wait}],
    )
    code, lines = run_lines(backend, capsys, "list", "--routing-key", "rk")
    assert (code, lines[1]) == (EXIT_OK, {**shown, **wait})
    assert lines[0] == {**shown, "id": "plain", "state": "firing"}  # armed: says nothing more


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--header", "novalue"], "--header: expected NAME=VALUE"),
        (["--header", "=v"], "--header: expected NAME=VALUE"),
        (["--header", "h=1", "--header", "h=2"], "headers.h: given twice"),
    ],
)
def test_bad_header_flags(
    backend: LibraryBackend, store: SQLiteStore, flags: list[str], message: str
) -> None:
    args = _parser().parse_args(["schedule", "--at", AT, *flags])
    with pytest.raises(BackendError) as info:
        TASK_COMMANDS["schedule"](backend, args)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 0


def test_list_prints_a_line_per_task_and_follows_the_cursor(
    backend: LibraryBackend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = schedule_tenant(backend, 5)
    pages: list[tuple[int, str | None]] = []
    list_page = backend.list_page

    def spy(where: Where, limit: int, cursor: str | None) -> object:
        pages.append((limit, cursor))
        return list_page(where, limit, cursor)

    monkeypatch.setattr(backend, "list_page", spy)
    monkeypatch.setattr(cli, "MAX_PAGE", 2)  # pages of 2: the cursor is followed
    code, lines = run_lines(backend, capsys, "list", "--tag", "tenant", "--all")
    assert code == EXIT_OK
    assert [line["id"] for line in lines] == ids
    assert lines[0] == {
        "id": "t-00",
        "due_ms": 1_893_456_000_000,
        "routing_key": "a",
        "state": "scheduled",
        "tags": ["tenant"],
    }
    assert [limit for limit, _ in pages] == [2, 2, 2]
    assert pages[0][1] is None and None not in [cursor for _, cursor in pages[1:]]

    pages.clear()
    code, lines = run_lines(backend, capsys, "list", "--prefix", "t-", "--limit", "3")
    assert (code, [line["id"] for line in lines]) == (EXIT_OK, ids[:3])
    assert [limit for limit, _ in pages] == [2, 1]  # never more than --limit asked for
    code, lines = run_lines(backend, capsys, "list", "--routing-key", "b")
    assert [line["id"] for line in lines] == ids[1::2]  # default limit 100
    assert run_lines(backend, capsys, "list", "--tag", "nobody") == (EXIT_OK, [])


def test_list_limit_default_and_state(
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule_tenant(backend, 3)
    args = _parser().parse_args(["list"])
    assert (args.limit, args.all) == (100, False)
    arm(store)
    code, lines = run_lines(
        backend, capsys, "list", "--state", "firing", "--due-after", "1893456000"
    )
    assert code == EXIT_OK and {line["state"] for line in lines} == {"firing"}
    assert [line["id"] for line in lines] == ["t-00", "t-01", "t-02"]  # due_after: inclusive
    _code, lines = run_lines(backend, capsys, "list", "--due-after", AT)  # 250 ms later
    assert [line["id"] for line in lines] == ["t-01", "t-02"]
    assert run_lines(backend, capsys, "list", "--state", "scheduled") == (EXIT_OK, [])


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--limit", "0"],
        ["list", "--limit", "ten"],
        ["list", "--limit", "-5"],
        ["list", "--limit", "5", "--all"],
        ["list", "--state", "done"],
        ["count", "--limit", "5"],
    ],
)
def test_bad_list_flags_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(argv)
    assert info.value.code == EXIT_USAGE


def test_count_and_bulk_cancel_print_their_numbers(
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    schedule_tenant(backend, 6)
    assert run(backend, capsys, "count", "--tag", "tenant") == (EXIT_OK, {"count": 6})
    assert run(backend, capsys, "count", "--due-before", "1893456002") == (EXIT_OK, {"count": 2})
    assert run(backend, capsys, "cancel", "--tag", "tenant", "--routing-key", "a") == (
        EXIT_OK,
        {"cancelled": 3, "too_late": 0},
    )
    assert run(backend, capsys, "cancel", "--prefix", "t-", "--due-after", "1893456005") == (
        EXIT_OK,
        {"cancelled": 1, "too_late": 0},
    )
    arm(store)
    assert run(backend, capsys, "cancel", "--prefix", "t-") == (
        EXIT_OK,
        {"cancelled": 0, "too_late": 2},
    )
    assert run(backend, capsys, "count") == (EXIT_OK, {"count": 2})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cancel"], "give a task id, or at least one of --prefix, --tag and --routing-key"),
        (["cancel", "--due-after", AT], "--due-after and --due-before only narrow those"),
        (["cancel", "t-00", "--tag", "tenant"], "give a task id or filters"),
        (["cancel", "t-00", "--due-before", AT], "not both"),
    ],
)
def test_cancel_takes_an_id_or_filters(
    backend: LibraryBackend,
    store: SQLiteStore,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    schedule_tenant(backend, 2)
    args = _parser().parse_args(argv)
    with pytest.raises(BackendError) as info:
        TASK_COMMANDS["cancel"](backend, args)
    assert info.value.outcome is Outcome.INVALID
    assert message in str(info.value)
    assert capsys.readouterr().out == ""
    assert store.count_tasks() == 2


def test_the_librarys_retry_warnings_stay_off_stderr_below_debug(store: SQLiteStore) -> None:
    """A bulk cancel retries failed batches with a warning each: the CLI prints
    one error line instead (the HTTP backend quiets its client the same way)."""
    bulk = logging.getLogger("triggerhook.engine.bulk")
    level = bulk.level
    try:
        for log_level, quieted in (("DEBUG", logging.NOTSET), ("INFO", logging.ERROR)):
            bulk.setLevel(logging.NOTSET)
            settings = Settings(instance_id="unit", log_level=log_level)
            hook = assemble(settings, store, FakeClock(), lambda b, s, r, f: FakePublisher())
            with LibraryBackend(hook, settings):
                assert bulk.level == quieted, log_level
    finally:
        bulk.setLevel(level)


# -- series -------------------------------------------------------------------------------------

FIVE_MINUTES_AFTER_NOW_MS = 1_700_000_100_000  # NOW is 22:13:20 UTC: */5 next at 22:15


def test_schedule_a_series_with_or_without_a_first_time(backend: LibraryBackend) -> None:
    every = schedule(backend, "e", at=None, meta=Metadata(every="PT15M"))
    assert every == Stored("e", NOW_MS + 900_000, Outcome.CREATED)  # one every from now
    cron = Metadata(cron="*/5 * * * *", timezone="Europe/Berlin", until=AT)
    assert schedule(backend, "c", at=None, meta=cron).due_ms == FIVE_MINUTES_AFTER_NOW_MS
    assert schedule(backend, "c", at=None, meta=cron).outcome is Outcome.EXISTS  # the same series
    timed = schedule(backend, "t", at=None, delay_ms=1000, meta=Metadata(cron="*/5 * * * *"))
    assert timed.due_ms == FIVE_MINUTES_AFTER_NOW_MS  # the first match at or after it
    found = backend.get("c")
    assert found is not None and found.meta.recur == Recurrence(
        cron="*/5 * * * *", timezone="Europe/Berlin", until_ms=AT_MS
    )
    with pytest.raises(BackendError) as info:
        schedule(backend, "c", at=None, meta=Metadata(cron="*/10 * * * *", until=AT))
    assert info.value.outcome is Outcome.CONFLICT


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (Metadata(every="P1M"), "every: "),
        (Metadata(every="PT0.5S"), "every: "),
        (Metadata(cron="61 * * * *"), "cron: "),
        (Metadata(cron="* * * *"), "cron: "),
        (Metadata(cron="* * * * *", timezone="Mars/Olympus"), "timezone: "),
        (Metadata(every="PT1S", timezone="UTC"), "timezone: "),
        (Metadata(every="PT1S", until="yesterday"), "until: "),
        (Metadata(every="PT1S", until="2029-12-31T00:00:00Z"), "until: "),  # before AT
        (Metadata(until="2031-01-01T00:00:00Z"), "until: "),  # not a series
    ],
)
def test_bad_series_name_the_field(
    backend: LibraryBackend, store: SQLiteStore, meta: Metadata, message: str
) -> None:
    with pytest.raises(BackendError) as info:
        schedule(backend, meta=meta)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 0


def test_schedule_get_and_list_show_a_series(
    backend: LibraryBackend, store: SQLiteStore, capsys: pytest.CaptureFixture[str]
) -> None:
    sched = ["schedule", "--id", "s-1", "--every", "PT90M", "--until", AT, "--tag", "s"]
    assert run(backend, capsys, *sched) == (
        EXIT_OK,
        {"id": "s-1", "due_ms": NOW_MS + 5_400_000, "created": True, "outcome": "created"},
    )
    cron = ["schedule", "--id", "s-2", "--cron", "*/5 * * * *", "--timezone", "Europe/Berlin"]
    assert run(backend, capsys, *cron, "--tag", "s")[1]["due_ms"] == FIVE_MINUTES_AFTER_NOW_MS
    shown = {
        "id": "s-1",
        "due_ms": NOW_MS + 5_400_000,
        "routing_key": "rk",
        "state": "scheduled",
        "tags": ["s"],
        "every": "PT1H30M",  # normalized
        "until_ms": AT_MS,
        "occurrence": 1,
    }
    assert run(backend, capsys, "get", "s-1") == (EXIT_OK, {**shown, "payload": ""})
    code, lines = run_lines(backend, capsys, "list", "--tag", "s")
    assert (code, lines) == (
        EXIT_OK,
        [
            {
                "id": "s-2",
                "due_ms": FIVE_MINUTES_AFTER_NOW_MS,
                "routing_key": "rk",
                "state": "scheduled",
                "tags": ["s"],
                "cron": "*/5 * * * *",
                "timezone": "Europe/Berlin",
                "occurrence": 1,
            },
            shown,
        ],
    )
    arm(store)  # both being published: a cancel is too late, and stops the series
    assert run(backend, capsys, "cancel", "s-1") == (
        EXIT_TOO_LATE,
        {"id": "s-1", "result": "too_late"},
    )
    stopping = run(backend, capsys, "get", "s-1")[1]
    assert (stopping["state"], stopping["stopping"]) == ("firing", True)
    assert "stopping" not in run(backend, capsys, "get", "s-2")[1]


@pytest.mark.parametrize("flags", [[], ["--until", AT], ["--timezone", "Europe/Berlin"]])
def test_schedule_needs_a_time_or_a_series(
    backend: LibraryBackend, store: SQLiteStore, flags: list[str]
) -> None:
    args = _parser().parse_args(["schedule", *flags])
    with pytest.raises(BackendError) as info:
        TASK_COMMANDS["schedule"](backend, args)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("at: give --at or --in"), str(info.value)
    assert store.count_tasks() == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "--every", "PT1M", "--cron", "* * * * *"],
        ["schedule", "--at", AT, "--in", "5s", "--every", "PT1M"],
        ["reschedule", "t-1"],  # a reschedule still needs its time
    ],
)
def test_conflicting_series_flags_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(argv)
    assert info.value.code == EXIT_USAGE


def summary(**series: object) -> TaskSummary:
    return TaskSummary("t", AT_MS, "k", TaskState.SCHEDULED, **series)  # type: ignore[arg-type]


def test_the_http_backend_reads_a_series_as_the_library_keeps_it() -> None:
    """What get and list print over --url: the same as in database mode."""
    every = summary(every="PT1H30M", until_ms=AT_MS, occurrence=3, stopping=True)
    assert backends._meta_of(every) == Meta(
        recur=Recurrence(every_ms=5_400_000, until_ms=AT_MS, occurrence=3, stopped=True)
    )
    cron = summary(cron="0 9 * * 1-5", timezone="Europe/Berlin", occurrence=1)
    assert backends._meta_of(cron).recur == Recurrence(cron="0 9 * * 1-5", timezone="Europe/Berlin")
    assert backends._meta_of(summary()).recur is None  # a one-off task
    with pytest.raises(BackendError) as info:
        backends._meta_of(summary(every="P1M", occurrence=1))
    assert info.value.outcome is Outcome.INTERNAL


def test_the_http_backend_reads_a_deadline_in_milliseconds() -> None:
    late = summary(late={"deadline_ms": AT_MS})
    assert backends._meta_of(late).late == LatePolicy(LateKind.DEADLINE, AT_MS)
    assert backends._meta_of(summary(late={"skip_after_ms": 5})).late == LatePolicy(
        LateKind.SKIP_AFTER, 5
    )
    with pytest.raises(BackendError) as info:  # the deprecated seconds are not read
        backends._meta_of(summary(late={"deadline": AT_MS / 1000}))
    assert info.value.outcome is Outcome.INTERNAL


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["schedule"], "--at"), (["reschedule", "t"], "--at"), (["schedule"], "--until")],
)
def test_where_a_time_is_typed_the_help_says_naive_means_utc(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args([*argv, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    described = help_text.rsplit(f"{flag} TIME ", 1)[1].split(" --", 1)[0]  # not the usage
    assert "RFC 3339; without an offset: UTC" in described, described
