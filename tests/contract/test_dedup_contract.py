"""The dedup window (R5d and R6's check after its insert;
docs/design/flow-control.md, section 2), against every store: a task with a
window leaves a fired record when its row is deleted after the confirm, and
a create of its id before the record expires is ALREADY_FIRED and writes
nothing, whatever its own window or conflict rule; the sweep deletes
expired records of the shards it is given and no others."""

from __future__ import annotations

import pytest
from support.stores import SHARD_COUNT

from triggerhook.domain.arming import shard_of
from triggerhook.domain.meta import make_meta
from triggerhook.domain.task import InsertOutcome, OnConflict, Task, TaskInfo, TaskState
from triggerhook.errors import AlreadyFiredError, ConflictError
from triggerhook.interfaces import Inserted, Lease, NewRow, TaskStore

LEASE = 60_000
FAR = 10**9
WINDOW = 60_000


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def windowed(name: str, due_ms: int, window_ms: int = WINDOW, payload: bytes = b"1") -> Task:
    return Task(name, due_ms, "rk", payload, meta=make_meta(dedup_window_ms=window_ms))


def create(
    store: TaskStore, task: Task, now_ms: int, rule: OnConflict = OnConflict.ERROR
) -> Inserted:
    [answer] = store.insert([NewRow(task, on_conflict=rule)], atomic=False, now_ms=now_ms)
    return answer


@pytest.fixture
def leases(store: TaskStore) -> list[Lease]:
    """Every shard, held by "me" (a second acquire would find them held)."""
    return [a.lease for a in store.acquire("me", SHARD_COUNT, LEASE)]


def fire(store: TaskStore, leases: list[Lease], now_ms: int) -> list[Task]:
    """Arm everything due and settle it as the confirmer does: R5d for the
    tasks with a window, R5 for the others."""
    armed = store.arm("me", leases, now_ms + FAR, 1000).tasks
    with_window = [t for t in armed if t.meta.dedup_window_ms]
    without = [(t.id, t.rev) for t in armed if not t.meta.dedup_window_ms]
    deleted = store.delete_recorded(with_window, now_ms) + store.delete_fired(without)
    assert deleted == len(armed)
    return armed


@pytest.mark.parametrize("rule", list(OnConflict))
def test_an_id_that_fired_within_its_window_is_already_fired(
    store: TaskStore, now: int, leases: list[Lease], rule: OnConflict
) -> None:
    create(store, windowed("w", now - 10), now)
    fire(store, leases, now)
    again = windowed("w", now + 5_000, payload=b"other")
    assert create(store, again, now + 1_000, rule) == Inserted(
        InsertOutcome.ALREADY_FIRED, again, now
    )
    assert store.get("w") is None  # nothing written
    # The record is the id's: a create without a window is refused as well.
    plain = Task("w", now + 5_000, "rk", b"1")
    assert create(store, plain, now + WINDOW - 1).outcome is InsertOutcome.ALREADY_FIRED
    assert store.get("w") is None


