"""The TaskStore contract: one suite, run against every store (SQLite in
memory and on a file, MySQL through both drivers) alike.

Every test takes the ``store`` (or ``backend``) fixture of ``conftest.py`` and so
runs once per store; each has ``SHARD_COUNT`` shards. The rules a transaction
follows are written once (store/kernel.py); what this suite holds equal is
each backend's steps, statements and reads. The protocol: docs/design/ownership.md (R1-R8).

Rows are observed only through the interface: a row is armed when ``get``
says FIRING (and cancel answers TOO_LATE); who holds a shard shows in who can
arm it. Times are the store's clock (``now``); lease expiry is waited for on
that clock, with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from support.stores import DEFAULT_ROUTING_KEY, SHARD_COUNT, Backend, in_shard, outcomes
from support.waiting import wait_for

from triggerhook.domain.arming import BOTTOM, ShardMarks, shard_of
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    RescheduleResult,
    Task,
    TaskInfo,
    TaskState,
)
from triggerhook.errors import ConflictError, InstanceNameInUse
from triggerhook.interfaces import (
    Acquired,
    Armed,
    DeferOutcome,
    Deferral,
    Lease,
    Move,
    Moved,
    NameHolder,
    NewRow,
    TaskStore,
)

LEASE = 30_000
SHORT = 300  # a lease that expires while the test waits
FAR = 10**9  # added to now: a horizon that takes everything
ME = "me"
OTHER = "other"

CREATED, EXISTS, CONFLICT = InsertOutcome.CREATED, InsertOutcome.EXISTS, InsertOutcome.CONFLICT
CANCELLED, NOT_FOUND, TOO_LATE = (
    CancelResult.CANCELLED,
    CancelResult.NOT_FOUND,
    CancelResult.TOO_LATE,
)
DEFERRED, INHERITED, GONE = DeferOutcome.DEFERRED, DeferOutcome.INHERITED, DeferOutcome.GONE
FRESH = ShardMarks(BOTTOM, 1)  # a new database's shard: nothing armed, generation 1


@pytest.fixture
def now(store: TaskStore) -> int:
    """The store's clock at the start of the test, in epoch ms."""
    return store.database_time_us() // 1000


def clock(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def task(name: str, due_ms: int, payload: bytes = b"", rk: str = "rk") -> Task:
    return Task(name, due_ms, rk, payload)


def insert(store: TaskStore, *tasks: Task, atomic: bool = False) -> list[NewRow]:
    rows = [NewRow(t) for t in tasks]
    assert outcomes(store.insert(rows, atomic)) == [CREATED] * len(rows)
    return rows


def take_all(store: TaskStore, instance: str = ME, lease_ms: int = LEASE) -> dict[int, Lease]:
    """Acquire every shard (all free); the leases by shard."""
    got = store.acquire(instance, SHARD_COUNT, lease_ms)
    assert sorted(a.lease.shard for a in got) == list(range(SHARD_COUNT))
    return {a.lease.shard: a.lease for a in got}


def arm(
    store: TaskStore,
    leases: Iterable[Lease],
    horizon_ms: int,
    limit: int = 1000,
    instance: str = ME,
) -> Armed:
    return store.arm(instance, list(leases), horizon_ms, limit)


def ids(tasks: Sequence[Task]) -> list[str]:
    return [t.id for t in tasks]


def state(store: TaskStore, task_id: str) -> TaskState | None:
    info = store.get(task_id)
    return None if info is None else info.state


def expiring(store: TaskStore, shard: int, instance: str = ME) -> dict[int, Lease]:
    """Acquire every shard, the lease on ``shard`` only for SHORT (a renewal
    sets the lease from now, shorter too)."""
    leases = take_all(store, instance)
    assert store.renew(instance, [leases[shard]], SHORT) == [leases[shard]]
    return leases


def taken_over(store: TaskStore, shard: int, instance: str = OTHER) -> Acquired:
    """Wait until ``instance`` acquires ``shard`` (its lease ran out; the only
    one that does: see :func:`expiring`)."""
    got: list[Acquired] = []

    def acquired() -> bool:
        got.extend(store.acquire(instance, SHARD_COUNT, LEASE))
        return bool(got)

    wait_for(acquired, 10, f"{instance} never acquired shard {shard}")
    assert [a.lease.shard for a in got] == [shard]
    return got[0]


# -- insert and get ----------------------------------------------------------------------------


def test_insert_creates_rows_that_get_reads_back(store: TaskStore, now: int) -> None:
    a, b = task("a", now + 5, b"\x00payload\xff"), task("b", now + 7, rk="billing.charge")
    insert(store, a, b)
    assert store.get("a") == TaskInfo(a, TaskState.SCHEDULED)
    info = store.get("b")
    assert info is not None
    assert (info.task.routing_key, info.task.payload, info.task.due_ms) == (
        "billing.charge",
        b"",
        now + 7,
    )
    assert store.get("nope") is None
    assert store.get("A") is None  # ids are case-sensitive


def test_an_empty_store(store: TaskStore, now: int) -> None:
    assert store.shard_count() == SHARD_COUNT
    assert store.count_tasks() == 0
    assert store.earliest_due_ms() is None
    assert store.get("a") is None
    leases = take_all(store)
    assert arm(store, leases.values(), now + FAR) == Armed([], [])
    acquired = Acquired(leases[0], FRESH)
    assert store.inherited(acquired, None, 10) == ([], None)


def test_count_tasks_and_earliest_due_count_every_row(store: TaskStore, now: int) -> None:
    [_, _, soon] = insert(
        store, task("late", now + 9000), task("mid", now + 5000), task("soon", now + 50)
    )
    assert store.count_tasks() == 3
    assert store.earliest_due_ms() == now + 50
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + 1000).tasks) == ["soon"]
    assert store.count_tasks() == 3  # armed rows are rows
    assert store.cancel(["mid"]) == [CANCELLED]
    assert store.delete_fired([("soon", soon.rev)]) == 1
    assert store.count_tasks() == 1
    assert store.earliest_due_ms() == now + 9000


