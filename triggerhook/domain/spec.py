"""What a caller asks for (:class:`TaskSpec`), and the rules that make it a task.

Every interface (library, HTTP, AMQP commands, CLI) hands the library a
``TaskSpec``; :func:`resolve` is the one place that validates it, once, into a
:class:`~triggerhook.domain.task.Task`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from triggerhook.domain.meta import HeaderValue, LatePolicy, make_meta
from triggerhook.domain.recurrence import Recurrence, make_recurrence
from triggerhook.domain.series import check_copyable
from triggerhook.domain.task import MIN_DUE_MS, OnConflict, Task, make_task, validate_due_ms
from triggerhook.domain.timeparse import due_from, parse_at
from triggerhook.errors import ValidationError

Due = datetime | int | float | str


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task to schedule. Exactly one of ``at``, ``at_ms`` and ``delay_ms``
    (a series may give none: see below).

    ``at``: a datetime or an RFC 3339 string (either without an offset: UTC;
    a number is taken as epoch seconds, kept for compatibility: prefer
    ``at_ms``); ``at_ms``: epoch milliseconds; ``delay_ms``: milliseconds from now.
    ``id``: None for a new UUIDv4; ``routing_key``: None for the configured
    default; ``payload``: text is sent as UTF-8. The rest is metadata
    (``domain/meta.py``): ``tags`` to find it by, the event's
    ``content_type``, ``content_encoding`` and ``headers``, and ``late``, its
    late-fire policy (None: the engine's default).

    A series (``domain/recurrence.py``): ``every`` (an ISO 8601 duration, or
    milliseconds as an int) or ``cron`` (5 fields, in ``timezone``, default
    UTC), and its end: ``until`` (given like ``at``) or ``until_ms`` (epoch
    milliseconds; any time before 1970 is the epoch). Its first occurrence is
    the time given (for cron: the first matching minute at or after it), or
    without one: one ``every`` from now, or the first matching minute at or after now.
    A cron series' daylight-saving policy: ``dst_repeated`` (``first``,
    ``last`` or ``both`` passes of a local time shown twice) and
    ``dst_skipped`` (``shift`` to the gap's end, or ``skip``); None: Debian
    cron's rule for its kind of entry (domain/recurrence.py). Occurrences a
    series missed while nothing could fire them: ``catch_up`` ``one`` (None:
    the first fires, late, once), ``skip`` (none fires) or ``all`` (each, up
    to ``catch_up_max``, default 100, as one-off copies; domain/series.py).

    ``on_conflict`` (an :class:`OnConflict` or its value; None: ``error``):
    what the create does when the id exists with other content: ``error``
    (a conflict), ``keep`` (the stored task stays) or ``replace`` (the new
    content and due time replace it, unless it is being published: too late).
    It is not part of the task's content.

    ``dedup_window_ms`` (None: the configured default, 0 unless set): once
    the task fired, a create of its id within this many milliseconds is
    answered ``already_fired`` and writes nothing (domain/meta.py). A
    series' window is its copies'.
    """

    id: str | None = None
    at: Due | None = None
    at_ms: int | None = None
    delay_ms: int | None = None
    routing_key: str | None = None
    payload: bytes | str | None = None
    tags: Sequence[str] | None = None
    content_type: str | None = None
    content_encoding: str | None = None
    headers: Mapping[str, HeaderValue] | None = None
    late: LatePolicy | None = None
    every: str | int | None = None
    cron: str | None = None
    timezone: str | None = None
    until: Due | None = None
    until_ms: int | None = None
    dst_repeated: str | None = None
    dst_skipped: str | None = None
    catch_up: str | None = None
    catch_up_max: int | None = None
    on_conflict: OnConflict | str | None = None
    dedup_window_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TaskRules:
    """The configured defaults and limits a spec is resolved with."""

    default_routing_key: str
    max_payload_bytes: int
    default_dedup_window_ms: int = 0


