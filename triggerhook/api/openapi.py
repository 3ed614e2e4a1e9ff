"""The OpenAPI 3.0 document of the HTTP API, served at ``/openapi.json``.

Kept beside the handlers (triggerhook/api/http.py) and checked against them by
the schema-driven fuzz test (tests/integration/test_http_fuzz.py).
"""

from __future__ import annotations

from typing import Any

from triggerhook.api.bodies import MAX_DELAY_S

ID_SCHEMA = {"type": "string", "pattern": "^[A-Za-z0-9._:-]+$", "minLength": 1, "maxLength": 64}
NEW_ID_SCHEMA = {**ID_SCHEMA, "not": {"enum": ["batch"]}}  # /v1/tasks/batch is taken
MAX_AT_S = 253_402_300_799.999  # 9999-12-31T23:59:59.999Z
AT_SCHEMA = {
    "description": "Due time: epoch seconds (fraction allowed) or an RFC 3339 string. "
    "Any past time (even before 1970) fires at once; the latest is 9999-12-31T23:59:59.999Z.",
    "oneOf": [
        {"type": "number", "maximum": MAX_AT_S},
        {"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-"},
    ],
}
DELAY_SCHEMA = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_DELAY_S,
    "description": "Seconds from now.",
}
# Exactly one of at and delay.
_ONE_WHEN = [{"required": ["at"]}, {"required": ["delay"]}]
EPOCH_S = {"type": "number", "description": "Epoch seconds, millisecond precision."}

_ERROR = {"$ref": "#/components/schemas/Error"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, **_json(_ERROR)}


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

_TASK_PATH_PARAM = {"name": "id", "in": "path", "required": True, "schema": ID_SCHEMA}


def _create_schema(max_payload_bytes: int) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "id": NEW_ID_SCHEMA,
            "at": AT_SCHEMA,
            "delay": DELAY_SCHEMA,
            "routing_key": {"type": "string", "pattern": "^[A-Za-z0-9._:/-]{1,255}$"},
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
        },
        "oneOf": _ONE_WHEN,
        "not": {"required": ["payload", "payload_b64"]},
        "description": "Exactly one of at and delay; at most one of payload and payload_b64.",
    }


