"""The confirmer thread: deletes the rows of broker-confirmed tasks in batches."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

from triggerhook.engine.inventory import Inventory
from triggerhook.engine.worker import FailureHandler, Worker
from triggerhook.errors import TransientError
from triggerhook.interfaces import TaskStore


class Confirmer(Worker):
    """Batches of at most ``batch_size`` ids, each waiting at most ``max_delay_ms``.

    A row is deleted only after the broker confirmed its event (at-least-once).
    """

    def __init__(
        self,
        store: TaskStore,
        inventory: Inventory,
        batch_size: int,
        max_delay_ms: int,
        on_failure: FailureHandler,
    ) -> None:
        super().__init__("th-confirmer", on_failure)
        self._store = store
        self._inventory = inventory
        self._batch_size = batch_size
        self._max_delay_s = max_delay_ms / 1000.0
        self._ids: deque[str] = deque()
        self._cond = threading.Condition()
        self.deleted = 0

    def confirmed(self, ids: Sequence[str]) -> None:
        """Called by the publisher thread with ids the broker confirmed."""
        with self._cond:
            was_empty = not self._ids
            self._ids.extend(ids)
            if was_empty or len(self._ids) >= self._batch_size:
                self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def pending(self) -> int:
        return len(self._ids)

    def _next_batch(self) -> list[str] | None:
        """Wait for a full batch or the oldest id's deadline; None once stopped and empty."""
        with self._cond:
            while not self._ids:
                if self.stopping:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self._max_delay_s
            while len(self._ids) < self._batch_size and not self.stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            count = min(self._batch_size, len(self._ids))
            return [self._ids.popleft() for _ in range(count)]

    def run(self) -> None:
        while (batch := self._next_batch()) is not None:
            while True:
                try:
                    self.deleted += self._store.delete_fired(batch)
                except TransientError as exc:
                    self.back_off(exc, "deleting confirmed tasks")
                    if self.past_deadline():
                        return  # rows stay; they fire again later (at-least-once)
                    continue
                self.succeeded("deleting confirmed tasks")
                self._inventory.discard(batch)
                break
