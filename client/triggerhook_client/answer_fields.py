"""The fields of the daemon's answers, each defined once: its name, its kind,
whether the answer always has it, whether it is deprecated, and what the
OpenAPI document says of it. Standard library only.

Three readers: the client decodes answers by these tables
(:mod:`triggerhook_client.answers`, one check per kind); the daemon's OpenAPI
document builds its answer schemas from them (``triggerhook.api.openapi_answers``,
which adds each field's detailed JSON Schema: its pattern, bounds or ``$ref``);
and the daemon's rendering (``triggerhook.api.render``) emits no field that is
not here (tests/unit/test_answer_fields.py).

``required``: the document requires it (a daemon always sends it). The client
checks a required field even when it is absent (absent reads as null: only a
cursor takes that, a daemon too old to stop a bulk cancel early said nothing),
an optional one when present, and never a field that is not ``read``: the
deprecated epoch seconds (it reads the ``*_ms`` twins) and what it does not use.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Kind(enum.Enum):
    """What a field holds, as the client checks it."""

    TEXT = "a string"
    BASE64 = "a string of base64"
    MS = "a whole number of milliseconds (an instant, or a duration)"
    COUNT = "a whole number, at least 0"
    SECONDS = "deprecated: epoch seconds, the same time as its *_ms twin"
    STATE = "a task state (scheduled, firing)"
    TEXTS = "a list of strings"
    HEADERS = "an object of strings, integers and booleans"
    LATE = "a late-fire policy: fire, {skip_after_ms}, {deadline_ms, deadline}"
    OCCURRENCE = "an occurrence number, at least 1"
    TRUE = "true"
    FLAG = "a boolean"
    CURSOR = "a cursor string, or null"
    OBJECTS = "a list of objects"
    COUNTS = "per routing key, a list of counts (one per bucket)"
    OBJECT = "an object"


@dataclass(frozen=True, slots=True)
class AnswerField:
    """One field of an answer; ``description`` empty: the document shows the
    description of the field's detailed schema (the create body's, for the
    metadata a task shows as it was given)."""

    name: str
    kind: Kind
    required: bool = False
    description: str = ""
    deprecated: bool = False
    read: bool = True  # the client checks it (when it decodes the answer)


AnswerFields = tuple[AnswerField, ...]


def names(fields: Iterable[AnswerField]) -> tuple[str, ...]:
    return tuple(field.name for field in fields)


def required(fields: Iterable[AnswerField]) -> list[str]:
    return [field.name for field in fields if field.required]


def field(fields: Iterable[AnswerField], name: str) -> AnswerField:
    """The field of ``fields`` named ``name``."""
    [found] = [f for f in fields if f.name == name]
    return found


def _seconds(name: str, required: bool = False) -> AnswerField:
    """The deprecated epoch seconds of instant ``name`` (``name_ms``), never read."""
    return AnswerField(
        name,
        Kind.SECONDS,
        required,
        "Deprecated: the same time in epoch seconds, millisecond precision.",
        deprecated=True,
        read=False,
    )


# -- a task ---------------------------------------------------------------------------------------

# A write's answer (a create's, a reschedule's): the task's id and due time.
CREATED: AnswerFields = (
    AnswerField("id", Kind.TEXT, True),
    AnswerField("due_ms", Kind.MS, True, "Due time, epoch milliseconds."),
    _seconds("at", True),
)
# A create's answer: a write's, and what became of the create.
CREATE: AnswerFields = (
    *CREATED,
    AnswerField(
        "outcome",
        Kind.TEXT,
        description="created (201), exists (the same content was stored), replaced "
        "(on_conflict replace) or kept (on_conflict keep: id and due time are the stored "
        "task's). Absent from daemons before 2026-12: 201 created, 200 exists.",
    ),
)
# A stored task as a lookup and a listing show it: then its metadata (as
# given), its series, and (a lookup) its payload.
TASK: AnswerFields = (
    *CREATED,
    AnswerField("routing_key", Kind.TEXT, True),
    AnswerField("state", Kind.STATE, True),
    # When it goes, where that is not simply its due time.
    AnswerField(
        "throttled",
        Kind.FLAG,
        description="true: a rate limit holds the task back, and it waits in the database "
        "until fire_ms (state scheduled: it can still be cancelled or rescheduled, which "
        "ends the wait). false otherwise, also while a limit holds it in an instance's "
        "memory (state firing). Absent from older daemons: read it as false.",
    ),
    AnswerField(
        "fire_ms",
        Kind.MS,
        description="When the task fires, epoch milliseconds, where that is later than "
        "due_ms: throttled, the instant its rate limit lets it go; else the next try of "
        "an event the broker did not take. Absent: it fires at due_ms.",
    ),
)
META: AnswerFields = (
    AnswerField("tags", Kind.TEXTS),
    AnswerField("content_type", Kind.TEXT),
    AnswerField("content_encoding", Kind.TEXT),
    AnswerField("headers", Kind.HEADERS),
    AnswerField("late", Kind.LATE),
    AnswerField("dedup_window_ms", Kind.MS),
)
# A series' schedule (every, or cron in its timezone) ...
SCHEDULE: AnswerFields = (
    AnswerField("every", Kind.TEXT),
    AnswerField("cron", Kind.TEXT),
    AnswerField("timezone", Kind.TEXT),
    AnswerField("dst_repeated", Kind.TEXT),
    AnswerField("dst_skipped", Kind.TEXT),
    AnswerField(
        "catch_up",
        Kind.TEXT,
        description="Occurrences missed while nothing could fire them: skip, one or all "
        "(absent: one).",
    ),
    AnswerField(
        "catch_up_max",
        Kind.COUNT,
        description="With catch_up all: at most this many missed occurrences fire.",
    ),
)
# ... and where it stands: only in a series.
SERIES_STATE: AnswerFields = (
    AnswerField("until_ms", Kind.MS, description="Epoch milliseconds."),
    _seconds("until"),
    AnswerField(
        "occurrence",
        Kind.OCCURRENCE,
        description="The pending occurrence (1: the first); its event carries it as "
        "header x-occurrence.",
    ),
    AnswerField(
        "stopping",
        Kind.TRUE,
        description="A cancel came while this occurrence was being published: the "
        "series ends with it.",
    ),
    AnswerField(
        "paused",
        Kind.TRUE,
        description="Paused: no occurrence fires until it is resumed (due_ms is then the "
        "latest due time there is, not an occurrence).",
    ),
    AnswerField(
        "resume_ms",
        Kind.MS,
        description="A paused series: the occurrence it resumes at, epoch milliseconds "
        "(absent while the occurrence being published when it was paused still fires).",
    ),
)
SERIES: AnswerFields = (*SCHEDULE, *SERIES_STATE)
LISTED: AnswerFields = (*TASK, *META, *SERIES)  # a listing's task: no payload
# A lookup's payload: exactly one of the two.
PAYLOAD: AnswerFields = (
    AnswerField("payload", Kind.TEXT, description="The payload, if UTF-8 text."),
    AnswerField("payload_b64", Kind.BASE64, description="Else base64."),
)
SHOWN: AnswerFields = (*LISTED, *PAYLOAD)  # a lookup's task

# A batch's answer.
IDS: AnswerFields = (
    AnswerField("ids", Kind.TEXTS, True),
    AnswerField(
        "outcomes",
        Kind.TEXTS,
        description="Each task's outcome, in order: created, exists, replaced or kept (as "
        "one create's outcome).",
    ),
)

# -- a series' life -------------------------------------------------------------------------------

# A pause's or a resume's answer: the series' id and what became of it (paused,
# paused_after_this, resumed, ended: the document gives them, as an enum).
SERIES_DONE: AnswerFields = (
    AnswerField("id", Kind.TEXT, True),
    AnswerField("outcome", Kind.TEXT, True),
)
# A trigger's or a backfill's copy: a one-off task of the series' content.
COPY: AnswerFields = (
    AnswerField("id", Kind.TEXT, True, "The copy's id: <series id>:<due ms>."),
    AnswerField("due_ms", Kind.MS, True, "The copy's due time, epoch milliseconds."),
    AnswerField(
        "outcome",
        Kind.TEXT,
        True,
        "created, or exists: it was written before and is still pending.",
    ),
)
# A trigger's or a backfill's answer: the series' id, the outcome (triggered,
# backfilled) and the copies (each a COPY).
COPIED: AnswerFields = (
    *SERIES_DONE,
    AnswerField("copies", Kind.OBJECTS, True, "The one-off tasks written, in due order."),
)

# -- many tasks -----------------------------------------------------------------------------------

PAGE: AnswerFields = (
    AnswerField("tasks", Kind.OBJECTS, True),
    AnswerField(
        "next_cursor",
        Kind.CURSOR,
        True,
        "Where the next page starts; null after the last page. A page shorter than limit "
        "is the last; a full one always has a cursor (the next page may be empty).",
    ),
)
COUNTED: AnswerFields = (
    AnswerField("count", Kind.COUNT, True),
    AnswerField(
        "at_least",
        Kind.FLAG,
        True,
        "The count stopped at up_to: at least that many match.",
        read=False,
    ),
)
TIMELINE: AnswerFields = (
    AnswerField("start_ms", Kind.MS, True, "Epoch milliseconds."),
    AnswerField("bucket_ms", Kind.MS, True),
    _seconds("start", True),
    AnswerField(
        "bucket",
        Kind.SECONDS,
        True,
        "Deprecated: bucket_ms in seconds.",
        deprecated=True,
        read=False,
    ),
    AnswerField("buckets", Kind.COUNT, True),
    AnswerField(
        "routing_keys",
        Kind.COUNTS,
        True,
        "Per routing key, the tasks due in each bucket (buckets counts); keys with no task "
        "in the span are absent.",
    ),
)
BULK_CANCELLED: AnswerFields = (
    AnswerField("cancelled", Kind.COUNT, True),
    AnswerField("too_late", Kind.COUNT, True),
    AnswerField(
        "next_cursor",
        Kind.CURSOR,
        True,
        "null: every matching task was handled. Else the walk stopped before its end "
        "(bulk_cancel_timeout_s, or the daemon stopping): send the same filter with this "
        "as cursor to go on.",
    ),
)

# -- probes, figures, errors ----------------------------------------------------------------------

HEALTHY: AnswerFields = (AnswerField("status", Kind.TEXT, True),)  # /healthz, /readyz 200
UNREADY: AnswerFields = (  # /readyz 503
    AnswerField("status", Kind.TEXT, True),
    AnswerField("reasons", Kind.TEXTS, True),
)
FIGURES: AnswerFields = (  # /v1/status: the fields' meanings are in docs/metrics.md
    AnswerField("instance", Kind.TEXT, True),
    AnswerField("running", Kind.FLAG, True),
    AnswerField("period", Kind.OBJECT, True),
    AnswerField("http", Kind.OBJECT, True),
    AnswerField("totals", Kind.OBJECT, True),
)
# Every error: {"error": {"code", "message", "field"?, "fired_ms"?}}.
ERROR: AnswerFields = (AnswerField("error", Kind.OBJECT, True),)
ERROR_DETAIL: AnswerFields = (
    AnswerField("code", Kind.TEXT, True),
    AnswerField("message", Kind.TEXT, True),
    AnswerField("field", Kind.TEXT),
    AnswerField(
        "fired_ms",
        Kind.MS,
        description="already_fired only: when the task of this id fired, epoch milliseconds "
        "(its dedup window runs from then).",
    ),
)
