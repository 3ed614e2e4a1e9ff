"""A series' pause and resume, and its catch-up copies at R5s
(docs/design/flow-control.md section 4; domain/series.py), against every
store: what each answer writes, armed and unarmed, and what fires."""

from __future__ import annotations

from typing import Any

import pytest
from support.stores import SHARD_COUNT

from triggerhook.domain.meta import make_meta
from triggerhook.domain.recurrence import make_recurrence
from triggerhook.domain.series import PARKED_MS, copy_id
from triggerhook.domain.task import RescheduleResult, SeriesResult, Task, TaskState
from triggerhook.interfaces import Move, NewRow, TaskStore, new_rev

LEASE = 60_000
SECOND = 1000


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def series(name: str, due_ms: int, **policy: Any) -> Task:
    recur = make_recurrence(every=SECOND, **policy)
    return Task(name, due_ms, "rk", b"p", meta=make_meta(tags=["life"], recur=recur))


def put(store: TaskStore, *tasks: Task) -> None:
    store.insert([NewRow(task) for task in tasks], atomic=True)


def arm_all(store: TaskStore, horizon_ms: int) -> list[Task]:
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, LEASE)]
    assert len(leases) == SHARD_COUNT
    return store.arm("me", leases, horizon_ms, 1000).tasks


def stored(store: TaskStore, task_id: str) -> Task:
    info = store.get(task_id)
    assert info is not None
    return info.task


def recur_of(store: TaskStore, task_id: str) -> tuple[bool, int | None]:
    recur = stored(store, task_id).meta.recur
    assert recur is not None
    return recur.paused, recur.resume_ms


def test_a_paused_series_is_parked_out_of_every_arming_range(store: TaskStore, now: int) -> None:
    due = now + 2 * SECOND
    put(store, series("s", due))
    assert store.pause(["s"]) == [SeriesResult.PAUSED]
    assert stored(store, "s").due_ms == PARKED_MS
    assert recur_of(store, "s") == (True, due)
    assert arm_all(store, now + 3_600_000) == []
    # Paused again: nothing written, the same answer.
    assert store.pause(["s"]) == [SeriesResult.PAUSED]
    assert recur_of(store, "s") == (True, due)


def test_resume_before_the_occurrence_puts_it_back_where_it_was(store: TaskStore, now: int) -> None:
    due = now + 60 * SECOND
    put(store, series("s", due))
    store.pause(["s"])
    assert store.resume(["s"], now) == [SeriesResult.RESUMED]
    assert stored(store, "s").due_ms == due
    assert recur_of(store, "s") == (False, None)
    assert store.resume(["s"], now) == [SeriesResult.RESUMED]  # not paused: nothing written


@pytest.mark.parametrize(
    ("policy", "expected_due_steps"),
    [({}, 0), ({"catch_up": "one"}, 0), ({"catch_up": "skip"}, 6)],
)
def test_resume_after_missed_occurrences_goes_by_the_catch_up_policy(
    store: TaskStore, now: int, policy: dict[str, Any], expected_due_steps: int
) -> None:
    first = now - 5 * SECOND - 500  # paused at an occurrence 5.5 s ago
    put(store, series("s", first, **policy))
    store.pause(["s"])
    assert store.resume(["s"], now) == [SeriesResult.RESUMED]
    # one: the missed occurrence fires now, once (late); skip: the first after now.
    assert stored(store, "s").due_ms == first + expected_due_steps * SECOND
    assert store.get(copy_id("s", first)) is None


def test_resume_under_catch_up_all_writes_the_missed_occurrences_as_copies(
    store: TaskStore, now: int
) -> None:
    first = now - 5 * SECOND - 500
    put(store, series("s", first, catch_up="all", catch_up_max=4))
    store.pause(["s"])
    assert store.resume(["s"], now) == [SeriesResult.RESUMED]
    assert stored(store, "s").due_ms == first + 6 * SECOND
    # The earliest four of the six missed; each a one-off with the series' content.
    for step in range(6):
        copy = store.get(copy_id("s", first + step * SECOND))
        if step >= 4:
            assert copy is None
            continue
        assert copy is not None
        assert copy.task.due_ms == first + step * SECOND
        assert copy.task.meta.recur is None
        assert (copy.task.payload, copy.task.meta.tags) == (b"p", ("life",))


