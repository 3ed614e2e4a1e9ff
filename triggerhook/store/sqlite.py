"""An embedded SQLite task store (implements :class:`triggerhook.interfaces.TaskStore`).

For ``triggerhook dev``: one instance, no server, a file (or ``:memory:``).
Not for production: writers take turns on the file's one write lock, and one
file cannot be shared between machines. Durability is WAL with
``synchronous = FULL``: a call that returned has its commit on disk. It is
held to the same contract suite as MySQL (``tests/contract``).

The tables are MySQL's (``store/sqlite_sql.py``; the file, its schema and the
translation of sqlite3's errors: ``store/sqlite_schema.py``), under the rules
of ``docs/design/ownership.md``; what a pass arms is decided by
``domain/arming.py`` through ``store/arm_pass.py``, and what each row means by
``store/rows.py``'s functions, as in the MySQL store. "Now" is this store's
clock (``now_ms``; by default this host's wall clock, which *is* an embedded
database's clock), read in whole milliseconds and bound into the statements.

Where MySQL's answers depend on how it stores a row, this store answers the
same: a NULL routing key reads back as ``default_routing_key`` (and an empty
one is written as it); :meth:`SQLiteStore.get` does not read ``attempts`` and
reports 0.

Threads: one ``sqlite3`` connection (``check_same_thread=False``, no implicit
transactions) serves every thread; ``_lock`` (re-entrant) is held by each
method for its whole transaction, so the connection is used by one thread at
a time and no thread sees another's uncommitted writes. A method that writes
begins with ``BEGIN IMMEDIATE``: SQLite's write lock on the file, held to its
COMMIT. So within a transaction nothing else writes: the locking reads of
the MySQL store are plain reads here. Another process on the same file (a
second daemon, a CLI) waits for that lock up to ``busy_timeout_ms``, then gets
:class:`~triggerhook.errors.StoreUnavailable`, as this store does from it.
Reads run in the same lock, each statement a snapshot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from triggerhook.domain.arming import BOTTOM, Mark, ShardMarks, arm_horizon, is_armed
from triggerhook.domain.listing import Key, TaskFilter, Timeline, timeline_of
from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import ConflictError, InstanceNameInUse
from triggerhook.interfaces import (
    Acquired,
    Armed,
    DeferOutcome,
    Deferral,
    InsertOutcome,
    Lease,
    Move,
    Moved,
    NameHolder,
    NewRow,
    TaskStore,
    new_rev,
)
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store import sqlite_listing
from triggerhook.store import sqlite_sql as q
from triggerhook.store.arm_pass import (
    PassReads,
    PassResult,
    held_only,
    merge_taken,
    plan_pass,
    split_read,
)
from triggerhook.store.rows import (
    Row,
    ShardRow,
    Step,
    TaskRow,
    cancel_result,
    chunks,
    defer_outcome,
    first_wins,
    insert_params,
    is_armed_row,
    meta_blob,
    meta_of,
    next_step,
    repeat_outcome,
    row_mark,
    row_shard,
    split_repeats,
    stopped_series,
)
from triggerhook.store.sqlite_schema import check_version, connect, open_schema, translated

__all__ = ["SQLiteStore"]

ShardRows = dict[int, ShardRow]

log = logging.getLogger(__name__)

# Ids per IN list: far below SQLite's bound on variables (32,766 since 3.32).
_IN_LIST_CHUNK = 500


def _read_shards(
    cur: sqlite3.Cursor, reads: list[tuple[str, tuple[Any, ...]]], most: int
) -> list[TaskRow]:
    """Per-shard reads (in shard order, each in mark order) run until ``most``
    rows in all: the rows one read of every shard in (shard, mark) order with
    LIMIT ``most`` returns (store/arm_pass.py)."""
    rows: list[TaskRow] = []
    for statement, params in reads:
        room = most - len(rows)
        if room <= 0:
            break
        cur.execute(statement, (*params, room))
        rows += [TaskRow(*r) for r in cur.fetchall()]
    return rows


def _arm_reads(
    cur: sqlite3.Cursor, held: dict[int, ShardMarks], horizon_ms: int, limit: int
) -> PassReads[TaskRow]:
    """Both reads of a pass over the ``held`` shards (store/arm_pass.py)."""
    shards = sorted(held.items())
    ranged = [(q.ARM_RANGED, (s, *m.armed, arm_horizon(horizon_ms, m))) for s, m in shards]
    fresh = [(q.ARM_FRESH, (s, m.gen, *m.armed)) for s, m in shards]
    (ranged_by, ranged_cut), (fresh_by, fresh_cut) = (
        split_read(_read_shards(cur, reads, limit + 1), limit, row_shard, row_mark)
        for reads in (ranged, fresh)
    )
    return PassReads(ranged_by, fresh_by, ranged_cut, fresh_cut)


def _nothing_to_arm(
    cur: sqlite3.Cursor,
    held: dict[int, ShardMarks],
    horizon_ms: int,
    limit: int,
    urgent_ms: int | None,
) -> bool:
    """Whether a pass's reads to ``urgent_ms`` (None: the horizon) would
    find nothing: at once when no row is due by what a pass could arm."""
    bound_ms = horizon_ms if urgent_ms is None else min(urgent_ms, horizon_ms)
    top_ms = max(bound_ms, *(marks.armed[0] for marks in held.values()))
    shards = sorted(held)
    cur.execute(q.ANY_DUE.format(shards=q.placeholders(len(shards))), [*shards, top_ms])
    if not cur.fetchall():
        return True
    if urgent_ms is None:
        return False
    probe = _arm_reads(cur, held, bound_ms, limit)
    return not probe.ranged and not probe.fresh


class SQLiteStore:
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
        self._default_routing_key = default_routing_key
        self._clock = now_ms if now_ms is not None else lambda: time.time() * 1000.0
        self._lock = threading.RLock()
        self.driver = f"sqlite3 {sqlite3.sqlite_version}"  # for the logs
        self._conn = connect(path, busy_timeout_ms)
        try:
            with self._transaction() as cur:
                self._shard_count = open_schema(cur, path, shard_count)
        except BaseException:
            self._conn.close()
            raise

    def _now(self) -> int:
        """The store's clock in whole milliseconds (as MySQL's NOW_MS reads it)."""
        return math.floor(self._clock())

    @contextlib.contextmanager
    def _transaction(self, write: bool = True) -> Iterator[sqlite3.Cursor]:
        """The connection for one transaction (``write``: under SQLite's write
        lock, committed at the end, rolled back on any exception), or for
        reads; sqlite3 errors are translated."""
        with self._lock:
            try:
                cur = self._conn.cursor()
                if write:
                    cur.execute(q.BEGIN_IMMEDIATE)
                try:
                    yield cur
                    if write:
                        cur.execute(q.COMMIT)
                finally:
                    if self._conn.in_transaction:  # an exception, or a failed COMMIT
                        with contextlib.suppress(sqlite3.Error):
                            self._conn.rollback()
            except sqlite3.Error as exc:
                raise translated(exc, self._path) from exc

    def _read(self) -> contextlib.AbstractContextManager[sqlite3.Cursor]:
        return self._transaction(write=False)

    def _one(self, statement: str, params: Sequence[Any] = ()) -> Row | None:
        with self._read() as cur:
            cur.execute(statement, params)
            rows = cur.fetchall()  # to the end: the statement is done with
        return rows[0] if rows else None

    def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the file holds this release's schema."""
        with self._read() as cur:
            check_version(cur, self._path)

    def shard_count(self) -> int:
        return self._shard_count

    # -- rows <-> tasks -------------------------------------------------------------------

    def _content(self, row: Row) -> Task:
        """A task as get and the duplicate check compare it, from q.CONTENT_COLUMNS."""
        task_id, due_ms, routing_key, payload, meta = row
        key = routing_key or self._default_routing_key
        return Task(task_id, due_ms, key, bytes(payload or b""), meta=meta_of(meta, task_id))

    def _task(self, row: TaskRow, epoch: int = 0) -> Task:
        """A row as armed: its content, attempts, revision, shard and fire time."""
        content = self._content((row.id, row.due_ms, row.routing_key, row.payload, row.meta))
        return dataclasses.replace(
            content,
            attempts=row.attempts,
            rev=row.rev,
            shard=row.shard,
            epoch=epoch,
            fire_ms=row.fire_ms,
        )

    def _info(self, row: Row) -> TaskInfo:
        """A task and its state from q.TASK_STATE_COLUMNS."""
        marks = ShardMarks((row[7], row[8]), row[9])
        armed = is_armed((row[5], row[0]), row[6], marks)
        return TaskInfo(self._content(row[:5]), TaskState.FIRING if armed else TaskState.SCHEDULED)

    @staticmethod
    def _shards(cur: sqlite3.Cursor) -> dict[int, ShardRow]:
        cur.execute(q.SELECT_SHARDS)
        return {int(r[0]): ShardRow(*r) for r in cur.fetchall()}

    @staticmethod
    def _by_ids(cur: sqlite3.Cursor, statement: str, ids: Sequence[str]) -> list[Row]:
        found: list[Row] = []
        for part in chunks(ids, _IN_LIST_CHUNK):
            cur.execute(statement.format(ids=q.placeholders(len(part))), list(part))
            found += cur.fetchall()
        return found

    def _rows(self, cur: sqlite3.Cursor, ids: Sequence[str]) -> dict[str, TaskRow]:
        return {r[0]: TaskRow(*r) for r in self._by_ids(cur, q.SELECT_TASKS_BY_IDS, ids)}

    # -- R6: insert -----------------------------------------------------------------

    def insert(self, rows: Sequence[NewRow], atomic: bool) -> list[InsertOutcome]:
        if not rows:
            return []
        first, repeats = split_repeats(rows)
        outcomes: list[InsertOutcome] = [InsertOutcome.CREATED] * len(rows)
        with self._transaction() as cur:
            stored = {
                r[0]: self._content(r)
                for r in self._by_ids(
                    cur, q.SELECT_CONTENT_BY_IDS, [rows[i].task.id for i in first]
                )
            }
            for i in first:
                existing = stored.get(rows[i].task.id)
                if existing is not None:  # compared as read back
                    same = existing == rows[i].task
                    outcomes[i] = InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT
            for index, earlier in repeats.items():
                outcomes[index] = repeat_outcome(rows[index], rows[earlier], outcomes[earlier])
            if atomic and InsertOutcome.CONFLICT in outcomes:
                raise ConflictError(rows[outcomes.index(InsertOutcome.CONFLICT)].task.id)
            new = [rows[i] for i in first if outcomes[i] is InsertOutcome.CREATED]
            self._write_new(cur, new)
        return outcomes

    def _write_new(self, cur: sqlite3.Cursor, new: Sequence[NewRow]) -> None:
        """The rows, unarmed in their shards' current generations (R6), and their tags."""
        if not new:
            return
        gens = {shard: row.arm_gen for shard, row in self._shards(cur).items()}
        key = self._default_routing_key
        cur.executemany(
            q.INSERT_TASK, [insert_params(row, self._shard_count, gens, key) for row in new]
        )
        tags = [(tag, r.task.due_ms, r.task.id) for r in new for tag in r.task.meta.tags]
        cur.executemany(q.INSERT_TAG, tags)

    # -- R3: arming -----------------------------------------------------------------

    def arm(
        self,
        instance: str,
        leases: Sequence[Lease],
        horizon_ms: int,
        limit: int,
        urgent_ms: int | None = None,
        unanswered: Mapping[Lease, frozenset[str]] | None = None,
    ) -> Armed:
        """R3; R3a's ids are settled as the contract says (an in-process
        COMMIT loses no answer: no pass here raises ArmUnanswered)."""
        epochs = {lease.shard: lease.epoch for lease in leases}
        if not epochs:
            return Armed([], [])
        with self._transaction() as cur:
            shards = self._shards(cur)
            held = {
                s: shards[s].marks
                for s, epoch in epochs.items()
                if s in shards and shards[s].held_by(instance, epoch)
            }
            lost = sorted(set(epochs) - set(held))
            if not held or limit <= 0:
                return Armed([], lost)
            again = self._armed_unanswered(cur, held_only(unanswered, held, epochs), shards)
            room = limit - sum(map(len, again.values()))
            if not unanswered and _nothing_to_arm(cur, held, horizon_ms, limit, urgent_ms):
                return Armed([], lost, skipped=urgent_ms is not None)
            result: PassResult[TaskRow] = PassResult()
            if room > 0:
                reads = _arm_reads(cur, held, horizon_ms, room)
                result = plan_pass(held, reads, horizon_ms, room, row_mark)
            marks = [(m.armed[0], m.armed[1], m.gen, s) for s, m in result.marks.items()]
            cur.executemany(q.SET_MARKS, marks)
            cur.executemany(q.ARM_SETTLE, [(row.id,) for row in result.settle])
        taken = merge_taken(again, result.taken, row_mark)
        tasks = [self._task(row, epochs[s]) for s, rows in taken.items() for row in rows]
        return Armed(tasks, lost, len(result.settle))

    def _armed_unanswered(
        self, cur: sqlite3.Cursor, unanswered: Mapping[Lease, frozenset[str]], shards: ShardRows
    ) -> dict[int, list[TaskRow]]:
        """R3a: of those ids (of leases held), the rows armed now, per shard."""
        mine = {i: lease.shard for lease, ids in unanswered.items() for i in ids}
        found: dict[int, list[TaskRow]] = {}
        for row in sorted(self._rows(cur, sorted(mine)).values(), key=row_mark):
            if mine[row.id] == row.shard and is_armed_row(row, shards):
                found.setdefault(row.shard, []).append(row)
        return found

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        if limit <= 0:
            return [], None
        took, start = acquired.took, BOTTOM if after is None else after
        params = (acquired.lease.shard, *start, *took.armed, took.gen, limit)
        with self._read() as cur:
            cur.execute(q.INHERITED, params)
            rows = [TaskRow(*r) for r in cur.fetchall()]
        tasks = [self._task(row, acquired.lease.epoch) for row in rows]
        return tasks, (rows[-1].mark if rows else None)

    # -- R5, R8 ------------------------------------------------------------------------

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        if not fired:
            return 0
        with self._transaction() as cur:
            cur.executemany(q.DELETE_FIRED, list(dict.fromkeys(fired)))
            return int(cur.rowcount)

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        if not deferrals:
            return []
        outcomes: list[DeferOutcome] = []
        with self._transaction() as cur:
            shards = self._shards(cur)
            for d in deferrals:  # one by one: a second deferral of a row finds its new revision
                row = self._rows(cur, [d.task.id]).get(d.task.id)
                shard = shards.get(d.task.shard)
                outcome = defer_outcome(instance, d, shard, row)
                if shard is not None and outcome is DeferOutcome.DEFERRED:
                    cur.execute(q.DEFER, (d.not_before_ms, d.new_rev, shard.arm_gen, d.task.id))
                outcomes.append(outcome)
        return outcomes

    # -- R5s: a series' next occurrence ---------------------------------------------------

    def advance(self, fired: Sequence[Task], now_ms: float) -> int:
        if not fired:
            return 0
        last = {task.id: task for task in fired}
        with self._transaction() as cur:
            shards = self._shards(cur)
            rows = self._rows(cur, list(last))
            steps = [next_step(rows.get(tid), task, now_ms) for tid, task in last.items()]
            taken = [step for step in steps if step is not None]
            for step in taken:
                self._write_step(cur, step, shards[step.row.shard].arm_gen)
        return len(taken)

    @staticmethod
    def _write_step(cur: sqlite3.Cursor, step: Step, gen: int) -> None:
        """The next occurrence, unarmed in generation ``gen``, or the end of the series."""
        if step.due_ms is None:
            cur.execute(q.DELETE_TASK, (step.row.id,))
            return
        due, tid = step.due_ms, step.row.id
        cur.execute(q.ADVANCE, (due, due, new_rev(), gen, meta_blob(step.meta), tid))
        if step.meta.tags:
            cur.execute(q.MOVE_TAGS, (due, tid))

    # -- R7: cancel, R6: reschedule -----------------------------------------------------

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        if not task_ids:
            return []
        results = dict.fromkeys(task_ids, CancelResult.NOT_FOUND)
        with self._transaction() as cur:
            shards = self._shards(cur)
            found = self._rows(cur, list(results))
            for tid, row in found.items():
                results[tid] = cancel_result(is_armed_row(row, shards))
            gone = [(tid,) for tid, result in results.items() if result is CancelResult.CANCELLED]
            cur.executemany(q.DELETE_TASK, gone)
            late = [found[tid] for tid, r in results.items() if r is CancelResult.TOO_LATE]
            stops = [(meta_blob(meta), tid) for tid, meta in stopped_series(late)]
            cur.executemany(q.SET_META, stops)
        return first_wins(task_ids, results)

    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        if not moves:
            return []
        last = {move.task_id: move for move in moves}  # an id moved twice: the last move
        moved = {tid: Moved(RescheduleResult.NOT_FOUND) for tid in last}
        with self._transaction() as cur:
            shards = self._shards(cur)
            for tid, row in self._rows(cur, list(last)).items():
                if is_armed_row(row, shards):
                    moved[tid] = Moved(RescheduleResult.TOO_LATE)
                    continue
                move = last[tid]
                gen = shards[row.shard].arm_gen
                cur.execute(q.RESCHEDULE, (move.due_ms, move.due_ms, move.rev, gen, tid))
                cur.execute(q.MOVE_TAGS, (move.due_ms, tid))
                task = self._content((tid, move.due_ms, row.routing_key, row.payload, row.meta))
                moved[tid] = Moved(RescheduleResult.RESCHEDULED, task)
        return [moved[move.task_id] for move in moves]

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
        with self._read() as cur, sqlite_listing.bounded(self._conn, timeout_ms, interrupt):
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