def resolve(spec: TaskSpec, now_ms: float, rules: TaskRules, field: str = "") -> Task:
    """The validated task ``spec`` asks for (``delay_ms`` counts from ``now_ms``).

    Raises :class:`ValidationError` naming the field, prefixed with ``field``
    when given (``tasks[3].routing_key``).
    """
    try:
        recur = _recurrence(spec)
        task = make_task(
            task_id=spec.id,
            due_ms=_first_due(spec, recur, now_ms),
            routing_key=(
                rules.default_routing_key if spec.routing_key is None else spec.routing_key
            ),
            payload=spec.payload,
            max_payload_bytes=rules.max_payload_bytes,
            meta=make_meta(
                tags=spec.tags,
                content_type=spec.content_type,
                content_encoding=spec.content_encoding,
                headers=spec.headers,
                late=spec.late,
                recur=recur,
                dedup_window_ms=(
                    rules.default_dedup_window_ms
                    if spec.dedup_window_ms is None
                    else spec.dedup_window_ms
                ),
            ),
        )
        if recur is not None and recur.catch_up == "all":
            check_copyable(task.id)  # its copies' ids must be task ids
        return task
    except ValidationError as exc:
        if not field:
            raise
        raise ValidationError(f"{field}.{exc.field}", exc.message) from None


def conflict_rule(spec: TaskSpec, field: str = "") -> OnConflict:
    """The spec's ``on_conflict``; raises :class:`ValidationError` naming it
    (prefixed with ``field`` when given) for anything but its three values."""
    value = spec.on_conflict
    if value is None:
        return OnConflict.ERROR
    if isinstance(value, OnConflict):
        return value
    if isinstance(value, str):
        try:
            return OnConflict(value)
        except ValueError:
            pass
    allowed = ", ".join(rule.value for rule in OnConflict)
    raise ValidationError(
        f"{field}.on_conflict" if field else "on_conflict", f"must be one of {allowed}"
    )


def _recurrence(spec: TaskSpec) -> Recurrence | None:
    """The series ``spec`` asks for (None: a one-off task); an error about its
    end names the field the caller gave it in."""
    until_ms = _until_ms(spec)
    try:
        return make_recurrence(
            every=spec.every,
            cron=spec.cron,
            timezone=spec.timezone,
            until_ms=until_ms,
            dst_repeated=spec.dst_repeated,
            dst_skipped=spec.dst_skipped,
            catch_up=spec.catch_up,
            catch_up_max=spec.catch_up_max,
        )
    except ValidationError as exc:
        if exc.field == "until" and spec.until_ms is not None:
            raise ValidationError("until_ms", exc.message) from None
        raise


def _until_ms(spec: TaskSpec) -> int | None:
    """A series' end from at most one of ``until`` and ``until_ms``."""
    if spec.until_ms is None:
        return None if spec.until is None else parse_at(spec.until, "until", past_ok=True)
    if spec.until is not None:
        raise ValidationError("until", "give at most one of until and until_ms")
    if isinstance(spec.until_ms, bool) or not isinstance(spec.until_ms, int):
        raise ValidationError("until_ms", "must be an integer number of epoch milliseconds")
    try:
        return validate_due_ms(max(spec.until_ms, MIN_DUE_MS))
    except ValidationError as exc:
        raise ValidationError("until_ms", exc.message) from None


def _first_due(spec: TaskSpec, recur: Recurrence | None, now_ms: float) -> int:
    """The due time given, or for a series without one its first occurrence."""
    if recur is None:
        return due_from(spec.at, spec.at_ms, spec.delay_ms, now_ms)
    if spec.at is None and spec.at_ms is None and spec.delay_ms is None:
        due = recur.first_ms(now_ms)
    else:
        due = recur.aligned_ms(due_from(spec.at, spec.at_ms, spec.delay_ms, now_ms))
    if recur.until_ms is not None and due > recur.until_ms:
        until = "until" if spec.until_ms is None else "until_ms"
        raise ValidationError(until, "is before the series' first occurrence")
    return due