def test_the_database_tells_its_time_in_microseconds(store: TaskStore) -> None:
    # Both servers run on this machine: their clock is this machine's.
    before_us = time.time_ns() // 1000
    first = store.database_time_us()
    second = store.database_time_us()
    after_us = time.time_ns() // 1000
    assert isinstance(first, int)
    assert before_us - 1_000_000 <= first <= second <= after_us + 1_000_000
    assert first % 1000 != 0 or second % 1000 != 0  # finer than milliseconds


def test_insert_of_the_same_content_again_is_a_safe_retry(store: TaskStore, now: int) -> None:
    a = task("a", now + 10, payload=b"p")
    [row] = insert(store, a)
    # Same content (attempts and revision are not content): nothing written.
    again = NewRow(Task("a", a.due_ms, "rk", b"p", attempts=3))
    assert outcomes(store.insert([again], atomic=False)) == [EXISTS]
    assert outcomes(store.insert([again], atomic=True)) == [EXISTS]
    assert store.count_tasks() == 1
    [armed] = arm(store, take_all(store).values(), now + 1000).tasks
    assert (armed.rev, armed.attempts) == (row.rev, 0)  # the first insert's row


@pytest.mark.parametrize(
    "change",
    [{"due_ms": 1}, {"payload": b"x"}, {"routing_key": "other.key"}],
    ids=["due", "payload", "routing-key"],
)
def test_insert_of_other_content_under_an_existing_id_conflicts(
    store: TaskStore, now: int, change: dict[str, Any]
) -> None:
    original = task("a", now + 1000)
    insert(store, original)
    changed = original.replace(
        **{k: v + original.due_ms if k == "due_ms" else v for k, v in change.items()}
    )
    inserted = store.insert([NewRow(changed), NewRow(task("b", now))], atomic=False)
    assert outcomes(inserted) == [CONFLICT, CREATED]
    assert store.get("a") == TaskInfo(original, TaskState.SCHEDULED)  # unchanged
    assert store.get("b") is not None  # non-atomic: the rest is written


def test_duplicate_ids_in_one_insert(store: TaskStore, now: int) -> None:
    a, b, c = task("a", now), task("b", now), task("c", now)
    rows = [NewRow(a), NewRow(b), NewRow(a), NewRow(c), NewRow(task("c", now + 1))]
    assert outcomes(store.insert(rows, atomic=False)) == [
        CREATED,
        CREATED,
        EXISTS,  # a repeat of the first "a": a retry
        CREATED,
        CONFLICT,  # another "c": the first one is stored
    ]
    assert store.count_tasks() == 3
    assert store.get("c") == TaskInfo(c, TaskState.SCHEDULED)


def test_duplicate_ids_in_one_insert_of_existing_ids(store: TaskStore, now: int) -> None:
    insert(store, task("x", now), task("y", now))
    rows = [
        NewRow(task("x", now)),
        NewRow(task("x", now)),
        NewRow(task("y", now + 5)),
        NewRow(task("y", now + 5)),  # identical to a conflicting row: still a conflict
        NewRow(task("y", now)),  # identical to the stored row: in order, a safe retry
    ]
    assert outcomes(store.insert(rows, atomic=False)) == [
        EXISTS,
        EXISTS,
        CONFLICT,
        CONFLICT,
        EXISTS,
    ]
    assert store.get("y") == TaskInfo(task("y", now), TaskState.SCHEDULED)


def test_atomic_insert_with_a_conflict_writes_nothing(store: TaskStore, now: int) -> None:
    insert(store, task("b", now))
    rows = [NewRow(task("c", now)), NewRow(task("b", now + 1)), NewRow(task("d", now))]
    with pytest.raises(ConflictError) as raised:
        store.insert(rows, atomic=True)
    assert raised.value.task_id == "b"
    assert store.get("c") is None and store.get("d") is None
    assert store.count_tasks() == 1
    # A conflict between two new rows of one batch: the same.
    with pytest.raises(ConflictError) as raised:
        store.insert([NewRow(task("e", now)), NewRow(task("e", now + 1))], atomic=True)
    assert raised.value.task_id == "e"
    assert store.get("e") is None


def test_atomic_insert_without_a_conflict_writes_everything(store: TaskStore, now: int) -> None:
    insert(store, task("a", now))
    rows = [NewRow(task(n, now)) for n in ("a", "b", "b", "c")]
    assert outcomes(store.insert(rows, atomic=True)) == [EXISTS, CREATED, EXISTS, CREATED]
    assert store.count_tasks() == 3


def test_insert_of_nothing(store: TaskStore) -> None:
    assert outcomes(store.insert([], atomic=False)) == []
    assert outcomes(store.insert([], atomic=True)) == []


def test_insert_and_cancel_of_more_rows_than_one_statement_takes(
    store: TaskStore, now: int
) -> None:
    many = [task(f"t{i:05d}", now + 10_000 + i) for i in range(2100)]
    insert(store, *many, atomic=True)
    rows = [NewRow(t) for t in many] + [NewRow(task("new", now))]
    assert outcomes(store.insert(rows, atomic=False)) == [EXISTS] * 2100 + [CREATED]
    assert store.count_tasks() == 2101
    names = [t.id for t in many]
    assert store.cancel([*names, names[0]]) == [CANCELLED] * 2100 + [NOT_FOUND]
    assert store.count_tasks() == 1


# -- arming (R3) --------------------------------------------------------------------------------


