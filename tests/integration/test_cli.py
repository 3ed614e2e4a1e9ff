"""The ``triggerhook`` CLI as a separate process against the real MariaDB.

Bad input must give one clear error line naming the field or cause, exit code
2 (1 for an unreachable database), no traceback, and write nothing.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.daemon import (
    TaskTable,
    base_env,
    closed_port,
    run_cli,
    settings_env,
    triggerhook_command,
)
from support.http import ROUTED, Api, api_daemon
from support.mysql import connect
from support.waiting import now_ms

from triggerhook import Settings, TaskSpec, build
from triggerhook.cli import _parser
from triggerhook.store.mysql import init_schema
from triggerhook.store.mysql.sql import SCHEMA_VERSION

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TOO_LATE = 0, 1, 2, 3, 4


@pytest.fixture
def db(database_url: str) -> Iterator[tuple[str, TaskTable]]:
    """The test database with the schema applied, and a reader of its tasks."""
    init_schema(database_url)
    with TaskTable(database_url) as table:
        yield database_url, table


def cli_env(database_url: str, **settings: int | str) -> dict[str, str]:
    return {**base_env(), **settings_env(database_url=database_url, **settings)}


def assert_clean_error(result: subprocess.CompletedProcess[str], code: int, *mentions: str) -> None:
    """Exit ``code``; stderr is exactly one line mentioning each of ``mentions``;
    no traceback anywhere; nothing on stdout."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("triggerhook: error: "), output
    for mention in mentions:
        assert mention in lines[0], output
    assert result.stdout == "", output


BAD_SCHEDULE_INPUT = [
    pytest.param(["--id", "bad id!", "--in", "5s"], {}, ("id:",), id="id-bad-chars"),
    pytest.param(["--id", "a" * 65, "--in", "5s"], {}, ("id:", "1-64"), id="id-65-chars"),
    pytest.param(["--at", "notatime"], {}, ("at:", "notatime"), id="at-not-a-time"),
    pytest.param(["--at", "10000-01-01T00:00:00Z"], {}, ("at:", "10000-01-01"), id="at-year-10000"),
    pytest.param(["--at", "1969-12-31T23:59:59Z"], {}, ("at:", "1970"), id="at-before-epoch"),
    pytest.param(
        ["--in", "5s", "--payload", "x" * 11],
        {"max_payload_bytes": 10},
        ("payload:", "10"),
        id="payload-too-big",
    ),
    pytest.param(
        ["--in", "5s", "--routing-key", "bad key!"], {}, ("routing_key:",), id="routing-key"
    ),
    pytest.param(["--in", "5x"], {}, ("in:", "5x"), id="in-bad-duration"),
    # A byte that is not UTF-8 in argv (Python passes it on as a lone surrogate).
    pytest.param(
        ["--in", "5s", "--payload", "caf\udce9"], {}, ("payload:",), id="payload-not-utf8"
    ),
    pytest.param(
        ["--in", "5s"],
        {"arm_interval_ms": "fifty"},
        ("TRIGGERHOOK_ARM_INTERVAL_MS", "integer"),
        id="env-bad-integer",
    ),
    pytest.param(
        ["--in", "5s"],
        {"shard_lease_ms": "999"},
        ("TRIGGERHOOK_SHARD_LEASE_MS", "1000"),
        id="env-below-minimum",
    ),
]


@pytest.mark.parametrize(("args", "settings", "mentions"), BAD_SCHEDULE_INPUT)
def test_schedule_rejects_bad_input(
    db: tuple[str, TaskTable],
    args: list[str],
    settings: dict[str, int | str],
    mentions: tuple[str, ...],
) -> None:
    database_url, table = db
    result = run_cli(["schedule", *args], cli_env(database_url, **settings))
    assert_clean_error(result, EXIT_USAGE, *mentions)
    assert table.count() == 0


@pytest.mark.parametrize(
    ("toml", "mentions"),
    [
        pytest.param('no_such_setting = 1\nexchange = "x"\n', ("no_such_setting",), id="unknown"),
        pytest.param('arm_interval_ms = "fast"\n', ("arm_interval_ms", "integer"), id="type"),
        pytest.param("exchange = 5\n", ("exchange", "string"), id="str-type"),
        pytest.param("arm_interval_ms = \n", ("not valid TOML",), id="syntax"),
        # A setting of the claim protocol (schema 2): named, with what to write instead.
        pytest.param(
            "claim_lease_ms = 20000\n",
            ("claim_lease_ms", "is now shard_lease_ms"),
            id="renamed",
        ),
        pytest.param("preload_window_ms = 1000\n", ("preload_window_ms", "is gone"), id="removed"),
    ],
)
def test_bad_config_file_is_rejected(
    db: tuple[str, TaskTable], tmp_path: Path, toml: str, mentions: tuple[str, ...]
) -> None:
    database_url, table = db
    config = tmp_path / "triggerhook.toml"
    config.write_text(toml)
    for command in (["schedule", "--in", "5s"], ["run"]):
        result = run_cli(["--config", str(config), *command], cli_env(database_url))
        assert_clean_error(result, EXIT_USAGE, str(config), *mentions)
    assert table.count() == 0


