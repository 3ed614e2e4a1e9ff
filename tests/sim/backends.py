"""The real stores the simulator runs the engine over, and the oracle's view of
their task table.

* ``memory``: ``SQLiteStore(":memory:")`` (the store kernel over an in-memory
  SQLite database) — the breadth: hundreds of runs a minute;
* ``sqlite``: :class:`~triggerhook.store.sqlite.SQLiteStore` on a file;
* ``mysql``: :class:`~triggerhook.store.mysql.MySQLStore` on a fresh MariaDB
  database — the truth, short. Its clock is the world's too: every
  transaction begins with ``SET @@timestamp`` to the world's time, so the
  server's ``NOW(3)`` (leases, heartbeats, the clock samples) reads simulated
  time, and a run of simulated minutes takes seconds.

Each backend dumps its task table for the oracle (``dump``): read past the
store, on the backend's own terms (plain SQL on the in-memory database's one
connection; a second SQLite connection; a separate MariaDB session), so a
store bug cannot hide itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from support.mysql import connect, temporary_database
from support.names import unique_name

from sim.oracle import RowView, Table
from triggerhook.domain.meta import Meta
from triggerhook.errors import StoreUnavailable
from triggerhook.interfaces import TaskStore
from triggerhook.store.mysql.schema import init_schema
from triggerhook.store.rows import meta_of
from triggerhook.store.sqlite import SQLiteStore

DEFAULT_ROUTING_KEY = "sim"
BACKENDS = ("memory", "sqlite", "mysql")
DEFAULT_MYSQL_URL = "mysql://root:@127.0.0.1:3306"


class Backend(Protocol):
    store: TaskStore  # the database, as a client without an engine sees it
    commit_faults: bool  # it can lose a COMMIT's answer inside the store

    def connect(self) -> TaskStore:
        """The store as one more process sees it (its own pool and state)."""
        ...

    def dump(self) -> Table: ...

    def close(self) -> None: ...


def _view(rev: int, due_ms: int, fire_ms: int, meta: Meta) -> RowView:
    recur = meta.recur
    if recur is None:
        return RowView(rev, due_ms, fire_ms, None)
    return RowView(
        rev,
        due_ms,
        fire_ms,
        recur.occurrence,
        recur.stopped,
        recur.every_ms,
        recur.until_ms,
        paused=recur.paused,
        resume_ms=recur.resume_ms,
        catch_up=recur.catch_up or "one",
        catch_up_max=recur.catch_up_max,
    )


_DUMP = "SELECT id, rev, due_ms, fire_ms, meta FROM th_tasks"


@functools.lru_cache(maxsize=4096)
def _meta(blob: bytes | None) -> Meta:
    """th_tasks.meta decoded (cached: the oracle dumps the table at every step)."""
    return meta_of(blob, "(dumped)")


def _table(rows: Any) -> Table:
    return {
        r[0]: _view(r[1], r[2], r[3], _meta(None if r[4] is None else bytes(r[4]))) for r in rows
    }


class MemoryBackend:
    commit_faults = False

    def __init__(self, now_ms: Callable[[], float], shard_count: int) -> None:
        self._memory = SQLiteStore(":memory:", DEFAULT_ROUTING_KEY, shard_count, now_ms)
        self.store: TaskStore = self._memory

    def connect(self) -> TaskStore:
        return self.store  # the "database" itself: it keeps nothing per client

    def dump(self) -> Table:
        with self._memory._transaction(write=False) as cur:
            rows = cur.execute(_DUMP).fetchall()
        return _table(rows)

    def close(self) -> None:
        self._memory.close()


class SQLiteBackend:
    commit_faults = False

    def __init__(self, now_ms: Callable[[], float], shard_count: int) -> None:
        import sqlite3

        self._dir = tempfile.TemporaryDirectory(prefix="th-sim-")
        path = os.path.join(self._dir.name, "sim.db")
        self.store: TaskStore = SQLiteStore(path, DEFAULT_ROUTING_KEY, shard_count, now_ms)
        self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def connect(self) -> TaskStore:
        return self.store  # one process's file (dev mode): nothing kept per caller

    def dump(self) -> Table:
        rows = self._reader.execute(_DUMP)
        return _table(rows)

    def close(self) -> None:
        self.store.close()
        self._reader.close()
        self._dir.cleanup()


class _TimedPool:
    """A connection pool whose transactions read the world's time as NOW(),
    and whose COMMIT loses its answer when ``lose()`` says so (after the
    server committed: the store sees what a cut connection gives it)."""

    def __init__(
        self, pool: Any, now_ms: Callable[[], float], lose: Callable[[], bool] | None = None
    ) -> None:
        self._pool = pool
        self._now_ms = now_ms
        self._lose = lose

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        with self._pool.transaction() as cur:
            cur.execute("SET @@timestamp = %s", (round(self._now_ms() / 1000, 6),))
            yield cur
        if self._lose is not None and self._lose():
            raise StoreUnavailable("sim: the COMMIT took effect, its answer was lost")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


class MySQLBackend:
    """Each instance gets a store of its own (its pools, its arming hints),
    as each process has, on one database."""

    commit_faults = True

    def __init__(
        self, now_ms: Callable[[], float], shard_count: int, lose: Callable[[], bool]
    ) -> None:
        server = os.environ.get("TRIGGERHOOK_TEST_MYSQL", DEFAULT_MYSQL_URL).rstrip("/")
        self._database = temporary_database(server, unique_name())
        self._url = self._database.__enter__()
        self._now_ms, self._lose = now_ms, lose
        self._stores: list[TaskStore] = []
        try:
            init_schema(self._url, shard_count)
            self.store = self.connect()
            self._reader = connect(self._url)
        except BaseException:
            self.close()
            raise

    def connect(self) -> TaskStore:
        from triggerhook.store.mysql import MySQLStore

        store = MySQLStore(self._url, DEFAULT_ROUTING_KEY, pool_size=2)
        # The test's seam into the store: its two pools, on the world's clock.
        store._pool = _TimedPool(store._pool, self._now_ms, self._lose)  # type: ignore[assignment]
        store._autocommit_pool = _TimedPool(store._autocommit_pool, self._now_ms)  # type: ignore[assignment]
        self._stores.append(store)
        return store

    def dump(self) -> Table:
        with self._reader.cursor() as cur:
            cur.execute("SELECT id, rev, due_ms, fire_ms, meta FROM th_tasks")
            rows = cur.fetchall()
        return _table(rows)

    def close(self) -> None:
        try:
            for store in self._stores:
                store.close()
            if hasattr(self, "_reader"):
                self._reader.close()
        finally:
            self._database.__exit__(None, None, None)


def open_backend(
    name: str, now_ms: Callable[[], float], shard_count: int, lose: Callable[[], bool]
) -> Backend:
    """``lose``: whether the COMMIT under way loses its answer (MariaDB's seam)."""
    if name == "memory":
        return MemoryBackend(now_ms, shard_count)
    if name == "sqlite":
        return SQLiteBackend(now_ms, shard_count)
    if name == "mysql":
        return MySQLBackend(now_ms, shard_count, lose)
    raise ValueError(f"unknown store {name!r}: one of {', '.join(BACKENDS)}")
