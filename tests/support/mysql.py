"""MySQL helpers for tests: turn a SQLAlchemy-style URL into a connection (the
tests' own set-up and checks speak PyMySQL, whichever driver the store uses)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql

# Make a row look armed by another instance (as if being published there): a
# cancel or reschedule must then answer too late. Armed by the shard's marks
# (docs/design/ownership.md): the row moves to the very bottom of the shard's
# order, in generation 0, and the watermark is raised just enough to cover it
# (no other row is that low), so no other row changes state. No engine holds
# it in memory; one that acquires the shard afterwards inherits it and fires it.
_ARMED_FIRE_MS = -4611686018427387903  # one above the schema's bottom watermark
MARK_FIRING = (
    f"UPDATE th_tasks SET fire_ms = {_ARMED_FIRE_MS}, gen = 0 WHERE id = %s",
    # armed_id before armed_ms: MySQL assigns left to right, each seeing the last.
    "UPDATE th_shards s JOIN th_tasks t ON t.shard = s.shard"
    f" SET s.armed_id = IF(s.armed_ms > {_ARMED_FIRE_MS}, s.armed_id, '~'),"
    f" s.armed_ms = GREATEST(s.armed_ms, {_ARMED_FIRE_MS}) WHERE t.id = %s",
)

# The ids of the rows armed now, by their shards' marks.
ARMED_IDS = (
    "SELECT t.id FROM th_tasks t JOIN th_shards s ON s.shard = t.shard"
    " WHERE (t.fire_ms < s.armed_ms OR (t.fire_ms = s.armed_ms AND t.id <= s.armed_id))"
    " AND t.gen < s.arm_gen"
)


# th_tasks as releases 1 and 2 created it (their schema.sql), for upgrade tests;
# version 2 added ``attempts`` (release 1 already had ``rev``, without a migration).
_OLD_TASKS = """CREATE TABLE th_tasks (
    id             VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    due_ms         BIGINT       NOT NULL,
    routing_key    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    payload        MEDIUMBLOB   NULL,
    claimed_by     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    claim_until_ms BIGINT       NOT NULL DEFAULT 0,
    firing         TINYINT      NOT NULL DEFAULT 0,
    rev            BIGINT       NOT NULL DEFAULT 0,{attempts}
    created_at     TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    KEY th_tasks_due (due_ms, claim_until_ms),
    KEY th_tasks_claimed_by (claimed_by)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""
_OLD_META = """CREATE TABLE th_meta (
    name  VARCHAR(64)  CHARACTER SET ascii NOT NULL PRIMARY KEY,
    value VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""


def old_schema(version: int) -> tuple[str, str, str]:
    """The statements that create release ``version``'s schema (1 or 2):
    th_tasks, th_meta, and the version row."""
    if version not in (1, 2):
        raise ValueError(f"no schema of release {version} here")
    attempts = "\n    attempts       INT          NOT NULL DEFAULT 0," if version == 2 else ""
    return (
        _OLD_TASKS.format(attempts=attempts),
        _OLD_META,
        f"INSERT INTO th_meta (name, value) VALUES ('schema_version', '{version}')",
    )


def with_driver(url: str, driver: str) -> str:
    """``url`` with its scheme naming ``driver``: ``mysql+<driver>://...``."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.startswith("mysql"):
        raise ValueError(f"not a mysql URL: {url!r}")
    return f"mysql+{driver}://{rest}"


def connect_kwargs(url: str) -> dict[str, Any]:
    """``mysql+pymysql://user:password@host:port[/database]`` -> pymysql.connect() kwargs."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("mysql"):
        raise ValueError(f"not a mysql URL: {url!r}")
    kwargs: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": 5,
    }
    database = parts.path.lstrip("/")
    if database:
        kwargs["database"] = unquote(database)
    return kwargs


def connect(url: str) -> Any:
    """A new autocommit pymysql connection (the caller closes it)."""
    return pymysql.connect(**connect_kwargs(url))


def execute(url: str, *statements: str, params: Any = None) -> None:
    """Each statement on a connection of its own to ``url`` (autocommit)."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement, params)
    finally:
        conn.close()


def query(url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """The rows of one statement, on a connection of its own to ``url``."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall())
    finally:
        conn.close()


@contextlib.contextmanager
def temporary_database(mysql_url: str, name: str) -> Iterator[str]:
    """Create an empty utf8mb4 database ``name``; yield its URL; drop it."""
    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        conn.close()
    try:
        yield f"{mysql_url}/{name}"
    finally:
        _drop_database(mysql_url, name)


def _drop_database(mysql_url: str, name: str) -> None:
    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            # Sessions the test leaked (a daemon thread still connected, an open
            # transaction) would hold metadata locks and make DROP DATABASE hang.
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> "
                "CONNECTION_ID()",
                (name,),
            )
            for (session_id,) in cur.fetchall():
                with contextlib.suppress(pymysql.err.MySQLError):  # may be gone already
                    cur.execute(f"KILL CONNECTION {int(session_id)}")
            cur.execute("SET SESSION lock_wait_timeout = 30")
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()
