"""A rate limit kept where events leave (domain/ratelimits.py ``Throttle.depart``,
engine/scheduler.py ``Scheduler.pace``, engine/sendbuffer.py's rate-limited
lane): the scheduler, its send buffer with the engine's gate, and a publisher
taking from it, over a clock the test sets.

The limit is judged as the simulator's oracle judges it (tests/sim/oracle_rate.py):
by each event's ``x-fired-ms``, the clock read as the publisher takes it. What
the throttle let go at its instants can still leave together — tasks a broker
outage or a confirm stall kept in the send buffer (the publisher takes
nothing meanwhile), tasks whose instants a stall of the scheduler or a step
forward of the clock passed at once, postponed rows armed late. As they
leave, no more go at once than the burst and the two tokens a departure may
be late by, then the rate; never more than the burst and a second's tokens
in a second; none early, none lost, and the other keys' tasks do not wait
for them. Each test here fails on the engine that counted tasks only before
the send buffer."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from support.fakes import FakeClock

from triggerhook.domain.arming import ShardMarks
from triggerhook.domain.ratelimits import Throttle, parse_rate_list
from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.interfaces import Acquired, Lease

NOW = 1_700_000_000_000
WINDOW_MS = 1000
_COUNTER = itertools.count()


def task(key: str, due_ms: int) -> Task:
    return Task(f"{key}{next(_COUNTER)}", due_ms, key, shard=0, epoch=1)


class Pipeline:
    """The scheduler and its send buffer as the engine wires them (the gate
    its lease check), and a publisher that takes every task the buffer
    hands out, stamping each with the clock's ``x-fired-ms``."""

    def __init__(self, rates: str, share: float = 1.0) -> None:
        self.clock = FakeClock(NOW)
        shards = ShardTable(self.clock, 100)
        shards.add([Acquired(Lease(0, 1), ShardMarks((0, ""), 1))], NOW + 10**9)
        shards.inherited_read(Lease(0, 1), None, done=True)
        self.buffer = SendBuffer(100_000)
        self.failures: list[BaseException] = []
        self.throttle = Throttle(parse_rate_list(rates), lambda: share)
        self.scheduler = Scheduler(
            self.clock,
            self.buffer,
            shards,
            Inventory(100_000),
            100_000,
            lambda _name, exc: self.failures.append(exc),
            self.throttle,
        )
        self.buffer.gate = lambda tasks: self.scheduler.screen(tasks, self.clock.now_ms())
        self.published: list[tuple[Task, int]] = []

    def schedule(self) -> None:
        """The scheduler's round: everything due by now."""
        now_ms = self.clock.now_ms()
        while True:
            batch, _ = self.scheduler.poll(now_ms)
            if not batch:
                return
            self.scheduler.handle(batch, now_ms)

    def publish(self) -> None:
        """The publisher's round: what the buffer hands out, published now."""
        fired_ms = int(self.clock.now_ms())
        self.published += [(t, fired_ms) for t in self.buffer.take(100_000)]

    def run(
        self,
        until_ms: int,
        scheduler_off: Sequence[tuple[int, int]] = (),
        publisher_off: Sequence[tuple[int, int]] = (),
        steps: Sequence[tuple[int, int]] = (),
        start: int = 0,
    ) -> None:
        """Each ms from NOW to NOW + ``until_ms``: the scheduler's round, then
        the publisher's, unless stopped then — the scheduler by a stall
        (``scheduler_off``: (start, length) from NOW), the publisher by a
        broker outage or a confirm stall (``publisher_off``). A step of the
        clock (``steps``: (at, forward ms)) passes its ms at once: nothing
        runs in them. From NOW + ``start``."""
        jumps = dict(steps)
        t = start
        while t <= until_ms:
            if t in jumps:
                t += jumps.pop(t)
            self.clock.set(NOW + t)
            if not any(start <= t < start + length for start, length in scheduler_off):
                self.schedule()
            if not any(start <= t < start + length for start, length in publisher_off):
                self.publish()
            t += 1
        assert self.failures == []

    def times(self, key: str) -> list[int]:
        return sorted(fired for t, fired in self.published if t.routing_key == key)


def most_in_a_window(times: list[int]) -> int:
    """The most events in any window [t, t + WINDOW_MS) of x-fired-ms."""
    return max(
        (
            sum(1 for other in times[i:] if other < start + WINDOW_MS)
            for i, start in enumerate(times)
        ),
        default=0,
    )


def allowed(per_s: float, burst: int, share: float = 1.0) -> float:
    """The oracle's bound for one instance (tests/sim/oracle_rate.py): its
    burst, and its rate over the window and the ms its instants are rounded by."""
    return max(1.0, burst * share) + per_s * share * (WINDOW_MS + 1) / 1000


# -- each way a queue used to leave together ----------------------------------------------------


def test_what_waited_in_the_send_buffer_through_a_broker_outage_leaves_at_the_rate() -> None:
    pipe = Pipeline("rk=10/s burst 2")
    pipe.scheduler.push_many([task("rk", NOW) for _ in range(30)])
    # The broker is away for 3 s: the throttle lets one every 100 ms go into
    # the send buffer (after the burst), and nothing leaves it meanwhile.
    pipe.run(6000, publisher_off=[(1, 3000)])
    times = [at - NOW for at in pipe.times("rk")]
    assert len(times) == 30 and len(pipe.buffer) == 0
    assert times[:2] == [0, 0]  # the burst, before the outage
    assert most_in_a_window(pipe.times("rk")) <= allowed(10, 2)  # not 28 at once after it
    # After it: the burst and the two tokens a departure may be late by,
    # then the rate, within the second's bound (12).
    assert times[2:8] == [3001, 3001, 3001, 3001, 3100, 3200]
    assert all(b - a >= 99 for a, b in itertools.pairwise(times[5:14]))


