"""A task's fields as the HTTP API takes them, each defined once: a create
body's (its due time, routing key, payload, metadata and series) and a
reschedule body's (the due time), with their JSON Schemas. The parser
(:mod:`triggerhook.api.bodies`) takes the names it allows from here, and the
OpenAPI document (:mod:`triggerhook.api.openapi`) the properties; the values
are checked by the parser and by domain/meta.py and domain/recurrence.py
(tests/unit/test_openapi.py holds the schemas to them).
"""

from __future__ import annotations

from typing import Any

from triggerhook.api.fields import Field, Fields, names, properties
from triggerhook.api.openapi_parts import (
    EPOCH_MS,
    EPOCH_S,
    NEW_ID_SCHEMA,
    ROUTING_KEY_SCHEMA,
    TAG_SCHEMA,
    Schema,
    epoch_ms_schema,
    exclusive,
    object_schema,
    time_schema,
)
from triggerhook.api.openapi_schedule import CRON_SPACE, EVERY_SCHEMA, cron_schema
from triggerhook.domain.bounds import MAX_DUE_MS, MIN_DUE_MS
from triggerhook.domain.meta import (
    MAX_DEDUP_WINDOW_MS,
    MAX_HEADER_VALUE_BYTES,
    MAX_HEADERS,
    MAX_HEADERS_BYTES,
    MAX_TAGS,
)
from triggerhook.domain.recurrence import (
    CATCH_UP,
    DEFAULT_CATCH_UP_MAX,
    DST_REPEATED,
    DST_SKIPPED,
    MAX_CATCH_UP,
)
from triggerhook.domain.series import MAX_BACKFILL, MAX_SERIES_ID_FOR_COPIES
from triggerhook.domain.task import OnConflict

# Longest delay accepted (about 6,300 years).
MAX_DELAY_S = 200_000_000_000
MAX_DELAY_MS = MAX_DELAY_S * 1000

_INT64 = {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}

_RFC_3339 = "an RFC 3339 string; without an offset it is UTC"
AT_SCHEMA = time_schema(
    f"Due time: {_RFC_3339} (deprecated: epoch seconds, a number, fraction allowed). "
    "Any past time (even before 1970) fires at once; the latest is 9999-12-31T23:59:59.999Z. "
    "An 8-digit integer (20261201) is refused: it reads as 1970 and as a date alike "
    "(write 20261201.0, or the date as RFC 3339)."
)
AT_MS_SCHEMA = epoch_ms_schema(
    "Due time in epoch milliseconds. Any past time (even before 1970) fires at once; the "
    f"latest is {MAX_DUE_MS} (9999-12-31T23:59:59.999Z)."
)
DELAY_MS_SCHEMA = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_DELAY_MS,
    "description": "Due this many milliseconds after the request arrives.",
}
DELAY_SCHEMA = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_DELAY_S,
    "deprecated": True,
    "description": "Deprecated: seconds from now (use delay_ms).",
}
# The ways to say when a task is due (a reschedule's body): exactly one (a
# create's as well, unless a series).
WHEN_BODY: Fields = (
    Field("at", AT_SCHEMA),
    Field("at_ms", AT_MS_SCHEMA),
    Field("delay_ms", DELAY_MS_SCHEMA),
    Field("delay", DELAY_SCHEMA),  # deprecated: seconds
)
WHEN = tuple(field.name for field in WHEN_BODY)
ONE_WHEN = [{"required": [name]} for name in WHEN]


# -- task metadata ------------------------------------------------------------------------------

HEADER_VALUE_SCHEMA = {
    "oneOf": [
        {
            "type": "string",
            "maxLength": MAX_HEADER_VALUE_BYTES,
            "description": f"At most {MAX_HEADER_VALUE_BYTES} bytes as UTF-8.",
        },
        _INT64,
        {"type": "boolean"},
    ]
}
# Printable ASCII without space, 1-128 characters, not starting with x- or X-
# (those are the engine's own headers): a first character other than x/X, or
# x/X followed by nothing or by anything but "-".
_HEADER_NAME_PATTERN = "^([!-WYZ-wyz-~][!-~]{0,127}|[xX]([!-,.-~][!-~]{0,126})?)$"
HEADERS_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_HEADERS,
    "propertyNames": {"pattern": _HEADER_NAME_PATTERN},
    "additionalProperties": HEADER_VALUE_SCHEMA,
    "description": "Custom AMQP headers of the event. Names: 1-128 printable ASCII "
    "characters without space, not starting with x- (any case: the engine's); "
    f"at most {MAX_HEADERS_BYTES} bytes of names and values in all (an integer or a "
    "boolean counts 8).",
}
PROPERTY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": "^[ -~]{1,255}$",
    "description": "An AMQP property of the event: 1-255 printable ASCII characters.",
}
_SKIP_AFTER = {
    **_INT64,
    "minimum": 0,
    "description": "More than this many ms late: dead-lettered instead.",
}


