"""A series' life: pause, resume, trigger now, catch-up and backfill (pure, no I/O).

A series is one stored row, rewritten to its next occurrence when one is
confirmed (R5s, docs/design/ownership.md). What this module adds to it
(docs/design/flow-control.md section 4):

* **Paused**: the row keeps its schedule, its due time becomes ``PARKED_MS``
  (no arming range reaches it) and ``recur.paused`` is set, with
  ``resume_ms``, the occurrence it would have fired next. A pause of an
  occurrence already being published (armed) only marks the series: that one
  occurrence still fires, and R5s parks the next instead of scheduling it.
* **Resumed**: the row goes back to ``resume_ms``, or, when that passed while
  it was paused, on by its catch-up policy.
* **Catch-up** (``catch_up``), for occurrences missed while nothing could
  fire them (an outage, a pause): ``one`` (the default, and the behaviour
  before there was a choice) fires the first missed occurrence once, late,
  and goes on with the first due after now; ``skip`` fires none of them (an
  occurrence whose next is already due when it is published goes out as a
  dead letter, cause late); ``all`` fires each, up to ``catch_up_max``, in
  due order, as one-off copies.
* **Copies**: an extra occurrence (trigger now, backfill, catch-up ``all``)
  is a one-off task with the series' routing key, payload and metadata, no
  schedule, the late-fire policy ``fire`` (it is asked for after its time by
  design), and the id ``<series id>:<due ms>``: derived from its due time, so
  writing it again while it is pending finds it (EXISTS); once it fired
  (its row deleted) it would be written, and fire, again: no dedup window
  keeps fired ids yet (docs/design/flow-control.md, section 2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.meta import FIRE, Meta
from triggerhook.domain.recurrence import DEFAULT_CATCH_UP_MAX, Recurrence
from triggerhook.domain.task import Task
from triggerhook.errors import ValidationError

# A paused series' due time: never within an arming range (the latest due time
# a task can have; the row's ``recur.paused`` says it is no occurrence).
PARKED_MS = MAX_DUE_MS
MAX_BACKFILL = 1000  # copies one backfill writes, checked before anything is
_MAX_ID_CHARS = 64  # the id rule's (triggerhook_client.rules.ID_PATTERN)
_MAX_DUE_DIGITS = len(str(MAX_DUE_MS))
# The longest series id whose copies' ids ("<id>:<due ms>") keep to the id rule.
MAX_SERIES_ID_FOR_COPIES = _MAX_ID_CHARS - 1 - _MAX_DUE_DIGITS


def copy_id(series_id: str, due_ms: int) -> str:
    """The id of a series' extra occurrence due at ``due_ms``."""
    return f"{series_id}:{due_ms}"


def check_copyable(series_id: str) -> None:
    """Raise ValidationError (field ``id``) when the series' copies' ids would
    break the id rule: ids of at most MAX_SERIES_ID_FOR_COPIES characters."""
    if len(series_id) > MAX_SERIES_ID_FOR_COPIES:
        raise ValidationError(
            "id",
            f"is {len(series_id)} characters: a series whose occurrences are copied"
            f" (trigger, backfill, catch_up all) has an id of at most"
            f" {MAX_SERIES_ID_FOR_COPIES}, so that <id>:<due ms> is a task id",
        )


def copy_of(series: Task, due_ms: int) -> Task:
    """The one-off task for the series' occurrence due at ``due_ms``."""
    meta = dataclasses.replace(series.meta, recur=None, late=FIRE)
    return series.replace(
        id=copy_id(series.id, due_ms), due_ms=due_ms, meta=meta, rev=0, attempts=0
    )


def first_from(recur: Recurrence, anchor_ms: int, from_ms: int) -> int | None:
    """The schedule's first occurrence at or after ``from_ms``; ``anchor_ms``
    is one of its occurrences (an ``every`` series' phase). None: none."""
    if recur.every_ms is not None:
        steps = math.ceil((from_ms - anchor_ms) / recur.every_ms)
        due = anchor_ms + steps * recur.every_ms
        if due < 0:
            return None
    else:
        due = recur.aligned_ms(from_ms)
    if due > MAX_DUE_MS or (recur.until_ms is not None and due > recur.until_ms):
        return None
    return due


def occurrences(recur: Recurrence, first_ms: int | None, to_ms: float, limit: int) -> list[int]:
    """The schedule's occurrences from ``first_ms`` (one of them; None: none)
    while at or before ``to_ms``, at most ``limit + 1`` of them (the caller
    tells "more than limit" by the count: the work stays bounded)."""
    found: list[int] = []
    due = first_ms
    while due is not None and due <= to_ms and len(found) <= limit:
        found.append(due)
        due = _after(recur, due)
    return found


def _after(recur: Recurrence, due_ms: int) -> int | None:
    """The occurrence after the one due at ``due_ms``, however long ago."""
    return dataclasses.replace(recur, stopped=False).next_ms(due_ms, due_ms)


