"""``triggerhook db init | upgrade | status`` as a user runs them (``python -m
triggerhook``), on the real MariaDB: a database that does not exist, an empty
one, one of version 1 built by hand (the schema release 1 made), one made
before Alembic at the current version, one whose upgrade stopped between its
two records, one newer than this release; re-runs change nothing; a daemon
refuses a database behind head. And the TLS parameters of database_url: a
missing file is a clean error naming it, and a server without TLS is refused
rather than spoken to in plain text (no TLS server is available here, so a
successful TLS session is not tested).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import certifi
import pytest
from support.amqp import AmqpNames
from support.daemon import DaemonGroup, base_env, daemon_env, run_cli, settings_env
from support.mysql import execute, old_schema, query, with_driver
from support.names import unique_name

from triggerhook.domain.arming import shard_of
from triggerhook.store.mysql.schema import init_schema
from triggerhook.store.mysql.sql import SCHEMA_VERSION

EXIT_OK, EXIT_BEHIND, EXIT_USAGE = 0, 1, 2
SHARDS = 64
TABLES = (
    "th_tasks",
    "th_task_tags",
    "th_shards",
    "th_members",
    "th_meta",
    "th_fired",
    "th_outbox",
    "alembic_version",
)
HEAD, HEAD_REV, PREV_REV = SCHEMA_VERSION, f"{SCHEMA_VERSION:04d}", f"{SCHEMA_VERSION - 1:04d}"


def meta_rows(shard_count: str) -> list[tuple[str, str]]:
    """th_meta as `db init` (or an upgrade to head) leaves it, by name."""
    return [("dedup_windows", "0"), ("schema_version", str(HEAD)), ("shard_count", shard_count)]


_V1_SCHEMA = old_schema(1)  # release 1's schema.sql, in its last form
_V1_ROWS = (
    "INSERT INTO th_tasks (id, due_ms, routing_key, payload, claimed_by, claim_until_ms,"
    " firing, rev) VALUES"
    " ('pending', 2000000000000, NULL, 'p', NULL, 0, 0, 11),"
    " ('claimed', 2000000000001, 'rk.a', 'c', 'old-1', 2000000030000, 0, 12),"
    " ('armed', 1700000000000, 'rk.b', NULL, 'old-1', 2000000030000, 1, 13)"
)


def _cli(url: str, *command: str, **settings: int | str) -> subprocess.CompletedProcess[str]:
    env = {**base_env(), **settings_env(database_url=url, **settings)}
    return run_cli(command, env)


def _out(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def _refused(result: subprocess.CompletedProcess[str], code: int, *mentions: str) -> str:
    """Exit ``code`` with one clean error line (logs at WARNING) mentioning each of ``mentions``."""
    assert result.returncode == code, _out(result)
    assert "Traceback" not in _out(result), _out(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("triggerhook: error: "), _out(result)
    for mention in mentions:
        assert mention in lines[0], _out(result)
    return lines[0]


def _status(url: str) -> tuple[int, str]:
    result = _cli(url, "db", "status")
    assert "Traceback" not in _out(result), _out(result)
    return result.returncode, result.stdout.strip()


def _records(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(alembic_version's rows, th_meta's rows)."""
    return (
        query(url, "SELECT version_num FROM alembic_version"),
        query(url, "SELECT name, value FROM th_meta ORDER BY name"),
    )


def _shape(url: str) -> dict[str, Any]:
    """The tables, columns and keys of the database (not the order of columns)."""
    where = "WHERE TABLE_SCHEMA = DATABASE()"
    return {
        "tables": set(
            query(
                url,
                "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION"
                f" FROM information_schema.TABLES {where}",
            )
        ),
        "columns": set(
            query(
                url,
                "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT,"
                f" CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS {where}",
            )
        ),
        "keys": set(
            query(
                url,
                "SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME"
                f" FROM information_schema.STATISTICS {where}",
            )
        ),
    }