def _late_schema(deadlines: list[Schema]) -> Schema:
    return {
        "description": "What to do when the task is found late at publish time (by the "
        "engine's clock): fire it anyway, or dead-letter it (cause: late) when more "
        "than skip_after_ms late or past a deadline. Absent: the daemon's late_policy.",
        "oneOf": [
            {"type": "string", "enum": ["fire"]},
            object_schema({"skip_after_ms": _SKIP_AFTER}, ["skip_after_ms"]),
            *deadlines,
        ],
    }


# A deadline as a create body gives it (one field), and as an answer shows it (both).
_DEADLINE_MS = epoch_ms_schema("The deadline in epoch milliseconds (any past time: the epoch).")
GIVEN_DEADLINES = [
    object_schema({"deadline_ms": _DEADLINE_MS}, ["deadline_ms"]),
    object_schema({"deadline": time_schema(f"The deadline: {_RFC_3339}, as at.")}, ["deadline"]),
]
SHOWN_DEADLINES = [
    object_schema({"deadline_ms": EPOCH_MS, "deadline": EPOCH_S}, ["deadline_ms", "deadline"])
]


DEDUP_WINDOW_SCHEMA = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_DEDUP_WINDOW_MS,
    "description": "A dedup window in milliseconds (at most 30 days; 0: none). Once the task "
    "fired, a create of its id within this long of the fire is answered 409 already_fired "
    "(with fired_ms) and writes nothing; after it, the id can be created again. A series' "
    "own id stays while it runs: its window applies to its one-off copies (trigger, "
    "backfill, catch_up all). Absent: the daemon's dedup_window_ms (0).",
}


def metadata_fields(late_deadline: list[Schema]) -> Fields:
    """Tags, AMQP properties, headers, late-fire policy and dedup window of a
    task (a deadline as given, or as shown)."""
    return (
        Field(
            "tags",
            {
                "type": "array",
                "maxItems": MAX_TAGS,
                "items": TAG_SCHEMA,
                "description": "Labels to list, count and cancel by (a set: kept sorted).",
            },
        ),
        Field("content_type", PROPERTY_SCHEMA),
        Field("content_encoding", PROPERTY_SCHEMA),
        Field("headers", HEADERS_SCHEMA),
        Field("late", _late_schema(late_deadline)),
        Field("dedup_window_ms", DEDUP_WINDOW_SCHEMA),
    )


SERIES = {"anyOf": [{"required": ["every"]}, {"required": ["cron"]}]}


# A series as a create body gives it (only with every or cron).
SERIES_BODY: Fields = (
    Field("every", EVERY_SCHEMA),
    Field(
        "cron",
        cron_schema(
            f"[{CRON_SPACE}]+",
            f"[{CRON_SPACE}]*",
            "A series by a cron expression of 5 fields (minute hour day-of-month month "
            "day-of-week; Debian cron's syntax as cronsim reads it: lists, ranges, steps, "
            "names, L, LW, nL, n#k) in timezone; fields separated by any whitespace. Not an "
            "expression no date matches: days no listed month has (0 0 30 2 *, refused by "
            "this schema), or none within 50 years (0 0 LW * */6: the last weekday on a "
            "weekend; 422). With at or delay, the first occurrence is the first matching "
            "minute at or after that time; it must come by 9999-12-31T23:59:59.999Z (else 422).",
        ),
    ),
    Field("timezone", {"$ref": "#/components/schemas/TimeZone", "default": "UTC"}),
    Field(
        "dst_repeated",
        {
            "type": "string",
            "enum": list(DST_REPEATED),
            "description": "cron only: a matching local time the clocks show twice (they go "
            "back) fires at its first pass, its last, or both. Absent: first for an entry "
            "naming its times (30 2 * * *), both for one whose minute or hour field starts "
            "with * (*/15 * * * *), as Debian's cron.",
        },
    ),
    Field(
        "dst_skipped",
        {
            "type": "string",
            "enum": list(DST_SKIPPED),
            "description": "cron only: matching local times the clocks skip (they go "
            "forward) fire once, at the end of the gap (shift), or not at all (skip). Absent: "
            "shift for an entry naming its times, skip for one whose minute or hour field "
            "starts with *.",
        },
    ),
    Field(
        "catch_up",
        {
            "type": "string",
            "enum": list(CATCH_UP),
            "default": "one",
            "description": "Occurrences missed while nothing could fire them (an outage, a "
            "pause): one (the first fires once, late; the series goes on with the first due "
            "after now), skip (none fires: an occurrence whose next is already due when it "
            "is published goes out as a dead letter, cause late), all (each fires, up to "
            "catch_up_max, as one-off tasks <id>:<due ms>, through the rate limits; the id "
            f"then has at most {MAX_SERIES_ID_FOR_COPIES} characters).",
        },
    ),
    Field(
        "catch_up_max",
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_CATCH_UP,
            "default": DEFAULT_CATCH_UP_MAX,
            "description": "catch_up all only: at most this many missed occurrences fire, "
            "the earliest; the rest are skipped.",
        },
    ),
    Field(
        "until",
        time_schema(
            f"The series' end: its last occurrence is the last one at or before it. {_RFC_3339} "
            "(deprecated: epoch seconds), as at; not before the first occurrence (else 422)."
        ),
    ),
    Field(
        "until_ms",
        epoch_ms_schema(
            "The series' end in epoch milliseconds (before 1970: the epoch), as until."
        ),
    ),
)


