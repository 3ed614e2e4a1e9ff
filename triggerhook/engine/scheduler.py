"""The scheduler thread: moves armed tasks into the send buffer at their due time."""

from __future__ import annotations

import logging

from triggerhook.domain.task import Task
from triggerhook.engine.timed import TimedWorker
from triggerhook.interfaces import Clock, FiredSink
from triggerhook.runtime.worker import FailureHandler

log = logging.getLogger(__name__)

# While the clock is not bounded, look again this often.
_UNBOUNDED_RECHECK_S = 0.1


class Scheduler(TimedWorker[Task]):
    """Fires each task once the clock has reached its fire time, never before.

    Fire times are integer milliseconds and the clock is fractional, so a task
    due at ``t`` leaves no earlier than ``t.000``: its ``x-fired-ms`` is >= ``t``.
    While the clock is not :meth:`~triggerhook.interfaces.Clock.bounded` (the
    database's time is not known well enough) nothing is fired.
    """

    lead_ms = 0

    def __init__(
        self, clock: Clock, sink: FiredSink, batch_limit: int, on_failure: FailureHandler
    ) -> None:
        super().__init__("th-scheduler", clock, batch_limit, on_failure)
        self._sink = sink
        self.fired = 0
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

    def capacity(self) -> int:
        return self._sink.room()

    def handle(self, tasks: list[Task], now_ms: float) -> None:
        self.fired += len(tasks)
        self._sink.put_many(tasks)
