"""The OpenAPI 3.1 document of the HTTP API, served at ``/openapi.json``.

Kept beside the handlers (triggerhook/api/http.py, triggerhook/api/listing.py)
and checked against them by the schema-driven fuzz test
(tests/integration/test_http_fuzz.py) and tests/unit/test_openapi.py: every
value a schema here admits must be accepted, and every value it refuses must be
refused. The limits come from the modules that enforce them; those JSON Schema
cannot state (bytes of UTF-8, the headers' total size, a series' bounds that depend
on the time: until after the first occurrence, that one by 9999, a cron expression
matching a date within 50 years) are in descriptions.

OpenAPI 3.1 because its schemas are JSON Schema 2020-12: ``propertyNames``
(the header names) means nothing to a 3.0 (draft 4) validator. In that data
model 5.0 is an integer and 20261201.0 equals 20261201.
"""

from __future__ import annotations

from typing import Any

from triggerhook.api.bodies import MAX_DELAY_MS, MAX_DELAY_S, RESERVED_IDS
from triggerhook.api.listing import DUE_RANGE_PAIRS
from triggerhook.api.openapi_schedule import (
    CRON_SPACE,
    EVERY_SCHEMA,
    EVERY_SHOWN_SCHEMA,
    cron_schema,
    timezone_schema,
)
from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.listing import (
    DEFAULT_PAGE,
    MAX_BUCKET_MS,
    MAX_BUCKETS,
    MAX_PAGE,
    MIN_BUCKET_MS,
)
from triggerhook.domain.meta import MAX_HEADER_VALUE_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_TAGS

Schema = dict[str, Any]

_ID_CHARS = "[A-Za-z0-9._:-]"
_KEY_CHARS = "[A-Za-z0-9._:/-]"  # routing keys and tags
ID_SCHEMA = {"type": "string", "pattern": f"^{_ID_CHARS}+$", "minLength": 1, "maxLength": 64}
# /v1/tasks/batch, /count, /timeline and /cancel are other endpoints, never task ids.
NEW_ID_SCHEMA = {**ID_SCHEMA, "not": {"enum": sorted(RESERVED_IDS)}}
ROUTING_KEY_SCHEMA = {"type": "string", "pattern": f"^{_KEY_CHARS}{{1,255}}$"}
TAG_SCHEMA = {"type": "string", "pattern": f"^{_KEY_CHARS}{{1,64}}$"}
PREFIX_SCHEMA = {"type": "string", "pattern": f"^{_ID_CHARS}{{1,64}}$"}
STATE_SCHEMA = {"type": "string", "enum": ["scheduled", "firing"]}
MAX_AT_S = 253_402_300_799.999  # 9999-12-31T23:59:59.999Z
_INT64 = {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}
_COUNT = {"type": "integer", "minimum": 0}
_DATE_TIME = {"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-"}


_DEPRECATED_SECONDS = {
    "type": "number",
    "maximum": MAX_AT_S,
    "deprecated": True,
    "description": "Deprecated: epoch seconds (fraction allowed). Use the *_ms field, or text.",
}


def _time_schema(description: str) -> Schema:
    """A time in a JSON body: an RFC 3339 string (without an offset: UTC), or
    epoch seconds (a number: deprecated)."""
    return {"description": description, "oneOf": [_DATE_TIME, _DEPRECATED_SECONDS]}


def _epoch_ms_schema(description: str) -> Schema:
    """An instant in epoch milliseconds: any whole number up to 9999 (before 1970: the epoch)."""
    return {"type": "integer", "maximum": MAX_DUE_MS, "description": description}


