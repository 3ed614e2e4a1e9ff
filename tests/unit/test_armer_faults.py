"""The armer when a pass fails (issue 29): what it read or took must not be lost.

Each test is one of the faults the simulator (tests/sim) found or was built
to find, pinned as an example, against the in-memory store:

* defect 1: an inherited read, then a failure later in the same pass — the
  shard's inherited cursor stays, and the next pass reads the rows again;
* R3a, and defect 6: a pass whose answer was lost; the ids it took are kept
  per lease until a pass over that lease settles them — not forgotten by a
  pass that left the lease out (its lease may have lapsed);
* a shard this instance took back at a newer epoch: its old copies are
  dropped by the scheduler, and the inherited read's copies fire instead.

The same R3a rule against MariaDB, through a proxy that loses the COMMIT's
answer: tests/contract/test_mysql_lost_answer.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest
from support.fakes import FakeClock, FakeStore

from triggerhook.domain.arming import shard_of
from triggerhook.domain.task import CancelResult, Task
from triggerhook.engine.armer import Armer
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.errors import StoreUnavailable
from triggerhook.interfaces import Acquired, Armed, ArmUnanswered, Lease, NewRow

NOW = 1_700_000_000_000
SHARDS = 4
LEASE_MS = 10_000
MARGIN_MS = 100


@dataclass
class Instance:
    name: str
    clock: FakeClock
    store: FakeStore
    shards: ShardTable
    inventory: Inventory
    buffer: SendBuffer
    scheduler: Scheduler
    armer: Armer

    def acquire(self, count: int = SHARDS) -> list[Acquired]:
        taken = self.store.acquire(self.name, count, LEASE_MS)
        self.shards.add(taken, self.clock.now + LEASE_MS)
        return taken

    def armed(self) -> list[str]:
        """What its scheduler holds (taken out)."""
        return sorted(t.id for t in self.scheduler.take_remaining())

    def fired(self) -> list[str]:
        """What its scheduler lets out now (after the lease check)."""
        batch, _wait = self.scheduler.poll(self.clock.now)
        if batch:
            self.scheduler.handle(batch, self.clock.now)
        return sorted(t.id for t in self.buffer.take(100))


def instance(name: str, store: FakeStore | None = None, clock: FakeClock | None = None) -> Instance:
    clock = clock or FakeClock(NOW)
    store = store or FakeStore(now_ms=clock.now_ms, shard_count=SHARDS)
    shards = ShardTable(clock, MARGIN_MS)
    inventory = Inventory(100)
    buffer = SendBuffer(100)
    scheduler = Scheduler(clock, buffer, shards, inventory, 100, _fail)
    armer = Armer(
        clock,
        store,
        name,
        shards,
        inventory,
        scheduler,
        arm_ahead_ms=200,
        interval_ms=10,
        batch_size=100,
        on_failure=_fail,
    )
    return Instance(name, clock, store, shards, inventory, buffer, scheduler, armer)


def _fail(name: str, exc: BaseException) -> None:
    raise AssertionError(f"{name} failed: {exc!r}")


def ids_in_shards(count: int, *shards: int) -> list[str]:
    """``count`` ids in each of ``shards``."""
    found: dict[int, list[str]] = {s: [] for s in shards}
    n = 0
    while any(len(v) < count for v in found.values()):
        tid = f"t{n}"
        n += 1
        shard = shard_of(tid, SHARDS)
        if shard in found and len(found[shard]) < count:
            found[shard].append(tid)
    return [tid for s in shards for tid in found[s]]


def insert(store: FakeStore, task_ids: Sequence[str], due_ms: int = NOW) -> None:
    store.insert([NewRow(Task(tid, due_ms, "rk")) for tid in task_ids], atomic=False)


def inherited_by_heir(task_ids: Sequence[str]) -> Instance:
    """``task_ids`` armed by an instance that then died; an heir owns every
    shard now (at the dead one's lease's end) and has not read them yet."""
    dead = instance("dead")
    dead.acquire()
    insert(dead.store, task_ids)
    dead.armer.step(NOW)
    assert dead.armed() == sorted(task_ids)
    heir = instance("heir", dead.store, dead.clock)
    heir.clock.set(NOW + 2 * LEASE_MS)
    assert len(heir.acquire()) == SHARDS
    return heir


# -- defect 1 ---------------------------------------------------------------------------


def test_inherited_rows_read_by_a_pass_that_failed_are_read_again() -> None:
    task_ids = ids_in_shards(2, 0, 1)
    heir = inherited_by_heir(task_ids)
    heir.store.fail_next("arm", StoreUnavailable("a deadlock"))  # after the inherited reads
    with pytest.raises(StoreUnavailable):
        heir.armer.step(heir.clock.now)
    assert heir.armed() == []
    heir.armer.step(heir.clock.now)
    assert heir.armed() == sorted(task_ids)
    assert heir.armer.inherited == len(task_ids)  # counted once, when they were taken


def test_a_failed_inherited_read_of_a_later_shard_loses_none_of_the_earlier() -> None:
    task_ids = ids_in_shards(2, 0, 1)
    heir = inherited_by_heir(task_ids)
    read, calls = heir.store.inherited, []

    def second_fails(acquired: Acquired, after: object, limit: int) -> object:
        calls.append(acquired.lease.shard)
        if len(calls) == 2:
            raise StoreUnavailable("the connection was cut")
        return read(acquired, after, limit)  # type: ignore[arg-type]

    heir.store.inherited = second_fails  # type: ignore[method-assign,assignment]
    with pytest.raises(StoreUnavailable):
        heir.armer.step(heir.clock.now)
    heir.armer.step(heir.clock.now)
    assert heir.armed() == sorted(task_ids)


# -- R3a and defect 6 ----------------------------------------------------------------------


class LosingStore(FakeStore):
    """Its next arming pass commits, then loses its answer, as the MySQL
    store reports one (ArmUnanswered naming what it took)."""

    lose_next = False

    def arm(
        self,
        instance: str,
        leases: Sequence[Lease],
        horizon_ms: int,
        limit: int,
        urgent_ms: int | None = None,
        unanswered: Mapping[Lease, frozenset[str]] | None = None,
    ) -> Armed:
        armed = super().arm(instance, leases, horizon_ms, limit, urgent_ms, unanswered)
        if not self.lose_next:
            return armed
        self.lose_next = False
        taken: dict[Lease, set[str]] = {}
        for task in armed.tasks:
            taken.setdefault(Lease(task.shard, task.epoch), set()).add(task.id)
        raise ArmUnanswered(
            "the COMMIT's answer was lost", {k: frozenset(v) for k, v in taken.items()}
        )


def losing_instance() -> tuple[Instance, LosingStore]:
    clock = FakeClock(NOW)
    store = LosingStore(now_ms=clock.now_ms, shard_count=SHARDS)
    return instance("me", store, clock), store


def test_the_pass_after_a_lost_answer_takes_what_that_pass_armed() -> None:
    me, store = losing_instance()
    me.acquire()
    task_ids = ids_in_shards(2, 0, 1)
    insert(store, task_ids)
    store.lose_next = True
    with pytest.raises(ArmUnanswered):
        me.armer.step(NOW)
    assert store.cancel(task_ids[:1]) == [CancelResult.TOO_LATE]  # armed: the pass committed
    me.armer.step(NOW)
    assert me.armed() == sorted(task_ids)
    me.armer.step(NOW)
    assert me.armed() == []  # taken once


def test_lost_answers_of_a_lease_a_pass_left_out_are_kept_for_a_later_pass() -> None:
    """Defect 6: shard 0's lease may have lapsed (acquired before shard 1's,
    its renewal failed): a pass over shard 1 alone must not forget what the
    lost pass took in shard 0; once shard 0 is renewed, a pass takes them."""
    me, store = losing_instance()
    first = store.acquire("me", 1, LEASE_MS)
    me.shards.add(first, NOW + LEASE_MS)
    later = store.acquire("me", 1, LEASE_MS)
    me.shards.add(later, NOW + 2 * LEASE_MS)  # acquired later: valid longer
    leases = [a.lease for a in first + later]
    task_ids = [tid for lease in leases for tid in ids_in_shards(2, lease.shard)]
    insert(store, task_ids)
    store.lose_next = True
    with pytest.raises(ArmUnanswered):
        me.armer.step(NOW)
    me.clock.set(NOW + LEASE_MS)  # the first lease may have lapsed, the later not
    assert me.shards.for_arming() == [later[0].lease]
    me.armer.step(me.clock.now)
    assert me.armed() == sorted(ids_in_shards(2, later[0].lease.shard))
    assert store.renew("me", leases, LEASE_MS) == leases  # nobody took it: same epoch
    me.shards.renewed(leases, leases, me.clock.now + LEASE_MS)
    me.armer.step(me.clock.now)
    assert me.armed() == sorted(ids_in_shards(2, first[0].lease.shard))


def test_lost_answers_of_a_shard_lost_since_are_left_to_its_new_owner() -> None:
    me, store = losing_instance()
    me.acquire()
    task_ids = ids_in_shards(1, 0)
    insert(store, task_ids)
    store.lose_next = True
    with pytest.raises(ArmUnanswered):
        me.armer.step(NOW)
    me.shards.drop([0])  # found taken by another instance
    me.armer.step(NOW)
    call = store.arm_calls[-1]
    assert call.unanswered is None  # nothing asked of a shard no longer held
    assert me.armed() == []


# -- a shard taken back at a newer epoch ------------------------------------------------------


def test_a_shard_taken_back_at_a_newer_epoch_fires_its_armed_copies() -> None:
    me = instance("me")
    me.acquire()
    task_ids = ids_in_shards(1, 0)
    insert(me.store, task_ids, due_ms=NOW + 150)
    me.armer.step(NOW)  # armed in epoch 1; the copy waits in the heap for its time
    # Paused past its lease; nobody took the shard; it takes it back itself.
    me.clock.set(NOW + 2 * LEASE_MS)
    me.shards.drop([0])
    again = me.store.acquire("me", SHARDS, LEASE_MS)
    assert Lease(0, 2) in [a.lease for a in again]
    me.shards.add(again, me.clock.now + LEASE_MS)
    me.armer.step(me.clock.now)  # the inherited read finds the row armed in epoch 1
    assert me.fired() == task_ids  # the epoch-2 copy; the epoch-1 copy is dropped
    assert me.fired() == []
    assert len(me.inventory) == 1  # held until its confirm, once
