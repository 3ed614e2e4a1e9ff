"""A thread that takes tasks out of its own heap as their fire time comes near
(or, driven, the loop of another thread that does it for it)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Generic

from triggerhook.domain.heap import DueHeap, Item
from triggerhook.interfaces import Clock
from triggerhook.runtime.worker import FailureHandler, Worker

# With the downstream stage full, re-check at least this often (it also wakes us).
_FULL_RECHECK_S = 0.05
# An idle thread still goes round its loop this often: its heartbeat shows it
# is not wedged (the systemd watchdog is pinged only while it beats).
HEARTBEAT_S = 1.0


class TimedWorker(Worker, Generic[Item]):
    """Owns a :class:`DueHeap`; pops tasks due within ``lead_ms`` and handles them.

    Other threads add tasks with :meth:`push_many`; an earlier
    task than the current head wakes the thread at once (re-arming its timer).

    Driven (:meth:`drive_from`): another thread's loop calls :meth:`tick`
    when the head is due and is woken instead; this thread then only waits,
    beating, until it is stopped and has handled what it must.
    """

    lead_ms = 0

    def __init__(
        self, name: str, clock: Clock, batch_limit: int, on_failure: FailureHandler
    ) -> None:
        super().__init__(name, on_failure)
        self._clock = clock
        self._batch_limit = batch_limit
        self._heap: DueHeap[Item] = DueHeap()
        self._cond = threading.Condition()
        # After stop(): keep handling tasks due by this time, then exit.
        self._finish_until_ms = -math.inf
        self._driver_wake: Callable[[], None] | None = None  # set before start, if driven

    def __len__(self) -> int:
        return len(self._heap)

    def push_many(self, tasks: Sequence[Item]) -> None:
        self._push(tasks, None)

    def push_at(self, tasks: Sequence[Item], at_ms: int) -> None:
        """Add tasks to be handled at ``at_ms`` rather than by their due time
        (a retry, or a copy held back)."""
        self._push(tasks, at_ms)

    def _push(self, tasks: Sequence[Item], at_ms: int | None) -> None:
        """Into the heap (at their own time when ``at_ms`` is None); a head
        that moved wakes whoever times the heap: this thread, or its driver."""
        if not tasks:
            return
        with self._cond:
            head = self._heap.next_fire_ms()
            if at_ms is None:
                self._heap.push_many(tasks)
            else:
                for task in tasks:
                    self._heap.push(task, at_ms)
            moved = head is None or self._heap.next_fire_ms() != head
            if moved:
                self._cond.notify()
        if moved and self._driver_wake is not None:
            self._driver_wake()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()
        if self._driver_wake is not None:
            self._driver_wake()

    @property
    def driven(self) -> bool:
        """Another thread's loop calls :meth:`tick` (see :meth:`drive_from`)."""
        return self._driver_wake is not None

    def drive_from(self, wake: Callable[[], None]) -> None:
        """Before start: :meth:`tick` is called by another thread's loop,
        which ``wake`` (thread-safe) asks for a tick at once."""
        self._driver_wake = wake

    def tick(self, now_ms: float) -> float | None:
        """Driven, on the driver's thread: one round of :meth:`run`'s loop —
        handle what is due by ``now_ms``; seconds until the next round is
        needed (None: until woken), at most :data:`HEARTBEAT_S` as the
        thread's own waits (the clock it reads may be corrected meanwhile).
        Once stopped and finished, nothing."""
        with self._cond:
            if self.stopping and self._finished():
                self._cond.notify()  # the waiting thread ends
                return None
            batch, wait_s = self.poll(now_ms)
        if batch:
            self.handle(batch, now_ms)
            if self.stopping:  # the waiting thread may be finished now
                with self._cond:
                    self._cond.notify()
        return None if wait_s is None else min(wait_s, HEARTBEAT_S)

    def drain_until(self, until_ms: float) -> None:
        """Stop once every task due by ``until_ms`` has been handled."""
        self._finish_until_ms = until_ms
        self.stop()

    def take_remaining(self) -> list[Item]:
        """After the thread ended: every task still in the heap."""
        with self._cond:
            return self._heap.drain()

    def capacity(self) -> int:
        """How many tasks the next stage can take now."""
        return self._batch_limit

    def handle(self, tasks: list[Item], now_ms: float) -> None:
        raise NotImplementedError

    def poll(self, now_ms: float) -> tuple[list[Item], float | None]:
        """Due tasks to handle now, or none and how long to wait (None: until woken)."""
        head = self._heap.next_fire_ms()
        if head is None:
            return [], None
        wait_ms = head - self.lead_ms - now_ms
        if wait_ms > 0:
            return [], wait_ms / 1000.0
        limit = min(self._batch_limit, self.capacity())
        if limit <= 0:
            return [], _FULL_RECHECK_S
        return self._heap.pop_until(now_ms + self.lead_ms, limit), 0.0

    def _finished(self) -> bool:
        head = self._heap.next_fire_ms()
        return head is None or head - self.lead_ms > self._finish_until_ms

    def run(self) -> None:
        if self._driver_wake is not None:
            self._wait_while_driven()
            return
        clock = self._clock
        while True:
            with self._cond:
                while True:
                    if self.stopping and self._finished():
                        return
                    now_ms = clock.now_ms()
                    self.beat()
                    batch, wait_s = self.poll(now_ms)
                    if batch:
                        break
                    self._cond.wait(HEARTBEAT_S if wait_s is None else min(wait_s, HEARTBEAT_S))
            self.handle(batch, now_ms)

    def _wait_while_driven(self) -> None:
        """The thread of a driven stage: it ends once stopped and finished
        (the driver's ticks handle the rest)."""
        with self._cond:
            while not (self.stopping and self._finished()):
                self.beat()
                self._cond.wait(HEARTBEAT_S)
