"""The MySQL backend's steps (:mod:`triggerhook.store.tables`): the
statements of ``store/mysql/sql.py`` on a pooled connection.

Locks: a transaction that writes for a shard locks the shard row first, in
shard order (one statement takes all of them): exclusively for an arming
pass (R3), in shared mode for insert, cancel, reschedule and the rewrite of
a returned event (R6-R8); task rows are locked after. So one arming pass of
a shard and any of those happen one entirely before the other, and no two
of them wait for each other in a cycle (the contract suite races them over
many rows: tests/contract/test_mysql_store.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import astuple
from typing import Any

from triggerhook.domain.arming import BOTTOM, TOP_ID, Mark, Placement, ShardMarks, arm_horizon
from triggerhook.domain.meta import Meta
from triggerhook.errors import StoreError
from triggerhook.interfaces import NewRow
from triggerhook.store.arm_pass import PassReads, split_read
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.connection import ConnectionPool, Cursor, is_duplicate_key
from triggerhook.store.rows import (
    INSERT_CHUNK_BYTES,
    INSERT_CHUNK_ROWS,
    FiredRecord,
    OutboxEntry,
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
from triggerhook.store.tables import DuplicateRow, RowMove

_new_tuple = tuple.__new__

IN_LIST_CHUNK = 2000


class _NotEvery(Exception):
    """Rolls back a one-statement cancel that did not find every id unarmed."""


def arm_reads(held: Mapping[int, ShardMarks], horizon_ms: int, limit: int) -> tuple[str, list[Any]]:
    """The statement of a pass's two reads (sql.ARM_READS) and its values."""
    ranged: list[str] = []
    ranged_params: list[Any] = []
    fresh: list[str] = []
    fresh_params: list[Any] = []
    for shard in sorted(held):
        marks = held[shard]
        (armed_ms, armed_id), gen = marks.armed, marks.gen
        ranged.append(sql.ARM_RANGED_SHARD)
        ranged_params += (shard, armed_ms, arm_horizon(horizon_ms, marks))
        if armed_id == TOP_ID:  # no id sorts after '~': no tie above, all of it below
            fresh.append(sql.ARM_FRESH_UPTO)
            fresh_params += (shard, gen, armed_ms)
            continue
        ranged.append(sql.ARM_RANGED_TIE)
        ranged_params += (shard, armed_ms, armed_id)
        if marks.armed != BOTTOM:  # nothing is at or below the bottom
            fresh += (sql.ARM_FRESH_BELOW, sql.ARM_FRESH_TIE)
            fresh_params += (shard, gen, armed_ms, shard, gen, armed_ms, armed_id)
    statement = sql.ARM_READS.format(
        ranged=" OR ".join(ranged), fresh=" OR ".join(fresh) or "FALSE"
    )
    return statement, [*ranged_params, limit + 1, *fresh_params, limit + 1]


