"""Undeliverable events: the policy, the dead-letter headers, and deferral
through the confirmer (fake store, no broker)."""

from __future__ import annotations

import dataclasses

import pika
import pika.frame
import pika.spec
import pytest
from support.fakes import FakeClock, FakeStore
from support.waiting import wait_until

from triggerhook.amqp.frames import dead_letter_headers, encode_event
from triggerhook.domain.delivery import DeadLetter, DeliveryPolicy, RetryLater
from triggerhook.domain.task import Task
from triggerhook.engine.confirmer import Confirmer
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.interfaces import Lease, NewRow

NOW = 1_700_000_000_000
ME = "me"
POLICY = DeliveryPolicy(max_attempts=4, max_age_ms=60_000, retry_max_ms=500)


def _task(attempts: int = 0, due_ms: int = NOW) -> Task:
    return Task("t", due_ms, "nobody.home", b"p", attempts)


# -- the policy -------------------------------------------------------------------


def test_failures_back_off_exponentially_up_to_the_cap_then_dead_letter() -> None:
    decisions = [
        POLICY.after_failure(_task(attempts), "returned 312 NO_ROUTE", NOW, was_dead=False)
        for attempts in range(4)
    ]
    assert decisions[:3] == [RetryLater(100), RetryLater(200), RetryLater(400)]
    assert isinstance(decisions[3], DeadLetter)
    assert "returned 312 NO_ROUTE" in decisions[3].reason
    assert "4 attempts" in decisions[3].reason
    assert POLICY.after_failure(_task(9), "x", NOW, was_dead=False) == DeadLetter(
        "x; not delivered after 10 attempts"
    )
    assert DeliveryPolicy(50, 0, 500).retry_delay_ms(30) == 500  # capped, no overflow


def test_a_failure_no_retry_helps_is_dead_lettered_at_once_but_a_dead_letter_never() -> None:
    # A webhook's 400 in dev mode: the same answer on every retry.
    refused = POLICY.after_failure(_task(0), "webhook answered 400", NOW, False, retry=False)
    assert refused == DeadLetter("webhook answered 400; not retried")
    assert POLICY.after_failure(_task(0), "x", NOW, True, retry=False) == RetryLater(500)


def test_an_event_too_long_past_due_is_dead_lettered_at_its_next_failure() -> None:
    late = POLICY.after_failure(_task(0), "nacked", NOW + 60_000, was_dead=False)
    assert isinstance(late, DeadLetter)
    assert "60000 ms after its due time" in late.reason
    assert POLICY.after_failure(_task(0), "nacked", NOW + 59_999, was_dead=False) == RetryLater(100)
    no_age_limit = dataclasses.replace(POLICY, max_age_ms=0)
    assert no_age_limit.after_failure(_task(0), "n", NOW + 10**9, False) == RetryLater(100)


def test_a_failed_dead_letter_waits_the_longest_back_off_and_is_never_dropped() -> None:
    assert POLICY.after_failure(_task(7), "returned", NOW + 10**9, was_dead=True) == RetryLater(500)


def test_exhausted_tasks_go_straight_to_the_dead_letter_key() -> None:
    assert not POLICY.exhausted(_task(3))
    assert POLICY.exhausted(_task(4))


def test_attempts_are_not_part_of_a_tasks_content() -> None:
    # Scheduling the same content again is a safe retry, whatever failed meanwhile.
    assert _task(0) == _task(3)


# -- the dead letter on the wire ----------------------------------------------------


def test_dead_letter_frames_match_pika() -> None:
    extra = dead_letter_headers("returned 312 NO_ROUTE; é", 4, "nobody.home", "undeliverable")
    ours = encode_event(3, "ex", "triggerhook.dead", b"body", "t-1", 5, 2**31, 9, 4096, extra)
    headers = {
        "x-due-ms": 5,
        "x-fired-ms": 2**31,
        "x-rev": 9,
        "x-triggerhook-dead-cause": "undeliverable",
        "x-triggerhook-dead-reason": "returned 312 NO_ROUTE; é",
        "x-triggerhook-attempts": 4,
        "x-triggerhook-routing-key": "nobody.home",
    }
    method = pika.spec.Basic.Publish(exchange="ex", routing_key="triggerhook.dead", mandatory=True)
    props = pika.spec.BasicProperties(
        message_id="t-1", delivery_mode=2, timestamp=2**31 // 1000, headers=headers
    )
    theirs = [
        pika.frame.Method(3, method),
        pika.frame.Header(3, 4, props),
        pika.frame.Body(3, b"body"),
    ]
    assert ours == b"".join(bytes(f.marshal()) for f in theirs)


