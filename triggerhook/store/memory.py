"""An in-memory task store (implements :class:`triggerhook.interfaces.TaskStore`).

A model of the tables ``th_tasks``, ``th_shards`` and ``th_members`` under the
rules of ``docs/design/ownership.md`` that :class:`triggerhook.store.mysql.MySQLStore`
runs in SQL, held to them by the store contract suite (``tests/contract``),
which runs against both. What a pass arms is decided by the same functions
(``domain/arming.py`` through ``store/arm_pass.py``):

* a row is armed exactly when ``is_armed(row mark, row gen, shard marks)``;
  no row field says so;
* R6 insert and reschedule write the row in its shard's current generation
  (unarmed, whatever its time), at the caller's revision; reschedule moves
  only an unarmed row (else TOO_LATE), the last move of an id wins, and the
  failed attempts start over;
* R3 arming, fenced by each lease's (owner, epoch): first R3a's ids (of a
  pass whose answer was lost) that are armed now, then the ranged and fresh
  reads of every shard at once (``split_read``), ``plan_pass``, the new marks
  and the rows settled;
* inherited rows: ``is_inherited(mark, gen, took)`` in mark order;
* R5 the delete after confirm: by (id, revision), nothing else;
* R7 cancel: armed → TOO_LATE, else deleted; whoever owns the shard;
* R8 a returned event: GONE unless the lease is the caller's at the task's
  epoch and the row is at the task's revision; INHERITED (nothing written)
  when armed in an earlier epoch; else DEFERRED: unarmed again, retry time,
  new revision, one more failed attempt;
* R2 leases: acquire takes free or expired shards (random), a new epoch and
  the marks it began with; renew and release match (owner, epoch);
* R1 members: a name is held until its heartbeat runs out; a live holder
  makes ``register`` raise :class:`~triggerhook.errors.InstanceNameInUse`.

"Now" is the database's clock: ``now_ms`` (a callable; by default this
process's wall clock), read as MySQL's ``NOW_MS`` is, in whole milliseconds.

Where MySQL's answers depend on how it stores a row, this store answers the
same: an empty routing key (the schema's NULL) reads back as
``default_routing_key``; :meth:`MemoryStore.get` does not read ``attempts``
and reports 0, and an insert does not write them.

Nothing is persisted: for tests, and for running without a database.
Thread-safe: every call holds one lock for its whole "transaction".
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triggerhook.domain.arming import (
    BOTTOM,
    Mark,
    ShardMarks,
    arm_horizon,
    is_armed,
    is_inherited,
    shard_of,
)
from triggerhook.domain.listing import Key, TaskFilter, Timeline, timeline_of
from triggerhook.domain.meta import next_occurrence, stopping
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
from triggerhook.store.arm_pass import (
    PassReads,
    PassResult,
    held_only,
    merge_taken,
    plan_pass,
    split_read,
)

_START_MARKS = ShardMarks(BOTTOM, 1)  # the schema's defaults: nothing armed, generation 1


@dataclass(slots=True)
class StoredRow:
    """One row of th_tasks. ``task`` holds its content and ``task.attempts``
    the row's ``attempts`` (its rev, shard and epoch fields are unused)."""

    task: Task
    shard: int
    rev: int
    gen: int
    fire_ms: int

    @property
    def mark(self) -> Mark:
        return (self.fire_ms, self.task.id)


@dataclass(slots=True)
class ShardRow:
    """One row of th_shards."""

    owner: str | None = None
    epoch: int = 0
    lease_until_ms: int = 0
    marks: ShardMarks = _START_MARKS
    took: ShardMarks = _START_MARKS

    def held_by(self, instance: str, epoch: int) -> bool:
        return self.owner == instance and self.epoch == epoch


@dataclass(slots=True)
class MemberRow:
    """One row of th_members."""

    token: int
    heartbeat_until_ms: int
    host: str = ""
    pid: int = 0


def _mark(row: StoredRow) -> Mark:
    return row.mark


def _shard(row: StoredRow) -> int:
    return row.shard


def _key(info: TaskInfo) -> Key:
    return (info.task.due_ms, info.task.id)