def test_a_series_paused_while_armed_fires_that_occurrence_then_parks(
    store: TaskStore, now: int
) -> None:
    due = now + 100
    put(store, series("s", due))
    [armed] = arm_all(store, now + SECOND)
    assert store.pause(["s"]) == [SeriesResult.PAUSED_AFTER_THIS]
    info = store.get("s")
    assert info is not None and info.state is TaskState.FIRING
    assert recur_of(store, "s") == (True, None)
    # Its occurrence is confirmed: the next is parked, to resume at its time.
    assert store.advance([armed], due + 10) == 1
    parked = stored(store, "s")
    assert parked.due_ms == PARKED_MS
    assert recur_of(store, "s") == (True, due + SECOND)
    assert parked.meta.recur is not None and parked.meta.recur.occurrence == 2


def test_resume_of_a_series_paused_while_armed_only_unmarks_it(store: TaskStore, now: int) -> None:
    due = now + 100
    put(store, series("s", due))
    [armed] = arm_all(store, now + SECOND)
    store.pause(["s"])
    assert store.resume(["s"], now) == [SeriesResult.RESUMED]
    assert recur_of(store, "s") == (False, None)
    assert store.advance([armed], due + 10) == 1
    assert stored(store, "s").due_ms == due + SECOND  # on its schedule, not parked


def test_a_one_off_task_is_not_a_series_and_is_left_alone(store: TaskStore, now: int) -> None:
    one_off = Task("t", now + 60 * SECOND, "rk", b"p")
    put(store, one_off)
    assert store.pause(["t", "nope"]) == [SeriesResult.NOT_A_SERIES, SeriesResult.NOT_FOUND]
    assert store.resume(["t"], now) == [SeriesResult.NOT_A_SERIES]
    assert stored(store, "t").due_ms == one_off.due_ms


def test_resume_with_no_occurrence_left_ends_the_series(store: TaskStore, now: int) -> None:
    first = now - 5 * SECOND
    put(store, series("s", first, catch_up="skip", until_ms=first + 2 * SECOND))
    store.pause(["s"])
    assert store.resume(["s"], now) == [SeriesResult.ENDED]
    assert store.get("s") is None


def test_an_advance_under_catch_up_all_writes_the_occurrences_missed(
    store: TaskStore, now: int
) -> None:
    due = now + 100
    put(store, series("s", due, catch_up="all"))
    [armed] = arm_all(store, now + SECOND)
    # Confirmed 3.5 s late: occurrences due +1 s, +2 s, +3 s were missed.
    assert store.advance([armed], due + 3_500) == 1
    assert stored(store, "s").due_ms == due + 4 * SECOND
    copies = [store.get(copy_id("s", due + k * SECOND)) for k in (1, 2, 3)]
    assert [c.task.due_ms for c in copies if c is not None] == [due + k * SECOND for k in (1, 2, 3)]
    assert store.get(copy_id("s", due)) is None  # the one that fired has no copy


def test_an_advance_under_the_default_policy_writes_no_copies(store: TaskStore, now: int) -> None:
    due = now + 100
    put(store, series("s", due))
    [armed] = arm_all(store, now + SECOND)
    assert store.advance([armed], due + 3_500) == 1
    assert stored(store, "s").due_ms == due + 4 * SECOND
    assert all(store.get(copy_id("s", due + k * SECOND)) is None for k in (1, 2, 3))


def test_a_reschedule_of_a_paused_series_moves_where_it_resumes(store: TaskStore, now: int) -> None:
    put(store, series("s", now + 60 * SECOND))
    store.pause(["s"])
    [moved] = store.reschedule([Move("s", now + 5 * SECOND, new_rev())])
    assert moved.result is RescheduleResult.RESCHEDULED and moved.task == stored(store, "s")
    assert stored(store, "s").due_ms == PARKED_MS  # still paused: it does not fire
    assert recur_of(store, "s") == (True, now + 5 * SECOND)
    assert arm_all(store, now + 3_600_000) == []
    store.resume(["s"], now)
    assert stored(store, "s").due_ms == now + 5 * SECOND


def test_an_advance_goes_by_the_copy_of_the_rows_own_revision(store: TaskStore, now: int) -> None:
    """A batch may confirm a stale copy of an id (an older revision, fired
    again as a dead letter) after its current one: the row still advances
    (the simulator's seed 601 found it left armed for good)."""
    due = now + 100
    put(store, series("s", due))
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, LEASE)]
    [first] = store.arm("me", leases, now + SECOND, 1000).tasks
    assert store.advance([first], due + 10) == 1
    [second] = store.arm("me", leases, now + 2 * SECOND, 1000).tasks
    assert second.rev != first.rev
    assert store.advance([second, first], due + SECOND + 10) == 1
    assert stored(store, "s").due_ms == due + 2 * SECOND
