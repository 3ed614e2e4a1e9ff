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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from triggerhook.domain.listing import BulkCancelled, Key, TaskFilter
from triggerhook.domain.task import CancelResult
from triggerhook.errors import TransientError, ValidationError
from triggerhook.interfaces import TaskStore
from triggerhook.retry import Backoff

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


def cancel_where(store: TaskStore, where: TaskFilter, batch: int = BATCH) -> BulkCancelled:
    """Cancel every task ``where`` matches; ValidationError unless it names
    tasks by id prefix, tag or routing key (it never means "all")."""
    if not where.narrowed:
        raise ValidationError("filter", "give at least one of prefix, tag and routing_key")
    if where.state is not None:
        raise ValidationError("state", "a bulk cancel takes no state")
    cancelled = too_late = 0
    after: Key | None = None
    while True:
        keys = _retried(partial(store.match_keys, where, after, batch), "reading a batch")
        if not keys:
            break
        results = _retried(partial(store.cancel, [tid for _, tid in keys]), "cancelling a batch")
        cancelled += results.count(CancelResult.CANCELLED)
        too_late += results.count(CancelResult.TOO_LATE)
        after = keys[-1]
        if len(keys) < batch:
            break
    log.info(
        "bulk cancel: %d cancelled, %d too late",
        cancelled,
        too_late,
        extra={"prefix": where.prefix, "tag": where.tag, "routing_key": where.routing_key},
    )
    return BulkCancelled(cancelled, too_late)
