"""What ``get`` and the listing say of a row a rate limit postponed (R8p,
docs/design/flow-control.md section 3a), against every store: ``throttled``
while it waits unarmed in the database, and ``fire_ms`` (when it goes) for it
and for the retry of a failed delivery; the flag is the postponement's own
write (``POSTPONE``), and every other write of the row's time clears it:
R8's deferral, a reschedule, a replace (on_conflict), a series' next
occurrence and its pause."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from support.stores import SHARD_COUNT

from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.meta import make_meta
from triggerhook.domain.recurrence import make_recurrence
from triggerhook.domain.series import PARKED_MS
from triggerhook.domain.task import (
    InsertOutcome,
    OnConflict,
    RescheduleResult,
    SeriesResult,
    Task,
    TaskInfo,
    TaskState,
)
from triggerhook.interfaces import DeferOutcome, Deferral, Lease, Move, NewRow, TaskStore

ME = "me"
LEASE = 60_000
SCHEDULED, FIRING = TaskState.SCHEDULED, TaskState.FIRING


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def leases(store: TaskStore) -> list[Lease]:
    got = [a.lease for a in store.acquire(ME, SHARD_COUNT, LEASE)]
    assert len(got) == SHARD_COUNT
    return got


def arm(store: TaskStore, held: Iterable[Lease], horizon_ms: int) -> list[Task]:
    return store.arm(ME, list(held), horizon_ms, 1000).tasks


def defer(store: TaskStore, copy: Task, at_ms: int, postponed: bool) -> None:
    assert store.defer(ME, [Deferral(copy, at_ms, postponed=postponed)]) == [DeferOutcome.DEFERRED]


def info(store: TaskStore, task_id: str) -> TaskInfo:
    found = store.get(task_id)
    assert found is not None
    return found


def wait(store: TaskStore, task_id: str) -> tuple[TaskState, bool, int | None]:
    """What ``get`` says of ``task_id``'s wait: (state, throttled, fire_ms)."""
    found = info(store, task_id)
    return found.state, found.throttled, found.fire_ms


def postponed(store: TaskStore, task: Task, at_ms: int) -> list[Lease]:
    """``task`` stored, armed, and its copy postponed to ``at_ms`` (R8p); the leases."""
    store.insert([NewRow(task)], atomic=True)
    held = leases(store)
    [copy] = arm(store, held, task.due_ms + 1000)
    defer(store, copy, at_ms, postponed=True)
    return held


def test_a_new_row_is_not_throttled_and_fires_at_its_due_time(store: TaskStore, now: int) -> None:
    a = Task("a", now + 60_000, "rk", b"p")
    store.insert([NewRow(a)], atomic=True)
    assert info(store, "a") == TaskInfo(a, SCHEDULED, throttled=False, fire_ms=None)


def test_a_postponed_row_reads_back_throttled_with_when_it_goes(store: TaskStore, now: int) -> None:
    a = Task("a", now + 100, "rk", b"p", meta=make_meta(tags=["slow"]))
    held = postponed(store, a, now + 9000)
    assert info(store, "a") == TaskInfo(a, SCHEDULED, throttled=True, fire_ms=now + 9000)
    # The listing reads the same (by every source: all, a tag, a routing key).
    for where in (TaskFilter(), TaskFilter(tag="slow"), TaskFilter(routing_key="rk")):
        assert store.list_tasks(where, None, 10) == [info(store, "a")]
    # Armed again as its instant comes: being published, no longer waiting.
    assert arm(store, held, now + 8999) == []
    assert [t.id for t in arm(store, held, now + 9000)] == ["a"]
    assert wait(store, "a") == (FIRING, False, now + 9000)


def test_a_deferred_row_is_not_throttled_and_says_when_it_is_tried_again(
    store: TaskStore, now: int
) -> None:
    store.insert([NewRow(Task("a", now + 100, "rk"))], atomic=True)
    held = leases(store)
    [copy] = arm(store, held, now + 1000)
    defer(store, copy, now + 5000, postponed=False)  # a failed delivery (R8)
    assert wait(store, "a") == (SCHEDULED, False, now + 5000)
    # Postponed after that (attempts kept), then failed again: the flag goes.
    [again] = arm(store, held, now + 5000)
    defer(store, again, now + 9000, postponed=True)
    assert wait(store, "a") == (SCHEDULED, True, now + 9000)
    [third] = arm(store, held, now + 9000)
    assert third.attempts == 1
    defer(store, third, now + 12_000, postponed=False)
    assert wait(store, "a") == (SCHEDULED, False, now + 12_000)


def test_postponed_and_failed_rows_of_one_call_read_back_apart(store: TaskStore, now: int) -> None:
    store.insert([NewRow(Task(name, now, "rk")) for name in ("p", "f")], atomic=True)
    copies = {t.id: t for t in arm(store, leases(store), now + 1000)}
    asked = [Deferral(copies["p"], now + 5000, postponed=True), Deferral(copies["f"], now + 6000)]
    assert store.defer(ME, asked) == [DeferOutcome.DEFERRED] * 2
    assert wait(store, "p") == (SCHEDULED, True, now + 5000)
    assert wait(store, "f") == (SCHEDULED, False, now + 6000)


def test_a_reschedule_ends_the_wait(store: TaskStore, now: int) -> None:
    a = Task("a", now + 100, "rk", b"p")
    postponed(store, a, now + 9000)
    [moved] = store.reschedule([Move("a", now + 60_000)])
    assert moved.result is RescheduleResult.RESCHEDULED
    assert info(store, "a") == TaskInfo(a.replace(due_ms=now + 60_000), SCHEDULED)


def test_a_replace_ends_the_wait(store: TaskStore, now: int) -> None:
    postponed(store, Task("a", now + 100, "rk", b"old"), now + 9000)
    new = Task("a", now + 30_000, "rk", b"new")
    [answer] = store.insert([NewRow(new, on_conflict=OnConflict.REPLACE)], atomic=True)
    assert answer.outcome is InsertOutcome.REPLACED
    assert info(store, "a") == TaskInfo(new, SCHEDULED)
    # Kept or found the same, it still waits: nothing was written.
    for rule in (OnConflict.KEEP, OnConflict.ERROR):
        store.insert([NewRow(new.replace(payload=b"other"), on_conflict=rule)], atomic=False)
    store.insert([NewRow(new)], atomic=True)  # exists
    assert wait(store, "a") == (SCHEDULED, False, None)


def series(name: str, due_ms: int) -> Task:
    return Task(name, due_ms, "rk", b"p", meta=make_meta(recur=make_recurrence(every=1000)))


def test_a_series_next_occurrence_is_not_throttled(store: TaskStore, now: int) -> None:
    due = now + 100
    held = postponed(store, series("s", due), now + 9000)
    assert wait(store, "s") == (SCHEDULED, True, now + 9000)
    [copy] = arm(store, held, now + 9000)
    assert store.advance([copy], now + 9010) == 1  # confirmed: the next occurrence
    after = info(store, "s")
    assert (after.task.due_ms, after.state, after.throttled, after.fire_ms) == (
        due + 9000,  # the first due after the confirm (catch_up one)
        SCHEDULED,
        False,
        None,
    )


def test_a_paused_series_is_not_throttled(store: TaskStore, now: int) -> None:
    postponed(store, series("s", now + 100), now + 9000)
    assert store.pause(["s"]) == [SeriesResult.PAUSED]
    assert wait(store, "s") == (SCHEDULED, False, None)
    assert info(store, "s").task.due_ms == PARKED_MS