def test_arm_arms_the_rows_due_by_the_horizon(store: TaskStore, now: int) -> None:
    a, b, c = task("a", now + 100, b"pa"), task("b", now + 200, rk="x.y"), task("c", now + 90_000)
    rows = {r.task.id: r for r in insert(store, a, b, c)}
    leases = take_all(store)
    armed = arm(store, leases.values(), now + 1000)
    assert sorted(ids(armed.tasks)) == ["a", "b"]
    assert (armed.lost, armed.settled) == ([], 0)
    for t in armed.tasks:
        assert t == rows[t.id].task  # the content
        assert (t.rev, t.attempts) == (rows[t.id].rev, 0)
        assert t.shard == shard_of(t.id, SHARD_COUNT)
        assert t.epoch == leases[t.shard].epoch
    assert [state(store, n) for n in "abc"] == [TaskState.FIRING] * 2 + [TaskState.SCHEDULED]
    assert store.cancel(["a", "c"]) == [TOO_LATE, CANCELLED]
    assert arm(store, leases.values(), now + FAR).tasks == []  # armed once only


def test_arm_takes_a_shards_rows_in_mark_order_up_to_the_limit(store: TaskStore, now: int) -> None:
    names = in_shard(1, 5)
    insert(store, *[task(n, now + 100 * (5 - i)) for i, n in enumerate(names)])  # last first
    lease = take_all(store)[1]
    order = list(reversed(names))
    assert ids(arm(store, [lease], now + FAR, limit=2).tasks) == order[:2]
    assert ids(arm(store, [lease], now + FAR, limit=2).tasks) == order[2:4]
    assert ids(arm(store, [lease], now + FAR, limit=2).tasks) == order[4:]
    assert arm(store, [lease], now + FAR, limit=2).tasks == []
    assert arm(store, [lease], now + FAR, limit=0).tasks == []


def test_a_pass_arms_at_most_the_limit_over_all_shards(store: TaskStore, now: int) -> None:
    names = in_shard(0, 3, "a") + in_shard(2, 3, "b")
    insert(store, *[task(n, now + 10) for n in names])
    leases = take_all(store)
    first = arm(store, leases.values(), now + FAR, limit=4).tasks
    second = arm(store, leases.values(), now + FAR, limit=4).tasks
    assert len(first) == 4
    assert sorted(ids(first) + ids(second)) == sorted(names)
    assert arm(store, leases.values(), now + FAR).tasks == []


def test_the_horizon_is_inclusive(store: TaskStore, now: int) -> None:
    insert(store, task("on", now + 500), task("after", now + 501))
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + 500).tasks) == ["on"]
    assert ids(arm(store, leases.values(), now + 501).tasks) == ["after"]


def test_an_idle_pass_below_the_watermark_still_arms_a_row_written_there(
    store: TaskStore, now: int
) -> None:
    # The watermark at now + 10 s; then a pass that armed nothing (idle), and
    # one whose horizon is lower than the watermark (the clock estimate
    # stepped back): a row written meanwhile below the watermark but beyond
    # that horizon is still armed by it, as every row below the watermark is.
    first, below = in_shard(2, 2)
    [row] = insert(store, task(first, now + 100))
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + 10_000).tasks) == [first]
    assert store.delete_fired([(first, row.rev)]) == 1
    assert arm(store, leases.values(), now + 10_000).tasks == []
    insert(store, task(below, now + 5000))
    assert ids(arm(store, leases.values(), now + 1000).tasks) == [below]


def test_a_pass_with_nothing_due_by_urgent_ms_is_skipped(store: TaskStore, now: int) -> None:
    insert(store, task("first", now + 10))
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + 1000).tasks) == ["first"]
    insert(store, task("later", now + 900))
    skipped = store.arm(ME, list(leases.values()), now + 1000, 100, urgent_ms=now + 500)
    assert (skipped.tasks, skipped.skipped) == ([], True)
    assert state(store, "later") is TaskState.SCHEDULED  # not armed: still cancellable
    # One due by urgent_ms (below the watermark too): a pass, to the horizon.
    insert(store, task("urgent", now + 400))
    made = store.arm(ME, list(leases.values()), now + 1000, 100, urgent_ms=now + 500)
    assert not made.skipped
    assert sorted(ids(made.tasks)) == ["later", "urgent"]


def test_a_row_written_below_the_watermark_is_armed_by_the_next_pass(
    store: TaskStore, now: int
) -> None:
    s, late, soon, moved = in_shard(3, 4)
    insert(store, task(s, now + 100))
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + 10_000).tasks) == [s]
    # The watermark is at the horizon now; rows written below it are not armed
    # by it (R6): one past due, one due before the horizon of the last pass.
    insert(store, task(late, now - 5000), task(soon, now + 500), task(moved, now + 20_000))
    assert store.reschedule([Move(moved, now + 600)])[0].result is RescheduleResult.RESCHEDULED
    assert [state(store, n) for n in (late, soon, moved)] == [TaskState.SCHEDULED] * 3
    assert store.cancel([soon]) == [CANCELLED]  # unarmed indeed
    armed = arm(store, leases.values(), now + 10_000)
    assert sorted(ids(armed.tasks)) == sorted([late, moved])
    assert [state(store, n) for n in (late, moved)] == [TaskState.FIRING] * 2
    assert arm(store, leases.values(), now + 10_000).tasks == []


def test_rows_written_below_the_watermark_beyond_the_limit_are_settled_and_the_rest_wait(
    store: TaskStore, now: int
) -> None:
    first, *below = in_shard(2, 6)
    insert(store, task(first, now + 10))
    lease = take_all(store)[2]
    assert ids(arm(store, [lease], now + 10_000).tasks) == [first]
    insert(store, *[task(n, now + 100 + i) for i, n in enumerate(below)])
    armed = arm(store, [lease], now + 10_000, limit=2)
    # More rows below the watermark than room: the two taken are armed by a
    # write of their own gen (the marks stay); the other three stay unarmed.
    assert (ids(armed.tasks), armed.settled) == (below[:2], 2)
    assert [state(store, n) for n in below] == [TaskState.FIRING] * 2 + [TaskState.SCHEDULED] * 3
    assert store.cancel([below[2]]) == [CANCELLED]
    armed = arm(store, [lease], now + 10_000, limit=10)
    assert (ids(armed.tasks), armed.settled) == (below[3:], 0)
    assert arm(store, [lease], now + 10_000).tasks == []


