"""The write path: inserts, moves (reschedules) and cancels, from plan to adopt.

Each kind of change goes the same way, owned here and nowhere else:

    plan      soon-due rows claim on write: reserve room in the inventory
    write     concurrent single calls share one group-commit transaction
              (a :class:`GroupCommitter` per kind); a batch or a call made
              while the engine is not running writes directly, unclaimed
    adopt     after the commit, hold what this instance claimed (the preloader
              queues it to the armer or the scheduler)
    unplan    a call refused, abandoned or failed gives its room back

Threads: the plan runs on the caller's thread, the write and adopt on a
committer's writer thread (or the caller's, when direct). Counters are added
to by whichever thread committed the change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from triggerhook.domain.task import CancelResult, Task
from triggerhook.engine.groupcommit import Done, GroupCommitter, Ticket
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.preloader import Preloader
from triggerhook.errors import NotRunningError, Overloaded
from triggerhook.interfaces import (
    Claim,
    ClaimMode,
    Clock,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
    TaskStore,
)
from triggerhook.runtime.counters import Tally
from triggerhook.runtime.worker import FailureHandler

Asked = TypeVar("Asked")
Planned = TypeVar("Planned")
Result = TypeVar("Result")
Row = TypeVar("Row", NewRow, Move)

# Plans what was asked; the flag says whether soon-due rows may claim.
Plan = Callable[[Sequence[Asked], bool], list[Planned]]


@dataclass(frozen=True, slots=True)
class WriteLimits:
    """The write path's share of the engine's configuration."""

    instance: str
    claim_lease_ms: int
    preload_window_ms: int
    arm_ahead_ms: int
    batch_size: int  # rows per group-commit transaction
    max_queued: int  # calls waiting for a group commit, per kind


class _Path(Generic[Asked, Planned, Result]):
    """One kind of change: plan it, group-commit it (or write it directly), or
    refuse it and give back what its plan reserved."""

    def __init__(
        self,
        name: str,
        plan: Plan[Asked, Planned],
        write: Callable[[Sequence[Planned]], list[Result]],
        unplan: Callable[[Sequence[Planned]], None],
        running: Callable[[], bool],
        limits: WriteLimits,
        on_failure: FailureHandler,
    ) -> None:
        self._plan = plan
        self._write = write
        self._unplan = unplan
        self._running = running
        self.committer: GroupCommitter[Planned, Result] = GroupCommitter(
            write,
            limits.batch_size,
            writers=1,
            on_failure=on_failure,
            name=name,
            max_queued=limits.max_queued,
            discard=unplan,
        )

    def call(self, item: Asked, timeout_s: float) -> Result:
        """Committed before it returns; see :meth:`GroupCommitter.submit`."""
        if self._running():
            planned = self._plan([item], True)
            try:
                return self.committer.submit(planned[0], timeout_s)
            except NotRunningError:  # stopping: refused before queuing; go direct
                self._unplan(planned)
            except Overloaded:  # refused before queuing; not going around the bound
                self._unplan(planned)
                raise
        return self.direct([item])[0]

    def call_nowait(self, item: Asked, done: Done[Result]) -> Ticket:
        """Queued for the next group commit; see :meth:`GroupCommitter.enqueue`.
        Raises (nothing queued) :class:`NotRunningError` unless the engine runs."""
        if not self._running():
            raise NotRunningError("the engine is not running")
        planned = self._plan([item], True)
        try:
            return self.committer.enqueue(planned[0], done)
        except (NotRunningError, Overloaded):
            self._unplan(planned)
            raise

    def direct(self, items: Sequence[Asked]) -> list[Result]:
        """Written now on the caller's thread, claiming nothing."""
        return self._write(self._plan(items, False))