class MemoryStore:
    """In-memory :class:`~triggerhook.interfaces.TaskStore`. Thread-safe."""

    def __init__(
        self,
        default_routing_key: str = "",
        shard_count: int = 64,
        now_ms: Callable[[], float] | None = None,
    ) -> None:
        if shard_count < 1:
            raise ValueError("shard_count must be at least 1")
        self._rows: dict[str, StoredRow] = {}
        self._shards = [ShardRow() for _ in range(shard_count)]
        self._members: dict[str, MemberRow] = {}
        # Re-entrant, so that a subclass may hold it around a call of these methods.
        self._lock = threading.RLock()
        self._default_routing_key = default_routing_key
        self._clock = now_ms if now_ms is not None else lambda: time.time() * 1000.0

    def _now(self) -> int:
        """The "database's" clock in whole milliseconds, as NOW_MS reads it."""
        return math.floor(self._clock())

    def shard_count(self) -> int:
        return len(self._shards)

    # -- rows <-> tasks -------------------------------------------------------------

    def _read(self, row: StoredRow, epoch: int = 0) -> Task:
        """The task as the database hands it back: an empty routing key (NULL)
        resolved to the default, with the row's revision, attempts and shard."""
        task = self._content(row.task)
        return dataclasses.replace(
            task,
            attempts=row.task.attempts,
            rev=row.rev,
            shard=row.shard,
            epoch=epoch,
            fire_ms=row.fire_ms,
        )

    def _content(self, task: Task) -> Task:
        """Content only (what get and the duplicate check compare)."""
        routing_key = task.routing_key or self._default_routing_key
        return Task(task.id, task.due_ms, routing_key, task.payload, meta=task.meta)

    def _armed(self, row: StoredRow) -> bool:
        return is_armed(row.mark, row.gen, self._shards[row.shard].marks)

    # -- R6: insert -----------------------------------------------------------------

    def insert(self, rows: Sequence[NewRow], atomic: bool) -> list[InsertOutcome]:
        with self._lock:
            staged: dict[str, StoredRow] = {}
            first: dict[str, tuple[NewRow, InsertOutcome]] = {}  # id -> its first row
            outcomes: list[InsertOutcome] = []
            for new in rows:
                outcome = self._insert_outcome(new, first.get(new.task.id))
                if outcome is InsertOutcome.CREATED:
                    staged[new.task.id] = self._new_row(new)
                first.setdefault(new.task.id, (new, outcome))
                outcomes.append(outcome)
            if atomic and InsertOutcome.CONFLICT in outcomes:
                raise ConflictError(rows[outcomes.index(InsertOutcome.CONFLICT)].task.id)
            self._rows.update(staged)
            return outcomes

    def _insert_outcome(
        self, new: NewRow, earlier: tuple[NewRow, InsertOutcome] | None
    ) -> InsertOutcome:
        if earlier is not None:  # a repeat in this batch: like mysql's _repeat_outcome
            same = new.task == earlier[0].task and earlier[1] is not InsertOutcome.CONFLICT
            return InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT
        stored = self._rows.get(new.task.id)
        if stored is None:
            return InsertOutcome.CREATED
        same = self._content(stored.task) == new.task  # compared as read back
        return InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT

    def _new_row(self, new: NewRow) -> StoredRow:
        task = new.task
        shard = shard_of(task.id, len(self._shards))
        content = self._content(task)  # an empty routing key is written as the default
        return StoredRow(content, shard, new.rev, self._shards[shard].marks.gen, task.due_ms)

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
        with self._lock:
            epochs = {lease.shard: lease.epoch for lease in leases}
            held = {
                s: self._shards[s].marks
                for s, e in epochs.items()
                if 0 <= s < len(self._shards) and self._shards[s].held_by(instance, e)
            }
            lost = sorted(set(epochs) - set(held))
            if not held or limit <= 0:
                return Armed([], lost)
            again = self._armed_unanswered(held_only(unanswered, held, epochs), held)
            room = limit - sum(map(len, again.values()))
            if urgent_ms is not None and not unanswered:
                probe = self._read_for_arming(held, min(urgent_ms, horizon_ms), limit)
                if not probe.ranged and not probe.fresh:
                    return Armed([], lost, skipped=True)
            result: PassResult[StoredRow] = PassResult()
            if room > 0:
                reads = self._read_for_arming(held, horizon_ms, room)
                result = plan_pass(held, reads, horizon_ms, room, _mark)
            for shard, marks in result.marks.items():
                self._shards[shard].marks = marks
            for row in result.settle:
                row.gen -= 1
            taken = merge_taken(again, result.taken, _mark)
            tasks = [self._read(row, epochs[s]) for s, rows in taken.items() for row in rows]
            return Armed(tasks, lost, len(result.settle))

    def _armed_unanswered(
        self, unanswered: Mapping[Lease, frozenset[str]], held: dict[int, ShardMarks]
    ) -> dict[int, list[StoredRow]]:
        """R3a: of those ids, the rows armed now, per shard."""
        found: dict[int, list[StoredRow]] = {}
        for lease, ids in unanswered.items():
            for task_id in sorted(ids):
                row = self._rows.get(task_id)
                if row is not None and row.shard == lease.shard and self._armed(row):
                    found.setdefault(lease.shard, []).append(row)
        return {shard: sorted(rows, key=_mark) for shard, rows in found.items()}

    def _read_for_arming(
        self, held: dict[int, ShardMarks], horizon_ms: int, limit: int
    ) -> PassReads[StoredRow]:
        """Both reads as MySQL makes them (store/arm_pass.py): every shard at
        once in (shard, mark) order, at most ``limit + 1`` rows each."""
        mine = sorted(
            (r for r in self._rows.values() if r.shard in held), key=lambda r: (r.shard, r.mark)
        )
        ranged = [
            r
            for r in mine
            if r.mark > held[r.shard].armed and r.fire_ms <= arm_horizon(horizon_ms, held[r.shard])
        ]
        fresh = [r for r in mine if r.gen == held[r.shard].gen and r.mark <= held[r.shard].armed]
        ranged_by, ranged_frontier = split_read(ranged[: limit + 1], limit, _shard, _mark)
        fresh_by, fresh_frontier = split_read(fresh[: limit + 1], limit, _shard, _mark)
        return PassReads(ranged_by, fresh_by, ranged_frontier, fresh_frontier)

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        with self._lock:
            start = BOTTOM if after is None else after
            shard, took = acquired.lease.shard, acquired.took
            found = sorted(
                (
                    r
                    for r in self._rows.values()
                    if r.shard == shard and r.mark > start and is_inherited(r.mark, r.gen, took)
                ),
                key=_mark,
            )[: max(limit, 0)]
            tasks = [self._read(row, acquired.lease.epoch) for row in found]
            return tasks, (found[-1].mark if found else None)

    # -- R5 and R8 --------------------------------------------------------------------

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        with self._lock:
            gone = [
                tid
                for tid, rev in dict.fromkeys(fired)
                if tid in self._rows and self._rows[tid].rev == rev
            ]
            for tid in gone:
                del self._rows[tid]
            return len(gone)

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        with self._lock:
            return [self._defer_one(instance, d) for d in deferrals]

    def _defer_one(self, instance: str, deferral: Deferral) -> DeferOutcome:
        task = deferral.task
        if not 0 <= task.shard < len(self._shards):
            return DeferOutcome.GONE
        shard = self._shards[task.shard]
        row = self._rows.get(task.id)
        if not shard.held_by(instance, task.epoch):
            return DeferOutcome.GONE  # fenced
        if row is None or row.rev != task.rev or row.shard != task.shard:
            return DeferOutcome.GONE
        if is_inherited(row.mark, row.gen, shard.took):
            return DeferOutcome.INHERITED
        row.fire_ms, row.rev, row.gen = deferral.not_before_ms, deferral.new_rev, shard.marks.gen
        row.task = dataclasses.replace(row.task, attempts=row.task.attempts + 1)
        return DeferOutcome.DEFERRED

    # -- R5s: a series' next occurrence ---------------------------------------------------

    def advance(self, fired: Sequence[Task], now_ms: float) -> int:
        with self._lock:
            changed = 0
            for task in {t.id: t for t in fired}.values():
                row = self._rows.get(task.id)
                if row is None or row.rev != task.rev:
                    continue
                changed += 1
                upcoming = next_occurrence(row.task.meta, row.task.due_ms, now_ms)
                if upcoming is None:
                    del self._rows[task.id]
                    continue
                due, meta = upcoming
                row.task = dataclasses.replace(row.task, due_ms=due, attempts=0, meta=meta)
                row.fire_ms, row.rev, row.gen = due, new_rev(), self._shards[row.shard].marks.gen
            return changed

    # -- R7: cancel, R6: reschedule -----------------------------------------------------

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """One transaction; an id given twice is cancelled once, then not found."""
        with self._lock:
            results = []
            for tid in task_ids:
                row = self._rows.get(tid)
                if row is None:
                    results.append(CancelResult.NOT_FOUND)
                elif self._armed(row):
                    results.append(CancelResult.TOO_LATE)
                    stopped = stopping(row.task.meta)  # a series: this occurrence is its last
                    if stopped is not None:
                        row.task = dataclasses.replace(row.task, meta=stopped)
                else:
                    del self._rows[tid]
                    results.append(CancelResult.CANCELLED)
            return results

    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        with self._lock:
            last = {move.task_id: move for move in moves}  # an id moved twice: the last move
            outcome: dict[str, Moved] = {}
            for tid, move in last.items():
                row = self._rows.get(tid)
                if row is None:
                    outcome[tid] = Moved(RescheduleResult.NOT_FOUND)
                elif self._armed(row):
                    outcome[tid] = Moved(RescheduleResult.TOO_LATE)
                else:
                    row.task = dataclasses.replace(row.task, due_ms=move.due_ms, attempts=0)
                    row.fire_ms, row.rev = move.due_ms, move.rev
                    row.gen = self._shards[row.shard].marks.gen
                    outcome[tid] = Moved(RescheduleResult.RESCHEDULED, self._content(row.task))
            return [outcome[move.task_id] for move in moves]

    # -- R2: shard leases -----------------------------------------------------------

    def acquire(self, instance: str, count: int, lease_ms: int) -> list[Acquired]:
        with self._lock:
            now = self._now()
            free = [
                n for n, s in enumerate(self._shards) if s.owner is None or s.lease_until_ms < now
            ]
            out = []
            for n in sorted(random.sample(free, min(max(count, 0), len(free)))):
                shard = self._shards[n]
                shard.owner, shard.epoch = instance, shard.epoch + 1
                shard.lease_until_ms, shard.took = now + lease_ms, shard.marks
                out.append(Acquired(Lease(n, shard.epoch), shard.marks))
            return out

    def _held(self, instance: str, lease: Lease) -> ShardRow | None:
        if not 0 <= lease.shard < len(self._shards):
            return None
        shard = self._shards[lease.shard]
        return shard if shard.held_by(instance, lease.epoch) else None

    def renew(self, instance: str, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        with self._lock:
            kept = []
            for lease in leases:
                shard = self._held(instance, lease)
                if shard is not None:
                    shard.lease_until_ms = self._now() + lease_ms
                    kept.append(lease)
            return kept

    def release(self, instance: str, leases: Sequence[Lease]) -> int:
        with self._lock:
            released = 0
            for lease in leases:
                shard = self._held(instance, lease)
                if shard is not None:
                    shard.owner, shard.lease_until_ms = None, 0
                    released += 1
            return released

    # -- R1: members ----------------------------------------------------------------

    def register(self, instance: str, token: int, host: str, pid: int, lease_ms: int) -> None:
        with self._lock:
            now = self._now()
            holder = self._members.get(instance)
            if holder is not None and holder.token != token and holder.heartbeat_until_ms >= now:
                raise InstanceNameInUse(instance, holder.host, holder.pid)
            self._members[instance] = MemberRow(token, now + lease_ms, host, pid)

    def heartbeat(self, instance: str, token: int, lease_ms: int) -> bool:
        with self._lock:
            member = self._members.get(instance)
            if member is None or member.token != token:
                return False
            member.heartbeat_until_ms = self._now() + lease_ms
            return True

    def name_holder(self, instance: str) -> NameHolder | None:
        with self._lock:
            member = self._members.get(instance)
            if member is None:
                return None
            now = self._now()
            return NameHolder(member.token, member.host, member.pid, member.heartbeat_until_ms, now)

    def take_over_name(
        self, instance: str, token: int, host: str, pid: int, lease_ms: int, holder: NameHolder
    ) -> bool:
        with self._lock:
            member = self._members.get(instance)
            as_read = (holder.token, holder.heartbeat_until_ms)
            if member is None or (member.token, member.heartbeat_until_ms) != as_read:
                return False
            self._members[instance] = MemberRow(token, self._now() + lease_ms, host, pid)
            return True

    def leave(self, instance: str, token: int) -> None:
        with self._lock:
            member = self._members.get(instance)
            if member is not None and member.token == token:
                del self._members[instance]

    def live_members(self) -> int:
        with self._lock:
            now = self._now()
            return sum(1 for m in self._members.values() if m.heartbeat_until_ms >= now)

    # -- lookups --------------------------------------------------------------------

    def get(self, task_id: str) -> TaskInfo | None:
        with self._lock:
            row = self._rows.get(task_id)
            return None if row is None else self._info(row)

    def count_tasks(self) -> int:
        with self._lock:
            return len(self._rows)

    def _matching(self, where: TaskFilter) -> list[TaskInfo]:
        """Every task ``where`` matches, in (due time, id) order."""
        found = [self._info(row) for row in self._rows.values()]
        return sorted((i for i in found if where.matches(i)), key=_key)

    def _info(self, row: StoredRow) -> TaskInfo:
        state = TaskState.FIRING if self._armed(row) else TaskState.SCHEDULED
        return TaskInfo(self._content(row.task), state)

    # The listing reads honour an interrupt set before they start (each is one
    # step, in memory); they have no time limit: no server runs them.

    def list_tasks(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[TaskInfo]:
        with self._lock, _uncut(interrupt):
            found = self._matching(where)
        return [i for i in found if after is None or _key(i) > after][:limit]

    def match_keys(
        self, where: TaskFilter, after: Key | None, limit: int, interrupt: Interrupt | None = None
    ) -> list[Key]:
        anyhow = dataclasses.replace(where, state=None)
        return [_key(info) for info in self.list_tasks(anyhow, after, limit, interrupt)]

    def count_where(
        self, where: TaskFilter, up_to: int | None = None, interrupt: Interrupt | None = None
    ) -> int:
        with self._lock, _uncut(interrupt):
            found = len(self._matching(where))
        return found if up_to is None else min(found, up_to)

    def timeline(
        self,
        where: TaskFilter,
        start_ms: int,
        bucket_ms: int,
        buckets: int,
        interrupt: Interrupt | None = None,
    ) -> Timeline:
        span = dataclasses.replace(
            where, due_after_ms=start_ms, due_before_ms=start_ms + bucket_ms * buckets, state=None
        )
        with self._lock, _uncut(interrupt):
            found = self._matching(span)
        rows = [(i.task.routing_key, (i.task.due_ms - start_ms) // bucket_ms, 1) for i in found]
        return timeline_of(rows, start_ms, bucket_ms, buckets, self._default_routing_key)

    def earliest_due_ms(self) -> int | None:
        """The earliest due time (a row waiting for a retry keeps its own)."""
        with self._lock:
            return min((r.task.due_ms for r in self._rows.values()), default=None)

    def database_time_us(self) -> int:
        """The store's clock (``now_ms``) in microseconds."""
        return math.floor(self._clock() * 1000.0)

    def check_schema(self) -> None:
        """Always current: there is no schema."""

    def close(self) -> None:
        """Nothing to release (the rows stay, as a database's would)."""


def _uncut(interrupt: Interrupt | None) -> contextlib.AbstractContextManager[None]:
    """Raises Interrupted if ``interrupt`` is set (nothing to cut: one step)."""
    return contextlib.nullcontext() if interrupt is None else interrupt.cutting(lambda: None)


if TYPE_CHECKING:  # mypy checks the store against the protocol it implements
    _store: TaskStore = MemoryStore()
