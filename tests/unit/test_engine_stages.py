"""The engine's stages against a FakeClock and a FakeStore (no database, no broker)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import pytest
from support.fakes import FakeClock, FakePublisher, FakeStore
from support.waiting import wait_until

from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskState
from triggerhook.engine.armer import Armer
from triggerhook.engine.confirmer import Confirmer
from triggerhook.engine.engine import Engine
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.preloader import Preloader
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.errors import ConflictError, StoreError, StoreUnavailable
from triggerhook.interfaces import Claim, ClaimMode, InsertOutcome, NewRow
from triggerhook.settings import Settings
from triggerhook.wiring import engine_config

NOW = 1_700_000_000_000
ME = "me"
WAIT_S = 5.0


def task(name: str, due_ms: int, payload: bytes = b"") -> Task:
    return Task(name, due_ms, "rk", payload)


def ids(items: Sequence[Task | Claim]) -> list[str]:
    """The task ids of tasks (scheduler, send buffer) or claims (armer, inventory)."""
    return [item.task.id if isinstance(item, Claim) else item.id for item in items]


def claim(t: Task, rev: int = 1, armed: bool = False) -> Claim:
    return Claim(t, rev, armed)


class Failures:
    """An on_failure handler that records what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, BaseException]] = []

    def __call__(self, name: str, exc: BaseException) -> None:
        self.seen.append((name, exc))


@dataclass
class Stages:
    clock: FakeClock
    store: FakeStore
    inventory: Inventory
    buffer: SendBuffer
    scheduler: Scheduler
    armer: Armer
    failures: Failures
    started: list[Scheduler | Armer | Preloader | Confirmer] = field(default_factory=list)


def make_stages(
    *,
    capacity: int = 100,
    buffer_size: int = 100,
    arm_ahead_ms: int = 200,
    batch_limit: int = 100,
) -> Stages:
    clock = FakeClock(NOW)
    store = FakeStore()
    failures = Failures()
    inventory = Inventory(capacity)
    buffer = SendBuffer(buffer_size)
    scheduler = Scheduler(clock, buffer, batch_limit, failures)
    armer = Armer(clock, store, ME, inventory, scheduler, arm_ahead_ms, batch_limit, failures)
    return Stages(clock, store, inventory, buffer, scheduler, armer, failures)


@pytest.fixture
def stages() -> Iterator[Stages]:
    s = make_stages()
    try:
        yield s
    finally:
        for worker in s.started:
            worker.stop()
        for worker in s.started:
            assert worker.join(WAIT_S), f"{worker.name} did not stop"
        assert s.failures.seen == []


# -- Scheduler.poll -----------------------------------------------------------------


def test_scheduler_with_nothing_waits_until_woken(stages: Stages) -> None:
    assert stages.scheduler.poll(NOW) == ([], None)


def test_scheduler_waits_exactly_until_the_head_is_due(stages: Stages) -> None:
    stages.scheduler.push_many([task("late", NOW + 5000), task("head", NOW + 750)])
    batch, wait_s = stages.scheduler.poll(NOW)
    assert batch == []
    assert wait_s == pytest.approx(0.750)
    batch, wait_s = stages.scheduler.poll(NOW + 749.5)
    assert batch == []
    assert wait_s == pytest.approx(0.0005)
    assert len(stages.scheduler) == 2


def test_scheduler_never_pops_a_task_before_its_due_time(stages: Stages) -> None:
    due = NOW + 100
    stages.scheduler.push_many([task("t", due)])
    batch, wait_s = stages.scheduler.poll(due - 0.001)
    assert batch == []
    assert wait_s is not None
    assert wait_s > 0
    assert len(stages.scheduler) == 1
    batch, wait_s = stages.scheduler.poll(due)
    assert ids(batch) == ["t"]
    assert wait_s == 0.0


def test_scheduler_pops_every_due_task_in_order_and_leaves_the_rest(stages: Stages) -> None:
    stages.scheduler.push_many(
        [task("c", NOW - 1), task("a", NOW - 10), task("future", NOW + 1), task("b", NOW - 5)]
    )
    batch, wait_s = stages.scheduler.poll(NOW)
    assert ids(batch) == ["a", "b", "c"]
    assert wait_s == 0.0
    assert len(stages.scheduler) == 1
    assert stages.scheduler.poll(NOW)[1] == pytest.approx(0.001)


def test_scheduler_batch_is_bounded_by_batch_limit_and_sink_room() -> None:
    s = make_stages(buffer_size=3, batch_limit=2)
    s.scheduler.push_many([task(f"t{i}", NOW - 10 + i) for i in range(5)])
    first, _ = s.scheduler.poll(NOW)
    assert ids(first) == ["t0", "t1"]  # batch_limit
    s.scheduler.handle(first, NOW)
    second, _ = s.scheduler.poll(NOW)
    assert ids(second) == ["t2"]  # the buffer has room for only one more
    s.scheduler.handle(second, NOW)
    assert s.scheduler.fired == 3
    assert ids(s.buffer.take(10)) == ["t0", "t1", "t2"]


