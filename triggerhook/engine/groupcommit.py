"""Group commit: concurrent single-task calls share one transaction.

Callers block until the transaction holding their item committed (or failed),
so a returned ``schedule`` (or ``cancel``) call always has its change on disk,
while many callers together pay for one commit instead of one each. Callers
that must not block (the HTTP API's event loop) pass a callback instead.

The queue is bounded (``max_queued``): a call beyond it is refused at once with
:class:`~triggerhook.errors.Overloaded`, so a database hang costs bounded
memory. A caller that gives up (a timeout) abandons its call, and an abandoned
call is never written. Giving up and the writer taking a call exclude each
other under one lock: a call is abandoned only while still queued, and a
caller whose call was taken waits for the real outcome (the write is bounded
by the database's timeouts) instead of reporting a failure that may commit.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from triggerhook.errors import (
    EngineFailure,
    NotRunningError,
    Overloaded,
    StoreReadOnly,
    StoreUnavailable,
    TriggerHookError,
)
from triggerhook.runtime.worker import FailureHandler, Worker

# Longest a writer waits for concurrent callers to join its batch.
_GATHER_S = 0.001
# A refused batch (read-only or full database) counts this long unless a later
# one is written: callers retry (HTTP's Retry-After is 1 s), and a refusal
# with no write since must not be reported for ever.
REFUSAL_HOLD_S = 10.0

Item = TypeVar("Item")
Result = TypeVar("Result")

# Called on a writer thread with (outcome, None) or (None, error).
Done = Callable[[Result | None, TriggerHookError | None], None]


class Ticket(Protocol):
    """A queued call, as its non-blocking caller holds it."""

    def abandon(self) -> bool:
        """Give up: True if the call was still queued (now it is never written,
        and ``done`` is never called); False if a writer took it already
        (``done`` will be called with the real outcome)."""


class _Call(Generic[Item, Result]):
    """One caller: blocked on ``latch`` (a lock taken at creation and released
    by the writer, a one-shot signal far cheaper than an Event), or waiting
    for ``done`` to be called."""

    __slots__ = ("abandoned", "done", "error", "latch", "outcome", "owner", "row")

    def __init__(
        self,
        owner: GroupCommitter[Item, Result],
        row: Item,
        done: Done[Result] | None = None,
    ) -> None:
        self.owner = owner
        self.row = row
        self.done = done
        self.abandoned = False  # guarded by the owner's lock
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

    def abandon(self) -> bool:
        return self.owner.abandon(self)


class GroupCommitter(Generic[Item, Result]):
    """``writers`` threads, each writing whatever calls are queued as one batch.

    ``write`` gets the batch's items and returns one result per item, in order.
    At most ``max_queued`` calls wait; ``discard`` gets the items of abandoned
    calls (never written), e.g. to give back what was reserved for them.
    """

    def __init__(
        self,
        write: Callable[[Sequence[Item]], list[Result]],
        max_batch: int,
        writers: int,
        on_failure: FailureHandler,
        name: str = "commit",
        max_queued: int = 10_000,
        discard: Callable[[Sequence[Item]], None] | None = None,
    ) -> None:
        self._write = write
        self._max_batch = max_batch
        self._max_queued = max(1, max_queued)
        self._discard = discard
        self._name = name
        # The queued calls, oldest first (a dict: abandoning one is O(1)). A call
        # is queued exactly while it is in here; guarded by _cond.
        self._calls: OrderedDict[_Call[Item, Result], None] = OrderedDict()
        self._cond = threading.Condition()
        self._stopping = False
        self._callers = 0  # threads inside submit(); guarded by _cond
        self.failed_writes = 0  # batches whose write raised (written by the writers only)
        # The last batch's refusal (read-only or full database) and when; None
        # once a batch is written or fails otherwise.
        self._refused: tuple[StoreReadOnly, float] | None = None
        self.refused = 0  # calls refused because the queue was full; guarded by _cond
        self.abandoned = 0  # calls given up while queued, never written; guarded by _cond
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

    def enqueue(self, row: Item, done: Done[Result]) -> Ticket:
        """Queue ``row`` without blocking; ``done`` is called once it committed
        or failed, unless the returned ticket abandons it first. Raises (not
        queued) :class:`NotRunningError` when stopping, :class:`Overloaded`
        when the queue is full."""
        call = _Call(self, row, done)
        self._queue(call, caller=False)
        return call

    def _queue(self, call: _Call[Item, Result], caller: bool) -> None:
        with self._cond:
            if self._stopping:
                raise NotRunningError("the engine is stopping; call refused")
            if len(self._calls) >= self._max_queued:
                self.refused += 1
                raise Overloaded(
                    f"{len(self._calls)} calls already wait for a group commit "
                    f"({self._name}); call refused, retry later"
                )
            self._calls[call] = None
            self._callers += caller
            self._cond.notify()

    def submit(self, row: Item, timeout_s: float) -> Result:
        """Queue ``row`` and wait until it committed. Raises (not written)
        :class:`StoreUnavailable` when it was still queued after ``timeout_s``;
        once a writer took it, waits for the write's real outcome."""
        call: _Call[Item, Result] = _Call(self, row)
        self._queue(call, caller=True)
        try:
            finished = call.latch.acquire(timeout=timeout_s)
        finally:
            with self._cond:
                self._callers -= 1
        if not finished:
            if self.abandon(call):
                # Never written: a retry is safe, and cannot find a stray row.
                raise StoreUnavailable(f"not committed within {timeout_s:.0f}s; not written")
            call.latch.acquire()  # taken: bounded by the database's timeouts
        if call.error is not None:
            raise call.error
        assert call.outcome is not None
        return call.outcome

    def abandon(self, call: _Call[Item, Result]) -> bool:
        """Take ``call`` out of the queue if it is still there (see :class:`Ticket`)."""
        with self._cond:
            if call.abandoned:
                return True
            if call not in self._calls:  # a writer took it
                return False
            del self._calls[call]
            call.abandoned = True
            self.abandoned += 1
        if self._discard is not None:
            self._discard([call.row])
        return True

    def refusal(self) -> StoreReadOnly | None:
        """The database's refusal of the last batch, if no batch was written
        since and it is at most ``REFUSAL_HOLD_S`` old (any thread)."""
        refused = self._refused  # one read: a writer may replace it meanwhile
        if refused is None or time.monotonic() - refused[1] > REFUSAL_HOLD_S:
            return None
        return refused[0]

    def queued(self) -> int:
        """Calls waiting for a writer."""
        with self._cond:
            return len(self._calls)

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
            # Taking a call out of the queue, under the lock, is what makes it
            # impossible to abandon from here on.
            count = min(self._max_batch, len(self._calls))
            return [self._calls.popitem(last=False)[0] for _ in range(count)]

    def write(self, batch: list[_Call[Item, Result]]) -> None:
        try:
            outcomes = self._write([call.row for call in batch])
        except TriggerHookError as exc:
            self.failed_writes += 1
            self._refused = (exc, time.monotonic()) if isinstance(exc, StoreReadOnly) else None
            for call in batch:
                call.finish(None, exc)
            return
        except BaseException as exc:
            for call in batch:
                call.finish(None, EngineFailure(f"group commit failed: {exc!r}"))
            raise
        self._refused = None
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
