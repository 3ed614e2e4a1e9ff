"""The fault layer: a :class:`~triggerhook.interfaces.TaskStore` in front of
the real store, one per simulated instance (its connection to the database).

At seeded calls it makes the call fail the ways a database and a network do:

* **before**: the transient error the adapter raises, before the call took
  effect (the connection was cut on the way, a deadlock, a lock wait timeout);
* **after**: the call took effect and the answer was lost (the connection was
  cut after the server ran it, a COMMIT whose answer never came). For an
  arming pass the error carries what the pass took, as the MySQL store's does
  (:class:`~triggerhook.interfaces.ArmUnanswered`, rule R3a);
* **stall**: the call waits past a good part of a lease, before or after it
  takes effect (time moves on in the world meanwhile; the caller resumes with
  what it knew);
* **read-only**: while the world's database is read-only (a demoted writer
  after a failover, a full disk) every write fails before taking effect with
  :class:`~triggerhook.errors.StoreReadOnly`, as the adapters translate
  MySQL's 1290 and its kin; reads go on.

Every write that got through is shown to the oracle with its arguments and
answer (``Observer.wrote``), before any lost answer is raised: the oracle
judges the store's effects, whatever the caller was told.

Threads: none; the world's one thread calls it.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from triggerhook.domain.arming import Mark, Placement
from triggerhook.domain.listing import Key, Timeline
from triggerhook.domain.task import CancelResult, SeriesResult, Task, TaskInfo
from triggerhook.errors import StoreReadOnly, StoreUnavailable
from triggerhook.interfaces import (
    Acquired,
    Armed,
    ArmUnanswered,
    DeferOutcome,
    Deferral,
    Inserted,
    Lease,
    Move,
    Moved,
    NameHolder,
    NewRow,
    OutboxMoved,
    TaskStore,
)

R = TypeVar("R")


class Fault(enum.Enum):
    NONE = "none"
    BEFORE = "fails before it takes effect"
    AFTER = "took effect, the answer was lost"
    STALL_BEFORE = "stalls, then takes effect"
    STALL_AFTER = "takes effect, then stalls"


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Per call, the chance of each fault while faults are on."""

    before: float = 0.03
    after: float = 0.03
    stall: float = 0.005
    arm_after: bool = True  # lost answers of arming passes (R3a) too


class Observer(Protocol):
    """The world: its time, its faults, and the oracle's view of the store."""

    def now_ms(self) -> float:
        """The database's clock."""
        ...

    def true_ms(self) -> float:
        """The true time (the hosts' clocks run by it)."""
        ...

    def stall(self, instance: str, what: str) -> None: ...

    def read_only(self) -> bool: ...

    def faults_on(self) -> bool: ...

    def wrote(self, instance: str, name: str, args: tuple[object, ...], result: object) -> None: ...

    def lose_commits(self, on: bool) -> bool:
        """While on, the store's next COMMIT takes effect and its answer is
        lost (the backend's own seam); False: this backend has none."""
        ...

    def log(self, line: str) -> None: ...


# Calls that write (refused while the database is read-only).
WRITES = frozenset(
    {
        "insert",
        "arm",
        "delete_fired",
        "delete_recorded",
        "sweep_fired",
        "move_outbox",
        "advance",
        "defer",
        "cancel",
        "reschedule",
        "pause",
        "resume",
        "acquire",
        "renew",
        "release",
        "register",
        "take_over_name",
        "heartbeat",
        "leave",
    }
)