_RFC_3339 = "an RFC 3339 string; without an offset it is UTC"
AT_SCHEMA = _time_schema(
    f"Due time: {_RFC_3339} (deprecated: epoch seconds, a number, fraction allowed). "
    "Any past time (even before 1970) fires at once; the latest is 9999-12-31T23:59:59.999Z. "
    "An 8-digit integer (20261201) is refused: it reads as 1970 and as a date alike "
    "(write 20261201.0, or the date as RFC 3339)."
)
AT_MS_SCHEMA = _epoch_ms_schema(
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
WHEN = ("at", "at_ms", "delay_ms", "delay")
# Exactly one of these (a reschedule; a create as well, unless a series).
_ONE_WHEN = [{"required": [name]} for name in WHEN]
_WHEN_PROPERTIES = {
    "at": AT_SCHEMA,
    "at_ms": AT_MS_SCHEMA,
    "delay_ms": DELAY_MS_SCHEMA,
    "delay": DELAY_SCHEMA,
}
EPOCH_MS = {"type": "integer", "description": "Epoch milliseconds."}
EPOCH_S = {
    "type": "number",
    "deprecated": True,
    "description": "Deprecated: the same time in epoch seconds, millisecond precision.",
}


def _below(limit: str) -> str:
    """A regex for the decimal numbers of ``len(limit)`` digits below ``limit``."""
    branches = []
    for i, digit in enumerate(limit):
        if digit != "0":
            rest = len(limit) - i - 1
            branches.append(
                f"{limit[:i]}[0-{int(digit) - 1}]" + (f"[0-9]{{{rest}}}" if rest else "")
            )
    return "|".join(branches)


def _epoch_text_pattern() -> str:
    """Epoch seconds as text, exactly as the parser takes them: any negative
    number (before 1970: already due), else at most 253402300799.999 (a
    sub-millisecond part rounds up); a bare 8-digit integer is refused."""
    latest = str(int(MAX_AT_S))  # 253402300799, 12 digits
    fewer = f"0*[0-9]{{1,{len(latest) - 1}}}"  # fewer significant digits
    below = f"0*({_below(latest)})"
    fraction_up_to_999 = "([0-8][0-9]*|9([0-8][0-9]*)?|99([0-8][0-9]*)?|9990*)?"
    whole_not_8 = f"[0-9]{{1,7}}|[0-9]{{9,{len(latest) - 1}}}|0+[0-9]{{{len(latest) - 1}}}"
    positive = [
        f"({fewer}|{below})\\.[0-9]*",
        f"0*{latest}\\.{fraction_up_to_999}",
        f"{whole_not_8}|{below}|0*{latest}",
    ]
    return f"^(-[0-9]+(\\.[0-9]*)?|\\+?({'|'.join(f'({p})' for p in positive)}))$"


def _instant_params(name: str, description: str) -> list[Schema]:
    """An instant as query parameters: ``name`` (an RFC 3339 string, or
    deprecated epoch seconds) or ``name_ms`` (epoch ms), at most one."""
    text = _query(
        name,
        {
            "type": "string",
            "maxLength": 64,
            "anyOf": [{"pattern": _epoch_text_pattern()}, _DATE_TIME],
        },
        f"{description} An RFC 3339 time (without an offset: UTC); epoch seconds (fraction "
        f"allowed) are deprecated. At most one of {name} and {name}_ms.",
    )
    ms = _query(
        f"{name}_ms",
        _epoch_ms_schema(f"{description} Epoch milliseconds (before 1970: the epoch)."),
        f"{description} Epoch milliseconds. At most one of {name} and {name}_ms.",
    )
    return [text, ms]


_ERROR = {"$ref": "#/components/schemas/Error"}
_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {}]


def _json(schema: Schema) -> Schema:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> Schema:
    return {"description": description, **_json(_ERROR)}


def _object(properties: Schema, required: list[str] | None = None, **more: Any) -> Schema:
    """A JSON object with exactly these properties."""
    schema: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return {**schema, **more}


_BODY_ERRORS = {
    "400": _error("Malformed JSON."),
    "408": _error("The body did not arrive within http_body_timeout_s."),
    "413": _error("Body larger than http_max_body_bytes."),
    "415": _error("Content-Type is not application/json."),
    "422": _error("A field is invalid; error.field names it."),
}
_COMMON = {
    "401": _error("Missing or wrong bearer token (when api_token is set)."),
    "503": _error("Database unavailable or daemon stopping; retry."),
}


def _only(*methods: str) -> Schema:
    """The 405 of any other method on the path (Allow lists these)."""
    allowed = ", ".join(methods)
    return {"405": _error(f"A method other than {allowed} on this path (Allow: {allowed}).")}


_TASK_PATH_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "A task id. batch, count, timeline and cancel are never one: those "
    "paths are other operations.",
    "schema": ID_SCHEMA,
}

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
            _object({"skip_after_ms": _SKIP_AFTER}, ["skip_after_ms"]),
            *deadlines,
        ],
    }


