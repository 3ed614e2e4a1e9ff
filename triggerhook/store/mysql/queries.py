"""The statements of listing, counting, the timeline and a bulk cancel's
batches, built from a :class:`~triggerhook.domain.listing.TaskFilter`.

Every piece of text comes from ``store/mysql/sql.py``; every value is bound. Which
index serves a filter (the EXPLAINs are checked by tests/contract):

* ``tag``: ``th_task_tags``' primary key ``(tag, due_ms, id)``, in due order;
* else ``routing_key``: ``th_tasks_key (routing_key, due_ms)`` (+ the primary
  key, implicit), in due order;
* else an id prefix: the primary key's range (then a sort of the matches) or
  ``th_tasks_listed``, whichever the optimizer finds cheaper;
* else: ``th_tasks_listed (due_ms, id, routing_key)`` in due order;
* but ``state=firing`` (a listing or count): ``th_tasks_fire (shard, fire_ms,
  id)``, one range per shard up to its watermark (the caller reads the marks
  first: :func:`armed_shards`), then a sort of those few rows.

The due range and the keyset cursor bound the same index's range; the id
prefix is a range of the primary key, checked on the index entries (every
secondary index holds the id); ``state`` compares each row with its shard's
marks (``state=scheduled`` has no index: it is most rows, the earliest due
aside).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from triggerhook.domain.arming import BOTTOM
from triggerhook.domain.listing import MAX_TIMELINE_CELLS, Key, TaskFilter
from triggerhook.domain.task import TaskState
from triggerhook.store.mysql import sql

Built = tuple[str, list[Any]]
# (shard, armed_ms) of every shard that has armed something: the bounds of the
# ranges state=firing reads (see armed_shards).
ArmedShards = Sequence[tuple[int, int]]


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
_ARMED = Source(sql.FROM_FIRE, "t.due_ms", "t.id")
_ARMED_TAG = Source(sql.FROM_FIRE_TAG, "t.due_ms", "t.id")


def _source(where: TaskFilter) -> Source:
    if where.state is TaskState.FIRING:
        return _ARMED if where.tag is None else _ARMED_TAG
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


def _state_term(
    where: TaskFilter, built: tuple[str, list[Any]], armed: ArmedShards
) -> tuple[str, list[Any]]:
    """``built`` (a WHERE and its values) with ``where``'s state; for
    ``firing``, the ranges of ``armed`` first (none: nothing is armed)."""
    text, params = built
    if where.state is None:
        return text, params
    if where.state is TaskState.SCHEDULED:
        return f"{text} AND NOT {sql.ARMED}", params
    ranges = " OR ".join([sql.FIRE_RANGE] * len(armed)) or "FALSE"
    bounds = [value for shard_mark in armed for value in shard_mark]
    return f"({ranges}) AND {text} AND {sql.ARMED}", [*bounds, *params]


def armed_shards() -> Built:
    """Each shard's (shard, armed_ms) that has armed something (the ranges
    of state=firing): read before a listing or count of armed tasks."""
    return sql.ARMED_SHARDS, [BOTTOM[0]]


def list_tasks(where: TaskFilter, after: Key | None, limit: int, armed: ArmedShards = ()) -> Built:
    """One page: sql.TASK_STATE_COLUMNS of up to ``limit`` rows after ``after``
    (``armed``: :func:`armed_shards`' rows, for ``state=firing``)."""
    src = _source(where)
    text, params = _state_term(where, _terms(where, src, after), armed)
    statement = sql.LIST_TASKS.format(source=src.source, where=text, due=src.due, id=src.id)
    return statement, [*params, limit]


def match_keys(where: TaskFilter, after: Key | None, limit: int) -> tuple[str, list[Any]]:
    """A bulk cancel's next batch: the keys of up to ``limit`` rows after ``after``
    (the state is not asked: cancel itself tells the armed ones)."""
    where = replace(where, state=None)
    src = _source(where)
    text, params = _terms(where, src, after)
    statement = sql.MATCH_KEYS.format(source=src.source, where=text, due=src.due, id=src.id)
    return statement, [*params, limit]


def count(where: TaskFilter, up_to: int | None = None, armed: ArmedShards = ()) -> Built:
    """The number of matches, or of the first ``up_to`` (None: all of them);
    ``armed`` as for :func:`list_tasks`."""
    src = _source(where)
    text, params = _state_term(where, _terms(where, src), armed)
    shards = sql.WITH_SHARDS if where.state is not None else ""
    if up_to is None:
        return sql.COUNT_WHERE.format(source=src.source, shards=shards, where=text), params
    statement = sql.COUNT_UP_TO.format(source=src.source, shards=shards, where=text)
    return statement, [*params, up_to]


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
    return statement, [start_ms, bucket_ms, *params, MAX_TIMELINE_CELLS + 1]
