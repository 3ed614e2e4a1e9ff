"""The armer thread: commits claimed tasks to firing shortly before they are due.

Arming is the point of no return for cancel (see ``store/sql.py``). Doing it
``arm_ahead_ms`` early keeps the database off the precise firing path.
"""

from __future__ import annotations

import logging

from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.timed import TimedWorker
from triggerhook.errors import TransientError
from triggerhook.interfaces import Claim, Clock, TaskStore
from triggerhook.runtime.worker import FailureHandler

log = logging.getLogger(__name__)


class Armer(TimedWorker[Claim]):
    def __init__(
        self,
        clock: Clock,
        store: TaskStore,
        instance: str,
        inventory: Inventory,
        scheduler: Scheduler,
        arm_ahead_ms: int,
        batch_limit: int,
        on_failure: FailureHandler,
    ) -> None:
        super().__init__("th-armer", clock, batch_limit, on_failure)
        self.lead_ms = arm_ahead_ms
        self._store = store
        self._instance = instance
        self._inventory = inventory
        self._scheduler = scheduler
        self.armed = 0
        self.dropped = 0

    def handle(self, tasks: list[Claim], now_ms: float) -> None:
        try:
            armed = self._store.arm(self._instance, tasks)
        except TransientError as exc:
            # Not armed, so not fired: they wait (late) rather than risk
            # firing a task that was cancelled meanwhile.
            self.push_many(tasks)
            self.back_off(exc, "arming tasks")
            return
        self.succeeded("arming tasks")
        self.armed += len(armed)
        if len(armed) != len(tasks):
            kept = {id(c) for c in armed}  # the store returns the objects it was given
            gone = [c for c in tasks if id(c) not in kept]
            self.dropped += len(gone)
            log.debug("dropping %d cancelled, re-created or taken-over tasks", len(gone))
            self._inventory.drop(gone)
        self._scheduler.push_many([c.task for c in armed])
