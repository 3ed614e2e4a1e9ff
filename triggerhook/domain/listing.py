"""Finding stored tasks: filters, pages and their cursors (pure, no I/O).

A listing is in due order, ties by id: the key ``(due_ms, id)`` is unique and
never changes while a row exists (a reschedule gives the row a new key), so a
page's cursor (the key of its last task) goes on exactly after it, however
many rows were inserted or deleted meanwhile: keyset pagination, no OFFSET.
A task created behind the cursor, or moved there, is not seen by that walk.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass

from triggerhook.domain.meta import TAG_PATTERN
from triggerhook.domain.task import (
    ID_PATTERN,
    MAX_DUE_MS,
    ROUTING_KEY_PATTERN,
    TaskInfo,
    TaskState,
)
from triggerhook.errors import TooCostly, ValidationError

MAX_PAGE = 1000
DEFAULT_PAGE = 100
MAX_BUCKETS = 1440  # a day of minutes
MIN_BUCKET_MS = 1000
MAX_BUCKET_MS = 86_400_000 * 31
# A timeline reads every task due in its span: at most twelve of the longest
# buckets (372 days), so that no query reads a table's far future wholesale.
MAX_TIMELINE_SPAN_MS = 12 * MAX_BUCKET_MS
# Counts one timeline answers at most (routing keys x buckets): its size grows
# with both, so many routing keys in a span of many buckets are refused.
MAX_TIMELINE_CELLS = 100_000
MAX_COUNT_UP_TO = 1_000_000_000  # a count's cap (a larger one is an exact count)
_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_CURSOR_CHARS = 120  # the longest cursor this module makes is under 110
# Every id character sorts below this one (ascii_bin: byte order): all ids
# starting with a prefix p lie in [p, p + "{").
_ABOVE_ID_CHARS = "{"

Key = tuple[int, str]  # (due_ms, id): a task's place in due order


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks: every given field must match (None: any).

    ``prefix``: of the id; ``due_after_ms`` inclusive and ``due_before_ms``
    exclusive (epoch ms); ``state``: armed (``firing``) or not (``scheduled``).
    """

    prefix: str | None = None
    routing_key: str | None = None
    tag: str | None = None
    due_after_ms: int | None = None
    due_before_ms: int | None = None
    state: TaskState | None = None

    @property
    def narrowed(self) -> bool:
        """It names tasks by id prefix, tag or routing key (a bulk cancel must)."""
        return self.prefix is not None or self.tag is not None or self.routing_key is not None

    def id_range(self) -> tuple[str, str] | None:
        """``[low, high)`` holding exactly the ids with the prefix (None: any id)."""
        if self.prefix is None:
            return None
        return self.prefix, self.prefix + _ABOVE_ID_CHARS

    def matches(self, info: TaskInfo) -> bool:
        """Whether ``info`` is one of these tasks: what the filter means, which
        every store's SQL must agree with (tests/contract/test_listing_contract.py)."""
        task = info.task
        return (
            (self.prefix is None or task.id.startswith(self.prefix))
            and (self.routing_key is None or task.routing_key == self.routing_key)
            and (self.tag is None or self.tag in task.meta.tags)
            and (self.due_after_ms is None or task.due_ms >= self.due_after_ms)
            and (self.due_before_ms is None or task.due_ms < self.due_before_ms)
            and (self.state is None or info.state is self.state)
        )


def make_filter(
    *,
    prefix: object = None,
    routing_key: object = None,
    tag: object = None,
    due_after_ms: int | None = None,
    due_before_ms: int | None = None,
    state: object = None,
) -> TaskFilter:
    """A validated filter; :class:`ValidationError` names the field."""
    if prefix is not None and not (isinstance(prefix, str) and _PREFIX_PATTERN.fullmatch(prefix)):
        raise ValidationError("prefix", "must be 1-64 characters from [A-Za-z0-9._:-]")
    if routing_key is not None and not (
        isinstance(routing_key, str) and ROUTING_KEY_PATTERN.fullmatch(routing_key)
    ):
        raise ValidationError("routing_key", "must be 1-255 characters from [A-Za-z0-9._:/-]")
    if tag is not None and not (isinstance(tag, str) and TAG_PATTERN.fullmatch(tag)):
        raise ValidationError("tag", "must be 1-64 characters from [A-Za-z0-9._:/-]")
    return TaskFilter(
        prefix=prefix,
        routing_key=routing_key,
        tag=tag,
        due_after_ms=due_after_ms,
        due_before_ms=due_before_ms,
        state=_state(state),
    )


def _state(value: object) -> TaskState | None:
    if value is None or isinstance(value, TaskState):
        return value
    try:
        return TaskState(value)
    except ValueError:
        names = ", ".join(s.value for s in TaskState)
        raise ValidationError("state", f"must be one of {names}") from None


