"""Shard leases (``docs/design/ownership.md``, R1, R2, R4).

:class:`ShardTable` is what this instance believes it holds; the keeper thread
(:class:`ShardKeeper`, ``th-shards``) is its only writer: it keeps the instance
name (R1), renews, acquires its fair share, drains and releases (R2). The
armer asks which shards to arm, the scheduler whether a copy may fire (R4).
"""

from __future__ import annotations

import enum
import logging
import math
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from triggerhook.domain.arming import Mark
from triggerhook.domain.task import Task
from triggerhook.errors import TransientError, TriggerHookError
from triggerhook.interfaces import Acquired, Clock, Lease, TaskStore
from triggerhook.retry import Backoff
from triggerhook.runtime.worker import FailureHandler, Worker

log = logging.getLogger(__name__)

# While draining, or below its fair share while shards may come free, the
# keeper looks again this often.
_BUSY_ROUND_S = 0.25
# Shards come free after a membership change (the others drain their excess
# at their next round and release each within a lease), also one this
# instance did not see itself: it lost shards while paused, and the others
# hand some back once they see it live. Looking often for this long after
# either, and not forever: with shards not divisible by the members (64 over
# 3: 22, 22, 20) one stays below ceil(N / M) for good.
_CHANGE_WINDOW_LEASES = 2


class Verdict(enum.Enum):
    FIRE = "fire"  # the copy's lease holds: publish it
    WAIT = "wait"  # the lease may have lapsed (a renewal failed): hold the copy
    DROP = "drop"  # the shard is no longer ours at that epoch: drop the copy


class InstanceNameLost(TriggerHookError):
    """Another process took over this instance's name (this one was paused
    or cut off past its lease): it must stop at once."""


@dataclass(slots=True)
class _Held:
    acquired: Acquired
    valid_until_ms: float  # database time by which the lease surely still holds
    inherited_after: Mark | None = None  # where reading inherited rows goes on
    inherited_done: bool = False
    draining_since_ms: float | None = None  # being handed over (R2)

    @property
    def lease(self) -> Lease:
        return self.acquired.lease


