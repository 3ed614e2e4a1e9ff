"""Lanes against every store (docs/design/flow-control.md, section 3b; the
model: models/lanes.pml): a routing key a rate limit names is written to its
own shard (the id's home shard + N) and armed only there; writes by id find
a row in either lane; a replace moves a row between lanes, unarmed; and an
instance that read the placement before the lane was added neither judges a
row in a shard it did not lock nor fails: it reads the placement again."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from support.stores import SHARD_COUNT

from triggerhook.domain.arming import Placement, shard_of
from triggerhook.domain.task import (
    CancelResult,
    InsertOutcome,
    OnConflict,
    RescheduleResult,
    Task,
)
from triggerhook.interfaces import Lease, Move, NewRow, TaskStore

ME = "me"
LEASE = 60_000
LIMITED = "billing.charge"
OTHER = "mail.sent"


def limited(key: str) -> bool:
    return key.startswith("billing.")


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


@pytest.fixture
def lanes(store: TaskStore) -> TaskStore:
    store.open_lanes(limited)
    return store


def held(store: TaskStore) -> tuple[list[Lease], list[Lease]]:
    """Every shard acquired: lane 0's leases, and the limited lane's."""
    got = [a.lease for a in store.acquire(ME, 4 * SHARD_COUNT, LEASE)]
    assert len(got) == 2 * SHARD_COUNT
    return (
        [lease for lease in got if lease.shard < SHARD_COUNT],
        [lease for lease in got if lease.shard >= SHARD_COUNT],
    )


def armed(store: TaskStore, leases: Iterable[Lease], horizon_ms: int) -> dict[str, Task]:
    return {t.id: t for t in store.arm(ME, list(leases), horizon_ms, 1000).tasks}


def soon_armed_later_not(store: TaskStore, now: int) -> None:
    """Two tasks of the limited key in its lane: "soon" armed there, "later" not."""
    soon = Task("soon", now + 1000, LIMITED, b"p")
    later = Task("later", now + 600_000, LIMITED, b"p")
    store.insert([NewRow(soon), NewRow(later)], atomic=True)
    _, second = held(store)
    assert set(armed(store, second, now + 60_000)) == {"soon"}


def test_the_lane_is_added_once_and_its_shards_are_acquired(store: TaskStore) -> None:
    assert store.placement() == Placement(SHARD_COUNT)  # no limits: no lane
    store.open_lanes(limited)
    store.open_lanes(limited)  # again (a restart, another instance): nothing more
    placement = store.placement(fresh=True)
    assert (placement.lanes, placement.total) == (2, 2 * SHARD_COUNT)
    first, second = held(store)
    assert [lease.shard for lease in second] == list(range(SHARD_COUNT, 2 * SHARD_COUNT))
    assert len(first) == SHARD_COUNT


def test_a_limited_key_is_armed_only_in_its_lane(lanes: TaskStore, now: int) -> None:
    a, b = Task("a", now + 1000, LIMITED, b"p"), Task("b", now + 1000, OTHER, b"p")
    lanes.insert([NewRow(a), NewRow(b)], atomic=True)
    first, second = held(lanes)
    assert set(armed(lanes, first, now + 60_000)) == {"b"}
    got = armed(lanes, second, now + 60_000)
    assert set(got) == {"a"}
    assert got["a"].shard == shard_of("a", SHARD_COUNT) + SHARD_COUNT
    assert got["a"].routing_key == LIMITED and got["a"].payload == b"p"


def test_writes_by_id_find_a_row_in_the_limited_lane(lanes: TaskStore, now: int) -> None:
    soon_armed_later_not(lanes, now)
    moved = lanes.reschedule([Move("soon", now + 5000), Move("later", now + 700_000)])
    assert [m.result for m in moved] == [RescheduleResult.TOO_LATE, RescheduleResult.RESCHEDULED]
    assert lanes.cancel(["soon", "later", "none"]) == [
        CancelResult.TOO_LATE,
        CancelResult.CANCELLED,
        CancelResult.NOT_FOUND,
    ]


def test_a_replace_moves_the_row_between_lanes_unarmed(lanes: TaskStore, now: int) -> None:
    lanes.insert([NewRow(Task("r", now + 1000, OTHER, b"1"))], atomic=True)
    moved = Task("r", now + 2000, LIMITED, b"2")
    [done] = lanes.insert([NewRow(moved, on_conflict=OnConflict.REPLACE)], atomic=True)
    assert done.outcome is InsertOutcome.REPLACED
    first, second = held(lanes)
    assert armed(lanes, first, now + 60_000) == {}
    back = Task("r", now + 3000, OTHER, b"3")
    [done] = lanes.insert([NewRow(back, on_conflict=OnConflict.REPLACE)], atomic=True)
    assert done.outcome is InsertOutcome.REPLACED
    assert armed(lanes, second, now + 60_000) == {}  # nothing armed there: it moved back
    got = armed(lanes, first, now + 60_000)
    assert set(got) == {"r"} and got["r"].payload == b"3"
    # Armed in lane 0 now: a replace into the other lane is too late, and moves nothing.
    [late] = lanes.insert([NewRow(moved, on_conflict=OnConflict.REPLACE)], atomic=False)
    assert late.outcome is InsertOutcome.TOO_LATE
    assert armed(lanes, second, now + 60_000) == {}


def test_an_instance_that_read_no_lane_reads_it_again(lanes: TaskStore, now: int) -> None:
    soon_armed_later_not(lanes, now)
    # As an instance that read the placement before another added the lane:
    # it locks only the home shards, finds the rows elsewhere, and must not
    # judge them there (an armed row would be cancelled).
    stale = Placement(SHARD_COUNT)
    lanes._placement = stale  # type: ignore[attr-defined]
    assert lanes.cancel(["soon", "later"]) == [CancelResult.TOO_LATE, CancelResult.CANCELLED]
    assert lanes.placement().lanes == 2
    lanes._placement = stale  # type: ignore[attr-defined]
    [moved] = lanes.reschedule([Move("soon", now + 9000)])
    assert moved.result is RescheduleResult.TOO_LATE
