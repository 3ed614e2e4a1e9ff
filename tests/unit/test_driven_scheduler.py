"""The scheduler driven by another thread's loop (engine/timed.py ``drive_from``
and ``tick``; the AMQP publisher's I/O loop drives it in the daemon): each
tick does what one round of the scheduler's own thread would, a moved head
asks the driver for a tick, and the scheduler's thread only waits until it
is stopped and what it had to hand on is handed on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.fakes import FakeClock

from triggerhook.domain.arming import ShardMarks
from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.engine.timed import HEARTBEAT_S
from triggerhook.interfaces import Acquired, DrivenTimer, Lease

NOW = 1_700_000_000_000
WAIT_S = 5.0


def task(name: str, due_ms: int) -> Task:
    return Task(name, due_ms, "rk", shard=0, epoch=1)


class Driven:
    def __init__(self, buffer_size: int = 100) -> None:
        self.clock = FakeClock(NOW)
        shards = ShardTable(self.clock, 100)
        shards.add([Acquired(Lease(0, 1), ShardMarks((0, ""), 1))], NOW + 60_000)
        shards.inherited_read(Lease(0, 1), None, done=True)
        self.buffer = SendBuffer(buffer_size)
        self.failures: list[BaseException] = []
        self.scheduler = Scheduler(
            self.clock,
            self.buffer,
            shards,
            Inventory(1000),
            100,
            lambda _name, exc: self.failures.append(exc),
        )
        self.ticks_asked = 0
        self.scheduler.drive_from(self._ask)

    def _ask(self) -> None:
        self.ticks_asked += 1

    def tick(self) -> float | None:
        return self.scheduler.tick(self.clock.now_ms())


@pytest.fixture
def driven() -> Iterator[Driven]:
    d = Driven()
    yield d
    assert d.failures == []


def test_the_scheduler_is_a_driven_timer(driven: Driven) -> None:
    timer: DrivenTimer = driven.scheduler  # what a TimerDriver is handed
    assert driven.scheduler.driven
    assert timer.tick(NOW) is None  # nothing in it: until woken


def test_a_push_that_moves_the_head_asks_for_a_tick_and_one_behind_it_does_not(
    driven: Driven,
) -> None:
    driven.scheduler.push_many([task("later", NOW + 500)])
    assert driven.ticks_asked == 1
    driven.scheduler.push_many([task("after", NOW + 900)])
    assert driven.ticks_asked == 1
    driven.scheduler.push_at([task("retry", NOW + 100)], NOW + 100)
    assert driven.ticks_asked == 2
    driven.scheduler.wake()  # e.g. the send buffer has room again
    assert driven.ticks_asked == 3


def test_a_tick_fires_what_is_due_never_before_and_says_when_the_next_is(
    driven: Driven,
) -> None:
    driven.scheduler.push_many([task("b", NOW + 250), task("a", NOW + 250), task("c", NOW + 400)])
    driven.clock.set(NOW + 249.5)
    assert driven.tick() == pytest.approx(0.0005)  # half a millisecond early: nothing
    assert len(driven.buffer) == 0
    driven.clock.set(NOW + 250)
    assert driven.tick() == 0.0  # a batch: the driver ticks again at once
    assert [t.id for t in driven.buffer.take(10)] == ["b", "a"]  # a tie: in push order
    assert driven.tick() == pytest.approx(0.15)
    assert driven.scheduler.fired == 2
    driven.scheduler.push_many([task("far", NOW + 60_000)])
    driven.clock.set(NOW + 400)
    assert driven.tick() == 0.0
    assert driven.tick() == HEARTBEAT_S  # a far head: looked at again as the thread would


def test_a_full_buffer_is_looked_at_again_and_its_room_asks_for_a_tick() -> None:
    d = Driven(buffer_size=1)
    d.buffer.on_room = d.scheduler.wake  # as the engine wires it
    d.buffer.put_many([task("occupying", NOW)])
    d.scheduler.push_many([task("waiting", NOW - 1)])
    asked = d.ticks_asked
    assert d.tick() == pytest.approx(0.05)  # no room: a look again soon
    assert len(d.scheduler) == 1
    d.buffer.take(1)
    assert d.ticks_asked == asked + 1
    assert d.tick() == 0.0
    assert [t.id for t in d.buffer.take(1)] == ["waiting"]


def test_the_driven_thread_ends_once_stopped_and_what_was_due_by_then_is_handed_on(
    driven: Driven,
) -> None:
    s = driven.scheduler
    s.push_many([task("soon", NOW + 50), task("later", NOW + 5000)])
    s.start()
    assert s.is_alive()
    s.drain_until(NOW + 100)  # stop, once what is due by then is handed on
    assert not s.join(0.2)  # "soon" still waits for its tick
    driven.clock.set(NOW + 50)
    assert driven.tick() == 0.0  # handed on; the thread, told, sees it is finished
    assert s.join(WAIT_S)
    assert driven.tick() is None  # stopped and finished: no more ticks needed
    assert [t.id for t in driven.buffer.take(10)] == ["soon"]
    assert s.take_remaining() == [task("later", NOW + 5000)]
    driven.clock.set(NOW + 5000)
    assert driven.tick() is None  # a tick after the end hands on nothing more
    assert len(driven.buffer) == 0
