"""A create of an id that exists, by its ``on_conflict`` (R6, R6r;
docs/design/flow-control.md, section 1), against every store: error, keep,
replace, replace too late, and a batch that applies in order."""

from __future__ import annotations

import dataclasses

import pytest
from support.stores import SHARD_COUNT, outcomes

from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.meta import make_meta
from triggerhook.domain.recurrence import make_recurrence
from triggerhook.domain.task import InsertOutcome, OnConflict, Task, TaskInfo, TaskState
from triggerhook.errors import ConflictError, TooLateError
from triggerhook.interfaces import Inserted, NewRow, TaskStore

ERROR, KEEP, REPLACE = OnConflict.ERROR, OnConflict.KEEP, OnConflict.REPLACE
LEASE = 60_000
FAR = 10**9


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def tagged(name: str, due_ms: int, payload: bytes, *tags: str) -> Task:
    return Task(name, due_ms, "rk", payload, meta=make_meta(tags=list(tags)))


def create(store: TaskStore, task: Task, rule: OnConflict = ERROR) -> Inserted:
    [answer] = store.insert([NewRow(task, on_conflict=rule)], atomic=False)
    return answer


def arm_everything(store: TaskStore, horizon_ms: int) -> list[Task]:
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, LEASE)]
    assert len(leases) == SHARD_COUNT
    return store.arm("me", leases, horizon_ms, 1000).tasks


def tagged_ids(store: TaskStore, tag: str) -> list[str]:
    return [info.task.id for info in store.list_tasks(TaskFilter(tag=tag), None, 100)]


@pytest.mark.parametrize("rule", list(OnConflict))
def test_a_new_id_is_created_whatever_the_rule(
    store: TaskStore, now: int, rule: OnConflict
) -> None:
    a = tagged("a", now + 60_000, b"1", "x")
    assert create(store, a, rule) == Inserted(InsertOutcome.CREATED, a)
    assert store.get("a") == TaskInfo(a, TaskState.SCHEDULED)


@pytest.mark.parametrize("rule", list(OnConflict))
def test_the_same_content_is_a_safe_retry_whatever_the_rule(
    store: TaskStore, now: int, rule: OnConflict
) -> None:
    a = tagged("a", now + 60_000, b"1", "x")
    create(store, a)
    assert create(store, a, rule) == Inserted(InsertOutcome.EXISTS, a)


def test_keep_answers_the_stored_task_and_writes_nothing(store: TaskStore, now: int) -> None:
    stored = tagged("a", now + 60_000, b"1", "x")
    create(store, stored)
    other = tagged("a", now + 5_000, b"2", "y")
    assert create(store, other, KEEP) == Inserted(InsertOutcome.KEPT, stored)
    assert store.get("a") == TaskInfo(stored, TaskState.SCHEDULED)
    assert (tagged_ids(store, "x"), tagged_ids(store, "y")) == (["a"], [])


def test_replace_rewrites_content_due_time_and_tags(store: TaskStore, now: int) -> None:
    create(store, tagged("a", now + 60_000, b"1", "x"))
    new = tagged("a", now + 5_000, b"2", "y")
    assert create(store, new, REPLACE) == Inserted(InsertOutcome.REPLACED, new)
    assert store.get("a") == TaskInfo(new, TaskState.SCHEDULED)
    assert (tagged_ids(store, "x"), tagged_ids(store, "y")) == ([], ["a"])
    # Armed as the new incarnation: its content, at the new revision.
    [armed] = arm_everything(store, now + FAR)
    assert armed == new


def test_replace_takes_a_new_revision(store: TaskStore, now: int) -> None:
    first = NewRow(Task("a", now + 60_000, "rk", b"1"), rev=1)
    second = NewRow(Task("a", now + 60_000, "rk", b"2"), rev=2, on_conflict=REPLACE)
    store.insert([first], atomic=False)
    store.insert([second], atomic=False)
    [armed] = arm_everything(store, now + FAR)
    assert (armed.payload, armed.rev) == (b"2", 2)
    # The old revision's delete (a stale confirm) removes nothing.
    assert store.delete_fired([("a", 1)]) == 0
    assert store.get("a") is not None


