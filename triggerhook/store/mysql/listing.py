"""The MySQL store's reads of many tasks: listing, counting, the timeline and
a bulk cancel's batches (their statements: ``store/mysql/queries.py``).

They run on a connection pool of their own, apart from the engine's, with a
per-session time limit (``listing_timeout_ms``): MariaDB's
``max_statement_time``, MySQL's ``max_execution_time``. A read the server
stops there is :class:`~triggerhook.errors.TooCostly` (not transient: the same
read costs as much again), so however large the table, one read costs at most
that long and a caller that gave up leaves nothing running behind it. The
engine's own statements keep their limits (ConnectionPool).

A read given an :class:`~triggerhook.runtime.interrupt.Interrupt` is cut
short when it is set (its HTTP client went away, the daemon stops): the
interrupt sends ``KILL QUERY`` for the session running the statement, from a
connection opened for it, and the read raises
:class:`~triggerhook.errors.Interrupted`. A kill that arrives after the
statement ended finds the session idle, which a ``KILL QUERY`` leaves as it
was (the interrupt's lock keeps it from reaching a later statement).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial

from triggerhook.domain.listing import Key, TaskFilter, Timeline, timeline_of
from triggerhook.domain.task import TaskInfo, TaskState
from triggerhook.errors import Interrupted, StoreError, TransientError, TriggerHookError
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store.mysql import queries, sql
from triggerhook.store.mysql.connection import ConnectionPool, Cursor, Target, open_connection
from triggerhook.store.mysql.queries import ArmedShards, Built
from triggerhook.store.rows import Row

__all__ = ["ListingReads"]

log = logging.getLogger(__name__)


class ListingReads:
    """Thread-safe: each read borrows one of ``pool_size`` connections."""

    def __init__(
        self,
        to: Target,
        info: Callable[[Row], TaskInfo],
        default_routing_key: str,
        timeout_ms: int,
        pool_size: int,
        recycle_s: float,
        ping_idle_s: float,
    ) -> None:
        """``info``: a task and its state from a row of sql.TASK_STATE_COLUMNS;
        ``timeout_ms``: the statement time limit; the rest: the pool's."""
        self._target = to
        self._info = info
        self._default_routing_key = default_routing_key
        self._pool = ConnectionPool(
            to,
            pool_size,
            autocommit=True,
            recycle_s=recycle_s,
            ping_idle_s=ping_idle_s,
            statement_timeout_ms=timeout_ms,
        )

    def list_tasks(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None
    ) -> list[TaskInfo]:
        armed = self._armed(where, interrupt)
        if armed is None:
            return []
        rows = self._query(queries.list_tasks(where, after, limit, armed), interrupt)
        return [self._info(row) for row in rows]

    def match_keys(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None
    ) -> list[Key]:
        rows = self._query(queries.match_keys(where, after, limit), interrupt)
        return [(int(row[0]), str(row[1])) for row in rows]

    def count_where(self, where: TaskFilter, up_to: int | None, interrupt: Interrupt | None) -> int:
        armed = self._armed(where, interrupt)
        if armed is None:
            return 0
        rows = self._query(queries.count(where, up_to, armed), interrupt)
        return int(rows[0][0]) if rows else 0

    def timeline(
        self,
        where: TaskFilter,
        start_ms: int,
        bucket_ms: int,
        buckets: int,
        interrupt: Interrupt | None,
    ) -> Timeline:
        built = queries.timeline(where, start_ms, bucket_ms, buckets)
        rows = self._query(built, interrupt)
        return timeline_of(rows, start_ms, bucket_ms, buckets, self._default_routing_key)

    def _armed(self, where: TaskFilter, interrupt: Interrupt | None) -> ArmedShards | None:
        """For ``state=firing``, the shards' marks that bound the read (None:
        no shard armed anything, so no task is armed); else none needed."""
        if where.state is not TaskState.FIRING:
            return ()
        rows = self._query(queries.armed_shards(), interrupt)
        return [(int(shard), int(armed_ms)) for shard, armed_ms in rows] or None

    def _query(self, built: Built, interrupt: Interrupt | None) -> list[Row]:
        try:
            with self._pool.transaction() as cur, self._cut_by(interrupt, cur):
                cur.execute(*built)
                return list(cur.fetchall())
        except (StoreError, TransientError) as exc:
            # The statement a KILL QUERY stopped, or the session it broke.
            if interrupt is not None and interrupt.is_set:
                raise Interrupted(f"stopped: {interrupt.why}") from exc
            raise

    def _cut_by(
        self, interrupt: Interrupt | None, cur: Cursor
    ) -> contextlib.AbstractContextManager[None]:
        if interrupt is None:
            return contextlib.nullcontext()
        return interrupt.cutting(partial(self._kill, cur.connection.thread_id()))

    def _kill(self, session: int) -> None:
        """Stop the statement ``session`` runs (the interrupt's cut: on the
        thread that set it)."""
        try:
            conn = open_connection(self._target, autocommit=True)
        except TriggerHookError as exc:
            log.warning("could not stop a listing read (session %d): %s", session, exc)
            return
        try:
            with conn.cursor() as cur:
                cur.execute(sql.KILL_QUERY, (session,))
        except (self._target.driver.errors.error, OSError) as exc:  # ended already: 1094
            log.info("KILL QUERY %d: %s", session, exc)
        finally:
            with contextlib.suppress(self._target.driver.errors.error, OSError):
                conn.close()

    def close(self) -> None:
        self._pool.close()
