"""The statements of listing, counting, the timeline and a bulk cancel's
batches, built from a :class:`~triggerhook.domain.listing.TaskFilter`.

Every piece of text comes from ``store/sql.py``; every value is bound. Which
index serves a filter (the EXPLAINs are checked by tests/contract):

* ``tag``: ``th_task_tags``' primary key ``(tag, due_ms, id)``, in due order;
* else ``routing_key``: ``th_tasks_key (routing_key, due_ms)`` (+ the primary
  key, implicit), in due order;
* else an id prefix: the primary key's range (then a sort of the matches) or
  ``th_tasks_listed``, whichever the optimizer finds cheaper;
* else: ``th_tasks_listed (due_ms, id, routing_key)`` in due order.

The due range and the keyset cursor bound the same index's range; the id
prefix is a range of the primary key, checked on the index entries (every
secondary index holds the id); ``state`` compares each row with its shard's
marks (no index: armed rows are few, the earliest due).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triggerhook.domain.listing import Key, TaskFilter
from triggerhook.store import sql


@dataclass(frozen=True, slots=True)
class Source:
    """Where the rows come from and which columns order them."""

    source: str
    due: str
    id: str


_BY_TAG = Source(sql.FROM_TAG, "g.due_ms", "g.id")
_BY_KEY = Source(sql.FROM_KEY, "t.due_ms", "t.id")
_BY_PREFIX = Source(sql.FROM_PREFIX, "t.due_ms", "t.id")
_ALL = Source(sql.FROM_DUE, "t.due_ms", "t.id")


def _source(where: TaskFilter) -> Source:
    if where.tag is not None:
        return _BY_TAG
    if where.routing_key is not None:
        return _BY_KEY
    return _BY_PREFIX if where.prefix is not None else _ALL


def _terms(where: TaskFilter, src: Source, after: Key | None = None) -> tuple[str, list[Any]]:
    """The WHERE of ``where`` on ``src`` (state excluded: it needs the shards)."""
    terms: list[str] = []
    params: list[Any] = []
    if where.tag is not None:
        terms.append(sql.HAS_TAG)
        params.append(where.tag)
    if where.routing_key is not None:
        terms.append(sql.HAS_KEY)
        params.append(where.routing_key)
    if where.due_after_ms is not None:
        terms.append(sql.DUE_FROM)
        params.append(where.due_after_ms)
    if where.due_before_ms is not None:
        terms.append(sql.DUE_BEFORE)
        params.append(where.due_before_ms)
    if after is not None:
        terms.append(sql.AFTER_KEY)
        params += (after[0], after[0], after[1])
    ids = where.id_range()
    if ids is not None:
        terms.append(sql.ID_RANGE)
        params += ids
    text = " AND ".join(terms) or "TRUE"
    return text.format(due=src.due, id=src.id), params


def _state_term(where: TaskFilter, text: str) -> str:
    if where.state is None:
        return text
    armed = sql.ARMED if where.state.value == "firing" else f"NOT {sql.ARMED}"
    return f"{text} AND {armed}"


def list_tasks(where: TaskFilter, after: Key | None, limit: int) -> tuple[str, list[Any]]:
    """One page: sql.TASK_STATE_COLUMNS of up to ``limit`` rows after ``after``."""
    src = _source(where)
    text, params = _terms(where, src, after)
    statement = sql.LIST_TASKS.format(
        source=src.source, where=_state_term(where, text), due=src.due, id=src.id
    )
    return statement, [*params, limit]


def match_keys(where: TaskFilter, after: Key | None, limit: int) -> tuple[str, list[Any]]:
    """A bulk cancel's next batch: the keys of up to ``limit`` rows after ``after``
    (the state is not asked: cancel itself tells the armed ones)."""
    src = _source(where)
    text, params = _terms(where, src, after)
    statement = sql.MATCH_KEYS.format(source=src.source, where=text, due=src.due, id=src.id)
    return statement, [*params, limit]


def count(where: TaskFilter) -> tuple[str, list[Any]]:
    src = _source(where)
    text, params = _terms(where, src)
    shards = sql.WITH_SHARDS if where.state is not None else ""
    statement = sql.COUNT_WHERE.format(
        source=src.source, shards=shards, where=_state_term(where, text)
    )
    return statement, params


def timeline(
    where: TaskFilter, start_ms: int, bucket_ms: int, buckets: int
) -> tuple[str, list[Any]]:
    """Counts per (routing key, bucket) of the tasks due in the span (``where``'s
    own due range and state are not used)."""
    span = TaskFilter(
        prefix=where.prefix,
        routing_key=where.routing_key,
        tag=where.tag,
        due_after_ms=start_ms,
        due_before_ms=start_ms + bucket_ms * buckets,
    )
    src = _source(span)
    text, params = _terms(span, src)
    statement = sql.TIMELINE.format(source=src.source, where=text, due=src.due)
    return statement, [start_ms, bucket_ms, *params]
