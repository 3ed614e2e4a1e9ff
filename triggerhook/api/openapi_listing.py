"""The OpenAPI document's listing operations: list (a page at a time), count,
timeline and bulk cancel, with their query parameters and the bulk cancel's
body (the tables of :mod:`triggerhook.api.fields`, which the parsers use too),
their bounds (422 too_costly, 503 when too many run) and answers (the tables
of :mod:`triggerhook_client.answer_fields`, which the client decodes by, made
schemas by :mod:`triggerhook.api.openapi_answers`). The task schema a page
shows is passed in. Used by :mod:`triggerhook.api.openapi`.
"""

from __future__ import annotations

from triggerhook_client.answer_fields import BULK_CANCELLED, COUNTED, PAGE, TIMELINE

from triggerhook.api.fields import (
    BULK_BODY,
    COUNT_QUERY,
    LIST_QUERY,
    TIMELINE_QUERY,
    parameters,
    properties,
)
from triggerhook.api.listing import DUE_RANGE_PAIRS
from triggerhook.api.openapi_answers import closed_answer
from triggerhook.api.openapi_parts import (
    BODY_ERRORS,
    COMMON,
    SECURITY,
    Schema,
    error,
    exclusive,
    json_content,
    object_schema,
    only,
)
from triggerhook.domain.listing import MAX_PAGE

_TOO_COSTLY = (
    " Or (error.code too_costly) the read took longer than listing_timeout_ms, or its "
    "answer would be too big: narrow the filter."
)
_QUERY_ERRORS = {
    "422": error(
        f"A parameter is invalid, unknown or given twice; error.field names it.{_TOO_COSTLY}"
    ),
}
_BUSY = {
    "503": error(
        "Database unavailable, daemon stopping, or listing_concurrency reads of many tasks "
        "and bulk cancels run already (answered at once); retry (Retry-After)."
    ),
}


def list_operation(task: Schema) -> Schema:
    """``task``: a task as the page shows it (no payload)."""
    page = closed_answer(PAGE, {"tasks": {"type": "array", "maxItems": MAX_PAGE, "items": task}})
    return {
        "summary": "List tasks in due order (ties by id), a page at a time",
        "security": SECURITY,
        "parameters": parameters(LIST_QUERY),
        "responses": {
            "200": {"description": "A page (no payloads).", **json_content(page)},
            **_QUERY_ERRORS,
            **only("GET", "POST"),
            **COMMON,
            **_BUSY,
        },
    }


def count_operation() -> Schema:
    answer = closed_answer(COUNTED)
    return {
        "summary": "Count tasks (exact, reading every match, or up to a cap)",
        "security": SECURITY,
        "parameters": parameters(COUNT_QUERY),
        "responses": {
            "200": {"description": "How many match.", **json_content(answer)},
            **_QUERY_ERRORS,
            **only("GET"),
            **COMMON,
            **_BUSY,
        },
    }


def timeline_operation() -> Schema:
    answer = closed_answer(TIMELINE)
    return {
        "summary": "Tasks due per routing key in consecutive time buckets",
        "security": SECURITY,
        "parameters": parameters(TIMELINE_QUERY),
        "responses": {
            "200": {"description": "The counts.", **json_content(answer)},
            **_QUERY_ERRORS,
            **only("GET"),
            **COMMON,
            **_BUSY,
        },
    }


def bulk_cancel_operation() -> Schema:
    body = object_schema(
        properties(BULK_BODY),
        anyOf=[{"required": ["prefix"]}, {"required": ["tag"]}, {"required": ["routing_key"]}],
        dependentSchemas=exclusive(DUE_RANGE_PAIRS, {}),
        description="Every given field must match; at least one of prefix, tag, routing_key; "
        "at most one of due_after and due_after_ms, and of due_before and due_before_ms.",
    )
    done = closed_answer(BULK_CANCELLED)
    return {
        "summary": "Cancel every matching task (in batches of 500, up to bulk_cancel_timeout_s)",
        "security": SECURITY,
        "requestBody": {"required": True, **json_content(body)},
        "responses": {
            "200": {
                "description": "Cancelled (they never fire), and matched but too late "
                "(being published).",
                **json_content(done),
            },
            **BODY_ERRORS,
            "422": error(f"A field is invalid; error.field names it.{_TOO_COSTLY}"),
            **only("POST"),
            **COMMON,
            **_BUSY,
        },
    }
