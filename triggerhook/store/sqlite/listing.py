"""The SQLite store's listing, counting and timeline statements, built from
a :class:`~triggerhook.domain.listing.TaskFilter` (the MySQL store's are
``store/mysql/queries.py``).

Every piece of text comes from ``store/sqlite/sql.py``; every value is bound.
Which index serves a filter: ``tag``: ``th_task_tags``' primary key ``(tag,
due_ms, id)``; else ``routing_key``: ``th_tasks_key (routing_key, due_ms,
id)``; else ``th_tasks_listed (due_ms, id, routing_key)`` or, for an id
prefix, the primary key's range, as SQLite's planner finds cheaper (checked by
tests/unit/test_sqlite_store.py). ``state`` compares each row with its shard's
marks.

Bounds (:func:`bounded`): as MySQL's server stops a listing read at the
store's time limit, SQLite's progress handler stops one here (raised as
:class:`~triggerhook.errors.TooCostly`), and one whose interrupt is set
(:class:`~triggerhook.errors.Interrupted`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from triggerhook.domain.listing import MAX_TIMELINE_CELLS, Key, TaskFilter
from triggerhook.domain.task import TaskState
from triggerhook.errors import Interrupted, TooCostly
from triggerhook.runtime.interrupt import Interrupt
from triggerhook.store.sqlite import sql as q

Built = tuple[str, list[Any]]
# SQLite's virtual machine steps between two looks at the time and the interrupt
# (some microseconds' work).
_PROGRESS_STEPS = 10_000


@dataclass(frozen=True, slots=True)
class _Source:
    """Where the rows come from and which columns order them."""

    text: str
    due: str
    id: str


_BY_TAG = _Source(q.FROM_TAG, q.TAG_DUE, q.TAG_ID)
_BY_TASK = _Source(q.FROM_TASKS, q.TASK_DUE, q.TASK_ID)


def _source(where: TaskFilter) -> _Source:
    return _BY_TAG if where.tag is not None else _BY_TASK


def _where(where: TaskFilter, src: _Source, after: Key | None = None) -> Built:
    """The WHERE of ``where`` on ``src``, its state included, and its values."""
    ids = where.id_range()
    # (applies, term, its values) in the order the values are bound.
    terms: list[tuple[bool, str, tuple[Any, ...]]] = [
        (where.tag is not None, q.HAS_TAG, (where.tag,)),
        (where.routing_key is not None, q.HAS_KEY, (where.routing_key,)),
        (where.due_after_ms is not None, q.DUE_FROM, (where.due_after_ms,)),
        (where.due_before_ms is not None, q.DUE_BEFORE, (where.due_before_ms,)),
        (after is not None, q.AFTER_KEY, tuple(after or ())),
        (ids is not None, q.ID_RANGE, tuple(ids or ())),
        (where.state is TaskState.FIRING, q.ARMED, ()),
        (where.state is TaskState.SCHEDULED, q.NOT_ARMED, ()),
    ]
    used = [(text, values) for applies, text, values in terms if applies]
    text = " AND ".join(t for t, _ in used) or q.ALWAYS
    return text.format(due=src.due, id=src.id), [v for _, values in used for v in values]


def list_tasks(where: TaskFilter, after: Key | None, limit: int) -> Built:
    """One page: sql.TASK_STATE_COLUMNS of up to ``limit`` rows after ``after``."""
    src = _source(where)
    text, params = _where(where, src, after)
    statement = q.LIST_TASKS.format(source=src.text, where=text, due=src.due, id=src.id)
    return statement, [*params, max(limit, 0)]


def match_keys(where: TaskFilter, after: Key | None, limit: int) -> Built:
    """A bulk cancel's next batch: the keys of up to ``limit`` rows after
    ``after``, whatever their state."""
    src = _source(where)
    text, params = _where(replace(where, state=None), src, after)
    statement = q.MATCH_KEYS.format(source=src.text, where=text, due=src.due, id=src.id)
    return statement, [*params, max(limit, 0)]


def count(where: TaskFilter, up_to: int | None = None) -> Built:
    """The number of matches, or of the first ``up_to`` (None: all of them)."""
    src = _source(where)
    text, params = _where(where, src)
    shards = q.WITH_SHARDS if where.state is not None else ""
    if up_to is None:
        return q.COUNT_WHERE.format(source=src.text, shards=shards, where=text), params
    return q.COUNT_UP_TO.format(source=src.text, shards=shards, where=text), [*params, up_to]


def timeline(where: TaskFilter, start_ms: int, bucket_ms: int, buckets: int) -> Built:
    """Counts per (routing key, bucket) of the tasks due in the span
    (``where``'s own due range and state are not used)."""
    span = replace(
        where, due_after_ms=start_ms, due_before_ms=start_ms + bucket_ms * buckets, state=None
    )
    src = _source(span)
    text, params = _where(span, src)
    statement = q.TIMELINE.format(source=src.text, where=text, due=src.due)
    return statement, [start_ms, bucket_ms, *params, MAX_TIMELINE_CELLS + 1]


@contextlib.contextmanager
def bounded(
    conn: sqlite3.Connection, timeout_ms: int, interrupt: Interrupt | None
) -> Iterator[None]:
    """Statements run in the block stop once the block has run ``timeout_ms``
    (0: no limit; :class:`TooCostly`) or ``interrupt`` is set
    (:class:`Interrupted`, at once if it is set already)."""
    deadline_s = time.monotonic() + timeout_ms / 1000
    stopped: list[Exception] = []

    def look() -> int:  # nonzero: SQLite stops the statement ("interrupted")
        if interrupt is not None and interrupt.is_set:
            stopped.append(Interrupted(f"stopped: {interrupt.why}"))
        elif timeout_ms and time.monotonic() >= deadline_s:
            stopped.append(
                TooCostly(
                    f"the query took longer than {timeout_ms} ms, the limit for reads of "
                    "many tasks (listing_timeout_ms): narrow the filter"
                )
            )
        return len(stopped)

    with contextlib.nullcontext() if interrupt is None else interrupt.cutting(lambda: None):
        conn.set_progress_handler(look, _PROGRESS_STEPS)
        try:
            yield
        except sqlite3.OperationalError as exc:
            if stopped:
                raise stopped[0] from exc
            raise
        finally:
            conn.set_progress_handler(None, 0)