def page_limit(value: int | None) -> int:
    """A page size: 1 .. :data:`MAX_PAGE` (None: :data:`DEFAULT_PAGE`)."""
    if value is None:
        return DEFAULT_PAGE
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PAGE:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_PAGE}")
    return value


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing; ``cursor``: where the next page starts (None: last page)."""

    tasks: list[TaskInfo]
    cursor: str | None


def encode_cursor(key: Key) -> str:
    """The opaque cursor after ``key`` (URL-safe base64 of ``due_ms:id``)."""
    return base64.urlsafe_b64encode(f"{key[0]}:{key[1]}".encode("ascii")).decode("ascii")


def decode_cursor(cursor: object) -> Key:
    """The key a cursor of :func:`encode_cursor` stands for; ValidationError otherwise."""
    bad = ValidationError("cursor", "is not a cursor this API gave out")
    if not isinstance(cursor, str) or not 0 < len(cursor) <= _CURSOR_CHARS:
        raise bad
    try:
        raw = base64.b64decode(cursor.encode("ascii"), altchars=b"-_", validate=True)
        text = raw.decode("ascii")
    except (binascii.Error, UnicodeError, ValueError):
        raise bad from None
    due, _, task_id = text.partition(":")
    if not re.fullmatch(r"[0-9]{1,15}", due) or not ID_PATTERN.fullmatch(task_id):
        raise bad
    if int(due) > MAX_DUE_MS:
        raise bad
    return int(due), task_id


def next_cursor(tasks: list[TaskInfo], limit: int) -> str | None:
    """The cursor after a full page (a shorter one is the last)."""
    if len(tasks) < limit or not tasks:
        return None
    last = tasks[-1].task
    return encode_cursor((last.due_ms, last.id))


@dataclass(frozen=True, slots=True)
class Timeline:
    """Tasks due per routing key in ``buckets`` consecutive spans of
    ``bucket_ms`` from ``start_ms``: ``counts[key][i]`` are those due in
    ``[start_ms + i * bucket_ms, start_ms + (i + 1) * bucket_ms)``."""

    start_ms: int
    bucket_ms: int
    buckets: int
    counts: dict[str, list[int]]

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.bucket_ms * self.buckets


def timeline_span(bucket_ms: object, buckets: object) -> tuple[int, int]:
    """Validated ``(bucket_ms, buckets)`` of a timeline."""
    if (
        isinstance(bucket_ms, bool)
        or not isinstance(bucket_ms, int)
        or not MIN_BUCKET_MS <= bucket_ms <= MAX_BUCKET_MS
    ):
        raise ValidationError(
            "bucket", f"must be {MIN_BUCKET_MS // 1000} s to {MAX_BUCKET_MS // 86_400_000} days"
        )
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS:
        raise ValidationError("buckets", f"must be an integer from 1 to {MAX_BUCKETS}")
    if bucket_ms * buckets > MAX_TIMELINE_SPAN_MS:
        raise ValidationError(
            "buckets",
            f"bucket_ms x buckets must be at most {MAX_TIMELINE_SPAN_MS} "
            f"({MAX_TIMELINE_SPAN_MS // 86_400_000} days): fewer or shorter buckets",
        )
    return bucket_ms, buckets


def timeline_of(
    rows: Iterable[tuple[str | None, int, int]],
    start_ms: int,
    bucket_ms: int,
    buckets: int,
    default_routing_key: str,
) -> Timeline:
    """A timeline from ``(routing key, bucket, count)`` rows (a NULL or empty
    key is ``default_routing_key``); :class:`TooCostly` when it would hold
    more than :data:`MAX_TIMELINE_CELLS` counts. A store reads at most
    :data:`MAX_TIMELINE_CELLS` + 1 rows for it (one per key and bucket)."""
    most_keys = MAX_TIMELINE_CELLS // buckets
    counts: dict[str, list[int]] = {}
    for key, bucket, number in rows:
        row = counts.get(key or default_routing_key)
        if row is None:
            if len(counts) == most_keys:
                raise TooCostly(
                    f"the span holds tasks of more than {most_keys} routing keys (a timeline "
                    f"has at most {MAX_TIMELINE_CELLS} counts: routing keys x buckets): "
                    "narrow it by routing_key, prefix or tag, or ask for fewer buckets"
                )
            row = counts[key or default_routing_key] = [0] * buckets
        row[int(bucket)] += int(number)
    return Timeline(start_ms, bucket_ms, buckets, dict(sorted(counts.items())))


def count_cap(up_to: object) -> int | None:
    """A count's validated cap: 1 .. :data:`MAX_COUNT_UP_TO` (None: exact)."""
    if up_to is None:
        return None
    if isinstance(up_to, bool) or not isinstance(up_to, int) or not 1 <= up_to <= MAX_COUNT_UP_TO:
        raise ValidationError("up_to", f"must be an integer from 1 to {MAX_COUNT_UP_TO}")
    return up_to


@dataclass(frozen=True, slots=True)
class BulkCancelled:
    """What a bulk cancel did: tasks cancelled (they never fire), and tasks
    matched that were being published already (too late to cancel).
    ``cursor``: the walk stopped before its end (its time limit passed, or it
    was interrupted); a bulk cancel with the same filter from this cursor goes
    on after the last task this one read. None: it reached the end."""

    cancelled: int
    too_late: int
    cursor: str | None = None
