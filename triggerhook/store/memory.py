"""An in-memory task store (implements :class:`triggerhook.interfaces.TaskStore`).

A model of the ``th_tasks`` table under the same rules as the SQL in
``triggerhook/store/sql.py`` run by :class:`triggerhook.store.mysql.MySQLStore`,
held to them by the store contract suite (``tests/contract``), which runs
against both:

* every row carries the revision it was written with (``rev``);
* claim: rows due by the horizon whose claim has expired (``claim_until_ms <
  now``), earliest first, up to the limit; those due by the arm horizon, and
  those armed already (by an instance that died), come back armed;
* arm: only rows still claimed by the caller at the claim's revision (a row
  already armed at it counts as armed);
* cancel and reschedule only unarmed rows; delete only armed rows; defer only
  the caller's armed row at the revision it holds.

Where MySQL's answers depend on how it stores a row, this store answers the
same: an empty routing key (the schema's NULL) reads back as
``default_routing_key``; :meth:`MemoryStore.get` does not read ``attempts``
(``SELECT_TASK`` does not select it) and reports 0; counts are of rows
*changed* (MySQL's affected rows), so renewing a claim to the lease it already
has counts nothing.

Nothing is persisted: for tests, and for running without a database.
Thread-safe: every call holds one lock for its whole "transaction".
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import ConflictError
from triggerhook.interfaces import (
    Claim,
    ClaimMode,
    Deferral,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
    TaskStore,
)


@dataclass(slots=True)
class StoredRow:
    """One row of the table. ``task.attempts`` is the row's ``attempts`` column."""

    task: Task
    claimed_by: str | None = None
    claim_until_ms: int = 0
    firing: bool = False
    rev: int = 0  # the schema's default; every insert writes a random one


