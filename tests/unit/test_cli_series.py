"""The CLI's commands of a series' life (pause, resume, trigger, backfill) and
``schedule --catch-up``: over the library backend on the in-memory SQLite
store (what they print, their exit codes, what the store then holds), and the
HTTP backend's reading of the client's answers and errors (scripted with
httpx.MockTransport). Both backends as processes, against MariaDB and a
daemon: tests/integration/test_series_cli.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from support.fakes import DEFAULT_NOW_MS, FakeClock, FakePublisher
from triggerhook_client import Client

from triggerhook import cli, logs
from triggerhook.api.render import task_json
from triggerhook.cli import (
    CLI_RENDERING,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    TASK_COMMANDS,
    _parser,
)
from triggerhook.cli.backends import BackendError, Copying, HttpBackend, LibraryBackend, Stored
from triggerhook.domain.outcomes import Outcome
from triggerhook.domain.series import PARKED_MS
from triggerhook.errors import ValidationError
from triggerhook.settings import Settings
from triggerhook.store.sqlite import SQLiteStore
from triggerhook.wiring import assemble

NOW_MS = int(DEFAULT_NOW_MS)  # 2023-11-14T22:13:20Z
MINUTE_MS = 60_000
FIRST_MS = NOW_MS + MINUTE_MS  # an untimed every-minute series' first occurrence


@pytest.fixture
def store() -> SQLiteStore:
    return SQLiteStore(":memory:")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(store: SQLiteStore, clock: FakeClock) -> Iterator[LibraryBackend]:
    settings = Settings(instance_id="unit", default_routing_key="rk")
    hook = assemble(settings, store, clock, lambda buffer, sink, retry, fail: FakePublisher())
    with LibraryBackend(hook) as library:
        yield library


Run = Callable[..., tuple[int, dict[str, object]]]


@pytest.fixture
def run(backend: LibraryBackend, capsys: pytest.CaptureFixture[str]) -> Run:
    """A command over the library backend: its exit code and the one JSON line it printed."""

    def command(*argv: str) -> tuple[int, dict[str, object]]:
        args = _parser().parse_args(argv)
        code = TASK_COMMANDS[args.command](backend, args)
        out = capsys.readouterr().out
        assert out.count("\n") == 1, out
        return code, json.loads(out)

    return command


def arm(store: SQLiteStore) -> None:
    """Another instance commits every stored task to firing."""
    acquired = store.acquire("other", store.shard_count(), 2**40)
    assert store.arm("other", [a.lease for a in acquired], 2**53, 100).tasks


def iso(ms: int) -> str:
    """``ms`` as the RFC 3339 text --at takes."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


# -- pause and resume ----------------------------------------------------------------------------


def test_pause_get_resume(run: Run) -> None:
    run("schedule", "--id", "s", "--every", "PT1M")
    assert run("pause", "s") == (EXIT_OK, {"id": "s", "result": "paused"})
    shown = run("get", "s")[1]
    assert (shown["paused"], shown["resume_ms"], shown["due_ms"]) == (True, FIRST_MS, PARKED_MS)
    assert run("pause", "s") == (EXIT_OK, {"id": "s", "result": "paused"})  # no change
    assert run("resume", "s") == (EXIT_OK, {"id": "s", "result": "resumed"})
    shown = run("get", "s")[1]
    assert shown["due_ms"] == FIRST_MS
    assert "paused" not in shown and "resume_ms" not in shown
    assert run("resume", "s") == (EXIT_OK, {"id": "s", "result": "resumed"})  # not paused


def test_a_pause_while_an_occurrence_is_published_lets_it_fire(
    run: Run, store: SQLiteStore
) -> None:
    run("schedule", "--id", "s", "--every", "PT1M")
    arm(store)
    assert run("pause", "s") == (EXIT_OK, {"id": "s", "result": "paused_after_this"})
    shown = run("get", "s")[1]
    assert (shown["state"], shown["paused"]) == ("firing", True)
    assert "resume_ms" not in shown  # known once that occurrence is confirmed


def test_a_resume_after_the_series_end_ends_it(
    run: Run, clock: FakeClock, store: SQLiteStore
) -> None:
    until = iso(NOW_MS + 90_000)  # one occurrence, FIRST_MS, before it
    run("schedule", "--id", "s", "--every", "PT1M", "--until", until, "--catch-up", "skip")
    run("pause", "s")
    clock.advance(10 * MINUTE_MS)  # the occurrence and the end pass while paused
    assert run("resume", "s") == (EXIT_OK, {"id": "s", "result": "ended"})
    assert run("get", "s") == (EXIT_NOT_FOUND, {"id": "s", "result": "not_found"})
    assert store.count_tasks() == 0