# -- deferral: the row goes back unarmed, out of memory (R8) ---------------------------------


@pytest.fixture
def held() -> tuple[FakeStore, Inventory, Task, Scheduler]:
    """Task "t" armed by this instance (its copy held), and the scheduler."""
    clock = FakeClock(NOW)
    store = FakeStore(now_ms=clock.now_ms)
    store.insert([NewRow(_task())], atomic=False)
    store.acquire(ME, store.shard_count(), 30_000)
    leases = [Lease(s, row.epoch) for s, row in enumerate(store.shards) if row.owner == ME]
    [copy] = store.arm(ME, leases, NOW, 10).tasks  # the watermark: (NOW, '~')
    inventory = Inventory(10)
    inventory.admit([copy], 0)
    shards = ShardTable(clock, 0)
    scheduler = Scheduler(clock, SendBuffer(10), shards, inventory, 10, _ignore)
    return store, inventory, copy, scheduler


def _ignore(_name: str, _exc: BaseException) -> None:
    raise AssertionError("no thread may fail here")


def _run_confirmer(
    held: tuple[FakeStore, Inventory, Task, Scheduler], *tasks: tuple[Task, int]
) -> Confirmer:
    store, inventory, _copy, scheduler = held
    confirmer = Confirmer(store, inventory, scheduler, ME, 100, 0, _ignore, clock=FakeClock(NOW))
    confirmer.start()
    for task, not_before_ms in tasks:
        confirmer.defer(task, not_before_ms)
    return confirmer


def test_a_deferred_row_is_unarmed_and_armed_again_only_after_its_back_off(
    held: tuple[FakeStore, Inventory, Task, Scheduler],
) -> None:
    store, inventory, copy, _scheduler = held
    confirmer = _run_confirmer(held, (copy, NOW + 400))
    try:
        assert wait_until(lambda: confirmer.deferred == 1, 5)
    finally:
        confirmer.stop()
        confirmer.join(5)
    row = store.row("t")
    assert row is not None
    assert not store.is_armed("t")  # cancellable while it waits
    assert row.fire_ms == NOW + 400
    assert row.rev != copy.rev  # a copy held anywhere at the old revision is stale
    assert row.task.attempts == 1
    assert len(inventory) == 0  # it holds no room while it waits
    # Not armed before its back-off ends; then it comes back, attempts kept.
    leases = [Lease(s, r.epoch) for s, r in enumerate(store.shards) if r.owner == ME]
    assert store.arm(ME, leases, NOW + 399, 10).tasks == []
    [again] = store.arm(ME, leases, NOW + 400, 10).tasks
    assert (again.id, again.attempts) == ("t", 1)
    assert (again.due_ms, again.fire_at_ms) == (NOW, NOW + 400)  # fired at the retry time


def test_a_row_whose_shard_was_lost_is_not_deferred(
    held: tuple[FakeStore, Inventory, Task, Scheduler],
) -> None:
    store, inventory, copy, _scheduler = held
    shard = store.shard_of("t")
    store.release(ME, [Lease(shard, copy.epoch)])
    [taken] = store.acquire("other", 1, 30_000)  # a newer epoch: ours is stale
    assert taken.lease.shard == shard
    confirmer = _run_confirmer(held, (copy, NOW + 400))
    confirmer.stop()  # settles what it was handed before it ends
    assert confirmer.join(5)
    row = store.row("t")
    assert row is not None
    assert (row.rev, store.is_armed("t")) == (copy.rev, True)  # left as it was
    assert confirmer.deferred == 0
    assert len(inventory) == 0  # the stale copy is dropped