def test_scheduler_with_full_sink_waits_and_keeps_its_tasks() -> None:
    s = make_stages(buffer_size=1)
    s.buffer.put_many([task("occupying", NOW)])
    s.scheduler.push_many([task("due", NOW - 1)])
    batch, wait_s = s.scheduler.poll(NOW)
    assert batch == []
    assert wait_s is not None
    assert 0 < wait_s <= 1.0  # re-checks on its own, not "wait forever"
    assert len(s.scheduler) == 1
    s.buffer.take(1)
    assert ids(s.scheduler.poll(NOW)[0]) == ["due"]


def test_scheduler_thread_fires_due_tasks_into_the_buffer(stages: Stages) -> None:
    woken: list[int] = []
    stages.buffer.on_put = lambda: woken.append(len(stages.buffer))
    stages.scheduler.start()
    stages.started.append(stages.scheduler)
    stages.scheduler.push_many([task("b", NOW - 1), task("a", NOW - 2)])
    assert wait_until(lambda: len(stages.buffer) == 2, WAIT_S)
    assert ids(stages.buffer.take(10)) == ["a", "b"]
    assert woken  # the publisher would have been woken
    assert stages.scheduler.fired == 2


def test_scheduler_thread_wakes_for_an_earlier_head(stages: Stages) -> None:
    # The thread sleeps until a head due in ~1000 s (fake time = real wait);
    # a newly due task must cut that wait short.
    stages.scheduler.push_many([task("far", NOW + 1_000_000)])
    stages.scheduler.start()
    stages.started.append(stages.scheduler)
    # The thread reads the clock and then waits, holding the heap's lock in
    # between: once it has read the clock, our push below lands while it waits.
    assert wait_until(lambda: stages.clock.reads >= 1, WAIT_S)
    stages.scheduler.push_many([task("now", NOW)])
    assert wait_until(lambda: len(stages.buffer) == 1, WAIT_S)
    assert ids(stages.buffer.take(10)) == ["now"]
    assert len(stages.scheduler) == 1


def test_scheduler_thread_wakes_when_the_buffer_gets_room() -> None:
    s = make_stages(buffer_size=1)
    s.buffer.on_room = s.scheduler.wake
    s.buffer.put_many([task("occupying", NOW)])
    s.scheduler.start()
    try:
        s.scheduler.push_many([task("waiting", NOW - 1)])
        assert len(s.scheduler) == 1
        assert ids(s.buffer.take(1)) == ["occupying"]
        assert wait_until(lambda: len(s.buffer) == 1, WAIT_S)
        assert ids(s.buffer.take(1)) == ["waiting"]
    finally:
        s.scheduler.stop()
        assert s.scheduler.join(WAIT_S)
    assert s.failures.seen == []


# -- Armer -------------------------------------------------------------------------------


def test_armer_pops_tasks_arm_ahead_before_due(stages: Stages) -> None:
    due = NOW + 1000
    stages.armer.push_many([claim(task("t", due))])
    batch, wait_s = stages.armer.poll(due - 200 - 1)
    assert batch == []
    assert wait_s == pytest.approx(0.001)
    assert ids(stages.armer.poll(due - 200)[0]) == ["t"]


def _held(s: Stages, *tasks: Task, claimed_by: str = ME) -> list[Claim]:
    """Rows claimed (not armed) and held in memory, as after a claim; their claims."""
    claims = []
    for t in tasks:
        rev = s.store.put(t, claimed_by=claimed_by, claim_until_ms=NOW + 10_000)
        claims.append(claim(t, rev))
    assert s.inventory.admit(claims, 0) == claims
    return claims


def test_armer_arms_and_hands_to_scheduler(stages: Stages) -> None:
    a, b = task("a", NOW + 100), task("b", NOW + 50)
    stages.armer.handle(_held(stages, a, b), NOW)
    assert stages.store.arm_calls == [["a", "b"]]
    assert stages.store.rows["a"].firing
    assert stages.store.rows["b"].firing
    assert stages.armer.armed == 2
    assert stages.armer.dropped == 0
    assert ids(stages.scheduler.take_remaining()) == ["b", "a"]
    assert sorted(stages.inventory.snapshot()) == ["a", "b"]


