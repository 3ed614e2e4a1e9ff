"""The MySQL/MariaDB task store (implements :class:`triggerhook.interfaces.TaskStore`).

The protocol is ``docs/design/ownership.md`` (rules R1-R10), the SQL is in
``store/sql.py``, and what a pass arms is decided by ``domain/arming.py``
through ``store/arm_pass.py`` (the memory store applies the same functions).
Every "now" is the server's, computed in the statement (:data:`sql.NOW_MS`).

Locks: a transaction that writes for a shard locks the shard row first, in
shard order: arming exclusively (R3), insert, cancel, reschedule and the
rewrite of a returned event in shared mode (R6-R8), each with one statement
that takes all its shard locks before anything else; task rows are locked
after. So one arming pass of a shard and any of those happen one entirely
before the other, and no two of them wait for each other in a cycle (the
contract suite races them over many rows: tests/contract/test_mysql_store.py).

Round trips (each statement is one; a transaction adds its COMMIT):

* insert: 1 (one autocommit statement, when no id exists and the batch fits
  one statement), else lock, insert per chunk (and a look at the ids that
  exist), commit;
* arm: 1 after a pass that armed nothing, if it again finds nothing (one
  unlocked read); else lock, read, commit (3), plus the marks (4) and, rarely,
  the settled rows (store/arm_pass.py);
* cancel, reschedule and defer: 4 (lock shards, lock rows, write, commit);
* delete_fired: 1 per 2,000 rows; renew 2; release 1; acquire 3.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from triggerhook.domain.arming import (
    BOTTOM,
    TOP_ID,
    Mark,
    ShardMarks,
    arm_horizon,
    is_armed,
    shard_of,
)
from triggerhook.domain.listing import Key, TaskFilter, Timeline
from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import (
    ConflictError,
    InstanceNameInUse,
    SchemaError,
    StoreError,
    TransientError,
)
from triggerhook.interfaces import (
    Acquired,
    Armed,
    ArmUnanswered,
    DeferOutcome,
    Deferral,
    InsertOutcome,
    Lease,
    Move,
    Moved,
    NameHolder,
    NewRow,
    new_rev,
)
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store import sql
from triggerhook.store.arm_pass import (
    PassReads,
    PassResult,
    held_only,
    merge_taken,
    plan_pass,
    split_read,
)
from triggerhook.store.connection import (
    ConnectionPool,
    Cursor,
    is_duplicate_key,
    target,
)
from triggerhook.store.galera import GaleraStatus, status_of
from triggerhook.store.mysql_listing import ListingReads
from triggerhook.store.rows import (
    INSERT_CHUNK_BYTES,
    INSERT_CHUNK_ROWS,
    Row,
    ShardRow,
    Step,
    TaskRow,
    cancel_result,
    chunks,
    defer_outcome,
    first_wins,
    insert_chunks,
    insert_params,
    insert_tags,
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
from triggerhook.store.schema import init_schema, read_shard_count, read_version

# init_schema lives in store/schema.py; it is imported from here too, as before.
__all__ = ["MySQLStore", "init_schema"]

log = logging.getLogger(__name__)

_IN_LIST_CHUNK = 2000
_DUPLICATE_RETRIES = 3
_REGISTER_TRIES = 3


class _NotEvery(Exception):
    """Rolls back a one-statement cancel that did not find every id unarmed."""


def _schema_hint(version: int) -> str:
    if version == 0:
        return "run `triggerhook db init`"
    if version < sql.SCHEMA_VERSION:
        return "stop every instance, then run `triggerhook db upgrade`"
    return "this release is older than the database: run the release that upgraded it"


def _pairs(leases: Iterable[Lease]) -> list[int]:
    return [value for lease in leases for value in (lease.shard, lease.epoch)]


def arm_reads(held: dict[int, ShardMarks], horizon_ms: int, limit: int) -> tuple[str, list[Any]]:
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


class MySQLStore:
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
        # Reads of many tasks (store/mysql_listing.py): a pool and time limit of their own.
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
        # The armer thread's hints (see _nothing_to_arm): the marks each lease's
        # shard had after the last locked pass, and whether it armed nothing.
        self._arm_cache: dict[int, tuple[int, ShardMarks]] = {}
        self._probe_next = False

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

    def _shard(self, task_id: str) -> int | None:
        """The id's shard; None for an id no row can have (not ASCII)."""
        try:
            return shard_of(task_id, self.shard_count())
        except UnicodeEncodeError:
            return None

    def _shards_of(self, task_ids: Sequence[str]) -> dict[str, int]:
        """Each distinct id that a row can have, with its shard, in order."""
        found: dict[str, int] = {}
        for tid in task_ids:
            shard = self._shard(tid)
            if shard is not None:
                found[tid] = shard
        return found

    def _task(self, row: TaskRow, epoch: int = 0) -> Task:
        return Task(
            row.id,
            row.due_ms,
            row.routing_key or self._default_routing_key,
            bytes(row.payload or b""),
            row.attempts,
            row.rev,
            row.shard,
            epoch,
            row.fire_ms,
            meta_of(row.meta, row.id),
        )

    def _content(self, row: Row) -> Task:
        """A task as get and the duplicate check compare it (no attempts,
        rev), from sql.CONTENT_COLUMNS."""
        return Task(
            row[0],
            row[1],
            row[2] or self._default_routing_key,
            bytes(row[3] or b""),
            meta=meta_of(row[4], row[0]),
        )

    # -- shard and task row locks ---------------------------------------------------

    @staticmethod
    def _lock_shards(cur: Cursor, shards: Iterable[int], statement: str) -> dict[int, ShardRow]:
        ordered = sorted(set(shards))
        if not ordered:
            return {}
        cur.execute(statement.format(shards=sql.placeholders(len(ordered))), ordered)
        return {int(r[0]): ShardRow(*r) for r in cur.fetchall()}

    def _lock_shared(self, cur: Cursor, shards: Iterable[int]) -> dict[int, ShardRow]:
        return self._lock_shards(cur, shards, sql.LOCK_SHARDS_SHARED)

    @staticmethod
    def _lock_tasks(cur: Cursor, ids: Sequence[str]) -> dict[str, TaskRow]:
        found: dict[str, TaskRow] = {}
        for part in chunks(ids, _IN_LIST_CHUNK):
            cur.execute(sql.LOCK_TASKS.format(ids=sql.placeholders(len(part))), part)
            for r in cur.fetchall():
                found[r[0]] = TaskRow(*r)
        return found

    # -- R6: insert -----------------------------------------------------------------

    def insert(self, rows: Sequence[NewRow], atomic: bool) -> list[InsertOutcome]:
        if not rows:
            return []
        first, repeats = split_repeats(rows)
        if not repeats and self._insert_one_statement(rows):
            return [InsertOutcome.CREATED] * len(rows)
        outcomes: list[InsertOutcome | None] = [None] * len(rows)
        count = self.shard_count()
        with self._pool.transaction() as cur:
            locked = self._lock_shared(cur, (shard_of(rows[i].task.id, count) for i in first))
            gens = {shard: row.arm_gen for shard, row in locked.items()}
            for chunk in insert_chunks([rows[i] for i in first], first):
                self._insert_chunk(cur, rows, chunk, gens, outcomes)
            for index, earlier in repeats.items():
                outcomes[index] = repeat_outcome(rows[index], rows[earlier], outcomes[earlier])
            if atomic:
                for index, outcome in enumerate(outcomes):
                    if outcome is InsertOutcome.CONFLICT:
                        raise ConflictError(rows[index].task.id)
        return [o or InsertOutcome.CONFLICT for o in outcomes]

    def _insert_one_statement(self, rows: Sequence[NewRow]) -> bool:
        """Group commit's usual case: rows that fit one statement, none existing,
        committed by that statement alone (see sql.INSERT_TASKS_LOCKING). False:
        take the general path."""
        if (
            len(rows) > INSERT_CHUNK_ROWS
            or sum(len(r.task.payload) for r in rows) > INSERT_CHUNK_BYTES
            or any(r.task.meta.tags for r in rows)  # tag rows: the general path
        ):
            return False
        count = self.shard_count()
        params: list[Any] = []
        shards: set[int] = set()
        for row in rows:
            task, shard = row.task, shard_of(row.task.id, count)
            shards.add(shard)
            params += (task.id, shard, row.rev, task.due_ms, task.due_ms)
            params += (task.routing_key or self._default_routing_key, task.payload or None)
            params.append(meta_blob(task.meta))
        params += sorted(shards)
        statement = sql.INSERT_TASKS_LOCKING.format(
            rows=sql.new_rows(len(rows)), shards=sql.placeholders(len(shards))
        )
        try:
            with self._autocommit_pool.transaction() as cur:
                cur.execute(statement, params)
        except StoreError as exc:
            if is_duplicate_key(exc.__cause__ or exc):
                return False
            raise
        return True

    def _insert_chunk(
        self,
        cur: Cursor,
        rows: Sequence[NewRow],
        chunk: list[int],
        gens: dict[int, int],
        outcomes: list[InsertOutcome | None],
    ) -> None:
        count = self.shard_count()
        pending = chunk
        for _ in range(_DUPLICATE_RETRIES):
            params = [
                insert_params(rows[i], count, gens, self._default_routing_key) for i in pending
            ]
            try:
                cur.executemany(sql.INSERT_TASKS, params)
            except self._integrity_error as exc:
                if not is_duplicate_key(exc):
                    raise
            else:
                for i in pending:
                    outcomes[i] = InsertOutcome.CREATED
                insert_tags(cur, [rows[i].task for i in pending])
                return
            # Slow path: some ids exist. Compare their contents, insert the rest.
            existing = self._fetch(cur, [rows[i].task.id for i in pending])
            remaining = []
            for i in pending:
                stored = existing.get(rows[i].task.id)
                if stored is None:
                    remaining.append(i)
                else:
                    same = stored == rows[i].task
                    outcomes[i] = InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT
            if not remaining:
                return
            pending = remaining
        raise StoreError("concurrent inserts of the same ids kept colliding; retry")

    def _fetch(self, cur: Cursor, ids: Sequence[str]) -> dict[str, Task]:
        found: dict[str, Task] = {}
        for part in chunks(ids, _IN_LIST_CHUNK):
            cur.execute(sql.SELECT_CONTENT_BY_IDS.format(ids=sql.placeholders(len(part))), part)
            for row in cur.fetchall():
                found[row[0]] = self._content(row)
        return found

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
        epochs = {lease.shard: lease.epoch for lease in leases}
        if not epochs or limit <= 0:
            return Armed([], [])
        # After a pass that armed nothing, probe the whole horizon: an idle
        # pass costs one statement.
        probe_ms = horizon_ms if self._probe_next else urgent_ms
        if (
            not unanswered
            and probe_ms is not None
            and self._nothing_to_arm(epochs, min(probe_ms, horizon_ms), limit)
        ):
            return Armed([], [], skipped=True)
        taken: dict[int, list[TaskRow]] = {}
        try:
            with self._pool.transaction() as cur:
                locked = self._lock_shards(cur, epochs, sql.LOCK_SHARDS_FOR_ARMING)
                held = {
                    r.shard: r.marks
                    for r in locked.values()
                    if r.held_by(instance, epochs[r.shard])
                }
                lost = sorted(set(epochs) - set(held))
                if not held:
                    return Armed([], lost)
                taken = self._armed_unanswered(cur, held_only(unanswered, held, epochs))
                room = limit - sum(map(len, taken.values()))
                result = PassResult[TaskRow]()
                if room > 0:
                    reads = self._read_for_arming(cur, held, horizon_ms, room)
                    result = plan_pass(held, reads, horizon_ms, room, row_mark)
                taken = merge_taken(taken, result.taken, row_mark)
                self._write_marks(cur, result.marks)
                for part in chunks([row.id for row in result.settle], _IN_LIST_CHUNK):
                    cur.execute(sql.ARM_SETTLE.format(ids=sql.placeholders(len(part))), part)
        except TransientError as exc:
            if not taken:
                raise
            # Its COMMIT may have gone through, the answer lost: R3a.
            ids = {Lease(s, epochs[s]): frozenset(r.id for r in rows) for s, rows in taken.items()}
            raise ArmUnanswered(str(exc), ids) from exc
        held.update(result.marks)
        self._arm_cache = {shard: (epochs[shard], marks) for shard, marks in held.items()}
        self._probe_next = not taken
        tasks = [self._task(row, epochs[s]) for s, rows in sorted(taken.items()) for row in rows]
        return Armed(tasks, lost, len(result.settle))

    def _armed_unanswered(
        self, cur: Cursor, unanswered: Mapping[Lease, frozenset[str]]
    ) -> dict[int, list[TaskRow]]:
        """R3a: of the ids passes whose answer was lost took (in shards still
        held at that epoch), those armed now (the pass committed), by shard in
        mark order; the others are unarmed, and this pass's reads find them."""
        shard_of_id = {tid: lease.shard for lease, ids in unanswered.items() for tid in ids}
        found: dict[int, list[TaskRow]] = {}
        for part in chunks(sorted(shard_of_id), _IN_LIST_CHUNK):
            cur.execute(sql.ARMED_OF_IDS.format(ids=sql.placeholders(len(part))), part)
            for r in cur.fetchall():
                row = TaskRow(*r)
                if shard_of_id[row.id] == row.shard:  # an id only ever lives in its own shard
                    found.setdefault(row.shard, []).append(row)
        if found:
            log.warning(
                "an arming pass committed though its answer was lost: taking its %d tasks",
                sum(map(len, found.values())),
            )
        return {shard: sorted(rows, key=row_mark) for shard, rows in found.items()}

    def _nothing_to_arm(self, epochs: dict[int, int], horizon_ms: int, limit: int) -> bool:
        """The pass's reads up to ``horizon_ms``, without a lock or a
        transaction, from the marks the last pass left (only the owner moves
        them, and only up: the reads are a superset). Finding nothing, the
        pass is skipped. Any doubt (a lease the last pass did not see): False."""
        cache = self._arm_cache
        if any(cache.get(s, (None,))[0] != e for s, e in epochs.items()):
            return False
        held = {s: cache[s][1] for s in epochs}
        with self._autocommit_pool.transaction() as cur:
            if self._probe_next and not self._any_due(cur, held, horizon_ms):
                return True  # idle: nothing at all is due
            reads = self._read_for_arming(cur, held, horizon_ms, limit)
        return not reads.ranged and not reads.fresh

    @staticmethod
    def _any_due(cur: Cursor, held: dict[int, ShardMarks], horizon_ms: int) -> bool:
        """Whether any row of the shards, armed or not, is due by what a
        pass could arm (sql.ANY_DUE)."""
        bound_ms = max(horizon_ms, *(marks.armed[0] for marks in held.values()))
        shards = sorted(held)
        cur.execute(sql.ANY_DUE.format(shards=sql.placeholders(len(shards))), [*shards, bound_ms])
        return cur.fetchone() is not None

    @staticmethod
    def _read_for_arming(
        cur: Cursor, held: dict[int, ShardMarks], horizon_ms: int, limit: int
    ) -> PassReads[TaskRow]:
        """Both reads of every shard (store/arm_pass.py), in one statement."""
        cur.execute(*arm_reads(held, horizon_ms, limit))
        parts: tuple[list[TaskRow], list[TaskRow]] = ([], [])
        for r in cur.fetchall():
            parts[int(r[0])].append(TaskRow(*r[1:]))
        ranged_by, ranged_frontier = split_read(parts[0], limit, row_shard, row_mark)
        fresh_by, fresh_frontier = split_read(parts[1], limit, row_shard, row_mark)
        return PassReads(ranged_by, fresh_by, ranged_frontier, fresh_frontier)

    @staticmethod
    def _write_marks(cur: Cursor, marks: dict[int, ShardMarks]) -> None:
        """Every changed shard's new marks, in one statement."""
        if not marks:
            return
        shards = sorted(marks)
        armed_ms = [v for shard in shards for v in (shard, marks[shard].armed[0])]
        armed_id = [v for shard in shards for v in (shard, marks[shard].armed[1])]
        arm_gen = [v for shard in shards for v in (shard, marks[shard].gen)]
        when = sql.cases(len(shards))
        statement = sql.SET_MARKS.format(
            armed_ms=when, armed_id=when, arm_gen=when, shards=sql.placeholders(len(shards))
        )
        cur.execute(statement, [*armed_ms, *armed_id, *arm_gen, *shards])

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        took, start = acquired.took, BOTTOM if after is None else after
        if limit <= 0 or took.armed <= start:
            return [], None
        params = (acquired.lease.shard, start[0], start[0], start[1])
        params_took = (took.armed[0], took.armed[0], took.armed[1], took.gen, limit)
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.INHERITED, (*params, *params_took))
            rows = [TaskRow(*r) for r in cur.fetchall()]
        tasks = [self._task(row, acquired.lease.epoch) for row in rows]
        return tasks, (rows[-1].mark if rows else None)

    # -- R5: the delete after the broker's confirm ------------------------------------------

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        deleted = 0
        # Each chunk commits by itself: every delete stands alone (R5).
        for part in chunks(list(dict.fromkeys(fired)), _IN_LIST_CHUNK):
            params = [value for pair in part for value in pair]
            statement = sql.DELETE_FIRED.format(pairs=sql.placeholders(len(part), width=2))
            with self._autocommit_pool.transaction() as cur:
                deleted += cur.execute(statement, params)
        return int(deleted)

    # -- R8: an event the broker did not take -------------------------------------------

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        if not deferrals:
            return []
        with self._pool.transaction() as cur:
            locked = self._lock_shared(cur, (d.task.shard for d in deferrals))
            found = self._lock_tasks(cur, list(dict.fromkeys(d.task.id for d in deferrals)))
            outcomes: list[DeferOutcome] = []
            writes: list[Any] = []
            for d in deferrals:
                row = found.get(d.task.id)
                outcome = defer_outcome(instance, d, locked.get(d.task.shard), row)
                outcomes.append(outcome)
                if outcome is DeferOutcome.DEFERRED:
                    gen = locked[d.task.shard].arm_gen
                    writes += (d.task.id, d.not_before_ms, d.new_rev, gen)
                    # A second deferral of the row in this call finds the new revision.
                    found[d.task.id] = found[d.task.id]._replace(rev=d.new_rev, gen=gen)
            if writes:
                cur.execute(sql.DEFER.format(moves=sql.moves(len(writes) // 4)), writes)
        return outcomes

    # -- R5s: a series' next occurrence ---------------------------------------------------

    def advance(self, fired: Sequence[Task], now_ms: float) -> int:
        if not fired:
            return 0
        last = {task.id: task for task in fired}
        shards = self._shards_of(list(last))
        changed = 0
        with self._pool.transaction() as cur:
            locked = self._lock_shared(cur, shards.values())
            for part in chunks(list(shards), _IN_LIST_CHUNK):
                rows = self._lock_tasks(cur, part)
                steps = [next_step(rows.get(tid), last[tid], now_ms) for tid in part]
                changed += self._write_steps(cur, [s for s in steps if s is not None], locked)
        return changed

    @staticmethod
    def _write_steps(cur: Cursor, steps: list[Step], locked: dict[int, ShardRow]) -> int:
        """The next occurrences (ADVANCE) and the ends of series (DELETE_TASKS)."""
        ended = [step.row.id for step in steps if step.due_ms is None]
        if ended:
            cur.execute(sql.DELETE_TASKS.format(ids=sql.placeholders(len(ended))), ended)
        moved: list[Any] = []
        tagged = False
        for step in steps:
            if step.due_ms is not None:
                gen = locked[step.row.shard].arm_gen
                moved += (step.row.id, step.due_ms, new_rev(), gen, meta_blob(step.meta))
                tagged = tagged or bool(step.meta.tags)
        if moved:
            derived = sql.advances(len(moved) // 5)
            cur.execute(sql.ADVANCE.format(moves=derived), moved)
            if tagged:
                cur.execute(sql.RESCHEDULE_TAGS.format(moves=derived), moved)
        return len(steps)

    # -- R7: cancel, R6: reschedule -----------------------------------------------------

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        if not task_ids:
            return []
        shards = self._shards_of(task_ids)
        unique = list(shards)
        if len(unique) <= _IN_LIST_CHUNK and self._cancel_all_unarmed(shards):
            return first_wins(task_ids, dict.fromkeys(unique, CancelResult.CANCELLED))
        results = dict.fromkeys(task_ids, CancelResult.NOT_FOUND)
        if unique:
            with self._pool.transaction() as cur:
                locked = self._lock_shared(cur, shards.values())
                for part in chunks(unique, _IN_LIST_CHUNK):
                    found = self._lock_tasks(cur, part)
                    for tid, row in found.items():
                        results[tid] = cancel_result(is_armed_row(row, locked))
                    gone = [tid for tid in part if results[tid] is CancelResult.CANCELLED]
                    if gone:
                        cur.execute(sql.DELETE_TASKS.format(ids=sql.placeholders(len(gone))), gone)
                    late = [found[t] for t in part if results[t] is CancelResult.TOO_LATE]
                    for tid, meta in stopped_series(late):  # rare: one statement each
                        cur.execute(sql.SET_META, (meta_blob(meta), tid))
        return first_wins(task_ids, results)

    def _cancel_all_unarmed(self, shards: dict[str, int]) -> bool:
        """The usual case in one statement (sql.CANCEL_UNARMED): every id
        exists and is not armed. Commits only when it deleted every id;
        otherwise rolls back, and the caller locks and classifies each."""
        if not shards:
            return False
        ids, shard_set = list(shards), sorted(set(shards.values()))
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

    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        last = {move.task_id: move for move in moves}  # an id moved twice: the last move
        shards = self._shards_of(list(last))
        moved = {tid: Moved(RescheduleResult.NOT_FOUND) for tid in last}
        unique = list(shards)
        if unique:
            with self._pool.transaction() as cur:
                locked = self._lock_shared(cur, shards.values())
                for part in chunks(unique, _IN_LIST_CHUNK):
                    self._reschedule_part(cur, part, last, locked, moved)
        return [moved[move.task_id] for move in moves]

    def _reschedule_part(
        self,
        cur: Cursor,
        part: Sequence[str],
        last: dict[str, Move],
        locked: dict[int, ShardRow],
        moved: dict[str, Moved],
    ) -> None:
        writes: list[Any] = []
        tagged = False
        for tid, row in self._lock_tasks(cur, part).items():
            if is_armed_row(row, locked):
                moved[tid] = Moved(RescheduleResult.TOO_LATE)
                continue
            move = last[tid]
            writes += (tid, move.due_ms, move.rev, locked[row.shard].arm_gen)
            task = self._content((tid, move.due_ms, row.routing_key, row.payload, row.meta))
            tagged = tagged or bool(task.meta.tags)
            moved[tid] = Moved(RescheduleResult.RESCHEDULED, task)
        if writes:
            derived = sql.moves(len(writes) // 4)
            cur.execute(sql.RESCHEDULE.format(moves=derived), writes)
            if tagged:
                cur.execute(sql.RESCHEDULE_TAGS.format(moves=derived), writes)

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
        if self._shard(task_id) is None:
            return None
        with self._autocommit_pool.transaction() as cur:
            cur.execute(sql.SELECT_TASK_STATE, (task_id,))
            row = cur.fetchone()
        return None if row is None else self._info(row)

    def _info(self, row: Row) -> TaskInfo:
        """A task and its state from sql.TASK_STATE_COLUMNS."""
        fire_ms, gen, marks = row[5], row[6], ShardMarks((row[7], row[8]), row[9])
        armed = is_armed((fire_ms, row[0]), gen, marks)
        return TaskInfo(self._content(row), TaskState.FIRING if armed else TaskState.SCHEDULED)

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
