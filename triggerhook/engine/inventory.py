"""The set of task ids this instance holds in memory, bounded in size."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from triggerhook.domain.task import Task


class Inventory:
    """Thread-safe. Every task enters on claim and leaves on delete or release.

    A task re-claimed while still held (after its lease ran out and nobody else
    took it) is recognised here and not held twice.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def room(self) -> int:
        return max(0, self.capacity - len(self._ids))

    def admit(self, tasks: Sequence[Task]) -> list[Task]:
        """Hold the tasks not held yet; returns those."""
        with self._lock:
            ids = self._ids
            fresh = [t for t in tasks if t.id not in ids]
            ids.update(t.id for t in fresh)
        return fresh

    def reserve(self, count: int) -> int:
        """How many of ``count`` new tasks may be taken into memory now."""
        return min(count, self.room())

    def discard(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._ids.difference_update(ids)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._ids)