@pytest.mark.parametrize("kind", ["missing", "directory", "not-utf8"])
def test_unreadable_config_file_is_rejected(
    db: tuple[str, TaskTable], tmp_path: Path, kind: str
) -> None:
    """A config file that cannot be read: a clean error naming the path."""
    database_url, table = db
    path = {"missing": tmp_path / "nope.toml", "directory": tmp_path}.get(
        kind, tmp_path / "latin1.toml"
    )
    if kind == "not-utf8":
        path.write_bytes(b'exchange = "caf\xe9"\n')
    result = run_cli(["--config", str(path), "schedule", "--in", "5s"], cli_env(database_url))
    assert_clean_error(result, EXIT_USAGE, str(path))
    assert table.count() == 0


@pytest.mark.parametrize(
    ("settings", "mentions"),
    [
        pytest.param({"amqp_url": "amqp://g:g@h:notaport/%2F"}, ("amqp_url",), id="amqp-url"),
        pytest.param(
            {"database_url": "postgresql://u@h/db"}, ("database_url", "scheme"), id="db-scheme"
        ),
        pytest.param({"log_level": "chatty"}, ("log_level",), id="log-level"),
        pytest.param({"instance_id": "a b"}, ("instance_id",), id="instance-id"),
        pytest.param(
            {"shard_lease_ms": 2000, "database_idle_transaction_timeout_s": 2},
            ("database_idle_transaction_timeout_s", "shard_lease_ms"),
            id="idle-timeout-vs-lease",
        ),
        pytest.param(
            {"arm_ahead_ms": 100, "arm_interval_ms": 100},
            ("arm_interval_ms", "arm_ahead_ms"),
            id="interval-vs-ahead",
        ),
        pytest.param({"shard_count": 4097}, ("shard_count", "4096"), id="shard-count"),
    ],
)
def test_run_rejects_bad_settings(
    db: tuple[str, TaskTable], settings: dict[str, int | str], mentions: tuple[str, ...]
) -> None:
    database_url, _ = db
    result = run_cli(["run"], {**cli_env(database_url), **settings_env(**settings)})
    assert_clean_error(result, EXIT_USAGE, *mentions)


def test_a_bad_url_is_named_without_its_password(db: tuple[str, TaskTable]) -> None:
    """The error line quotes the setting's URL, with its password masked."""
    database_url, table = db
    secret = f"pw-{secrets.token_hex(8)}"
    env = cli_env(database_url, metrics_url=f"ftp://influx:{secret}@127.0.0.1:8086")
    for command in (["schedule", "--in", "5s"], ["run"]):
        result = run_cli(command, env)
        assert_clean_error(result, EXIT_USAGE, "metrics_url", "ftp://influx:***@127.0.0.1:8086")
        assert secret not in result.stderr + result.stdout
    assert table.count() == 0


@pytest.mark.parametrize(
    "command",
    [
        ["schedule", "--in", "5s"],
        ["run"],
        ["get", "x"],
        ["reschedule", "x", "--in", "5s"],
        ["list"],
        ["count"],
        ["cancel", "--tag", "t"],
    ],
)
def test_unreachable_database_is_a_runtime_failure(command: list[str]) -> None:
    url = f"mysql+pymysql://root:@127.0.0.1:{closed_port()}/th_unreachable"
    result = run_cli(command, cli_env(url), timeout_s=60)
    assert_clean_error(result, EXIT_FAILURE, "database")


def test_schema_missing_is_reported(database_url: str) -> None:
    """An existing database without the tables: a clear pointer to `db init`."""
    result = run_cli(["schedule", "--in", "5s"], cli_env(database_url))
    assert_clean_error(result, EXIT_USAGE, "db init")


