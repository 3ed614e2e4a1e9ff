"""The armer thread: loads soon-due tasks into memory by arming them (R3).

Arming is the point of no return for cancel, and the one pass that loads
tasks: it arms, under the leases it holds, the rows due within
``arm_ahead_ms`` — one write per shard, none per task — and hands them to the
scheduler. Doing it ``arm_ahead_ms`` early keeps the database off the precise
firing path. After an acquisition it first reads the shard's inherited rows
(armed by an earlier owner, perhaps never published): they fire again.

A pass's cost hardly depends on how many rows it arms (a statement per
step, every shard in each), so passes adapt to the rate:

* a **full pass** at least every half of ``arm_ahead_ms``
  (:func:`full_interval_ms`): each row crossing the horizon is armed between
  half and all of ``arm_ahead_ms`` before it is due;
* in between, every ``arm_interval_ms`` (or at once when woken by an insert
  of a near-due row through this process), a pass **only if** a read without
  locks finds a row to arm due before the next full pass plus
  ``arm_interval_ms`` — a row written meanwhile through another instance or
  process. So such a row still waits at most ``arm_interval_ms``, and a row
  the next full pass arms still has at least ``arm_interval_ms`` to spare;
* a pass that filled the room it had is followed by the next at once: at high
  rates batches grow instead of passes.

At 1,000 fires/s this is ~10 full passes a second instead of ~40.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.shards import ShardTable
from triggerhook.errors import TransientError
from triggerhook.interfaces import Clock, TaskStore
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)


def full_interval_ms(arm_ahead_ms: int, arm_interval_ms: int) -> int:
    """The longest time between full passes."""
    return max(arm_interval_ms, arm_ahead_ms // 2)


class Armer(Worker):
    """A full pass (as many rows as it had room for) means more may be due:
    the next pass starts at once; otherwise it waits ``interval_ms``."""

    def __init__(
        self,
        clock: Clock,
        store: TaskStore,
        instance: str,
        shards: ShardTable,
        inventory: Inventory,
        scheduler: Scheduler,
        *,
        arm_ahead_ms: int,
        interval_ms: int,
        batch_size: int,
        on_failure: FailureHandler,
    ) -> None:
        super().__init__("th-armer", on_failure)
        self._clock = clock
        self._store = store
        self._instance = instance
        self._shards = shards
        self._inventory = inventory
        self._scheduler = scheduler
        self._ahead_ms = arm_ahead_ms
        self._interval_ms = interval_ms
        self._interval_s = interval_ms / 1000.0
        self._full_interval_ms = full_interval_ms(arm_ahead_ms, interval_ms)
        self._next_full_ms = -math.inf  # a full pass is due from then on
        self._batch_size = batch_size
        self._wakeup = threading.Event()
        self.armed = 0  # tasks taken into memory (armed here or inherited)
        self.inherited = 0
        self.settled = 0  # armed by a write of their own row (rare: see ArmPlan)
        self.passes = 0  # passes made (not skipped)
        self.beat_s = time.monotonic()

    def wake(self) -> None:
        self._wakeup.set()

    def run(self) -> None:
        while not self.stopping:
            self.beat_s = time.monotonic()
            try:
                more = self.step(self._clock.now_ms())
            except TransientError as exc:
                self.back_off(exc, "arming tasks")
                continue
            self.succeeded("arming tasks")
            if not more:
                self._wakeup.wait(self._interval_s)
                self._wakeup.clear()

    def step(self, now_ms: float) -> bool:
        """One pass; True when it filled the room it had (more may be due)."""
        limit = self._inventory.reserve(self._batch_size)
        if limit == 0:
            return False
        try:
            taken = self._read_inherited(limit)
            if len(taken) < limit:
                taken += self._arm(now_ms, limit - len(taken))
        except BaseException:
            self._inventory.release(limit)
            raise
        fresh = self._inventory.admit(taken, limit)
        self.armed += len(fresh)
        self._scheduler.push_many(fresh)
        return len(taken) == limit

    def _arm(self, now_ms: float, limit: int) -> list[Task]:
        leases = self._shards.for_arming()
        if not leases:
            return []
        urgent_ms = None
        if now_ms < self._next_full_ms:
            urgent_ms = int(self._next_full_ms) + self._interval_ms
        horizon_ms = int(now_ms) + self._ahead_ms
        armed = self._store.arm(self._instance, leases, horizon_ms, limit, urgent_ms)
        if armed.lost:
            self._shards.drop(armed.lost)
        if armed.skipped:
            return []
        self.passes += 1
        # A pass cut by its limit leaves rows due by its horizon: the next is full.
        cut = len(armed.tasks) >= limit
        self._next_full_ms = -math.inf if cut else now_ms + self._full_interval_ms
        self.settled += armed.settled
        return armed.tasks

    def _read_inherited(self, limit: int) -> list[Task]:
        out: list[Task] = []
        for acquired, after in self._shards.inherited_to_read():
            room = limit - len(out)
            if room <= 0:
                break
            tasks, last = self._store.inherited(acquired, after, room)
            self._shards.inherited_read(acquired.lease, last or after, len(tasks) < room)
            if tasks:
                log.info(
                    "firing %d tasks armed by the shard's previous owner",
                    len(tasks),
                    extra={"shard": acquired.lease.shard},
                )
            self.inherited += len(tasks)
            out += tasks
        return out
