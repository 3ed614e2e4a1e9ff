"""The bounded buffer between the scheduler (producer) and the publisher (consumer)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence

from triggerhook.domain.task import Task


def _nothing() -> None:
    pass


def _everything(tasks: list[Task]) -> list[Task]:
    return tasks


class SendBuffer:
    """Thread-safe FIFO of fired tasks. ``on_put`` wakes the publisher after a put;
    ``on_room`` wakes the scheduler when a full buffer gets room again; ``gate``
    screens what :meth:`take` hands out (the engine's lease check: a task
    that waited here through a broker outage may no longer be ours to send).

    Tasks of rate-limited keys wait in a lane of their own (:meth:`put_paced`),
    taken first, and ``pace`` (the scheduler's
    :meth:`~triggerhook.engine.scheduler.Scheduler.pace`) screens them after
    the gate as they leave: tasks a broker outage kept here leave at their
    rate, not together, and one held back leaves the buffer (it waits in the
    scheduler's heap), so it never keeps the other keys' tasks waiting.
    ``paced`` splits tasks put back unpublished (:meth:`requeue_front`) into
    the two lanes. The other keys' lane costs nothing more per task."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._tasks: deque[Task] = deque()
        self._paced: deque[Task] = deque()
        self._lock = threading.Lock()
        self.on_put: Callable[[], None] = _nothing
        self.on_room: Callable[[], None] = _nothing
        self.gate: Callable[[list[Task]], list[Task]] = _everything
        self.pace: Callable[[list[Task]], list[Task]] = _everything
        self.paced: Callable[[Sequence[Task]], tuple[list[Task], list[Task]]] | None = None

    def __len__(self) -> int:
        return len(self._tasks) + len(self._paced)

    def room(self) -> int:
        return max(0, self.capacity - len(self))

    def put_many(self, tasks: Sequence[Task]) -> None:
        with self._lock:
            self._tasks.extend(tasks)
        self.on_put()

    def put_paced(self, tasks: Sequence[Task]) -> None:
        """Tasks of rate-limited keys: ``pace`` screens them as they leave."""
        with self._lock:
            self._paced.extend(tasks)
        self.on_put()

    def requeue_front(self, tasks: Sequence[Task]) -> None:
        """Put back tasks that must go out first (unconfirmed when a connection died)."""
        paced: Sequence[Task] = ()
        if self.paced is not None and tasks:
            tasks, paced = self.paced(tasks)  # each lane's, to be paced again
        with self._lock:
            self._tasks.extendleft(reversed(tasks))
            self._paced.extendleft(reversed(paced))

    def take(self, limit: int) -> list[Task]:
        """Up to ``limit`` tasks, oldest first (the rate-limited lane's first),
        as the gate and, for rate-limited ones, ``pace`` let them through
        (fewer, possibly none, while more are buffered)."""
        with self._lock:
            was_full = len(self._tasks) + len(self._paced) >= self.capacity
            paced: list[Task] = []
            if self._paced:
                popleft = self._paced.popleft
                paced = [popleft() for _ in range(min(limit, len(self._paced)))]
            count = min(limit - len(paced), len(self._tasks))
            popleft = self._tasks.popleft
            out = [popleft() for _ in range(count)]
        if was_full and (out or paced):
            self.on_room()
        if out:
            out = self.gate(out)
        if paced:
            paced = self.gate(paced)
            if paced:
                paced = self.pace(paced)
            if paced:
                return paced + out
        return out