def test_db_init_creates_the_database_and_is_idempotent(mysql_url: str) -> None:
    name = f"th_test_init_{secrets.token_hex(4)}"
    url = f"{mysql_url}/{name}"
    try:
        # The shard count is fixed when the database is created: a later init
        # with another count keeps the first one (and says so).
        for count, said in ((8, ""), (8, ""), (16, "keeps its shard count of 8")):
            result = run_cli(["db", "init"], cli_env(url, shard_count=count))
            assert result.returncode == EXIT_OK, result.stdout + result.stderr
            assert "Traceback" not in result.stderr
            assert f"schema version {SCHEMA_VERSION}" in result.stdout
            assert said in result.stderr, result.stderr
        conn = connect(url)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT name, value FROM th_meta ORDER BY name")
                assert list(cur.fetchall()) == [
                    ("dedup_windows", "0"),  # no task with a dedup window yet
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("shard_count", "8"),
                ]
                cur.execute("SELECT COUNT(*) FROM th_tasks")
                assert cur.fetchone() == (0,)
                cur.execute("SELECT COUNT(*) FROM th_members")
                assert cur.fetchone() == (0,)
                # One row per shard, each free.
                cur.execute("SELECT shard, owner, lease_until_ms FROM th_shards ORDER BY shard")
                assert list(cur.fetchall()) == [(shard, None, 0) for shard in range(8)]
        finally:
            conn.close()
    finally:
        conn = connect(mysql_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()


def _json(result: subprocess.CompletedProcess[str], code: int) -> dict[str, object]:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_schedule_get_cancel_round_trip(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = cli_env(database_url)
    at = "2030-01-01T00:00:00.250Z"
    due_ms = 1_893_456_000_250
    schedule = [
        "schedule",
        "--id",
        "job-1",
        "--at",
        at,
        "--routing-key",
        "orders.expire",
        "--payload",
        "héllo",
    ]

    created = _json(run_cli(schedule, env), EXIT_OK)
    assert created == {"id": "job-1", "due_ms": due_ms, "created": True, "outcome": "created"}
    assert table.ids() == {"job-1"}

    # The same task again is a safe retry; different content is a conflict.
    again = {**created, "created": False, "outcome": "exists"}
    assert _json(run_cli(schedule, env), EXIT_OK) == again
    conflict = run_cli([*schedule[:-1], "other"], env)
    assert_clean_error(conflict, EXIT_USAGE, "job-1")

    got = _json(run_cli(["get", "job-1"], env), EXIT_OK)
    assert got == {
        "id": "job-1",
        "due_ms": due_ms,
        "routing_key": "orders.expire",
        "payload": "héllo",
        "state": "scheduled",
    }

    cancelled = _json(run_cli(["cancel", "job-1"], env), EXIT_OK)
    assert cancelled == {"id": "job-1", "result": "cancelled"}
    assert table.count() == 0
    again = _json(run_cli(["cancel", "job-1"], env), EXIT_NOT_FOUND)
    assert again == {"id": "job-1", "result": "not_found"}
    missing = _json(run_cli(["get", "job-1"], env), EXIT_NOT_FOUND)
    assert missing == {"id": "job-1", "result": "not_found"}


def test_schedule_with_generated_id_and_delay(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = cli_env(database_url)
    before = table.query("SELECT UNIX_TIMESTAMP(NOW(3)) * 1000")[0][0]
    created = _json(run_cli(["schedule", "--in", "1h30m"], env), EXIT_OK)
    task_id = created["id"]
    assert isinstance(task_id, str) and len(task_id) == 36  # a UUID
    assert isinstance(created["due_ms"], int)
    assert abs(created["due_ms"] - (int(before) + 5_400_000)) < 60_000
    got = _json(run_cli(["get", task_id], env), EXIT_OK)
    assert got["routing_key"] == "triggerhook.fire"  # default_routing_key
    assert got["payload"] == ""
    assert table.ids() == {task_id}


def test_cancel_of_an_armed_task_is_too_late(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = cli_env(database_url)
    _json(run_cli(["schedule", "--id", "armed", "--in", "1h"], env), EXIT_OK)
    table.mark_firing("armed")  # armed by an engine: committed to firing
    assert _json(run_cli(["get", "armed"], env), EXIT_OK)["state"] == "firing"
    result = _json(run_cli(["cancel", "armed"], env), EXIT_TOO_LATE)
    assert result == {"id": "armed", "result": "too_late"}
    assert table.ids() == {"armed"}


def test_get_and_cancel_validate_the_id(db: tuple[str, TaskTable]) -> None:
    database_url, _ = db
    for command in ("get", "cancel"):
        result = run_cli([command, "bad id!"], cli_env(database_url))
        assert_clean_error(result, EXIT_USAGE, "id:")


def epoch_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).astimezone(UTC).timestamp() * 1000)


def test_reschedule_against_the_database(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = cli_env(database_url)
    _json(run_cli(["schedule", "--id", "mv", "--at", "2030-01-01T00:00:00Z"], env), EXIT_OK)

    due_ms = epoch_ms("2031-01-01T00:00:00.500+00:00")
    moved = _json(run_cli(["reschedule", "mv", "--at", "2031-01-01T00:00:00.5Z"], env), EXIT_OK)
    assert moved == {"id": "mv", "due_ms": due_ms, "result": "rescheduled"}
    assert table.query("SELECT due_ms FROM th_tasks WHERE id = 'mv'") == [(due_ms,)]
    before = now_ms()
    later = _json(run_cli(["reschedule", "mv", "--in", "2h"], env), EXIT_OK)
    assert isinstance(later["due_ms"], int)
    assert before + 7_200_000 <= later["due_ms"] <= now_ms() + 7_200_000 + 1
    assert table.query("SELECT due_ms FROM th_tasks WHERE id = 'mv'") == [(later["due_ms"],)]

    missing = _json(run_cli(["reschedule", "nope", "--in", "5s"], env), EXIT_NOT_FOUND)
    assert missing == {"id": "nope", "result": "not_found"}
    table.mark_firing("mv")  # armed by an engine: committed to firing
    too_late = _json(run_cli(["reschedule", "mv", "--in", "5s"], env), EXIT_TOO_LATE)
    assert too_late == {"id": "mv", "result": "too_late"}
    assert table.query("SELECT due_ms FROM th_tasks WHERE id = 'mv'") == [(later["due_ms"],)]


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        pytest.param(["mv", "--in", "5x"], ("in:", "5x"), id="in"),
        pytest.param(["mv", "--at", "notatime"], ("at:", "notatime"), id="at"),
        pytest.param(["mv", "--at", "10000-01-01T00:00:00Z"], ("at:",), id="at-year-10000"),
        pytest.param(["bad id!", "--in", "5s"], ("id:",), id="id"),
    ],
)
def test_reschedule_rejects_bad_input(
    db: tuple[str, TaskTable], args: list[str], mentions: tuple[str, ...]
) -> None:
    database_url, table = db
    env = cli_env(database_url)
    _json(run_cli(["schedule", "--id", "mv", "--at", "2030-01-01T00:00:00Z"], env), EXIT_OK)
    assert_clean_error(run_cli(["reschedule", *args], env), EXIT_USAGE, *mentions)
    assert table.query("SELECT due_ms FROM th_tasks") == [(epoch_ms("2030-01-01T00:00:00+00:00"),)]


# -- through a daemon's HTTP API (--url / TRIGGERHOOK_URL) ----------------------------------

TOKEN = "cli-test-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def served(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    """A daemon serving the HTTP API (bearer token required) for this module's --url tests."""
    with api_daemon(mysql_url, amqp_url, api_token=TOKEN, default_routing_key=ROUTED) as api:
        yield api
        assert api.daemon.terminate() == 0, api.daemon.tail()
        assert api.daemon.count("Traceback") == 0, api.daemon.tail()


def url_env(api: Api, token: str = TOKEN) -> dict[str, str]:
    """The CLI pointed at the daemon. Its own database_url leads nowhere: only the
    daemon can answer."""
    nowhere = f"mysql+pymysql://root:@127.0.0.1:{closed_port()}/th_unused"
    return {**cli_env(nowhere, api_token=token), "TRIGGERHOOK_URL": api.url}


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def test_url_schedule_get_reschedule_cancel_round_trip(served: Api) -> None:
    env = url_env(served)
    task_id = new_id("url")
    schedule = ["schedule", "--id", task_id, "--at", "2030-01-01T00:00:00.250Z"]
    schedule += ["--routing-key", "orders.expire", "--payload", "héllo"]

    created = _json(run_cli(schedule, env), EXIT_OK)
    due_ms = 1_893_456_000_250
    assert created == {"id": task_id, "due_ms": due_ms, "created": True, "outcome": "created"}
    again = {**created, "created": False, "outcome": "exists"}
    assert _json(run_cli(schedule, env), EXIT_OK) == again
    assert_clean_error(run_cli([*schedule[:-1], "other"], env), EXIT_USAGE, task_id)
    # The same output as in database mode.
    assert _json(run_cli(["get", task_id], env), EXIT_OK) == {
        "id": task_id,
        "due_ms": 1_893_456_000_250,
        "routing_key": "orders.expire",
        "payload": "héllo",
        "state": "scheduled",
    }

    due_ms = epoch_ms("2031-01-01T00:00:00+00:00")
    moved = _json(run_cli(["reschedule", task_id, "--at", "2031-01-01T00:00:00Z"], env), EXIT_OK)
    assert moved == {"id": task_id, "due_ms": due_ms, "result": "rescheduled"}
    assert _json(run_cli(["get", task_id], env), EXIT_OK)["due_ms"] == due_ms
    before = now_ms()
    later = _json(run_cli(["reschedule", task_id, "--in", "1h"], env), EXIT_OK)
    assert isinstance(later["due_ms"], int)
    assert before + 3_600_000 <= later["due_ms"] <= now_ms() + 3_600_000 + 1
    assert _json(run_cli(["get", task_id], env), EXIT_OK)["due_ms"] == later["due_ms"]

    cancelled = _json(run_cli(["cancel", task_id], env), EXIT_OK)
    assert cancelled == {"id": task_id, "result": "cancelled"}
    for command in (["cancel", task_id], ["get", task_id], ["reschedule", task_id, "--in", "5s"]):
        result = _json(run_cli(command, env), EXIT_NOT_FOUND)
        assert result == {"id": task_id, "result": "not_found"}, command


def test_url_and_token_as_flags_and_a_generated_id(served: Api) -> None:
    env = url_env(served, token="")
    del env["TRIGGERHOOK_URL"]
    flags = ["--url", served.url, "--api-token", TOKEN]
    before = now_ms()
    created = _json(run_cli([*flags, "schedule", "--in", "1h30m"], env), EXIT_OK)
    task_id = created["id"]
    assert isinstance(task_id, str) and len(task_id) == 36  # a UUID
    assert created["created"] is True
    assert isinstance(created["due_ms"], int)
    assert before + 5_400_000 <= created["due_ms"] <= now_ms() + 5_400_000 + 1
    got = _json(run_cli([*flags, "get", task_id], env), EXIT_OK)
    assert got["routing_key"] == ROUTED  # the daemon's default_routing_key
    assert _json(run_cli([*flags, "cancel", task_id], env), EXIT_OK)["result"] == "cancelled"


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        pytest.param(["schedule", "--in", "5x"], ("in:", "5x"), id="in-bad-duration"),
        pytest.param(["schedule", "--in", "99999999999999999s"], ("in:",), id="in-past-9999"),
        pytest.param(["schedule", "--at", "notatime"], ("at:", "notatime"), id="at"),
        pytest.param(
            ["schedule", "--in", "5s", "--routing-key", "bad key!"],
            ("routing_key:",),
            id="routing-key",
        ),
        pytest.param(
            ["schedule", "--in", "5s", "--payload", "caf\udce9"],
            ("payload:",),
            id="payload-not-utf8",
        ),
        pytest.param(["schedule", "--id", "bad id!", "--in", "5s"], ("id:",), id="schedule-id"),
        pytest.param(["get", "bad id!"], ("id:",), id="get-id"),
        pytest.param(["cancel", "bad id!"], ("id:",), id="cancel-id"),
        pytest.param(["reschedule", "x", "--at", "notatime"], ("at:",), id="reschedule-at"),
        pytest.param(["reschedule", "x", "--in", "soon"], ("in:",), id="reschedule-in"),
    ],
)
def test_url_mode_rejects_bad_input(
    served: Api, args: list[str], mentions: tuple[str, ...]
) -> None:
    with TaskTable(served.database_url) as table:
        before = table.count()
        assert_clean_error(run_cli(args, url_env(served)), EXIT_USAGE, *mentions)
        assert table.count() == before


