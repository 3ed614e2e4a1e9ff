"""In-memory fakes for unit tests of the engine's stages, and a polling helper.

* :class:`FakeClock`: wall-clock time the test sets (``now``) instead of reading it.
* :class:`FakeStore`: a thread-safe, in-memory model of the ``th_tasks`` table
  implementing the :class:`triggerhook.interfaces.TaskStore` protocol with the
  same rules as the SQL in ``triggerhook/store/sql.py`` and
  ``triggerhook/store/mysql.py`` (every row carries the ``rev`` it was
  inserted with; claimable = claim expired; arm only rows still claimed by the
  caller at the claim's revision, a row already armed at that revision counting
  as armed; cancel and reschedule only unarmed rows; delete only armed rows). It records every
  call, and :meth:`FakeStore.fail_next` makes the next call(s) of a method raise.
* :class:`FakePublisher`: an :class:`~triggerhook.interfaces.EventPublisher`
  that publishes nothing (for an :class:`~triggerhook.engine.engine.Engine`
  whose scheduling into memory is under test, not its firing).
* :func:`wait_until`: poll a condition with short waits until a deadline.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import ConflictError, SchemaError
from triggerhook.interfaces import (
    Claim,
    ClaimMode,
    Clock,
    Deferral,
    EventPublisher,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
    TaskStore,
    new_rev,
)

DEFAULT_NOW_MS = 1_700_000_000_000.0


class FakeClock:
    """A clock that stands still: ``now`` is the time in epoch ms; set or advance it.

    ``reads`` counts calls of :meth:`now_ms`, so a test can tell that a thread
    has reached the point where it reads the clock.
    """

    def __init__(self, now_ms: float = DEFAULT_NOW_MS) -> None:
        self.now = now_ms
        self.reads = 0

    def now_ms(self) -> float:
        self.reads += 1
        return self.now

    def set(self, now_ms: float) -> None:
        self.now = now_ms

    def advance(self, delta_ms: float) -> None:
        self.now += delta_ms


@dataclass(slots=True)
class StoredRow:
    task: Task
    claimed_by: str | None = None
    claim_until_ms: int = 0
    firing: bool = False
    rev: int = 0  # the schema's default; every insert writes a random one


@dataclass(frozen=True, slots=True)
class ClaimCall:
    instance: str
    now_ms: int
    horizon_ms: int
    arm_until_ms: int
    lease_until_ms: int
    limit: int


@dataclass(frozen=True, slots=True)
class RenewCall:
    instance: str
    ids: tuple[str, ...]
    lease_until_ms: int


class FakeStore:
    """In-memory :class:`~triggerhook.interfaces.TaskStore`. Thread-safe."""

    def __init__(self) -> None:
        self.rows: dict[str, StoredRow] = {}
        self._lock = threading.Lock()
        self._failures: defaultdict[str, deque[BaseException]] = defaultdict(deque)
        self.claim_calls: list[ClaimCall] = []
        self.arm_calls: list[list[str]] = []
        self.delete_calls: list[list[str]] = []
        self.renew_calls: list[RenewCall] = []
        self.release_calls: list[tuple[str, list[str] | None]] = []
        self.schema_ok = True
        self.closed = False
        self.count_calls = 0

    # -- test controls ------------------------------------------------------------

    def fail_next(self, method: str, *errors: BaseException) -> None:
        """The next ``len(errors)`` calls of ``method`` raise these errors, in order."""
        if not hasattr(self, method):
            raise AttributeError(method)
        with self._lock:
            self._failures[method].extend(errors)

    def put(
        self,
        task: Task,
        claimed_by: str | None = None,
        claim_until_ms: int = 0,
        firing: bool = False,
        rev: int | None = None,
    ) -> int:
        """Store a row directly, as if inserted earlier; returns its revision.

        Without ``rev`` the row gets a fresh one (a new row, as an insert would
        write); pass the revision of an existing row to change it in place.
        """
        row_rev = new_rev() if rev is None else rev
        with self._lock:
            self.rows[task.id] = StoredRow(task, claimed_by, claim_until_ms, firing, row_rev)
        return row_rev

    def row(self, task_id: str) -> StoredRow | None:
        with self._lock:
            return self.rows.get(task_id)

    def ids(self) -> set[str]:
        with self._lock:
            return set(self.rows)

    def deleted_ids(self) -> list[str]:
        """Every id passed to delete_fired by a call that succeeded, in order."""
        with self._lock:
            return [tid for batch in self.delete_calls for tid in batch]

    def _maybe_fail(self, method: str) -> None:
        # Called with self._lock held.
        queue = self._failures.get(method)
        if queue:
            raise queue.popleft()

    # -- TaskStore ----------------------------------------------------------------

    def insert(
        self, rows: Sequence[NewRow], instance: str, lease_until_ms: int, atomic: bool
    ) -> list[InsertOutcome]:
        with self._lock:
            self._maybe_fail("insert")
            staged: dict[str, StoredRow] = {}
            outcomes: list[InsertOutcome] = []
            for new in rows:
                existing = staged.get(new.task.id) or self.rows.get(new.task.id)
                if existing is not None:
                    same = existing.task == new.task
                    outcomes.append(InsertOutcome.EXISTS if same else InsertOutcome.CONFLICT)
                    if atomic and not same:
                        raise ConflictError(new.task.id)
                    continue
                claimed = new.claim is not ClaimMode.NONE
                staged[new.task.id] = StoredRow(
                    new.task,
                    instance if claimed else None,
                    lease_until_ms if claimed else 0,
                    new.claim is ClaimMode.ARM,
                    new.rev,
                )
                outcomes.append(InsertOutcome.CREATED)
            self.rows.update(staged)
            return outcomes

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
            self._maybe_fail("claim")
            self.claim_calls.append(
                ClaimCall(instance, now_ms, horizon_ms, arm_until_ms, lease_until_ms, limit)
            )
            claimable = sorted(
                (
                    r
                    for r in self.rows.values()
                    if r.task.due_ms <= horizon_ms and r.claim_until_ms < now_ms
                ),
                key=lambda r: r.task.due_ms,
            )[:limit]
            out = []
            for r in claimable:
                r.claimed_by = instance
                r.claim_until_ms = lease_until_ms
                r.firing = r.firing or r.task.due_ms <= arm_until_ms
                out.append(Claim(r.task, r.rev, r.firing))
            return out

    def arm(self, instance: str, claims: Sequence[Claim]) -> list[Claim]:
        with self._lock:
            self._maybe_fail("arm")
            self.arm_calls.append([c.task.id for c in claims])
            armed = []
            for claim in claims:
                # Like LOCK_ARMABLE + ARM_ROWS: still claimed by the caller and at
                # the claim's revision (a row already firing at it counts as armed).
                r = self.rows.get(claim.task.id)
                if r is None or r.claimed_by != instance or r.rev != claim.rev:
                    continue
                r.firing = True
                armed.append(claim)
            return armed

    def delete_fired(self, ids: Sequence[str]) -> int:
        with self._lock:
            self._maybe_fail("delete_fired")
            self.delete_calls.append(list(ids))
            gone = [tid for tid in ids if tid in self.rows and self.rows[tid].firing]
            for tid in gone:
                del self.rows[tid]
            return len(gone)

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> int:
        with self._lock:
            self._maybe_fail("defer")
            moved = 0
            for d in deferrals:
                # Like DEFER_UNDELIVERED: only our armed row at the revision we hold.
                r = self.rows.get(d.task_id)
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
            self._maybe_fail("renew_claims")
            self.renew_calls.append(RenewCall(instance, tuple(ids), lease_until_ms))
            renewed = 0
            for tid in ids:
                r = self.rows.get(tid)
                if r is not None and r.claimed_by == instance:
                    r.claim_until_ms = lease_until_ms
                    renewed += 1
            return renewed

    def release_claims(self, instance: str, ids: Sequence[str] | None = None) -> int:
        with self._lock:
            self._maybe_fail("release_claims")
            self.release_calls.append((instance, None if ids is None else list(ids)))
            wanted = None if ids is None else set(ids)
            released = 0
            for tid, r in self.rows.items():
                if r.claimed_by == instance and (wanted is None or tid in wanted):
                    r.claimed_by = None
                    r.claim_until_ms = 0
                    released += 1
            return released

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """One transaction; an id given twice is cancelled once, then not found."""
        with self._lock:
            self._maybe_fail("cancel")
            results = []
            for tid in task_ids:
                r = self.rows.get(tid)
                if r is None:
                    results.append(CancelResult.NOT_FOUND)
                elif r.firing:
                    results.append(CancelResult.TOO_LATE)
                else:
                    del self.rows[tid]
                    results.append(CancelResult.CANCELLED)
            return results

    def reschedule(self, moves: Sequence[Move], instance: str, lease_until_ms: int) -> list[Moved]:
        with self._lock:
            self._maybe_fail("reschedule")
            last = {move.task_id: move for move in moves}
            outcome: dict[str, Moved] = {}
            for tid, move in last.items():
                row = self.rows.get(tid)
                if row is None:
                    outcome[tid] = Moved(RescheduleResult.NOT_FOUND)
                elif row.firing:
                    outcome[tid] = Moved(RescheduleResult.TOO_LATE)
                else:
                    task = dataclasses.replace(row.task, due_ms=move.due_ms)
                    claimed = move.claim is not ClaimMode.NONE
                    self.rows[tid] = StoredRow(
                        task,
                        instance if claimed else None,
                        lease_until_ms if claimed else 0,
                        move.claim is ClaimMode.ARM,
                        move.rev,
                    )
                    outcome[tid] = Moved(RescheduleResult.RESCHEDULED, task)
            return [outcome[move.task_id] for move in moves]

    def count_tasks(self) -> int:
        with self._lock:
            self._maybe_fail("count_tasks")
            self.count_calls += 1
            return len(self.rows)

    def earliest_due_ms(self) -> int | None:
        with self._lock:
            self._maybe_fail("earliest_due_ms")
            return min((r.task.due_ms for r in self.rows.values()), default=None)

    def check_schema(self) -> None:
        with self._lock:
            self._maybe_fail("check_schema")
            if not self.schema_ok:
                raise SchemaError("fake store: schema not current")

    def get(self, task_id: str) -> TaskInfo | None:
        with self._lock:
            self._maybe_fail("get")
            r = self.rows.get(task_id)
            if r is None:
                return None
            return TaskInfo(r.task, TaskState.FIRING if r.firing else TaskState.SCHEDULED)

    def close(self) -> None:
        self.closed = True


class FakePublisher:
    """An event publisher without a broker: it never takes anything from the
    send buffer, so fired tasks stay there for the test to look at."""

    def __init__(self) -> None:
        self.started = False
        self.finished = False
        self.wakes = 0

    def start(self) -> None:
        self.started = True

    def wake(self) -> None:
        self.wakes += 1

    def finish(self, deadline_s: float) -> None:
        self.finished = True

    def join(self, timeout_s: float | None = None) -> bool:
        return True

    def is_alive(self) -> bool:
        return self.started and not self.finished

    def is_connected(self) -> bool:
        return self.is_alive()

    def counters(self) -> dict[str, int]:
        return {}

    def take_lateness(self) -> list[float]:
        return []

    def unconfirmed(self) -> int:
        return 0


if TYPE_CHECKING:  # mypy checks the fakes against the protocols they stand in for
    _store: TaskStore = FakeStore()
    _clock: Clock = FakeClock()
    _publisher: EventPublisher = FakePublisher()