def test_arming_is_fenced_by_the_epoch(store: TaskStore, now: int) -> None:
    [a] = in_shard(0, 1, "a")
    insert(store, task(a, now + 10))
    mine = expiring(store, 0)
    theirs = taken_over(store, 0)
    assert theirs.lease.epoch == mine[0].epoch + 1
    stale = arm(store, mine.values(), now + FAR)
    assert (stale.tasks, stale.lost) == ([], [0])  # 1-3: ours still
    assert state(store, a) is TaskState.SCHEDULED
    forged = Lease(1, mine[1].epoch + 5)
    assert arm(store, [forged], now + FAR).lost == [1]
    assert arm(store, [theirs.lease], now + FAR).lost == [0]  # not OTHER's to arm as ME
    [fired] = arm(store, [theirs.lease], now + FAR, instance=OTHER).tasks
    assert (fired.id, fired.epoch) == (a, theirs.lease.epoch)


def test_a_pass_takes_the_armed_rows_of_a_pass_whose_answer_was_lost_first(
    store: TaskStore, now: int
) -> None:
    """R3a: the ids an earlier pass took (its answer lost) that are armed now
    come first, all of them, whatever the limit; then the reads within what
    is left. The store cannot tell a lost answer from a received one: given
    ids armed now, it takes them again."""
    [a, b] = in_shard(0, 2, "a")
    [c] = in_shard(1, 1, "c")
    [late] = in_shard(0, 1, "late")
    insert(store, task(a, now + 20), task(b, now + 10), task(c, now + 30), task(late, now + 9_000))
    leases = take_all(store)
    first = arm(store, leases.values(), now + 1000)
    assert sorted(ids(first.tasks)) == sorted([a, b, c])
    lost = {leases[0]: frozenset([a, b, late]), leases[1]: frozenset([c])}  # late: unarmed
    again = store.arm(ME, list(leases.values()), now + 1000, 1, now - FAR, unanswered=lost)
    assert ids(again.tasks) == [b, a, c]  # per shard in mark order; not skipped, not limited
    assert {t.epoch for t in again.tasks} == {leases[0].epoch}
    assert state(store, late) is TaskState.SCHEDULED  # not armed by R3a; its time not come
    assert store.arm(ME, list(leases.values()), now + 1000, 10).tasks == []


def test_a_pass_ignores_lost_answers_of_leases_not_held_at_their_epoch(
    store: TaskStore, now: int
) -> None:
    [a] = in_shard(0, 1, "a")
    insert(store, task(a, now + 10))
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + 1000).tasks) == [a]
    stale = Lease(0, leases[0].epoch - 1)
    lost = {stale: frozenset([a])}
    assert store.arm(ME, list(leases.values()), now + 1000, 10, unanswered=lost).tasks == []
    other = {leases[1]: frozenset([a])}  # a names no row of shard 1's
    assert store.arm(ME, [leases[1]], now + 1000, 10, unanswered=other).tasks == []


def test_arm_of_no_leases(store: TaskStore, now: int) -> None:
    insert(store, task("a", now))
    assert arm(store, [], now + FAR) == Armed([], [])
    assert state(store, "a") is TaskState.SCHEDULED


# -- inherited rows -------------------------------------------------------------------------


def test_a_new_owner_inherits_the_rows_armed_and_not_deleted_once(
    store: TaskStore, now: int
) -> None:
    *names, far, new = in_shard(1, 6)
    rows = {r.task.id: r for r in insert(store, *[task(n, now + 10) for n in names])}
    insert(store, task(far, now + 90_000))
    mine = expiring(store, 1)
    assert sorted(ids(arm(store, [mine[1]], now + 1000).tasks)) == sorted(names)
    assert store.delete_fired([(names[0], rows[names[0]].rev)]) == 1  # confirmed and deleted

    theirs = taken_over(store, 1)
    assert theirs.took.gen == 2 and theirs.took.armed >= (now + 1000, names[-1])
    first, after = store.inherited(theirs, None, 2)
    rest, last = store.inherited(theirs, after, 2)
    assert ids(first + rest) == names[1:]
    assert (after, last) == ((now + 10, names[2]), (now + 10, names[3]))
    assert store.inherited(theirs, last, 2) == ([], None)
    for t in first + rest:
        assert (t.rev, t.shard, t.epoch) == (rows[t.id].rev, 1, theirs.lease.epoch)
    # Inherited rows stay armed; the new owner's passes do not arm them again.
    assert store.cancel([names[1]]) == [TOO_LATE]
    insert(store, task(new, now + 20))
    assert ids(arm(store, [theirs.lease], now + 1000, instance=OTHER).tasks) == [new]
    assert ids(store.inherited(theirs, None, 10)[0]) == names[1:]  # the set is fixed
    assert state(store, far) is TaskState.SCHEDULED


def test_a_new_owner_inherits_nothing_when_nothing_was_armed(store: TaskStore, now: int) -> None:
    insert(store, *[task(n, now) for n in in_shard(0, 3)])
    [acquired] = [a for a in store.acquire(ME, SHARD_COUNT, LEASE) if a.lease.shard == 0]
    assert acquired.took == FRESH
    assert store.inherited(acquired, None, 10) == ([], None)
    assert store.inherited(acquired, None, 0) == ([], None)


# -- R5: the delete after the broker's confirm ---------------------------------------------------


def test_delete_fired_deletes_by_id_and_revision(store: TaskStore, now: int) -> None:
    a, b = insert(store, task("a", now), task("b", now))
    asked = [("a", a.rev), ("b", b.rev ^ 1), ("nope", 1), ("a", a.rev)]
    assert store.delete_fired(asked) == 1  # an id given twice is deleted once
    assert store.get("a") is None
    assert state(store, "b") is TaskState.SCHEDULED
    assert store.delete_fired([("a", a.rev)]) == 0
    assert store.delete_fired([]) == 0


