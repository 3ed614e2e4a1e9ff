"""The armer with lanes (docs/design/flow-control.md, section 3b), against
the in-memory store: the rate-limited lane's rows are armed after every
other key's and in at most half the memory, so a limited key's backlog never
delays another key's arming; and a failure of the limited lane's pass does
not lose what lane 0's pass (committed before it) armed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fakes import FakeClock, FakeStore

from triggerhook.domain.arming import Placement, shard_of
from triggerhook.domain.task import Task
from triggerhook.engine.armer import Armer
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.errors import StoreUnavailable
from triggerhook.interfaces import Armed, Lease, NewRow

NOW = 1_700_000_000_000
SHARDS = 4
CAPACITY = 100
LIMITED = "billing.charge"


def _fail(name: str, exc: BaseException) -> None:
    raise AssertionError(f"{name} failed: {exc!r}")


class Lanes:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.clock = FakeClock(NOW)
        self.store = FakeStore(now_ms=self.clock.now_ms, shard_count=SHARDS)
        self.store.open_lanes(lambda key: key == LIMITED)
        self.shards = ShardTable(self.clock, 100)
        self.inventory = Inventory(capacity)
        self.scheduler = Scheduler(
            self.clock, SendBuffer(capacity), self.shards, self.inventory, capacity, _fail
        )
        self.armer = Armer(
            self.clock,
            self.store,
            "me",
            self.shards,
            self.inventory,
            self.scheduler,
            arm_ahead_ms=200,
            interval_ms=10,
            batch_size=capacity,
            on_failure=_fail,
        )
        taken = self.store.acquire("me", 2 * SHARDS, 10_000)
        assert len(taken) == 2 * SHARDS
        self.shards.add(taken, NOW + 10_000)

    def insert(self, prefix: str, count: int, key: str, due_ms: int) -> None:
        rows = [NewRow(Task(f"{prefix}{n}", due_ms, key)) for n in range(count)]
        self.store.insert(rows, atomic=False)

    def held(self) -> dict[str, int]:
        """The armed copies in memory: routing key -> count."""
        found: dict[str, int] = {}
        for task in self.scheduler.take_remaining():
            found[task.routing_key] = found.get(task.routing_key, 0) + 1
        return found


def test_a_limited_backlog_takes_half_the_memory_after_every_other_key() -> None:
    lanes = Lanes()
    lanes.insert("backlog", 3 * CAPACITY, LIMITED, NOW - 60_000)  # due long before the rest
    lanes.insert("steady", 10, "mail.sent", NOW + 100)
    lanes.armer.step(NOW)
    assert lanes.inventory.from_shard(SHARDS) == CAPACITY // 2
    lanes.armer.step(NOW)  # the lane's half is full: nothing more of it
    lanes.insert("later", 10, "mail.sent", NOW + 150)
    lanes.armer.step(NOW)  # another key's new rows find room at once
    assert lanes.held() == {"mail.sent": 20, LIMITED: CAPACITY // 2}


def test_a_memory_of_one_task_still_arms_the_limited_lane() -> None:
    lanes = Lanes(capacity=1)
    lanes.insert("only", 1, LIMITED, NOW)
    lanes.armer.step(NOW)
    assert lanes.held() == {LIMITED: 1}


def test_a_failed_pass_of_the_limited_lane_keeps_lane_0s_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lanes = Lanes()
    lanes.insert("limited", 5, LIMITED, NOW)
    lanes.insert("plain", 5, "mail.sent", NOW)
    arm = lanes.store.arm

    def failing(instance: str, leases: Sequence[Lease], *args: object, **kw: object) -> Armed:
        if min(lease.shard for lease in leases) >= SHARDS:
            raise StoreUnavailable("the limited lane's pass failed")
        return arm(instance, leases, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lanes.store, "arm", failing)
    lanes.armer.step(NOW)  # lane 0's pass committed: its tasks must reach memory
    monkeypatch.setattr(lanes.store, "arm", arm)
    lanes.armer.step(NOW)
    assert lanes.held() == {"mail.sent": 5, LIMITED: 5}


def test_a_failed_pass_with_nothing_armed_before_it_fails_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lanes = Lanes()
    lanes.insert("limited", 5, LIMITED, NOW)
    lanes.store.fail_next("arm", StoreUnavailable("down"))
    with pytest.raises(StoreUnavailable):
        lanes.armer.step(NOW)  # the armer's loop backs off and tries again
    assert lanes.inventory.room() == CAPACITY  # its reservation given back


@given(
    st.integers(1, 64),
    st.text("abcdefgh0123456789._-", min_size=1, max_size=20),
    st.booleans(),
)
def test_a_row_is_written_to_one_of_its_candidate_shards(
    count: int, task_id: str, lanes: bool
) -> None:
    placement = Placement(count, 2 if lanes else 1, lambda key: key == LIMITED)
    home = shard_of(task_id, count)
    assert placement.candidates(task_id) == ((home, home + count) if lanes else (home,))
    for key in (LIMITED, "other"):
        shard = placement.shard(task_id, key)
        assert shard in placement.candidates(task_id)
        assert placement.lane(shard) == (1 if lanes and key == LIMITED else 0)
    assert placement.total == count * (2 if lanes else 1)
