"""The confirmer thread: settles the rows of published events in batches.

* Confirmed by the broker: the row is deleted (at-least-once: only after the
  confirm) — with more than a batch waiting, up to ``lanes`` batches side by
  side, each a transaction of its own on a connection of its own (a delete by
  (id, revision) stands alone, R5: their order does not matter) — or for a
  series rewritten to its next occurrence (R5s:
  ``TaskStore.advance``; "now", to skip occurrences missed in an outage, is
  the engine's clock).
* Not taken by the broker and to be tried again (R8): the row is deferred —
  rewritten unarmed, to be armed again after a back-off (``TaskStore.defer``) —
  and leaves this instance's memory, so it can be cancelled meanwhile and holds
  no room; a row armed by an earlier owner (inherited) stays armed and is
  retried from memory instead.
* A task with a dedup window: the delete writes its fired record in the
  same transaction (R5d: ``TaskStore.delete_recorded``).
* Between batches (and when idle), the expired fired records of this
  instance's shards are swept (engine/sweep.py), at most every interval.
* Held back by a rate limit past the arming horizon (R8p, :meth:`Confirmer.postpone`):
  the same write, flagged as a postponement (no failed attempt counted), to
  the token's instant; an inherited row's copy goes back into the
  scheduler's heap for then. The copy is out of the heap before the write,
  and comes back only on INHERITED: a row rewritten (or an answer lost
  after it was) is armed again by R3 when its instant comes near.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sweep import FiredSweep
from triggerhook.errors import TransientError
from triggerhook.interfaces import Clock, DeferOutcome, Deferral, TaskStore
from triggerhook.runtime import progress
from triggerhook.runtime.worker import BEAT_S, FailureHandler, Worker, name_os_thread

log = logging.getLogger(__name__)


# A row to store back: (task, not before (epoch ms), postponed (R8p), not a failure).
_Deferred = tuple[Task, int, bool]


@dataclass(slots=True)
class _Batch:
    """One batch being settled; each part is emptied once written, so a
    retry after a failure writes only what is left."""

    fired: list[list[tuple[str, int]]]  # (id, rev): delete, a transaction a part
    series: list[Task]  # occurrences of series (advance), tasks with a dedup window (R5d)
    deferred: list[_Deferred]  # store back

    def __len__(self) -> int:
        return sum(map(len, self.fired)) + len(self.series)


class Confirmer(Worker):
    """Batches of at most ``batch_size`` ids, each waiting at most ``max_delay_ms``;
    as many full batches as are waiting, up to ``lanes``, deleted side by side.

    Other threads hand it work through :meth:`confirmed` and :meth:`defer`;
    the queues are guarded by its condition, the batch being settled is its
    thread's. The extra batches' deletes run on ``lanes - 1`` threads of its
    own (``th-confirm-lane``) that do nothing else; this thread waits for them
    as for a database call (the watchdog's rule) and settles the inventory.
    :meth:`step` is the loop's body (one batch, no waiting): the thread waits
    for work, then steps, backing off after a transient failure; the
    simulator (tests/sim) calls it directly.
    """

    def __init__(
        self,
        store: TaskStore,
        inventory: Inventory,
        scheduler: Scheduler,
        instance: str,
        batch_size: int,
        max_delay_ms: int,
        on_failure: FailureHandler,
        *,
        clock: Clock,
        lanes: int = 1,
        sweep: FiredSweep | None = None,
    ) -> None:
        super().__init__("th-confirmer", on_failure)
        self._store = store
        self._clock = clock
        self._inventory = inventory
        self._scheduler = scheduler
        self._instance = instance
        self._batch_size = batch_size
        self._max_delay_s = max_delay_ms / 1000.0
        self._fired: deque[tuple[str, int]] = deque()  # (id, rev) confirmed
        # Confirmed occurrences of series, and tasks with a dedup window: more
        # than a delete by revision.
        self._series: deque[Task] = deque()
        self._deferred: deque[_Deferred] = deque()
        self._cond = threading.Condition()
        self._current: _Batch | None = None  # being settled (this thread's)
        self._lanes = lanes
        self._lane_pool: ThreadPoolExecutor | None = None  # made at the first parallel delete
        self.deleted = 0
        self.deferred = 0
        self.postponed = 0  # rows of held copies rewritten to wait in the database (R8p)
        self.recorded = 0  # rows deleted with a fired record (R5d)
        self._sweep = sweep
        self._sweeping = False

    def confirmed(self, tasks: Sequence[Task]) -> None:
        """Called by the publisher thread with the tasks the broker confirmed."""
        with self._cond:
            was_empty = not self._fired and not self._series
            for task in tasks:
                if task.meta.recur is None and not task.meta.dedup_window_ms:
                    self._fired.append((task.id, task.rev))
                else:
                    self._series.append(task)
            if was_empty or len(self._fired) + len(self._series) >= self._batch_size:
                self._cond.notify()

    def defer(self, task: Task, not_before_ms: int) -> None:
        """Called by the publisher thread: ``task`` was not delivered; store it
        back, to fire again from ``not_before_ms``."""
        with self._cond:
            self._deferred.append((task, not_before_ms, False))
            self._cond.notify()

    def postpone(self, held: Sequence[tuple[Task, int]]) -> None:
        """Called by the scheduler's thread (R8p): copies a rate limit holds
        back past the arming horizon, each with its token's instant, already
        out of its heap; their rows wait in the database until then."""
        with self._cond:
            self._deferred.extend((task, at_ms, True) for task, at_ms in held)
            self._cond.notify()

    def swept(self) -> int:
        """Expired fired records this instance's sweeps deleted, since start."""
        return 0 if self._sweep is None else self._sweep.swept

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def pending(self) -> int:
        """Confirmed tasks whose rows are not settled yet (queued or in the batch)."""
        current = self._current
        return len(self._fired) + len(self._series) + (len(current) if current else 0)

    def _queued(self) -> int:
        return len(self._fired) + len(self._series)

    def _wait_for_work(self) -> bool:
        """Wait for a full batch or the oldest id's deadline; False once stopped and empty."""
        with self._cond:
            if not self._fired and not self._series and not self._deferred:
                if self.stopping:
                    return False
                self.beat()  # idle is not wedged (Worker.stalled, the watchdog's rule)
                self._cond.wait(BEAT_S)
                if not self._fired and not self._series and not self._deferred:
                    return not self.stopping  # idle: a step that only sweeps
            deadline = time.monotonic() + self._max_delay_s
            while not self._deferred and self._queued() < self._batch_size and not self.stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return True

    def _take_batch(self) -> _Batch | None:
        """What is queued now, up to a batch (None: nothing)."""
        with self._cond:
            if not self._fired and not self._series and not self._deferred:
                return None
            # Sized by what is waiting: each full batch a part, up to the lanes.
            parts = max(1, min(self._lanes, len(self._fired) // self._batch_size))
            popleft = self._fired.popleft
            fired = []
            for _ in range(parts):
                count = min(self._batch_size, len(self._fired))
                fired.append([popleft() for _ in range(count)])
            series = min(self._batch_size, len(self._series))
            # A backlog's postponements (R8p) come by the thousand: a batch at a time.
            deferred = min(self._batch_size, len(self._deferred))
            return _Batch(
                [part for part in fired if part],
                [self._series.popleft() for _ in range(series)],
                [self._deferred.popleft() for _ in range(deferred)],
            )

    def run(self) -> None:
        try:
            while self._current is not None or self._wait_for_work():
                try:
                    self.step()
                except TransientError as exc:
                    doing = "sweeping expired fired records" if self._sweeping else None
                    self._sweeping = False
                    self.back_off(exc, doing or _doing(self._current))
                    if self.past_deadline():
                        return  # the rows stay armed: they fire again later, at-least-once
                    continue
                self.succeeded("settling confirmed rows")
        finally:
            if self._lane_pool is not None:
                self._lane_pool.shutdown(wait=False)

    def step(self) -> bool:
        """Settle one batch, without waiting: the one a failure left (only
        its unwritten parts), else what is queued now. False: nothing to do.
        A :class:`TransientError` leaves the rest of the batch for the next step."""
        if self._current is None:
            self._current = self._take_batch()
            if self._current is None:
                self._swept()
                return False
        batch = self._current
        if batch.fired:
            self._delete(batch.fired)
        if batch.series:
            self._advance(batch.series)
        if batch.deferred:
            self._defer(batch.deferred)
            batch.deferred = []
        self._current = None
        self._swept()
        return True

    def _swept(self) -> None:
        """The expired fired records' sweep, when one is due (engine/sweep.py)."""
        if self._sweep is not None:
            self._sweeping = True
            self._sweep.step()
            self._sweeping = False

    def _delete(self, parts: list[list[tuple[str, int]]]) -> None:
        """Each part in a transaction of its own, the first on this thread and
        the others side by side on the lanes; a part is emptied once deleted,
        so that a retry deletes only what failed. The first failure is raised
        once every part has ended."""
        lane_pool = self._lane_pool
        if len(parts) > 1 and lane_pool is None:
            lane_pool = self._lane_pool = ThreadPoolExecutor(
                self._lanes - 1,
                thread_name_prefix="th-confirm-lane",
                initializer=name_os_thread,  # as every thread: top -H shows it
                initargs=("th-confirm-lane",),
            )
        on_lanes: list[tuple[list[tuple[str, int]], Future[int]]] = []
        if lane_pool is not None:
            on_lanes = [
                (part, lane_pool.submit(self._store.delete_fired, part)) for part in parts[1:]
            ]
        failure: TransientError | None = None
        try:
            self._settled(parts[0], self._store.delete_fired(parts[0]))
        except TransientError as exc:
            failure = exc
        outer = progress.call_begins()  # waiting for the lanes' database calls
        try:
            for part, deleting in on_lanes:
                try:
                    self._settled(part, deleting.result())
                except TransientError as exc:
                    failure = failure or exc
        finally:
            progress.call_ends(outer)
        parts[:] = [part for part in parts if part]
        if failure is not None:
            raise failure

    def _settled(self, part: list[tuple[str, int]], deleted: int) -> None:
        self.deleted += deleted
        # A newer revision held meanwhile (the id scheduled again) stays held.
        self._inventory.forget(part)
        part.clear()

    def _advance(self, rewrites: list[Task]) -> None:
        """R5d for the tasks with a dedup window, then R5s for the series'
        occurrences, each a transaction; ``rewrites`` is emptied of each part
        once written, so that a retry writes only what failed."""
        windowed = [task for task in rewrites if task.meta.recur is None]
        if windowed:
            deleted = self._store.delete_recorded(windowed, self._clock.now_ms())
            self.deleted += deleted
            self.recorded += deleted
            self._inventory.forget([(task.id, task.rev) for task in windowed])
            rewrites[:] = [task for task in rewrites if task.meta.recur is not None]
        if rewrites:
            self.deleted += self._store.advance(rewrites, self._clock.now_ms())
            self._inventory.forget([(task.id, task.rev) for task in rewrites])
            rewrites.clear()

    def _defer(self, deferred: list[_Deferred]) -> None:
        # A new revision at each try: a retry after a lost answer finds the
        # row at the lost try's revision and answers GONE (nothing in memory).
        rows = [Deferral(task, at_ms, postponed=postponed) for task, at_ms, postponed in deferred]
        outcomes = self._store.defer(self._instance, rows)
        for row, outcome in zip(rows, outcomes, strict=True):
            task = row.task
            if outcome is DeferOutcome.INHERITED:  # stays armed and held: retried from here
                if row.postponed:  # held in memory as before R8p; its token is reserved
                    self._scheduler.push_at([task], row.not_before_ms)
                else:
                    retry = task.replace(attempts=task.attempts + 1, fire_ms=row.not_before_ms)
                    self._scheduler.push_many([retry])
                continue
            if outcome is DeferOutcome.DEFERRED:
                if row.postponed:
                    self.postponed += 1
                else:
                    self.deferred += 1
            self._inventory.forget([(task.id, task.rev)])


def _doing(batch: _Batch | None) -> str:
    """What a failed step was doing, for its log line."""
    if batch is None or batch.fired:
        return "deleting confirmed"
    if batch.series:
        return "advancing series or recording fired tasks"
    return "deferring undelivered or postponed"