# -- trigger and backfill ------------------------------------------------------------------------


def test_trigger_fires_a_copy_now(run: Run) -> None:
    run("schedule", "--id", "s", "--every", "PT1M", "--payload", "p", "--tag", "t")
    copy = {"id": f"s:{NOW_MS}", "due_ms": NOW_MS, "outcome": "created"}
    assert run("trigger", "s") == (EXIT_OK, {"id": "s", "result": "triggered", "copies": [copy]})
    shown = run("get", f"s:{NOW_MS}")[1]
    # A one-off task of the series' content, fired late on purpose: no schedule, late fire.
    assert shown == {
        "id": f"s:{NOW_MS}",
        "due_ms": NOW_MS,
        "routing_key": "rk",
        "payload": "p",
        "state": "scheduled",
        "tags": ["t"],
        "late": "fire",
    }
    assert run("get", "s")[1]["due_ms"] == FIRST_MS  # its schedule is unchanged


def test_backfill_fires_the_ranges_occurrences_once(run: Run, store: SQLiteStore) -> None:
    run("schedule", "--id", "s", "--every", "PT1M")
    span = ("--from", iso(NOW_MS - 3 * MINUTE_MS), "--to", iso(NOW_MS))
    dues = [NOW_MS - 3 * MINUTE_MS, NOW_MS - 2 * MINUTE_MS, NOW_MS - MINUTE_MS]  # [from, to)
    code, shown = run("backfill", "s", *span)
    assert (code, shown) == (
        EXIT_OK,
        {
            "id": "s",
            "result": "backfilled",
            "copies": [{"id": f"s:{d}", "due_ms": d, "outcome": "created"} for d in dues],
        },
    )
    again = run("backfill", "s", *span)[1]["copies"]
    assert isinstance(again, list) and [c["outcome"] for c in again] == ["exists"] * 3
    assert store.count_tasks() == 4  # the series and its three copies, once
    empty = run("backfill", "s", "--from", iso(NOW_MS - 30_000), "--to", iso(NOW_MS - 10_000))
    assert empty == (EXIT_OK, {"id": "s", "result": "backfilled", "copies": []})


@pytest.mark.parametrize(
    ("span", "message"),
    [
        ((iso(NOW_MS - 1000), iso(NOW_MS + 1000)), "to: is after now"),
        ((iso(NOW_MS - 1000), iso(NOW_MS - 2000)), "to: must be after"),
        (("1970-01-01T00:00:00Z", iso(NOW_MS)), "to: the range holds more than 1000"),
    ],
)
def test_a_bad_backfill_range_names_the_flag(
    run: Run, store: SQLiteStore, span: tuple[str, str], message: str
) -> None:
    run("schedule", "--id", "s", "--every", "PT1M")
    with pytest.raises(BackendError) as info:
        run("backfill", "s", "--from", span[0], "--to", span[1])
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 1  # nothing written


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--from", "soon", "--to", "2023-11-14T00:00:00Z"], "from"),
        (["--from", "2023-11-14T00:00:00Z", "--to", "10000-01-01T00:00:00Z"], "to"),
    ],
)
def test_a_backfill_time_is_parsed_as_at_is(
    backend: LibraryBackend, flags: list[str], field: str
) -> None:
    args = _parser().parse_args(["backfill", "s", *flags])
    with pytest.raises(ValidationError) as info:
        TASK_COMMANDS["backfill"](backend, args)
    assert info.value.field == field


@pytest.mark.parametrize(
    "argv",
    [
        ["backfill", "s"],
        ["backfill", "s", "--from", "2023-11-14T00:00:00Z"],
        ["pause"],
        ["trigger", "a", "b"],
    ],
)
def test_missing_arguments_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(argv)
    assert info.value.code == EXIT_USAGE


# -- not found, not a series -------------------------------------------------------------------


SERIES_COMMANDS = [
    ["pause"],
    ["resume"],
    ["trigger"],
    ["backfill", "--from", "2023-11-14T00:00:00Z", "--to", "2023-11-14T00:01:00Z"],
]