# A deadline as a create body gives it (one field), and as an answer shows it (both).
_DEADLINE_MS = _epoch_ms_schema("The deadline in epoch milliseconds (any past time: the epoch).")
_GIVEN_DEADLINES = [
    _object({"deadline_ms": _DEADLINE_MS}, ["deadline_ms"]),
    _object({"deadline": _time_schema(f"The deadline: {_RFC_3339}, as at.")}, ["deadline"]),
]
_SHOWN_DEADLINES = [
    _object({"deadline_ms": EPOCH_MS, "deadline": EPOCH_S}, ["deadline_ms", "deadline"])
]


def _metadata(late_deadline: list[Schema]) -> Schema:
    """Tags, AMQP properties, headers and late-fire policy of a task."""
    return {
        "tags": {
            "type": "array",
            "maxItems": MAX_TAGS,
            "items": TAG_SCHEMA,
            "description": "Labels to list, count and cancel by (a set: kept sorted).",
        },
        "content_type": PROPERTY_SCHEMA,
        "content_encoding": PROPERTY_SCHEMA,
        "headers": HEADERS_SCHEMA,
        "late": _late_schema(late_deadline),
    }


_SERIES = {"anyOf": [{"required": ["every"]}, {"required": ["cron"]}]}


def _series_fields() -> Schema:
    """A series as a create body gives it (only with every or cron)."""
    return {
        "every": EVERY_SCHEMA,
        "cron": cron_schema(
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
        "timezone": {"$ref": "#/components/schemas/TimeZone", "default": "UTC"},
        "until": _time_schema(
            f"The series' end: its last occurrence is the last one at or before it. {_RFC_3339} "
            "(deprecated: epoch seconds), as at; not before the first occurrence (else 422)."
        ),
        "until_ms": _epoch_ms_schema(
            "The series' end in epoch milliseconds (before 1970: the epoch), as until."
        ),
    }


def _series_shown() -> Schema:
    """A series as lookups and listings show it."""
    return {
        "every": EVERY_SHOWN_SCHEMA,
        "cron": {"$ref": "#/components/schemas/ShownCron"},
        "timezone": {"$ref": "#/components/schemas/TimeZone"},
        "until_ms": EPOCH_MS,
        "until": EPOCH_S,
        "occurrence": {
            "type": "integer",
            "minimum": 1,
            "description": "The pending occurrence (1: the first); its event carries it as "
            "header x-occurrence.",
        },
        "stopping": {
            "const": True,
            "description": "A cancel came while this occurrence was being published: the "
            "series ends with it.",
        },
    }


_SHOWN_SERIES_RULES = {
    "not": {"required": ["every", "cron"]},
    "dependentRequired": {
        "every": ["occurrence"],
        "cron": ["timezone", "occurrence"],
        "timezone": ["cron"],
    },
    "dependentSchemas": {name: _SERIES for name in ("until_ms", "until", "occurrence", "stopping")},
}


def _create_schema(max_payload_bytes: int) -> Schema:
    return _object(
        {
            "id": NEW_ID_SCHEMA,
            **_WHEN_PROPERTIES,
            "routing_key": ROUTING_KEY_SCHEMA,
            "payload": {
                "type": "string",
                "maxLength": max_payload_bytes,
                "description": f"UTF-8 text of at most {max_payload_bytes} bytes.",
            },
            "payload_b64": {
                "type": "string",
                "format": "byte",
                "maxLength": -(-max_payload_bytes // 3) * 4,
                "description": f"Base64 of at most {max_payload_bytes} bytes.",
            },
            **_metadata(_GIVEN_DEADLINES),
            **_series_fields(),
        },
        anyOf=[*_ONE_WHEN, *_SERIES["anyOf"]],
        dependentRequired={"timezone": ["cron"]},
        dependentSchemas=_exclusive(EXCLUSIVE, {"until": _SERIES, "until_ms": _SERIES}),
        description="Exactly one of at, at_ms and delay_ms (or the deprecated delay), or (a "
        "series: every or cron) none; at most one of payload and payload_b64, of every and "
        "cron, and of until and until_ms; timezone only with cron, until only in a series "
        "(without a due time the first occurrence is one every from now, or the next "
        "matching minute). The metadata and the schedule are part of the content an "
        "idempotent re-create compares.",
    )


# The fields of a create body of which at most one may be given, by group.
EXCLUSIVE = (WHEN, ("until", "until_ms"), ("payload", "payload_b64"), ("every", "cron"))


def _exclusive(groups: tuple[tuple[str, ...], ...], more: dict[str, Schema]) -> Schema:
    """``dependentSchemas``: each field of a group excludes the others of its
    group (``{"properties": {"other": false}}``), and ``more``'s schemas hold
    too. Stated so rather than as ``not`` (any two present), which a fuzzer's
    coverage phase takes minutes to generate for."""
    dependent: Schema = {}
    for group in groups:
        for name in group:
            others = {other: False for other in group if other != name}
            dependent[name] = {**more.get(name, {}), "properties": others}
    return {**more, **dependent}


def _task_schema(payload: bool) -> Schema:
    """A stored task as a lookup (with its payload) or a listing shows it."""
    properties: Schema = {
        "id": ID_SCHEMA,
        "due_ms": {**EPOCH_MS, "description": "Due time, epoch milliseconds."},
        "at": EPOCH_S,
        "routing_key": {"type": "string"},
        "state": STATE_SCHEMA,
        **_metadata(_SHOWN_DEADLINES),
        **_series_shown(),
    }
    properties["tags"] = {**properties["tags"], "uniqueItems": True}
    required = ["id", "due_ms", "at", "routing_key", "state"]
    if not payload:
        return _object(properties, required, allOf=[_SHOWN_SERIES_RULES])
    properties["payload"] = {"type": "string", "description": "The payload, if UTF-8 text."}
    properties["payload_b64"] = {"type": "string", "format": "byte", "description": "Else base64."}
    return _object(
        properties,
        required,
        allOf=[_SHOWN_SERIES_RULES],
        oneOf=[{"required": ["payload"]}, {"required": ["payload_b64"]}],
    )


# -- finding tasks --------------------------------------------------------------------------------


def _query(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _selection_params() -> list[Schema]:
    """Which tasks: id prefix, routing key, tag (every one given must match)."""
    return [
        _query("prefix", PREFIX_SCHEMA, "Tasks whose id starts with this."),
        _query("routing_key", ROUTING_KEY_SCHEMA, "Tasks with this routing key."),
        _query("tag", TAG_SCHEMA, "Tasks with this tag."),
    ]


def _filter_params() -> list[Schema]:
    return [
        *_selection_params(),
        *_instant_params("due_after", "Tasks due at or after this time."),
        *_instant_params("due_before", "Tasks due before this time."),
        _query(
            "state", STATE_SCHEMA, "scheduled: may still be cancelled; firing: being published."
        ),
    ]


CURSOR_SCHEMA = {  # URL-safe base64 (padded) of "due_ms:id", at most 120 characters
    "type": "string",
    "minLength": 4,
    "maxLength": 120,
    "pattern": "^([A-Za-z0-9_-]{4})*([A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$",
    "description": "Opaque: a next_cursor this API gave out (any other is refused, 422).",
}
_QUERY_ERRORS = {
    "422": _error("A parameter is invalid, unknown or given twice; error.field names it."),
}


def _list_operation() -> Schema:
    page = _object(
        {
            "tasks": {"type": "array", "maxItems": MAX_PAGE, "items": _task_schema(False)},
            "next_cursor": {
                **CURSOR_SCHEMA,
                "type": ["string", "null"],
                "description": "Where the next page starts; null after the last page. A page "
                "shorter than limit is the last; a full one always has a cursor (the next "
                "page may be empty).",
            },
        },
        ["tasks", "next_cursor"],
    )
    return {
        "summary": "List tasks in due order (ties by id), a page at a time",
        "security": _SECURITY,
        "parameters": [
            *_filter_params(),
            _query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE},
                "Tasks per page.",
            ),
            _query("cursor", CURSOR_SCHEMA, "The next_cursor of the previous page."),
        ],
        "responses": {
            "200": {"description": "A page (no payloads).", **_json(page)},
            **_QUERY_ERRORS,
            **_only("GET", "POST"),
            **_COMMON,
        },
    }


def _count_operation() -> Schema:
    return {
        "summary": "Count tasks (exact; reads every match)",
        "security": _SECURITY,
        "parameters": _filter_params(),
        "responses": {
            "200": {
                "description": "How many match.",
                **_json(_object({"count": _COUNT}, ["count"])),
            },
            **_QUERY_ERRORS,
            **_only("GET"),
            **_COMMON,
        },
    }


def _timeline_operation() -> Schema:
    bucket_s = {"minimum": MIN_BUCKET_MS // 1000, "maximum": MAX_BUCKET_MS // 1000}
    bucket_ms = {"minimum": MIN_BUCKET_MS, "maximum": MAX_BUCKET_MS}
    answer = _object(
        {
            "start_ms": EPOCH_MS,
            "bucket_ms": {"type": "integer", **bucket_ms},
            "start": EPOCH_S,
            "bucket": {
                "type": "number",
                **bucket_s,
                "deprecated": True,
                "description": "Deprecated: bucket_ms in seconds.",
            },
            "buckets": {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS},
            "routing_keys": {
                "type": "object",
                "propertyNames": ROUTING_KEY_SCHEMA,
                "additionalProperties": {"type": "array", "items": _COUNT, "minItems": 1},
                "description": "Per routing key, the tasks due in each bucket (buckets "
                "counts); keys with no task in the span are absent.",
            },
        },
        ["start_ms", "bucket_ms", "start", "bucket", "buckets", "routing_keys"],
    )
    return {
        "summary": "Tasks due per routing key in consecutive time buckets",
        "security": _SECURITY,
        "parameters": [
            *_selection_params(),
            *_instant_params("start", "The first bucket's start (default: the current bucket's)."),
            _query(
                "bucket_ms",
                {"type": "integer", "default": 60_000, **bucket_ms},
                "Bucket length, milliseconds. At most one of bucket_ms and bucket.",
            ),
            {
                **_query("bucket", {"type": "integer", **bucket_s}, "Deprecated: bucket_ms, in s."),
                "deprecated": True,
            },
            _query(
                "buckets",
                {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS, "default": 60},
                "How many buckets.",
            ),
        ],
        "responses": {
            "200": {"description": "The counts.", **_json(answer)},
            **_QUERY_ERRORS,
            **_only("GET"),
            **_COMMON,
        },
    }


def _bulk_cancel_operation() -> Schema:
    time = "An RFC 3339 string, without an offset UTC (deprecated: epoch seconds), as at."
    body = _object(
        {
            "prefix": PREFIX_SCHEMA,
            "tag": TAG_SCHEMA,
            "routing_key": ROUTING_KEY_SCHEMA,
            "due_after": _time_schema(f"Tasks due at or after this. {time}"),
            "due_after_ms": _epoch_ms_schema("Tasks due at or after this, in epoch ms."),
            "due_before": _time_schema(f"Tasks due before this. {time}"),
            "due_before_ms": _epoch_ms_schema("Tasks due before this, in epoch ms."),
        },
        anyOf=[{"required": ["prefix"]}, {"required": ["tag"]}, {"required": ["routing_key"]}],
        dependentSchemas=_exclusive(DUE_RANGE_PAIRS, {}),
        description="Every given field must match; at least one of prefix, tag, routing_key; "
        "at most one of due_after and due_after_ms, and of due_before and due_before_ms.",
    )
    done = _object({"cancelled": _COUNT, "too_late": _COUNT}, ["cancelled", "too_late"])
    return {
        "summary": "Cancel every matching task (blocks until done, in batches of 500)",
        "security": _SECURITY,
        "requestBody": {"required": True, **_json(body)},
        "responses": {
            "200": {
                "description": "Cancelled (they never fire), and matched but too late "
                "(being published).",
                **_json(done),
            },
            **_BODY_ERRORS,
            **_only("POST"),
            **_COMMON,
        },
    }


# -- single tasks ---------------------------------------------------------------------------------

_CREATED = {
    "type": "object",
    "required": ["id", "due_ms", "at"],
    "properties": {
        "id": ID_SCHEMA,
        "due_ms": {**EPOCH_MS, "description": "Due time, epoch milliseconds."},
        "at": EPOCH_S,
    },
}


def _create_operation() -> Schema:
    return {
        "summary": "Schedule one task",
        "security": _SECURITY,
        "requestBody": {"required": True, **_json({"$ref": "#/components/schemas/CreateTask"})},
        "responses": {
            "201": {"description": "Created.", **_json(_CREATED)},
            "200": {"description": "Existed with the same content.", **_json(_CREATED)},
            "409": _error("The id exists with different content."),
            **_BODY_ERRORS,
            **_COMMON,
        },
    }


def _batch_operation(max_batch_tasks: int) -> Schema:
    body = _object(
        {
            "tasks": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_batch_tasks,
                "items": {"$ref": "#/components/schemas/CreateTask"},
            }
        },
        ["tasks"],
    )
    ids = {
        "type": "object",
        "required": ["ids"],
        "properties": {"ids": {"type": "array", "items": ID_SCHEMA}},
    }
    return {
        "summary": "Schedule many tasks, all or nothing",
        "security": _SECURITY,
        "requestBody": {"required": True, **_json(body)},
        "responses": {
            "201": {"description": "All stored (or existed with the same content).", **_json(ids)},
            "409": _error("An id exists with different content; nothing stored."),
            **_BODY_ERRORS,
            **_COMMON,
        },
    }


def _task_path() -> Schema:
    return {
        "parameters": [_TASK_PATH_PARAM],
        "get": {
            "summary": "Look a task up",
            "security": _SECURITY,
            "responses": {
                "200": {"description": "Stored, not yet fired.", **_json(_task_schema(True))},
                "404": _error("Unknown, or fired and deleted."),
                "422": _error("Invalid id."),
                **_COMMON,
            },
        },
        "patch": {
            "summary": "Reschedule a task",
            "security": _SECURITY,
            "requestBody": {
                "required": True,
                **_json(
                    _object(
                        _WHEN_PROPERTIES,
                        oneOf=_ONE_WHEN,
                        description="Exactly one of at, at_ms and delay_ms (or the "
                        "deprecated delay).",
                    )
                ),
            },
            "responses": {
                "200": {"description": "Moved to the new time.", **_json(_CREATED)},
                "404": _error("Unknown, or fired and deleted."),
                "409": _error("Too late: being published at its old time."),
                **_BODY_ERRORS,
                **_COMMON,
            },
        },
        "delete": {
            "summary": "Cancel a task",
            "security": _SECURITY,
            "responses": {
                "204": {"description": "Cancelled: it will never fire."},
                "404": _error("Unknown, or fired and deleted."),
                "409": _error("Too late: being published."),
                "422": _error("Invalid id."),
                **_COMMON,
            },
        },
    }


# -- probes and figures ---------------------------------------------------------------------------

_HEALTH = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"type": "string"}},
}