ON_CONFLICT_SCHEMA = {
    "type": "string",
    "enum": [rule.value for rule in OnConflict],
    "default": OnConflict.ERROR.value,
    "description": "When the id exists with other content: error (409 conflict); keep (200, "
    "outcome kept: the stored task stays and is answered); replace (200, outcome replaced: "
    "this content and due time replace it, a new revision; 409 too_late when it is being "
    "published). Debounce: replace with delay_ms the quiet period. Not part of the content.",
}


def create_body(max_payload_bytes: int) -> Fields:
    """A create body's fields (and a batch's tasks'); only the payload's
    bounds depend on ``max_payload_bytes``, not the names."""
    return (
        Field("id", NEW_ID_SCHEMA),
        *WHEN_BODY,
        Field("routing_key", ROUTING_KEY_SCHEMA),
        Field(
            "payload",
            {
                "type": "string",
                "maxLength": max_payload_bytes,
                "description": f"UTF-8 text of at most {max_payload_bytes} bytes.",
            },
        ),
        Field(
            "payload_b64",
            {
                "type": "string",
                "format": "byte",
                "maxLength": -(-max_payload_bytes // 3) * 4,
                "description": f"Base64 of at most {max_payload_bytes} bytes.",
            },
        ),
        *metadata_fields(GIVEN_DEADLINES),
        *SERIES_BODY,
        Field("on_conflict", ON_CONFLICT_SCHEMA),
    )


# The names of a create body's fields (parsed by triggerhook.api.bodies).
CREATE_FIELDS = names(create_body(0))
# The fields of a create body that only a cron series takes.
CRON_ONLY = ("timezone", "dst_repeated", "dst_skipped")
# The fields of a create body that only a series takes, and what they need.
SERIES_DEPENDENT: dict[str, dict[str, Any]] = {
    "until": SERIES,
    "until_ms": SERIES,
    "catch_up": SERIES,
    "catch_up_max": {
        **SERIES,
        "required": ["catch_up"],
        "properties": {"catch_up": {"const": "all"}},
    },
}
# The fields of a create body of which at most one may be given, by group.
EXCLUSIVE = (WHEN, ("until", "until_ms"), ("payload", "payload_b64"), ("every", "cron"))


def create_schema(max_payload_bytes: int) -> Schema:
    """The OpenAPI schema of a create body."""
    return object_schema(
        properties(create_body(max_payload_bytes)),
        anyOf=[*ONE_WHEN, *SERIES["anyOf"]],
        dependentRequired={name: ["cron"] for name in CRON_ONLY},
        dependentSchemas=exclusive(EXCLUSIVE, SERIES_DEPENDENT),
        description="Exactly one of at, at_ms and delay_ms (or the deprecated delay), or (a "
        "series: every or cron) none; at most one of payload and payload_b64, of every and "
        "cron, and of until and until_ms; timezone, dst_repeated and dst_skipped only with "
        "cron, until, catch_up and catch_up_max only in a series (catch_up_max with catch_up all) "
        "(without a due time the first occurrence is one every from now, or the next "
        "matching minute). The metadata and the schedule are part of the content an "
        "idempotent re-create compares.",
    )


# -- a series' backfill ---------------------------------------------------------------------------


def _range_end(description: str) -> Schema:
    return {
        "type": "integer",
        "minimum": MIN_DUE_MS,
        "maximum": MAX_DUE_MS,
        "description": description,
    }


# POST /v1/tasks/{id}/backfill (and the backfill command): both fields required.
BACKFILL_BODY: Fields = (
    Field("from_ms", _range_end("The range's start in epoch milliseconds, included.")),
    Field(
        "to_ms",
        _range_end(
            "The range's end in epoch milliseconds, excluded: after from_ms and not after "
            f"now (a backfill fires past occurrences); at most {MAX_BACKFILL} of the series' "
            "occurrences in the range (else 422, field to_ms: backfill it in parts)."
        ),
    ),
)