@pytest.mark.parametrize("command", SERIES_COMMANDS, ids=lambda c: c[0])
def test_unknown_and_one_off_tasks(run: Run, store: SQLiteStore, command: list[str]) -> None:
    name, *flags = command
    assert run(name, "nope", *flags) == (EXIT_NOT_FOUND, {"id": "nope", "result": "not_found"})
    run("schedule", "--id", "once", "--in", "1h")
    code, shown = run(name, "once", *flags)
    assert (code, shown) == (EXIT_USAGE, {"id": "once", "result": "not_a_series"})
    assert CLI_RENDERING[Outcome.NOT_A_SERIES].exit == CLI_RENDERING[Outcome.CONFLICT].exit
    assert store.count_tasks() == 1  # nothing written
    assert "paused" not in run("get", "once")[1]


def test_a_bad_id_names_the_field(backend: LibraryBackend) -> None:
    for name, *flags in SERIES_COMMANDS:
        args = _parser().parse_args([name, "bad id!", *flags])
        with pytest.raises(BackendError) as info:
            TASK_COMMANDS[name](backend, args)
        assert info.value.outcome is Outcome.INVALID
        assert str(info.value).startswith("id: "), str(info.value)


def test_a_series_too_long_to_copy_is_refused_naming_the_id(run: Run) -> None:
    long_id = "s" * 50  # its copies' ids, <id>:<13 digits>, would be over 64 characters
    run("schedule", "--id", long_id, "--every", "PT1M")
    with pytest.raises(BackendError) as info:
        run("trigger", long_id)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith("id: is 50 characters"), str(info.value)


# -- schedule --catch-up -----------------------------------------------------------------------


def test_schedule_with_a_catch_up_policy_and_get_shows_it(run: Run) -> None:
    run("schedule", "--id", "a", "--every", "PT1M", "--catch-up", "all", "--catch-up-max", "5")
    shown = run("get", "a")[1]
    assert (shown["catch_up"], shown["catch_up_max"]) == ("all", 5)
    run("schedule", "--id", "k", "--cron", "* * * * *", "--catch-up", "skip")
    shown = run("get", "k")[1]
    assert shown["catch_up"] == "skip" and "catch_up_max" not in shown
    default = run("schedule", "--id", "d", "--every", "PT1M")
    assert "catch_up" not in run("get", "d")[1] and default[0] == EXIT_OK
    # The policy is content: the same series with another is a conflict.
    with pytest.raises(BackendError) as info:
        run("schedule", "--id", "k", "--cron", "* * * * *", "--catch-up", "one")
    assert info.value.outcome is Outcome.CONFLICT


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--in", "1h", "--catch-up", "all"], "catch_up: applies to a series only"),
        (["--every", "PT1M", "--catch-up-max", "5"], 'catch_up_max: only with catch_up "all"'),
        (["--every", "PT1M", "--catch-up", "one", "--catch-up-max", "5"], "catch_up_max: only"),
        (["--every", "PT1M", "--catch-up", "all", "--catch-up-max", "1001"], "catch_up_max: "),
    ],
)
def test_bad_catch_up_flags_name_the_field(
    backend: LibraryBackend, store: SQLiteStore, flags: list[str], message: str
) -> None:
    args = _parser().parse_args(["schedule", *flags])
    with pytest.raises(BackendError) as info:
        TASK_COMMANDS["schedule"](backend, args)
    assert info.value.outcome is Outcome.INVALID
    assert str(info.value).startswith(message), str(info.value)
    assert store.count_tasks() == 0


@pytest.mark.parametrize(
    "flags",
    [["--catch-up", "some"], ["--catch-up-max", "0"], ["--catch-up-max", "ten"]],
)
def test_catch_up_flags_take_only_their_values(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["schedule", "--every", "PT1M", *flags])
    assert info.value.code == EXIT_USAGE
    assert flags[0] in capsys.readouterr().err


# -- main: one line on stderr for a user's mistake --------------------------------------------


class _Nothing:
    """A backend never called: the command fails before it would be."""

    def __init__(self, _hook: object, _settings: object = None) -> None:
        pass

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