@pytest.fixture
def new_url(mysql_url: str) -> Iterator[str]:
    """The URL of a database that does not exist (yet); dropped after the test."""
    name = unique_name("th_test_new_")
    try:
        yield f"{mysql_url}/{name}"
    finally:
        execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def v1_url(mysql_url: str) -> Iterator[str]:
    """A database as release 1's `db init` made it, with three tasks (no alembic_version)."""
    name = unique_name("th_test_v1_")
    execute(mysql_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    try:
        url = f"{mysql_url}/{name}"
        execute(url, *_V1_SCHEMA, _V1_ROWS)
        yield url
    finally:
        execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")


def test_a_new_database_created_by_init_then_at_head(new_url: str) -> None:
    name = new_url.rsplit("/", 1)[1]
    assert _status(new_url) == (
        EXIT_BEHIND,
        f"database {name!r} does not exist: run `triggerhook db init`",
    )
    _refused(
        _cli(new_url, "db", "upgrade", log_level="WARNING"),
        EXIT_USAGE,
        name,
        "does not exist",
        "`triggerhook db init`",
    )
    assert _status(new_url)[0] == EXIT_BEHIND  # upgrade created nothing

    for _ in range(2):  # idempotent
        result = _cli(new_url, "db", "init", shard_count=8)
        assert result.returncode == EXIT_OK, _out(result)
        assert result.stdout == f"schema version {HEAD} ready\n"
        assert "Traceback" not in result.stderr
        assert _status(new_url) == (
            EXIT_OK,
            f"database {name!r}: schema version {HEAD} (revision {HEAD_REV}), at head",
        )
        assert _records(new_url) == ([(HEAD_REV,)], meta_rows("8"))
    result = _cli(new_url, "db", "upgrade")
    assert (result.returncode, result.stdout) == (EXIT_OK, f"schema version {HEAD} ready\n"), _out(
        result
    )
    assert "applied" not in result.stderr and "recorded" not in result.stderr
    assert query(new_url, "SELECT COUNT(*) FROM th_shards") == [(8,)]


def test_an_empty_database_is_left_to_init(database_url: str) -> None:
    name = database_url.rsplit("/", 1)[1]
    assert _status(database_url) == (
        EXIT_BEHIND,
        f"database {name!r} has no triggerhook schema: run `triggerhook db init`",
    )
    _refused(
        _cli(database_url, "db", "upgrade", log_level="WARNING"),
        EXIT_USAGE,
        "no triggerhook schema",
        "`triggerhook db init`",
    )
    assert query(database_url, "SHOW TABLES") == []


def test_a_version_1_database_is_upgraded_to_what_init_creates(v1_url: str, new_url: str) -> None:
    name = v1_url.rsplit("/", 1)[1]
    assert _status(v1_url) == (
        EXIT_BEHIND,
        f"database {name!r}: schema version 1 (revision none), behind head {HEAD_REV} (schema "
        f"version {HEAD}): run `triggerhook db upgrade` with every instance stopped",
    )
    result = _cli(v1_url, "db", "upgrade")
    assert (result.returncode, result.stdout) == (EXIT_OK, f"schema version {HEAD} ready\n"), _out(
        result
    )
    said = (
        "revision 0001 recorded (stamp)",
        "revision 0002 applied",
        "revision 0003 applied",
        "revision 0004 applied",
        "revision 0005 applied",
        "revision 0006 applied",
    )
    for line in said:
        assert line in result.stderr, result.stderr
    where = [result.stderr.index(line) for line in said]
    assert where == sorted(where), result.stderr  # in order: 0004 after 0003, and on
    assert _status(v1_url) == (
        EXIT_OK,
        f"database {name!r}: schema version {HEAD} (revision {HEAD_REV}), at head",
    )
    assert _records(v1_url) == ([(HEAD_REV,)], meta_rows(str(SHARDS)))

    # The tasks are all there, sharded; the one version 1 had armed stays armed (gen 0).
    rows = query(
        v1_url,
        "SELECT id, due_ms, payload, rev, attempts, shard, fire_ms, gen FROM th_tasks ORDER BY id",
    )
    assert rows == [
        ("armed", 1700000000000, None, 13, 0, shard_of("armed", SHARDS), 1700000000000, 0),
        ("claimed", 2000000000001, b"c", 12, 0, shard_of("claimed", SHARDS), 2000000000001, 1),
        ("pending", 2000000000000, b"p", 11, 0, shard_of("pending", SHARDS), 2000000000000, 1),
    ]
    # ... none with metadata or tags (version 4 adds them empty).
    assert query(v1_url, "SELECT COUNT(*) FROM th_tasks WHERE meta IS NOT NULL") == [(0,)]
    assert query(v1_url, "SELECT COUNT(*) FROM th_task_tags") == [(0,)]
    # ... in the tables, columns and keys `db init` creates.
    assert _cli(new_url, "db", "init").returncode == EXIT_OK
    assert _shape(v1_url) == _shape(new_url)

    again = _cli(v1_url, "db", "upgrade")
    assert again.returncode == EXIT_OK, _out(again)
    assert "applied" not in again.stderr and "recorded" not in again.stderr
    assert query(v1_url, "SELECT COUNT(*) FROM th_tasks") == [(3,)]


def test_init_upgrades_an_old_database_too(v1_url: str) -> None:
    result = _cli(v1_url, "db", "init")
    assert (result.returncode, result.stdout) == (EXIT_OK, f"schema version {HEAD} ready\n"), _out(
        result
    )
    assert "revision 0003 applied" in result.stderr
    assert "revision 0004 applied" in result.stderr
    assert result.stderr.index("revision 0003") < result.stderr.index("revision 0004")
    assert _records(v1_url)[0] == [(HEAD_REV,)]


def test_a_current_database_made_before_alembic_is_recorded(database_url: str) -> None:
    init_schema(database_url)
    execute(database_url, "DROP TABLE alembic_version")  # as the release before made it
    name = database_url.rsplit("/", 1)[1]
    assert _status(database_url) == (
        EXIT_OK,
        f"database {name!r}: schema version {HEAD} (revision none), at head; "
        "`triggerhook db upgrade` records it",
    )
    result = _cli(database_url, "db", "upgrade")
    assert result.returncode == EXIT_OK, _out(result)
    assert f"revision {HEAD_REV} recorded (stamp)" in result.stderr
    assert "applied" not in result.stderr
    assert _records(database_url)[0] == [(HEAD_REV,)]


def test_the_schema_version_wins_over_alembic_version(database_url: str) -> None:
    """An upgrade stopped after the last migration wrote its version, before
    Alembic recorded its revision."""
    init_schema(database_url)
    execute(database_url, "UPDATE alembic_version SET version_num = %s", params=(PREV_REV,))
    result = _cli(database_url, "db", "upgrade")
    assert result.returncode == EXIT_OK, _out(result)
    said = f"alembic_version says {PREV_REV}, th_meta.schema_version {HEAD}: recording {HEAD_REV}"
    assert said in result.stderr
    assert "applied" not in result.stderr  # the head's migration is not run again
    assert _records(database_url)[0] == [(HEAD_REV,)]


def test_a_database_newer_than_this_release_is_refused(database_url: str) -> None:
    init_schema(database_url)
    newer = HEAD + 1
    execute(
        database_url,
        "UPDATE th_meta SET value = %s WHERE name = 'schema_version'",
        params=(str(newer),),
    )
    before = _records(database_url)
    code, said = _status(database_url)
    assert code == EXIT_USAGE
    assert f"schema version {newer} (revision {HEAD_REV}), newer than this release's {HEAD}" in said
    for command in ("upgrade", "init"):
        _refused(
            _cli(database_url, "db", command, log_level="WARNING"),
            EXIT_USAGE,
            f"schema version {newer}, newer than this release's {HEAD}",
        )
    assert _records(database_url) == before


def test_a_daemon_refuses_a_database_behind_head(
    v1_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    daemon = daemons.start(daemon_env(v1_url, amqp_url, amqp_names.exchange, "behind"))
    assert daemon.wait_exit(30) == EXIT_USAGE
    output = "\n".join(daemon.lines)
    assert "Traceback" not in output, output
    assert f"has schema version 1, expected {HEAD}" in output, output
    assert "stop every instance, then run `triggerhook db upgrade`" in output, output
    assert query(v1_url, "SELECT value FROM th_meta WHERE name = 'schema_version'") == [("1",)]


# -- TLS parameters ------------------------------------------------------------------------


@pytest.mark.parametrize("command", [("db", "init"), ("db", "status"), ("run",)])
def test_a_missing_tls_file_is_a_clean_error_naming_it(
    new_url: str, command: tuple[str, ...]
) -> None:
    url = f"{new_url}?ssl_ca=/nonexistent/ca.pem"
    _refused(
        _cli(url, *command, log_level="WARNING"),
        EXIT_USAGE,
        "database_url: ssl_ca: no such file '/nonexistent/ca.pem'",
    )
    assert _status(new_url)[0] == EXIT_BEHIND  # nothing was created


@pytest.mark.parametrize("driver", ["mysqldb", "pymysql"])
@pytest.mark.parametrize("tls", [f"ssl_ca={certifi.where()}", "ssl_verify_cert=false"])
def test_tls_asked_of_a_server_without_it_is_refused(
    database_url: str, driver: str, tls: str
) -> None:
    """The local MariaDB has TLS off (have_ssl DISABLED): with any TLS parameter,
    either driver must refuse it rather than go on unencrypted (and a server that
    did TLS would have to present a certificate of certifi's CAs, which none here
    does)."""
    plain = _cli(database_url, "db", "init")
    assert plain.returncode == EXIT_OK, _out(plain)
    url = with_driver(database_url, driver)
    line = _refused(
        _cli(f"{url}?{tls}", "db", "status", log_level="WARNING"),
        EXIT_BEHIND,
        "database unavailable",
    )
    assert "SSL" in line or "TLS" in line, line


def test_an_unknown_url_parameter_is_a_clean_error(database_url: str) -> None:
    _refused(
        _cli(f"{database_url}?sslmode=require", "db", "init", log_level="WARNING"),
        EXIT_USAGE,
        "unknown parameter 'sslmode'",
    )