class ShardTable:
    """Thread-safe. ``margin_ms``: a lease is treated as lapsed this long
    before its end by this instance's clock (which may be behind the
    database's by up to the clock's bound)."""

    def __init__(self, clock: Clock, margin_ms: float) -> None:
        self._clock = clock
        self._margin_ms = margin_ms
        self._held: dict[int, _Held] = {}
        self._lock = threading.Lock()
        self.lost = 0  # shards found taken by another (fenced)

    def __len__(self) -> int:
        return len(self._held)

    def _valid(self, held: _Held, now_ms: float) -> bool:
        return now_ms + self._margin_ms < held.valid_until_ms

    # -- read by the other threads -------------------------------------------------

    def verdicts(self, tasks: Sequence[Task]) -> list[Verdict]:
        """R4, for copies about to fire: each copy's lease (shard, epoch)."""
        now_ms = self._clock.now_ms()
        out = []
        with self._lock:
            for task in tasks:
                held = self._held.get(task.shard)
                if held is None or held.lease.epoch != task.epoch:
                    out.append(Verdict.DROP)
                elif self._valid(held, now_ms):
                    out.append(Verdict.FIRE)
                else:
                    out.append(Verdict.WAIT)
        return out

    def for_arming(self) -> list[Lease]:
        """Leases to arm under: valid and not being handed over."""
        now_ms = self._clock.now_ms()
        with self._lock:
            return [
                h.lease
                for h in self._held.values()
                if h.draining_since_ms is None and self._valid(h, now_ms)
            ]

    def owns(self, shard: int) -> bool:
        return shard in self._held

    def inherited_to_read(self) -> list[tuple[Acquired, Mark | None]]:
        """Shards whose inherited rows (R3) are not all read yet, and where to go on."""
        with self._lock:
            return [
                (h.acquired, h.inherited_after) for h in self._held.values() if not h.inherited_done
            ]

    def inherited_read(self, lease: Lease, after: Mark | None, done: bool) -> None:
        with self._lock:
            held = self._held.get(lease.shard)
            if held is not None and held.lease == lease:
                held.inherited_after = after
                held.inherited_done = done

    def drop(self, shards: Sequence[int]) -> None:
        """Shards found taken by another instance (fenced): forget them at once."""
        with self._lock:
            for shard in shards:
                if self._held.pop(shard, None) is not None:
                    self.lost += 1
                    log.warning("lost shard %d to another instance", shard)

    def leases(self) -> list[Lease]:
        with self._lock:
            return [h.lease for h in self._held.values()]

    # -- written by the keeper -----------------------------------------------------

    def add(self, acquired: Sequence[Acquired], valid_until_ms: float) -> None:
        with self._lock:
            for one in acquired:
                self._held[one.lease.shard] = _Held(one, valid_until_ms)

    def renewed(self, kept: Sequence[Lease], asked: Sequence[Lease], valid_until_ms: float) -> None:
        """After a renewal: the leases in ``kept`` hold until ``valid_until_ms``;
        those asked and not kept were lost."""
        kept_set = set(kept)
        with self._lock:
            for lease in asked:
                held = self._held.get(lease.shard)
                if held is None or held.lease != lease:
                    continue
                if lease in kept_set:
                    held.valid_until_ms = valid_until_ms
                else:
                    del self._held[lease.shard]
                    self.lost += 1
                    log.warning("lost shard %d (epoch %d) to another instance", *_pair(lease))

    def start_draining(self, count: int, now_ms: float) -> None:
        with self._lock:
            idle = [h for h in self._held.values() if h.draining_since_ms is None]
            for held in random.sample(idle, min(count, len(idle))):
                held.draining_since_ms = now_ms

    def draining(self) -> list[tuple[Lease, float]]:
        with self._lock:
            return [
                (h.lease, h.draining_since_ms)
                for h in self._held.values()
                if h.draining_since_ms is not None
            ]

    def remove(self, leases: Sequence[Lease]) -> None:
        """Released by this instance."""
        with self._lock:
            for lease in leases:
                held = self._held.get(lease.shard)
                if held is not None and held.lease == lease:
                    del self._held[lease.shard]


def _pair(lease: Lease) -> tuple[int, int]:
    return lease.shard, lease.epoch


@dataclass(frozen=True, slots=True)
class KeeperConfig:
    instance: str
    token: int
    lease_ms: int