def test_delete_fired_leaves_a_newer_incarnation(store: TaskStore, now: int) -> None:
    # A stale copy's confirm (an instance paused past its lease) names the old
    # revision: the id's newer incarnation, armed too, stays.
    [old] = insert(store, task("x", now, payload=b"old"))
    leases = take_all(store)
    assert ids(arm(store, leases.values(), now + FAR).tasks) == ["x"]
    assert store.delete_fired([("x", old.rev)]) == 1
    [new] = insert(store, task("x", now, payload=b"new"))
    assert new.rev != old.rev
    assert ids(arm(store, leases.values(), now + FAR).tasks) == ["x"]
    assert store.delete_fired([("x", old.rev)]) == 0
    assert state(store, "x") is TaskState.FIRING
    assert store.delete_fired([("x", new.rev)]) == 1
    assert store.get("x") is None


# -- R8: an event the broker did not take --------------------------------------------------------


def _armed_copy(store: TaskStore, name: str, due_ms: int) -> tuple[Task, dict[int, Lease]]:
    insert(store, task(name, due_ms))
    leases = take_all(store)
    [copy] = arm(store, leases.values(), due_ms + 1000).tasks
    return copy, leases


def test_defer_unarms_a_row_to_fire_again_from_the_retry_time(store: TaskStore, now: int) -> None:
    copy, leases = _armed_copy(store, "a", now + 100)
    deferral = Deferral(copy, not_before_ms=now + 5000)
    assert store.defer(ME, [deferral]) == [DEFERRED]
    assert state(store, "a") is TaskState.SCHEDULED
    assert store.earliest_due_ms() == now + 100  # its due time, overdue while it waits
    assert arm(store, leases.values(), now + 4999).tasks == []
    [again] = arm(store, leases.values(), now + 5000).tasks
    assert (again.rev, again.attempts, again.due_ms) == (deferral.new_rev, 1, now + 100)
    assert store.defer(ME, [Deferral(again, now + 6000)]) == [DEFERRED]
    [third] = arm(store, leases.values(), now + 6000).tasks
    assert third.attempts == 2  # one per failed delivery
    info = store.get("a")
    assert info is not None and info.task.attempts == 0  # get does not read them


def test_a_deferred_row_can_be_cancelled(store: TaskStore, now: int) -> None:
    copy, _ = _armed_copy(store, "a", now)
    assert store.cancel(["a"]) == [TOO_LATE]
    assert store.defer(ME, [Deferral(copy, now + 5000)]) == [DEFERRED]
    assert store.cancel(["a"]) == [CANCELLED]
    assert store.defer(ME, [Deferral(copy, now + 5000)]) == [GONE]


def test_defer_of_a_row_not_ours_at_that_revision_is_gone(store: TaskStore, now: int) -> None:
    copy, _ = _armed_copy(store, "a", now)
    other_rev, stale_epoch = copy.replace(rev=copy.rev ^ 1), copy.replace(epoch=copy.epoch + 1)
    assert store.defer(OTHER, [Deferral(copy, now)]) == [GONE]  # not the owner
    assert store.defer(ME, [Deferral(other_rev, now)]) == [GONE]
    assert store.defer(ME, [Deferral(stale_epoch, now)]) == [GONE]
    assert state(store, "a") is TaskState.FIRING
    # The same deferral twice in one call: the first moves the row to a new
    # revision, so the second finds nothing.
    twice = Deferral(copy, now + 5000)
    assert store.defer(ME, [twice, twice]) == [DEFERRED, GONE]


def test_defer_of_an_inherited_row_leaves_it_armed(store: TaskStore, now: int) -> None:
    [name] = in_shard(3, 1)
    insert(store, task(name, now))
    mine = expiring(store, 3)
    [copy] = arm(store, [mine[3]], now + 1000).tasks
    theirs = taken_over(store, 3)
    [inherited], _ = store.inherited(theirs, None, 10)
    assert store.defer(OTHER, [Deferral(inherited, now + 5000)]) == [INHERITED]
    assert store.defer(ME, [Deferral(copy, now + 5000)]) == [GONE]  # fenced: the old epoch
    assert state(store, name) is TaskState.FIRING
    assert store.cancel([name]) == [TOO_LATE]
    assert store.inherited(theirs, None, 10)[0] == [inherited]  # unchanged


# -- R8p: a copy a rate limit holds back waits in the database ------------------------------


def test_a_postponed_defer_keeps_the_attempts(store: TaskStore, now: int) -> None:
    copy, leases = _armed_copy(store, "a", now + 100)
    assert store.defer(ME, [Deferral(copy, now + 5000)]) == [DEFERRED]  # a failed delivery
    [failed] = arm(store, leases.values(), now + 5000).tasks
    assert failed.attempts == 1
    postponed = Deferral(failed, now + 9000, postponed=True)
    assert store.defer(ME, [postponed]) == [DEFERRED]
    assert state(store, "a") is TaskState.SCHEDULED  # unarmed: it can be cancelled meanwhile
    assert arm(store, leases.values(), now + 8999).tasks == []
    [again] = arm(store, leases.values(), now + 9000).tasks
    assert (again.rev, again.due_ms) == (postponed.new_rev, now + 100)
    assert again.attempts == 1  # nothing failed: none counted


def test_postponed_and_failed_defers_in_one_call(store: TaskStore, now: int) -> None:
    insert(store, task("p", now), task("f", now))
    leases = take_all(store)
    copies = {t.id: t for t in arm(store, leases.values(), now + 1000).tasks}
    asked = [Deferral(copies["p"], now + 5000, postponed=True), Deferral(copies["f"], now + 5000)]
    assert store.defer(ME, asked) == [DEFERRED, DEFERRED]
    again = {t.id: t for t in arm(store, leases.values(), now + 5000).tasks}
    assert (again["p"].attempts, again["f"].attempts) == (0, 1)
    assert (again["p"].rev, again["f"].rev) == (asked[0].new_rev, asked[1].new_rev)


