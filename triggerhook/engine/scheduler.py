"""The scheduler thread: moves armed tasks into the send buffer at their due time."""

from __future__ import annotations

from triggerhook.domain.task import Task
from triggerhook.engine.timed import TimedWorker
from triggerhook.interfaces import Clock, FiredSink
from triggerhook.runtime.worker import FailureHandler


class Scheduler(TimedWorker[Task]):
    """Fires each task once the clock has reached its fire time, never before.

    Fire times are integer milliseconds and the clock is fractional, so a task
    due at ``t`` leaves no earlier than ``t.000``: its ``x-fired-ms`` is >= ``t``.
    """

    lead_ms = 0

    def __init__(
        self, clock: Clock, sink: FiredSink, batch_limit: int, on_failure: FailureHandler
    ) -> None:
        super().__init__("th-scheduler", clock, batch_limit, on_failure)
        self._sink = sink
        self.fired = 0

    def capacity(self) -> int:
        return self._sink.room()

    def handle(self, tasks: list[Task], now_ms: float) -> None:
        self.fired += len(tasks)
        self._sink.put_many(tasks)