class ShardKeeper(Worker):
    """The ``th-shards`` thread: one round every third of the lease (more
    often while it wants shards or hands some over).

    A round: heartbeat (R1; matching nothing means another process took the
    name: the thread fails, and the daemon exits), renew every lease, count
    the live members, acquire up to the fair share ``ceil(N / members)``,
    start handing over what exceeds it, and release a draining shard once
    none of its tasks is held in memory (or after a lease of waiting).
    """

    def __init__(
        self,
        config: KeeperConfig,
        store: TaskStore,
        clock: Clock,
        table: ShardTable,
        held_in: Callable[[int], int],
        on_acquired: Callable[[], None],
        on_failure: FailureHandler,
    ) -> None:
        super().__init__("th-shards", on_failure)
        self._config = config
        self._store = store
        self._clock = clock
        self.table = table
        self._held_in = held_in
        self._on_acquired = on_acquired
        self._wakeup = threading.Event()
        # Retries well within a lease: after an outage the leases are renewed
        # (and firing resumes) soon after the database is back.
        self._backoff = Backoff(max_s=min(5.0, config.lease_ms / 6000))
        self.members = 1
        self.released = 0
        self._quick_until_ms = 0.0  # look often until then (members changed, shards lost)

    def wake(self) -> None:
        self._wakeup.set()

    def run(self) -> None:
        try:
            self._loop()
        except InstanceNameLost as exc:  # a documented end, not a bug: no traceback
            log.error("%s: stopping", exc)
            self._on_failure(self.name, exc)

    def _loop(self) -> None:
        while not self.stopping:
            try:
                busy = self.step(self._clock.now_ms())
            except TransientError as exc:
                self.back_off(exc, "keeping shard leases")
                continue
            self.succeeded("keeping shard leases")
            round_s = self._config.lease_ms / 3000.0
            # Beating while it waits: a long lease's rounds are long.
            self.pause(self._wakeup, min(_BUSY_ROUND_S, round_s) if busy else round_s)
            self._wakeup.clear()

    def step(self, now_ms: float) -> bool:
        """One round; True while it hands shards over, or wants more and some
        may come free (it just got some, or lately the members changed or it
        lost shards)."""
        cfg = self._config
        if not self._store.heartbeat(cfg.instance, cfg.token, cfg.lease_ms):
            raise InstanceNameLost(
                f"another process took over the instance name {cfg.instance!r} "
                "(this one was paused or cut off longer than shard_lease_ms)"
            )
        lost = self._renew(now_ms)
        members = max(1, self._store.live_members())
        if members != self.members or lost:
            self._quick_until_ms = now_ms + _CHANGE_WINDOW_LEASES * cfg.lease_ms
        self.members = members
        # Read each round: another instance may have added the rate-limited
        # lane's shards (store/lanes.py), which someone must hold.
        fair = math.ceil(self._store.placement(fresh=True).total / members)
        owned = len(self.table) - len(self.table.draining())
        acquired = 0
        if owned < fair:
            acquired = self._acquire(fair - owned, now_ms)
        elif owned > fair:
            self.table.start_draining(owned - fair, now_ms)
        self._release_drained(now_ms)
        wants = len(self.table) - len(self.table.draining()) < fair
        may_come_free = acquired > 0 or now_ms < self._quick_until_ms
        return bool(self.table.draining()) or (wants and may_come_free)

    def _renew(self, now_ms: float) -> bool:
        """Renew every lease; True when some were lost (taken by another instance)."""
        asked = self.table.leases()
        if not asked:
            return False
        kept = self._store.renew(self._config.instance, asked, self._config.lease_ms)
        self.table.renewed(kept, asked, now_ms + self._config.lease_ms)
        return len(kept) < len(asked)

    def _acquire(self, count: int, now_ms: float) -> int:
        """Acquire up to ``count`` free or expired shards; how many were."""
        acquired = self._store.acquire(self._config.instance, count, self._config.lease_ms)
        if acquired:
            self.table.add(acquired, now_ms + self._config.lease_ms)
            log.info("acquired %d shards", len(acquired), extra={"shards": len(self.table)})
            self._on_acquired()
        return len(acquired)

    def _release_drained(self, now_ms: float) -> None:
        ready = [
            lease
            for lease, since_ms in self.table.draining()
            if not self._held_in(lease.shard) or now_ms - since_ms >= self._config.lease_ms
        ]
        if ready:
            self.release(ready)

    def release(self, leases: Sequence[Lease]) -> None:
        """Give leases up (their tasks in memory were fired and deleted, or
        the wait ran out: the next owner inherits what is left)."""
        self.table.remove(leases)
        self.released += self._store.release(self._config.instance, leases)
        log.info("released %d shards", len(leases), extra={"shards": len(self.table)})

    def finish(self) -> None:
        """At a graceful stop, after the thread ended: release every lease and
        give the name up (a few tries; else they expire after the lease)."""
        cfg = self._config
        for attempt in range(5):
            try:
                leases = self.table.leases()
                if leases:
                    self.release(leases)
                self._store.leave(cfg.instance, cfg.token)
                return
            except TransientError as exc:
                log.warning("releasing shards failed (attempt %d): %s", attempt + 1, exc)
                threading.Event().wait(0.2 * 2**attempt)
            except TriggerHookError as exc:
                log.error("cannot release shards: %s", exc)
                return
        log.error("shards not released; others take them after shard_lease_ms")
