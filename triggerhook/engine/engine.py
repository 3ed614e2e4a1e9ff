"""The engine: builds the threads, starts them, stops them gracefully."""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from triggerhook.domain.task import CancelResult, Task
from triggerhook.engine.armer import Armer
from triggerhook.engine.confirmer import Confirmer
from triggerhook.engine.groupcommit import GroupCommitter
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.preloader import Preloader
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.errors import TransientError, TriggerHookError
from triggerhook.interfaces import (
    Claim,
    ClaimMode,
    Clock,
    ConfirmSink,
    EngineStats,
    EventPublisher,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
    RetryHandler,
    TaskStore,
)
from triggerhook.retry import Backoff
from triggerhook.runtime.counters import Tally
from triggerhook.runtime.worker import FailureHandler, Worker
from triggerhook.settings import Settings

log = logging.getLogger(__name__)


PublisherFactory = Callable[[SendBuffer, ConfirmSink, RetryHandler, FailureHandler], EventPublisher]


class Engine:
    """Owns every engine thread. Not thread-safe itself: start/stop from one thread."""

    def __init__(
        self,
        settings: Settings,
        store: TaskStore,
        clock: Clock,
        instance: str,
        publisher_factory: PublisherFactory,
        write_batch: Callable[[Sequence[NewRow]], list[InsertOutcome]],
        write_moves: Callable[[Sequence[Move]], list[Moved]],
    ) -> None:
        self.settings = settings
        self.instance = instance
        self._store = store
        self._clock = clock
        self._failure: tuple[str, BaseException] | None = None
        self.failed = threading.Event()
        self.inventory = Inventory(settings.max_tasks_in_memory)
        self.buffer = SendBuffer(settings.send_buffer_size)
        self.scheduler = Scheduler(clock, self.buffer, settings.send_buffer_size, self._fail)
        self.armer = Armer(
            clock,
            store,
            instance,
            self.inventory,
            self.scheduler,
            settings.arm_ahead_ms,
            settings.claim_batch_size,
            self._fail,
        )
        self.confirmer = Confirmer(
            store,
            self.inventory,
            instance,
            settings.confirm_batch_size,
            settings.confirm_max_delay_ms,
            self._fail,
        )
        self.publisher = publisher_factory(self.buffer, self.confirmer, self._retry, self._fail)
        self.buffer.on_put = self.publisher.wake
        self.buffer.on_room = self.scheduler.wake
        self.preloader = Preloader(
            clock,
            store,
            instance,
            self.inventory,
            self.armer,
            self.scheduler,
            window_ms=settings.preload_window_ms,
            arm_ahead_ms=settings.arm_ahead_ms,
            lease_ms=settings.claim_lease_ms,
            batch_size=settings.claim_batch_size,
            poll_interval_ms=settings.poll_interval_ms,
            on_failure=self._fail,
        )
        self.committer = GroupCommitter(
            write_batch,
            settings.schedule_batch_size,
            writers=1,
            on_failure=self._fail,
            max_queued=settings.commit_queue_max,
            discard=self.unplan,
        )
        self.canceller = GroupCommitter(
            self.write_cancels,
            settings.schedule_batch_size,
            1,
            self._fail,
            name="cancel",
            max_queued=settings.commit_queue_max,
        )
        self.rescheduler = GroupCommitter(
            write_moves,
            settings.schedule_batch_size,
            1,
            self._fail,
            name="reschedule",
            max_queued=settings.commit_queue_max,
            discard=self.unplan,
        )
        self._running = False
        # Totals for metrics, added to by whichever thread committed the change.
        self.created = Tally()
        self.cancelled = Tally()
        self.rescheduled = Tally()
        self.publish_retries = 0  # the publisher's thread only

    # -- lifecycle -------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running and not self.failed.is_set()

    def start(self) -> None:
        if self.settings.switch_interval_us:
            # A busy thread gives up the GIL only every switch interval; the
            # scheduler waking at a due time must not wait 5 ms (the default).
            sys.setswitchinterval(self.settings.switch_interval_us / 1e6)
            # A full garbage collection stops every thread for as long as it
            # takes to walk the live objects; leave out those that exist at
            # start (modules, configuration, the caller's data) for good.
            gc.freeze()
        # A previous run under this instance id (crashed or killed) may have
        # left claims: take them back at once instead of waiting for the lease.
        released = self._store.release_claims(self.instance)
        if released:
            log.info("released %d claims left by a previous run of this instance", released)
        for worker in self._workers():
            worker.start()
        for committer in self._committers():
            committer.start()
        self._running = True
        log.info(
            "engine started",
            extra={"instance": self.instance, "exchange": self.settings.exchange},
        )

    def _workers(self) -> list[Worker | EventPublisher]:
        # Downstream first, so nothing is handed to a stage that is not running.
        return [self.confirmer, self.publisher, self.scheduler, self.armer, self.preloader]

    def _committers(self) -> list[GroupCommitter[Any, Any]]:
        return [self.committer, self.canceller, self.rescheduler]

    def alive(self) -> bool:
        """Every thread of a running engine is alive (a wedged one is not seen here)."""
        return self.running and all(w.is_alive() for w in self._workers())

    def responsive(self, max_silence_s: float) -> bool:
        """Alive, and the timed threads (scheduler, armer) went round their loops
        within ``max_silence_s``: not wedged."""
        now_s = time.monotonic()
        beats = (self.scheduler.beat_s, self.armer.beat_s)
        return self.alive() and all(now_s - beat <= max_silence_s for beat in beats)

    def stop(self, timeout_s: float | None = None) -> bool:
        """Graceful stop; True when everything due was published and confirmed.

        Order: stop claiming and scheduling, stop arming (claimed tasks are
        released), fire what is armed, wait for the broker's confirms, delete
        the confirmed rows, release every remaining claim.
        """
        if not self._running:
            return True
        self._running = False
        timeout = self.settings.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        for committer in self._committers():
            committer.stop()
        self.preloader.stop()
        self.armer.stop()
        for committer in self._committers():
            committer.join(_left(deadline))
        self.preloader.join(_left(deadline))
        self.armer.join(_left(deadline))
        self.scheduler.drain_until(self._clock.now_ms() + self.settings.arm_ahead_ms)
        self.scheduler.join(_left(deadline))
        self.publisher.finish(deadline)
        clean = self.publisher.join(_left(deadline) + 1.0)
        self.confirmer.stop(deadline)
        self.confirmer.join(_left(deadline) + 1.0)
        left = len(self.buffer) + self.confirmer.pending() + len(self.scheduler)
        self._release_claims()
        log.info("engine stopped", extra={"instance": self.instance, "unpublished": left})
        return clean and left == 0 and not self.failed.is_set()

    def _release_claims(self) -> None:
        backoff = Backoff(max_s=1.0)
        for _ in range(5):
            try:
                released = self._store.release_claims(self.instance)
            except TransientError as exc:
                log.warning("releasing claims failed: %s", exc)
                threading.Event().wait(backoff.next_delay_s())
                continue
            except TriggerHookError as exc:
                log.error("cannot release claims: %s", exc)
                break
            log.info("released %d claims", released)
            return
        log.error("claims not released; they expire after claim_lease_ms")

    # -- failures and retries --------------------------------------------------

    def _fail(self, name: str, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = (name, exc)
        self.failed.set()

    @property
    def failure(self) -> str | None:
        if self._failure is None:
            return None
        name, exc = self._failure
        return f"thread {name} failed: {exc!r}"

    def _retry(self, task: Task, delay_ms: int) -> None:
        """An unroutable or nacked event: its row goes back to the store, unarmed
        and out of memory, to be claimed and fired again after ``delay_ms``
        (the publisher decided; it also logs, rate-limited)."""
        self.publish_retries += 1
        self.confirmer.defer(task, int(self._clock.now_ms()) + delay_ms)

    # -- scheduling into memory -------------------------------------------------

    def plan(self, tasks: Sequence[Task], now_ms: float) -> list[NewRow]:
        """How each new task is held: soon-due ones go straight into memory.

        Inventory room is reserved for every row that claims; the caller settles
        it with :meth:`adopt` after the insert, or :meth:`unplan` if it failed.
        """
        modes = self._claim_modes([task.due_ms for task in tasks], now_ms)
        return [NewRow(task, mode) for task, mode in zip(tasks, modes, strict=True)]

    def plan_moves(self, moves: Sequence[tuple[str, int]], now_ms: float) -> list[Move]:
        """Like :meth:`plan`, for (task id, new due time) pairs being rescheduled."""
        modes = self._claim_modes([due_ms for _, due_ms in moves], now_ms)
        return [Move(tid, due, mode) for (tid, due), mode in zip(moves, modes, strict=True)]

    def _claim_modes(self, dues_ms: Sequence[int], now_ms: float) -> list[ClaimMode]:
        if not self._running:
            return [ClaimMode.NONE] * len(dues_ms)
        horizon = now_ms + self.settings.preload_window_ms
        arm_by = now_ms + self.settings.arm_ahead_ms
        soon = sum(1 for due_ms in dues_ms if due_ms <= horizon)
        room = self.inventory.reserve(soon) if soon else 0
        if room < soon:
            # Memory is (nearly) full: the preloader claims these as room frees.
            self.preloader.wake()
        modes = []
        for due_ms in dues_ms:
            if due_ms <= horizon and room > 0:
                room -= 1
                modes.append(ClaimMode.ARM if due_ms <= arm_by else ClaimMode.CLAIM)
            else:
                modes.append(ClaimMode.NONE)
        return modes

    def unplan(self, rows: Sequence[NewRow | Move]) -> None:
        self.inventory.release(_claiming(rows))

    def write_cancels(self, task_ids: Sequence[str]) -> list[CancelResult]:
        """Cancel in one transaction (see :meth:`TaskStore.cancel`), counted."""
        results = self._store.cancel(task_ids)
        self.cancelled.add(sum(1 for r in results if r is CancelResult.CANCELLED))
        return results

    def adopt(self, rows: Sequence[NewRow], outcomes: Sequence[InsertOutcome]) -> None:
        """After the commit: hold the rows this instance claimed on insert."""
        self.created.add(sum(1 for outcome in outcomes if outcome is InsertOutcome.CREATED))
        claims = [
            Claim(row.task, row.rev, row.claim is ClaimMode.ARM)
            for row, outcome in zip(rows, outcomes, strict=True)
            if outcome is InsertOutcome.CREATED and row.claim is not ClaimMode.NONE
        ]
        self.preloader.hold(claims, _claiming(rows), self._clock.now_ms())

    def adopt_moves(self, moves: Sequence[Move], outcomes: Sequence[Moved]) -> None:
        """After the commit: hold the rescheduled rows this instance claimed.

        An id moved twice in one batch was written by its last move only: the
        earlier moves' revisions never existed, so they are not held (an armed
        copy would fire without being checked against the row)."""
        self.rescheduled.add(sum(1 for moved in outcomes if moved.task is not None))
        last = {move.task_id: index for index, move in enumerate(moves)}
        claims = [
            Claim(moved.task, move.rev, move.claim is ClaimMode.ARM)
            for index, (move, moved) in enumerate(zip(moves, outcomes, strict=True))
            if moved.task is not None
            and move.claim is not ClaimMode.NONE
            and last[move.task_id] == index
        ]
        self.preloader.hold(claims, _claiming(moves), self._clock.now_ms())

    def counters(self) -> dict[str, int]:
        """Totals since start, for metrics (the metrics thread takes differences)."""
        db_errors = sum(w.transient_errors for w in (self.preloader, self.armer, self.confirmer))
        db_errors += sum(c.failed_writes for c in self._committers())
        return {
            "scheduled": self.created.value,
            "claimed": self.preloader.claimed,
            "fired": self.scheduler.fired,
            "deleted": self.confirmer.deleted,
            "cancelled": self.cancelled.value,
            "rescheduled": self.rescheduled.value,
            "publish_retries": self.publish_retries,
            "commits_refused": sum(c.refused for c in self._committers()),
            "commits_abandoned": sum(c.abandoned for c in self._committers()),
            "db_errors": db_errors,
            **self.publisher.counters(),
        }

    def take_lateness(self) -> list[float]:
        """Publish time - due time (ms) of each event published since the last call."""
        return self.publisher.take_lateness()

    def stats(self) -> EngineStats:
        return EngineStats(
            in_memory=len(self.inventory),
            pending_arm=len(self.armer),
            armed=len(self.scheduler),
            send_buffer=len(self.buffer),
            unconfirmed=self.publisher.unconfirmed(),
            claimed=self.preloader.claimed,
            fired=self.scheduler.fired,
            deleted=self.confirmer.deleted,
        )


def _claiming(rows: Sequence[NewRow | Move]) -> int:
    """Rows that claim on insert: each holds one unit of reserved room."""
    return sum(1 for row in rows if row.claim is not ClaimMode.NONE)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