def test_a_postponed_defer_of_an_inherited_row_leaves_it_armed(store: TaskStore, now: int) -> None:
    [name] = in_shard(3, 1)
    insert(store, task(name, now))
    mine = expiring(store, 3)
    assert len(arm(store, [mine[3]], now + 1000).tasks) == 1
    theirs = taken_over(store, 3)
    [inherited], _ = store.inherited(theirs, None, 10)
    assert store.defer(OTHER, [Deferral(inherited, now + 5000, postponed=True)]) == [INHERITED]
    assert store.cancel([name]) == [TOO_LATE]
    assert store.inherited(theirs, None, 10)[0] == [inherited]  # unchanged


def test_defer_of_nothing(store: TaskStore) -> None:
    assert store.defer(ME, []) == []


# -- R7: cancel -------------------------------------------------------------------------------


def test_cancel_answers_per_id(store: TaskStore, now: int) -> None:
    insert(store, task("armed", now), task("a", now + 90_000), task("b", now + 90_000))
    leases = take_all(store, OTHER)
    assert ids(arm(store, leases.values(), now + 1000, instance=OTHER).tasks) == ["armed"]
    asked = ["armed", "a", "nope", "a", "armed", "b"]
    assert store.cancel(asked) == [TOO_LATE, CANCELLED, NOT_FOUND, NOT_FOUND, TOO_LATE, CANCELLED]
    assert store.get("a") is None and store.get("b") is None
    assert state(store, "armed") is TaskState.FIRING


def test_cancel_works_whoever_owns_the_shard(store: TaskStore, now: int) -> None:
    names = [in_shard(s, 1, f"s{s}-")[0] for s in range(SHARD_COUNT)]
    insert(store, *[task(n, now + 90_000) for n in names])
    assert store.cancel([names[0]]) == [CANCELLED]  # nobody owns any shard
    store.acquire(ME, 2, LEASE)
    store.acquire(OTHER, 1, LEASE)
    assert store.cancel(names[1:]) == [CANCELLED] * 3
    assert store.count_tasks() == 0


def test_an_id_cancelled_twice_in_one_call_is_cancelled_then_not_found(
    store: TaskStore, now: int
) -> None:
    insert(store, task("a", now))
    assert store.cancel(["a", "a"]) == [CANCELLED, NOT_FOUND]


def test_cancel_and_get_of_ids_no_row_can_have(store: TaskStore) -> None:
    assert store.cancel(["é", "a b"]) == [NOT_FOUND, NOT_FOUND]
    assert store.get("é") is None
    assert store.reschedule([Move("é", 5)]) == [Moved(RescheduleResult.NOT_FOUND)]


def test_cancel_of_nothing(store: TaskStore) -> None:
    assert store.cancel([]) == []


# -- R6: reschedule ---------------------------------------------------------------------------


def test_reschedule_moves_an_unarmed_row_at_a_new_revision(store: TaskStore, now: int) -> None:
    insert(store, task("a", now + 100, b"p", "k.1"))
    move = Move("a", now + 700)
    moved = task("a", now + 700, b"p", "k.1")
    assert store.reschedule([move]) == [Moved(RescheduleResult.RESCHEDULED, moved)]
    assert store.get("a") == TaskInfo(moved, TaskState.SCHEDULED)
    leases = take_all(store)
    assert arm(store, leases.values(), now + 699).tasks == []
    [armed] = arm(store, leases.values(), now + 700).tasks
    assert (armed, armed.rev) == (moved, move.rev)


def test_reschedule_of_an_armed_row_is_too_late(store: TaskStore, now: int) -> None:
    copy, _ = _armed_copy(store, "armed", now)
    outcomes = store.reschedule([Move("armed", now + 900), Move("nope", now)])
    assert outcomes == [Moved(RescheduleResult.TOO_LATE), Moved(RescheduleResult.NOT_FOUND)]
    assert store.get("armed") == TaskInfo(copy, TaskState.FIRING)  # unchanged
    assert store.defer(ME, [Deferral(copy, now)]) == [DEFERRED]  # still at its revision


def test_reschedule_of_one_id_twice_takes_the_last_move(store: TaskStore, now: int) -> None:
    insert(store, task("a", now + 100))
    first, last = Move("a", now + 200), Move("a", now + 300)
    moved = Moved(RescheduleResult.RESCHEDULED, task("a", now + 300))
    assert store.reschedule([first, last]) == [moved, moved]
    assert store.get("a") == TaskInfo(task("a", now + 300), TaskState.SCHEDULED)
    [armed] = arm(store, take_all(store).values(), now + FAR).tasks
    assert armed.rev == last.rev


def test_reschedule_resets_the_failed_attempts(store: TaskStore, now: int) -> None:
    copy, leases = _armed_copy(store, "a", now)
    assert store.defer(ME, [Deferral(copy, now)]) == [DEFERRED]
    [outcome] = store.reschedule([Move("a", now + 50)])
    assert outcome.task is not None and outcome.task.attempts == 0
    [again] = arm(store, leases.values(), now + FAR).tasks
    assert again.attempts == 0


def test_reschedule_works_whoever_owns_the_shard(store: TaskStore, now: int) -> None:
    insert(store, task("a", now + 90_000))
    assert store.reschedule([Move("a", now + 80_000)])[0].result is RescheduleResult.RESCHEDULED
    take_all(store, OTHER)
    assert store.reschedule([Move("a", now + 70_000)])[0].result is RescheduleResult.RESCHEDULED
    assert store.earliest_due_ms() == now + 70_000


def test_reschedule_of_nothing(store: TaskStore) -> None:
    assert store.reschedule([]) == []


# -- routing keys as stored ---------------------------------------------------------------------


