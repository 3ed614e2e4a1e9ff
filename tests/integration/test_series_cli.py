"""``triggerhook pause``, ``resume``, ``trigger``, ``backfill`` and ``schedule
--catch-up`` as separate processes, over both backends: the database (MariaDB,
no daemon: what is written stays to be read back) and a running daemon's HTTP
API (``--url``: the copies a trigger or a backfill writes are due, so the
daemon fires them, and their events are the proof). The same output and exit
codes either way (the unit tests of each: tests/unit/test_cli_series.py)."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from support.daemon import TaskTable, base_env, closed_port, run_cli, settings_env
from support.http import ROUTED, Api, api_daemon
from support.waiting import now_ms

from triggerhook.domain.series import PARKED_MS
from triggerhook.store.mysql import init_schema

EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND = 0, 2, 3
FIRST_MS = 1_893_456_000_000  # 2030-01-01T00:00:00Z: the series never fires during a test
MINUTE_MS = 60_000
TOKEN = "series-cli-" + secrets.token_hex(8)


@pytest.fixture
def db(database_url: str) -> Iterator[tuple[str, TaskTable]]:
    init_schema(database_url)
    with TaskTable(database_url) as table:
        yield database_url, table


@pytest.fixture(scope="module")
def served(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, api_token=TOKEN, default_routing_key=ROUTED) as api:
        yield api
        assert api.daemon.terminate() == 0, api.daemon.tail()
        assert api.daemon.count("Traceback") == 0, api.daemon.tail()


def db_env(database_url: str) -> dict[str, str]:
    return {**base_env(), **settings_env(database_url=database_url)}


def url_env(api: Api) -> dict[str, str]:
    """The CLI pointed at the daemon; its own database leads nowhere."""
    nowhere = f"mysql+pymysql://root:@127.0.0.1:{closed_port()}/th_unused"
    env = {**base_env(), **settings_env(database_url=nowhere, api_token=TOKEN)}
    return {**env, "TRIGGERHOOK_URL": api.url}


def printed(result: subprocess.CompletedProcess[str], code: int) -> dict[str, object]:
    """The one JSON object a command printed, having exited ``code``."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output and result.stderr == "", output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def refused(result: subprocess.CompletedProcess[str], code: int, *mentions: str) -> None:
    """Exit ``code`` with one error line mentioning each of ``mentions``."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output and result.stdout == "", output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("triggerhook: error: "), line
    assert all(mention in line for mention in mentions), line


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def fired_ids(api: Api, expected: set[str], timeout_s: float) -> set[str]:
    """The ids of the events received until all of ``expected`` were (in any order)."""
    deadline = time.monotonic() + timeout_s
    ids: set[str] = set()
    while not expected <= ids:
        left = deadline - time.monotonic()
        assert left > 0, f"not fired within {timeout_s}s: {sorted(expected - ids)}"
        ids |= {str(event.message_id) for event in api.events.collect(1, left)}
    return ids


def life_scenario(env: dict[str, str], series: str) -> tuple[list[int], str]:
    """Schedule, pause, resume, trigger and backfill one series (and the
    refusals): the output each mode must print. Returns the due times of the
    backfilled copies and the trigger's copy's id."""
    sched = ["schedule", "--id", series, "--every", "PT1M", "--at", iso(FIRST_MS)]
    sched += ["--routing-key", ROUTED, "--catch-up", "all", "--catch-up-max", "3"]
    made = printed(run_cli(sched, env), EXIT_OK)
    assert (made["due_ms"], made["outcome"]) == (FIRST_MS, "created")
    shown = printed(run_cli(["get", series], env), EXIT_OK)
    assert (shown["catch_up"], shown["catch_up_max"], shown.get("paused")) == ("all", 3, None)

    paused = {"id": series, "result": "paused"}
    assert printed(run_cli(["pause", series], env), EXIT_OK) == paused
    assert printed(run_cli(["pause", series], env), EXIT_OK) == paused  # again: no change
    shown = printed(run_cli(["get", series], env), EXIT_OK)
    assert (shown["paused"], shown["resume_ms"], shown["due_ms"]) == (True, FIRST_MS, PARKED_MS)
    resumed = printed(run_cli(["resume", series], env), EXIT_OK)
    assert resumed == {"id": series, "result": "resumed"}
    shown = printed(run_cli(["get", series], env), EXIT_OK)
    assert shown["due_ms"] == FIRST_MS and "paused" not in shown and "resume_ms" not in shown

    before = now_ms()
    triggered = printed(run_cli(["trigger", series], env), EXIT_OK)
    copies = triggered.pop("copies")
    assert triggered == {"id": series, "result": "triggered"}
    assert isinstance(copies, list) and len(copies) == 1, copies
    [copy] = copies
    copy_due = copy["due_ms"]
    assert isinstance(copy_due, int) and before <= copy_due <= now_ms(), copy
    assert copy == {"id": f"{series}:{copy_due}", "due_ms": copy_due, "outcome": "created"}

    start = (now_ms() // MINUTE_MS - 3) * MINUTE_MS  # three whole minutes ago: occurrences
    dues = [start, start + MINUTE_MS, start + 2 * MINUTE_MS]
    span = ["--from", iso(start), "--to", iso(start + 3 * MINUTE_MS)]
    backfilled = printed(run_cli(["backfill", series, *span], env), EXIT_OK)
    assert backfilled == {
        "id": series,
        "result": "backfilled",
        "copies": [{"id": f"{series}:{d}", "due_ms": d, "outcome": "created"} for d in dues],
    }

    # Refusals, nothing written: a range ending in the future, an unknown id, a one-off task.
    future = ["--from", iso(start), "--to", iso(now_ms() + 3_600_000)]
    refused(run_cli(["backfill", series, *future], env), EXIT_USAGE, "to:", "after now")
    refused(run_cli(["backfill", series, "--from", "soon", *span[2:]], env), EXIT_USAGE, "from:")
    printed(run_cli(["schedule", "--id", f"{series}-once", "--at", iso(FIRST_MS)], env), EXIT_OK)
    for command in (["pause"], ["resume"], ["trigger"], ["backfill", *span]):
        gone = printed(run_cli([command[0], f"{series}-nope", *command[1:]], env), EXIT_NOT_FOUND)
        assert gone == {"id": f"{series}-nope", "result": "not_found"}, command
        once = printed(run_cli([command[0], f"{series}-once", *command[1:]], env), EXIT_USAGE)
        assert once == {"id": f"{series}-once", "result": "not_a_series"}, command
    return dues, str(copy["id"])


def test_a_series_life_in_database_mode(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = db_env(database_url)
    dues, triggered = life_scenario(env, "db")
    copies = {f"db:{d}" for d in dues} | {triggered}
    assert table.ids() == {"db", "db-once", *copies}  # nothing else written
    # No daemon: the copies wait, one-off tasks of the series' content.
    shown = printed(run_cli(["get", triggered], env), EXIT_OK)
    assert (shown["routing_key"], shown["late"], shown.get("every")) == (ROUTED, "fire", None)
    # No daemon, so the copies are still pending: a repeated backfill finds them.
    span = ["--from", iso(dues[0]), "--to", iso(dues[-1] + MINUTE_MS)]
    again = printed(run_cli(["backfill", "db", *span], env), EXIT_OK)["copies"]
    assert isinstance(again, list) and [c["outcome"] for c in again] == ["exists"] * 3
    assert table.count() == 6
    # Paused while its occurrence is being published: that one still fires.
    table.mark_firing("db")
    after = printed(run_cli(["pause", "db"], env), EXIT_OK)
    assert after == {"id": "db", "result": "paused_after_this"}


def test_a_resume_after_a_series_ended_deletes_it(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = db_env(database_url)
    past = now_ms() - 10_000
    sched = ["schedule", "--id", "end", "--every", "PT1S", "--at", iso(past)]
    sched += ["--until", iso(past + 1500), "--catch-up", "skip"]
    printed(run_cli(sched, env), EXIT_OK)
    printed(run_cli(["pause", "end"], env), EXIT_OK)  # no daemon: it never fired
    assert printed(run_cli(["resume", "end"], env), EXIT_OK) == {"id": "end", "result": "ended"}
    assert table.count() == 0


def test_a_series_life_in_url_mode(served: Api) -> None:
    series = f"url-{secrets.token_hex(4)}"
    dues, triggered = life_scenario(url_env(served), series)
    # The daemon fires each copy: they are due (the trigger's now, the backfill's past).
    expected = {triggered, *(f"{series}:{d}" for d in dues)}
    ids = fired_ids(served, expected, timeout_s=30)
    assert expected <= ids
    assert series not in ids  # the series itself is not due until 2030
    with TaskTable(served.database_url) as table:
        left = table.query("SELECT id FROM th_tasks WHERE id LIKE %s", (f"{series}%",))
    assert sorted(row[0] for row in left) == [series, f"{series}-once"]  # the copies fired
