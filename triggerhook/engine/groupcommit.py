"""Group commit: concurrent single-task calls share one transaction.

Callers block until the transaction holding their item committed (or failed),
so a returned ``schedule`` (or ``cancel``) call always has its change on disk,
while many callers together pay for one commit instead of one each. Callers
that must not block (the HTTP API's event loop) pass a callback instead.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from triggerhook.engine.worker import FailureHandler, Worker
from triggerhook.errors import EngineFailure, NotRunningError, StoreUnavailable, TriggerHookError

# Longest a writer waits for concurrent callers to join its batch.
_GATHER_S = 0.001

Item = TypeVar("Item")
Result = TypeVar("Result")

# Called on a writer thread with (outcome, None) or (None, error).
Done = Callable[[Result | None, TriggerHookError | None], None]


class _Call(Generic[Item, Result]):
    """One caller: blocked on ``latch`` (a lock taken at creation and released
    by the writer, a one-shot signal far cheaper than an Event), or waiting
    for ``done`` to be called."""

    __slots__ = ("done", "error", "latch", "outcome", "row")

    def __init__(self, row: Item, done: Done[Result] | None = None) -> None:
        self.row = row
        self.done = done
        self.latch = threading.Lock()
        if done is None:
            self.latch.acquire()
        self.outcome: Result | None = None
        self.error: TriggerHookError | None = None

    def finish(self, outcome: Result | None, error: TriggerHookError | None) -> None:
        self.outcome = outcome
        self.error = error
        if self.done is None:
            self.latch.release()
        else:
            self.done(outcome, error)


class GroupCommitter(Generic[Item, Result]):
    """``writers`` threads, each writing whatever calls are queued as one batch.

    ``write`` gets the batch's items and returns one result per item, in order.
    """

    def __init__(
        self,
        write: Callable[[Sequence[Item]], list[Result]],
        max_batch: int,
        writers: int,
        on_failure: FailureHandler,
        name: str = "commit",
    ) -> None:
        self._write = write
        self._max_batch = max_batch
        self._calls: deque[_Call[Item, Result]] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._callers = 0  # threads inside submit(); guarded by _cond
        self.failed_writes = 0  # batches whose write raised (written by the writers only)
        self._writers = [
            _Writer(f"th-{name}-{n}", self, on_failure) for n in range(max(1, writers))
        ]

    def start(self) -> None:
        for writer in self._writers:
            writer.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def join(self, timeout_s: float | None = None) -> bool:
        return all(writer.join(timeout_s) for writer in self._writers)

    def enqueue(self, row: Item, done: Done[Result]) -> None:
        """Queue ``row`` without blocking; ``done`` is called once it committed
        or failed. Raises :class:`NotRunningError` when stopping (not queued)."""
        self._queue(_Call(row, done), caller=False)

    def _queue(self, call: _Call[Item, Result], caller: bool) -> None:
        with self._cond:
            if self._stopping:
                raise NotRunningError("the engine is stopping; call refused")
            self._calls.append(call)
            self._callers += caller
            self._cond.notify()

    def submit(self, row: Item, timeout_s: float) -> Result:
        call: _Call[Item, Result] = _Call(row)
        self._queue(call, caller=True)
        try:
            finished = call.latch.acquire(timeout=timeout_s)
        finally:
            with self._cond:
                self._callers -= 1
        if not finished:
            # The batch may still commit later; the caller can retry safely
            # because scheduling the same content again is a no-op.
            raise StoreUnavailable(f"not committed within {timeout_s:.0f}s")
        if call.error is not None:
            raise call.error
        assert call.outcome is not None
        return call.outcome

    def next_batch(self) -> list[_Call[Item, Result]] | None:
        with self._cond:
            while not self._calls:
                if self._stopping:
                    return None
                self._cond.wait()
            # Callers whose previous call just committed are about to queue
            # their next one: wait briefly for them so the batch is full.
            deadline = time.monotonic() + _GATHER_S
            while len(self._calls) < min(self._callers, self._max_batch):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    break
                self._cond.wait(left)
            count = min(self._max_batch, len(self._calls))
            return [self._calls.popleft() for _ in range(count)]

    def write(self, batch: list[_Call[Item, Result]]) -> None:
        try:
            outcomes = self._write([call.row for call in batch])
        except TriggerHookError as exc:
            self.failed_writes += 1
            for call in batch:
                call.finish(None, exc)
            return
        except BaseException as exc:
            for call in batch:
                call.finish(None, EngineFailure(f"group commit failed: {exc!r}"))
            raise
        for call, outcome in zip(batch, outcomes, strict=True):
            call.finish(outcome, None)


class _Writer(Worker, Generic[Item, Result]):
    def __init__(
        self, name: str, owner: GroupCommitter[Item, Result], on_failure: FailureHandler
    ) -> None:
        super().__init__(name, on_failure)
        self._owner = owner

    def run(self) -> None:
        while (batch := self._owner.next_batch()) is not None:
            self._owner.write(batch)