def test_url_mode_too_late(served: Api) -> None:
    env = url_env(served)
    task_id = new_id("stuck")
    schedule = ["schedule", "--id", task_id, "--in", "1h"]
    assert _json(run_cli(schedule, env), EXIT_OK)["created"] is True
    with TaskTable(served.database_url) as table:
        table.mark_firing(task_id)  # armed by some instance: committed to firing
    assert _json(run_cli(["get", task_id], env), EXIT_OK)["state"] == "firing"
    too_late = {"id": task_id, "result": "too_late"}
    assert _json(run_cli(["cancel", task_id], env), EXIT_TOO_LATE) == too_late
    assert _json(run_cli(["reschedule", task_id, "--in", "1m"], env), EXIT_TOO_LATE) == too_late


def test_url_mode_failures(served: Api) -> None:
    wrong_token = run_cli(["get", "x"], url_env(served, token="wrong"))
    assert_clean_error(wrong_token, EXIT_USAGE, "bearer token", "api_token")
    no_token = run_cli(["schedule", "--in", "5s"], url_env(served, token=""))
    assert_clean_error(no_token, EXIT_USAGE, "bearer token")

    nobody = {**url_env(served), "TRIGGERHOOK_URL": f"http://127.0.0.1:{closed_port()}"}
    for command in (
        ["schedule", "--in", "5s"],
        ["cancel", "x"],
        ["list"],
        ["cancel", "--tag", "t"],
    ):
        assert_clean_error(run_cli(command, nobody), EXIT_FAILURE, "no answer")
    assert_clean_error(run_cli(["count"], url_env(served, token="wrong")), EXIT_USAGE, "token")

    bad_url = {**url_env(served), "TRIGGERHOOK_URL": "ftp://example.com"}
    assert_clean_error(run_cli(["get", "x"], bad_url), EXIT_USAGE, "--url")


