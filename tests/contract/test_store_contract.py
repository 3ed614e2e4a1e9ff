"""The TaskStore contract: one suite, run against the in-memory store and MySQL alike.

Every test takes the ``store`` (or ``backend``) fixture of ``conftest.py`` and so
runs once per store. Where the two stores disagreed, MySQL's answer is the one
asserted here and the memory store was made to give it.

Rows are observed only through the interface: who holds a claim shows in who
can arm it and who can claim it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from support.stores import DEFAULT_ROUTING_KEY, Backend

from triggerhook.domain.task import CancelResult, RescheduleResult, Task, TaskInfo, TaskState
from triggerhook.errors import ConflictError
from triggerhook.interfaces import (
    Claim,
    ClaimMode,
    Deferral,
    InsertOutcome,
    Move,
    Moved,
    NewRow,
    TaskStore,
)

NOW = 1_700_000_000_000
LEASE = 30_000
FAR = NOW + 10**9  # a horizon that takes everything
ME = "me"
OTHER = "other"

CREATED, EXISTS, CONFLICT = InsertOutcome.CREATED, InsertOutcome.EXISTS, InsertOutcome.CONFLICT
CANCELLED, NOT_FOUND, TOO_LATE = (
    CancelResult.CANCELLED,
    CancelResult.NOT_FOUND,
    CancelResult.TOO_LATE,
)


def task(name: str, due_ms: int = NOW + 1000, payload: bytes = b"", rk: str = "rk") -> Task:
    return Task(name, due_ms, rk, payload)


def insert(
    store: TaskStore,
    *tasks: Task,
    mode: ClaimMode = ClaimMode.NONE,
    instance: str = ME,
    lease_until_ms: int = NOW + LEASE,
    atomic: bool = False,
) -> list[NewRow]:
    rows = [NewRow(t, mode) for t in tasks]
    assert store.insert(rows, instance, lease_until_ms, atomic) == [CREATED] * len(rows)
    return rows


def take(
    store: TaskStore,
    instance: str = ME,
    now_ms: int = NOW,
    horizon_ms: int = FAR,
    arm_until_ms: int = 0,
    lease_until_ms: int | None = None,
    limit: int = 100,
) -> list[Claim]:
    """Claim; the lease runs LEASE from ``now_ms`` unless given."""
    lease = now_ms + LEASE if lease_until_ms is None else lease_until_ms
    return store.claim(instance, now_ms, horizon_ms, arm_until_ms, lease, limit)


def ids(claims: Sequence[Claim]) -> list[str]:
    return [c.task.id for c in claims]


def state(store: TaskStore, task_id: str) -> TaskState | None:
    info = store.get(task_id)
    return None if info is None else info.state


def held_by(store: TaskStore, instance: str, *claims: Claim) -> bool:
    """Whether ``instance`` still holds these claims (at their revisions): can arm them."""
    return store.arm(instance, claims) == list(claims)


# -- insert and get ----------------------------------------------------------------------------


def test_insert_creates_rows_that_get_reads_back(store: TaskStore) -> None:
    a, b = task("a", NOW + 5, b"\x00payload\xff"), task("b", NOW + 7, rk="billing.charge")
    insert(store, a, b)
    assert store.get("a") == TaskInfo(a, TaskState.SCHEDULED)
    info = store.get("b")
    assert info is not None
    assert (info.task.routing_key, info.task.payload, info.task.due_ms) == (
        "billing.charge",
        b"",
        NOW + 7,
    )
    assert store.get("nope") is None
    assert store.get("A") is None  # ids are case-sensitive


def test_an_empty_store(store: TaskStore) -> None:
    assert store.count_tasks() == 0
    assert store.earliest_due_ms() is None
    assert take(store) == []
    assert store.get("a") is None


def test_count_tasks_and_earliest_due_count_every_row(store: TaskStore) -> None:
    insert(store, task("late", NOW + 900), task("mid", NOW + 500))
    [armed] = insert(store, task("armed", NOW + 50), mode=ClaimMode.ARM, instance=OTHER)
    assert store.count_tasks() == 3
    assert store.earliest_due_ms() == NOW + 50
    assert store.cancel(["mid"]) == [CANCELLED]
    assert store.delete_fired([("armed", armed.rev)]) == 1
    assert store.count_tasks() == 1
    assert store.earliest_due_ms() == NOW + 900


def test_the_database_tells_its_time_in_microseconds(store: TaskStore) -> None:
    # Both servers run on this machine: their clock is this machine's.
    before_us = time.time_ns() // 1000
    first = store.database_time_us()
    second = store.database_time_us()
    after_us = time.time_ns() // 1000
    assert isinstance(first, int)
    assert before_us - 1_000_000 <= first <= second <= after_us + 1_000_000
    assert first % 1000 != 0 or second % 1000 != 0  # finer than milliseconds


def test_insert_of_the_same_content_again_is_a_safe_retry(store: TaskStore) -> None:
    a = task("a", payload=b"p")
    [row] = insert(store, a, mode=ClaimMode.CLAIM)
    # Same content (attempts and claim mode are not content): nothing written.
    again = NewRow(Task("a", a.due_ms, "rk", b"p", attempts=3), ClaimMode.ARM)
    assert store.insert([again], OTHER, NOW + 2 * LEASE, atomic=False) == [EXISTS]
    assert store.insert([again], OTHER, NOW + 2 * LEASE, atomic=True) == [EXISTS]
    assert state(store, "a") is TaskState.SCHEDULED  # not armed by the retry
    # Still ours at the first insert's revision.
    assert held_by(store, ME, Claim(a, row.rev, False))
    assert not held_by(store, OTHER, Claim(a, again.rev, False))


@pytest.mark.parametrize(
    "changed",
    [task("a", NOW + 1001), task("a", payload=b"x"), task("a", rk="other.key")],
    ids=["due", "payload", "routing-key"],
)
def test_insert_of_other_content_under_an_existing_id_conflicts(
    store: TaskStore, changed: Task
) -> None:
    insert(store, task("a"))
    outcomes = store.insert([NewRow(changed), NewRow(task("b"))], ME, 0, atomic=False)
    assert outcomes == [CONFLICT, CREATED]
    assert store.get("a") == TaskInfo(task("a"), TaskState.SCHEDULED)  # unchanged
    assert store.get("b") is not None  # non-atomic: the rest is written


def test_duplicate_ids_in_one_insert(store: TaskStore) -> None:
    a, b, c = task("a"), task("b"), task("c")
    rows = [NewRow(a, ClaimMode.ARM), NewRow(b), NewRow(a), NewRow(c), NewRow(task("c", NOW + 1))]
    assert store.insert(rows, ME, NOW + LEASE, atomic=False) == [
        CREATED,
        CREATED,
        EXISTS,  # a repeat of the first "a": a retry
        CREATED,
        CONFLICT,  # another "c": the first one is stored
    ]
    assert store.count_tasks() == 3
    assert store.get("c") == TaskInfo(c, TaskState.SCHEDULED)
    assert state(store, "a") is TaskState.FIRING  # held as the first "a" asked


def test_duplicate_ids_in_one_insert_of_existing_ids(store: TaskStore) -> None:
    insert(store, task("x"), task("y"))
    rows = [
        NewRow(task("x")),
        NewRow(task("x")),
        NewRow(task("y", NOW + 5)),
        NewRow(task("y", NOW + 5)),  # identical to a conflicting row: still a conflict
        NewRow(task("y")),  # identical to the stored row, after a conflict: a conflict
    ]
    assert store.insert(rows, ME, 0, atomic=False) == [EXISTS, EXISTS, CONFLICT, CONFLICT, CONFLICT]
    assert store.get("y") == TaskInfo(task("y"), TaskState.SCHEDULED)


def test_atomic_insert_with_a_conflict_writes_nothing(store: TaskStore) -> None:
    insert(store, task("b"))
    rows = [NewRow(task("c")), NewRow(task("b", NOW + 1)), NewRow(task("d"))]
    with pytest.raises(ConflictError) as raised:
        store.insert(rows, ME, NOW + LEASE, atomic=True)
    assert raised.value.task_id == "b"
    assert store.get("c") is None and store.get("d") is None
    assert store.count_tasks() == 1
    # A conflict between two new rows of one batch: the same.
    with pytest.raises(ConflictError) as raised:
        store.insert([NewRow(task("e")), NewRow(task("e", NOW + 1))], ME, 0, atomic=True)
    assert raised.value.task_id == "e"
    assert store.get("e") is None


def test_atomic_insert_without_a_conflict_writes_everything(store: TaskStore) -> None:
    insert(store, task("a"))
    rows = [NewRow(task("a")), NewRow(task("b")), NewRow(task("b")), NewRow(task("c"))]
    assert store.insert(rows, ME, 0, atomic=True) == [EXISTS, CREATED, EXISTS, CREATED]
    assert store.count_tasks() == 3


def test_insert_holds_rows_as_the_claim_mode_says(store: TaskStore) -> None:
    free, mine, armed = task("free", NOW + 10), task("mine", NOW + 20), task("armed", NOW + 30)
    [free_row] = insert(store, free)
    [mine_row] = insert(store, mine, mode=ClaimMode.CLAIM, lease_until_ms=NOW + LEASE)
    [armed_row] = insert(store, armed, mode=ClaimMode.ARM, lease_until_ms=NOW + LEASE)
    assert [state(store, t) for t in ("free", "mine", "armed")] == [
        TaskState.SCHEDULED,
        TaskState.SCHEDULED,
        TaskState.FIRING,
    ]
    # Not claimed: not ours to arm; claimed rows are ours, and nobody else's to take.
    assert not held_by(store, ME, Claim(free, free_row.rev, False))
    assert held_by(store, ME, Claim(mine, mine_row.rev, False))
    assert held_by(store, ME, Claim(armed, armed_row.rev, True))
    assert ids(take(store, OTHER, now_ms=NOW + LEASE)) == ["free"]
    assert store.cancel(["armed"]) == [TOO_LATE]


def test_insert_of_nothing(store: TaskStore) -> None:
    assert store.insert([], ME, 0, atomic=False) == []
    assert store.insert([], ME, 0, atomic=True) == []


def test_insert_and_cancel_of_more_rows_than_one_statement_takes(store: TaskStore) -> None:
    many = [task(f"t{i:05d}", NOW + i) for i in range(2100)]
    insert(store, *many, atomic=True)
    rows = [NewRow(t) for t in many] + [NewRow(task("new"))]
    assert store.insert(rows, ME, 0, atomic=False) == [EXISTS] * 2100 + [CREATED]
    assert store.count_tasks() == 2101
    names = [t.id for t in many]
    assert store.cancel([*names, names[0]]) == [CANCELLED] * 2100 + [NOT_FOUND]
    assert store.count_tasks() == 1


# -- claim --------------------------------------------------------------------------------------


def test_claim_takes_the_earliest_due_by_the_horizon_up_to_the_limit(store: TaskStore) -> None:
    for name, offset in [("d", 400), ("a", 100), ("e", 500), ("c", 300), ("b", 200)]:
        insert(store, task(name, NOW + offset))
    assert ids(take(store, horizon_ms=NOW + 400, limit=2)) == ["a", "b"]
    assert ids(take(store, horizon_ms=NOW + 400, limit=2)) == ["c", "d"]  # due == horizon: in
    assert take(store, horizon_ms=NOW + 400, limit=2) == []  # "e" is beyond the horizon
    assert take(store, horizon_ms=FAR, limit=0) == []
    assert ids(take(store, horizon_ms=FAR)) == ["e"]


def test_claim_hands_out_each_rows_task_and_revision(store: TaskStore) -> None:
    a, b = task("a", NOW + 100, b"pa"), task("b", NOW + 900, rk="x.y")
    [ra, rb] = insert(store, a, b)
    assert take(store, arm_until_ms=NOW + 200) == [Claim(a, ra.rev, True), Claim(b, rb.rev, False)]
    [ca, cb] = [c for c in take(store, now_ms=NOW + LEASE + 1, arm_until_ms=0)]
    assert (ca.task.payload, cb.task.routing_key, ca.task.attempts) == (b"pa", "x.y", 0)


def test_claim_arms_rows_due_by_the_arm_horizon(store: TaskStore) -> None:
    insert(store, task("a", NOW + 100), task("b", NOW + 200), task("c", NOW + 201))
    claims = take(store, arm_until_ms=NOW + 200)
    assert [(c.task.id, c.armed) for c in claims] == [("a", True), ("b", True), ("c", False)]
    assert [state(store, t) for t in "abc"] == [
        TaskState.FIRING,
        TaskState.FIRING,
        TaskState.SCHEDULED,
    ]


def test_a_claim_is_exclusive_until_its_lease_expires(store: TaskStore) -> None:
    insert(store, task("a", NOW + 100))
    [mine] = take(store, ME, now_ms=NOW, lease_until_ms=NOW + LEASE)
    assert take(store, OTHER, now_ms=NOW + 1) == []
    assert take(store, ME, now_ms=NOW + 1) == []  # not claimed twice by the holder either
    assert take(store, OTHER, now_ms=NOW + LEASE) == []  # claimable once claim_until_ms < now
    [theirs] = take(store, OTHER, now_ms=NOW + LEASE + 1)
    assert theirs == mine  # same row, same revision
    assert not held_by(store, ME, mine)  # taken over
    assert held_by(store, OTHER, theirs)


def test_a_row_armed_by_an_instance_that_died_comes_back_armed(store: TaskStore) -> None:
    dead = task("dead", NOW + 10**6)  # far beyond any arm horizon
    [row] = insert(store, dead, mode=ClaimMode.ARM, instance="gone", lease_until_ms=NOW + 5)
    assert take(store, now_ms=NOW + 5) == []
    assert take(store, now_ms=NOW + 6, arm_until_ms=NOW + 6) == [Claim(dead, row.rev, True)]
    assert state(store, "dead") is TaskState.FIRING
    assert store.cancel(["dead"]) == [TOO_LATE]
    assert held_by(store, ME, Claim(dead, row.rev, True))


def test_concurrent_claims_never_hand_out_a_row_twice(store: TaskStore) -> None:
    insert(store, *[task(f"t{i:03d}", NOW + i) for i in range(300)], atomic=True)
    taken: list[list[str]] = [[] for _ in range(4)]

    def claimer(n: int) -> None:
        while batch := take(store, f"i{n}", limit=7):
            taken[n].extend(ids(batch))

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    every = [tid for part in taken for tid in part]
    assert sorted(every) == [f"t{i:03d}" for i in range(300)]


# -- arm ----------------------------------------------------------------------------------------


def test_arm_commits_our_claims_at_their_revision(store: TaskStore) -> None:
    insert(store, task("a"), task("b"))
    claims = take(store)
    assert store.arm(ME, claims) == claims
    assert state(store, "a") is TaskState.FIRING
    assert store.cancel(["a", "b"]) == [TOO_LATE, TOO_LATE]
    assert store.arm(ME, claims) == claims  # already armed at that revision: armed


def test_arm_drops_a_stale_revision(store: TaskStore) -> None:
    a = task("a")
    [row] = insert(store, a, mode=ClaimMode.CLAIM)
    stale, current = Claim(a, row.rev ^ 1, False), Claim(a, row.rev, False)
    assert store.arm(ME, [stale]) == []
    assert state(store, "a") is TaskState.SCHEDULED
    assert store.arm(ME, [stale, current]) == [current]
    assert store.arm(ME, [stale]) == []  # armed now, still not at that revision


def test_arm_drops_claims_of_another_instance_or_gone_rows(store: TaskStore) -> None:
    a, b = task("a"), task("b")
    insert(store, a, b)
    [ca, cb] = take(store, OTHER)
    assert store.arm(ME, [ca, cb]) == []  # not claimed by the caller
    assert store.cancel(["b"]) == [CANCELLED]
    assert store.arm(OTHER, [ca, cb]) == [ca]  # "b" is gone
    assert state(store, "a") is TaskState.FIRING


def test_arm_drops_a_row_cancelled_and_created_again(store: TaskStore) -> None:
    a = task("a")
    insert(store, a)
    [old] = take(store)
    assert store.cancel(["a"]) == [CANCELLED]
    insert(store, a, mode=ClaimMode.CLAIM)  # same id and content, new revision, ours
    assert store.arm(ME, [old]) == []
    assert state(store, "a") is TaskState.SCHEDULED


def test_arm_of_an_expired_claim_still_ours_arms_it(store: TaskStore) -> None:
    insert(store, task("a"))
    [mine] = take(store, lease_until_ms=NOW + 10)
    assert store.arm(ME, [mine]) == [mine]  # nobody took it over meanwhile


def test_arm_of_nothing(store: TaskStore) -> None:
    assert store.arm(ME, []) == []


# -- delete_fired -------------------------------------------------------------------------------


def test_delete_fired_deletes_only_armed_rows(store: TaskStore) -> None:
    armed, other = insert(
        store, task("armed"), task("other-armed"), mode=ClaimMode.ARM, instance=OTHER
    )
    [claimed] = insert(store, task("claimed"), mode=ClaimMode.CLAIM)
    [free] = insert(store, task("free"))
    asked = [
        ("armed", armed.rev),
        ("claimed", claimed.rev),
        ("free", free.rev),
        ("nope", 1),
        ("armed", armed.rev),
        ("other-armed", other.rev),
    ]
    assert store.delete_fired(asked) == 2  # an id given twice is deleted once
    assert store.get("armed") is None and store.get("other-armed") is None
    assert state(store, "claimed") is TaskState.SCHEDULED
    assert state(store, "free") is TaskState.SCHEDULED
    assert store.delete_fired([("armed", armed.rev)]) == 0
    assert store.delete_fired([]) == 0


def test_delete_fired_removes_the_confirmed_revision_only(store: TaskStore) -> None:
    # A stale copy's confirm (an instance paused past its lease) names the old
    # revision: the id's newer incarnation, armed too, stays.
    [old] = insert(store, task("x", payload=b"old"), mode=ClaimMode.ARM, instance=OTHER)
    assert store.delete_fired([("x", old.rev)]) == 1
    [new] = insert(store, task("x", payload=b"new"), mode=ClaimMode.ARM)
    assert new.rev != old.rev
    assert store.delete_fired([("x", old.rev)]) == 0
    assert state(store, "x") is TaskState.FIRING
    assert store.delete_fired([("x", new.rev)]) == 1
    assert store.get("x") is None


def test_claims_carry_the_revision_in_the_task(store: TaskStore) -> None:
    [row] = insert(store, task("due", NOW + 10))
    [claim] = take(store)
    assert claim.task.rev == claim.rev == row.rev


# -- defer --------------------------------------------------------------------------------------


def _armed(store: TaskStore, name: str, due_ms: int = NOW + 100) -> Claim:
    [row] = insert(store, task(name, due_ms), mode=ClaimMode.ARM)
    return Claim(task(name, due_ms), row.rev, True)


def test_defer_puts_an_undelivered_row_back_for_later(store: TaskStore) -> None:
    held = _armed(store, "a")
    deferral = Deferral("a", held.rev, NOT_BEFORE := NOW + 5000)
    assert store.defer(ME, [deferral]) == 1
    assert state(store, "a") is TaskState.SCHEDULED  # disarmed
    assert not held_by(store, ME, held)  # unclaimed, and at a new revision
    assert take(store, OTHER, now_ms=NOT_BEFORE) == []  # claimable only after not_before_ms
    [again] = take(store, OTHER, now_ms=NOT_BEFORE + 1)
    assert (again.rev, again.task.attempts, again.armed) == (deferral.new_rev, 1, False)
    assert store.arm(OTHER, [again]) == [again]
    assert store.defer(OTHER, [Deferral("a", again.rev, NOT_BEFORE + 10)]) == 1
    [third] = take(store, now_ms=NOT_BEFORE + 11)
    assert third.task.attempts == 2  # one per failed delivery


def test_a_deferred_row_can_be_cancelled_again(store: TaskStore) -> None:
    held = _armed(store, "a")
    assert store.cancel(["a"]) == [TOO_LATE]
    assert store.defer(ME, [Deferral("a", held.rev, NOW + 5000)]) == 1
    assert store.cancel(["a"]) == [CANCELLED]


def test_defer_moves_only_our_armed_row_at_the_revision_we_hold(store: TaskStore) -> None:
    held = _armed(store, "a")
    [crow] = insert(store, task("claimed"), mode=ClaimMode.CLAIM)
    claimed = Claim(task("claimed"), crow.rev, False)  # ours, not armed
    theirs = _armed(store, "b")
    assert store.defer(OTHER, [Deferral("a", held.rev, NOW)]) == 0  # not the holder
    assert store.defer(ME, [Deferral("a", held.rev ^ 1, NOW)]) == 0  # another revision
    assert store.defer(ME, [Deferral("claimed", claimed.rev, NOW)]) == 0  # not armed
    assert store.defer(ME, [Deferral("nope", 1, NOW)]) == 0
    assert store.defer(OTHER, [Deferral("b", theirs.rev, NOW)]) == 0
    assert state(store, "a") is TaskState.FIRING
    assert held_by(store, ME, held)
    # The same deferral twice in one call: the first moves the row to a new
    # revision, so the second finds nothing.
    twice = Deferral("a", held.rev, NOW + 5000)
    assert store.defer(ME, [twice, twice]) == 1


# -- renew and release --------------------------------------------------------------------------


def test_renew_extends_only_the_claims_the_caller_holds(store: TaskStore) -> None:
    insert(store, task("a"), task("b"), mode=ClaimMode.CLAIM, lease_until_ms=NOW + 10)
    insert(store, task("c"), mode=ClaimMode.CLAIM, instance=OTHER, lease_until_ms=NOW + 10)
    insert(store, task("free"))
    # "a" has expired (NOW + 10 < now) but nobody took it: still ours to renew.
    asked = ["a", "c", "free", "nope", "a"]
    assert store.renew_claims(ME, asked, NOW + 2 * LEASE) == 1  # an id given twice counts once
    assert ids(take(store, OTHER, now_ms=NOW + LEASE, lease_until_ms=FAR)) == ["b", "c", "free"]
    assert take(store, OTHER, now_ms=NOW + 2 * LEASE) == []
    assert ids(take(store, OTHER, now_ms=NOW + 2 * LEASE + 1)) == ["a"]
    assert store.renew_claims(ME, ["a"], NOW + 3 * LEASE) == 0  # taken over
    assert store.renew_claims(ME, [], NOW) == 0


def test_renew_to_the_lease_a_claim_has_counts_nothing(store: TaskStore) -> None:
    # MySQL counts the rows changed, not the rows matched.
    insert(store, task("a"), task("b"), mode=ClaimMode.CLAIM, lease_until_ms=NOW + LEASE)
    assert store.renew_claims(ME, ["a", "b"], NOW + LEASE) == 0
    assert store.renew_claims(ME, ["a", "b"], NOW + LEASE + 1) == 2


def test_release_gives_up_all_of_an_instances_claims(store: TaskStore) -> None:
    insert(store, task("a", NOW + 1), task("b", NOW + 2), mode=ClaimMode.CLAIM)
    insert(store, task("armed", NOW + 3), mode=ClaimMode.ARM)
    insert(store, task("theirs", NOW + 4), mode=ClaimMode.CLAIM, instance=OTHER)
    insert(store, task("free", NOW + 5))
    assert store.release_claims(ME) == 3
    assert store.release_claims(ME) == 0
    claims = take(store, OTHER, now_ms=NOW + 1)
    # Released rows are claimable at once; an armed one stays armed.
    assert [(c.task.id, c.armed) for c in claims] == [
        ("a", False),
        ("b", False),
        ("armed", True),
        ("free", False),
    ]


def test_release_of_some_claims(store: TaskStore) -> None:
    insert(store, task("a", NOW + 1), task("b", NOW + 2), task("c", NOW + 3), mode=ClaimMode.CLAIM)
    insert(store, task("theirs"), mode=ClaimMode.CLAIM, instance=OTHER)
    assert store.release_claims(ME, ["a", "c", "a", "theirs", "nope"]) == 2
    assert store.release_claims(ME, []) == 0
    assert ids(take(store, OTHER, now_ms=NOW + 1)) == ["a", "c"]
    assert store.renew_claims(ME, ["b"], NOW + 2 * LEASE) == 1  # "b" is still ours


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_of_unarmed_rows_alone(store: TaskStore) -> None:
    # Nothing armed, nothing racing: every row goes in one go.
    insert(store, task("a"), task("b"))
    insert(store, task("claimed"), mode=ClaimMode.CLAIM, instance=OTHER)
    assert store.cancel(["a", "claimed", "b"]) == [CANCELLED] * 3
    assert store.count_tasks() == 0
    assert store.cancel(["a"]) == [NOT_FOUND]


def test_cancel_answers_per_id(store: TaskStore) -> None:
    insert(store, task("a"), task("b"))
    insert(store, task("armed"), mode=ClaimMode.ARM, instance=OTHER)
    asked = ["armed", "a", "nope", "a", "armed", "b"]
    assert store.cancel(asked) == [TOO_LATE, CANCELLED, NOT_FOUND, NOT_FOUND, TOO_LATE, CANCELLED]
    assert store.get("a") is None and store.get("b") is None
    assert state(store, "armed") is TaskState.FIRING


def test_an_id_cancelled_twice_in_one_call_is_cancelled_then_not_found(store: TaskStore) -> None:
    insert(store, task("a"))
    assert store.cancel(["a", "a"]) == [CANCELLED, NOT_FOUND]


def test_a_cancelled_claim_fails_to_arm(store: TaskStore) -> None:
    insert(store, task("a"))
    [held] = take(store)
    assert store.cancel(["a"]) == [CANCELLED]
    assert store.arm(ME, [held]) == []
    assert store.get("a") is None


# -- reschedule ---------------------------------------------------------------------------------


def test_reschedule_moves_an_unarmed_row_at_a_new_revision(store: TaskStore) -> None:
    a = task("a", NOW + 100, b"p", "k.1")
    insert(store, a)
    [held] = take(store)
    move = Move("a", NOW + 700)
    assert store.reschedule([move], ME, NOW + LEASE) == [
        Moved(RescheduleResult.RESCHEDULED, task("a", NOW + 700, b"p", "k.1"))
    ]
    assert not held_by(store, ME, held)  # the copy in memory fails to arm
    assert store.get("a") == TaskInfo(task("a", NOW + 700, b"p", "k.1"), TaskState.SCHEDULED)
    assert take(store, horizon_ms=NOW + 699) == []
    assert take(store) == [Claim(task("a", NOW + 700, b"p", "k.1"), move.rev, False)]


def test_reschedule_holds_the_row_as_the_claim_mode_says(store: TaskStore) -> None:
    insert(store, task("free"), task("mine"), task("armed"), mode=ClaimMode.CLAIM, instance=OTHER)
    moves = [
        Move("free", NOW + 1),
        Move("mine", NOW + 2, ClaimMode.CLAIM),
        Move("armed", NOW + 3, ClaimMode.ARM),
    ]
    outcomes = store.reschedule(moves, ME, NOW + LEASE)
    assert [o.result for o in outcomes] == [RescheduleResult.RESCHEDULED] * 3
    assert state(store, "armed") is TaskState.FIRING
    assert held_by(store, ME, Claim(task("mine", NOW + 2), moves[1].rev, False))
    assert not held_by(store, OTHER, Claim(task("mine", NOW + 2), moves[1].rev, False))
    assert store.cancel(["armed"]) == [TOO_LATE]
    # Unclaimed: anyone's at once, at the move's revision.
    assert take(store, OTHER, now_ms=NOW + 1) == [Claim(task("free", NOW + 1), moves[0].rev, False)]


def test_reschedule_of_an_armed_row_is_too_late(store: TaskStore) -> None:
    held = _armed(store, "armed")
    outcomes = store.reschedule([Move("armed", NOW + 900), Move("nope", NOW)], ME, NOW + LEASE)
    assert outcomes == [Moved(RescheduleResult.TOO_LATE), Moved(RescheduleResult.NOT_FOUND)]
    assert store.get("armed") == TaskInfo(held.task, TaskState.FIRING)  # unchanged
    assert held_by(store, ME, held)


def test_reschedule_of_one_id_twice_takes_the_last_move(store: TaskStore) -> None:
    insert(store, task("a", NOW + 100))
    first, last = Move("a", NOW + 200, ClaimMode.ARM), Move("a", NOW + 300)
    moved = Moved(RescheduleResult.RESCHEDULED, task("a", NOW + 300))
    assert store.reschedule([first, last], ME, NOW + LEASE) == [moved, moved]
    assert store.get("a") == TaskInfo(task("a", NOW + 300), TaskState.SCHEDULED)
    assert take(store) == [Claim(task("a", NOW + 300), last.rev, False)]


def test_reschedule_resets_the_failed_attempts(store: TaskStore) -> None:
    held = _armed(store, "a")
    assert store.defer(ME, [Deferral("a", held.rev, NOW)]) == 1
    [outcome] = store.reschedule([Move("a", NOW + 50)], ME, NOW + LEASE)
    assert outcome.task is not None and outcome.task.attempts == 0
    [again] = take(store, now_ms=NOW + 1)
    assert again.task.attempts == 0


def test_reschedule_of_nothing(store: TaskStore) -> None:
    assert store.reschedule([], ME, NOW) == []


# -- what get reads back ------------------------------------------------------------------------


def test_get_reads_the_state_but_not_the_attempts(store: TaskStore) -> None:
    # SELECT_TASK does not select attempts: get always reports 0.
    held = _armed(store, "a")
    assert store.defer(ME, [Deferral("a", held.rev, NOW)]) == 1
    info = store.get("a")
    assert info is not None
    assert (info.state, info.task.attempts) == (TaskState.SCHEDULED, 0)
    [again] = take(store, now_ms=NOW + 1)
    assert again.task.attempts == 1  # claim does read them


def test_a_null_routing_key_reads_back_as_the_default(backend: Backend) -> None:
    store = backend.store
    insert(store, task("a", NOW + 5, b"p"))
    backend.null_routing_key("a")
    expected = task("a", NOW + 5, b"p", DEFAULT_ROUTING_KEY)
    assert store.get("a") == TaskInfo(expected, TaskState.SCHEDULED)
    # Compared as read back: the task with the default key is a retry.
    assert store.insert([NewRow(expected)], ME, 0, atomic=False) == [EXISTS]
    assert store.insert([NewRow(task("a", NOW + 5, b"p"))], ME, 0, atomic=False) == [CONFLICT]
    [moved] = store.reschedule([Move("a", NOW + 6)], ME, NOW + LEASE)
    assert moved.task == task("a", NOW + 6, b"p", DEFAULT_ROUTING_KEY)
    [claimed] = take(store)
    assert claimed.task.routing_key == DEFAULT_ROUTING_KEY


def test_an_empty_routing_key_reads_back_as_the_default(store: TaskStore) -> None:
    blank = task("a", NOW + 5, rk="")
    insert(store, blank)
    assert store.get("a") == TaskInfo(
        task("a", NOW + 5, rk=DEFAULT_ROUTING_KEY), TaskState.SCHEDULED
    )
    # The stored row, read back, differs from the blank task: inserting that
    # again is a conflict, while a repeat within one batch compares as given.
    assert store.insert([NewRow(blank)], ME, 0, atomic=False) == [CONFLICT]
    other = task("b", rk="")
    assert store.insert([NewRow(other), NewRow(other)], ME, 0, atomic=False) == [CREATED, EXISTS]
    assert ids(take(store, arm_until_ms=0)) == ["a", "b"]


# -- schema and lifetime ------------------------------------------------------------------------


def test_check_schema_passes_on_a_current_store(store: TaskStore) -> None:
    store.check_schema()


def test_close_can_be_called_twice(store: TaskStore) -> None:
    insert(store, task("a"))
    store.close()
    store.close()


# -- empty inputs -------------------------------------------------------------------------------


def test_cancel_of_nothing(backend: Backend) -> None:
    """(MySQLStore.cancel([]) raised ValueError from its one-statement path,
    which the protocol says never escapes an adapter.)"""
    assert backend.store.cancel([]) == []


def test_defer_of_nothing(backend: Backend) -> None:
    """(MySQLStore.defer([]) returned -1, the cursor's rowcount when
    executemany ran nothing.)"""
    assert backend.store.defer(ME, []) == 0