class MemoryStore:
    """In-memory :class:`~triggerhook.interfaces.TaskStore`. Thread-safe."""

    def __init__(self, default_routing_key: str = "") -> None:
        self._rows: dict[str, StoredRow] = {}
        # Re-entrant, so that a subclass may hold it around a call of these methods.
        self._lock = threading.RLock()
        self._default_routing_key = default_routing_key

    # -- rows <-> tasks -------------------------------------------------------------

    def _read(self, task: Task, attempts: int | None = None) -> Task:
        """The task as the database hands it back: an empty routing key (NULL)
        resolved to the default; ``attempts`` only where the query selects it."""
        routing_key = task.routing_key or self._default_routing_key
        return Task(
            task.id,
            task.due_ms,
            routing_key,
            task.payload,
            task.attempts if attempts is None else attempts,
        )

    @staticmethod
    def _new_row(task: Task, claim: ClaimMode, rev: int, instance: str, lease: int) -> StoredRow:
        claimed = claim is not ClaimMode.NONE
        return StoredRow(
            task,
            instance if claimed else None,
            lease if claimed else 0,
            claim is ClaimMode.ARM,
            rev,
        )

    # -- scheduling -----------------------------------------------------------------

    def insert(
        self, rows: Sequence[NewRow], instance: str, lease_until_ms: int, atomic: bool
    ) -> list[InsertOutcome]:
        with self._lock:
            staged: dict[str, StoredRow] = {}
            first: dict[str, tuple[NewRow, InsertOutcome]] = {}  # id -> its first row
            outcomes: list[InsertOutcome] = []
            for new in rows:
                tid = new.task.id
                earlier = first.get(tid)
                if earlier is not None:  # a repeat in this batch: like _repeat_outcome
                    same = new.task == earlier[0].task and earlier[1] is not InsertOutcome.CONFLICT
                    outcome = InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT
                elif tid in self._rows:  # compared as read back from the table
                    same = self._read(self._rows[tid].task, 0) == new.task
                    outcome = InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT
                else:
                    staged[tid] = self._new_row(
                        new.task, new.claim, new.rev, instance, lease_until_ms
                    )
                    outcome = InsertOutcome.CREATED
                first.setdefault(tid, (new, outcome))
                outcomes.append(outcome)
            if atomic and InsertOutcome.CONFLICT in outcomes:
                raise ConflictError(rows[outcomes.index(InsertOutcome.CONFLICT)].task.id)
            self._rows.update(staged)
            return outcomes

    # -- engine ---------------------------------------------------------------------

    def claim(
        self,
        instance: str,
        now_ms: int,
        horizon_ms: int,
        arm_until_ms: int,
        lease_until_ms: int,
        limit: int,
    ) -> list[Claim]:
        with self._lock:
            claimable = sorted(
                (
                    r
                    for r in self._rows.values()
                    if r.task.due_ms <= horizon_ms and r.claim_until_ms < now_ms
                ),
                key=lambda r: r.task.due_ms,
            )[: max(limit, 0)]
            out = []
            for r in claimable:
                r.claimed_by = instance
                r.claim_until_ms = lease_until_ms
                r.firing = r.firing or r.task.due_ms <= arm_until_ms
                out.append(
                    Claim(dataclasses.replace(self._read(r.task), rev=r.rev), r.rev, r.firing)
                )
            return out

    def arm(self, instance: str, claims: Sequence[Claim]) -> list[Claim]:
        with self._lock:
            armed = []
            for claim in claims:
                # Like LOCK_ARMABLE + ARM_ROWS: still claimed by the caller and at
                # the claim's revision (a row already firing at it counts as armed).
                r = self._rows.get(claim.task.id)
                if r is None or r.claimed_by != instance or r.rev != claim.rev:
                    continue
                r.firing = True
                armed.append(claim)
            return armed

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        with self._lock:
            gone = [
                tid
                for tid, rev in dict.fromkeys(fired)
                if tid in self._rows and self._rows[tid].firing and self._rows[tid].rev == rev
            ]
            for tid in gone:
                del self._rows[tid]
            return len(gone)

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> int:
        with self._lock:
            moved = 0
            for d in deferrals:
                # Like DEFER_UNDELIVERED: only our armed row at the revision we hold.
                r = self._rows.get(d.task_id)
                if r is None or r.claimed_by != instance or r.rev != d.rev or not r.firing:
                    continue
                r.task = dataclasses.replace(r.task, attempts=r.task.attempts + 1)
                r.firing, r.claimed_by, r.claim_until_ms, r.rev = (
                    False,
                    None,
                    d.not_before_ms,
                    d.new_rev,
                )
                moved += 1
            return moved

    def renew_claims(self, instance: str, ids: Sequence[str], lease_until_ms: int) -> int:
        with self._lock:
            renewed = 0
            for tid in dict.fromkeys(ids):
                r = self._rows.get(tid)
                # Counted like MySQL's affected rows: a lease already at that time
                # is matched but not changed.
                if r is not None and r.claimed_by == instance:
                    renewed += r.claim_until_ms != lease_until_ms
                    r.claim_until_ms = lease_until_ms
            return renewed

    def release_claims(self, instance: str, ids: Sequence[str] | None = None) -> int:
        with self._lock:
            wanted = None if ids is None else set(ids)
            released = 0
            for tid, r in self._rows.items():
                if r.claimed_by == instance and (wanted is None or tid in wanted):
                    r.claimed_by = None
                    r.claim_until_ms = 0
                    released += 1
            return released

    # -- lookups --------------------------------------------------------------------

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """One transaction; an id given twice is cancelled once, then not found."""
        with self._lock:
            results = []
            for tid in task_ids:
                r = self._rows.get(tid)
                if r is None:
                    results.append(CancelResult.NOT_FOUND)
                elif r.firing:
                    results.append(CancelResult.TOO_LATE)
                else:
                    del self._rows[tid]
                    results.append(CancelResult.CANCELLED)
            return results

    def reschedule(self, moves: Sequence[Move], instance: str, lease_until_ms: int) -> list[Moved]:
        with self._lock:
            last = {move.task_id: move for move in moves}  # an id moved twice: the last move
            outcome: dict[str, Moved] = {}
            for tid, move in last.items():
                row = self._rows.get(tid)
                if row is None:
                    outcome[tid] = Moved(RescheduleResult.NOT_FOUND)
                elif row.firing:
                    outcome[tid] = Moved(RescheduleResult.TOO_LATE)
                else:
                    # Like RESCHEDULE: a new due time and revision, attempts reset.
                    task = dataclasses.replace(row.task, due_ms=move.due_ms, attempts=0)
                    self._rows[tid] = self._new_row(
                        task, move.claim, move.rev, instance, lease_until_ms
                    )
                    outcome[tid] = Moved(RescheduleResult.RESCHEDULED, self._read(task))
            return [outcome[move.task_id] for move in moves]

    def get(self, task_id: str) -> TaskInfo | None:
        with self._lock:
            r = self._rows.get(task_id)
            if r is None:
                return None
            state = TaskState.FIRING if r.firing else TaskState.SCHEDULED
            return TaskInfo(self._read(r.task, 0), state)

    def count_tasks(self) -> int:
        with self._lock:
            return len(self._rows)

    def earliest_due_ms(self) -> int | None:
        with self._lock:
            return min((r.task.due_ms for r in self._rows.values()), default=None)

    def database_time_us(self) -> int:
        """This process's clock: the memory store's "server" is this process."""
        return time.time_ns() // 1000

    def check_schema(self) -> None:
        """Always current: there is no schema."""

    def close(self) -> None:
        """Nothing to release (the rows stay, as a database's would)."""


if TYPE_CHECKING:  # mypy checks the store against the protocol it implements
    _store: TaskStore = MemoryStore()