def test_armer_discards_tasks_the_store_refuses_to_arm(stages: Stages) -> None:
    kept = task("kept", NOW + 100)
    cancelled = task("cancelled", NOW + 100)
    taken_over = task("taken-over", NOW + 100)
    rescheduled = task("rescheduled", NOW + 100)
    claims = _held(stages, kept, cancelled, taken_over, rescheduled)
    assert stages.store.cancel(["cancelled"]) == [CancelResult.CANCELLED]  # deleted meanwhile
    # Same row (same revision), now claimed by another instance.
    stages.store.put(taken_over, claimed_by="other", claim_until_ms=NOW + 10_000, rev=claims[2].rev)
    # Cancelled and created again with other content: a new row, a new revision.
    stages.store.put(task("rescheduled", NOW + 9999), claimed_by=ME, claim_until_ms=NOW + 10_000)

    stages.armer.handle(claims, NOW)

    assert ids(stages.scheduler.take_remaining()) == ["kept"]
    assert stages.inventory.snapshot() == ["kept"]
    assert stages.armer.armed == 1
    assert stages.armer.dropped == 3
    assert not stages.store.rows["taken-over"].firing
    assert not stages.store.rows["rescheduled"].firing


def test_armer_pushes_tasks_back_on_a_transient_store_error(stages: Stages) -> None:
    a, b = task("a", NOW + 100), task("b", NOW + 150)
    claims = _held(stages, a, b)
    stages.store.fail_next("arm", StoreUnavailable("database went away"))
    # Stopped (never started): back_off does not wait, so handle returns at once.
    stages.armer.stop()
    started = time.monotonic()
    stages.armer.handle(claims, NOW)
    assert time.monotonic() - started < 1.0
    assert len(stages.scheduler) == 0  # not armed: never fired
    assert len(stages.armer) == 2  # waiting to be armed again
    assert sorted(stages.inventory.snapshot()) == ["a", "b"]  # still held
    assert stages.armer.transient_errors == 1
    assert not stages.store.rows["a"].firing
    # The retry arms them.
    batch, _ = stages.armer.poll(NOW)
    assert batch == claims  # the same claims, revisions included
    stages.armer.handle(batch, NOW)
    assert ids(stages.scheduler.take_remaining()) == ["a", "b"]
    assert stages.armer.armed == 2


@pytest.mark.parametrize(
    "again",
    [
        task("x", NOW + 100),  # the very same content
        task("x", NOW + 100, b"new content"),
        task("x", NOW + 50),  # earlier
        task("x", NOW + 150),  # later
    ],
    ids=["same-content", "other-payload", "earlier", "later"],
)
def test_armer_fires_only_the_new_copy_of_a_task_cancelled_and_created_again(
    stages: Stages, again: Task
) -> None:
    # Bug fixed by row revisions: the old in-memory copy of a cancelled task
    # must never fire, not even when the re-created row has the same content.
    (old,) = _held(stages, task("x", NOW + 100))
    stages.armer.push_many([old])
    assert stages.store.cancel(["x"]) == [CancelResult.CANCELLED]
    row = NewRow(again, ClaimMode.CLAIM)
    assert stages.store.insert([row], ME, NOW + 10_000, atomic=False) == [InsertOutcome.CREATED]
    new = claim(again, row.rev)
    assert stages.inventory.admit([new], 0) == [new]  # another revision: queued again
    stages.armer.push_many([new])

    batch, _ = stages.armer.poll(NOW)
    assert sorted(c.rev for c in batch) == sorted([old.rev, new.rev])
    stages.armer.handle(batch, NOW)

    assert stages.scheduler.take_remaining() == [again]  # once, with the new content
    assert stages.armer.armed == 1
    assert stages.armer.dropped == 1
    assert stages.inventory.snapshot() == ["x"]  # the new copy is still held
    stored = stages.store.rows["x"]
    assert (stored.task, stored.rev, stored.firing) == (again, row.rev, True)


def test_armer_dropping_an_old_copy_keeps_the_new_copy_held(stages: Stages) -> None:
    (old,) = _held(stages, task("x", NOW + 100))
    assert stages.store.cancel(["x"]) == [CancelResult.CANCELLED]
    again = task("x", NOW + 5000)
    rev = stages.store.put(again, claimed_by=ME, claim_until_ms=NOW + 10_000)
    new = claim(again, rev)
    assert stages.inventory.admit([new], 0) == [new]

    stages.armer.handle([old], NOW)  # the old copy comes up first, alone

    assert stages.armer.dropped == 1
    assert stages.scheduler.take_remaining() == []
    assert stages.inventory.snapshot() == ["x"]  # still held: renewed, counted in memory
    assert not stages.store.rows["x"].firing
    stages.armer.handle([new], NOW + 4800)
    assert stages.scheduler.take_remaining() == [again]
    assert stages.armer.armed == 1


def test_armer_permanent_store_error_propagates(stages: Stages) -> None:
    a = task("a", NOW)
    claims = _held(stages, a)
    stages.store.fail_next("arm", StoreError("bad"))
    with pytest.raises(StoreError):
        stages.armer.handle(claims, NOW)


def test_armer_thread_arms_due_tasks(stages: Stages) -> None:
    a = task("a", NOW + 150)  # within arm_ahead_ms of the fake now
    later = task("later", NOW + 100_000)
    held_a, held_later = _held(stages, a, later)
    stages.armer.start()
    stages.started.append(stages.armer)
    stages.armer.push_many([held_later, held_a])
    assert wait_until(lambda: len(stages.scheduler) == 1, WAIT_S)
    assert stages.store.arm_calls == [["a"]]
    assert len(stages.armer) == 1