def test_tasks_whose_release_instants_a_step_of_the_clock_passed_leave_at_the_rate() -> None:
    pipe = Pipeline("rk=10/s burst 1")
    pipe.scheduler.push_many([task("rk", NOW) for _ in range(25)])
    # A stall of the scheduler brings the queue's first tasks back late: they
    # wait for their second (release) token, one every 100 ms from 1,050.
    # Then the clock steps 1.5 s forward at 1,200: their instants all pass.
    pipe.run(5000, scheduler_off=[(50, 1000)], steps=[(1200, 1500)])
    times = [at - NOW for at in pipe.times("rk")]
    assert len(times) == 25
    assert most_in_a_window(pipe.times("rk")) <= allowed(10, 1)
    after = [at for at in times if at >= 2700]
    assert after[:5] == [2700, 2700, 2700, 2799, 2899]  # not the fifteen at once


def test_a_queue_held_back_as_it_leaves_never_holds_up_another_key() -> None:
    pipe = Pipeline("rk=10/s burst 1")
    limited = [task("rk", NOW) for _ in range(20)]
    free = [task("free", NOW + 10 * i) for i in range(300)]
    pipe.scheduler.push_many([*limited, *free])
    pipe.run(1500, publisher_off=[(0, 1500)])
    # The broker back at 1,500: of the limited tasks in the send buffer three
    # leave, the others go back into the scheduler's heap, not ahead of the
    # other key's tasks, which all leave at once.
    assert [at - NOW for at in pipe.times("rk")] == [1500, 1500, 1500]
    assert len(pipe.buffer) == 0
    pipe.run(4000, start=1501)
    sent = {t.id: at for t, at in pipe.published}
    assert all(sent[t.id] == max(t.due_ms, NOW + 1500) for t in free)
    times = [at - NOW for at in pipe.times("rk")]
    assert len(times) == 20 and times[3:5] == [1599, 1699]


def test_a_task_held_back_as_it_leaves_counts_as_held_and_is_fired_once() -> None:
    pipe = Pipeline("rk=10/s burst 1")
    pipe.scheduler.push_many([task("rk", NOW) for _ in range(4)])
    pipe.run(1000, publisher_off=[(0, 400)])
    # At 400: the four went into the buffer at 0, 100, 200 and 300; three
    # leave (the burst and two tokens late), the fourth is held back as it
    # leaves, until the next token.
    assert [at - NOW for at in pipe.times("rk")] == [400, 400, 400, 499]
    assert pipe.scheduler.fired == 4  # each once, however often held back
    assert pipe.throttle.held == 3 + 1  # held by the queue, then as it left
    assert len(pipe.throttle) == 0 and pipe.throttle.holding_by == [0]


def test_events_put_back_unconfirmed_leave_at_the_rate_again() -> None:
    pipe = Pipeline("rk=10/s burst 3")
    pipe.scheduler.push_many([*(task("rk", NOW) for _ in range(3)), task("free", NOW)])
    pipe.run(0)
    sent = [t for t, _ in pipe.published]
    assert len(sent) == 4  # the burst and the other key's
    # The connection died before their confirms: back to the front of the
    # buffer, each into its lane; their first publish may not have reached
    # the queue, so the limited ones are counted again as they leave.
    pipe.published.clear()
    pipe.buffer.requeue_front(sent)
    pipe.clock.set(NOW + 10)
    pipe.publish()
    assert [(t.routing_key, at - NOW) for t, at in pipe.published] == [
        ("rk", 10),
        ("rk", 10),
        ("free", 10),
    ]
    pipe.run(1000, start=11)
    assert [at - NOW for at in pipe.times("rk")] == [10, 10, 99]  # the third a token later


# -- the property: any outage, stall and step ---------------------------------------------------

_SPANS = st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 2500)), max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    per_s=st.sampled_from([2.0, 10.0, 33.0]),
    burst=st.integers(1, 5),
    share=st.sampled_from([1.0, 0.5]),
    due=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
    free_due=st.lists(st.integers(0, 6000), max_size=10),
    scheduler_off=_SPANS,
    publisher_off=_SPANS,
    steps=st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 2000)), max_size=2),
)
def test_no_fault_lets_a_limited_key_leave_above_its_rate(
    per_s: float,
    burst: int,
    share: float,
    due: list[int],
    free_due: list[int],
    scheduler_off: list[tuple[int, int]],
    publisher_off: list[tuple[int, int]],
    steps: list[tuple[int, int]],
) -> None:
    pipe = Pipeline(f"rk={per_s}/s burst {burst}", share)
    limited = [task("rk", NOW + at) for at in due]
    free = [task("free", NOW + at) for at in free_due]
    pipe.scheduler.push_many([*limited, *free])
    # Long enough for the whole queue to leave once the faults are over.
    end = 9000 + sum(x for _, x in steps) + math.ceil(len(due) / (per_s * share) * 1000)
    pipe.run(end, scheduler_off, publisher_off, steps)
    sent = {t.id: at for t, at in pipe.published}
    assert len(sent) == len(pipe.published) == len(limited) + len(free)  # each once, none lost
    assert all(sent[t.id] >= t.due_ms for t in [*limited, *free])  # none early
    times = pipe.times("rk")
    assert most_in_a_window(times) <= allowed(per_s, burst, share)
    # And as a token bucket of the burst and the two tokens a departure may
    # be late by: over any span, no more than those and the rate allow.
    per_ms = per_s * share / 1000
    most = max(1.0, burst * share) + per_ms + 2
    for i, first in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= most + per_ms * (times[j] - first + 1) + 1e-9, (first, times[j])
    assert len(pipe.throttle) == 0 and sum(pipe.throttle.holding_by) == 0
