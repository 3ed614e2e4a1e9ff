"""An embedded SQLite task store (implements :class:`triggerhook.interfaces.TaskStore`).

For ``triggerhook dev``: one instance, no server, a file (or ``:memory:``).
Not for production: writers take turns on the file's one write lock, and one
file cannot be shared between machines. Durability is WAL with
``synchronous = FULL``: a call that returned has its commit on disk. It is
held to the same contract suite as MySQL (``tests/contract``).

The tables are MySQL's (``store/sqlite/sql.py``; the file, its schema and the
translation of sqlite3's errors: ``store/sqlite/schema.py``). What each
transaction writes is decided by the store kernel (``store/kernel.py``, the
rules of ``docs/design/ownership.md``), over this backend's steps
(``store/sqlite/tables.py``); here are R1 and R2 (one statement each) and the
reads. "Now" is this store's clock (``now_ms``; by default this host's wall
clock, which *is* an embedded database's clock), read in whole milliseconds
and bound into the statements. ``SQLiteStore(":memory:")`` is the in-memory
store of the unit tests and the simulator.

Where MySQL's answers depend on how it stores a row, this store answers the
same: a NULL routing key reads back as ``default_routing_key`` (and an empty
one is written as it); :meth:`SQLiteStore.get` does not read ``attempts`` and
reports 0.

Threads: one ``sqlite3`` connection (``check_same_thread=False``, no implicit
transactions) serves every thread; a re-entrant lock is held for each whole
transaction (``store/sqlite/tables.py``), so the connection is used by one
thread at a time and no thread sees another's uncommitted writes. A method that writes
begins with ``BEGIN IMMEDIATE``: SQLite's write lock on the file, held to its
COMMIT. So within a transaction nothing else writes: the locking reads of
the MySQL store are plain reads here. Another process on the same file (a
second daemon, a CLI) waits for that lock up to ``busy_timeout_ms``, then gets
:class:`~triggerhook.errors.StoreUnavailable`, as this store does from it.
Reads run in the same lock, each statement a snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from triggerhook.domain.arming import ShardMarks
from triggerhook.domain.listing import Key, TaskFilter, Timeline, timeline_of
from triggerhook.domain.task import TaskInfo
from triggerhook.errors import InstanceNameInUse
from triggerhook.interfaces import Acquired, Lease, NameHolder, TaskStore
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store.kernel import StoreKernel
from triggerhook.store.rows import Row, info_of
from triggerhook.store.sqlite import listing as sqlite_listing
from triggerhook.store.sqlite import sql as q
from triggerhook.store.sqlite.schema import check_version, connect, open_schema
from triggerhook.store.sqlite.tables import SQLiteTables

__all__ = ["SQLiteStore"]

log = logging.getLogger(__name__)


class SQLiteStore(StoreKernel):
    """SQLite :class:`~triggerhook.interfaces.TaskStore`. Thread-safe (see the module)."""

    def __init__(
        self,
        path: str,
        default_routing_key: str = "",
        shard_count: int = 64,
        now_ms: Callable[[], float] | None = None,
        *,
        busy_timeout_ms: int = 5000,
        listing_timeout_ms: int = 0,
    ) -> None:
        """``listing_timeout_ms``: a listing read running longer stops (0: never)."""
        if shard_count < 1:
            raise ValueError("shard_count must be at least 1")
        self._path = path
        self._listing_timeout_ms = listing_timeout_ms
        self._clock = now_ms if now_ms is not None else lambda: time.time() * 1000.0
        self.driver = f"sqlite3 {sqlite3.sqlite_version}"  # for the logs
        conn = connect(path, busy_timeout_ms)
        tables = SQLiteTables(conn, path, default_routing_key)
        super().__init__(tables, default_routing_key)
        tables.placement = self.placement
        self._shard_count = 0
        self._sqlite = tables
        self._conn = conn
        self._lock = tables.lock
        try:
            with self._transaction() as cur:
                self._shard_count = open_schema(cur, path, shard_count)
        except BaseException:
            conn.close()
            raise

    def _now(self) -> int:
        """The store's clock in whole milliseconds (as MySQL's NOW_MS reads it)."""
        return math.floor(self._clock())

    def _transaction(self, write: bool = True) -> contextlib.AbstractContextManager[sqlite3.Cursor]:
        return self._sqlite.transaction(write)

    def _one(self, statement: str, params: Sequence[Any] = ()) -> Row | None:
        with self._transaction(write=False) as cur:
            cur.execute(statement, params)
            rows = cur.fetchall()  # to the end: the statement is done with
        return rows[0] if rows else None

    def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the file holds this release's schema."""
        with self._transaction(write=False) as cur:
            check_version(cur, self._path)

    def shard_count(self) -> int:
        return self._shard_count

    def _lanes_stored(self, shard_count: int) -> int:
        row = self._one(q.LANE_SHARDS, (shard_count,))
        return 2 if row and row[0] else 1

    def _add_lane(self, shard_count: int) -> None:
        with self._transaction() as cur:
            cur.executemany(q.ADD_LANE_SHARD, [(s,) for s in range(shard_count, 2 * shard_count)])

    def _info(self, row: Row) -> TaskInfo:
        """A task and its state from q.TASK_STATE_COLUMNS."""
        return info_of(row, self._default_routing_key)

    # -- R2: shard leases -----------------------------------------------------------

    def acquire(self, instance: str, count: int, lease_ms: int) -> list[Acquired]:
        if count <= 0:
            return []
        now = self._now()
        with self._transaction() as cur:
            cur.execute(q.ACQUIRABLE, (now,))
            free = cur.fetchall()
            chosen = sorted(random.sample(free, min(count, len(free))))
            cur.executemany(q.ACQUIRE, [(instance, now + lease_ms, r[0]) for r in chosen])
        got = []
        for shard, epoch, armed_ms, armed_id, arm_gen in chosen:
            took = ShardMarks((armed_ms, armed_id), arm_gen)
            got.append(Acquired(Lease(shard, epoch + 1), took))
        return got

    def renew(self, instance: str, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        kept: list[Lease] = []
        if not leases:
            return kept
        until_ms = self._now() + lease_ms
        with self._transaction() as cur:
            for lease in leases:
                cur.execute(q.RENEW, (until_ms, lease.shard, instance, lease.epoch))
                if cur.rowcount > 0:  # matched, changed or not
                    kept.append(lease)
        return kept

    def release(self, instance: str, leases: Sequence[Lease]) -> int:
        if not leases:
            return 0
        with self._transaction() as cur:
            cur.executemany(q.RELEASE, [(lease.shard, instance, lease.epoch) for lease in leases])
            return int(cur.rowcount)

    # -- R1: members ----------------------------------------------------------------------

    def register(self, instance: str, token: int, host: str, pid: int, lease_ms: int) -> None:
        now = self._now()
        with self._transaction() as cur:
            cur.execute(q.MEMBER, (instance,))
            holder = cur.fetchone()
            if holder is not None and int(holder[0]) != token:
                if int(holder[3]) >= now:
                    raise InstanceNameInUse(instance, str(holder[1]), int(holder[2]))
                log.warning("took over instance name %r: its holder's heartbeat expired", instance)
            cur.execute(q.REGISTER, (instance, token, now + lease_ms, host, pid))

    def heartbeat(self, instance: str, token: int, lease_ms: int) -> bool:
        with self._transaction() as cur:
            cur.execute(q.HEARTBEAT, (self._now() + lease_ms, instance, token))
            return cur.rowcount > 0

    def name_holder(self, instance: str) -> NameHolder | None:
        now, row = self._now(), self._one(q.MEMBER, (instance,))
        if row is None:
            return None
        return NameHolder(int(row[0]), str(row[1]), int(row[2]), int(row[3]), now)

    def take_over_name(
        self, instance: str, token: int, host: str, pid: int, lease_ms: int, holder: NameHolder
    ) -> bool:
        as_read = (instance, holder.token, holder.heartbeat_until_ms)  # compare-and-set
        with self._transaction() as cur:
            cur.execute(q.TAKE_OVER_NAME, (token, self._now() + lease_ms, host, pid, *as_read))
            return cur.rowcount > 0

    def leave(self, instance: str, token: int) -> None:
        with self._transaction() as cur:
            cur.execute(q.LEAVE, (instance, token))

    def live_members(self) -> int:
        row = self._one(q.LIVE_MEMBERS, (self._now(),))
        return int(row[0]) if row else 0

    # -- lookups --------------------------------------------------------------------------

    def get(self, task_id: str) -> TaskInfo | None:
        row = self._one(q.SELECT_TASK_STATE, (task_id,))
        return None if row is None else self._info(row)

    def _query(self, built: tuple[str, list[Any]], interrupt: Interrupt | None = None) -> list[Row]:
        """A listing read, bounded (sqlite_listing.bounded)."""
        timeout_ms = self._listing_timeout_ms
        with (
            self._transaction(write=False) as cur,
            sqlite_listing.bounded(self._conn, timeout_ms, interrupt),
        ):
            cur.execute(*built)
            return list(cur.fetchall())

    def list_tasks(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[TaskInfo]:
        rows = self._query(sqlite_listing.list_tasks(where, after, limit), interrupt)
        return [self._info(row) for row in rows]

    def match_keys(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[Key]:
        rows = self._query(sqlite_listing.match_keys(where, after, limit), interrupt)
        return [(int(due), str(tid)) for due, tid in rows]

    def count_where(
        self, where: TaskFilter, up_to: int | None = None, interrupt: Interrupt | None = None
    ) -> int:
        rows = self._query(sqlite_listing.count(where, up_to), interrupt)
        return int(rows[0][0]) if rows else 0

    def timeline(
        self,
        where: TaskFilter,
        start_ms: int,
        bucket_ms: int,
        buckets: int,
        interrupt: Interrupt | None = None,
    ) -> Timeline:
        built = sqlite_listing.timeline(where, start_ms, bucket_ms, buckets)
        rows = self._query(built, interrupt)
        return timeline_of(rows, start_ms, bucket_ms, buckets, self._default_routing_key)

    def count_tasks(self) -> int:
        row = self._one(q.COUNT_TASKS)
        return int(row[0]) if row else 0

    def earliest_due_ms(self) -> int | None:
        """The earliest due time (a row waiting for a retry keeps its own)."""
        row = self._one(q.EARLIEST_DUE)
        return None if row is None or row[0] is None else int(row[0])

    def database_time_us(self) -> int:
        """The store's clock (``now_ms``: an embedded database's is its host's) in µs."""
        return math.floor(self._clock() * 1000.0)

    def close(self) -> None:
        """Close the connection (a second call does nothing)."""
        with self._lock:
            self._conn.close()


if TYPE_CHECKING:  # mypy checks the store against the protocol it implements
    _store: TaskStore = SQLiteStore(":memory:")
