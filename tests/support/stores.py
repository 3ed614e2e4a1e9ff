"""The task stores the contract suite (``tests/contract``) runs against.

* ``memory``: ``SQLiteStore(":memory:")``, the in-memory store of the unit
  tests and the simulator, on this process's wall clock (the clock the local
  test database has too);
* ``mysql``: :class:`triggerhook.store.mysql.MySQLStore` on a database with
  the schema applied;
* ``sqlite``: :class:`triggerhook.store.sqlite.SQLiteStore` on a new file.

Each has :data:`SHARD_COUNT` shards and resolves a NULL (empty) routing key
to :data:`DEFAULT_ROUTING_KEY`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from support.mysql import connect, with_driver
from triggerhook.domain.arming import shard_of
from triggerhook.domain.task import InsertOutcome
from triggerhook.interfaces import Inserted, TaskStore
from triggerhook.store.mysql import MySQLStore, init_schema
from triggerhook.store.sqlite import SQLiteStore

DEFAULT_ROUTING_KEY = "default.rk"
# "mysql" speaks the default driver (mysqlclient; tests/conftest.py's URL says
# mysql://), "mysql-pymysql" the portable one, which must keep working.
STORES = ["memory", "mysql", "mysql-pymysql", "sqlite"]
# Few, so that tests can find ids of one shard and lease every shard cheaply.
SHARD_COUNT = 4


def outcomes(inserted: Sequence[Inserted]) -> list[InsertOutcome]:
    """An insert's outcomes, without the tasks they answer with."""
    return [answer.outcome for answer in inserted]


def in_shard(shard: int, count: int, prefix: str = "t") -> list[str]:
    """``count`` ids of ``shard`` (of SHARD_COUNT), in mark order when due at the same time."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        name = f"{prefix}{n:04d}"
        if shard_of(name, SHARD_COUNT) == shard:
            found.append(name)
        n += 1
    return found


@dataclass(frozen=True)
class Backend:
    name: str
    store: TaskStore
    # Make the stored routing key of a row NULL, as a row written without one
    # (or by hand) has it: below the TaskStore interface, so per store.
    null_routing_key: Callable[[str], None]
    # A caller's own connection to the store's database (the outbox's, R6o),
    # in a transaction: committed when the block ends, rolled back if it raises.
    caller: Callable[[], AbstractContextManager[Any]]


def memory_backend(shard_count: int = SHARD_COUNT) -> Backend:
    store = SQLiteStore(":memory:", DEFAULT_ROUTING_KEY, shard_count)

    def null_routing_key(task_id: str) -> None:
        with store._transaction() as cur:  # the one connection to this database
            cur.execute("UPDATE th_tasks SET routing_key = NULL WHERE id = ?", (task_id,))

    @contextlib.contextmanager
    def caller() -> Iterator[Any]:
        # The one connection to an in-memory database, in a transaction of the store's.
        with store._transaction():
            yield store._sqlite.conn

    return Backend("memory", store, null_routing_key, caller)


def mysql_backend(database_url: str, shard_count: int = SHARD_COUNT) -> Backend:
    """A MySQL store on ``database_url`` (an empty database: the schema is applied)."""
    init_schema(database_url, shard_count)

    def null_routing_key(task_id: str) -> None:
        conn = connect(database_url)
        try:
            with conn.cursor() as cur:
                cur.execute("UPDATE th_tasks SET routing_key = NULL WHERE id = %s", (task_id,))
        finally:
            conn.close()

    @contextlib.contextmanager
    def caller() -> Iterator[Any]:
        conn = connect(database_url)
        try:
            conn.begin()
            yield conn
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    store = MySQLStore(database_url, DEFAULT_ROUTING_KEY)
    return Backend("mysql", store, null_routing_key, caller)


def pymysql_backend(database_url: str, shard_count: int = SHARD_COUNT) -> Backend:
    """:func:`mysql_backend` through PyMySQL (``mysql+pymysql://``)."""
    made = mysql_backend(with_driver(database_url, "pymysql"), shard_count)
    return replace(made, name="mysql-pymysql")


def sqlite_backend(path: Path, shard_count: int = SHARD_COUNT) -> Backend:
    """An SQLite store on a new file ``path`` (its directory exists; the
    store creates the file with the schema)."""
    store = SQLiteStore(str(path), DEFAULT_ROUTING_KEY, shard_count)

    def null_routing_key(task_id: str) -> None:
        conn = sqlite3.connect(path)
        try:
            with conn:  # commits
                conn.execute("UPDATE th_tasks SET routing_key = NULL WHERE id = ?", (task_id,))
        finally:
            conn.close()

    @contextlib.contextmanager
    def caller() -> Iterator[Any]:
        conn = sqlite3.connect(path)
        try:
            with conn:  # commits, or rolls back on an exception
                yield conn
        finally:
            conn.close()

    return Backend("sqlite", store, null_routing_key, caller)
