"""Undeliverable events: the policy, the dead-letter headers, and deferral
through the confirmer (fake store, no broker)."""

from __future__ import annotations

import dataclasses

import pika
import pika.frame
import pika.spec
import pytest
from support.fakes import FakeStore
from support.waiting import wait_until

from triggerhook.amqp.frames import dead_letter_headers, encode_event
from triggerhook.domain.delivery import DeadLetter, DeliveryPolicy, RetryLater
from triggerhook.domain.task import Task
from triggerhook.engine.confirmer import Confirmer
from triggerhook.engine.inventory import Inventory
from triggerhook.interfaces import Claim

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
    extra = dead_letter_headers("returned 312 NO_ROUTE; é", 4, "nobody.home")
    ours = encode_event(3, "ex", "triggerhook.dead", b"body", "t-1", 5, 2**31, 9, 4096, extra)
    headers = {
        "x-due-ms": 5,
        "x-fired-ms": 2**31,
        "x-rev": 9,
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


# -- deferral: the row goes back unarmed, unclaimed, out of memory --------------------------


@pytest.fixture
def held() -> tuple[FakeStore, Inventory, int]:
    store = FakeStore()
    inventory = Inventory(10)
    rev = store.put(_task(), claimed_by=ME, claim_until_ms=NOW + 30_000, firing=True)
    inventory.admit([Claim(_task(), rev, armed=True)], 0)
    return store, inventory, rev


def _run_confirmer(store: FakeStore, inventory: Inventory, *tasks: tuple[Task, int]) -> Confirmer:
    confirmer = Confirmer(store, inventory, ME, 100, 0, lambda name, exc: None)
    confirmer.start()
    for task, not_before_ms in tasks:
        confirmer.defer(task, not_before_ms)
    return confirmer


def test_a_deferred_row_is_disarmed_unclaimed_and_claimable_only_after_its_back_off(
    held: tuple[FakeStore, Inventory, int],
) -> None:
    store, inventory, rev = held
    confirmer = _run_confirmer(store, inventory, (_task(), NOW + 400))
    try:
        assert wait_until(lambda: confirmer.deferred == 1, 5)
    finally:
        confirmer.stop()
        confirmer.join(5)
    row = store.row("t")
    assert row is not None
    assert (row.firing, row.claimed_by, row.claim_until_ms) == (False, None, NOW + 400)
    assert row.rev != rev  # a copy held anywhere at the old revision cannot arm
    assert row.task.attempts == 1
    assert len(inventory) == 0  # it holds no room while it waits
    # Not claimable before its back-off ends; then it comes back armed, attempts kept.
    assert store.claim("other", NOW + 399, NOW + 5000, NOW + 600, NOW + 30_000, 10) == []
    [again] = store.claim("other", NOW + 401, NOW + 5000, NOW + 600, NOW + 30_000, 10)
    assert again.armed and again.task.attempts == 1


def test_a_row_no_longer_held_is_not_deferred(held: tuple[FakeStore, Inventory, int]) -> None:
    store, inventory, rev = held
    inventory.forget([("t", rev)])  # e.g. dropped: another instance took it over
    store.put(_task(), claimed_by="other", claim_until_ms=NOW + 30_000, firing=True, rev=rev)
    confirmer = _run_confirmer(store, inventory, (_task(), NOW + 400))
    confirmer.stop()  # settles what it was handed before it ends
    assert confirmer.join(5)
    row = store.row("t")
    assert row is not None
    assert (row.firing, row.claimed_by, row.rev) == (True, "other", rev)
    assert confirmer.deferred == 0
