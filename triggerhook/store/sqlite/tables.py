"""The SQLite backend's steps (:mod:`triggerhook.store.tables`): the
statements of ``sqlite/sql.py`` run on the store's one connection.

Every write transaction holds SQLite's write lock on the file from its
``BEGIN IMMEDIATE`` to its COMMIT, so nothing else writes meanwhile: the
"locks" of the seam are plain reads here.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import astuple
from typing import Any

from triggerhook.domain.arming import Mark, Placement, ShardMarks, arm_horizon
from triggerhook.domain.meta import Meta
from triggerhook.interfaces import NewRow
from triggerhook.store.arm_pass import PassReads, split_read
from triggerhook.store.rows import (
    FiredRecord,
    OutboxEntry,
    Row,
    ShardRow,
    TaskRow,
    chunks,
    insert_params,
    meta_blob,
    outbox_entry,
    row_mark,
    row_shard,
    tag_rows,
)
from triggerhook.store.sqlite import sql as q
from triggerhook.store.sqlite.schema import translated
from triggerhook.store.tables import DuplicateRow, RowMove

# Ids per IN list: far below SQLite's bound on variables (32,766 since 3.32).
IN_LIST_CHUNK = 500


class SQLiteTx:
    """One transaction's steps on ``cur`` (see :class:`triggerhook.store.tables.Tx`)."""

    def __init__(self, cur: sqlite3.Cursor, placement: Placement, default_key: str) -> None:
        self.cur = cur
        self._placement = placement
        self._default_key = default_key

    def _by_ids(self, statement: str, ids: Sequence[str]) -> list[Row]:
        found: list[Row] = []
        for part in chunks(ids, IN_LIST_CHUNK):
            self.cur.execute(statement.format(ids=q.placeholders(len(part))), list(part))
            found += self.cur.fetchall()
        return found

    def lock_shards(self, shards: Collection[int], exclusive: bool) -> dict[int, ShardRow]:
        self.cur.execute(q.SELECT_SHARDS)
        wanted = set(shards)
        return {int(r[0]): ShardRow(*r) for r in self.cur.fetchall() if int(r[0]) in wanted}

    def lock_rows(self, task_ids: Sequence[str]) -> dict[str, TaskRow]:
        return {r[0]: TaskRow(*r) for r in self._by_ids(q.SELECT_TASKS_BY_IDS, task_ids)}

    def insert_rows(self, rows: Sequence[NewRow], gens: Mapping[int, int]) -> None:
        if self._by_ids(q.SELECT_IDS, [row.task.id for row in rows]):
            raise DuplicateRow
        placement, key = self._placement, self._default_key
        self.cur.executemany(q.INSERT_TASK, [insert_params(r, placement, gens, key) for r in rows])
        self.cur.executemany(q.INSERT_TAG, tag_rows([row.task for row in rows]))

    def delete_rows(self, task_ids: Sequence[str]) -> None:
        self.cur.executemany(q.DELETE_TASK, [(tid,) for tid in task_ids])

    def fired_live(self, task_ids: Sequence[str], now_ms: float) -> dict[str, int]:
        found: dict[str, int] = {}
        for part in chunks(task_ids, IN_LIST_CHUNK):
            statement = q.FIRED_LIVE.format(ids=q.placeholders(len(part)))
            self.cur.execute(statement, [*part, int(now_ms)])
            found.update((str(r[0]), int(r[1])) for r in self.cur.fetchall())
        return found

    def record_fired(self, records: Sequence[FiredRecord]) -> None:
        self.cur.executemany(q.RECORD_FIRED, [astuple(r) for r in records])

    def mark_dedup(self) -> None:
        pass  # no fast insert path here (insert_fast): nothing to turn off

    def take_outbox(self, limit: int) -> list[OutboxEntry]:
        self.cur.execute(q.OUTBOX_TAKE, (limit,))
        return [outbox_entry(r) for r in self.cur.fetchall()]

    def delete_outbox(self, seqs: Sequence[int]) -> None:
        self.cur.executemany(q.OUTBOX_DELETE, [(seq,) for seq in seqs])

    def set_meta(self, changes: Sequence[tuple[str, Meta]]) -> None:
        self.cur.executemany(q.SET_META, [(meta_blob(meta), tid) for tid, meta in changes])

    def move_rows(self, moves: Sequence[RowMove]) -> None:
        for m in moves:
            if m.meta is None:
                self.cur.execute(q.RESCHEDULE, (m.fire_ms, m.fire_ms, m.rev, m.gen, m.task_id))
            else:
                values = (m.fire_ms, m.fire_ms, m.rev, m.gen, meta_blob(m.meta), m.task_id)
                self.cur.execute(q.ADVANCE, values)
            if m.tagged:
                self.cur.execute(q.MOVE_TAGS, (m.fire_ms, m.task_id))

    def defer_rows(self, moves: Sequence[RowMove]) -> None:
        for statement, part in (
            (q.DEFER, [m for m in moves if not m.postponed]),
            (q.POSTPONE, [m for m in moves if m.postponed]),
        ):
            if part:
                values = [(m.fire_ms, m.rev, m.gen, m.task_id) for m in part]
                self.cur.executemany(statement, values)

    def _read_shards(self, reads: list[tuple[str, tuple[Any, ...]]], most: int) -> list[TaskRow]:
        """Per-shard reads (in shard order, each in mark order) run until
        ``most`` rows in all: the rows one read of every shard in (shard,
        mark) order with LIMIT ``most`` returns (store/arm_pass.py)."""
        rows: list[TaskRow] = []
        for statement, params in reads:
            room = most - len(rows)
            if room <= 0:
                break
            self.cur.execute(statement, (*params, room))
            rows += [TaskRow(*r) for r in self.cur.fetchall()]
        return rows

    def read_for_arming(
        self, held: Mapping[int, ShardMarks], horizon_ms: int, limit: int
    ) -> PassReads[TaskRow]:
        shards = sorted(held.items())
        ranged = [(q.ARM_RANGED, (s, *m.armed, arm_horizon(horizon_ms, m))) for s, m in shards]
        fresh = [(q.ARM_FRESH, (s, m.gen, *m.armed)) for s, m in shards]
        (ranged_by, ranged_cut), (fresh_by, fresh_cut) = (
            split_read(self._read_shards(reads, limit + 1), limit, row_shard, row_mark)
            for reads in (ranged, fresh)
        )
        return PassReads(ranged_by, fresh_by, ranged_cut, fresh_cut)

    def any_to_arm(self, held: Mapping[int, ShardMarks], bound_ms: int) -> bool:
        # The reads themselves, stopped at a row: SQLite's statements are
        # per shard already, with no optimizer cost worth a shape of their own.
        reads = self.read_for_arming(held, bound_ms, 1)
        return bool(reads.ranged or reads.fresh)

    def any_due(self, shards: Collection[int], bound_ms: int) -> bool:
        ordered = sorted(shards)
        self.cur.execute(
            q.ANY_DUE.format(shards=q.placeholders(len(ordered))), [*ordered, bound_ms]
        )
        return bool(self.cur.fetchall())

    def set_marks(self, marks: Mapping[int, ShardMarks]) -> None:
        values = [(m.armed[0], m.armed[1], m.gen, s) for s, m in marks.items()]
        self.cur.executemany(q.SET_MARKS, values)

    def settle(self, task_ids: Sequence[str]) -> None:
        self.cur.executemany(q.ARM_SETTLE, [(tid,) for tid in task_ids])


