"""The write path: inserts, moves (reschedules), cancels, a series' pause
and resume, and the outbox's moves (R6o).

Each kind of change goes the same way, owned here and nowhere else:

    plan      a new revision per row (``NewRow``, ``Move``)
    write     concurrent single calls share one group-commit transaction
              (a :class:`GroupCommitter` per kind); a batch or a call made
              while the engine is not running writes directly
    after     a written row is never armed (R6): the owner of its shard arms
              it. When that is this instance and the row is due soon, its
              armer is woken, so the row waits for no arming interval.

Threads: the plan runs on the caller's thread, the write on a committer's
writer thread (or the caller's, when direct). Counters are added to by
whichever thread committed the change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from triggerhook.domain.task import CancelResult, InsertOutcome, OnConflict, SeriesResult, Task
from triggerhook.engine.groupcommit import Done, GroupCommitter, Ticket
from triggerhook.errors import AlreadyFiredError, NotRunningError, StoreReadOnly
from triggerhook.interfaces import (
    Clock,
    Inserted,
    Move,
    Moved,
    NewRow,
    TaskStore,
)
from triggerhook.runtime.counters import Tally
from triggerhook.runtime.worker import FailureHandler

log = logging.getLogger(__name__)

Asked = TypeVar("Asked")
# A move's answers that wrote nothing; at most _LOGGED of them logged a move.
_NOT_WRITTEN = frozenset(
    {InsertOutcome.CONFLICT, InsertOutcome.TOO_LATE, InsertOutcome.ALREADY_FIRED}
)
_LOGGED = 10
Create = tuple[Task, OnConflict]  # a task to create, and what to do if its id exists
Planned = TypeVar("Planned")
Result = TypeVar("Result")


@dataclass(frozen=True, slots=True)
class WriteLimits:
    """The write path's share of the engine's configuration."""

    soon_ms: int  # a row due within this is "soon": wake the armer if it is ours
    batch_size: int  # rows per group-commit transaction
    max_queued: int  # calls waiting for a group commit, per kind


class _Path(Generic[Asked, Planned, Result]):
    """One kind of change: plan it, then group-commit it (or write it directly)."""

    def __init__(
        self,
        name: str,
        plan: Callable[[Sequence[Asked]], list[Planned]],
        write: Callable[[Sequence[Planned]], list[Result]],
        running: Callable[[], bool],
        limits: WriteLimits,
        on_failure: FailureHandler,
    ) -> None:
        self._plan = plan
        self._write = write
        self._running = running
        self.committer: GroupCommitter[Planned, Result] = GroupCommitter(
            write,
            limits.batch_size,
            writers=1,
            on_failure=on_failure,
            name=name,
            max_queued=limits.max_queued,
        )

    def call(self, item: Asked, timeout_s: float) -> Result:
        """Committed before it returns; see :meth:`GroupCommitter.submit`."""
        if self._running():
            try:
                return self.committer.submit(self._plan([item])[0], timeout_s)
            except NotRunningError:  # stopping: refused before queuing; go direct
                pass
        return self.direct([item])[0]

    def call_nowait(self, item: Asked, done: Done[Result]) -> Ticket:
        """Queued for the next group commit; see :meth:`GroupCommitter.enqueue`.
        Raises (nothing queued) :class:`NotRunningError` unless the engine runs."""
        if not self._running():
            raise NotRunningError("the engine is not running")
        return self.committer.enqueue(self._plan([item])[0], done)

    def direct(self, items: Sequence[Asked]) -> list[Result]:
        """Written now on the caller's thread."""
        return self._write(self._plan(items))


