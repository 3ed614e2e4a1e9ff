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
the bulk cancel's body). So are the answers' fields, in the tables the client
decodes by (:mod:`triggerhook_client.answer_fields`: names, ``required``,
``deprecated``, descriptions); :mod:`triggerhook.api.openapi_answers` makes
them schemas, adding each field's detailed JSON Schema; what relates fields of
one answer (a series' fields, a lookup's one payload) is stated here. The
shared building blocks are in :mod:`triggerhook.api.openapi_parts`, the
listing operations in :mod:`triggerhook.api.openapi_listing`, the schemas
of a series' schedule in :mod:`triggerhook.api.openapi_schedule` and the
operations of a series' life (pause, resume, trigger, backfill) in
:mod:`triggerhook.api.openapi_series`.
docs/openapi.json holds the document of the default limits
(:mod:`triggerhook.api.openapi_file`; ``python -m triggerhook.api.openapi
--write``).
"""

from __future__ import annotations

from triggerhook_client.answer_fields import (
    CREATE,
    CREATED,
    ERROR,
    ERROR_DETAIL,
    FIGURES,
    HEALTHY,
    IDS,
    LISTED,
    PAYLOAD,
    SERIES_STATE,
    SHOWN,
    UNREADY,
    names,
)

from triggerhook.api.fields import properties
from triggerhook.api.fields_task import ONE_WHEN, SERIES, WHEN_BODY, create_schema
from triggerhook.api.openapi_answers import closed_answer, open_answer
from triggerhook.api.openapi_listing import (
    bulk_cancel_operation,
    count_operation,
    list_operation,
    timeline_operation,
)
from triggerhook.api.openapi_parts import (
    BODY_ERRORS,
    COMMON,
    ID_SCHEMA,
    OVER_QUOTA,
    SECURITY,
    Schema,
    error,
    json_content,
    object_schema,
)
from triggerhook.api.openapi_schedule import cron_schema, timezone_schema
from triggerhook.api.openapi_series import series_paths

_TASK_PATH_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "A task id. batch, count, timeline and cancel are never one: those "
    "paths are other operations.",
    "schema": ID_SCHEMA,
}


# Not both every and cron; either needs its occurrence, cron its timezone (and a
# timezone its cron); a series' state (until, occurrence, stopping) only in a series.
_SHOWN_SERIES_RULES = {
    "not": {"required": ["every", "cron"]},
    "dependentRequired": {
        "every": ["occurrence"],
        "cron": ["timezone", "occurrence"],
        "timezone": ["cron"],
    },
    "dependentSchemas": {name: SERIES for name in names(SERIES_STATE)},
}


def _task_schema(payload: bool) -> Schema:
    """A stored task as a lookup (with its payload) or a listing shows it."""
    if not payload:
        return closed_answer(LISTED, allOf=[_SHOWN_SERIES_RULES])
    return closed_answer(
        SHOWN,
        allOf=[_SHOWN_SERIES_RULES],
        oneOf=[{"required": [name]} for name in names(PAYLOAD)],
    )


# -- single tasks ---------------------------------------------------------------------------------

_CREATED = open_answer(CREATED)
_CREATE = open_answer(CREATE)


def _create_operation() -> Schema:
    return {
        "summary": "Schedule one task",
        "security": SECURITY,
        "requestBody": {
            "required": True,
            **json_content({"$ref": "#/components/schemas/CreateTask"}),
        },
        "responses": {
            "201": {"description": "Created.", **json_content(_CREATE)},
            "200": {
                "description": "The id exists: with the same content (outcome exists), or "
                "by on_conflict: replaced by this task (replaced), or kept (kept: the stored "
                "task's due time).",
                **json_content(_CREATE),
            },
            "409": error(
                "The id exists with different content (conflict; on_conflict error), the "
                "task is being published (too_late; on_conflict replace), or the id fired "
                "within its dedup window (already_fired; the error's fired_ms says when): "
                "nothing written."
            ),
            **BODY_ERRORS,
            **COMMON,
            **OVER_QUOTA,
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
    return {
        "summary": "Schedule many tasks, all or nothing",
        "security": SECURITY,
        "requestBody": {"required": True, **json_content(body)},
        "responses": {
            "201": {
                "description": "All stored, each as one create would be (created, exists, "
                "replaced, kept: outcomes); the tasks apply in order, as if each came alone "
                "after those before it.",
                **json_content(open_answer(IDS)),
            },
            "409": error(
                "A task conflicts, is too late to replace, or fired within its dedup window "
                "(already_fired, with fired_ms): as one create's 409, field tasks[i].id (the "
                "first task refused); nothing stored."
            ),
            **BODY_ERRORS,
            **COMMON,
            **OVER_QUOTA,
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

_HEALTH = open_answer(HEALTHY)


def _probe_paths() -> Schema:
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
                    "503": {
                        "description": "Not ready; reasons listed.",
                        **json_content(open_answer(UNREADY)),
                    },
                },
            }
        },
    }


def _figure_paths() -> Schema:
    return {
        "/v1/status": {
            "get": {
                "summary": "Live figures: the last metrics period and totals since start",
                "security": SECURITY,
                "responses": {
                    "200": {
                        "description": "Field meanings: docs/metrics.md.",
                        **json_content(open_answer(FIGURES)),
                    },
                    "401": COMMON["401"],
                    "403": COMMON["403"],
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


_ERROR_SCHEMA = open_answer(ERROR, {"error": open_answer(ERROR_DETAIL)})


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
            **series_paths(),
            **_probe_paths(),
            **_figure_paths(),
        },
    }


if __name__ == "__main__":  # python -m triggerhook.api.openapi [--write | --check]
    from triggerhook.api.openapi_file import main

    raise SystemExit(main())