class Writes:
    """Owns the group committers and every step of a change (see the module doc)."""

    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        inventory: Inventory,
        preloader: Preloader,
        limits: WriteLimits,
        running: Callable[[], bool],
        on_failure: FailureHandler,
    ) -> None:
        self._store = store
        self._clock = clock
        self._inventory = inventory
        self._preloader = preloader
        self._limits = limits
        self._running = running
        self.inserts = _Path(
            "commit", self.plan_inserts, self._insert, self.unplan, running, limits, on_failure
        )
        self.moves = _Path(
            "reschedule", self.plan_moves, self._move, self.unplan, running, limits, on_failure
        )
        self.cancels = _Path("cancel", _as_is, self._cancel, _nothing, running, limits, on_failure)
        self.created = Tally()
        self.cancelled = Tally()
        self.rescheduled = Tally()

    # -- lifecycle: the group committers' threads ----------------------------------

    def committers(self) -> list[GroupCommitter[Any, Any]]:
        return [self.inserts.committer, self.moves.committer, self.cancels.committer]

    def start(self) -> None:
        for committer in self.committers():
            committer.start()

    def stop(self) -> None:
        """Refuse new calls; the writers finish what is queued."""
        for committer in self.committers():
            committer.stop()

    def join(self, timeout_s: float | None = None) -> bool:
        return all(committer.join(timeout_s) for committer in self.committers())

    # -- inserts ------------------------------------------------------------------

    def insert_many(self, tasks: Sequence[Task]) -> list[InsertOutcome]:
        """All in one transaction, on the caller's thread: all of them or none."""
        rows = self.plan_inserts(tasks)
        return self._write_rows(rows, atomic=True)

    def plan_inserts(self, tasks: Sequence[Task], claim: bool = True) -> list[NewRow]:
        """How each new task is held: soon-due ones go straight into memory
        (room reserved; settled by the write, or by :meth:`unplan`)."""
        modes = self._claim_modes([task.due_ms for task in tasks], claim)
        return [NewRow(task, mode) for task, mode in zip(tasks, modes, strict=True)]

    def _insert(self, rows: Sequence[NewRow]) -> list[InsertOutcome]:
        return self._write_rows(rows, atomic=False)

    def _write_rows(self, rows: Sequence[NewRow], atomic: bool) -> list[InsertOutcome]:
        instance = self._limits.instance
        return self._written(
            rows,
            lambda lease_until_ms: self._store.insert(rows, instance, lease_until_ms, atomic),
            self.adopt_inserts,
        )

    def adopt_inserts(self, rows: Sequence[NewRow], outcomes: Sequence[InsertOutcome]) -> None:
        """After the commit: hold the rows this instance claimed on insert
        (settling the room of every planned row)."""
        self.created.add(sum(1 for outcome in outcomes if outcome is InsertOutcome.CREATED))
        claims = [
            Claim(replace(row.task, rev=row.rev), row.rev, row.claim is ClaimMode.ARM)
            for row, outcome in zip(rows, outcomes, strict=True)
            if outcome is InsertOutcome.CREATED and row.claim is not ClaimMode.NONE
        ]
        self._preloader.hold(claims, _claiming(rows), self._clock.now_ms())

    # -- moves --------------------------------------------------------------------

    def plan_moves(self, moves: Sequence[tuple[str, int]], claim: bool = True) -> list[Move]:
        """Like :meth:`plan_inserts`, for (task id, new due time) pairs."""
        modes = self._claim_modes([due_ms for _, due_ms in moves], claim)
        return [Move(tid, due, mode) for (tid, due), mode in zip(moves, modes, strict=True)]

    def _move(self, moves: Sequence[Move]) -> list[Moved]:
        instance = self._limits.instance
        return self._written(
            moves,
            lambda lease_until_ms: self._store.reschedule(moves, instance, lease_until_ms),
            self.adopt_moves,
        )

    def adopt_moves(self, moves: Sequence[Move], outcomes: Sequence[Moved]) -> None:
        """After the commit: hold the moved rows this instance claimed.

        An id moved twice in one batch was written by its last move only: the
        earlier moves' revisions never existed, so they are not held (an armed
        copy would fire without being checked against the row)."""
        self.rescheduled.add(sum(1 for moved in outcomes if moved.task is not None))
        last = {move.task_id: index for index, move in enumerate(moves)}
        claims = [
            Claim(replace(moved.task, rev=move.rev), move.rev, move.claim is ClaimMode.ARM)
            for index, (move, moved) in enumerate(zip(moves, outcomes, strict=True))
            if moved.task is not None
            and move.claim is not ClaimMode.NONE
            and last[move.task_id] == index
        ]
        self._preloader.hold(claims, _claiming(moves), self._clock.now_ms())

    # -- cancels ------------------------------------------------------------------

    def _cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """In one transaction (see :meth:`TaskStore.cancel`), counted."""
        results = self._store.cancel(task_ids)
        self.cancelled.add(sum(1 for r in results if r is CancelResult.CANCELLED))
        return results

    # -- the steps every claiming write shares ------------------------------------

    def _written(
        self,
        rows: Sequence[Row],
        write: Callable[[int], list[Result]],
        adopt: Callable[[Sequence[Row], Sequence[Result]], None],
    ) -> list[Result]:
        """``write(lease_until_ms)``, then ``adopt`` what it claimed; if it raised,
        give back the room the rows reserved (nothing of them is held)."""
        lease_until_ms = int(self._clock.now_ms()) + self._limits.claim_lease_ms
        try:
            outcomes = write(lease_until_ms)
        except BaseException:
            self.unplan(rows)
            raise
        adopt(rows, outcomes)
        return outcomes

    # -- room in memory -----------------------------------------------------------

    def _claim_modes(self, dues_ms: Sequence[int], claim: bool) -> list[ClaimMode]:
        if not (claim and self._running()):  # only a running engine holds rows
            return [ClaimMode.NONE] * len(dues_ms)
        now_ms = self._clock.now_ms()
        horizon = now_ms + self._limits.preload_window_ms
        arm_by = now_ms + self._limits.arm_ahead_ms
        soon = sum(1 for due_ms in dues_ms if due_ms <= horizon)
        room = self._inventory.reserve(soon) if soon else 0
        if room < soon:
            # Memory is (nearly) full: the preloader claims these as room frees.
            self._preloader.wake()
        modes = []
        for due_ms in dues_ms:
            if due_ms <= horizon and room > 0:
                room -= 1
                modes.append(ClaimMode.ARM if due_ms <= arm_by else ClaimMode.CLAIM)
            else:
                modes.append(ClaimMode.NONE)
        return modes

    def unplan(self, rows: Sequence[NewRow | Move]) -> None:
        """Give back the room planned rows reserved (they were not written)."""
        self._inventory.release(_claiming(rows))

    def counters(self) -> dict[str, int]:
        committers = self.committers()
        return {
            "scheduled": self.created.value,
            "cancelled": self.cancelled.value,
            "rescheduled": self.rescheduled.value,
            "commits_refused": sum(c.refused for c in committers),
            "commits_abandoned": sum(c.abandoned for c in committers),
        }

    def failed_writes(self) -> int:
        return sum(c.failed_writes for c in self.committers())


def _claiming(rows: Sequence[NewRow | Move]) -> int:
    """Rows that claim on write: each holds one unit of reserved room."""
    return sum(1 for row in rows if row.claim is not ClaimMode.NONE)


def _as_is(task_ids: Sequence[str], _claim: bool) -> list[str]:
    return list(task_ids)


def _nothing(_task_ids: Sequence[str]) -> None:
    """A cancel reserves nothing."""
