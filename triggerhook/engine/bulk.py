"""Bulk cancel: every task a filter names, in bounded batches.

Each batch is one read of up to ``batch`` keys in due order (no locks) and one
:meth:`~triggerhook.interfaces.TaskStore.cancel` of those ids: R7 exactly, per
task, in a transaction of its own. So no lock is held longer than one batch's
cancel, and an arming pass waits at most that long (firing goes on between
batches). The walk goes on after the last key read, so armed tasks (too late)
are passed, not read again; a task created or moved behind the walk meanwhile
is not cancelled, one ahead of it is. A batch that fails transiently (a
deadlock, a lock wait timeout, the database away a moment) is retried with
the one back-off policy, up to ``TRIES`` times; a bulk cancel is idempotent,
so a caller may also simply run it again.

Between batches the walk stops when its :class:`Interrupt` says so (the
caller went away, the daemon stops, or its deadline passed); a batch's read
in flight is cut short too. It then answers what it did and the cursor after
the last key it read: the same filter from that cursor goes on from there.
A batch read the store refuses as too costly (its time limit) ends the walk
with :class:`TooCostly`, saying what was done before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from triggerhook.domain.listing import BulkCancelled, Key, TaskFilter, encode_cursor
from triggerhook.domain.task import CancelResult
from triggerhook.errors import Interrupted, TooCostly, TransientError, ValidationError
from triggerhook.interfaces import TaskStore
from triggerhook.retry import Backoff
from triggerhook.runtime.interrupt import Interrupt

log = logging.getLogger(__name__)

T = TypeVar("T")

BATCH = 500  # ids per cancel transaction
TRIES = 8  # per batch: about 10 s of back-off in all


def _retried(call: Callable[[], T], what: str) -> T:
    backoff, pause = Backoff(0.05, 3.0), threading.Event()
    for attempt in range(1, TRIES + 1):
        try:
            return call()
        except TransientError as exc:
            if attempt == TRIES:
                raise
            delay_s = backoff.next_delay_s()
            log.warning("bulk cancel: %s failed (%s); retrying in %.2f s", what, exc, delay_s)
            pause.wait(delay_s)  # nothing sets it: a wait that is not a bare sleep
    raise AssertionError("unreachable")


class _Walk:
    """One bulk cancel's progress: the counts, and the last key read."""

    def __init__(self, store: TaskStore, where: TaskFilter, after: Key | None) -> None:
        self.store, self.where, self.after = store, where, after
        self.cancelled = self.too_late = 0

    def batch(self, size: int, interrupt: Interrupt | None) -> bool:
        """Cancel the next batch; False once the walk reached the end."""
        read = partial(self.store.match_keys, self.where, self.after, size, interrupt)
        try:
            keys = _retried(read, "reading a batch")
        except TooCostly as exc:
            raise TooCostly(f"{exc} (before that: {self.done()})") from exc
        if not keys:
            return False
        ids = [tid for _, tid in keys]
        results = _retried(partial(self.store.cancel, ids), "cancelling a batch")
        self.cancelled += results.count(CancelResult.CANCELLED)
        self.too_late += results.count(CancelResult.TOO_LATE)
        self.after = keys[-1]
        return len(keys) == size

    def done(self) -> str:
        return f"{self.cancelled} cancelled, {self.too_late} too late"

    def extra(self) -> dict[str, object]:
        where = self.where
        return {"prefix": where.prefix, "tag": where.tag, "routing_key": where.routing_key}

    def stopped(self, why: str | None) -> BulkCancelled:
        """What was done, and the cursor after the last key read."""
        assert self.after is not None, "stopped before reading anything: nothing to go on from"
        log.info("bulk cancel stopped (%s): %s", why, self.done(), extra=self.extra())
        return BulkCancelled(self.cancelled, self.too_late, encode_cursor(self.after))


def cancel_where(
    store: TaskStore,
    where: TaskFilter,
    batch: int = BATCH,
    *,
    after: Key | None = None,
    interrupt: Interrupt | None = None,
) -> BulkCancelled:
    """Cancel every task ``where`` matches (after the key ``after``: where an
    earlier one stopped); ValidationError unless it names tasks by id prefix,
    tag or routing key (it never means "all"). With ``interrupt``: stops
    between batches when it says so, answering the cursor to go on from."""
    if not where.narrowed:
        raise ValidationError("filter", "give at least one of prefix, tag and routing_key")
    if where.state is not None:
        raise ValidationError("state", "a bulk cancel takes no state")
    walk = _Walk(store, where, after)
    try:
        while walk.batch(batch, interrupt):
            if interrupt is not None and interrupt.stopping:
                return walk.stopped(interrupt.why)
    except Interrupted:  # a batch's read, cut short: nothing of that batch was done
        if walk.after is None:
            raise  # nor of any before: nothing to answer but that it stopped
        return walk.stopped(interrupt.why if interrupt is not None else None)
    log.info("bulk cancel: %s", walk.done(), extra=walk.extra())
    return BulkCancelled(walk.cancelled, walk.too_late)
