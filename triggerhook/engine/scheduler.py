"""The scheduler thread: moves armed tasks into the send buffer at their due time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from triggerhook.domain.ratelimits import Throttle
from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable, Verdict
from triggerhook.engine.timed import TimedWorker
from triggerhook.interfaces import Clock, FiredSink
from triggerhook.runtime.points import labelled
from triggerhook.runtime.worker import FailureHandler

log = logging.getLogger(__name__)

# While the clock is not bounded, look again this often.
_UNBOUNDED_RECHECK_S = 0.1
# A copy whose lease may have lapsed is looked at again this much later.
_LAPSED_RECHECK_MS = 100

# Where held copies go to wait in the database (R8p): each with its token's instant.
Postpone = Callable[[Sequence[tuple[Task, int]]], None]


class Scheduler(TimedWorker[Task]):
    """Fires each task once the clock has reached its fire time, never before.

    Fire times are integer milliseconds and the clock is fractional, so a task
    due at ``t`` leaves no earlier than ``t.000``: its ``x-fired-ms`` is >= ``t``.
    While the clock is not :meth:`~triggerhook.interfaces.Clock.bounded` (the
    database's time is not known well enough) nothing is fired; nor is a copy
    whose shard lease may have lapsed (it waits), and a copy whose shard was
    lost is dropped (R4). A task over its routing key's rate limit
    (:class:`~triggerhook.domain.ratelimits.Throttle`) goes back into the heap
    until its token comes: later, never earlier; or, when its token comes
    later than the arming horizon and memory is getting short (R8p,
    :meth:`postpone_to`), it leaves memory and its row waits in the database
    until then, so that a long queue does not fill the memory bound while
    other keys' tasks wait to be armed. A limited task that goes waits in the
    send buffer's rate-limited lane, and is counted again as it leaves it to
    be published (:meth:`pace`): what a broker outage, a stall or a step of
    the clock kept back leaves at the rate, not all at once.
    """

    lead_ms = 0

    def __init__(
        self,
        clock: Clock,
        sink: FiredSink,
        shards: ShardTable,
        inventory: Inventory,
        batch_limit: int,
        on_failure: FailureHandler,
        throttle: Throttle | None = None,
    ) -> None:
        super().__init__("th-scheduler", clock, batch_limit, on_failure)
        self._sink = sink
        self._shards = shards
        self._inventory = inventory
        # Owned by the thread that calls handle() (this one, or its driver).
        self.throttle = throttle if throttle else None
        self._postpone: Postpone | None = None
        self._postpone_after_ms = 0
        self._keep_free = 0
        # Limited tasks that go wait in the send buffer's lane of their own,
        # paced as they leave it (pace); a sink without one takes them as any.
        self._put_paced = sink.put_many
        if isinstance(sink, SendBuffer):
            self._put_paced = sink.put_paced
            sink.pace = self.pace
            sink.paced = self._paced
        self._handed = 0  # tasks put into the sink (this thread's)
        self._paced_back = 0  # of those, held back as they left it (the publisher's thread)
        self.dropped = 0  # copies of lost shards
        self.held_back = 0  # times a copy waited for its lease
        self.holding = False  # fired nothing: the clock was not bounded

    def poll(self, now_ms: float) -> tuple[list[Task], float | None]:
        if not self._clock.bounded():
            if not self.holding:
                log.error("the database's clock is not known well enough: not firing")
                self.holding = True
            return [], _UNBOUNDED_RECHECK_S
        if self.holding:
            log.warning("the database's clock is known again: firing")
            self.holding = False
        return super().poll(now_ms)

    def postpone_to(self, postpone: Postpone, after_ms: int, keep_free: int | None = None) -> None:
        """Before start: copies held back for more than ``after_ms`` (the
        arming horizon: sooner, they would be armed again at once) go to
        ``postpone`` (the confirmer's R8p write) instead of the heap while
        the memory bound's free room is below ``keep_free`` (None: always),
        as many as bring it back there. With room to spare they wait in the
        heap as nearer ones do: a row write each is spent only where memory
        is short (a queue that fits costs the database nothing)."""
        self._postpone = postpone
        self._postpone_after_ms = after_ms
        self._keep_free = self._inventory.capacity if keep_free is None else keep_free

    @property
    def fired(self) -> int:
        """Tasks handed to the publisher, since start: once each (one held
        back as it left the send buffer counts when it goes again)."""
        return self._handed - self._paced_back

    def throttled(self) -> int:
        """Tasks held back by a rate limit, since start (a task once per hold)."""
        return 0 if self.throttle is None else self.throttle.held

    def throttle_totals(self) -> dict[str, int]:
        """Per bucket (``name:pattern``), since start: the tasks it held
        (``throttled``) and the wait it added them (``throttle_wait_ms``).
        Any thread: see :class:`~triggerhook.domain.ratelimits.Throttle`."""
        throttle = self.throttle
        if throttle is None:
            return {}
        totals = _by_label("throttled", throttle.labels, throttle.held_by)
        totals.update(_by_label("throttle_wait_ms", throttle.labels, throttle.wait_ms_by))
        return totals

    def throttle_holding(self) -> dict[str, int]:
        """Per bucket (``throttle_holding:pattern``): the tasks it holds now,
        waiting in memory or in the database (R8p). Any thread."""
        throttle = self.throttle
        if throttle is None:
            return {}
        return _by_label("throttle_holding", throttle.labels, throttle.holding_by)

    def capacity(self) -> int:
        return self._sink.room()

    def handle(self, tasks: list[Task], now_ms: float) -> None:
        fire, drop = self._screen(tasks, now_ms)
        if self.throttle is not None:
            if drop:  # never coming back: their tokens are not waited for
                self.throttle.forget(drop)
            if fire:
                paced: list[Task] = []
                fire, held = self.throttle.admit(fire, now_ms, paced)
                self._hold(held, now_ms)
                if paced:
                    self._handed += len(paced)
                    self._put_paced(paced)
        self._handed += len(fire)
        self._sink.put_many(fire)

    def pace(self, tasks: list[Task]) -> list[Task]:
        """Rate-limited tasks as they leave the send buffer to be published
        (its ``pace``, on the publisher's thread): those whose departure the
        limit allows now, by the clock their ``x-fired-ms`` is read from
        (:meth:`~triggerhook.domain.ratelimits.Throttle.depart`). The others
        go back into the heap, each at the instant it may come back, and
        leave the buffer's room to the other keys. Thread-safe."""
        throttle = self.throttle
        if throttle is None:
            return tasks
        now_ms = self._clock.now_ms()
        go, held = throttle.depart(tasks, now_ms)
        if held:
            self._paced_back += len(held)
            by_instant: dict[int, list[Task]] = {}
            for task, at_ms in held:
                by_instant.setdefault(at_ms, []).append(task)
            for at_ms, waiting in by_instant.items():
                self.push_at(waiting, at_ms)
        return go

    def _paced(self, tasks: Sequence[Task]) -> tuple[list[Task], list[Task]]:
        """The send buffer's ``paced``: tasks put back into it unpublished,
        split into the other keys' and the rate-limited ones (paced again)."""
        throttle = self.throttle
        if throttle is None:
            return list(tasks), []
        return throttle.paced(tasks, self._clock.now_ms())

    def _hold(self, held: list[tuple[Task, int]], now_ms: float) -> None:
        """Rate-limited tasks back into the heap, each at its token's instant;
        those whose instant is past the arming horizon, while memory is short
        (:meth:`postpone_to`), to the database (R8p): out of the heap first,
        so that a copy never both waits here and is rewritten there (the
        store puts back only an INHERITED one)."""
        by_instant: dict[int, list[Task]] = {}
        postponed: list[tuple[Task, int]] = []
        horizon_ms = now_ms + self._postpone_after_ms
        # Each copy postponed frees its place once written: counted now, so
        # that one batch does not write back more than brings the room back.
        free = self._inventory.room()
        for task, at_ms in held:
            if self._postpone is not None and at_ms > horizon_ms and free < self._keep_free:
                postponed.append((task, at_ms))
                free += 1
            else:
                by_instant.setdefault(at_ms, []).append(task)
        for at_ms, tasks in by_instant.items():
            self.push_at(tasks, at_ms)
        if postponed and self._postpone is not None:
            self._postpone(postponed)

    def screen(self, tasks: list[Task], now_ms: float) -> list[Task]:
        """R4 for copies about to fire or be published (also as they leave
        the send buffer, which a broker outage can make them wait in): those
        whose lease holds; those whose lease may have lapsed wait in the heap,
        those of lost shards are dropped. Thread-safe."""
        return self._screen(tasks, now_ms)[0]

    def _screen(self, tasks: list[Task], now_ms: float) -> tuple[list[Task], list[Task]]:
        """:meth:`screen`'s tasks to fire, and those dropped."""
        verdicts = self._shards.verdicts(tasks)
        if all(v is Verdict.FIRE for v in verdicts):
            return tasks, []
        pairs = list(zip(tasks, verdicts, strict=True))
        wait = [t for t, v in pairs if v is Verdict.WAIT]
        drop = [t for t, v in pairs if v is Verdict.DROP]
        if wait:
            self.held_back += len(wait)
            self.push_at(wait, int(now_ms) + _LAPSED_RECHECK_MS)
        if drop:
            self.dropped += len(drop)
            self._inventory.forget_copies(drop)
        return [t for t, v in pairs if v is Verdict.FIRE], drop


def _by_label(name: str, labels: Sequence[str], values: Sequence[int]) -> dict[str, int]:
    return {labelled(name, label): value for label, value in zip(labels, values, strict=True)}
