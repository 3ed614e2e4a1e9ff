"""Bulk cancel: every task a filter names, in bounded batches.

Each batch is one read of up to ``batch`` keys in due order (no locks) and one
:meth:`~triggerhook.interfaces.TaskStore.cancel` of those ids: R7 exactly, per
task, in a transaction of its own. So no lock is held longer than one batch's
cancel, and an arming pass waits at most that long (firing goes on between
batches). The walk goes on after the last key read, so armed tasks (too late)
are passed, not read again; a task created or moved behind the walk meanwhile
is not cancelled, one ahead of it is.
"""

from __future__ import annotations

import logging

from triggerhook.domain.listing import BulkCancelled, Key, TaskFilter
from triggerhook.domain.task import CancelResult
from triggerhook.errors import ValidationError
from triggerhook.interfaces import TaskStore

log = logging.getLogger(__name__)

BATCH = 500  # ids per cancel transaction


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
        keys = store.match_keys(where, after, batch)
        if not keys:
            break
        results = store.cancel([task_id for _, task_id in keys])
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
