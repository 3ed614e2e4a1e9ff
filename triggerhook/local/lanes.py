"""A sink's own thread (``th-sink-<name>``): the events the publisher hands
it, delivered in order, one at a time, each outcome reported back. One lane
per sink, so a webhook that hangs holds up its own lane only: stdout still
prints each event at once, and the publisher goes on firing.

Threads: :meth:`SinkLane.submit` and :meth:`SinkLane.stop` come from the
publisher's thread, :meth:`SinkLane.limit` from the engine's (stopping);
the sink is used by the lane's thread only (but for ``cut``), and
:class:`Delivery` is the publisher's: the lane only reads its ``event``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from triggerhook.domain.task import Task
from triggerhook.local.sinks import Event, EventSink, Undelivered
from triggerhook.runtime.worker import FailureHandler, Worker


@dataclass(eq=False, slots=True)
class Delivery:
    """One event on its way to the sinks (a task's event or dead letter):
    settled by the publisher's thread once each sink it went to reported."""

    task: Task
    event: Event
    dead: bool
    waiting: int = 0  # sinks yet to report
    failures: list[Undelivered] = field(default_factory=list)


# (the delivery, the sink's name, None: taken, else why not). Called on the lane's thread.
Report = Callable[[Delivery, str, Undelivered | None], None]


class SinkLane(Worker):
    def __init__(
        self, sink: EventSink, capacity: int, report: Report, on_failure: FailureHandler
    ) -> None:
        """``capacity``: deliveries waiting at most (more are refused at once)."""
        super().__init__(f"th-sink-{sink.name}", on_failure)
        self.sink = sink
        self.capacity = capacity
        self._report = report
        self._cond = threading.Condition()
        self._jobs: deque[Delivery] = deque()
        self._limit_s = math.inf  # a stop's deadline: every call ends by it

    def submit(self, delivery: Delivery) -> bool:
        """Queue ``delivery``; False: ``capacity`` are waiting already."""
        with self._cond:
            if len(self._jobs) >= self.capacity:
                return False
            self._jobs.append(delivery)
            self._cond.notify()
            return True

    def limit(self, deadline_s: float) -> None:
        """Every call, the one in flight too, ends by ``deadline_s`` (``time.monotonic``)."""
        self._limit_s = min(self._limit_s, deadline_s)
        self.sink.cut(deadline_s)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        try:
            while (delivery := self._next()) is not None:
                self._deliver(delivery)
        finally:
            self.sink.close()

    def _next(self) -> Delivery | None:
        """The next delivery; None once stopped (what still waits is left:
        the publisher stops a lane when it has nothing more for it, or
        past its deadline)."""
        with self._cond:
            while not self._jobs and not self.stopping:
                self._cond.wait()
            return None if self.stopping else self._jobs.popleft()

    def _deliver(self, delivery: Delivery) -> None:
        deadline_s = self._limit_s
        if deadline_s <= time.monotonic():
            return  # past a stop's deadline: left unsettled, the publisher puts it back
        try:
            self.sink.deliver(delivery.event, deadline_s)
        except Undelivered as exc:
            if time.monotonic() >= self._limit_s:
                return  # cut by a stop, not refused: the publisher puts it back, unsettled
            self._report(delivery, self.sink.name, exc)
            return
        self._report(delivery, self.sink.name, None)
