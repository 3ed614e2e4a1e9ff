"""The armer thread: loads soon-due tasks into memory by arming them (R3).

Arming is the point of no return for cancel, and the one pass that loads
tasks: it arms, under the leases it holds, the rows due within
``arm_ahead_ms`` — one write per shard, none per task — and hands them to the
scheduler. Doing it ``arm_ahead_ms`` early keeps the database off the precise
firing path. After an acquisition it first reads the shard's inherited rows
(armed by an earlier owner, perhaps never published): they fire again; a
shard's read counts (its cursor moves on) only once the whole pass succeeded.
A pass that failed after taking rows may have committed with its answer lost
(R3a): the armer keeps their ids per lease and hands them to its next pass
over that lease, which takes those armed now.

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
from collections.abc import Mapping
from dataclasses import dataclass

from triggerhook.domain.arming import Mark
from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.shards import ShardTable
from triggerhook.errors import TransientError
from triggerhook.interfaces import ArmUnanswered, Clock, Lease, TaskStore
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
        self._next_full_ms: dict[int, float] = {}  # by lane: a full pass is due from then on
        self._batch_size = batch_size
        self._wakeup = threading.Event()
        # R3a: ids that passes whose answer was lost took, per lease (this thread's).
        self._unanswered: dict[Lease, frozenset[str]] = {}
        self.armed = 0  # tasks taken into memory (armed here or inherited)
        self.inherited = 0
        self.settled = 0  # armed by a write of their own row (rare: see ArmPlan)
        self.passes = 0  # passes made (not skipped)

    def wake(self) -> None:
        self._wakeup.set()

    def run(self) -> None:
        while not self.stopping:
            self.beat()
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
        """One pass; True when it filled the room it had (more may be due).

        What it reads of inherited rows counts only once the whole pass
        succeeded: a failure (of a later read, or of the arming) drops the
        rows read, and their shards' inherited cursors stay where they were,
        so the next pass reads them again (they are armed, in no memory, and
        no other read finds them)."""
        limit = self._inventory.reserve(self._batch_size)
        if limit == 0:
            return False
        try:
            taken, cursors = self._read_inherited(limit)
            if len(taken) < limit:
                taken += self._arm(now_ms, limit - len(taken))
        except BaseException:
            self._inventory.release(limit)
            raise
        for cursor in cursors:
            self._shards.inherited_read(cursor.lease, cursor.after, cursor.done)
            self.inherited += cursor.count
            if cursor.count:
                log.info(
                    "firing %d tasks armed by the shard's previous owner",
                    cursor.count,
                    extra={"shard": cursor.lease.shard},
                )
        fresh = self._inventory.admit(taken, limit)
        self.armed += len(fresh)
        self._scheduler.push_many(fresh)
        return len(taken) >= limit  # more: R3a's rows come whatever the room

    def _arm(self, now_ms: float, limit: int) -> list[Task]:
        leases = self._shards.for_arming()
        held = set(self._shards.leases())
        # R3a: a lease no longer held leaves its rows to the shard's next owner.
        self._unanswered = {k: v for k, v in self._unanswered.items() if k in held}
        if not leases:
            return []
        count = self._store.placement().shard_count
        first = [lease for lease in leases if lease.shard < count]
        tasks = self._arm_lane(0, first, now_ms, limit) if first else []
        limited = [lease for lease in leases if lease.shard >= count]
        # Lanes (docs/design/flow-control.md, 3b): the rate-limited lane's
        # rows after every other key's, and in at most half the memory, so
        # a limited key's backlog never delays another key's arming.
        if not limited:
            return tasks
        # Half, rounded up: a memory of one task still arms the lane.
        lane_room = (self._inventory.capacity + 1) // 2 - self._inventory.from_shard(count)
        room = min(limit - len(tasks), lane_room)
        if room > 0:
            try:
                tasks += self._arm_lane(1, limited, now_ms, room)
            except TransientError as exc:
                if not tasks:
                    raise
                # Lane 0's pass committed: its tasks go to memory; lane 1 is
                # tried again by the next pass (R3a's ids are kept).
                log.warning("arming the rate-limited lane failed, tried again next pass: %s", exc)
        return tasks

    def _arm_lane(self, lane: int, leases: list[Lease], now_ms: float, limit: int) -> list[Task]:
        """One pass (R3) over one lane's leases."""
        unanswered = {k: self._unanswered[k] for k in leases if k in self._unanswered}
        urgent_ms = None
        next_full_ms = self._next_full_ms.get(lane, -math.inf)
        if now_ms < next_full_ms and not unanswered:
            urgent_ms = int(next_full_ms) + self._interval_ms
        horizon_ms = int(now_ms) + self._ahead_ms
        try:
            armed = self._store.arm(
                self._instance, leases, horizon_ms, limit, urgent_ms, unanswered or None
            )
        except ArmUnanswered as exc:
            self._remember_unanswered(exc.taken)
            raise
        # Settled by this pass (taken if armed, else read again), or lost: only
        # the leases it covered; one it left out (its lease may have lapsed,
        # it is being handed over) keeps its ids for a later pass.
        for lease in leases:
            self._unanswered.pop(lease, None)
        if armed.lost:
            self._shards.drop(armed.lost)
        if armed.skipped:
            return []
        self.passes += 1
        # A pass cut by its limit leaves rows due by its horizon: the next is full.
        cut = len(armed.tasks) >= limit
        self._next_full_ms[lane] = -math.inf if cut else now_ms + self._full_interval_ms
        self.settled += armed.settled
        return armed.tasks

    def _remember_unanswered(self, taken: Mapping[Lease, frozenset[str]]) -> None:
        """R3a: a pass that took these may have committed, its answer lost."""
        for lease, ids in taken.items():
            self._unanswered[lease] = self._unanswered.get(lease, frozenset()) | ids
        log.warning(
            "an arming pass failed after it took %d tasks: the next pass takes those its"
            " commit armed",
            sum(map(len, taken.values())),
        )

    def _read_inherited(self, limit: int) -> tuple[list[Task], list[_Cursor]]:
        """Inherited rows (R3) up to ``limit``, and where each shard's read
        would go on (applied by :meth:`step` once the pass succeeded)."""
        out: list[Task] = []
        cursors: list[_Cursor] = []
        for acquired, after in self._shards.inherited_to_read():
            room = limit - len(out)
            if room <= 0:
                break
            tasks, last = self._store.inherited(acquired, after, room)
            cursors.append(_Cursor(acquired.lease, last or after, len(tasks) < room, len(tasks)))
            out += tasks
        return out, cursors


@dataclass(frozen=True, slots=True)
class _Cursor:
    """Where a shard's inherited read goes on, once the pass that read it succeeded."""

    lease: Lease
    after: Mark | None
    done: bool
    count: int
