"""The ``th-outbox`` thread: R6o, the outbox mover (docs/design/flow-control.md,
section 6).

A caller that schedules a task inside its own transaction
(:func:`triggerhook.outbox.schedule_in`) writes a row into ``th_outbox``;
once its transaction commits, a mover of any instance moves the row into
``th_tasks`` (R6's insert, by the row's ``on_conflict``) and deletes it, in
one transaction. Every firing instance runs one; two skip each other's rows.
A full batch is followed at once by the next; otherwise the thread waits
``poll_ms``. A task due sooner than ``poll_ms`` plus one arming interval after
its caller's commit fires that much late (never early: it is an ordinary row).
"""

from __future__ import annotations

from collections.abc import Callable

from triggerhook.errors import TransientError
from triggerhook.runtime.worker import FailureHandler, Worker

OUTBOX_BATCH = 1000  # rows per move: the statement's bound, as the design note says


class OutboxMover(Worker):
    """``move(limit)`` is one move (``Writes.move_outbox``); it answers how
    many rows left the outbox. The thread owns nothing else."""

    def __init__(
        self,
        move: Callable[[int], int],
        poll_ms: int,
        on_failure: FailureHandler,
        batch: int = OUTBOX_BATCH,
    ) -> None:
        super().__init__("th-outbox", on_failure)
        self._move = move
        self._poll_s = poll_ms / 1000.0
        self._batch = batch

    def wake(self) -> None:
        self._interrupt.set()

    def step(self) -> int:
        """One move; the rows it took out of the outbox."""
        return self._move(self._batch)

    def run(self) -> None:
        while not self.stopping:
            try:
                taken = self.step()
            except TransientError as exc:
                self.back_off(exc, "moving the outbox")
                continue
            self.succeeded("moving the outbox")
            if taken < self._batch:
                self.pause(self._stopping, self._poll_s)
