"""DueHeap: earliest fire time first, ties in arrival order, bounded pops."""

from __future__ import annotations

import random

import pytest

from triggerhook.domain.heap import DueHeap
from triggerhook.domain.task import Task


def task(name: str, due_ms: int) -> Task:
    return Task(name, due_ms, "rk")


def ids(tasks: list[Task]) -> list[str]:
    return [t.id for t in tasks]


def test_empty_heap() -> None:
    heap: DueHeap[Task] = DueHeap()
    assert len(heap) == 0
    assert heap.next_fire_ms() is None
    assert heap.pop_until(float("inf"), 10) == []
    assert heap.drain() == []


def test_pops_in_due_order() -> None:
    heap: DueHeap[Task] = DueHeap()
    for name, due in [("c", 30), ("a", 10), ("d", 40), ("b", 20)]:
        heap.push(task(name, due))
    assert len(heap) == 4
    assert heap.next_fire_ms() == 10
    assert ids(heap.pop_until(100, 10)) == ["a", "b", "c", "d"]
    assert len(heap) == 0


def test_ties_keep_arrival_order() -> None:
    heap: DueHeap[Task] = DueHeap()
    heap.push(task("first", 5))
    heap.push_many([task("second", 5), task("third", 5)])
    heap.push(task("early", 1))
    heap.push(task("fourth", 5))
    assert ids(heap.pop_until(5, 10)) == ["early", "first", "second", "third", "fourth"]


def test_identical_tasks_are_never_compared() -> None:
    # Two equal-due entries holding the same Task: the sequence number decides.
    heap: DueHeap[Task] = DueHeap()
    same = task("same", 7)
    heap.push(same)
    heap.push(same)
    assert heap.pop_until(7, 5) == [same, same]


def test_push_with_explicit_fire_time_overrides_due() -> None:
    heap: DueHeap[Task] = DueHeap()
    heap.push(task("retry", 10), fire_at_ms=500)
    heap.push(task("normal", 100))
    assert heap.next_fire_ms() == 100
    assert ids(heap.pop_until(499, 10)) == ["normal"]
    assert ids(heap.pop_until(500, 10)) == ["retry"]


def test_pop_until_bound_is_inclusive_and_fractional() -> None:
    heap: DueHeap[Task] = DueHeap()
    heap.push_many([task("a", 1000), task("b", 1001)])
    assert heap.pop_until(999.999, 10) == []
    assert ids(heap.pop_until(1000.0, 10)) == ["a"]
    assert heap.pop_until(1000.999, 10) == []
    assert ids(heap.pop_until(1001, 10)) == ["b"]


def test_pop_until_respects_limit() -> None:
    heap: DueHeap[Task] = DueHeap()
    heap.push_many([task(f"t{i}", i) for i in range(10)])
    assert ids(heap.pop_until(100, 3)) == ["t0", "t1", "t2"]
    assert ids(heap.pop_until(100, 0)) == []
    assert ids(heap.pop_until(4, 100)) == ["t3", "t4"]
    assert len(heap) == 5
    assert heap.next_fire_ms() == 5


def _check_pops_sorted(heap: DueHeap[Task], expected: list[Task]) -> None:
    """Everything pops earliest first; equal due times in arrival order."""
    popped = heap.pop_until(float("inf"), len(expected) + 1)
    assert popped == expected
    assert len(heap) == 0


@pytest.mark.parametrize(
    ("existing", "batch"),
    [
        (0, 50),  # empty heap: heapify path
        (10, 50),  # batch much larger than heap: heapify path
        (100, 25),  # 25 * 4 == 100, not smaller: heapify path
        (100, 24),  # 24 * 4 < 100: one heappush per entry
        (1000, 3),  # tiny batch into a large heap: heappush path
    ],
)
def test_push_many_keeps_heap_order_on_both_paths(existing: int, batch: int) -> None:
    rng = random.Random(existing * 1000 + batch)
    heap: DueHeap[Task] = DueHeap()
    arrivals: list[Task] = []
    for i in range(existing):
        t = task(f"e{i}", rng.randrange(50))  # few distinct dues: many ties
        heap.push(t)
        arrivals.append(t)
    new = [task(f"n{i}", rng.randrange(50)) for i in range(batch)]
    heap.push_many(new)
    arrivals += new
    assert len(heap) == existing + batch
    assert heap.next_fire_ms() == min(t.due_ms for t in arrivals)
    # sorted() is stable: ties stay in arrival order, which is what the heap promises.
    _check_pops_sorted(heap, sorted(arrivals, key=lambda t: t.due_ms))


def test_push_many_accepts_a_generator_and_empty_batches() -> None:
    heap: DueHeap[Task] = DueHeap()
    heap.push_many(task(f"g{i}", 10 - i) for i in range(3))
    heap.push_many([])
    assert ids(heap.drain()) == ["g2", "g1", "g0"]


def test_interleaved_pushes_and_pops_stay_ordered() -> None:
    rng = random.Random(7)
    heap: DueHeap[Task] = DueHeap()
    live: list[Task] = []
    counter = 0
    for _ in range(200):
        if rng.random() < 0.5:
            batch = [task(f"x{counter + i}", rng.randrange(1000)) for i in range(rng.randrange(8))]
            counter += len(batch)
            heap.push_many(batch)
            live += batch
        else:
            counter += 1
            t = task(f"x{counter}", rng.randrange(1000))
            heap.push(t)
            live.append(t)
        bound = rng.randrange(1000)
        limit = rng.randrange(5)
        expected = sorted((t for t in live if t.due_ms <= bound), key=lambda t: t.due_ms)[:limit]
        assert heap.pop_until(bound, limit) == expected
        for t in expected:
            live.remove(t)
        assert len(heap) == len(live)
    assert heap.drain() == sorted(live, key=lambda t: t.due_ms)


def test_drain_returns_everything_earliest_first_and_empties() -> None:
    heap: DueHeap[Task] = DueHeap()
    heap.push(task("late", 300))
    heap.push(task("tie-1", 100))
    heap.push(task("tie-2", 100))
    heap.push(task("retry", 1), fire_at_ms=200)
    assert ids(heap.drain()) == ["tie-1", "tie-2", "retry", "late"]
    assert len(heap) == 0
    assert heap.next_fire_ms() is None
    heap.push(task("again", 5))
    assert ids(heap.drain()) == ["again"]


def test_holds_copies_by_due_time_and_comes_back_unchanged() -> None:
    # Copies of one id at different revisions are distinct items, ordered by
    # due time like any task; a retry is pushed at its own time.
    heap: DueHeap[Task] = DueHeap()
    late = task("x", 30).replace(rev=1)
    old = task("x", 10).replace(rev=2)
    new = task("x", 10).replace(rev=3)
    heap.push_many([late, old])
    heap.push(new)
    heap.push(task("retry", 1).replace(rev=4), fire_at_ms=20)
    assert heap.next_fire_ms() == 10
    assert [t.rev for t in heap.pop_until(10, 10)] == [2, 3]  # same due: arrival order
    assert [t.rev for t in heap.drain()] == [4, 1]