def test_a_null_routing_key_reads_back_as_the_default(backend: Backend) -> None:
    store = backend.store
    now = clock(store)
    insert(store, task("a", now + 5, b"p"))
    backend.null_routing_key("a")
    expected = task("a", now + 5, b"p", DEFAULT_ROUTING_KEY)
    assert store.get("a") == TaskInfo(expected, TaskState.SCHEDULED)
    # Compared as read back: the task with the default key is a retry.
    assert outcomes(store.insert([NewRow(expected)], atomic=False)) == [EXISTS]
    assert outcomes(store.insert([NewRow(task("a", now + 5, b"p"))], atomic=False)) == [CONFLICT]
    [moved] = store.reschedule([Move("a", now + 6)])
    assert moved.task == task("a", now + 6, b"p", DEFAULT_ROUTING_KEY)
    [armed] = arm(store, take_all(store).values(), now + FAR).tasks
    assert armed.routing_key == DEFAULT_ROUTING_KEY


def test_an_empty_routing_key_reads_back_as_the_default(store: TaskStore, now: int) -> None:
    blank = task("a", now + 5, rk="")
    insert(store, blank)
    assert store.get("a") == TaskInfo(
        task("a", now + 5, rk=DEFAULT_ROUTING_KEY), TaskState.SCHEDULED
    )
    # The stored row, read back, differs from the blank task: inserting that
    # again is a conflict, and so is a repeat within one batch (the rows apply
    # in order: the repeat meets the row the first wrote, as read back).
    assert outcomes(store.insert([NewRow(blank)], atomic=False)) == [CONFLICT]
    other = task("b", now, rk="")
    assert outcomes(store.insert([NewRow(other), NewRow(other)], atomic=False)) == [
        CREATED,
        CONFLICT,
    ]
    armed = arm(store, take_all(store).values(), now + FAR).tasks
    assert {t.routing_key for t in armed} == {DEFAULT_ROUTING_KEY}


# -- R2: shard leases -----------------------------------------------------------------------


def test_acquire_takes_free_shards_up_to_the_count(store: TaskStore) -> None:
    mine = store.acquire(ME, 3, LEASE)
    assert len({a.lease.shard for a in mine}) == 3
    assert {(a.lease.epoch, a.took) for a in mine} == {(1, FRESH)}
    theirs = store.acquire(OTHER, 3, LEASE)
    assert len(theirs) == 1  # the one left
    assert {a.lease.shard for a in mine + theirs} == set(range(SHARD_COUNT))
    assert store.acquire(ME, 3, LEASE) == []
    assert store.acquire(OTHER, 0, LEASE) == []


def test_an_expired_lease_is_acquired_by_another_with_a_higher_epoch(store: TaskStore) -> None:
    mine = expiring(store, 2)
    theirs = taken_over(store, 2)
    assert theirs.lease == Lease(2, mine[2].epoch + 1)
    assert store.renew(ME, [mine[2]], LEASE) == []  # lost: drop it
    assert store.release(ME, [mine[2]]) == 0
    assert store.renew(OTHER, [theirs.lease], LEASE) == [theirs.lease]


def test_renew_extends_the_leases_still_ours(store: TaskStore) -> None:
    mine = [a.lease for a in store.acquire(ME, 2, SHORT)]
    start = clock(store)
    # Expired (nobody took them): still ours to renew, at the same epoch.
    wait_for(lambda: clock(store) > start + SHORT + 10, 10, "the lease never expired")
    forged = Lease(mine[0].shard, mine[0].epoch + 1)
    assert store.renew(ME, [*mine, forged], LEASE) == mine
    assert store.renew(OTHER, mine, LEASE) == []
    assert store.renew(ME, [], LEASE) == []
    free = store.acquire(OTHER, SHARD_COUNT, LEASE)
    assert {a.lease.shard for a in free}.isdisjoint({lease.shard for lease in mine})
    assert store.renew(ME, mine, LEASE) == mine  # twice in a row


def test_release_gives_a_shard_to_the_next_with_its_marks(store: TaskStore, now: int) -> None:
    [name] = in_shard(1, 1)
    insert(store, task(name, now))
    leases = take_all(store)
    armed = arm(store, [leases[1]], now + 1000)
    assert ids(armed.tasks) == [name]
    assert store.release(ME, [leases[1], leases[2]]) == 2
    assert store.release(ME, [leases[1]]) == 0
    got = sorted(store.acquire(OTHER, SHARD_COUNT, LEASE), key=lambda a: a.lease.shard)
    assert [a.lease for a in got] == [Lease(1, leases[1].epoch + 1), Lease(2, leases[2].epoch + 1)]
    assert got[0].took.gen == 2 and got[0].took.armed >= (now, name)
    assert got[1].took == FRESH
    # The row armed before the release is inherited by the next owner.
    assert ids(store.inherited(got[0], None, 10)[0]) == [name]
    assert store.release(ME, []) == 0


# -- R1: members ------------------------------------------------------------------------------


def test_a_live_instance_name_cannot_be_taken(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, LEASE)
    store.register("b", 2, "host-b", 22, LEASE)
    with pytest.raises(InstanceNameInUse) as raised:
        store.register("a", 3, "host-c", 33, LEASE)
    assert (raised.value.instance, raised.value.host, raised.value.pid) == ("a", "host-a", 11)
    assert "host-a" in str(raised.value) and "11" in str(raised.value)
    assert store.live_members() == 2
    store.register("a", 1, "host-a", 11, LEASE)  # the holder again: fine
    assert store.heartbeat("a", 1, LEASE)