# -- Preloader ---------------------------------------------------------------------------


LEASE = 3000
WINDOW = 1000


def make_preloader(s: Stages, batch_size: int = 100) -> Preloader:
    return Preloader(
        s.clock,
        s.store,
        ME,
        s.inventory,
        s.armer,
        s.scheduler,
        window_ms=WINDOW,
        arm_ahead_ms=200,
        lease_ms=LEASE,
        batch_size=batch_size,
        poll_interval_ms=10,
        on_failure=s.failures,
    )


def test_preloader_claims_due_tasks_armed_to_scheduler_unarmed_to_armer(stages: Stages) -> None:
    for t in [
        task("overdue", NOW - 50),
        task("soon", NOW + 200),  # due by the arm horizon: claimed armed
        task("later", NOW + 201),
        task("edge", NOW + WINDOW),
        task("outside", NOW + WINDOW + 1),
    ]:
        stages.store.put(t)
    stages.store.put(task("armed-orphan", NOW + 900), firing=True)  # armed by a dead instance
    preloader = make_preloader(stages)

    assert preloader.step(NOW) is False  # not a full batch

    call = stages.store.claim_calls[-1]
    assert (call.instance, call.now_ms, call.horizon_ms) == (ME, NOW, NOW + WINDOW)
    assert (call.arm_until_ms, call.lease_until_ms, call.limit) == (NOW + 200, NOW + LEASE, 100)
    assert sorted(ids(stages.scheduler.take_remaining())) == ["armed-orphan", "overdue", "soon"]
    assert sorted(ids(stages.armer.take_remaining())) == ["edge", "later"]
    assert sorted(stages.inventory.snapshot()) == [
        "armed-orphan",
        "edge",
        "later",
        "overdue",
        "soon",
    ]
    assert preloader.claimed == 5
    row = stages.store.rows["later"]
    assert (row.claimed_by, row.claim_until_ms) == (ME, NOW + LEASE)
    assert stages.store.rows["outside"].claimed_by is None


def test_preloader_claims_at_most_the_inventory_room() -> None:
    s = make_stages(capacity=3)
    s.inventory.admit([claim(task("held-1", NOW + 5000)), claim(task("held-2", NOW + 5000))], 0)
    for i in range(5):
        s.store.put(task(f"t{i}", NOW + 300 + i))
    preloader = make_preloader(s)

    assert preloader.step(NOW) is True  # a full batch (of 1): more may be waiting
    assert s.store.claim_calls[-1].limit == 1
    assert ids(s.armer.take_remaining()) == ["t0"]
    assert len(s.inventory) == 3
    assert s.inventory.room() == 0

    assert preloader.step(NOW) is False  # no room: no claim at all
    assert len(s.store.claim_calls) == 1
    assert s.store.rows["t1"].claimed_by is None


def test_preloader_claims_at_most_batch_size(stages: Stages) -> None:
    for i in range(5):
        stages.store.put(task(f"t{i}", NOW + 300 + i))
    preloader = make_preloader(stages, batch_size=2)
    assert preloader.step(NOW) is True
    assert stages.store.claim_calls[-1].limit == 2
    assert preloader.step(NOW) is True
    assert preloader.step(NOW) is False
    assert preloader.claimed == 5
    assert ids(stages.armer.take_remaining()) == ["t0", "t1", "t2", "t3", "t4"]


def test_preloader_does_not_push_a_reclaimed_held_task_twice(stages: Stages) -> None:
    stages.store.put(task("unarmed", NOW + 500))
    stages.store.put(task("armed", NOW + 100))
    preloader = make_preloader(stages)
    preloader.step(NOW)
    assert len(stages.armer) == 1
    assert len(stages.scheduler) == 1
    # The claims lapse (say renewal failed) and nobody else took them: the next
    # claim returns the same tasks, which are already held.
    for row in stages.store.rows.values():
        row.claim_until_ms = 0
    preloader.step(NOW + 1)
    assert len(stages.store.claim_calls) == 2
    assert stages.store.rows["unarmed"].claim_until_ms == NOW + 1 + LEASE  # claimed again
    assert len(stages.armer) == 1
    assert len(stages.scheduler) == 1
    assert len(stages.inventory) == 2
    assert preloader.claimed == 2