def _probe_paths() -> Schema:
    unready = {
        "type": "object",
        "required": ["status", "reasons"],
        "properties": {
            "status": {"type": "string"},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
    }
    return {
        "/healthz": {
            "get": {
                "summary": "The process is alive",
                "responses": {"200": {"description": "Alive.", **_json(_HEALTH)}},
            }
        },
        "/readyz": {
            "get": {
                "summary": "MySQL and RabbitMQ reachable, engine threads alive",
                "responses": {
                    "200": {"description": "Ready.", **_json(_HEALTH)},
                    "503": {"description": "Not ready; reasons listed.", **_json(unready)},
                },
            }
        },
    }


def _figure_paths() -> Schema:
    status = {
        "type": "object",
        "required": ["instance", "running", "period", "http", "totals"],
        "properties": {
            "instance": {"type": "string"},
            "running": {"type": "boolean"},
            "period": {"type": "object"},
            "http": {"type": "object"},
            "totals": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    }
    return {
        "/v1/status": {
            "get": {
                "summary": "Live figures: the last metrics period and totals since start",
                "security": _SECURITY,
                "responses": {
                    "200": {"description": "Field meanings: docs/metrics.md.", **_json(status)},
                    "401": _COMMON["401"],
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "The same figures in the Prometheus text format",
                "description": (
                    "Open unless metrics_scrape_token, or metrics_require_token (and "
                    "api_token), is set; then Bearer <metrics_scrape_token> (or api_token)."
                ),
                "security": _SECURITY,
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4 (OpenMetrics on request).",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": _COMMON["401"],
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1 document."}},
            }
        },
    }


_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": "string"},
            },
        }
    },
}


def document(max_payload_bytes: int, max_batch_tasks: int) -> Schema:
    """The document for a daemon with these limits."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "triggerhook", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "CreateTask": _create_schema(max_payload_bytes),
                "TimeZone": timezone_schema(),
                "ShownCron": cron_schema(
                    " ", "", "The cron expression, its fields separated by one space."
                ),
                "Error": _ERROR_SCHEMA,
            },
        },
        "paths": {
            "/v1/tasks": {"post": _create_operation(), "get": _list_operation()},
            "/v1/tasks/batch": {"post": _batch_operation(max_batch_tasks)},
            "/v1/tasks/count": {"get": _count_operation()},
            "/v1/tasks/timeline": {"get": _timeline_operation()},
            "/v1/tasks/cancel": {"post": _bulk_cancel_operation()},
            "/v1/tasks/{id}": _task_path(),
            **_probe_paths(),
            **_figure_paths(),
        },
    }
