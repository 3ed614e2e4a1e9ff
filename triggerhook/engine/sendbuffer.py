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
    that waited here through a broker outage may no longer be ours to send)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._tasks: deque[Task] = deque()
        self._lock = threading.Lock()
        self.on_put: Callable[[], None] = _nothing
        self.on_room: Callable[[], None] = _nothing
        self.gate: Callable[[list[Task]], list[Task]] = _everything

    def __len__(self) -> int:
        return len(self._tasks)

    def room(self) -> int:
        return max(0, self.capacity - len(self._tasks))

    def put_many(self, tasks: Sequence[Task]) -> None:
        with self._lock:
            self._tasks.extend(tasks)
        self.on_put()

    def requeue_front(self, tasks: Sequence[Task]) -> None:
        """Put back tasks that must go out first (unconfirmed when a connection died)."""
        with self._lock:
            self._tasks.extendleft(reversed(tasks))

    def take(self, limit: int) -> list[Task]:
        """Up to ``limit`` tasks, oldest first, as the gate lets them through
        (fewer, possibly none, while more are buffered)."""
        with self._lock:
            was_full = len(self._tasks) >= self.capacity
            count = min(limit, len(self._tasks))
            popleft = self._tasks.popleft
            out = [popleft() for _ in range(count)]
        if was_full and out:
            self.on_room()
        return self.gate(out) if out else out
