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

The request bodies' and queries' fields are defined once, in tables the
parsers take their names from: :mod:`triggerhook.api.fields_task` (a create and
a reschedule body) and :mod:`triggerhook.api.fields` (the listing queries and
the bulk cancel's body). The shared building blocks are in
:mod:`triggerhook.api.openapi_parts`, the listing operations in
:mod:`triggerhook.api.openapi_listing` and the schemas of a series' schedule in
:mod:`triggerhook.api.openapi_schedule`. docs/openapi.json holds the document
of the default limits (:mod:`triggerhook.api.openapi_file`; ``python -m
triggerhook.api.openapi --write``).
"""

from __future__ import annotations

from triggerhook.api.fields import properties
from triggerhook.api.fields_task import (
    ONE_WHEN,
    SERIES,
    SHOWN_DEADLINES,
    WHEN_BODY,
    create_schema,
    metadata_fields,
)
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
    SECURITY,
    STATE_SCHEMA,
    Schema,
    error,
    json_content,
    object_schema,
)
from triggerhook.api.openapi_schedule import (
    EVERY_SHOWN_SCHEMA,
    cron_schema,
    timezone_schema,
)

_TASK_PATH_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "A task id. batch, count, timeline and cancel are never one: those "
    "paths are other operations.",
    "schema": ID_SCHEMA,
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
    "dependentSchemas": {name: SERIES for name in ("until_ms", "until", "occurrence", "stopping")},
}


def _task_schema(payload: bool) -> Schema:
    """A stored task as a lookup (with its payload) or a listing shows it."""
    shown: Schema = {
        "id": ID_SCHEMA,
        "due_ms": {**EPOCH_MS, "description": "Due time, epoch milliseconds."},
        "at": EPOCH_S,
        "routing_key": {"type": "string"},
        "state": STATE_SCHEMA,
        **properties(metadata_fields(SHOWN_DEADLINES)),
        **_series_shown(),
    }
    shown["tags"] = {**shown["tags"], "uniqueItems": True}
    required = ["id", "due_ms", "at", "routing_key", "state"]
    if not payload:
        return object_schema(shown, required, allOf=[_SHOWN_SERIES_RULES])
    shown["payload"] = {"type": "string", "description": "The payload, if UTF-8 text."}
    shown["payload_b64"] = {"type": "string", "format": "byte", "description": "Else base64."}
    return object_schema(
        shown,
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
                        properties(WHEN_BODY),
                        oneOf=ONE_WHEN,
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
                "CreateTask": create_schema(max_payload_bytes),
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


if __name__ == "__main__":  # python -m triggerhook.api.openapi [--write | --check]
    from triggerhook.api.openapi_file import main

    raise SystemExit(main())
