"""Inventory: bounded memory (reserve, then admit or release), row revisions,
and copies held per shard."""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory

THREADS = 16
JOIN_S = 30.0


def claim(task_id: str, rev: int = 1, due_ms: int = 1000, shard: int = 0) -> Task:
    """An armed copy of ``task_id``'s row at ``rev`` in ``shard``."""
    return Task(task_id, due_ms, "rk", rev=rev, shard=shard)


def ids(tasks: list[Task]) -> list[str]:
    return [t.id for t in tasks]


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every few microseconds so that races show up."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def run_together(target: Callable[[int], None], threads: int = THREADS) -> list[BaseException]:
    """Run ``target(n)`` in ``threads`` threads released at once; their errors."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def body(n: int) -> None:
        try:
            barrier.wait(timeout=JOIN_S)
            target(n)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=body, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(JOIN_S)
    assert not any(worker.is_alive() for worker in workers), "a thread hung"
    return errors


# -- reserve: concurrent claimers cannot overshoot the capacity ------------------------


@pytest.mark.usefixtures("fast_switching")
@pytest.mark.parametrize("held", [0, 7])
def test_concurrent_reserve_never_grants_more_than_the_room(held: int) -> None:
    capacity = 50
    inventory = Inventory(capacity)
    inventory.admit([claim(f"held-{i}") for i in range(held)], 0)
    granted: list[int] = []
    lock = threading.Lock()

    def reserve_until_refused(n: int) -> None:
        # Asks far more than the room, in odd sizes, until refused (or clearly
        # granted too much: an inventory that never refuses must not hang the test).
        while (got := inventory.reserve(1 + n % 3)) > 0:
            assert got <= 1 + n % 3
            with lock:
                granted.append(got)
                if sum(granted) > capacity:
                    return

    assert run_together(reserve_until_refused) == []

    assert sum(granted) == capacity - held  # every unit once, none twice
    assert inventory.room() == 0
    assert inventory.reserve(1) == 0
    assert len(inventory) == held  # reserving holds nothing yet


@pytest.mark.usefixtures("fast_switching")
def test_concurrent_reserve_admit_and_release_keep_memory_bounded() -> None:
    capacity = 40
    inventory = Inventory(capacity)
    names = itertools.count()
    peaks: list[int] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        for round_ in range(200):
            reserved = inventory.reserve(5)
            if not reserved:
                continue
            if round_ % 4 == 0:  # the claim failed: give the room back
                inventory.release(reserved)
                continue
            # The store may return fewer rows than reserved; admit settles it all.
            claims = [claim(f"t{next(names)}") for _ in range(reserved - n % 2)]
            fresh = inventory.admit(claims, reserved)
            assert fresh == claims
            size = len(inventory)
            with lock:
                peaks.append(size)
            inventory.forget(
                (t.id, t.rev) for t in fresh[: len(fresh) // 2 + 1]
            )  # some fire or are dropped

    assert run_together(claimer) == []

    assert peaks
    assert max(peaks) <= capacity
    # Every reservation was settled or released: the room is what is not held.
    assert inventory.room() == capacity - len(inventory)


def test_reserve_counts_what_is_held_and_what_is_reserved() -> None:
    inventory = Inventory(5)
    inventory.admit([claim("a"), claim("b")], 0)
    assert inventory.reserve(2) == 2
    assert inventory.room() == 1
    assert inventory.reserve(4) == 1  # only what is left
    assert inventory.room() == 0
    assert inventory.reserve(1) == 0
    assert inventory.reserve(0) == 0
    assert len(inventory) == 2


# -- release -----------------------------------------------------------------------------


def test_release_returns_the_reserved_room() -> None:
    inventory = Inventory(10)
    inventory.admit([claim("held")], 0)
    assert inventory.reserve(4) == 4
    assert inventory.reserve(3) == 3
    assert inventory.room() == 2
    inventory.release(4)
    assert inventory.room() == 6
    inventory.release(3)
    assert inventory.room() == 9
    assert len(inventory) == 1
    assert inventory.reserve(100) == 9  # all of it can be reserved again


def test_release_of_more_than_reserved_never_makes_room_out_of_held_tasks() -> None:
    inventory = Inventory(3)
    inventory.admit([claim("a"), claim("b")], 0)
    assert inventory.reserve(1) == 1
    inventory.release(5)
    assert inventory.room() == 1
    assert inventory.reserve(5) == 1


def test_admit_settles_the_whole_reservation_even_for_fewer_claims() -> None:
    inventory = Inventory(10)
    assert inventory.reserve(5) == 5
    assert inventory.room() == 5
    fresh = inventory.admit([claim("a"), claim("b")], 5)  # the store had only two rows
    assert ids(fresh) == ["a", "b"]
    assert len(inventory) == 2
    assert inventory.room() == 8


# -- admit and revisions ------------------------------------------------------------------


def test_admit_of_an_already_held_copy_at_the_same_revision_is_not_fresh() -> None:
    inventory = Inventory(10)
    first = claim("x", rev=11)
    assert inventory.admit([first], 0) == [first]
    assert inventory.reserve(2) == 2
    # Read again (inherited after this instance took its own shard back): same
    # row, same revision.
    assert inventory.admit([claim("x", rev=11), claim("y")], 2) == [claim("y")]
    assert sorted(inventory.snapshot()) == ["x", "y"]
    assert len(inventory) == 2
    assert inventory.room() == 8  # the reservation was settled all the same
    assert inventory.admit([first], 0) == []


def test_admit_replaces_an_older_revision_and_reports_it_fresh() -> None:
    inventory = Inventory(10)
    old = claim("x", rev=1, due_ms=5000)
    assert inventory.admit([old], 0) == [old]
    assert inventory.reserve(1) == 1
    # Cancelled and created again (same content or not): a new row revision.
    new = claim("x", rev=2, due_ms=5000)
    assert inventory.admit([new], 1) == [new]
    assert inventory.snapshot() == ["x"]
    assert len(inventory) == 1  # one task in memory, not two
    assert inventory.room() == 9
    assert inventory.admit([new], 0) == []  # the new revision is what is held now
    assert inventory.rev_of("x") == 2
    # An id is held at one revision only: the older one comes back fresh too.
    assert inventory.admit([old], 0) == [old]
    assert inventory.rev_of("x") == 1


def test_forgetting_an_old_copy_keeps_the_newer_revision_held() -> None:
    inventory = Inventory(10)
    inventory.admit([claim("x", rev=1)], 0)
    inventory.admit([claim("x", rev=2)], 0)
    inventory.forget([("x", 1)])  # the old copy's confirm, or its shard was lost
    assert inventory.snapshot() == ["x"]
    assert inventory.rev_of("x") == 2
    assert inventory.room() == 9
    inventory.forget([("x", 2)])
    assert inventory.snapshot() == []
    assert inventory.rev_of("x") is None
    assert inventory.room() == 10


def test_forget_drops_only_the_given_copies() -> None:
    inventory = Inventory(10)
    inventory.admit([claim("a", rev=1), claim("b", rev=2), claim("c", rev=3)], 0)
    inventory.forget([("a", 1), ("c", 3), ("unknown", 4)])
    assert inventory.snapshot() == ["b"]
    inventory.forget([("a", 1)])  # forgetting twice is harmless
    assert inventory.snapshot() == ["b"]
    assert inventory.room() == 9


def test_a_confirmed_revision_is_forgotten_and_a_newer_one_stays() -> None:
    inventory = Inventory(10)
    inventory.admit([claim("a", rev=1), claim("b", rev=2)], 0)
    inventory.forget([("a", 1), ("unknown", 5)])  # rows deleted after their events were confirmed
    assert inventory.snapshot() == ["b"]
    assert inventory.admit([claim("a", rev=1)], 0) == [claim("a", rev=1)]  # held again
    assert sorted(inventory.snapshot()) == ["a", "b"]
    inventory.forget([("b", 1)])  # an older revision's confirm: b is held at 2
    assert sorted(inventory.snapshot()) == ["a", "b"]


# -- copies per shard (a shard is handed over once none of its copies is held) ----------


def test_copies_are_counted_per_shard() -> None:
    inventory = Inventory(10)
    inventory.admit([claim("a", shard=1), claim("b", shard=1), claim("c", shard=2)], 0)
    assert (inventory.in_shard(1), inventory.in_shard(2), inventory.in_shard(3)) == (2, 1, 0)
    inventory.forget([("a", 1)])
    assert inventory.in_shard(1) == 1
    inventory.forget([("b", 1), ("c", 1)])
    assert (inventory.in_shard(1), inventory.in_shard(2)) == (0, 0)


def test_a_new_revision_counts_once_in_its_own_shard() -> None:
    inventory = Inventory(10)
    inventory.admit([claim("x", rev=1, shard=4)], 0)
    inventory.admit([claim("x", rev=2, shard=4)], 0)  # re-created: replaces, not adds
    assert inventory.in_shard(4) == 1
    inventory.admit([claim("x", rev=1, shard=4)], 0)  # a stale copy read again
    assert inventory.in_shard(4) == 1
    inventory.forget([("x", 1)])
    assert inventory.in_shard(4) == 0


# One step: admit a batch of (id, rev, shard, epoch) copies, forget (id, rev)
# pairs, or forget copies.
_COPIES = st.lists(
    st.tuples(st.sampled_from("abcde"), st.integers(1, 3), st.integers(0, 2), st.integers(1, 2)),
    max_size=6,
)
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("admit"), _COPIES),
        st.tuples(st.just("forget"), _COPIES),
        st.tuples(st.just("forget_copies"), _COPIES),
    ),
    max_size=12,
)


class _Model:
    """What Inventory holds, plainly: id -> (rev, shard, epoch)."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[int, int, int]] = {}

    def admit(self, tasks: list[Task]) -> list[Task]:
        fresh = []
        for task in tasks:
            if self.held.get(task.id) != (task.rev, task.shard, task.epoch):
                self.held[task.id] = (task.rev, task.shard, task.epoch)
                fresh.append(task)
        return fresh

    def forget(self, tasks: list[Task]) -> None:
        for task in tasks:
            if task.id in self.held and self.held[task.id][0] == task.rev:
                del self.held[task.id]

    def forget_copies(self, tasks: list[Task]) -> None:
        for task in tasks:
            if self.held.get(task.id) == (task.rev, task.shard, task.epoch):
                del self.held[task.id]

    def in_shard(self, shard: int) -> int:
        return sum(1 for _rev, s, _epoch in self.held.values() if s == shard)


def _copies(tasks: list[Task]) -> list[tuple[str, int, int, int]]:
    return [(t.id, t.rev, t.shard, t.epoch) for t in tasks]


@given(steps=_STEPS)
def test_copies_per_shard_always_count_what_is_held(
    steps: list[tuple[str, list[tuple[str, int, int, int]]]],
) -> None:
    """Whatever is admitted (repeats in one batch too), replaced and
    forgotten: each shard's count is the copies held in it (a shard is
    released when its count reaches 0), and admit returns exactly the copies
    it took in, as a plain model of it says."""
    inventory = Inventory(100)
    model = _Model()
    for op, copies in steps:
        tasks = [Task(i, 1000, "rk", rev=rev, shard=s, epoch=e) for i, rev, s, e in copies]
        if op == "admit":
            assert _copies(inventory.admit(tasks, 0)) == _copies(model.admit(tasks))
        elif op == "forget":
            inventory.forget([(t.id, t.rev) for t in tasks])
            model.forget(tasks)
        else:
            inventory.forget_copies(tasks)
            model.forget_copies(tasks)
        assert [inventory.in_shard(s) for s in range(3)] == [model.in_shard(s) for s in range(3)]
        assert len(inventory) == len(model.held)