class FaultyStore:
    """``inner`` as seen by ``instance``, with faults drawn from ``rng``."""

    def __init__(
        self,
        inner: TaskStore,
        instance: str,
        world: Observer,
        rng: random.Random,
        rates: FaultRates,
        faults: bool = True,
    ) -> None:
        self._inner = inner
        self._instance = instance
        self._world = world
        self._rng = rng
        self._rates = rates
        self._faults = faults
        self.failures = 0

    def _pick(self, name: str) -> Fault:
        if not self._faults or not self._world.faults_on():
            return Fault.NONE
        rates, draw = self._rates, self._rng.random()
        if name == "arm" and not rates.arm_after:
            return Fault.BEFORE if draw < rates.before else Fault.NONE
        for fault, rate in (
            (Fault.BEFORE, rates.before),
            (Fault.AFTER, rates.after),
            (Fault.STALL_BEFORE, rates.stall / 2),
            (Fault.STALL_AFTER, rates.stall / 2),
        ):
            if draw < rate:
                return fault
            draw -= rate
        return Fault.NONE

    def _call(self, name: str, args: tuple[object, ...], call: Callable[[], R]) -> R:
        fault = self._pick(name)
        if name in WRITES and self._world.read_only():
            self._fail(name, "read-only")
            raise StoreReadOnly(f"sim: {name}: the database is read-only")
        if fault is Fault.BEFORE:
            self._fail(name, fault.value)
            raise StoreUnavailable(f"sim: {name} {fault.value}")
        if fault is Fault.STALL_BEFORE:
            self._world.stall(self._instance, name)
        if fault is Fault.AFTER and name == "arm" and self._world.lose_commits(True):
            # The pass's COMMIT loses its answer inside the store, which then
            # handles it as it does a real one (R3a); no dumped row changes.
            self._fail(name, "COMMIT " + fault.value)
            try:
                return call()
            finally:
                self._world.lose_commits(False)
        result = call()
        if name in WRITES:
            self._world.wrote(self._instance, name, args, result)
        elif name == "inherited":
            ids = [t.id for t in result[0]]  # type: ignore[index]
            self._world.log(f"{self._instance}: inherited {args[0]} -> {ids}")
        if fault is Fault.AFTER:
            self._fail(name, fault.value)
            raise self._lost(name, result)
        if fault is Fault.STALL_AFTER:
            self._world.stall(self._instance, name)
        return result

    def _fail(self, name: str, what: str) -> None:
        self.failures += 1
        self._world.log(f"{self._instance}: {name} {what}")

    @staticmethod
    def _lost(name: str, result: object) -> StoreUnavailable:
        message = f"sim: {name} {Fault.AFTER.value}"
        if name == "arm" and isinstance(result, Armed) and result.tasks:
            taken: dict[Lease, set[str]] = {}
            for task in result.tasks:
                taken.setdefault(Lease(task.shard, task.epoch), set()).add(task.id)
            return ArmUnanswered(message, {k: frozenset(v) for k, v in taken.items()})
        return StoreUnavailable(message)

    # -- TaskStore --------------------------------------------------------------------

    def shard_count(self) -> int:
        return self._inner.shard_count()

    def placement(self, fresh: bool = False) -> Placement:
        return self._inner.placement(fresh)

    def open_lanes(self, limited: Callable[[str], bool]) -> None:
        self._call("open_lanes", (), lambda: self._inner.open_lanes(limited))

    def insert(
        self,
        rows: Sequence[NewRow],
        atomic: bool,
        now_ms: float | None = None,
        *,
        fired_ok: bool = False,
    ) -> list[Inserted]:
        return self._call(
            "insert",
            (rows, atomic, now_ms),
            lambda: self._inner.insert(rows, atomic, now_ms, fired_ok=fired_ok),
        )

    def arm(
        self,
        instance: str,
        leases: Sequence[Lease],
        horizon_ms: int,
        limit: int,
        urgent_ms: int | None = None,
        unanswered: Mapping[Lease, frozenset[str]] | None = None,
    ) -> Armed:
        args = (instance, leases, horizon_ms, limit, urgent_ms)
        return self._call("arm", args, lambda: self._inner.arm(*args, unanswered))

    def inherited(
        self, acquired: Acquired, after: Mark | None, limit: int
    ) -> tuple[list[Task], Mark | None]:
        return self._call(
            "inherited", (acquired,), lambda: self._inner.inherited(acquired, after, limit)
        )

    def delete_fired(self, fired: Sequence[tuple[str, int]]) -> int:
        return self._call("delete_fired", (fired,), lambda: self._inner.delete_fired(fired))

    def advance(self, fired: Sequence[Task], now_ms: float) -> int:
        return self._call("advance", (fired, now_ms), lambda: self._inner.advance(fired, now_ms))

    def delete_recorded(self, fired: Sequence[Task], now_ms: float) -> int:
        return self._call(
            "delete_recorded", (fired, now_ms), lambda: self._inner.delete_recorded(fired, now_ms)
        )

    def move_outbox(self, limit: int, now_ms: float) -> OutboxMoved:
        return self._call(
            "move_outbox", (limit, now_ms), lambda: self._inner.move_outbox(limit, now_ms)
        )

    def outbox_waiting(self) -> tuple[int | None, int]:
        return self._call("outbox_waiting", (), self._inner.outbox_waiting)

    def sweep_fired(self, shards: Sequence[int], now_ms: float, limit: int) -> int:
        return self._call(
            "sweep_fired", (shards, now_ms), lambda: self._inner.sweep_fired(shards, now_ms, limit)
        )

    def defer(self, instance: str, deferrals: Sequence[Deferral]) -> list[DeferOutcome]:
        return self._call(
            "defer", (instance, deferrals), lambda: self._inner.defer(instance, deferrals)
        )

    def cancel(self, task_ids: Sequence[str]) -> list[CancelResult]:
        return self._call("cancel", (task_ids,), lambda: self._inner.cancel(task_ids))

    def reschedule(self, moves: Sequence[Move]) -> list[Moved]:
        return self._call("reschedule", (moves,), lambda: self._inner.reschedule(moves))

    def pause(self, task_ids: Sequence[str]) -> list[SeriesResult]:
        return self._call("pause", (task_ids,), lambda: self._inner.pause(task_ids))

    def resume(self, task_ids: Sequence[str], now_ms: float) -> list[SeriesResult]:
        return self._call(
            "resume", (task_ids, now_ms), lambda: self._inner.resume(task_ids, now_ms)
        )

    def acquire(self, instance: str, count: int, lease_ms: int) -> list[Acquired]:
        return self._call(
            "acquire", (instance,), lambda: self._inner.acquire(instance, count, lease_ms)
        )

    def renew(self, instance: str, leases: Sequence[Lease], lease_ms: int) -> list[Lease]:
        return self._call(
            "renew", (instance, leases), lambda: self._inner.renew(instance, leases, lease_ms)
        )

    def release(self, instance: str, leases: Sequence[Lease]) -> int:
        return self._call(
            "release", (instance, leases), lambda: self._inner.release(instance, leases)
        )

    def register(self, instance: str, token: int, host: str, pid: int, lease_ms: int) -> None:
        self._call(
            "register",
            (instance,),
            lambda: self._inner.register(instance, token, host, pid, lease_ms),
        )

    def name_holder(self, instance: str) -> NameHolder | None:
        return self._call("name_holder", (instance,), lambda: self._inner.name_holder(instance))

    def take_over_name(
        self, instance: str, token: int, host: str, pid: int, lease_ms: int, holder: NameHolder
    ) -> bool:
        return self._call(
            "take_over_name",
            (instance,),
            lambda: self._inner.take_over_name(instance, token, host, pid, lease_ms, holder),
        )

    def heartbeat(self, instance: str, token: int, lease_ms: int) -> bool:
        return self._call(
            "heartbeat", (instance,), lambda: self._inner.heartbeat(instance, token, lease_ms)
        )

    def leave(self, instance: str, token: int) -> None:
        self._call("leave", (instance,), lambda: self._inner.leave(instance, token))

    def live_members(self) -> int:
        return self._call("live_members", (), self._inner.live_members)

    def check_schema(self) -> None:
        self._inner.check_schema()

    def get(self, task_id: str) -> TaskInfo | None:
        return self._call("get", (task_id,), lambda: self._inner.get(task_id))

    def count_tasks(self) -> int:
        return self._inner.count_tasks()

    # Listing reads: passed through with whatever arguments the protocol gives them.
    def list_tasks(self, *args: Any, **kwargs: Any) -> list[TaskInfo]:
        return self._inner.list_tasks(*args, **kwargs)

    def match_keys(self, *args: Any, **kwargs: Any) -> list[Key]:
        return self._call("match_keys", (), lambda: self._inner.match_keys(*args, **kwargs))

    def count_where(self, *args: Any, **kwargs: Any) -> int:
        return self._inner.count_where(*args, **kwargs)

    def timeline(self, *args: Any, **kwargs: Any) -> Timeline:
        return self._inner.timeline(*args, **kwargs)

    def earliest_due_ms(self) -> int | None:
        return self._inner.earliest_due_ms()

    def database_time_us(self) -> int:
        return self._call("database_time_us", (), self._inner.database_time_us)

    def close(self) -> None:
        """The world closes the real store once."""


if TYPE_CHECKING:  # mypy checks the layer against the protocol it stands in for

    def _checked(layer: FaultyStore) -> TaskStore:
        return layer
