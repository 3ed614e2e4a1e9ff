"""The upgrade of a version 3 database (shards) to version 4 (task metadata and
listing: ``th_tasks.meta``, ``th_task_tags``, the listing keys), and on to the
head (5: the dedup window's ``th_fired``, the outbox's ``th_outbox``; 6:
``th_tasks.throttled``), with ``triggerhook db upgrade`` as a user runs it,
on the real MariaDB.

The version 3 database is built as release 3's ``db init`` made it: its
schema.sql (the form before commit 67bdedb), the shard rows and count, and
Alembic's record at 0003. After the upgrade it has the tables, columns and keys
a new database of the head version has; every row is kept, without metadata, and
listed in due order; a second upgrade changes nothing; and an upgrade that
stopped after to_v4's ALTER (before it wrote version 4) resumes.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from support.daemon import base_env, run_cli, settings_env
from support.mysql import MARK_FIRING, connect, execute, query
from support.names import unique_name

from triggerhook.domain.arming import shard_of
from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.meta import NO_META
from triggerhook.domain.task import TaskState
from triggerhook.store.mysql import MySQLStore
from triggerhook.store.mysql import alembic as revisions
from triggerhook.store.mysql.schema import schema_status
from triggerhook.store.mysql.sql import SCHEMA_VERSION

EXIT_OK, EXIT_BEHIND = 0, 1
HEAD, HEAD_REVISION = SCHEMA_VERSION, f"{SCHEMA_VERSION:04d}"
SHARDS = 64
DEFAULT_RK = "default.rk"

# schema.sql of version 3 (git show 67bdedb~1:triggerhook/schema.sql), its comments left out.
_V3_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS th_tasks (
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    shard          SMALLINT     NOT NULL,
    rev            BIGINT       NOT NULL DEFAULT 0,
    gen            BIGINT       NOT NULL DEFAULT 0,
    fire_ms        BIGINT       NOT NULL,
    due_ms         BIGINT       NOT NULL,
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    payload        MEDIUMBLOB   NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    KEY th_tasks_fire (shard, fire_ms, id),
    KEY th_tasks_gen (shard, gen, fire_ms, id),
    KEY th_tasks_due_ms (due_ms)
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
    """CREATE TABLE IF NOT EXISTS th_meta (
    name  VARCHAR(64)  CHARACTER SET ascii NOT NULL PRIMARY KEY,
    value VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """INSERT INTO th_meta (name, value) VALUES ('schema_version', '3')
    ON DUPLICATE KEY UPDATE name = name""",
)
# What release 3's db init wrote besides schema.sql: the shard count and rows.
_V3_SHARDS = (
    f"INSERT INTO th_meta (name, value) VALUES ('shard_count', '{SHARDS}')",
    "INSERT INTO th_shards (shard) VALUES " + ", ".join(f"({s})" for s in range(SHARDS)),
)
_INSERT_V3 = (
    "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, attempts)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
# Every column version 3 had, to compare the rows before and after.
_V3_ROWS = (
    "SELECT id, shard, rev, gen, fire_ms, due_ms, routing_key, payload, attempts, created_at"
    " FROM th_tasks ORDER BY id"
)
# to_v4's ALTER (store/mysql/migrations.py), as an upgrade that stopped after it left it.
_V4_ALTER = (
    "ALTER TABLE th_tasks ADD COLUMN meta BLOB NULL AFTER payload,"
    " ADD KEY th_tasks_listed (due_ms, id, routing_key),"
    " ADD KEY th_tasks_key (routing_key, due_ms),"
    " DROP KEY th_tasks_due_ms"
)
_V4_TAGS = (
    "CREATE TABLE IF NOT EXISTS th_task_tags ("
    " tag VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " due_ms BIGINT NOT NULL,"
    " id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    " PRIMARY KEY (tag, due_ms, id), KEY th_task_tags_id (id),"
    " CONSTRAINT th_task_tags_task FOREIGN KEY (id) REFERENCES th_tasks (id) ON DELETE CASCADE"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
)

COUNT = 2000
BASE_MS = 1_800_000_000_000
ARMED_ID = "v3-0007"


def _v3_row(n: int) -> tuple[Any, ...]:
    """Due times with many ties (ordered by id then), ids of mixed case and
    punctuation, some without routing key or payload, one waiting for a retry."""
    task_id = ("V3:" if n % 7 == 0 else "v3-") + f"{n:04d}"
    due = BASE_MS + (n * 7919) % 500 * 1000
    fire = due + 65_000 if n % 101 == 5 else due
    routing_key = None if n % 10 == 0 else f"v3.rk.{n % 3}"
    payload = None if n % 13 == 0 else b"p%d\x00\xff" % n
    attempts = 2 if fire != due else 0
    return (
        task_id,
        shard_of(task_id, SHARDS),
        1000 + n,
        1,
        fire,
        due,
        routing_key,
        payload,
        attempts,
    )


def _cli(url: str, *command: str) -> subprocess.CompletedProcess[str]:
    return run_cli(command, {**base_env(), **settings_env(database_url=url)})


def _out(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


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
    """The tables, columns (in their order), keys and foreign keys of the database."""
    where = "WHERE TABLE_SCHEMA = DATABASE()"
    where_c = "WHERE CONSTRAINT_SCHEMA = DATABASE()"
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
        "foreign keys": set(
            query(
                url,
                "SELECT CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME, UPDATE_RULE,"
                f" DELETE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS {where_c}",
            )
        ),
    }


def _keys(url: str, table: str) -> dict[str, list[str]]:
    """Each key of ``table`` with its columns in order."""
    rows = query(
        url,
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        (table,),
    )
    keys: dict[str, list[str]] = {}
    for name, column in rows:
        keys.setdefault(str(name), []).append(str(column))
    return keys


def _drop(mysql_url: str, name: str) -> None:
    execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def v3_url(mysql_url: str) -> Iterator[str]:
    """A database as release 3's `db init` made it, with COUNT tasks, one armed."""
    name = unique_name("th_test_v3_")
    execute(mysql_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    try:
        url = f"{mysql_url}/{name}"
        execute(url, *_V3_SCHEMA, *_V3_SHARDS)
        with revisions.migrator(url, SHARDS) as db:
            db.stamp("0003")  # release 3's db init recorded its revision
        conn = connect(url)
        try:
            with conn.cursor() as cur:
                cur.executemany(_INSERT_V3, [_v3_row(n) for n in range(COUNT)])
                for statement in MARK_FIRING:  # one row armed (being published)
                    cur.execute(statement, (ARMED_ID,))
        finally:
            conn.close()
        yield url
    finally:
        _drop(mysql_url, name)


@pytest.fixture(scope="module")
def fresh_shape(mysql_url: str) -> Iterator[dict[str, Any]]:
    """The shape of a database `db init` of this release makes (the head version)."""
    name = unique_name("th_test_v4_")
    url = f"{mysql_url}/{name}"
    try:
        result = _cli(url, "db", "init")
        assert result.returncode == EXIT_OK, _out(result)
        yield _shape(url)
    finally:
        _drop(mysql_url, name)


@pytest.fixture
def store_of() -> Iterator[Any]:
    made: list[MySQLStore] = []

    def make(url: str) -> MySQLStore:
        made.append(MySQLStore(url, DEFAULT_RK))
        return made[-1]

    try:
        yield make
    finally:
        for store in made:
            store.close()


def _upgrade(url: str) -> subprocess.CompletedProcess[str]:
    result = _cli(url, "db", "upgrade")
    assert (result.returncode, result.stdout) == (EXIT_OK, f"schema version {HEAD} ready\n"), _out(
        result
    )
    assert "Traceback" not in _out(result)
    return result


def _check_v4(url: str, fresh: dict[str, Any], rows_before: list[tuple[Any, ...]]) -> None:
    """``url`` is at the head version (version 4's changes and 5's),
    shaped as a new database, with its v3 rows kept."""
    name = url.rsplit("/", 1)[1]
    status = schema_status(url)  # what `db status` prints (the CLI's is run once, below)
    assert (status.state, status.version, status.revision) == ("current", HEAD, HEAD_REVISION)
    assert status.describe() == (
        f"database {name!r}: schema version {HEAD} (revision {HEAD_REVISION}), at head"
    )
    assert _records(url) == (
        [(HEAD_REVISION,)],
        [("dedup_windows", "0"), ("schema_version", str(HEAD)), ("shard_count", str(SHARDS))],
    )
    assert _keys(url, "th_fired") == {  # version 5
        "PRIMARY": ["id"],
        "th_fired_expiry": ["shard", "expires_ms"],
    }
    assert _keys(url, "th_outbox") == {"PRIMARY": ["seq"]}  # version 5
    columns = [r[0] for r in query(url, "SHOW COLUMNS FROM th_tasks")]
    assert "meta" in columns
    assert columns.index("meta") == columns.index("payload") + 1
    keys = _keys(url, "th_tasks")
    assert keys == {
        "PRIMARY": ["id"],
        "th_tasks_fire": ["shard", "fire_ms", "id"],
        "th_tasks_gen": ["shard", "gen", "fire_ms", "id"],
        "th_tasks_listed": ["due_ms", "id", "routing_key"],
        "th_tasks_key": ["routing_key", "due_ms"],
    }
    assert "th_tasks_due_ms" not in keys
    assert _keys(url, "th_task_tags") == {
        "PRIMARY": ["tag", "due_ms", "id"],
        "th_task_tags_id": ["id"],  # also the foreign key's
    }
    assert query(
        url,
        "SELECT CONSTRAINT_NAME, REFERENCED_TABLE_NAME, DELETE_RULE"
        " FROM information_schema.REFERENTIAL_CONSTRAINTS"
        " WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = 'th_task_tags'",
    ) == [("th_task_tags_task", "th_tasks", "CASCADE")]
    assert _shape(url) == fresh  # what `db init` creates
    assert query(url, _V3_ROWS) == rows_before
    assert query(url, "SELECT COUNT(*) FROM th_tasks WHERE meta IS NOT NULL") == [(0,)]
    assert query(url, "SELECT COUNT(*) FROM th_task_tags") == [(0,)]
    assert query(url, "SELECT COUNT(*) FROM th_tasks WHERE throttled <> 0") == [(0,)]  # 6


def _listed(store: MySQLStore, where: TaskFilter, page: int) -> list[Any]:
    """Every task ``where`` matches, walked page by page with the keyset cursor."""
    out: list[Any] = []
    after = None
    while True:
        tasks = store.list_tasks(where, after, page)
        out += tasks
        if len(tasks) < page:
            return out
        after = (tasks[-1].task.due_ms, tasks[-1].task.id)


def test_a_version_3_database_upgrades_to_version_4(
    v3_url: str, fresh_shape: dict[str, Any], store_of: Any
) -> None:
    name = v3_url.rsplit("/", 1)[1]
    assert _status(v3_url) == (
        EXIT_BEHIND,
        f"database {name!r}: schema version 3 (revision 0003), behind head {HEAD_REVISION} "
        f"(schema version {HEAD}): run `triggerhook db upgrade` with every instance stopped",
    )
    rows_before = query(v3_url, _V3_ROWS)
    assert len(rows_before) == COUNT

    result = _upgrade(v3_url)
    assert "revision 0004 applied" in result.stderr, result.stderr
    assert "revision 0005 applied" in result.stderr, result.stderr
    assert "revision 0006 applied" in result.stderr, result.stderr
    assert "revision 0003" not in result.stderr, result.stderr  # recorded already
    assert _status(v3_url) == (
        EXIT_OK,
        f"database {name!r}: schema version {HEAD} (revision {HEAD_REVISION}), at head",
    )
    _check_v4(v3_url, fresh_shape, rows_before)

    # The old rows are listed in due order (ties by id), without metadata.
    store = store_of(v3_url)
    store.check_schema()
    expected = sorted((r[5], r[0]) for r in rows_before)
    by_id = {r[0]: r for r in rows_before}
    listed = store.list_tasks(TaskFilter(), None, 1000)
    assert [(i.task.due_ms, i.task.id) for i in listed] == expected[:1000]
    walked = _listed(store, TaskFilter(), 333)
    assert [(i.task.due_ms, i.task.id) for i in walked] == expected
    for info in walked:
        row = by_id[info.task.id]
        assert info.task.meta is NO_META
        assert info.task.routing_key == (row[6] or DEFAULT_RK)
        assert info.task.payload == (row[7] or b"")
        assert info.state is (TaskState.FIRING if info.task.id == ARMED_ID else TaskState.SCHEDULED)
    # ... and through the new keys: by routing key, by id prefix, by due range.
    key_rows = sorted((r[5], r[0]) for r in rows_before if r[6] == "v3.rk.1")
    listed_key = _listed(store, TaskFilter(routing_key="v3.rk.1"), 100)
    assert [(i.task.due_ms, i.task.id) for i in listed_key] == key_rows
    prefix_rows = sorted((r[5], r[0]) for r in rows_before if r[0].startswith("V3:"))
    listed_prefix = _listed(store, TaskFilter(prefix="V3:"), 50)
    assert [(i.task.due_ms, i.task.id) for i in listed_prefix] == prefix_rows
    low, high = BASE_MS + 10_000, BASE_MS + 20_000
    span = sorted((r[5], r[0]) for r in rows_before if low <= r[5] < high)
    listed_span = _listed(store, TaskFilter(due_after_ms=low, due_before_ms=high), 1000)
    assert [(i.task.due_ms, i.task.id) for i in listed_span] == span
    assert store.count_where(TaskFilter()) == COUNT
    assert store.list_tasks(TaskFilter(tag="any"), None, 10) == []

    # th_task_tags: its rows go with their task, and need one.
    first, second = rows_before[0], rows_before[1]
    execute(
        v3_url,
        "INSERT INTO th_task_tags (tag, due_ms, id)"
        " VALUES ('a', %s, %s), ('b', %s, %s), ('a', %s, %s)",
        params=(first[5], first[0], first[5], first[0], second[5], second[0]),
    )
    execute(v3_url, "DELETE FROM th_tasks WHERE id = %s", params=(first[0],))
    assert query(v3_url, "SELECT tag, id FROM th_task_tags") == [("a", second[0])]
    with pytest.raises(pymysql.err.IntegrityError):
        execute(
            v3_url, "INSERT INTO th_task_tags (tag, due_ms, id) VALUES ('a', 1, 'no-such-task')"
        )


def test_a_second_upgrade_changes_nothing(v3_url: str, fresh_shape: dict[str, Any]) -> None:
    rows_before = query(v3_url, _V3_ROWS)
    _upgrade(v3_url)
    shape, records = _shape(v3_url), _records(v3_url)
    again = _upgrade(v3_url)
    assert "applied" not in again.stderr and "recorded" not in again.stderr, again.stderr
    assert _shape(v3_url) == shape
    assert _records(v3_url) == records
    _check_v4(v3_url, fresh_shape, rows_before)
    # init runs the same way on it.
    init = _cli(v3_url, "db", "init")
    assert (init.returncode, init.stdout) == (EXIT_OK, f"schema version {HEAD} ready\n"), _out(init)
    assert "applied" not in init.stderr and "recorded" not in init.stderr, init.stderr
    _check_v4(v3_url, fresh_shape, rows_before)


@pytest.mark.parametrize(
    "done",
    [
        (_V4_ALTER,),  # stopped after the ALTER, before th_task_tags
        (_V4_ALTER, _V4_TAGS),  # ... after th_task_tags, before writing version 4
        ("ALTER TABLE th_tasks ADD COLUMN meta BLOB NULL AFTER payload",),  # the column only
    ],
    ids=["alter", "alter-and-tags", "column-only"],
)
def test_an_interrupted_upgrade_resumes(
    v3_url: str, fresh_shape: dict[str, Any], done: tuple[str, ...]
) -> None:
    rows_before = query(v3_url, _V3_ROWS)
    execute(v3_url, *done)
    # the version is left at 3, and Alembic's record at 0003
    assert _records(v3_url) == (
        [("0003",)],
        [("schema_version", "3"), ("shard_count", str(SHARDS))],
    )
    assert schema_status(v3_url).state == "behind"
    result = _upgrade(v3_url)
    assert "revision 0004 applied" in result.stderr, result.stderr
    _check_v4(v3_url, fresh_shape, rows_before)