class Writes:
    """Owns the group committers and every step of a change (see the module doc)."""

    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        owns: Callable[[int], bool],
        wake_armer: Callable[[], None],
        limits: WriteLimits,
        running: Callable[[], bool],
        on_failure: FailureHandler,
    ) -> None:
        self._store = store
        self._clock = clock
        self._owns = owns  # shard -> do its soon-due rows wake the armer
        self._wake_armer = wake_armer
        self._limits = limits
        self.inserts = _Path("commit", _new_rows, self._insert, running, limits, on_failure)
        self.moves = _Path("reschedule", _moves, self._move, running, limits, on_failure)
        self.cancels = _Path("cancel", list, self._cancel, running, limits, on_failure)
        self.created = Tally()
        self.replaced = Tally()
        self.cancelled = Tally()
        self.rescheduled = Tally()
        self.dedup_refused = Tally()  # creates answered ALREADY_FIRED (a dedup window)
        self.outbox_moved = Tally()  # outbox rows moved (R6o), whatever their answer
        self.outbox_refused = Tally()  # of those, tasks not written (conflict, too late, fired)

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

    # -- the writes ---------------------------------------------------------------

    def insert_many(self, creates: Sequence[Create], fired_ok: bool = False) -> list[Inserted]:
        """All in one transaction, on the caller's thread: all of them or
        none; ``fired_ok``: an id fired within its window is answered
        ALREADY_FIRED and the others written (a backfill's copies)."""
        try:
            inserted = self._store.insert(
                _new_rows(creates), atomic=True, now_ms=self._clock.now_ms(), fired_ok=fired_ok
            )
        except AlreadyFiredError:
            self.dedup_refused.add(1)
            raise
        self._written(inserted)
        return inserted

    def _insert(self, rows: Sequence[NewRow]) -> list[Inserted]:
        inserted = self._store.insert(rows, atomic=False, now_ms=self._clock.now_ms())
        self._written(inserted)
        return inserted

    def _written(self, inserted: Sequence[Inserted]) -> None:
        created = [i.task for i in inserted if i.outcome is InsertOutcome.CREATED]
        replaced = [i.task for i in inserted if i.outcome is InsertOutcome.REPLACED]
        self.created.add(len(created))
        refused = sum(1 for i in inserted if i.outcome is InsertOutcome.ALREADY_FIRED)
        if refused:
            self.dedup_refused.add(refused)
        if replaced:
            self.replaced.add(len(replaced))
            created += replaced
        self._wake_if_ours([(t.id, t.due_ms) for t in created])

    def _move(self, moves: Sequence[Move]) -> list[Moved]:
        outcomes = self._store.reschedule(moves)
        moved = [m for m in outcomes if m.task is not None]
        self.rescheduled.add(len(moved))
        self._wake_if_ours([(m.task.id, m.task.due_ms) for m in moved if m.task is not None])
        return outcomes

    def _cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """In one transaction (see :meth:`TaskStore.cancel`), counted."""
        results = self._store.cancel(task_ids)
        self.cancelled.add(sum(1 for r in results if r is CancelResult.CANCELLED))
        return results

    def move_outbox(self, limit: int) -> int:
        """R6o, on the mover's thread: the rows it took out of the outbox.
        A task its insert did not write (the id exists with other content,
        is being published, or fired within its window) is logged and
        counted: its caller's transaction is gone, nobody else is told."""
        moved = self._store.move_outbox(limit, self._clock.now_ms())
        self._written(moved.inserted)
        self.outbox_moved.add(moved.taken)
        refused = [i for i in moved.inserted if i.outcome in _NOT_WRITTEN]
        if refused:
            self.outbox_refused.add(len(refused))
            for answer in refused[:_LOGGED]:
                log.warning("outbox task %r not written: %s", answer.task.id, answer.outcome.value)
        return moved.taken

    def pause(self, task_ids: Sequence[str]) -> list[SeriesResult]:
        """Pause series, on the caller's thread (rare: no group commit)."""
        return self._store.pause(task_ids)

    def resume(self, task_ids: Sequence[str]) -> list[SeriesResult]:
        """Resume series, on the caller's thread; the armer is woken, as a
        resumed series' occurrence (or a missed one's copy) may be due now."""
        results = self._store.resume(task_ids, self._clock.now_ms())
        if SeriesResult.RESUMED in results:
            self._wake_armer()
        return results

    def _wake_if_ours(self, written: Sequence[tuple[str, int]]) -> None:
        """A soon-due row of a shard this instance owns: arm it now, not at the
        next interval (another instance's rows wait for their owner's pass).
        In an API process every shard counts: its wake goes to the firing one."""
        soon_ms = self._clock.now_ms() + self._limits.soon_ms
        placement, owns = self._store.placement(), self._owns
        if any(
            due_ms <= soon_ms and any(map(owns, placement.candidates(tid)))
            for tid, due_ms in written
        ):
            self._wake_armer()

    def counters(self) -> dict[str, int]:
        committers = self.committers()
        return {
            "scheduled": self.created.value,
            "replaced": self.replaced.value,
            "cancelled": self.cancelled.value,
            "rescheduled": self.rescheduled.value,
            "dedup_refused": self.dedup_refused.value,
            "outbox_moved": self.outbox_moved.value,
            "outbox_refused": self.outbox_refused.value,
            "commits_refused": sum(c.refused for c in committers),
            "commits_abandoned": sum(c.abandoned for c in committers),
        }

    def failed_writes(self) -> int:
        return sum(c.failed_writes for c in self.committers())

    def refusal(self) -> StoreReadOnly | None:
        """The database's refusal of a group commit lately, if any (see
        :meth:`GroupCommitter.refusal`)."""
        return next((r for c in self.committers() if (r := c.refusal()) is not None), None)


def _new_rows(creates: Sequence[Create]) -> list[NewRow]:
    return [NewRow(task, on_conflict=rule) for task, rule in creates]


def _moves(moves: Sequence[tuple[str, int]]) -> list[Move]:
    return [Move(task_id, due_ms) for task_id, due_ms in moves]
