"""The upgrade of a version 5 database to version 6 (``th_tasks.throttled``:
a row a rate limit postponed, R8p, is flagged for ``get``), with ``triggerhook
db upgrade`` as a user runs it, on the real MariaDB.

The version 5 database is built as release 5's ``db init`` made it: its
schema.sql (the form before this version; its comments left out), the shard
rows and count, and Alembic's record at 0005. After the upgrade it has the
tables, columns and keys a new database of the head version has; every row is
kept, none throttled (a row release 5 postponed waits as before, shown by its
``fire_ms``); the table was not rebuilt (the column is added in place: its
InnoDB table id is unchanged); a second upgrade changes nothing; and an upgrade
that stopped after to_v6's ALTER (before it wrote version 6) resumes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from support.daemon import base_env, run_cli, settings_env
from support.mysql import connect, execute, query
from support.names import unique_name

from triggerhook.domain.arming import shard_of
from triggerhook.domain.task import TaskState
from triggerhook.store.mysql import MySQLStore
from triggerhook.store.mysql import alembic as revisions
from triggerhook.store.mysql.schema import schema_status
from triggerhook.store.mysql.sql import SCHEMA_VERSION

EXIT_OK, EXIT_BEHIND = 0, 1
HEAD, HEAD_REVISION = SCHEMA_VERSION, f"{SCHEMA_VERSION:04d}"
SHARDS = 64
DEFAULT_RK = "default.rk"

# Release 5's schema.sql (triggerhook/schema.sql before version 6), its comments left out.
_V5_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS th_tasks (
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    shard          SMALLINT     NOT NULL,
    rev            BIGINT       NOT NULL DEFAULT 0,
    gen            BIGINT       NOT NULL DEFAULT 0,
    fire_ms        BIGINT       NOT NULL,
    due_ms         BIGINT       NOT NULL,
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    payload        MEDIUMBLOB   NULL,
    meta           BLOB         NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    KEY th_tasks_fire (shard, fire_ms, id),
    KEY th_tasks_gen (shard, gen, fire_ms, id),
    KEY th_tasks_listed (due_ms, id, routing_key),
    KEY th_tasks_key (routing_key, due_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS th_task_tags (
    tag            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    due_ms         BIGINT       NOT NULL,
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    PRIMARY KEY (tag, due_ms, id),
    KEY th_task_tags_id (id),
    CONSTRAINT th_task_tags_task FOREIGN KEY (id) REFERENCES th_tasks (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS th_shards (
    shard          SMALLINT     NOT NULL PRIMARY KEY,
    owner          VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    epoch          BIGINT       NOT NULL DEFAULT 0,
    lease_until_ms BIGINT       NOT NULL DEFAULT 0,
    armed_ms       BIGINT       NOT NULL DEFAULT -4611686018427387904,
    armed_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    arm_gen        BIGINT       NOT NULL DEFAULT 1,
    took_ms        BIGINT       NOT NULL DEFAULT -4611686018427387904,
    took_id        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    took_gen       BIGINT       NOT NULL DEFAULT 1
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS th_members (
    instance           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    token              BIGINT       NOT NULL,
    heartbeat_until_ms BIGINT       NOT NULL,
    host               VARCHAR(255) NOT NULL DEFAULT '',
    pid                INT          NOT NULL DEFAULT 0,
    started_at         TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS th_fired (
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    shard          SMALLINT     NOT NULL,
    rev            BIGINT       NOT NULL,
    fired_ms       BIGINT       NOT NULL,
    expires_ms     BIGINT       NOT NULL,
    KEY th_fired_expiry (shard, expires_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS th_outbox (
    seq            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    rev            BIGINT       NOT NULL,
    due_ms         BIGINT       NOT NULL,
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    payload        MEDIUMBLOB   NULL,
    meta           BLOB         NULL,
    on_conflict    VARCHAR(16)  CHARACTER SET ascii NOT NULL DEFAULT 'error',
    created_ms     BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS th_meta (
    name  VARCHAR(64)  CHARACTER SET ascii NOT NULL PRIMARY KEY,
    value VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """INSERT INTO th_meta (name, value) VALUES ('schema_version', '5')
    ON DUPLICATE KEY UPDATE name = name""",
    """INSERT INTO th_meta (name, value) VALUES ('dedup_windows', '0')
    ON DUPLICATE KEY UPDATE name = name""",
)

# What release 5's db init wrote besides schema.sql: the shard count and rows.
_V5_SHARDS = (
    f"INSERT INTO th_meta (name, value) VALUES ('shard_count', '{SHARDS}')",
    "INSERT INTO th_shards (shard) VALUES " + ", ".join(f"({s})" for s in range(SHARDS)),
)
_INSERT_V5 = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, meta,"
    " attempts) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
# Every column version 5 had, to compare the rows before and after.
_V5_ROWS = (
    "SELECT id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, meta, attempts,"
    " created_at FROM th_tasks ORDER BY id"
)
# to_v6's ALTER (store/mysql/migrations.py), as an upgrade that stopped after it left it.
_V6_ALTER = "ALTER TABLE th_tasks ADD COLUMN throttled TINYINT NOT NULL DEFAULT 0"

COUNT = 2000
BASE_MS = 1_800_000_000_000


def _v5_row(n: int) -> tuple[Any, ...]:
    """Due times with ties, some rows without routing key, payload or metadata;
    some waiting for the retry of a failed delivery (attempts), some as release
    5 postponed them (later fire_ms, no attempt)."""
    task_id = f"v5-{n:04d}"
    due = BASE_MS + (n * 7919) % 500 * 1000
    waits = n % 7 == 3
    fire = due + 65_000 if waits else due
    attempts = 2 if waits and n % 2 else 0
    routing_key = None if n % 10 == 0 else f"v5.rk.{n % 3}"
    payload = None if n % 13 == 0 else b"p%d\x00\xff" % n
    meta = None if n % 4 else b'{"tags":["v5"]}'
    return (
        task_id,
        shard_of(task_id, SHARDS),
        1000 + n,
        1,
        fire,
        due,
        routing_key,
        payload,
        meta,
        attempts,
    )


def _cli(url: str, *command: str) -> subprocess.CompletedProcess[str]:
    return run_cli(command, {**base_env(), **settings_env(database_url=url)})


def _out(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def _upgrade(url: str) -> subprocess.CompletedProcess[str]:
    result = _cli(url, "db", "upgrade")
    assert (result.returncode, result.stdout) == (EXIT_OK, f"schema version {HEAD} ready\n"), _out(
        result
    )
    assert "Traceback" not in _out(result)
    return result


def _records(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(alembic_version's rows, th_meta's rows)."""
    return (
        query(url, "SELECT version_num FROM alembic_version"),
        query(url, "SELECT name, value FROM th_meta ORDER BY name"),
    )


