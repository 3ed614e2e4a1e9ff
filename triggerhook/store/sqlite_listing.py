"""The SQLite store's listing, counting and timeline statements, built from
a :class:`~triggerhook.domain.listing.TaskFilter` (the MySQL store's are
``store/queries.py``).

Every piece of text comes from ``store/sqlite_sql.py``; every value is bound.
Which index serves a filter: ``tag``: ``th_task_tags``' primary key ``(tag,
due_ms, id)``; else ``routing_key``: ``th_tasks_key (routing_key, due_ms,
id)``; else ``th_tasks_listed (due_ms, id, routing_key)`` or, for an id
prefix, the primary key's range, as SQLite's planner finds cheaper (checked by
tests/unit/test_sqlite_store.py). ``state`` compares each row with its shard's
marks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from triggerhook.domain.listing import Key, TaskFilter
from triggerhook.domain.task import TaskState
from triggerhook.store import sqlite_sql as q

Built = tuple[str, list[Any]]


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
    """One page: sqlite_sql.TASK_STATE_COLUMNS of up to ``limit`` rows after ``after``."""
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


def count(where: TaskFilter) -> Built:
    src = _source(where)
    text, params = _where(where, src)
    shards = q.WITH_SHARDS if where.state is not None else ""
    return q.COUNT_WHERE.format(source=src.text, shards=shards, where=text), params


def timeline(where: TaskFilter, start_ms: int, bucket_ms: int, buckets: int) -> Built:
    """Counts per (routing key, bucket) of the tasks due in the span
    (``where``'s own due range and state are not used)."""
    span = replace(
        where, due_after_ms=start_ms, due_before_ms=start_ms + bucket_ms * buckets, state=None
    )
    src = _source(span)
    text, params = _where(span, src)
    statement = q.TIMELINE.format(source=src.text, where=text, due=src.due)
    return statement, [start_ms, bucket_ms, *params]