def _unset() -> Placement:
    raise RuntimeError("the store opens its schema before any transaction")


class SQLiteTables:
    """The connection side (see :class:`triggerhook.store.tables.Tables`).

    Threads: one ``sqlite3`` connection serves every thread; ``lock`` (re-
    entrant) is held for each transaction, so the connection is used by one
    thread at a time and no thread sees another's uncommitted writes.
    """

    def __init__(self, conn: sqlite3.Connection, path: str, default_key: str) -> None:
        self.conn = conn
        self.lock = threading.RLock()
        # Set by the store once the schema is open (store/lanes.py).
        self.placement: Callable[[], Placement] = _unset
        self._path = path
        self._default_key = default_key

    @contextlib.contextmanager
    def transaction(self, write: bool = True) -> Iterator[sqlite3.Cursor]:
        """The connection for one transaction (``write``: under SQLite's write
        lock, committed at the end, rolled back on any exception), or for
        reads; sqlite3 errors are translated."""
        with self.lock:
            try:
                cur = self.conn.cursor()
                if write:
                    cur.execute(q.BEGIN_IMMEDIATE)
                try:
                    yield cur
                    if write:
                        cur.execute(q.COMMIT)
                finally:
                    if self.conn.in_transaction:  # an exception, or a failed COMMIT
                        with contextlib.suppress(sqlite3.Error):
                            self.conn.rollback()
            except sqlite3.Error as exc:
                raise translated(exc, self._path) from exc

    @contextlib.contextmanager
    def write(self) -> Iterator[SQLiteTx]:
        placement = self.placement()  # before: its first read is a transaction too
        with self.transaction() as cur:
            yield SQLiteTx(cur, placement, self._default_key)

    @contextlib.contextmanager
    def read(self) -> Iterator[SQLiteTx]:
        placement = self.placement()  # before: its first read is a transaction too
        with self.transaction(write=False) as cur:
            yield SQLiteTx(cur, placement, self._default_key)

    def insert_fast(self, rows: Sequence[NewRow]) -> bool:
        return False  # in-process: the general path costs no round trips

    def cancel_unarmed(self, shards: Mapping[str, tuple[int, ...]]) -> bool:
        return False

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        with self.transaction() as cur:
            cur.executemany(q.DELETE_FIRED, list(fired))
            return int(cur.rowcount)

    def outbox_waiting(self) -> tuple[int | None, int]:
        with self.transaction(write=False) as cur:
            cur.execute(q.OUTBOX_WAITING)
            oldest, count = cur.fetchone()
        return (None if oldest is None else int(oldest)), int(count)

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        ordered = sorted(set(shards))
        if not ordered or limit <= 0:
            return 0
        statement = q.SWEEP_FIRED.format(shards=q.placeholders(len(ordered)))
        with self.transaction() as cur:
            cur.execute(statement, [*ordered, int(now_ms), limit])
            return int(cur.rowcount)

    def inherited(self, shard: int, after: Mark, took: ShardMarks, limit: int) -> list[TaskRow]:
        params = (shard, *after, *took.armed, took.gen, limit)
        with self.transaction(write=False) as cur:
            cur.execute(q.INHERITED, params)
            return [TaskRow(*r) for r in cur.fetchall()]