def arm_probe(held: Mapping[int, ShardMarks], bound_ms: int) -> tuple[str, list[Any]]:
    """The skip probe's statement (sql.ARM_PROBE_FRESH) and its values: a
    row exactly when :func:`arm_reads` up to ``bound_ms`` would read one."""
    # The fresh read of a shard ends at arm_horizon: shards sharing it (those
    # one pass armed share a watermark) share a list of pairs.
    fresh: dict[int, list[int]] = {}
    ranged: list[str] = []
    ranged_params: list[Any] = []
    for shard in sorted(held):
        marks = held[shard]
        armed_ms, armed_id = marks.armed
        fresh.setdefault(arm_horizon(bound_ms, marks), []).extend((shard, marks.gen))
        if armed_ms < bound_ms:  # else the range ends at the watermark: nothing above it
            ranged.append(sql.ARM_RANGED_SHARD)
            ranged_params += (shard, armed_ms, bound_ms)
        if armed_id != TOP_ID:
            ranged.append(sql.ARM_RANGED_TIE)
            ranged_params += (shard, armed_ms, armed_id)
    terms = [
        sql.ARM_PROBE_PAIRS.format(pairs=sql.placeholders(len(p) // 2, 2)) for p in fresh.values()
    ]
    fresh_params = [v for upto_ms, pairs in fresh.items() for v in (*pairs, upto_ms)]
    statement = sql.ARM_PROBE_FRESH.format(fresh=" OR ".join(terms))
    if ranged:
        statement += sql.UNION_ALL + sql.ARM_PROBE_RANGED.format(ranged=" OR ".join(ranged))
    return statement, [*fresh_params, *ranged_params]


def _blob(meta: Meta | None) -> bytes | None:
    return None if meta is None else meta_blob(meta)


class MySQLTx:
    """One transaction's steps on ``cur`` (see :class:`triggerhook.store.tables.Tx`)."""

    def __init__(
        self,
        cur: Cursor,
        placement: Callable[[], Placement],
        default_key: str,
        integrity_error: type[Exception],
    ) -> None:
        self.cur = cur
        self._placement = placement
        self._default_key = default_key
        self._integrity_error = integrity_error

    def lock_shards(self, shards: Collection[int], exclusive: bool) -> dict[int, ShardRow]:
        ordered = sorted(set(shards))
        if not ordered:
            return {}
        statement = sql.LOCK_SHARDS_FOR_ARMING if exclusive else sql.LOCK_SHARDS_SHARED
        self.cur.execute(statement.format(shards=sql.placeholders(len(ordered))), ordered)
        return {int(r[0]): ShardRow(*r) for r in self.cur.fetchall()}

    def lock_rows(self, task_ids: Sequence[str]) -> dict[str, TaskRow]:
        found: dict[str, TaskRow] = {}
        for part in chunks(task_ids, IN_LIST_CHUNK):
            self.cur.execute(sql.LOCK_TASKS.format(ids=sql.placeholders(len(part))), part)
            for r in self.cur.fetchall():
                found[r[0]] = TaskRow(*r)
        return found

    def insert_rows(self, rows: Sequence[NewRow], gens: Mapping[int, int]) -> None:
        placement, key = self._placement(), self._default_key
        try:
            # One multi-row statement: all of it or, on a duplicate key, nothing.
            self.cur.executemany(
                sql.INSERT_TASKS, [insert_params(r, placement, gens, key) for r in rows]
            )
        except self._integrity_error as exc:
            if is_duplicate_key(exc):
                raise DuplicateRow from exc
            raise
        for part in chunks(tag_rows([row.task for row in rows]), INSERT_CHUNK_ROWS):
            self.cur.executemany(sql.INSERT_TAGS, part)

    def delete_rows(self, task_ids: Sequence[str]) -> None:
        for part in chunks(task_ids, IN_LIST_CHUNK):
            self.cur.execute(sql.DELETE_TASKS.format(ids=sql.placeholders(len(part))), part)

    def fired_live(self, task_ids: Sequence[str], now_ms: float) -> dict[str, int]:
        found: dict[str, int] = {}
        for part in chunks(task_ids, IN_LIST_CHUNK):
            statement = sql.FIRED_LIVE.format(ids=sql.placeholders(len(part)))
            self.cur.execute(statement, [*part, int(now_ms)])
            found.update((str(r[0]), int(r[1])) for r in self.cur.fetchall())
        return found

    def record_fired(self, records: Sequence[FiredRecord]) -> None:
        if records:
            self.cur.executemany(sql.RECORD_FIRED, [astuple(r) for r in records])

    def mark_dedup(self) -> None:
        self.cur.execute(sql.MARK_DEDUP)

    def take_outbox(self, limit: int) -> list[OutboxEntry]:
        self.cur.execute(sql.OUTBOX_TAKE, (limit,))
        return [outbox_entry(r) for r in self.cur.fetchall()]

    def delete_outbox(self, seqs: Sequence[int]) -> None:
        for part in chunks(seqs, IN_LIST_CHUNK):
            self.cur.execute(sql.OUTBOX_DELETE.format(seqs=sql.placeholders(len(part))), part)

    def set_meta(self, changes: Sequence[tuple[str, Meta]]) -> None:
        for tid, meta in changes:  # rare: one statement each
            self.cur.execute(sql.SET_META, (meta_blob(meta), tid))

    def move_rows(self, moves: Sequence[RowMove]) -> None:
        plain = [m for m in moves if m.meta is None]
        if plain:
            values: list[Any] = [v for m in plain for v in (m.task_id, m.fire_ms, m.rev, m.gen)]
            self._tagged(sql.RESCHEDULE, sql.moves(len(plain)), values, plain)
        series = [m for m in moves if m.meta is not None]
        if series:
            values = [
                v for m in series for v in (m.task_id, m.fire_ms, m.rev, m.gen, _blob(m.meta))
            ]
            self._tagged(sql.ADVANCE, sql.advances(len(series)), values, series)

    def _tagged(
        self, statement: str, derived: str, values: list[Any], moves: Sequence[RowMove]
    ) -> None:
        """The rows' update, and their tag rows' (same moves) when one has tags."""
        self.cur.execute(statement.format(moves=derived), values)
        if any(m.tagged for m in moves):
            self.cur.execute(sql.RESCHEDULE_TAGS.format(moves=derived), values)

    def defer_rows(self, moves: Sequence[RowMove]) -> None:
        for statement, part in (
            (sql.DEFER, [m for m in moves if not m.postponed]),
            (sql.POSTPONE, [m for m in moves if m.postponed]),
        ):
            if part:
                values = [v for m in part for v in (m.task_id, m.fire_ms, m.rev, m.gen)]
                self.cur.execute(statement.format(moves=sql.moves(len(part))), values)

    def read_for_arming(
        self, held: Mapping[int, ShardMarks], horizon_ms: int, limit: int
    ) -> PassReads[TaskRow]:
        """Both reads of every shard (store/arm_pass.py), in one statement."""
        self.cur.execute(*arm_reads(held, horizon_ms, limit))
        parts: tuple[list[TaskRow], list[TaskRow]] = ([], [])
        # tuple.__new__, not TaskRow(*r[1:]): 163 ns a row against 285 (timeit).
        for r in self.cur.fetchall():
            parts[int(r[0])].append(_new_tuple(TaskRow, r[1:]))
        ranged_by, ranged_frontier = split_read(parts[0], limit, row_shard, row_mark)
        fresh_by, fresh_frontier = split_read(parts[1], limit, row_shard, row_mark)
        return PassReads(ranged_by, fresh_by, ranged_frontier, fresh_frontier)

    def any_to_arm(self, held: Mapping[int, ShardMarks], bound_ms: int) -> bool:
        self.cur.execute(*arm_probe(held, bound_ms))
        return bool(self.cur.fetchall())

    def any_due(self, shards: Collection[int], bound_ms: int) -> bool:
        ordered = sorted(shards)
        statement = sql.ANY_DUE.format(shards=sql.placeholders(len(ordered)))
        self.cur.execute(statement, [*ordered, bound_ms])
        return self.cur.fetchone() is not None

    def set_marks(self, marks: Mapping[int, ShardMarks]) -> None:
        """Every changed shard's new marks, in one statement."""
        shards = sorted(marks)
        armed_ms = [v for shard in shards for v in (shard, marks[shard].armed[0])]
        armed_id = [v for shard in shards for v in (shard, marks[shard].armed[1])]
        arm_gen = [v for shard in shards for v in (shard, marks[shard].gen)]
        when = sql.cases(len(shards))
        statement = sql.SET_MARKS.format(
            armed_ms=when, armed_id=when, arm_gen=when, shards=sql.placeholders(len(shards))
        )
        self.cur.execute(statement, [*armed_ms, *armed_id, *arm_gen, *shards])

    def settle(self, task_ids: Sequence[str]) -> None:
        self.cur.execute(sql.ARM_SETTLE.format(ids=sql.placeholders(len(task_ids))), task_ids)


class MySQLTables:
    """The connection side (see :class:`triggerhook.store.tables.Tables`):
    transactions on ``pool``; autocommit statements on ``autocommit``."""

    def __init__(
        self,
        pool: ConnectionPool,
        autocommit: ConnectionPool,
        default_key: str,
        integrity_error: type[Exception],
        placement: Callable[[], Placement],
    ) -> None:
        self._pool = pool
        self._autocommit = autocommit
        self._default_key = default_key
        self._integrity_error = integrity_error
        self._placement = placement  # a callable: read from the database (store/lanes.py)
        # A task with a dedup window was written (sql.DEDUP_FLAG, never
        # cleared): the fast insert path is over. Any thread may set it.
        self.dedup_seen = False

    def _tx(self, cur: Cursor) -> MySQLTx:
        return MySQLTx(cur, self._placement, self._default_key, self._integrity_error)

    @contextlib.contextmanager
    def write(self) -> Iterator[MySQLTx]:
        with self._pool.transaction() as cur:
            yield self._tx(cur)

    @contextlib.contextmanager
    def read(self) -> Iterator[MySQLTx]:
        with self._autocommit.transaction() as cur:
            yield self._tx(cur)

    def insert_fast(self, rows: Sequence[NewRow]) -> bool:
        """Group commit's usual case: rows that fit one statement, none existing,
        none with a dedup window, committed by that statement alone (see
        sql.INSERT_TASKS_LOCKING); once a task with a window was ever
        written, never again (``dedup_seen``)."""
        if (
            self.dedup_seen
            or len(rows) > INSERT_CHUNK_ROWS
            or sum(len(r.task.payload) for r in rows) > INSERT_CHUNK_BYTES
            or any(r.task.meta.tags or r.task.meta.dedup_window_ms for r in rows)
        ):
            return False
        params: list[Any] = []
        shards: set[int] = set()
        placement, key = self._placement(), self._default_key
        for row in rows:
            task = row.task
            shard = placement.shard(task.id, task.routing_key or key)
            shards.add(shard)
            params += (task.id, shard, row.rev, task.due_ms, task.due_ms)
            params += (task.routing_key or self._default_key, task.payload or None)
            params.append(meta_blob(task.meta))
        params += sorted(shards)
        statement = sql.INSERT_TASKS_LOCKING.format(
            rows=sql.new_rows(len(rows)), shards=sql.placeholders(len(shards))
        )
        try:
            with self._autocommit.transaction() as cur:
                inserted = cur.execute(statement, params)
        except StoreError as exc:
            if is_duplicate_key(exc.__cause__ or exc):
                return False
            raise
        if not inserted:  # the dedup flag is set: it stays set
            self.dedup_seen = True
            return False
        return True

    def cancel_unarmed(self, shards: Mapping[str, tuple[int, ...]]) -> bool:
        """The usual case in one statement (sql.CANCEL_UNARMED). Commits only
        when it deleted every id; otherwise rolls back."""
        ids, shard_set = list(shards), sorted({s for each in shards.values() for s in each})
        statement = sql.CANCEL_UNARMED.format(
            shards=sql.placeholders(len(shard_set)), ids=sql.placeholders(len(ids)), armed=sql.ARMED
        )
        try:
            with self._pool.transaction() as cur:
                if cur.execute(statement, [*shard_set, *ids]) != len(ids):
                    raise _NotEvery
        except _NotEvery:
            return False
        return True

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        deleted = 0
        # Each chunk commits by itself: every delete stands alone (R5).
        for part in chunks(fired, IN_LIST_CHUNK):
            params = [value for pair in part for value in pair]
            statement = sql.DELETE_FIRED.format(pairs=sql.placeholders(len(part), width=2))
            with self._autocommit.transaction() as cur:
                deleted += cur.execute(statement, params)
        return int(deleted)

    def outbox_waiting(self) -> tuple[int | None, int]:
        with self._autocommit.transaction() as cur:
            cur.execute(sql.OUTBOX_WAITING)
            oldest, count = cur.fetchall()[0]  # an aggregate: one row
        return (None if oldest is None else int(oldest)), int(count)

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        ordered = sorted(set(shards))
        if not ordered or limit <= 0:
            return 0
        statement = sql.SWEEP_FIRED.format(shards=sql.placeholders(len(ordered)))
        with self._autocommit.transaction() as cur:
            return int(cur.execute(statement, [*ordered, int(now_ms), limit]))

    def inherited(self, shard: int, after: Mark, took: ShardMarks, limit: int) -> list[TaskRow]:
        params = (shard, after[0], after[0], after[1])
        params_took = (took.armed[0], took.armed[0], took.armed[1], took.gen, limit)
        with self._autocommit.transaction() as cur:
            cur.execute(sql.INHERITED, (*params, *params_took))
            return [TaskRow(*r) for r in cur.fetchall()]