def document(max_payload_bytes: int, max_batch_tasks: int) -> dict[str, Any]:
    """The document for a daemon with these limits."""
    created = {
        "type": "object",
        "required": ["id", "at"],
        "properties": {"id": ID_SCHEMA, "at": EPOCH_S},
    }
    task = {
        "type": "object",
        "required": ["id", "at", "routing_key", "state"],
        "properties": {
            "id": ID_SCHEMA,
            "at": EPOCH_S,
            "routing_key": {"type": "string"},
            "state": {"type": "string", "enum": ["scheduled", "firing"]},
            "payload": {"type": "string", "description": "The payload, if UTF-8 text."},
            "payload_b64": {"type": "string", "format": "byte", "description": "Else base64."},
        },
        "oneOf": [{"required": ["payload"]}, {"required": ["payload_b64"]}],
    }
    health = {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "triggerhook", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "CreateTask": _create_schema(max_payload_bytes),
                "Error": {
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
                },
            },
        },
        "paths": {
            "/v1/tasks": {
                "post": {
                    "summary": "Schedule one task",
                    "security": [{"bearer": []}, {}],
                    "requestBody": {
                        "required": True,
                        **_json({"$ref": "#/components/schemas/CreateTask"}),
                    },
                    "responses": {
                        "201": {"description": "Created.", **_json(created)},
                        "200": {"description": "Existed with the same content.", **_json(created)},
                        "409": _error("The id exists with different content."),
                        **_BODY_ERRORS,
                        **_COMMON,
                    },
                }
            },
            "/v1/tasks/batch": {
                "post": {
                    "summary": "Schedule many tasks, all or nothing",
                    "security": [{"bearer": []}, {}],
                    "requestBody": {
                        "required": True,
                        **_json(
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["tasks"],
                                "properties": {
                                    "tasks": {
                                        "type": "array",
                                        "minItems": 1,
                                        "maxItems": max_batch_tasks,
                                        "items": {"$ref": "#/components/schemas/CreateTask"},
                                    }
                                },
                            }
                        ),
                    },
                    "responses": {
                        "201": {
                            "description": "All stored (or existed with the same content).",
                            **_json(
                                {
                                    "type": "object",
                                    "required": ["ids"],
                                    "properties": {"ids": {"type": "array", "items": ID_SCHEMA}},
                                }
                            ),
                        },
                        "409": _error("An id exists with different content; nothing stored."),
                        **_BODY_ERRORS,
                        **_COMMON,
                    },
                }
            },
            "/v1/tasks/{id}": {
                "parameters": [_TASK_PATH_PARAM],
                "get": {
                    "summary": "Look a task up",
                    "security": [{"bearer": []}, {}],
                    "responses": {
                        "200": {"description": "Stored, not yet fired.", **_json(task)},
                        "404": _error("Unknown, or fired and deleted."),
                        "422": _error("Invalid id."),
                        **_COMMON,
                    },
                },
                "patch": {
                    "summary": "Reschedule a task",
                    "security": [{"bearer": []}, {}],
                    "requestBody": {
                        "required": True,
                        **_json(
                            {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"at": AT_SCHEMA, "delay": DELAY_SCHEMA},
                                "oneOf": _ONE_WHEN,
                                "description": "Exactly one of at and delay.",
                            }
                        ),
                    },
                    "responses": {
                        "200": {"description": "Moved to the new time.", **_json(created)},
                        "404": _error("Unknown, or fired and deleted."),
                        "409": _error("Too late: being published at its old time."),
                        **_BODY_ERRORS,
                        **_COMMON,
                    },
                },
                "delete": {
                    "summary": "Cancel a task",
                    "security": [{"bearer": []}, {}],
                    "responses": {
                        "204": {"description": "Cancelled: it will never fire."},
                        "404": _error("Unknown, or fired and deleted."),
                        "409": _error("Too late: being published."),
                        "422": _error("Invalid id."),
                        **_COMMON,
                    },
                },
            },
            "/healthz": {
                "get": {
                    "summary": "The process is alive",
                    "responses": {"200": {"description": "Alive.", **_json(health)}},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "MySQL and RabbitMQ reachable, engine threads alive",
                    "responses": {
                        "200": {"description": "Ready.", **_json(health)},
                        "503": {
                            "description": "Not ready; reasons listed.",
                            **_json(
                                {
                                    "type": "object",
                                    "required": ["status", "reasons"],
                                    "properties": {
                                        "status": {"type": "string"},
                                        "reasons": {"type": "array", "items": {"type": "string"}},
                                    },
                                }
                            ),
                        },
                    },
                }
            },
            "/v1/status": {
                "get": {
                    "summary": "Live figures: the last metrics period and totals since start",
                    "security": [{"bearer": []}, {}],
                    "responses": {
                        "200": {
                            "description": "Field meanings: docs/metrics.md.",
                            **_json(
                                {
                                    "type": "object",
                                    "required": ["instance", "running", "period", "http", "totals"],
                                    "properties": {
                                        "instance": {"type": "string"},
                                        "running": {"type": "boolean"},
                                        "period": {"type": "object"},
                                        "http": {"type": "object"},
                                        "totals": {
                                            "type": "object",
                                            "additionalProperties": {"type": "integer"},
                                        },
                                    },
                                }
                            ),
                        },
                        "401": _COMMON["401"],
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "The same figures in the Prometheus text format",
                    "description": "Open unless metrics_require_token (and api_token) is set.",
                    "security": [{"bearer": []}, {}],
                    "responses": {
                        "200": {
                            "description": "Prometheus exposition format 0.0.4.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": _COMMON["401"],
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.0 document."}},
                }
            },
        },
    }