def test_after_the_window_the_id_is_created_again(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    create(store, windowed("w", now - 10), now)
    fire(store, leases, now)
    again = windowed("w", now + 5_000)
    assert create(store, again, now + WINDOW) == Inserted(InsertOutcome.CREATED, again)
    assert store.get("w") == TaskInfo(again, TaskState.SCHEDULED)
    # It fires, and leaves a record of its own, which refuses the next create.
    fire(store, leases, now + WINDOW + 5_000)
    refused = create(store, windowed("w", now + FAR), now + WINDOW + 6_000)
    assert (refused.outcome, refused.fired_ms) == (
        InsertOutcome.ALREADY_FIRED,
        now + WINDOW + 5_000,
    )


def test_a_task_without_a_window_leaves_no_record(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    create(store, Task("p", now - 10, "rk", b"1"), now)
    fire(store, leases, now)
    again = Task("p", now + 5_000, "rk", b"1")
    assert create(store, again, now + 1) == Inserted(InsertOutcome.CREATED, again)


def test_an_atomic_batch_with_a_fired_id_writes_nothing(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    create(store, windowed("w", now - 10), now)
    fire(store, leases, now)
    rows = [NewRow(Task("fresh", now + 5_000, "rk", b"1")), NewRow(windowed("w", now + 5_000))]
    with pytest.raises(AlreadyFiredError) as refused:
        store.insert(rows, atomic=True, now_ms=now + 1)
    assert (refused.value.task_id, refused.value.index, refused.value.fired_ms) == ("w", 1, now)
    assert (store.get("fresh"), store.get("w")) == (None, None)


def test_an_atomic_batch_that_takes_fired_ids_answers_them(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    """``fired_ok`` (a backfill's copies): the fired id is answered and not
    written, the others are, and a conflict still refuses the whole batch."""
    create(store, windowed("w", now - 10), now)
    fire(store, leases, now)
    fresh, fired = Task("fresh", now + 5_000, "rk", b"1"), windowed("w", now + 5_000)
    answers = store.insert(
        [NewRow(fresh), NewRow(fired)], atomic=True, now_ms=now + 1, fired_ok=True
    )
    assert answers == [
        Inserted(InsertOutcome.CREATED, fresh),
        Inserted(InsertOutcome.ALREADY_FIRED, fired, now),
    ]
    assert (store.get("fresh") is not None, store.get("w")) == (True, None)
    clash = Task("fresh", now + 6_000, "rk", b"other")
    with pytest.raises(ConflictError):
        store.insert([NewRow(fired), NewRow(clash)], atomic=True, now_ms=now + 2, fired_ok=True)


def test_a_batch_answers_each_row_and_writes_the_others(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    create(store, windowed("w", now - 10), now)
    fire(store, leases, now)
    fresh, fired = Task("fresh", now + 5_000, "rk", b"1"), windowed("w", now + 5_000)
    answers = store.insert([NewRow(fresh), NewRow(fired)], atomic=False, now_ms=now + 1)
    assert answers == [
        Inserted(InsertOutcome.CREATED, fresh),
        Inserted(InsertOutcome.ALREADY_FIRED, fired, now),
    ]
    assert (store.get("fresh") is not None, store.get("w")) == (True, None)


def test_a_stale_confirm_deletes_nothing_and_records_nothing(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    old = windowed("w", now - 10)
    create(store, old, now)
    [armed] = store.arm("me", leases, now + FAR, 10).tasks
    stale = armed.replace(rev=armed.rev + 1)  # a revision the row does not have
    assert store.delete_recorded([stale], now) == 0
    assert store.get("w") is not None
    # The row is still there: a create of the id is the usual conflict answer.
    other = windowed("w", now + 5_000, payload=b"2")
    assert create(store, other, now + 1).outcome is InsertOutcome.CONFLICT
    # Its own revision's confirm deletes it, with the record; given twice, once.
    assert store.delete_recorded([armed, armed], now + 2) == 1
    assert create(store, other, now + 3) == Inserted(InsertOutcome.ALREADY_FIRED, other, now + 2)


def test_a_series_copy_carries_its_window(store: TaskStore, now: int, leases: list[Lease]) -> None:
    """A copy (trigger, backfill, catch-up) is a one-off task with the
    series' window: fired, its id is refused within it (a repeated backfill)."""
    copy = windowed("s:1000", now - 10)
    create(store, copy, now)
    fire(store, leases, now)
    assert create(store, copy, now + 1).outcome is InsertOutcome.ALREADY_FIRED


def test_the_sweep_deletes_expired_records_of_the_given_shards_only(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    names = [f"t{i}" for i in range(40)]
    for i, name in enumerate(names):
        create(store, windowed(name, now - 10, window_ms=1_000 + 1_000 * (i % 2)), now)
    fire(store, leases, now)
    shards = sorted({shard_of(name, SHARD_COUNT) for name in names})
    mine, others = shards[: len(shards) // 2], shards[len(shards) // 2 :]
    short = [n for i, n in enumerate(names) if i % 2 == 0]  # expire at now + 1000
    mine_short = [n for n in short if shard_of(n, SHARD_COUNT) in mine]
    assert mine_short  # the names spread over shards
    # Nothing expired yet: nothing swept.
    assert store.sweep_fired(mine, now + 999, 1000) == 0
    # In batches: a limit of 1 deletes one at a time.
    assert store.sweep_fired(mine, now + 1_000, 1) == 1
    assert store.sweep_fired(mine, now + 1_000, 1000) == len(mine_short) - 1
    assert store.sweep_fired(mine, now + 1_000, 1000) == 0
    # A swept record no longer refuses its id (expired anyway); the others'
    # shards kept theirs, which the sweep of those shards then deletes.
    for name in names:
        expired = name in short
        asked = create(store, windowed(name, now + FAR), now + 1_500).outcome
        want = InsertOutcome.CREATED if expired else InsertOutcome.ALREADY_FIRED
        assert asked is want, name
    left = [n for n in names if shard_of(n, SHARD_COUNT) in others and n not in short]
    assert store.sweep_fired(others, now + 2_000, 1000) == len(left) + len(short) - len(mine_short)
    assert store.sweep_fired([], now + 2_000, 1000) == 0
