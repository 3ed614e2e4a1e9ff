"""The store kernel: every rule that decides what a transaction of the task
store writes, once, over a backend's steps (:mod:`triggerhook.store.tables`).

It reads line by line against ``docs/design/ownership.md`` and its model
``models/ownership.pml``:

* **R6** insert (:meth:`StoreKernel.insert`) and reschedule: shard rows
  locked shared, rows written unarmed in their shard's current generation at
  the caller's revision; a reschedule moves only an unarmed row (else
  TOO_LATE), the last move of an id wins, failed attempts start over;
* **R6r** an insert with ``on_conflict`` REPLACE of an id that exists: an
  unarmed row deleted and written again, an armed one TOO_LATE;
* **R6o** the outbox mover (:meth:`StoreKernel.move_outbox`): rows callers
  committed in their own transactions, taken with their locks, inserted by
  R6 and deleted, in one transaction;
* **R3** arming (:meth:`StoreKernel.arm`): the pass's shard rows locked
  exclusively and fenced by (owner, epoch); first **R3a**'s ids (a pass whose
  answer was lost) that are armed now, then both reads and
  ``arm_pass.plan_pass``, the new marks, the settled rows; a lost answer of a
  pass that took rows raises ``ArmUnanswered``;
* inherited rows: ``is_inherited(mark, gen, took)`` in mark order;
* **R5** the delete after confirm, by (id, revision) only; **R5d** for a
  task with a dedup window, with its fired record in the same transaction,
  which R6 checks after its insert (an id fired within its window:
  ALREADY_FIRED, nothing written);
* **R5s** a series' confirmed occurrence becomes its next (``rows.next_step``),
  with copies of the occurrences it missed under catch-up "all";
* a series' pause and resume (``rows.series_change``): R6 moves of an unarmed
  row (parked, or back on its schedule), R7's meta write of an armed one;
* **R7** cancel: armed → TOO_LATE (a series stops after it), else deleted,
  whoever owns the shard;
* **R8** a returned event (``rows.defer_outcome``): GONE, INHERITED (nothing
  written) or DEFERRED (unarmed again at the retry time, new revision, one
  more failed attempt); **R8p** a copy a rate limit holds back past the
  arming horizon takes the same move with its attempts kept.

R1 (members) and R2 (leases) are one compare-and-set statement each; they
live with each backend's SQL (``store/mysql``, ``store/sqlite``), as do the
reads of ``get`` and the listing.

The per-row decisions are :mod:`triggerhook.store.rows`' functions and
:mod:`triggerhook.domain.arming`'s; this module orders them into transactions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from triggerhook.domain.arming import BOTTOM, Mark, Placement, ShardMarks
from triggerhook.domain.series import PARKED_MS, copy_of
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    OnConflict,
    RescheduleResult,
    SeriesResult,
    Task,
)
from triggerhook.errors import StoreError, TransientError
from triggerhook.interfaces import (
    Acquired,
    Armed,
    ArmUnanswered,
    DeferOutcome,
    Deferral,
    Inserted,
    Lease,
    Move,
    Moved,
    NewRow,
    OutboxMoved,
    new_rev,
)
from triggerhook.store.arm_pass import PassResult, held_only, merge_taken, plan_pass
from triggerhook.store.lanes import candidates, check_locked, lock_set, retried
from triggerhook.store.rows import (
    ShardRow,
    TaskRow,
    cancel_result,
    chunks,
    conflict_outcome,
    content_of,
    defer_outcome,
    fired_rows,
    first_wins,
    id_rounds,
    insert_chunks,
    is_armed_row,
    meta_blob,
    next_step,
    refused,
    row_mark,
    stopped_series,
    task_of,
)
from triggerhook.store.series_rows import parked_move, series_change
from triggerhook.store.tables import DuplicateRow, RowMove, Tables, Tx

log = logging.getLogger(__name__)

# Ids per locking read or write of rows by id (a bound on statement size).
ID_CHUNK = 2000
_DUPLICATE_RETRIES = 3


class StoreKernel:
    """The write operations of :class:`~triggerhook.interfaces.TaskStore`
    over ``tables``; a backend's store class subclasses it and adds R1, R2
    and the reads. Thread-safe as its tables are; the idle-pass hints below
    belong to the one armer thread that calls :meth:`arm`."""

    def __init__(self, tables: Tables, default_routing_key: str) -> None:
        self._tables = tables
        self._default_routing_key = default_routing_key
        # The armer's hints (see _nothing_to_arm): the marks each lease's
        # shard had after the last locked pass, and whether it armed nothing.
        self._arm_cache: dict[int, tuple[int, ShardMarks]] = {}
        self._probe_next: dict[int, bool] = {}  # by lane
        # Lanes (store/lanes.py): the placement read from the database, and
        # the keys this instance's rate limits name (open_lanes).
        self._placement: Placement | None = None
        self._limited: Callable[[str], bool] | None = None

    def shard_count(self) -> int:
        raise NotImplementedError

    def _lanes_stored(self, shard_count: int) -> int:
        """1, or 2 where the database has the rate-limited lane's shard rows."""
        raise NotImplementedError

    def _add_lane(self, shard_count: int) -> None:
        """Add the rate-limited lane's shard rows (N .. 2N-1), where missing."""
        raise NotImplementedError

    def placement(self, fresh: bool = False) -> Placement:
        """Read from the database once, and again when ``fresh`` or after LanesChanged."""
        placement = self._placement
        if placement is None or fresh:
            count = self.shard_count()
            placement = Placement(count, self._lanes_stored(count), self._limited)
            self._placement = placement
        return placement

    def forget_placement(self) -> None:
        self._placement = None

    def open_lanes(self, limited: Callable[[str], bool]) -> None:
        """From now on, a row whose routing key ``limited`` names goes to
        the rate-limited lane; its shard rows are added where missing."""
        self._add_lane(self.shard_count())
        self._limited = limited
        self._placement = None

    def _task(self, row: TaskRow, epoch: int = 0) -> Task:
        return task_of(row, epoch, self._default_routing_key)

    def _shards_of(self, task_ids: Sequence[str]) -> dict[str, tuple[int, ...]]:
        """Each distinct id that a row can have, with the shards it may be in."""
        return candidates(self.placement(), task_ids)

    @staticmethod
    def _lock_rows(
        tx: Tx, task_ids: Sequence[str], locked: Mapping[int, ShardRow]
    ) -> dict[str, TaskRow]:
        """The task rows, locked; each must lie in a shard locked (LanesChanged)."""
        found = tx.lock_rows(task_ids)
        check_locked(found, locked)
        return found

    # -- R6: insert -----------------------------------------------------------------

    @retried
    def insert(
        self,
        rows: Sequence[NewRow],
        atomic: bool,
        now_ms: float | None = None,
        *,
        fired_ok: bool = False,
    ) -> list[Inserted]:
        if not rows:
            return []
        now = time.time() * 1000.0 if now_ms is None else now_ms
        rounds = id_rounds(rows)
        if len(rounds) == 1 and self._tables.insert_fast(rows):
            return [Inserted(InsertOutcome.CREATED, row.task) for row in rows]
        with self._tables.write() as tx:
            done = self._insert_in(tx, rows, rounds, now)
            if atomic:
                refused(done, fired_ok)
        return done

    def _insert_in(
        self, tx: Tx, rows: Sequence[NewRow], rounds: list[list[int]], now_ms: float
    ) -> list[Inserted]:
        """R6 in ``tx``: the shard rows locked shared, then each round of ids in order."""
        answers: list[Inserted | None] = [None] * len(rows)
        # Every candidate shard of each id: a row of it (a replace) may be in
        # either lane. A shard without its row: insert_params refuses it.
        shards = self._shards_of([row.task.id for row in rows])
        locked = tx.lock_shards(lock_set(shards), False)
        # A later row of an id sees what the earlier ones wrote: in order.
        for indexes in rounds:
            for chunk in insert_chunks([rows[i] for i in indexes], indexes):
                self._insert_chunk(tx, rows, chunk, locked, answers, now_ms)
        done = [a for a in answers if a is not None]
        assert len(done) == len(rows)  # each round answers each of its rows
        return done

    # -- R6o: the outbox mover ------------------------------------------------------

    @retried
    def move_outbox(self, limit: int, now_ms: float) -> OutboxMoved:
        """R6o: the oldest committed outbox rows (skipping rows other
        transactions hold), R6's insert of their tasks by each one's
        ``on_conflict``, and their delete, in one transaction. A task
        exists once, and only if its caller's transaction committed."""
        with self._tables.write() as tx:
            taken = tx.take_outbox(limit)
            if not taken:
                return OutboxMoved(0, [])
            rows = [self._keyed(entry.row) for entry in taken if entry.row is not None]
            inserted = self._insert_in(tx, rows, id_rounds(rows), now_ms) if rows else []
            tx.delete_outbox([entry.seq for entry in taken])
        return OutboxMoved(len(taken), inserted)

    def outbox_waiting(self) -> tuple[int | None, int]:
        return self._tables.outbox_waiting()

    def _keyed(self, row: NewRow) -> NewRow:
        """An outbox row written without a routing key takes this instance's
        default, as a create through it does (and is compared with it)."""
        if row.task.routing_key:
            return row
        task = row.task.replace(routing_key=self._default_routing_key)
        return NewRow(task, rev=row.rev, on_conflict=row.on_conflict)

    def _insert_chunk(
        self,
        tx: Tx,
        rows: Sequence[NewRow],
        chunk: list[int],
        locked: dict[int, ShardRow],
        answers: list[Inserted | None],
        now_ms: float,
    ) -> None:
        """Insert first; when an id exists, lock its row and answer by the
        row's ``on_conflict`` (rows.conflict_outcome). R6r: a row replaced is
        deleted (its tag rows with it) and inserted again, unarmed at the new
        revision, in this transaction. A concurrent insert of the same ids
        may collide again: retried a few times. Once inserted, the ids'
        fired records are checked (:meth:`_fired_within`)."""
        gens = {shard: row.arm_gen for shard, row in locked.items()}
        pending, replacing = chunk, set()
        for _ in range(_DUPLICATE_RETRIES):
            try:
                tx.insert_rows([rows[i] for i in pending], gens)
            except DuplicateRow:
                pass
            else:
                fired = self._fired_within(tx, [rows[i] for i in pending], now_ms)
                for i in pending:
                    answers[i] = _written(rows[i].task, i in replacing, fired)
                return
            existing = self._lock_rows(tx, [rows[i].task.id for i in pending], locked)
            remaining, gone = [], []
            for i in pending:
                found = existing.get(rows[i].task.id)
                if found is None:
                    remaining.append(i)
                    continue
                stored = self._content(found)
                outcome = conflict_outcome(rows[i], stored, is_armed_row(found, locked))
                if outcome is InsertOutcome.REPLACED:
                    gone.append(found.id)
                    replacing.add(i)
                    remaining.append(i)
                else:
                    answers[i] = Inserted(outcome, stored)
            if gone:
                tx.delete_rows(gone)
            if not remaining:
                return
            pending = remaining
        raise StoreError("concurrent inserts of the same ids kept colliding; retry")

    @staticmethod
    def _fired_within(tx: Tx, inserted: Sequence[NewRow], now_ms: float) -> dict[str, int]:
        """R6's check, after its insert (docs/design/flow-control.md, section
        2): the inserted ids that fired within their dedup window (a record
        expiring after ``now_ms``), each with when; their rows are deleted
        again, so nothing of them is written. After the insert, not before:
        the insert of an id succeeds only once R5d's delete of its old row
        committed, with the record, which this locking read then sees. A
        task with a window ends the fast path (``mark_dedup``) first."""
        if any(row.task.meta.dedup_window_ms for row in inserted):
            tx.mark_dedup()
        fired = tx.fired_live([row.task.id for row in inserted], now_ms)
        if fired:
            tx.delete_rows(list(fired))
        return fired

    def _content(self, row: TaskRow) -> Task:
        """A row's content, as ``get`` reads it back."""
        columns = (row.id, row.due_ms, row.routing_key, row.payload, row.meta)
        return content_of(columns, self._default_routing_key)

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
        # After a pass of the lane that armed nothing, probe the whole
        # horizon: an idle pass costs one statement.
        lane = self.placement().lane(min(epochs))
        probe_whole = self._probe_next.get(lane, False)
        probe_ms = horizon_ms if probe_whole else urgent_ms
        if (
            not unanswered
            and probe_ms is not None
            and self._nothing_to_arm(epochs, min(probe_ms, horizon_ms), probe_whole)
        ):
            return Armed([], [], skipped=True)
        taken: dict[int, list[TaskRow]] = {}
        try:
            with self._tables.write() as tx:
                locked = tx.lock_shards(set(epochs), exclusive=True)
                held = {
                    r.shard: r.marks
                    for r in locked.values()
                    if r.held_by(instance, epochs[r.shard])
                }
                lost = sorted(set(epochs) - set(held))
                if not held:
                    return Armed([], lost)
                taken = self._armed_unanswered(tx, held_only(unanswered, held, epochs), locked)
                room = limit - sum(map(len, taken.values()))
                result = PassResult[TaskRow]()
                if room > 0:
                    reads = tx.read_for_arming(held, horizon_ms, room)
                    result = plan_pass(held, reads, horizon_ms, room, row_mark)
                taken = merge_taken(taken, result.taken, row_mark)
                if result.marks:
                    tx.set_marks(result.marks)
                for part in chunks([row.id for row in result.settle], ID_CHUNK):
                    tx.settle(part)
        except TransientError as exc:
            if not taken:
                raise
            # Its COMMIT may have gone through, the answer lost: R3a.
            ids = {Lease(s, epochs[s]): frozenset(r.id for r in rows) for s, rows in taken.items()}
            raise ArmUnanswered(str(exc), ids) from exc
        held.update(result.marks)
        self._arm_cache.update((shard, (epochs[shard], marks)) for shard, marks in held.items())
        self._probe_next[lane] = not taken
        key = self._default_routing_key
        tasks = [task_of(row, epochs[s], key) for s, rows in sorted(taken.items()) for row in rows]
        return Armed(tasks, lost, len(result.settle))

    @staticmethod
    def _armed_unanswered(
        tx: Tx, unanswered: Mapping[Lease, frozenset[str]], locked: dict[int, ShardRow]
    ) -> dict[int, list[TaskRow]]:
        """R3a: of the ids passes whose answer was lost took (in shards still
        held at that epoch), those armed now (the pass committed), by shard in
        mark order; the others are unarmed, and this pass's reads find them."""
        shard_of_id = {tid: lease.shard for lease, ids in unanswered.items() for tid in ids}
        found: dict[int, list[TaskRow]] = {}
        for part in chunks(sorted(shard_of_id), ID_CHUNK):
            for row in tx.lock_rows(part).values():
                # A row replaced since may lie in its other lane: not this one.
                if shard_of_id[row.id] == row.shard and is_armed_row(row, locked):
                    found.setdefault(row.shard, []).append(row)
        if found:
            log.warning(
                "an arming pass committed though its answer was lost: taking its %d tasks",
                sum(map(len, found.values())),
            )
        return {shard: sorted(rows, key=row_mark) for shard, rows in found.items()}

    def _nothing_to_arm(self, epochs: dict[int, int], horizon_ms: int, whole: bool) -> bool:
        """The pass's reads up to ``horizon_ms``, without a lock, from the
        marks the last pass left (only the owner moves them, and only up: the
        reads are a superset). Finding nothing, the pass is skipped. Any
        doubt (a lease the last pass did not see): False. Whether there is a
        row is all the probe asks (``Tx.any_to_arm``): read in full, a busy
        pass read its rows twice."""
        cache = self._arm_cache
        if any(cache.get(s, (None,))[0] != e for s, e in epochs.items()):
            return False
        held = {s: cache[s][1] for s in epochs}
        with self._tables.read() as tx:
            if whole:
                # Every row a pass could arm has fire_ms <= max(horizon, its watermark).
                bound_ms = max(horizon_ms, *(marks.armed[0] for marks in held.values()))
                if not tx.any_due(held, bound_ms):
                    return True  # idle: nothing at all is due
            return not tx.any_to_arm(held, horizon_ms)

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        took, start = acquired.took, BOTTOM if after is None else after
        if limit <= 0 or took.armed <= start:
            return [], None
        rows = self._tables.inherited(acquired.lease.shard, start, took, limit)
        tasks = [self._task(row, acquired.lease.epoch) for row in rows]
        return tasks, (rows[-1].mark if rows else None)

    # -- R5: the delete after the broker's confirm ------------------------------------------

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        if not fired:
            return 0
        return self._tables.delete_fired(list(dict.fromkeys(fired)))

    def delete_recorded(self, fired: Sequence[Task], now_ms: float) -> int:
        """R5d: R5 for tasks with a dedup window, each row still at the
        revision that fired deleted with its fired record, in one transaction."""
        if not fired:
            return 0
        deleted = 0
        with self._tables.write() as tx:
            for part in chunks(list(fired), ID_CHUNK):
                gone, records = fired_rows(tx.lock_rows([t.id for t in part]), part, now_ms)
                if gone:
                    tx.delete_rows(gone)
                tx.record_fired(records)
                deleted += len(gone)
        return deleted

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        return self._tables.sweep_fired(shards, now_ms, limit)

    # -- R8: an event the broker did not take -------------------------------------------

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        if not deferrals:
            return []
        with self._tables.write() as tx:
            locked = tx.lock_shards({d.task.shard for d in deferrals}, exclusive=False)
            found = tx.lock_rows(list(dict.fromkeys(d.task.id for d in deferrals)))
            outcomes: list[DeferOutcome] = []
            writes: list[RowMove] = []
            for d in deferrals:
                outcome = defer_outcome(instance, d, locked.get(d.task.shard), found.get(d.task.id))
                outcomes.append(outcome)
                if outcome is DeferOutcome.DEFERRED:
                    gen = locked[d.task.shard].arm_gen
                    # R8p's postponement is R8's move with attempts kept.
                    writes.append(
                        RowMove(d.task.id, d.not_before_ms, d.new_rev, gen, postponed=d.postponed)
                    )
                    # A second deferral of the row in this call finds the new revision.
                    found[d.task.id] = found[d.task.id]._replace(rev=d.new_rev, gen=gen)
            if writes:
                tx.defer_rows(writes)
        return outcomes

    # -- R5s: a series' next occurrence ---------------------------------------------------

    @retried
    def advance(self, fired: Sequence[Task], now_ms: float) -> int:
        if not fired:
            return 0
        # By revision: a batch may confirm a stale copy of an id (an older
        # revision, inherited and then dead-lettered) after its current one;
        # each row advances by the copy of its own revision, if one fired.
        confirmed = {(task.id, task.rev): task for task in fired}
        shards = self._shards_of([task.id for task in fired])
        changed = 0
        with self._tables.write() as tx:
            locked = tx.lock_shards(lock_set(shards), exclusive=False)
            for part in chunks(list(shards), ID_CHUNK):
                rows = self._lock_rows(tx, part, locked)
                steps = [next_step(rows.get(tid), confirmed, now_ms) for tid in part]
                taken = [step for step in steps if step is not None]
                ended = [step.row.id for step in taken if step.due_ms is None]
                if ended:
                    tx.delete_rows(ended)
                moves = [
                    RowMove(
                        step.row.id,
                        step.due_ms,
                        new_rev(),
                        locked[step.row.shard].arm_gen,
                        step.meta,
                        bool(step.meta.tags),
                    )
                    for step in taken
                    if step.due_ms is not None
                ]
                if moves:
                    tx.move_rows(moves)
                copies = [
                    copy_of(self._content(step.row), due)
                    for step in taken
                    for due in step.missed_ms
                ]
                self._write_copies(tx, copies, locked, now_ms)
                changed += len(taken)
        return changed

    def _write_copies(
        self, tx: Tx, copies: Sequence[Task], locked: dict[int, ShardRow], now_ms: float
    ) -> None:
        """A series' extra occurrences (domain/series.py), by R6 in this
        transaction; a copy whose id exists stays as it is (KEEP: a copy's id
        is its due time's, so it is this one, written before, unless a caller
        gave a task of its own that id: that task stays). Shards not yet
        locked are locked now: only a catch-up's copies get here, rarely."""
        if not copies:
            return
        rows = [NewRow(task, on_conflict=OnConflict.KEEP) for task in copies]
        missing = lock_set(self._shards_of([task.id for task in copies])) - set(locked)
        if missing:
            locked.update(tx.lock_shards(missing, exclusive=False))
        answers: list[Inserted | None] = [None] * len(rows)
        for indexes in id_rounds(rows):
            for chunk in insert_chunks([rows[i] for i in indexes], indexes):
                self._insert_chunk(tx, rows, chunk, locked, answers, now_ms)

    # -- a series' pause and resume: R6 moves, or R7's meta write when armed ---------

    def pause(self, task_ids: Sequence[str]) -> list[SeriesResult]:
        """Pause each series (domain/series.py): an unarmed row is parked, an
        armed one marked (its occurrence fires, R5s parks the next)."""
        return self._series_change(task_ids, None)

    def resume(self, task_ids: Sequence[str], now_ms: float) -> list[SeriesResult]:
        """Resume each paused series at its next occurrence, by its catch-up policy."""
        return self._series_change(task_ids, now_ms)

    @retried
    def _series_change(self, task_ids: Sequence[str], now_ms: float | None) -> list[SeriesResult]:
        shards = self._shards_of(task_ids)
        results = dict.fromkeys(task_ids, SeriesResult.NOT_FOUND)
        if shards:
            with self._tables.write() as tx:
                locked = tx.lock_shards(lock_set(shards), exclusive=False)
                for part in chunks(list(shards), ID_CHUNK):
                    change = series_change(self._lock_rows(tx, part, locked), locked, now_ms)
                    results.update(change.results)
                    if change.marks:
                        tx.set_meta(change.marks)
                    if change.ended:
                        tx.delete_rows(change.ended)
                    if change.moves:
                        tx.move_rows(change.moves)
                    copies = change.copies(self._content)
                    if copies:  # only a resume writes copies (catch-up all)
                        assert now_ms is not None
                        self._write_copies(tx, copies, locked, now_ms)
        return [results[tid] for tid in task_ids]

    # -- R7: cancel -------------------------------------------------------------------------

    @retried
    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        if not task_ids:
            return []
        shards = self._shards_of(task_ids)
        unique = list(shards)
        if len(unique) <= ID_CHUNK and unique and self._tables.cancel_unarmed(shards):
            return first_wins(task_ids, dict.fromkeys(unique, CancelResult.CANCELLED))
        results = dict.fromkeys(task_ids, CancelResult.NOT_FOUND)
        if unique:
            with self._tables.write() as tx:
                locked = tx.lock_shards(lock_set(shards), exclusive=False)
                for part in chunks(unique, ID_CHUNK):
                    found = self._lock_rows(tx, part, locked)
                    for tid, row in found.items():
                        results[tid] = cancel_result(is_armed_row(row, locked))
                    gone = [tid for tid in part if results[tid] is CancelResult.CANCELLED]
                    if gone:
                        tx.delete_rows(gone)
                    late = [found[t] for t in part if results[t] is CancelResult.TOO_LATE]
                    stops = stopped_series(late)  # a series: this occurrence is its last
                    if stops:
                        tx.set_meta(stops)
        return first_wins(task_ids, results)

    # -- R6: reschedule ---------------------------------------------------------------------

    @retried
    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        last = {move.task_id: move for move in moves}  # an id moved twice: the last move
        shards = self._shards_of(list(last))
        moved = {tid: Moved(RescheduleResult.NOT_FOUND) for tid in last}
        unique = list(shards)
        if unique:
            with self._tables.write() as tx:
                locked = tx.lock_shards(lock_set(shards), exclusive=False)
                for part in chunks(unique, ID_CHUNK):
                    self._reschedule_part(tx, part, last, locked, moved)
        return [moved[move.task_id] for move in moves]

    def _reschedule_part(
        self,
        tx: Tx,
        part: Sequence[str],
        last: dict[str, Move],
        locked: dict[int, ShardRow],
        moved: dict[str, Moved],
    ) -> None:
        writes: list[RowMove] = []
        for tid, row in self._lock_rows(tx, part, locked).items():
            if is_armed_row(row, locked):
                moved[tid] = Moved(RescheduleResult.TOO_LATE)
                continue
            move = last[tid]
            gen = locked[row.shard].arm_gen
            parked = parked_move(row, move.due_ms)  # a paused series: where it resumes
            if parked is not None:
                task = self._content(row._replace(due_ms=PARKED_MS, meta=meta_blob(parked)))
                writes.append(RowMove(tid, PARKED_MS, move.rev, gen, parked, bool(parked.tags)))
            else:
                task = self._content(row._replace(due_ms=move.due_ms))
                writes.append(RowMove(tid, move.due_ms, move.rev, gen, tagged=bool(task.meta.tags)))
            moved[tid] = Moved(RescheduleResult.RESCHEDULED, task)
        if writes:
            tx.move_rows(writes)


def _written(task: Task, replacing: bool, fired: Mapping[str, int]) -> Inserted:
    """An inserted row's answer: CREATED or REPLACED, unless its id fired
    within its window (``fired``: the row deleted again)."""
    if task.id in fired:
        return Inserted(InsertOutcome.ALREADY_FIRED, task, fired[task.id])
    return Inserted(InsertOutcome.REPLACED if replacing else InsertOutcome.CREATED, task)
