"""The MySQL/MariaDB task store (implements :class:`triggerhook.interfaces.TaskStore`).

The protocol is ``docs/design/ownership.md`` (rules R1-R10). What each
transaction writes is decided by the store kernel (``store/kernel.py``) over
this backend's steps (``store/mysql/tables.py``, which also says how the
locks are ordered); here are R1 and R2 (one compare-and-set statement each)
and the reads. The SQL is in ``store/mysql/sql.py``. Every "now" is the server's,
computed in the statement (:data:`sql.NOW_MS`).

Round trips (each statement is one; a transaction adds its COMMIT):

* insert: 1 (one autocommit statement, when no id exists and the batch fits
  one statement), else lock, insert per chunk (and a look at the ids that
  exist), commit;
* arm: 1 after a pass that armed nothing, if it again finds nothing (one
  unlocked read); else lock, read, commit (3), plus the marks (4) and, rarely,
  the settled rows (store/arm_pass.py);
* cancel: 2 when every id exists unarmed (delete, commit), else that
  statement rolled back, then lock shards, lock rows, delete, commit;
* reschedule and defer: 4 (lock shards, lock rows, write, commit);
* delete_fired: 1 per 2,000 rows; renew 2; release 1; acquire 3.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence

from triggerhook.domain.arming import ShardMarks
from triggerhook.domain.listing import Key, TaskFilter, Timeline
from triggerhook.domain.task import TaskInfo
from triggerhook.errors import InstanceNameInUse, SchemaError, StoreError
from triggerhook.interfaces import Acquired, Lease, NameHolder
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store.kernel import StoreKernel
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.connection import ConnectionPool, is_duplicate_key, target
from triggerhook.store.mysql.galera import GaleraStatus, status_of
from triggerhook.store.mysql.listing import ListingReads
from triggerhook.store.mysql.schema import read_shard_count, read_version
from triggerhook.store.mysql.tables import MySQLTables
from triggerhook.store.rows import Row, info_of

__all__ = ["MySQLStore"]

log = logging.getLogger(__name__)

_REGISTER_TRIES = 3


def _schema_hint(version: int) -> str:
    if version == 0:
        return "run `triggerhook db init`"
    if version < sql.SCHEMA_VERSION:
        return "stop every instance, then run `triggerhook db upgrade`"
    return "this release is older than the database: run the release that upgraded it"


def _pairs(leases: Iterable[Lease]) -> list[int]:
    return [value for lease in leases for value in (lease.shard, lease.epoch)]


class MySQLStore(StoreKernel):
    """Thread-safe: every call borrows a pooled connection for one transaction."""

    def __init__(
        self,
        url: str,
        default_routing_key: str,
        pool_size: int = 16,
        idle_transaction_timeout_s: int = 0,
        pool_recycle_s: int = 3600,
        pool_ping_idle_s: int = 2,
        listing_timeout_ms: int = 5000,
        listing_pool_size: int = 4,
    ) -> None:
        to = target(url)
        self._database = to.database
        self._integrity_error = to.driver.errors.integrity
        self.driver = f"{to.driver.package} {to.driver.version}"  # for the logs
        self._pool = ConnectionPool(
            to,
            pool_size,
            idle_transaction_timeout_s=idle_transaction_timeout_s,
            recycle_s=pool_recycle_s,
            ping_idle_s=pool_ping_idle_s,
        )
        self._autocommit_pool = ConnectionPool(
            to,
            pool_size,
            autocommit=True,
            recycle_s=pool_recycle_s,
            ping_idle_s=pool_ping_idle_s,
        )
        self._default_routing_key = default_routing_key
        # Reads of many tasks (store/mysql/listing.py): a pool and time limit of their own.
        self._listing = ListingReads(
            to,
            self._info,
            default_routing_key,
            listing_timeout_ms,
            listing_pool_size,
            recycle_s=pool_recycle_s,
            ping_idle_s=pool_ping_idle_s,
        )
        self._shard_count: int | None = None
        tables = MySQLTables(
            self._pool,
            self._autocommit_pool,
            default_routing_key,
            to.driver.errors.integrity,
            self.placement,
        )
        super().__init__(tables, default_routing_key)

    def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the database holds the current schema version."""
        with self._autocommit_pool.transaction() as cur:
            version = read_version(cur)
        if version != sql.SCHEMA_VERSION:
            raise SchemaError(
                f"database {self._database!r} has schema version {version}, "
                f"expected {sql.SCHEMA_VERSION}: {_schema_hint(version)}"
            )

    def shard_count(self) -> int:
        """Read once from th_meta: it never changes while an instance runs."""
        if self._shard_count is None:
            with self._autocommit_pool.transaction() as cur:
                count = read_shard_count(cur)
            if count is None:
                raise SchemaError(
                    f"database {self._database!r} has no shard count: run `triggerhook db init`"
                )
            self._shard_count = count
        return self._shard_count

    def _lanes_stored(self, shard_count: int) -> int:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.LANE_SHARDS, (shard_count,))
            row = cur.fetchone()
        return 2 if row and row[0] else 1

    def _add_lane(self, shard_count: int) -> None:
        with self._pool.transaction() as cur:
            shards = [(s,) for s in range(shard_count, 2 * shard_count)]
            cur.executemany(sql.ADD_SHARD, shards)

    # -- R2: shard leases -----------------------------------------------------------

    def acquire(self, instance: str, count: int, lease_ms: int) -> list[Acquired]:
        if count <= 0:
            return []
        with self._pool.transaction() as cur:
            cur.execute(sql.ACQUIRABLE)
            free = list(cur.fetchall())
            chosen = sorted(random.sample(free, min(count, len(free))))
            if not chosen:
                return []
            shards = [int(r[0]) for r in chosen]
            statement = sql.ACQUIRE.format(shards=sql.placeholders(len(shards)))
            cur.execute(statement, [instance, lease_ms, *shards])
        return [
            Acquired(Lease(int(shard), int(epoch) + 1), ShardMarks((armed_ms, armed_id), arm_gen))
            for shard, epoch, armed_ms, armed_id, arm_gen in chosen
        ]

    def renew(self, instance: str, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        if not leases:
            return []
        shards = sorted({lease.shard for lease in leases})
        listed = sql.placeholders(len(shards))
        pairs = sql.placeholders(len(leases), width=2)
        with self._autocommit_pool.transaction() as cur:
            cur.execute(
                sql.RENEW.format(shards=listed, pairs=pairs),
                [lease_ms, instance, *shards, *_pairs(leases)],
            )
            # Matched, not changed, is what counts (a renewal within the same
            # millisecond changes nothing): read back what is ours. A lease
            # lost in between is reported lost, which is what it is.
            cur.execute(sql.OWNED.format(shards=listed), [instance, *shards])
            owned = {(int(shard), int(epoch)) for shard, epoch in cur.fetchall()}
        return [lease for lease in leases if (lease.shard, lease.epoch) in owned]

    def release(self, instance: str, leases: Sequence[Lease]) -> int:
        if not leases:
            return 0
        shards = sorted({lease.shard for lease in leases})
        statement = sql.RELEASE.format(
            shards=sql.placeholders(len(shards)), pairs=sql.placeholders(len(leases), width=2)
        )
        with self._autocommit_pool.transaction() as cur:
            return int(cur.execute(statement, [instance, *shards, *_pairs(leases)]))

    # -- R1: members ----------------------------------------------------------------------

    def register(self, instance: str, token: int, host: str, pid: int, lease_ms: int) -> None:
        for _ in range(_REGISTER_TRIES):
            registered, holder = self._try_register(instance, token, host, pid, lease_ms)
            if registered:
                return
            if holder is not None:
                raise InstanceNameInUse(instance, holder[0], holder[1])
            # The holder left between our INSERT and our look: try again.
        raise StoreError(f"instance name {instance!r} kept changing hands; retry")

    def _try_register(
        self, instance: str, token: int, host: str, pid: int, lease_ms: int
    ) -> tuple[bool, tuple[str, int] | None]:
        """(True, None): registered; (False, (host, pid)): a live holder;
        (False, None): no holder after all."""
        with self._autocommit_pool.transaction() as cur:
            try:
                cur.execute(sql.REGISTER, (instance, token, lease_ms, host, pid))
                return True, None
            except self._integrity_error as exc:
                if not is_duplicate_key(exc):
                    raise
            if cur.execute(sql.TAKE_OVER_MEMBER, (token, lease_ms, host, pid, instance)):
                log.warning("took over instance name %r: its holder's heartbeat expired", instance)
                return True, None
            cur.execute(sql.MEMBER, (instance,))
            holder = cur.fetchone()
        if holder is None:
            return False, None
        if int(holder[0]) == token:  # registered already, by this process
            return self.heartbeat(instance, token, lease_ms), None
        return False, (str(holder[1]), int(holder[2]))

    def heartbeat(self, instance: str, token: int, lease_ms: int) -> bool:
        with self._autocommit_pool.transaction() as cur:
            if cur.execute(sql.HEARTBEAT, (lease_ms, instance, token)):
                return True
            # Matched but unchanged (the same millisecond) counts as renewed.
            cur.execute(sql.MEMBER, (instance,))
            row = cur.fetchone()
        return row is not None and int(row[0]) == token

    def name_holder(self, instance: str) -> NameHolder | None:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.NAME_HOLDER, (instance,))
            row = cur.fetchone()
        if row is None:
            return None
        token, host, pid, until_ms, now_ms = row
        return NameHolder(int(token), str(host), int(pid), int(until_ms), int(now_ms))

    def take_over_name(
        self, instance: str, token: int, host: str, pid: int, lease_ms: int, holder: NameHolder
    ) -> bool:
        values = (token, lease_ms, host, pid, instance, holder.token, holder.heartbeat_until_ms)
        with self._autocommit_pool.transaction() as cur:
            return bool(cur.execute(sql.TAKE_OVER_NAME, values))

    def leave(self, instance: str, token: int) -> None:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.LEAVE, (instance, token))

    def live_members(self) -> int:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.LIVE_MEMBERS)
            row = cur.fetchone()
        return int(row[0]) if row else 0

    # -- lookups --------------------------------------------------------------------------

    def get(self, task_id: str) -> TaskInfo | None:
        if not self._shards_of([task_id]):
            return None  # no row can have it (not ASCII)
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.SELECT_TASK_STATE, (task_id,))
            row = cur.fetchone()
        return None if row is None else self._info(row)

    def _info(self, row: Row) -> TaskInfo:
        """A task and its state from sql.TASK_STATE_COLUMNS."""
        return info_of(row, self._default_routing_key)

    def list_tasks(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[TaskInfo]:
        return self._listing.list_tasks(where, after, limit, interrupt)

    def match_keys(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[Key]:
        return self._listing.match_keys(where, after, limit, interrupt)

    def count_where(
        self, where: TaskFilter, up_to: int | None = None, interrupt: Interrupt | None = None
    ) -> int:
        return self._listing.count_where(where, up_to, interrupt)

    def timeline(
        self,
        where: TaskFilter,
        start_ms: int,
        bucket_ms: int,
        buckets: int,
        interrupt: Interrupt | None = None,
    ) -> Timeline:
        return self._listing.timeline(where, start_ms, bucket_ms, buckets, interrupt)

    def count_tasks(self) -> int:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.COUNT_TASKS)
            row = cur.fetchone()
        return int(row[0]) if row else 0

    def earliest_due_ms(self) -> int | None:
        """The earliest due time (a row waiting for a retry keeps its own)."""
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.EARLIEST_DUE)
            row = cur.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def galera_status(self) -> GaleraStatus | None:
        """The Galera node's view (cluster size, conflicts); None: no Galera."""
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.GALERA_STATUS)
            return status_of(cur.fetchall())

    def database_time_us(self) -> int:
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.DATABASE_TIME_US)
            row = cur.fetchone()
        if row is None or row[0] is None:
            raise StoreError("the database did not tell its time")
        return int(row[0])

    def close(self) -> None:
        self._pool.close()
        self._autocommit_pool.close()
        self._listing.close()