def test_main_prints_a_bad_time_as_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "build", lambda settings: None)
    monkeypatch.setattr(cli, "LibraryBackend", _Nothing)
    # The test's own logging stays as it is (main would point it at this test's stderr).
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    code = cli.main(["backfill", "s", "--from", "yesterday", "--to", "2023-11-14T00:00:00Z"])
    captured = capsys.readouterr()
    assert (code, captured.out) == (EXIT_USAGE, "")
    assert captured.err.startswith("triggerhook: error: from: "), captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


# -- the HTTP backend: the client's answers as outcomes ---------------------------------------


def http_backend(monkeypatch: pytest.MonkeyPatch, *answers: httpx.Response) -> HttpBackend:
    """An HTTP backend whose client gets ``answers`` in turn (the last repeats)."""
    backend = HttpBackend("http://daemon.test", Settings(instance_id="unit"))
    left = list(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        given = left.pop(0) if len(left) > 1 else left[0]
        return httpx.Response(given.status_code, content=given.content, headers=given.headers)

    backend.close()
    client = Client("http://daemon.test", transport=httpx.MockTransport(answer), retries=0)
    monkeypatch.setattr(backend, "_client", client)
    return backend


def refusal(status: int, code: str, field: str | None = None) -> httpx.Response:
    error = {"code": code, "message": f"{code} happened", **({"field": field} if field else {})}
    return httpx.Response(status, json={"error": error})


def test_the_http_backend_reads_each_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    copies = [{"id": "s:5", "due_ms": 5, "outcome": "exists"}]
    with http_backend(
        monkeypatch,
        httpx.Response(200, json={"id": "s", "outcome": "paused_after_this"}),
        httpx.Response(200, json={"id": "s", "outcome": "ended"}),
        httpx.Response(200, json={"id": "s", "outcome": "triggered", "copies": copies}),
        httpx.Response(200, json={"id": "s", "outcome": "backfilled", "copies": copies}),
        refusal(404, "not_found"),
        refusal(409, "not_a_series"),
        refusal(409, "not_a_series"),
    ) as backend:
        assert backend.pause("s") is Outcome.PAUSED_AFTER_THIS
        assert backend.resume("s") is Outcome.ENDED
        made = (Stored("s:5", 5, Outcome.EXISTS),)
        assert backend.trigger("s") == Copying(Outcome.TRIGGERED, made)
        assert backend.backfill("s", 1, 6) == Copying(Outcome.BACKFILLED, made)
        assert backend.pause("s") is Outcome.NOT_FOUND
        assert backend.trigger("s") == Copying(Outcome.NOT_A_SERIES)
        assert backend.resume("s") is Outcome.NOT_A_SERIES


def test_the_http_backend_refuses_an_outcome_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = httpx.Response(200, json={"id": "s", "outcome": "paused_forever"})
    with http_backend(monkeypatch, answer) as backend, pytest.raises(BackendError) as info:
        backend.pause("s")
    assert info.value.outcome is Outcome.INTERNAL
    assert str(info.value) == "unexpected answer: outcome 'paused_forever'"


@pytest.mark.parametrize(
    ("answer", "outcome", "starts"),
    [
        (refusal(422, "invalid", "to_ms"), Outcome.INVALID, "to: "),  # the CLI's --to
        (refusal(422, "invalid", "from_ms"), Outcome.INVALID, "from: "),
        (refusal(409, "conflict"), Outcome.CONFLICT, "conflict happened"),
        (refusal(503, "unavailable"), Outcome.UNAVAILABLE, "unavailable happened"),
    ],
)
def test_the_http_backends_failures_name_the_flag(
    monkeypatch: pytest.MonkeyPatch, answer: httpx.Response, outcome: Outcome, starts: str
) -> None:
    with http_backend(monkeypatch, answer) as backend, pytest.raises(BackendError) as info:
        backend.backfill("s", 1, 2)
    assert info.value.outcome is outcome
    assert str(info.value).startswith(starts), str(info.value)


def test_the_http_backend_shows_a_paused_series_as_the_library_does(
    monkeypatch: pytest.MonkeyPatch, backend: LibraryBackend, run: Run
) -> None:
    """``get`` prints the same over either backend: here the library's answer,
    rendered by the daemon, read back through the client."""
    run("schedule", "--id", "s", "--every", "PT1M", "--catch-up", "all", "--catch-up-max", "3")
    run("pause", "s")
    info = backend._hook.get("s")
    assert info is not None
    with http_backend(monkeypatch, httpx.Response(200, json=task_json(info))) as remote:
        assert remote.get("s") == backend.get("s")
