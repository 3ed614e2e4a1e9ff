"""Tasks as the HTTP API shows them (JSON-able dicts): one task's lookup, a
listing's entries, a timeline, and what a series' pause, resume, trigger or
backfill did (the command channel replies the same).

Every instant is shown as epoch milliseconds in a field named ``*_ms``
(``due_ms``, ``until_ms``, ``deadline_ms``, a timeline's ``start_ms``);
beside it, deprecated, the same instant in epoch seconds under the older
name (``at``, ``until``, ``deadline``, ``start``), as answers gave it before.

Each answer's fields are defined once, in the tables of
:mod:`triggerhook_client.answer_fields` (the client decodes by them, the
OpenAPI document is built from them): every key these functions and
:func:`~triggerhook.domain.meta.meta_json` can emit is a field of their
table (tests/unit/test_answer_fields.py)."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from triggerhook.app import Scheduled
from triggerhook.domain.listing import Timeline
from triggerhook.domain.meta import meta_json
from triggerhook.domain.outcomes import INSERT_OUTCOMES, Outcome
from triggerhook.domain.task import TaskInfo


def at_s(due_ms: int) -> float:
    """Epoch milliseconds as the API's deprecated epoch seconds."""
    return due_ms / 1000


def due_json(task_id: str, due_ms: int) -> dict[str, Any]:
    """A write's answer: the task's id and due time (``at``: deprecated)."""
    return {"id": task_id, "due_ms": due_ms, "at": at_s(due_ms)}


def task_json(info: TaskInfo, payload: bool = True) -> dict[str, Any]:
    """A task: its id, due time, routing key, state, whether a rate limit
    holds it back (and when it fires, if after its due time), metadata and
    (with ``payload``) its payload, as text if it is UTF-8, else as base64."""
    task = info.task
    data: dict[str, Any] = {
        **due_json(task.id, task.due_ms),
        "routing_key": task.routing_key,
        "state": info.state.value,
        "throttled": info.throttled,
    }
    if info.fire_ms is not None:
        data["fire_ms"] = info.fire_ms
    data.update(meta_json(task.meta, seconds=True))
    if payload:
        try:
            data["payload"] = task.payload.decode("utf-8")
        except UnicodeDecodeError:
            data["payload_b64"] = base64.b64encode(task.payload).decode("ascii")
    return data


def timeline_json(timeline: Timeline) -> dict[str, Any]:
    return {
        "start_ms": timeline.start_ms,
        "bucket_ms": timeline.bucket_ms,
        "start": at_s(timeline.start_ms),
        "bucket": timeline.bucket_ms / 1000,
        "buckets": timeline.buckets,
        "routing_keys": timeline.counts,
    }


def series_json(
    task_id: str, outcome: Outcome, copies: Iterable[Scheduled] | None = None
) -> dict[str, Any]:
    """A series' pause, resume, trigger or backfill that applied: its id and
    outcome, and (a trigger, a backfill) the one-off copies it wrote, each with
    its id, due time and what became of it (created; exists: a retry found it;
    already_fired: a backfill's copy fired within the series' dedup window)."""
    data: dict[str, Any] = {"id": task_id, "outcome": outcome.code}
    if copies is not None:
        data["copies"] = [
            {"id": s.task.id, "due_ms": s.task.due_ms, "outcome": INSERT_OUTCOMES[s.outcome].code}
            for s in copies
        ]
    return data