# -- metadata, list, count, bulk cancel: the same over both backends ---------------------------


def _lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    """A command's output of one JSON object per line."""
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert result.stderr == "", result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def metadata_scenario(env: dict[str, str], prefix: str) -> None:
    """Schedule three tasks with metadata, then get, list, count and cancel them
    by filters: the output each mode must print (the same over either backend)."""
    tag = f"{prefix}-tag"
    first = ["schedule", "--id", f"{prefix}:0", "--at", "2030-01-01T00:00:00Z"]
    first += ["--routing-key", "fire.a", "--tag", tag, "--tag", "vip", "--header", "tenant=7"]
    first += ["--header", "attempt=1", "--content-type", "application/json"]
    first += ["--content-encoding", "gzip", "--late", "skip_after_ms=500", "--payload", "{}"]
    second = ["schedule", "--id", f"{prefix}:1", "--at", "2030-01-01T00:00:01Z"]
    second += ["--routing-key", "fire.b", "--tag", tag, "--late", "deadline=2030-01-02T00:00:00Z"]
    third = ["schedule", "--id", f"{prefix}:2", "--at", "1893456002", "--routing-key", "fire.a"]
    third += ["--tag", tag, "--late", "fire"]
    for command in (first, second, third):
        assert _json(run_cli(command, env), EXIT_OK)["created"] is True
    assert _json(run_cli(first, env), EXIT_OK)["created"] is False  # the same task
    assert_clean_error(run_cli([*first[:-2], "--tag", "other"], env), EXIT_USAGE, f"{prefix}:0")

    shown = {
        "id": f"{prefix}:0",
        "due_ms": 1_893_456_000_000,
        "routing_key": "fire.a",
        "state": "scheduled",
        "tags": sorted([tag, "vip"]),
        "content_type": "application/json",
        "content_encoding": "gzip",
        "headers": {"attempt": "1", "tenant": "7"},
        "late": {"skip_after_ms": 500},
    }
    assert _json(run_cli(["get", f"{prefix}:0"], env), EXIT_OK) == {**shown, "payload": "{}"}
    listed = _lines(run_cli(["list", "--tag", tag], env))
    assert listed == [
        shown,
        {
            "id": f"{prefix}:1",
            "due_ms": 1_893_456_001_000,
            "routing_key": "fire.b",
            "state": "scheduled",
            "tags": [tag],
            "late": {"deadline_ms": 1_893_542_400_000},
        },
        {
            "id": f"{prefix}:2",
            "due_ms": 1_893_456_002_000,
            "routing_key": "fire.a",
            "state": "scheduled",
            "tags": [tag],
            "late": "fire",
        },
    ]
    assert _lines(run_cli(["list", "--prefix", prefix, "--limit", "2"], env)) == listed[:2]
    ranged = ["list", "--prefix", prefix, "--due-after", "2030-01-01T00:00:01Z"]
    ranged += ["--due-before", "1893456002", "--state", "scheduled"]
    assert _lines(run_cli(ranged, env)) == [listed[1]]
    assert _json(run_cli(["count", "--tag", tag], env), EXIT_OK) == {"count": 3}
    firing = ["count", "--prefix", prefix, "--state", "firing"]
    assert _json(run_cli(firing, env), EXIT_OK) == {"count": 0}
    bulk = ["cancel", "--tag", tag, "--routing-key", "fire.a"]
    assert _json(run_cli(bulk, env), EXIT_OK) == {"cancelled": 2, "too_late": 0}
    assert _json(run_cli(bulk, env), EXIT_OK) == {"cancelled": 0, "too_late": 0}
    assert _lines(run_cli(["list", "--prefix", prefix], env)) == [listed[1]]
    assert _json(run_cli(["cancel", "--prefix", prefix], env), EXIT_OK) == {
        "cancelled": 1,
        "too_late": 0,
    }
    assert _lines(run_cli(["list", "--prefix", prefix, "--all"], env)) == []


