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

The shared building blocks are in :mod:`triggerhook.api.openapi_parts`, the
listing operations in :mod:`triggerhook.api.openapi_listing` and the schemas of a
series' schedule in :mod:`triggerhook.api.openapi_schedule`.
"""

from __future__ import annotations

from triggerhook.api.bodies import MAX_DELAY_MS, MAX_DELAY_S
from triggerhook.api.openapi_listing import (
    bulk_cancel_operation,
    count_operation,
    list_operation,
    timeline_operation,
)
from triggerhook.api.openapi_parts import (
    BODY_ERRORS,
    COMMON,
    EPOCH_MS,
    EPOCH_S,
    ID_SCHEMA,
    NEW_ID_SCHEMA,
    ROUTING_KEY_SCHEMA,
    SECURITY,
    STATE_SCHEMA,
    TAG_SCHEMA,
    Schema,
    epoch_ms_schema,
    error,
    exclusive,
    json_content,
    object_schema,
    time_schema,
)
from triggerhook.api.openapi_schedule import (
    CRON_SPACE,
    EVERY_SCHEMA,
    EVERY_SHOWN_SCHEMA,
    cron_schema,
    timezone_schema,
)
from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.meta import MAX_HEADER_VALUE_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_TAGS

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
WHEN = ("at", "at_ms", "delay_ms", "delay")
# Exactly one of these (a reschedule; a create as well, unless a series).
_ONE_WHEN = [{"required": [name]} for name in WHEN]
_WHEN_PROPERTIES = {
    "at": AT_SCHEMA,
    "at_ms": AT_MS_SCHEMA,
    "delay_ms": DELAY_MS_SCHEMA,
    "delay": DELAY_SCHEMA,
}

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
            object_schema({"skip_after_ms": _SKIP_AFTER}, ["skip_after_ms"]),
            *deadlines,
        ],
    }


# A deadline as a create body gives it (one field), and as an answer shows it (both).
_DEADLINE_MS = epoch_ms_schema("The deadline in epoch milliseconds (any past time: the epoch).")
_GIVEN_DEADLINES = [
    object_schema({"deadline_ms": _DEADLINE_MS}, ["deadline_ms"]),
    object_schema({"deadline": time_schema(f"The deadline: {_RFC_3339}, as at.")}, ["deadline"]),
]
_SHOWN_DEADLINES = [
    object_schema({"deadline_ms": EPOCH_MS, "deadline": EPOCH_S}, ["deadline_ms", "deadline"])
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
        "until": time_schema(
            f"The series' end: its last occurrence is the last one at or before it. {_RFC_3339} "
            "(deprecated: epoch seconds), as at; not before the first occurrence (else 422)."
        ),
        "until_ms": epoch_ms_schema(
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
    return object_schema(
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
        dependentSchemas=exclusive(EXCLUSIVE, {"until": _SERIES, "until_ms": _SERIES}),
        description="Exactly one of at, at_ms and delay_ms (or the deprecated delay), or (a "
        "series: every or cron) none; at most one of payload and payload_b64, of every and "
        "cron, and of until and until_ms; timezone only with cron, until only in a series "
        "(without a due time the first occurrence is one every from now, or the next "
        "matching minute). The metadata and the schedule are part of the content an "
        "idempotent re-create compares.",
    )


# The fields of a create body of which at most one may be given, by group.
EXCLUSIVE = (WHEN, ("until", "until_ms"), ("payload", "payload_b64"), ("every", "cron"))


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
        return object_schema(properties, required, allOf=[_SHOWN_SERIES_RULES])
    properties["payload"] = {"type": "string", "description": "The payload, if UTF-8 text."}
    properties["payload_b64"] = {"type": "string", "format": "byte", "description": "Else base64."}
    return object_schema(
        properties,
        required,
        allOf=[_SHOWN_SERIES_RULES],
        oneOf=[{"required": ["payload"]}, {"required": ["payload_b64"]}],
    )


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
        "security": SECURITY,
        "requestBody": {
            "required": True,
            **json_content({"$ref": "#/components/schemas/CreateTask"}),
        },
        "responses": {
            "201": {"description": "Created.", **json_content(_CREATED)},
            "200": {"description": "Existed with the same content.", **json_content(_CREATED)},
            "409": error("The id exists with different content."),
            **BODY_ERRORS,
            **COMMON,
        },
    }


def _batch_operation(max_batch_tasks: int) -> Schema:
    body = object_schema(
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
        "security": SECURITY,
        "requestBody": {"required": True, **json_content(body)},
        "responses": {
            "201": {
                "description": "All stored (or existed with the same content).",
                **json_content(ids),
            },
            "409": error("An id exists with different content; nothing stored."),
            **BODY_ERRORS,
            **COMMON,
        },
    }


def _task_path() -> Schema:
    return {
        "parameters": [_TASK_PATH_PARAM],
        "get": {
            "summary": "Look a task up",
            "security": SECURITY,
            "responses": {
                "200": {
                    "description": "Stored, not yet fired.",
                    **json_content(_task_schema(True)),
                },
                "404": error("Unknown, or fired and deleted."),
                "422": error("Invalid id."),
                **COMMON,
            },
        },
        "patch": {
            "summary": "Reschedule a task",
            "security": SECURITY,
            "requestBody": {
                "required": True,
                **json_content(
                    object_schema(
                        _WHEN_PROPERTIES,
                        oneOf=_ONE_WHEN,
                        description="Exactly one of at, at_ms and delay_ms (or the "
                        "deprecated delay).",
                    )
                ),
            },
            "responses": {
                "200": {"description": "Moved to the new time.", **json_content(_CREATED)},
                "404": error("Unknown, or fired and deleted."),
                "409": error("Too late: being published at its old time."),
                **BODY_ERRORS,
                **COMMON,
            },
        },
        "delete": {
            "summary": "Cancel a task",
            "security": SECURITY,
            "responses": {
                "204": {"description": "Cancelled: it will never fire."},
                "404": error("Unknown, or fired and deleted."),
                "409": error("Too late: being published."),
                "422": error("Invalid id."),
                **COMMON,
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
                "responses": {"200": {"description": "Alive.", **json_content(_HEALTH)}},
            }
        },
        "/readyz": {
            "get": {
                "summary": "MySQL and RabbitMQ reachable, engine threads alive",
                "responses": {
                    "200": {"description": "Ready.", **json_content(_HEALTH)},
                    "503": {"description": "Not ready; reasons listed.", **json_content(unready)},
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
                "security": SECURITY,
                "responses": {
                    "200": {
                        "description": "Field meanings: docs/metrics.md.",
                        **json_content(status),
                    },
                    "401": COMMON["401"],
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
                "security": SECURITY,
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4 (OpenMetrics on request).",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": COMMON["401"],
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
            "/v1/tasks": {
                "post": _create_operation(),
                "get": list_operation(_task_schema(False)),
            },
            "/v1/tasks/batch": {"post": _batch_operation(max_batch_tasks)},
            "/v1/tasks/count": {"get": count_operation()},
            "/v1/tasks/timeline": {"get": timeline_operation()},
            "/v1/tasks/cancel": {"post": bulk_cancel_operation()},
            "/v1/tasks/{id}": _task_path(),
            **_probe_paths(),
            **_figure_paths(),
        },
    }