def backfill_dues(recur: Recurrence, anchor_ms: int, from_ms: int, to_ms: int) -> list[int]:
    """The occurrences in ``[from_ms, to_ms)``; ValidationError (``to_ms``)
    when there are more than MAX_BACKFILL, before anything is written."""
    if to_ms <= from_ms:
        raise ValidationError("to_ms", "must be after from_ms")
    dues = occurrences(recur, first_from(recur, anchor_ms, from_ms), to_ms - 1, MAX_BACKFILL)
    if len(dues) > MAX_BACKFILL:
        raise ValidationError(
            "to_ms", f"the range holds more than {MAX_BACKFILL} occurrences: backfill it in parts"
        )
    return dues


def overtaken(recur: Recurrence, due_ms: int, now_ms: float) -> str | None:
    """For catch_up "skip": why the occurrence due at ``due_ms`` must not fire
    at ``now_ms`` (the next one is due already); None: fire it."""
    if recur.catch_up != "skip":
        return None
    if recur.every_ms is not None and now_ms - due_ms < recur.every_ms:
        return None  # the common case, without a calendar search
    upcoming = _after(recur, due_ms)
    if upcoming is None or upcoming > now_ms:
        return None
    return f"late: the next occurrence ({upcoming} epoch ms) was due already (catch_up skip)"


@dataclass(frozen=True, slots=True)
class Catching:
    """Where a series goes after occurrences were missed: the row to
    ``due_ms`` (None: the series ended), and copies for ``missed_ms``."""

    due_ms: int | None
    missed_ms: tuple[int, ...] = ()


def catch_up(recur: Recurrence, due_ms: int, now_ms: float, *, fired: bool) -> Catching:
    """The catch-up policy applied to a series whose occurrence due at
    ``due_ms`` was missed (``fired``: it has just fired after all, R5s; else
    it is the one a resume finds in the past)."""
    if recur.stopped:
        # Cancelled while its occurrence was being published: that one is its
        # last. Fired, the series ends; found on a resume (it was written back
        # unarmed, R8, then paused), it still fires, once, now.
        return Catching(None if fired else due_ms)
    upcoming = recur.next_ms(due_ms, now_ms)  # the first due after now
    policy = recur.catch_up or "one"
    if policy == "one" and not fired:
        return Catching(due_ms)  # it fires now, once, late
    if policy != "all":
        return Catching(upcoming)
    limit = recur.catch_up_max or DEFAULT_CATCH_UP_MAX
    start = _after(recur, due_ms) if fired else due_ms
    missed = occurrences(recur, start, now_ms, limit - 1)[:limit]
    return Catching(upcoming, tuple(missed))


def paused_meta(meta: Meta, resume_ms: int | None) -> Meta:
    """A series' metadata once paused (resuming at ``resume_ms``)."""
    assert meta.recur is not None
    recur = dataclasses.replace(meta.recur, paused=True, resume_ms=resume_ms)
    return dataclasses.replace(meta, recur=recur)


def resumed_meta(meta: Meta) -> Meta:
    """A series' metadata once resumed."""
    assert meta.recur is not None
    recur = dataclasses.replace(meta.recur, paused=False, resume_ms=None)
    return dataclasses.replace(meta, recur=recur)


@dataclass(frozen=True, slots=True)
class Advance:
    """A series row's next state: due at ``due_ms`` (None: the series ended,
    the row goes) with ``meta``, and copies for the occurrences ``missed_ms``."""

    due_ms: int | None
    meta: Meta
    missed_ms: tuple[int, ...] = ()


def after_fire(meta: Meta, due_ms: int, now_ms: float) -> Advance | None:
    """R5s: the series' next state once its occurrence due at ``due_ms`` was
    confirmed at ``now_ms``, by its catch-up policy; a paused series (paused
    while that occurrence was being published) is parked at the occurrence
    after it. None: not a series."""
    recur = meta.recur
    if recur is None:
        return None
    counted = dataclasses.replace(
        meta, recur=dataclasses.replace(recur, occurrence=recur.occurrence + 1)
    )
    if recur.paused and not recur.stopped:
        upcoming = _after(recur, due_ms)
        if upcoming is None:
            return Advance(None, meta)
        return Advance(PARKED_MS, paused_meta(counted, upcoming))
    caught = catch_up(recur, due_ms, now_ms, fired=True)
    return Advance(caught.due_ms, counted, caught.missed_ms)


def after_resume(meta: Meta, now_ms: float) -> Advance:
    """Resume of a parked series: back to the occurrence it would have fired
    next, or, when that passed while it was paused, on by its catch-up
    policy (``one``: that occurrence fires now, once, late)."""
    recur = meta.recur
    assert recur is not None and recur.resume_ms is not None
    resumed = resumed_meta(meta)
    if recur.resume_ms >= now_ms:
        return Advance(recur.resume_ms, resumed)
    caught = catch_up(recur, recur.resume_ms, now_ms, fired=False)
    return Advance(caught.due_ms, resumed, caught.missed_ms)