def test_metadata_list_count_and_bulk_cancel_in_database_mode(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    metadata_scenario(cli_env(database_url), "db")
    assert table.count() == 0


def test_metadata_list_count_and_bulk_cancel_in_url_mode(served: Api) -> None:
    prefix = new_id("url")
    metadata_scenario(url_env(served), prefix)
    with TaskTable(served.database_url) as table:
        assert table.query("SELECT COUNT(*) FROM th_tasks WHERE id LIKE %s", (f"{prefix}%",)) == [
            (0,)
        ]


def test_a_bulk_cancel_counts_tasks_being_published_too_late(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    env = cli_env(database_url)
    for n in range(3):
        schedule = ["schedule", "--id", f"bulk-{n}", "--in", "1h", "--tag", "bulk"]
        _json(run_cli(schedule, env), EXIT_OK)
    table.mark_firing("bulk-0")  # armed by an engine: committed to firing
    assert _lines(run_cli(["list", "--state", "firing"], env))[0]["id"] == "bulk-0"
    result = _json(run_cli(["cancel", "--tag", "bulk"], env), EXIT_OK)
    assert result == {"cancelled": 2, "too_late": 1}
    assert table.ids() == {"bulk-0"}


BAD_NEW_INPUT = [
    pytest.param(["schedule", "--in", "5s", "--late", "skip"], ("late:",), id="late"),
    pytest.param(
        ["schedule", "--in", "5s", "--late", "skip_after_ms=soon"],
        ("late.skip_after_ms:",),
        id="late-skip",
    ),
    pytest.param(
        ["schedule", "--in", "5s", "--late", "deadline=someday"],
        ("late.deadline:",),
        id="late-deadline",
    ),
    pytest.param(["schedule", "--in", "5s", "--header", "h"], ("--header", "NAME=VALUE"), id="hdr"),
    pytest.param(
        ["schedule", "--in", "5s", "--header", "x-due-ms=1"], ("headers.x-due-ms:",), id="hdr-x"
    ),
    pytest.param(
        ["schedule", "--in", "5s", "--header", "h=caf\udce9"], ("headers.h:",), id="hdr-utf8"
    ),
    pytest.param(["schedule", "--in", "5s", "--tag", "not ok"], ("tags[0]:",), id="tag"),
    pytest.param(["schedule", "--in", "5s", "--content-type", ""], ("content_type:",), id="ctype"),
    pytest.param(["list", "--prefix", "bad prefix"], ("prefix:",), id="list-prefix"),
    pytest.param(["list", "--due-before", "soon"], ("due_before:",), id="list-due"),
    pytest.param(["count", "--due-after", "soon"], ("due_after:",), id="count-due"),
    pytest.param(["cancel"], ("give a task id",), id="cancel-nothing"),
    pytest.param(["cancel", "x", "--tag", "t"], ("not both",), id="cancel-both"),
    pytest.param(["cancel", "--due-before", "1893456000"], ("only narrow",), id="cancel-due"),
    pytest.param(["cancel", "--tag", "bad tag"], ("tag:",), id="cancel-tag"),
]


@pytest.mark.parametrize(("args", "mentions"), BAD_NEW_INPUT)
def test_bad_metadata_and_filters_in_database_mode(
    db: tuple[str, TaskTable], args: list[str], mentions: tuple[str, ...]
) -> None:
    database_url, table = db
    assert_clean_error(run_cli(args, cli_env(database_url)), EXIT_USAGE, *mentions)
    assert table.count() == 0


@pytest.mark.parametrize(("args", "mentions"), BAD_NEW_INPUT)
def test_bad_metadata_and_filters_in_url_mode(
    served: Api, args: list[str], mentions: tuple[str, ...]
) -> None:
    with TaskTable(served.database_url) as table:
        before = table.count()
        assert_clean_error(run_cli(args, url_env(served)), EXIT_USAGE, *mentions)
        assert table.count() == before


@pytest.mark.parametrize(
    "args",
    [["list", "--limit", "0"], ["list", "--limit", "5", "--all"], ["list", "--state", "done"]],
)
def test_bad_list_flags_are_usage_errors(db: tuple[str, TaskTable], args: list[str]) -> None:
    result = run_cli(args, cli_env(db[0]))
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    # argparse's own: the usage, then one line naming the flag.
    assert result.stderr.startswith("usage: triggerhook list"), result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("triggerhook list: error: argument")


def test_list_into_a_reader_that_stops_early(db: tuple[str, TaskTable]) -> None:
    """``triggerhook list --all | head -1``: more than a pipe holds; the reader
    closes after one line; the CLI stops quietly (no traceback, no message)."""
    database_url, table = db
    with build(Settings(database_url=database_url)) as hook:
        hook.schedule_many([TaskSpec(f"pipe-{n:04}", at_ms=AT_MS + n) for n in range(2000)])
    assert table.count() == 2000
    process = subprocess.Popen(
        triggerhook_command("list", "--all"),
        env=cli_env(database_url),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    first = json.loads(process.stdout.readline())
    process.stdout.close()
    try:
        code = process.wait(timeout=60)
    finally:
        process.kill()
    errors = process.stderr.read()
    process.stderr.close()
    assert first["id"] == "pipe-0000"
    assert code == EXIT_FAILURE, errors
    assert errors == "", errors


AT_MS = 1_893_456_000_250


# -- --help ----------------------------------------------------------------------------------


def _command_paths(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    """Every command the parser knows (``()`` is the top level), found by walking
    its subparsers: a command added later is covered without editing this test."""
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += _command_paths(sub, (*prefix, name))
    return paths


COMMAND_PATHS = _command_paths(_parser())


def test_every_command_is_enumerated() -> None:
    """The walk finds the subcommands, nested ones included (else the test below
    would cover only the top level)."""
    assert {(), ("db",), ("db", "init"), ("run",), ("schedule",), ("status",)} <= set(COMMAND_PATHS)


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "top-level")
def test_help_works_for_every_command(path: tuple[str, ...]) -> None:
    result = run_cli([*path, "--help"], base_env())
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr == "", result.stderr
    assert result.stdout.startswith(" ".join(("usage: triggerhook", *path))), result.stdout
    if not path:
        # A default with a '%' is shown as it is (not %-formatted, not doubled).
        assert "amqp://guest:guest@127.0.0.1:5672/%2F" in result.stdout, result.stdout
        assert "%%" not in result.stdout


def test_help_of_the_installed_script() -> None:
    """The ``triggerhook`` console script (as installed in the venv) as well."""
    script = Path(sys.executable).parent / "triggerhook"
    assert script.exists(), script
    result = subprocess.run(
        [str(script), "--help"],
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.stderr == "", result.stderr
    assert result.stdout.startswith("usage: triggerhook"), result.stdout


# -- series: the same over both backends -----------------------------------------------------------

BERLIN_9H_2030_MS = 1_893_484_800_000  # Tuesday 2030-01-01 09:00 in Berlin (08:00 UTC)


def series_scenario(env: dict[str, str], prefix: str) -> None:
    """Schedule an untimed every series and a timed cron one, then get, list,
    count and cancel them: the output each mode must print."""
    tag = f"{prefix}-series"
    every = ["schedule", "--id", f"{prefix}:every", "--every", "PT90M", "--tag", tag]
    every += ["--until", "2030-01-01T00:00:00Z", "--routing-key", "fire.s"]
    cron = ["schedule", "--id", f"{prefix}:cron", "--cron", "0 9 * * 1-5", "--tag", tag]
    cron += [
        "--timezone",
        "Europe/Berlin",
        "--at",
        "2030-01-01T00:00:00Z",
        "--routing-key",
        "fire.s",
    ]
    before = now_ms()
    made = _json(run_cli(every, env), EXIT_OK)
    due_ms = made["due_ms"]
    assert isinstance(due_ms, int) and made["created"] is True
    assert before + 5_400_000 <= due_ms <= now_ms() + 5_400_000 + 1  # one every from now
    assert _json(run_cli(cron, env), EXIT_OK) == {
        "id": f"{prefix}:cron",
        "due_ms": BERLIN_9H_2030_MS,  # the first match at or after --at
        "created": True,
        "outcome": "created",
    }
    assert _json(run_cli(cron, env), EXIT_OK)["created"] is False  # the same series
    other = [*cron[:4], "0 10 * * 1-5", *cron[5:]]
    assert_clean_error(run_cli(other, env), EXIT_USAGE, f"{prefix}:cron")

    shown_every = {
        "id": f"{prefix}:every",
        "due_ms": due_ms,
        "routing_key": "fire.s",
        "state": "scheduled",
        "tags": [tag],
        "every": "PT1H30M",
        "until_ms": 1_893_456_000_000,
        "occurrence": 1,
    }
    shown_cron = {
        **shown_every,
        "id": f"{prefix}:cron",
        "due_ms": BERLIN_9H_2030_MS,
        "cron": "0 9 * * 1-5",
        "timezone": "Europe/Berlin",
        "occurrence": 1,
    }
    del shown_cron["every"], shown_cron["until_ms"]
    got = _json(run_cli(["get", f"{prefix}:every"], env), EXIT_OK)
    assert got == {**shown_every, "payload": ""}
    assert _lines(run_cli(["list", "--tag", tag], env)) == [shown_every, shown_cron]
    assert _json(run_cli(["count", "--tag", tag], env), EXIT_OK) == {"count": 2}
    assert _json(run_cli(["cancel", "--tag", tag], env), EXIT_OK) == {
        "cancelled": 2,
        "too_late": 0,
    }
    assert _lines(run_cli(["list", "--tag", tag], env)) == []


def test_series_in_database_mode(db: tuple[str, TaskTable]) -> None:
    database_url, table = db
    series_scenario(cli_env(database_url), "db")
    assert table.count() == 0


def test_series_in_url_mode(served: Api) -> None:
    prefix = new_id("url")
    series_scenario(url_env(served), prefix)
    with TaskTable(served.database_url) as table:
        assert table.query("SELECT COUNT(*) FROM th_tasks WHERE id LIKE %s", (f"{prefix}%",)) == [
            (0,)
        ]


BAD_SERIES_INPUT = [
    pytest.param(["schedule"], ("at:", "--every or --cron"), id="no-time"),
    pytest.param(["schedule", "--until", "2030-01-01"], ("at:",), id="until-alone"),
    pytest.param(["schedule", "--every", "P1M"], ("every:", "cron"), id="every-months"),
    pytest.param(["schedule", "--every", "PT0.5S"], ("every:", "PT1S"), id="every-short"),
    pytest.param(["schedule", "--cron", "61 * * * *"], ("cron:",), id="cron-minute"),
    pytest.param(["schedule", "--cron", "* * * *"], ("cron:", "5 fields"), id="cron-fields"),
    pytest.param(
        ["schedule", "--cron", "* * * * *", "--timezone", "Mars/Olympus"],
        ("timezone:", "Mars/Olympus"),
        id="timezone",
    ),
    pytest.param(
        ["schedule", "--every", "PT1S", "--timezone", "UTC"], ("timezone:",), id="tz-every"
    ),
    pytest.param(["schedule", "--every", "PT1S", "--until", "soon"], ("until:",), id="until"),
    pytest.param(
        ["schedule", "--every", "PT1M", "--at", "2030-01-02", "--until", "2030-01-01"],
        ("until:",),
        id="until-before-first",
    ),
    pytest.param(
        ["schedule", "--at", "2030-01-01", "--until", "2030-01-02"], ("until:",), id="one-off"
    ),
]


@pytest.mark.parametrize(("args", "mentions"), BAD_SERIES_INPUT)
def test_bad_series_in_database_mode(
    db: tuple[str, TaskTable], args: list[str], mentions: tuple[str, ...]
) -> None:
    database_url, table = db
    assert_clean_error(run_cli(args, cli_env(database_url)), EXIT_USAGE, *mentions)
    assert table.count() == 0


@pytest.mark.parametrize(("args", "mentions"), BAD_SERIES_INPUT)
def test_bad_series_in_url_mode(served: Api, args: list[str], mentions: tuple[str, ...]) -> None:
    with TaskTable(served.database_url) as table:
        before = table.count()
        assert_clean_error(run_cli(args, url_env(served)), EXIT_USAGE, *mentions)
        assert table.count() == before


def test_every_and_cron_exclude_each_other(db: tuple[str, TaskTable]) -> None:
    args = ["schedule", "--every", "PT1M", "--cron", "* * * * *"]
    result = run_cli(args, cli_env(db[0]))
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert "not allowed with argument" in result.stderr.strip().splitlines()[-1]
