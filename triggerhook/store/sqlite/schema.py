"""The SQLite store's file: its connection, its schema (created in an empty
database, checked in any other) and the translation of sqlite3's errors
into the project's (``store/sqlite/store.py`` uses these; the statements are
``store/sqlite/sql.py``'s)."""

from __future__ import annotations

import logging
import sqlite3

from triggerhook.errors import (
    SchemaError,
    StoreError,
    StoreReadOnly,
    StoreUnavailable,
    TriggerHookError,
)
from triggerhook.store.sqlite import sql as q

log = logging.getLogger(__name__)

MEMORY = ":memory:"
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def translated(exc: sqlite3.Error, path: str) -> TriggerHookError:
    """The project's error for a sqlite3 one (raise it ``from`` that one):
    busy or locked is transient, and so is a read-only or full file (until
    its permissions or the disk are fixed); a file that is no database is a
    SchemaError, anything else a StoreError."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary result code
    if code in _BUSY:
        return StoreUnavailable(
            f"SQLite database {path!r} is locked by another connection (busy): {exc}"
        )
    if code == sqlite3.SQLITE_READONLY:
        return StoreReadOnly(f"SQLite database {path!r} read-only: {exc}")
    if code == sqlite3.SQLITE_FULL:
        return StoreReadOnly(f"SQLite database {path!r} full: {exc}", full=True)
    if code == sqlite3.SQLITE_NOTADB:
        return _not_ours(path, str(exc))
    return StoreError(f"SQLite database {path!r}: {exc}")


def connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """One connection for every thread (the store serializes its use), with
    no implicit transactions (the store begins and commits them), waiting up
    to ``busy_timeout_ms`` for another connection's lock."""
    try:
        conn = sqlite3.connect(
            path, timeout=busy_timeout_ms / 1000.0, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise translated(exc, path) from exc
    try:
        conn.execute(q.FOREIGN_KEYS_ON)
        if path != MEMORY:
            conn.execute(q.JOURNAL_WAL)
            conn.execute(q.SYNC_FULL)
    except sqlite3.Error as exc:
        conn.close()
        raise translated(exc, path) from exc
    return conn


def open_schema(cur: sqlite3.Cursor, path: str, shard_count: int) -> int:
    """In a write transaction: create the schema in an empty database, or
    check the one there; returns the shard count stored (a file's own wins,
    as MySQL's ``db init`` keeps a database's)."""
    cur.execute(q.TABLES)
    if cur.fetchall():
        check_version(cur, path)
        for statement in q.ADDED_SCHEMA:
            cur.execute(statement)
        _add_task_columns(cur)
        return _stored_shard_count(cur, path, shard_count)
    log.info("creating the triggerhook schema in SQLite database %r", path)
    for statement in (*q.SCHEMA, *q.ADDED_SCHEMA):
        cur.execute(statement)
    meta = [(q.SCHEMA_VERSION_KEY, str(q.SCHEMA_VERSION)), (q.SHARD_COUNT_KEY, str(shard_count))]
    cur.executemany(q.WRITE_META, meta)
    cur.executemany(q.ADD_SHARD, [(shard,) for shard in range(shard_count)])
    return shard_count


def _add_task_columns(cur: sqlite3.Cursor) -> None:
    """The th_tasks columns an earlier release's file lacks (q.ADDED_TASK_COLUMNS)."""
    cur.execute(q.TASK_COLUMNS_NOW)
    present = {str(row[0]) for row in cur.fetchall()}
    for name, statement in q.ADDED_TASK_COLUMNS.items():
        if name not in present:
            log.info("adding th_tasks.%s to the SQLite database", name)
            cur.execute(statement)


def check_version(cur: sqlite3.Cursor, path: str) -> None:
    """SchemaError unless the database holds this release's schema version."""
    version = _meta(cur, path, q.SCHEMA_VERSION_KEY)
    if version is None:
        raise _not_ours(path, "its th_meta has no schema_version")
    if version != str(q.SCHEMA_VERSION):
        raise SchemaError(
            f"SQLite database {path!r} has schema version {version}, this release's"
            f" is {q.SCHEMA_VERSION}: use the release that made it, or another file"
        )


def _not_ours(path: str, why: str) -> SchemaError:
    return SchemaError(f"{path!r} is not a triggerhook SQLite database: {why}")


def _meta(cur: sqlite3.Cursor, path: str, name: str) -> str | None:
    try:
        cur.execute(q.READ_META, (name,))
    except sqlite3.OperationalError as exc:  # no such table (or column)
        raise _not_ours(path, f"it has no th_meta table ({exc})") from exc
    row = cur.fetchone()
    return None if row is None else str(row[0])


def _stored_shard_count(cur: sqlite3.Cursor, path: str, wanted: int) -> int:
    stored = _meta(cur, path, q.SHARD_COUNT_KEY)
    if stored is None or not stored.isdigit() or int(stored) < 1:
        raise _not_ours(path, f"its th_meta holds no valid shard_count ({stored!r})")
    count = int(stored)
    cur.execute(q.COUNT_SHARDS)
    row = cur.fetchone()
    if row is None or row[0] not in (count, 2 * count):  # 2N: with the rate-limited lane
        raise SchemaError(
            f"SQLite database {path!r} has {row and row[0]} shard rows for its"
            f" shard count {count}: it is damaged"
        )
    if count != wanted:
        log.warning(
            "SQLite database %r keeps its shard count of %d (shard_count %d is ignored:"
            " the count is fixed when the database is created)",
            path,
            count,
            wanted,
        )
    return count