def test_an_expired_instance_name_is_taken_over(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, SHORT)
    store.register("b", 2, "host-b", 22, LEASE)

    def took_over() -> bool:
        try:
            store.register("a", 3, "host-c", 33, LEASE)
        except InstanceNameInUse:
            return False
        return True

    wait_for(took_over, 10, "the name was never taken over")
    assert not store.heartbeat("a", 1, LEASE)  # the old holder learns it lost the name
    assert store.heartbeat("a", 3, LEASE)
    assert store.live_members() == 2
    with pytest.raises(InstanceNameInUse) as raised:
        store.register("a", 1, "host-a", 11, LEASE)
    assert (raised.value.host, raised.value.pid) == ("host-c", 33)


def test_a_heartbeat_keeps_the_name(store: TaskStore) -> None:
    store.register("a", 1, "h", 1, SHORT)
    assert store.heartbeat("a", 1, LEASE)
    assert store.heartbeat("a", 1, LEASE)  # twice at once: still True
    start = clock(store)
    wait_for(lambda: clock(store) > start + SHORT + 10, 10, "time stood still")
    with pytest.raises(InstanceNameInUse):
        store.register("a", 2, "h", 2, LEASE)
    assert not store.heartbeat("nobody", 1, LEASE)


def test_leave_gives_the_name_up(store: TaskStore) -> None:
    store.register("a", 1, "h", 1, LEASE)
    store.leave("a", 2)  # not ours: nothing happens
    assert store.live_members() == 1
    store.leave("a", 1)
    assert store.live_members() == 0
    assert not store.heartbeat("a", 1, LEASE)
    store.register("a", 2, "h", 2, LEASE)
    assert store.live_members() == 1


def test_members_whose_heartbeat_expired_are_not_live(store: TaskStore) -> None:
    store.register("short", 1, "h", 1, SHORT)
    store.register("long", 2, "h", 2, LEASE)
    assert store.live_members() == 2
    wait_for(lambda: store.live_members() == 1, 10, "the short heartbeat never expired")


def test_name_holder_reads_the_holders_row_and_the_database_time(store: TaskStore) -> None:
    assert store.name_holder("a") is None
    before = clock(store)
    store.register("a", 1, "host-a", 11, LEASE)
    holder = store.name_holder("a")
    after = clock(store)
    assert holder is not None
    assert (holder.token, holder.host, holder.pid) == (1, "host-a", 11)
    assert before <= holder.now_ms <= after
    assert before + LEASE <= holder.heartbeat_until_ms <= after + LEASE
    assert holder.live
    store.leave("a", 1)
    assert store.name_holder("a") is None


def test_an_expired_holder_reads_as_not_live(store: TaskStore) -> None:
    store.register("a", 1, "h", 1, SHORT)
    wait_for(lambda: not _holder(store, "a").live, 10, "the heartbeat never expired")
    assert _holder(store, "a").now_ms > _holder(store, "a").heartbeat_until_ms


def _holder(store: TaskStore, instance: str) -> NameHolder:
    holder = store.name_holder(instance)
    assert holder is not None, f"nobody holds {instance!r}"
    return holder


def test_take_over_name_takes_a_live_name_from_the_holder_as_read(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, LEASE)
    store.register("b", 2, "host-b", 22, LEASE)
    holder = _holder(store, "a")
    start = clock(store)
    assert store.take_over_name("a", 3, "host-c", 33, LEASE, holder)
    taken = _holder(store, "a")
    assert (taken.token, taken.host, taken.pid) == (3, "host-c", 33)
    assert taken.heartbeat_until_ms >= start + LEASE  # held for a lease from now
    assert not store.heartbeat("a", 1, LEASE)  # the old holder learns it lost the name
    assert store.heartbeat("a", 3, LEASE)
    assert store.live_members() == 2
    with pytest.raises(InstanceNameInUse) as raised:
        store.register("a", 1, "host-a", 11, LEASE)
    assert (raised.value.host, raised.value.pid) == ("host-c", 33)


def test_of_two_takeovers_from_the_same_holder_one_wins(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, LEASE)
    holder = _holder(store, "a")
    assert store.take_over_name("a", 2, "host-a", 22, LEASE, holder)
    assert not store.take_over_name("a", 3, "host-a", 33, LEASE, holder)
    assert (_holder(store, "a").token, _holder(store, "a").pid) == (2, 22)
    assert store.heartbeat("a", 2, LEASE) and not store.heartbeat("a", 3, LEASE)


def test_take_over_name_matches_nothing_once_the_holder_renewed(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, LEASE)
    holder = _holder(store, "a")
    # A renewal a millisecond or more later moves the heartbeat.
    wait_for(lambda: clock(store) > holder.now_ms + 1, 10, "time stood still")
    assert store.heartbeat("a", 1, LEASE)
    assert _holder(store, "a").heartbeat_until_ms > holder.heartbeat_until_ms
    assert not store.take_over_name("a", 2, "host-b", 22, LEASE, holder)
    assert _holder(store, "a").token == 1
    assert store.heartbeat("a", 1, LEASE)


def test_take_over_name_of_a_holder_that_left_matches_nothing(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, LEASE)
    holder = _holder(store, "a")
    store.leave("a", 1)
    assert not store.take_over_name("a", 2, "host-b", 22, LEASE, holder)
    assert store.name_holder("a") is None
    assert store.live_members() == 0
    store.register("a", 2, "host-b", 22, LEASE)  # a free name: registered as usual
    assert _holder(store, "a").token == 2


def test_take_over_name_takes_an_expired_name_too(store: TaskStore) -> None:
    store.register("a", 1, "host-a", 11, SHORT)
    wait_for(lambda: not _holder(store, "a").live, 10, "the heartbeat never expired")
    holder = _holder(store, "a")
    assert store.take_over_name("a", 2, "host-b", 22, LEASE, holder)
    assert _holder(store, "a").live and _holder(store, "a").token == 2
    assert store.live_members() == 1


# -- schema and lifetime ------------------------------------------------------------------------


def test_check_schema_passes_on_a_current_store(store: TaskStore) -> None:
    store.check_schema()


def test_close_can_be_called_twice(store: TaskStore, now: int) -> None:
    insert(store, task("a", now))
    store.close()
    store.close()
