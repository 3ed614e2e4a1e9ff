"""The preloader thread: claims soon-due tasks into memory and keeps claims alive."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from triggerhook.engine.armer import Armer
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.errors import TransientError
from triggerhook.interfaces import Claim, Clock, TaskStore
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)


class Preloader(Worker):
    """Each round claims up to ``batch_size`` tasks due within ``window_ms``.

    A full batch means more may be waiting, so the next round starts at once;
    otherwise it waits ``poll_interval_ms``. Memory stays bounded: a round never
    claims more than the inventory has room for. A claim is renewed once it is a
    third of the lease old, so a healthy instance never loses its tasks to another.
    """

    def __init__(
        self,
        clock: Clock,
        store: TaskStore,
        instance: str,
        inventory: Inventory,
        armer: Armer,
        scheduler: Scheduler,
        *,
        window_ms: int,
        arm_ahead_ms: int,
        lease_ms: int,
        batch_size: int,
        poll_interval_ms: int,
        on_failure: FailureHandler,
    ) -> None:
        super().__init__("th-preloader", on_failure)
        self._clock = clock
        self._store = store
        self._instance = instance
        self._inventory = inventory
        self._armer = armer
        self._scheduler = scheduler
        self._window_ms = window_ms
        self._arm_ahead_ms = arm_ahead_ms
        self._lease_ms = lease_ms
        self._batch_size = batch_size
        self._poll_s = poll_interval_ms / 1000.0
        self._wakeup = threading.Event()
        self.claimed = 0

    def wake(self) -> None:
        self._wakeup.set()

    def step(self, now_ms: int) -> bool:
        """One round; True when it claimed a full batch (more may be waiting)."""
        # Only claims older than a third of the lease are renewed: tasks usually
        # leave memory long before that, so a healthy engine renews nothing.
        stale = self._inventory.claimed_before(now_ms - self._lease_ms / 3)
        if stale:
            self._store.renew_claims(self._instance, stale, now_ms + self._lease_ms)
            self._inventory.renewed(stale, now_ms)
        limit = self._inventory.reserve(self._batch_size)
        if limit == 0:
            return False
        try:
            claimed = self._store.claim(
                self._instance,
                now_ms,
                now_ms + self._window_ms,
                now_ms + self._arm_ahead_ms,
                now_ms + self._lease_ms,
                limit,
            )
        except BaseException:
            self._inventory.release(limit)
            raise
        self.claimed += len(self.hold(claimed, limit, now_ms))
        return len(claimed) == limit

    def hold(self, claims: Sequence[Claim], reserved: int, claimed_ms: float) -> list[Claim]:
        """Take claims into memory (settling ``reserved`` room) and queue them:
        armed ones to the scheduler, the others to the armer. Also used for
        rows claimed on insert. Returns the claims that were not held already."""
        fresh = self._inventory.admit(claims, reserved, claimed_ms)
        self._scheduler.push_many([c.task for c in fresh if c.armed])
        self._armer.push_many([c for c in fresh if not c.armed])
        return fresh

    def run(self) -> None:
        while not self.stopping:
            try:
                more = self.step(int(self._clock.now_ms()))
            except TransientError as exc:
                self.back_off(exc, "claiming tasks")
                continue
            self.succeeded("claiming tasks")
            if not more:
                self._wakeup.wait(self._poll_s)
                self._wakeup.clear()