def test_replace_of_an_armed_task_is_too_late(store: TaskStore, now: int) -> None:
    stored = Task("a", now - 1, "rk", b"1")
    create(store, stored)
    assert arm_everything(store, now + 1_000) == [stored]
    other = Task("a", now + 60_000, "rk", b"2")
    assert create(store, other, REPLACE) == Inserted(InsertOutcome.TOO_LATE, stored)
    assert store.get("a") == TaskInfo(stored, TaskState.FIRING)


def test_error_is_a_conflict_answered_with_the_stored_task(store: TaskStore, now: int) -> None:
    stored = Task("a", now + 60_000, "rk", b"1")
    create(store, stored)
    other = Task("a", now + 60_000, "rk", b"2")
    assert create(store, other) == Inserted(InsertOutcome.CONFLICT, stored)


def test_a_series_replaced_starts_over_as_the_new_spec(store: TaskStore, now: int) -> None:
    every = make_recurrence(every="PT1M")
    assert every is not None
    third = dataclasses.replace(every, occurrence=3)
    series = Task("s", now + 60_000, "rk", b"1", meta=make_meta(recur=third))
    create(store, series)
    hourly = make_recurrence(every="PT1H")
    new = Task("s", now + 3_600_000, "rk", b"2", meta=make_meta(recur=hourly))
    assert create(store, new, REPLACE).outcome is InsertOutcome.REPLACED
    info = store.get("s")
    assert info is not None and info.task == new
    assert info.task.meta.recur is not None and info.task.meta.recur.occurrence == 1


def test_a_batch_applies_in_order(store: TaskStore, now: int) -> None:
    v1, v2, v3 = (Task("a", now + 60_000 + i, "rk", bytes([i])) for i in (1, 2, 3))
    rows = [
        NewRow(v1),
        NewRow(v2, on_conflict=REPLACE),  # replaces what the batch just wrote
        NewRow(v1, on_conflict=KEEP),  # v2 is stored now: kept
        NewRow(v3, on_conflict=REPLACE),  # the last replace wins
        NewRow(v3),  # the same as stored: a retry
    ]
    answers = store.insert(rows, atomic=False)
    assert outcomes(answers) == [
        InsertOutcome.CREATED,
        InsertOutcome.REPLACED,
        InsertOutcome.KEPT,
        InsertOutcome.REPLACED,
        InsertOutcome.EXISTS,
    ]
    assert answers[2].task == v2
    assert store.get("a") == TaskInfo(v3, TaskState.SCHEDULED)
    assert store.count_tasks() == 1


def test_an_atomic_batch_with_a_replace_too_late_writes_nothing(store: TaskStore, now: int) -> None:
    armed = Task("a", now - 1, "rk", b"1")
    create(store, armed)
    assert arm_everything(store, now + 1_000) == [armed]
    rows = [
        NewRow(Task("b", now + 60_000, "rk")),
        NewRow(Task("a", now + 60_000, "rk", b"2"), on_conflict=REPLACE),
    ]
    with pytest.raises(TooLateError) as raised:
        store.insert(rows, atomic=True)
    assert (raised.value.task_id, raised.value.index) == ("a", 1)
    assert store.get("b") is None
    assert store.get("a") == TaskInfo(armed, TaskState.FIRING)


def test_an_atomic_batch_names_the_first_conflict(store: TaskStore, now: int) -> None:
    create(store, Task("a", now + 60_000, "rk", b"1"))
    rows = [
        NewRow(Task("b", now + 60_000, "rk")),
        NewRow(Task("a", now + 60_000, "rk", b"2"), on_conflict=KEEP),  # kept: no error
        NewRow(Task("b", now + 60_001, "rk")),  # conflicts with the batch's own b
    ]
    with pytest.raises(ConflictError) as raised:
        store.insert(rows, atomic=True)
    assert type(raised.value) is ConflictError
    assert (raised.value.task_id, raised.value.index) == ("b", 2)
    assert store.get("b") is None