def _shape(url: str) -> dict[str, Any]:
    """The tables, columns (in their order) and keys of the database."""
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
                "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE,"
                " COLUMN_DEFAULT, CHARACTER_SET_NAME, COLLATION_NAME"
                f" FROM information_schema.COLUMNS {where}",
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


def _table_id(url: str) -> int:
    """th_tasks' InnoDB table id: a rebuild (a copy, or an in-place rebuild)
    makes a new table, with a new id; an instant ADD COLUMN keeps it."""
    name = url.rsplit("/", 1)[1] + "/th_tasks"
    try:  # MariaDB
        rows = query(
            url,
            "SELECT TABLE_ID FROM information_schema.INNODB_SYS_TABLES WHERE NAME = %s",
            (name,),
        )
    except pymysql.err.MySQLError:  # MySQL 8
        rows = query(
            url, "SELECT TABLE_ID FROM information_schema.INNODB_TABLES WHERE NAME = %s", (name,)
        )
    [(table_id,)] = rows
    return int(table_id)


def _drop(mysql_url: str, name: str) -> None:
    execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def v5_url(mysql_url: str) -> Iterator[str]:
    """A database as release 5's `db init` made it, with COUNT tasks."""
    name = unique_name("th_test_v5_")
    execute(mysql_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    try:
        url = f"{mysql_url}/{name}"
        execute(url, *_V5_SCHEMA, *_V5_SHARDS)
        with revisions.migrator(url, SHARDS) as db:
            db.stamp("0005")  # release 5's db init recorded its revision
        conn = connect(url)
        try:
            with conn.cursor() as cur:
                cur.executemany(_INSERT_V5, [_v5_row(n) for n in range(COUNT)])
        finally:
            conn.close()
        yield url
    finally:
        _drop(mysql_url, name)


@pytest.fixture(scope="module")
def fresh_shape(mysql_url: str) -> Iterator[dict[str, Any]]:
    """The shape of a database `db init` of this release makes (the head version)."""
    name = unique_name("th_test_v6_")
    url = f"{mysql_url}/{name}"
    try:
        result = _cli(url, "db", "init")
        assert result.returncode == EXIT_OK, _out(result)
        yield _shape(url)
    finally:
        _drop(mysql_url, name)


def _check_v6(url: str, fresh: dict[str, Any], rows_before: list[tuple[Any, ...]]) -> None:
    """``url`` is at the head version, shaped as a new database, its v5 rows
    kept, none throttled."""
    status = schema_status(url)
    assert (status.state, status.version, status.revision) == ("current", HEAD, HEAD_REVISION)
    assert _records(url) == (
        [(HEAD_REVISION,)],
        [("dedup_windows", "0"), ("schema_version", str(HEAD)), ("shard_count", str(SHARDS))],
    )
    columns = [r[0] for r in query(url, "SHOW COLUMNS FROM th_tasks")]
    assert columns[-1] == "throttled"  # last: added in place
    assert _shape(url) == fresh  # what `db init` creates
    assert query(url, _V5_ROWS) == rows_before
    assert query(url, "SELECT throttled, COUNT(*) FROM th_tasks GROUP BY throttled") == [(0, COUNT)]


def test_a_version_5_database_upgrades_to_version_6_in_place(
    v5_url: str, fresh_shape: dict[str, Any]
) -> None:
    name = v5_url.rsplit("/", 1)[1]
    status = _cli(v5_url, "db", "status")
    assert (status.returncode, status.stdout.strip()) == (
        EXIT_BEHIND,
        f"database {name!r}: schema version 5 (revision 0005), behind head {HEAD_REVISION} "
        f"(schema version {HEAD}): run `triggerhook db upgrade` with every instance stopped",
    )
    rows_before = query(v5_url, _V5_ROWS)
    assert len(rows_before) == COUNT
    table_id = _table_id(v5_url)

    result = _upgrade(v5_url)
    assert "revision 0006 applied" in result.stderr, result.stderr
    assert "revision 0005" not in result.stderr, result.stderr  # recorded already
    assert _table_id(v5_url) == table_id  # not rebuilt: the column was added in place
    _check_v6(v5_url, fresh_shape, rows_before)

    # get: none throttled; a row waiting past its due time (a retry, or one
    # release 5 postponed) says when it goes.
    store = MySQLStore(v5_url, DEFAULT_RK)
    try:
        store.check_schema()
        for row in rows_before[:50]:
            info = store.get(row[0])
            assert info is not None
            assert (info.state, info.throttled) == (TaskState.SCHEDULED, False)
            assert info.fire_ms == (row[4] if row[4] > row[5] else None)
    finally:
        store.close()


def test_a_second_upgrade_changes_nothing(v5_url: str, fresh_shape: dict[str, Any]) -> None:
    rows_before = query(v5_url, _V5_ROWS)
    _upgrade(v5_url)
    shape, records = _shape(v5_url), _records(v5_url)
    again = _upgrade(v5_url)
    assert "applied" not in again.stderr and "recorded" not in again.stderr, again.stderr
    assert (_shape(v5_url), _records(v5_url)) == (shape, records)
    _check_v6(v5_url, fresh_shape, rows_before)


def test_an_interrupted_upgrade_resumes(v5_url: str, fresh_shape: dict[str, Any]) -> None:
    rows_before = query(v5_url, _V5_ROWS)
    execute(v5_url, _V6_ALTER)  # stopped after the ALTER, before writing version 6
    assert _records(v5_url)[0] == [("0005",)]
    assert schema_status(v5_url).state == "behind"
    result = _upgrade(v5_url)
    assert "revision 0006 applied" in result.stderr, result.stderr
    _check_v6(v5_url, fresh_shape, rows_before)