def test_preloader_renews_held_claims_every_third_of_the_lease(stages: Stages) -> None:
    stages.store.put(task("a", NOW + 500))
    stages.store.put(task("b", NOW + 600))
    preloader = make_preloader(stages)
    preloader.step(NOW)
    assert stages.store.renew_calls == []  # nothing was held yet

    preloader.step(NOW + LEASE // 3 - 1)
    assert stages.store.renew_calls == []

    preloader.step(NOW + LEASE // 3)
    assert len(stages.store.renew_calls) == 1
    renew = stages.store.renew_calls[0]
    assert renew.instance == ME
    assert sorted(renew.ids) == ["a", "b"]
    assert renew.lease_until_ms == NOW + LEASE // 3 + LEASE
    assert stages.store.rows["a"].claim_until_ms == NOW + LEASE // 3 + LEASE

    preloader.step(NOW + 2 * LEASE // 3 - 1)
    assert len(stages.store.renew_calls) == 1
    held_rev = stages.inventory.rev_of("a")
    assert held_rev is not None
    stages.inventory.forget([("a", held_rev)])  # fired and deleted: no longer renewed
    preloader.step(NOW + 2 * LEASE // 3)
    assert len(stages.store.renew_calls) == 2
    assert stages.store.renew_calls[1].ids == ("b",)


def test_preloader_transient_error_propagates_and_claims_nothing(stages: Stages) -> None:
    stages.store.put(task("a", NOW + 500))
    preloader = make_preloader(stages)
    stages.store.fail_next("claim", StoreUnavailable("down"))
    with pytest.raises(StoreUnavailable):
        preloader.step(NOW)
    assert len(stages.inventory) == 0
    assert stages.inventory.room() == 100  # the failed claim's reservation was released
    assert preloader.step(NOW) is False
    assert stages.inventory.snapshot() == ["a"]


def test_preloader_failed_renewal_is_retried_on_the_next_step(stages: Stages) -> None:
    stages.store.put(task("a", NOW + 500))
    preloader = make_preloader(stages)
    preloader.step(NOW)
    stages.store.fail_next("renew_claims", StoreUnavailable("down"))
    with pytest.raises(StoreUnavailable):
        preloader.step(NOW + LEASE // 3)
    preloader.step(NOW + LEASE // 3 + 1)  # still due: renews now
    assert [r.ids for r in stages.store.renew_calls] == [("a",)]


def test_preloader_thread_retries_after_a_transient_error(stages: Stages) -> None:
    stages.store.put(task("a", NOW + 100))
    stages.store.put(task("b", NOW + 500))
    stages.store.fail_next("claim", StoreUnavailable("down"), StoreUnavailable("still down"))
    preloader = make_preloader(stages)
    preloader.start()
    stages.started.append(preloader)
    assert wait_until(lambda: len(stages.inventory) == 2, WAIT_S)
    assert preloader.transient_errors == 2
    assert len(stages.scheduler) + len(stages.armer) == 2


# -- Inventory ---------------------------------------------------------------------------


def test_inventory_admit_forget_room() -> None:
    inventory = Inventory(3)
    assert inventory.room() == 3
    assert ids(inventory.admit([claim(task("a", 1)), claim(task("b", 2))], 0)) == ["a", "b"]
    assert len(inventory) == 2
    assert inventory.room() == 1
    # b already held (same revision)
    assert ids(inventory.admit([claim(task("b", 2)), claim(task("c", 3))], 0)) == ["c"]
    assert inventory.room() == 0
    assert inventory.reserve(5) == 0
    inventory.forget([("a", 1), ("unknown", 1)])
    assert sorted(inventory.snapshot()) == ["b", "c"]
    assert inventory.room() == 1
    assert inventory.reserve(5) == 1
    assert inventory.reserve(0) == 0


def test_inventory_room_never_negative() -> None:
    inventory = Inventory(1)
    inventory.admit([claim(task("a", 1)), claim(task("b", 2))], 0)  # admit does not refuse
    assert len(inventory) == 2
    assert inventory.room() == 0
    assert inventory.reserve(3) == 0


# -- Writes.plan / adopt / unplan: room for rows claimed on insert ----------------------


def make_engine(store: FakeStore, capacity: int, clock: FakeClock | None = None) -> Engine:
    settings = Settings(
        instance_id=ME,
        max_tasks_in_memory=capacity,
        preload_window_ms=WINDOW,
        arm_ahead_ms=200,
        claim_lease_ms=LEASE,
        switch_interval_us=0,  # leave the interpreter's switch interval alone
        shutdown_timeout_s=1,
    )
    return Engine(
        engine_config(settings),
        store,
        clock or FakeClock(NOW),
        lambda buffer, sink, retry, fail: FakePublisher(),
    )


@dataclass
class Running:
    engine: Engine
    store: FakeStore
    clock: FakeClock


@pytest.fixture
def running() -> Iterator[Running]:
    """A running engine (capacity 5) whose preloader is stopped, so that only
    plan/adopt/unplan take inventory room."""
    store = FakeStore()
    clock = FakeClock(NOW)
    eng = make_engine(store, capacity=5, clock=clock)
    eng.start()
    try:
        eng.preloader.stop()
        assert eng.preloader.join(WAIT_S)
        assert eng.running
        assert eng.inventory.room() == 5
        yield Running(eng, store, clock)
    finally:
        # Past every due time, so that stopping does not wait for the fake
        # clock to reach a task armed on insert.
        clock.advance(10 * LEASE)
        eng.stop()
    assert eng.failure is None


def _modes(rows: list[NewRow]) -> list[ClaimMode]:
    return [row.claim for row in rows]


def test_engine_plan_before_start_claims_nothing_and_reserves_nothing() -> None:
    eng = make_engine(FakeStore(), capacity=5)
    rows = eng.writes.plan_inserts([task("a", NOW + 100), task("b", NOW + 500)])
    assert _modes(rows) == [ClaimMode.NONE, ClaimMode.NONE]
    assert eng.inventory.room() == 5


def test_engine_plan_reserves_room_so_concurrent_callers_cannot_overshoot(
    running: Running,
) -> None:
    engine, store = running.engine, running.store
    first = engine.writes.plan_inserts(
        [task("s0", NOW + 500), task("far", NOW + WINDOW + 1), task("s1", NOW + 100)]
    )
    assert _modes(first) == [ClaimMode.CLAIM, ClaimMode.NONE, ClaimMode.ARM]
    assert engine.inventory.room() == 3  # reserved, though nothing is held yet
    assert len(engine.inventory) == 0
    # Another caller planning before the first one committed gets what is left.
    second = engine.writes.plan_inserts([task(f"o{i}", NOW + 300) for i in range(5)])
    assert _modes(second) == [ClaimMode.CLAIM] * 3 + [ClaimMode.NONE] * 2
    assert engine.inventory.room() == 0
    assert _modes(engine.writes.plan_inserts([task("late", NOW + 300)])) == [ClaimMode.NONE]

    for rows in (first, second):
        outcomes = store.insert(rows, ME, NOW + LEASE, atomic=False)
        engine.writes.adopt_inserts(rows, outcomes)

    assert len(engine.inventory) == 5  # exactly the capacity, not more
    assert engine.inventory.room() == 0
    assert sorted(engine.inventory.snapshot()) == ["o0", "o1", "o2", "s0", "s1"]
    assert len(engine.scheduler) == 1  # s1: armed on insert
    assert len(engine.armer) == 4


def test_engine_unplan_releases_the_room_of_a_failed_insert(running: Running) -> None:
    engine = running.engine
    rows = engine.writes.plan_inserts([task("a", NOW + 500), task("b", NOW + 100)])
    assert engine.inventory.room() == 3
    engine.writes.unplan(rows)
    assert engine.inventory.room() == 5
    assert len(engine.inventory) == 0
    assert len(engine.armer) == 0
    assert len(engine.scheduler) == 0


def test_engine_adopt_holds_only_created_rows_and_settles_the_rest(running: Running) -> None:
    engine, store = running.engine, running.store
    store.put(task("same", NOW + 500))
    store.put(task("other", NOW + 500))
    rows = engine.writes.plan_inserts(
        [
            task("same", NOW + 500),  # exists with this content: a retry
            task("other", NOW + 500, b"changed"),  # exists with other content
            task("new", NOW + 500),
        ]
    )
    assert engine.inventory.room() == 2
    outcomes = store.insert(rows, ME, NOW + LEASE, atomic=False)
    assert outcomes == [InsertOutcome.EXISTS, InsertOutcome.CONFLICT, InsertOutcome.CREATED]

    engine.writes.adopt_inserts(rows, outcomes)

    assert engine.inventory.snapshot() == ["new"]
    assert engine.inventory.room() == 4  # the other two reservations came back
    assert len(engine.armer) == 1
    stored = store.row("new")
    assert stored is not None
    assert stored.rev == rows[2].rev


# -- SendBuffer --------------------------------------------------------------------------


def test_send_buffer_fifo_with_limit_and_put_callback() -> None:
    buffer = SendBuffer(10)
    puts: list[int] = []
    buffer.on_put = lambda: puts.append(len(buffer))
    buffer.put_many([task("a", 1), task("b", 2)])
    buffer.put_many([task("c", 3)])
    assert puts == [2, 3]
    assert buffer.room() == 7
    assert ids(buffer.take(2)) == ["a", "b"]
    assert ids(buffer.take(5)) == ["c"]
    assert buffer.take(5) == []
    assert len(buffer) == 0


def test_send_buffer_requeue_front_keeps_order_ahead_of_the_rest() -> None:
    buffer = SendBuffer(10)
    buffer.put_many([task("x", 5), task("y", 6)])
    buffer.requeue_front([task("r1", 1), task("r2", 2)])
    assert ids(buffer.take(10)) == ["r1", "r2", "x", "y"]


def test_send_buffer_room_callback_only_when_a_full_buffer_gets_room() -> None:
    buffer = SendBuffer(2)
    rooms: list[int] = []
    buffer.on_room = lambda: rooms.append(buffer.room())
    buffer.put_many([task("a", 1)])
    buffer.take(1)
    assert rooms == []  # was not full
    buffer.put_many([task("a", 1), task("b", 2)])
    assert buffer.room() == 0
    buffer.take(1)
    assert rooms == [1]
    buffer.take(1)
    assert rooms == [1]  # not full before this take
    buffer.take(1)
    assert rooms == [1]  # nothing taken


def test_send_buffer_over_capacity_after_requeue() -> None:
    buffer = SendBuffer(2)
    rooms: list[int] = []
    buffer.on_room = lambda: rooms.append(1)
    buffer.put_many([task("a", 1), task("b", 2)])
    buffer.requeue_front([task("r", 0)])
    assert len(buffer) == 3
    assert buffer.room() == 0
    assert ids(buffer.take(1)) == ["r"]
    assert rooms == [1]


# -- Confirmer ---------------------------------------------------------------------------


def _firing(s: Stages, names: list[str]) -> list[Task]:
    """Armed rows held by this instance; returns their tasks as the publisher
    has them (with the revision)."""
    claims = []
    for n in names:
        t = task(n, NOW)
        rev = s.store.put(t, claimed_by=ME, claim_until_ms=NOW + 10_000, firing=True)
        claims.append(claim(replace(t, rev=rev), rev, armed=True))
    s.inventory.admit(claims, 0)
    return [c.task for c in claims]


def _confirmer(s: Stages, batch_size: int, max_delay_ms: int) -> Confirmer:
    return Confirmer(s.store, s.inventory, ME, batch_size, max_delay_ms, s.failures)


def test_confirmer_deletes_in_batches_then_discards(stages: Stages) -> None:
    names = [f"t{i}" for i in range(7)]
    fired = _firing(stages, names)
    stages.inventory.admit([claim(task("unrelated", NOW))], 0)
    confirmer = _confirmer(stages, batch_size=3, max_delay_ms=20)
    confirmer.start()
    stages.started.append(confirmer)

    confirmer.confirmed(fired)

    assert wait_until(lambda: stages.store.deleted_ids() == names, WAIT_S)
    assert stages.store.delete_calls == [names[0:3], names[3:6], names[6:]]
    assert wait_until(lambda: stages.inventory.snapshot() == ["unrelated"], WAIT_S)
    assert confirmer.deleted == 7
    assert stages.store.ids() == set()
    assert confirmer.pending() == 0


def test_confirmer_retries_a_transient_delete_and_discards_only_after_it(stages: Stages) -> None:
    fired = _firing(stages, ["a", "b"])
    stages.store.fail_next("delete_fired", StoreUnavailable("down"))
    confirmer = _confirmer(stages, batch_size=2, max_delay_ms=0)
    confirmer.start()
    stages.started.append(confirmer)
    confirmer.confirmed(fired)
    assert wait_until(lambda: stages.store.deleted_ids() == ["a", "b"], WAIT_S)
    assert wait_until(lambda: len(stages.inventory) == 0, WAIT_S)
    assert confirmer.transient_errors == 1
    assert stages.store.delete_calls == [["a", "b"]]  # the failed attempt wrote nothing


def test_confirmer_stop_flushes_a_partial_batch_without_waiting_its_delay(
    stages: Stages,
) -> None:
    fired = _firing(stages, ["a", "b"])
    confirmer = _confirmer(stages, batch_size=100, max_delay_ms=600_000)
    confirmer.start()
    try:
        confirmer.confirmed(fired)
        confirmer.stop()
        assert confirmer.join(WAIT_S)  # did not sit out the ten-minute delay
    finally:
        confirmer.stop()
        confirmer.join(WAIT_S)
    assert stages.store.delete_calls == [["a", "b"]]
    assert len(stages.inventory) == 0


def test_confirmer_gives_up_at_its_deadline_when_the_store_stays_down(stages: Stages) -> None:
    fired = _firing(stages, ["a"])
    stages.store.fail_next("delete_fired", *[StoreUnavailable("down")] * 1000)
    confirmer = _confirmer(stages, batch_size=1, max_delay_ms=0)
    confirmer.start()
    try:
        confirmer.confirmed(fired)
        assert wait_until(lambda: confirmer.transient_errors >= 1, WAIT_S)
        confirmer.stop(time.monotonic() + 0.2)
        assert confirmer.join(WAIT_S)
    finally:
        confirmer.stop()
        confirmer.join(WAIT_S)
    assert stages.store.ids() == {"a"}  # the row stays: it fires again later
    assert stages.inventory.snapshot() == ["a"]
    assert stages.failures.seen == []


# -- the fake store itself (so the tests above can trust it) --------------------------------


def test_fake_store_follows_the_store_contract() -> None:
    store = FakeStore()
    a, b = task("a", NOW + 100), task("b", NOW + 5000)
    rows = [NewRow(a, ClaimMode.ARM), NewRow(b), NewRow(a)]
    assert store.insert(rows, ME, NOW + LEASE, atomic=False) == [
        InsertOutcome.CREATED,
        InsertOutcome.CREATED,
        InsertOutcome.EXISTS,
    ]
    with pytest.raises(ConflictError):
        store.insert([NewRow(task("c", NOW)), NewRow(task("b", NOW))], ME, 0, atomic=True)
    assert store.ids() == {"a", "b"}  # the atomic insert wrote nothing
    info = store.get("a")
    assert info is not None
    assert info.state is TaskState.FIRING
    assert store.cancel(["a", "b", "b", "zz"]) == [
        CancelResult.TOO_LATE,
        CancelResult.CANCELLED,
        CancelResult.NOT_FOUND,
        CancelResult.NOT_FOUND,
    ]
    assert store.delete_fired([("a", rows[0].rev)]) == 1
    assert store.get("a") is None


def test_fake_store_keeps_a_revision_per_row_and_arms_by_it() -> None:
    store = FakeStore()
    a = task("a", NOW + 5000)
    row = NewRow(a, ClaimMode.CLAIM)
    assert store.insert([row], ME, NOW + LEASE, atomic=False) == [InsertOutcome.CREATED]
    stored = store.row("a")
    assert stored is not None
    assert (stored.rev, stored.claimed_by, stored.firing) == (row.rev, ME, False)
    # Same id and content inserted again: nothing written, the revision stays.
    assert store.insert([NewRow(a, ClaimMode.CLAIM)], ME, NOW, atomic=False) == [
        InsertOutcome.EXISTS
    ]
    assert store.rows["a"].rev == row.rev

    def firing() -> bool:
        stored = store.row("a")
        return stored is not None and stored.firing

    stale = claim(a, row.rev + 1)
    current = claim(a, row.rev)
    assert store.arm(ME, [stale]) == []  # another revision: not armed
    assert store.arm("other", [current]) == []  # not claimed by the caller
    assert not firing()
    assert store.arm(ME, [stale, current]) == [current]
    assert firing()
    assert store.arm(ME, [current]) == [current]  # already armed at that revision
    assert store.arm(ME, [stale]) == []
    assert store.arm_calls == [["a"], ["a"], ["a", "a"], ["a"], ["a"]]

    # claim() hands out each row's revision, like SELECT_CLAIMABLE.
    b_rev = store.put(task("b", NOW + 100))
    c_rev = store.put(task("c", NOW + 900), rev=7)
    assert c_rev == 7
    assert store.claim(ME, NOW, NOW + 1000, NOW + 200, NOW + LEASE, 10) == [
        Claim(task("b", NOW + 100), b_rev, True),
        Claim(task("c", NOW + 900), 7, False),
    ]


def test_engine_reschedule_holds_moved_rows_like_new_ones(running: Running) -> None:
    engine, store = running.engine, running.store
    store.put(task("near", NOW + 50_000))
    store.put(task("soon", NOW + 40_000))
    moves = engine.writes.plan_moves([("near", NOW + 500), ("soon", NOW + 100)])
    assert [m.claim for m in moves] == [ClaimMode.CLAIM, ClaimMode.ARM]
    assert engine.inventory.room() == 3
    engine.writes.adopt_moves(moves, store.reschedule(moves, ME, NOW + LEASE))
    assert sorted(engine.inventory.snapshot()) == ["near", "soon"]
    assert len(engine.scheduler) == 1 and len(engine.armer) == 1
    row = store.row("soon")
    assert row is not None and row.firing and row.rev == moves[1].rev


def test_engine_reschedule_of_one_id_twice_in_a_batch_holds_only_the_last_move(
    running: Running,
) -> None:
    engine, store = running.engine, running.store
    store.put(task("twice", NOW + 50_000))
    moves = engine.writes.plan_moves([("twice", NOW + 100), ("twice", NOW + 150)])
    assert [m.claim for m in moves] == [ClaimMode.ARM, ClaimMode.ARM]
    outcomes = store.reschedule(moves, ME, NOW + LEASE)
    assert [o.task.due_ms if o.task else None for o in outcomes] == [NOW + 150] * 2
    engine.writes.adopt_moves(moves, outcomes)
    # One copy, at the revision the row has: it fires once, at the last time.
    assert len(engine.scheduler) == 1
    assert engine.inventory.room() == 4  # both reservations settled
    row = store.row("twice")
    assert row is not None and row.rev == moves[1].rev and row.task.due_ms == NOW + 150


def test_engine_reschedule_refused_rows_take_no_room(running: Running) -> None:
    engine, store = running.engine, running.store
    store.put(
        task("armed", NOW + 1000), claimed_by="other", claim_until_ms=NOW + LEASE, firing=True
    )
    moves = engine.writes.plan_moves([("armed", NOW + 300), ("gone", NOW + 300)])
    outcomes = store.reschedule(moves, ME, NOW + LEASE)
    assert [o.result for o in outcomes] == [RescheduleResult.TOO_LATE, RescheduleResult.NOT_FOUND]
    engine.writes.adopt_moves(moves, outcomes)
    assert len(engine.inventory) == 0 and engine.inventory.room() == 5
