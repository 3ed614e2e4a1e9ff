"""The OpenAPI document's listing operations: list (a page at a time), count,
timeline and bulk cancel, with their query parameters (the selection, the due
range, the cursor), their bounds (422 too_costly, 503 when too many run) and
answers. The task schema a page shows is passed in. Used by
:mod:`triggerhook.api.openapi`.
"""

from __future__ import annotations

from triggerhook.api.listing import DUE_RANGE_PAIRS
from triggerhook.api.openapi_parts import (
    BODY_ERRORS,
    COMMON,
    COUNT,
    DATE_TIME,
    EPOCH_MS,
    EPOCH_S,
    PREFIX_SCHEMA,
    ROUTING_KEY_SCHEMA,
    SECURITY,
    STATE_SCHEMA,
    TAG_SCHEMA,
    Schema,
    epoch_ms_schema,
    epoch_text_pattern,
    error,
    exclusive,
    json_content,
    object_schema,
    only,
    query,
    time_schema,
)
from triggerhook.domain.listing import (
    DEFAULT_PAGE,
    MAX_BUCKET_MS,
    MAX_BUCKETS,
    MAX_COUNT_UP_TO,
    MAX_PAGE,
    MAX_TIMELINE_CELLS,
    MAX_TIMELINE_SPAN_MS,
    MIN_BUCKET_MS,
)


def _instant_params(name: str, description: str) -> list[Schema]:
    """An instant as query parameters: ``name`` (an RFC 3339 string, or
    deprecated epoch seconds) or ``name_ms`` (epoch ms), at most one."""
    text = query(
        name,
        {
            "type": "string",
            "maxLength": 64,
            "anyOf": [{"pattern": epoch_text_pattern()}, DATE_TIME],
        },
        f"{description} An RFC 3339 time (without an offset: UTC); epoch seconds (fraction "
        f"allowed) are deprecated. At most one of {name} and {name}_ms.",
    )
    ms = query(
        f"{name}_ms",
        epoch_ms_schema(f"{description} Epoch milliseconds (before 1970: the epoch)."),
        f"{description} Epoch milliseconds. At most one of {name} and {name}_ms.",
    )
    return [text, ms]


def _selection_params() -> list[Schema]:
    """Which tasks: id prefix, routing key, tag (every one given must match)."""
    return [
        query("prefix", PREFIX_SCHEMA, "Tasks whose id starts with this."),
        query("routing_key", ROUTING_KEY_SCHEMA, "Tasks with this routing key."),
        query("tag", TAG_SCHEMA, "Tasks with this tag."),
    ]


def _filter_params() -> list[Schema]:
    return [
        *_selection_params(),
        *_instant_params("due_after", "Tasks due at or after this time."),
        *_instant_params("due_before", "Tasks due before this time."),
        query("state", STATE_SCHEMA, "scheduled: may still be cancelled; firing: being published."),
    ]


CURSOR_SCHEMA = {  # URL-safe base64 (padded) of "due_ms:id", at most 120 characters
    "type": "string",
    "minLength": 4,
    "maxLength": 120,
    "pattern": "^([A-Za-z0-9_-]{4})*([A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$",
    "description": "Opaque: a next_cursor this API gave out (any other is refused, 422).",
}
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
    page = object_schema(
        {
            "tasks": {"type": "array", "maxItems": MAX_PAGE, "items": task},
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
        "security": SECURITY,
        "parameters": [
            *_filter_params(),
            query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE},
                "Tasks per page.",
            ),
            query("cursor", CURSOR_SCHEMA, "The next_cursor of the previous page."),
        ],
        "responses": {
            "200": {"description": "A page (no payloads).", **json_content(page)},
            **_QUERY_ERRORS,
            **only("GET", "POST"),
            **COMMON,
            **_BUSY,
        },
    }


def count_operation() -> Schema:
    answer = object_schema(
        {
            "count": COUNT,
            "at_least": {
                "type": "boolean",
                "description": "The count stopped at up_to: at least that many match.",
            },
        },
        ["count", "at_least"],
    )
    return {
        "summary": "Count tasks (exact, reading every match, or up to a cap)",
        "security": SECURITY,
        "parameters": [
            *_filter_params(),
            query(
                "up_to",
                {"type": "integer", "minimum": 1, "maximum": MAX_COUNT_UP_TO},
                "Count at most this many (reading no more matches); absent: an exact count.",
            ),
        ],
        "responses": {
            "200": {"description": "How many match.", **json_content(answer)},
            **_QUERY_ERRORS,
            **only("GET"),
            **COMMON,
            **_BUSY,
        },
    }


def timeline_operation() -> Schema:
    bucket_s = {"minimum": MIN_BUCKET_MS // 1000, "maximum": MAX_BUCKET_MS // 1000}
    bucket_ms = {"minimum": MIN_BUCKET_MS, "maximum": MAX_BUCKET_MS}
    answer = object_schema(
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
                "additionalProperties": {"type": "array", "items": COUNT, "minItems": 1},
                "description": "Per routing key, the tasks due in each bucket (buckets "
                "counts); keys with no task in the span are absent.",
            },
        },
        ["start_ms", "bucket_ms", "start", "bucket", "buckets", "routing_keys"],
    )
    return {
        "summary": "Tasks due per routing key in consecutive time buckets",
        "security": SECURITY,
        "parameters": [
            *_selection_params(),
            *_instant_params("start", "The first bucket's start (default: the current bucket's)."),
            query(
                "bucket_ms",
                {"type": "integer", "default": 60_000, **bucket_ms},
                "Bucket length, milliseconds. At most one of bucket_ms and bucket.",
            ),
            {
                **query("bucket", {"type": "integer", **bucket_s}, "Deprecated: bucket_ms, in s."),
                "deprecated": True,
            },
            query(
                "buckets",
                {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS, "default": 60},
                f"How many buckets; bucket_ms x buckets at most {MAX_TIMELINE_SPAN_MS} "
                f"({MAX_TIMELINE_SPAN_MS // 86_400_000} days), else 422. An answer of more "
                f"than {MAX_TIMELINE_CELLS} counts (routing keys x buckets) is refused "
                "(422 too_costly).",
            ),
        ],
        "responses": {
            "200": {"description": "The counts.", **json_content(answer)},
            **_QUERY_ERRORS,
            **only("GET"),
            **COMMON,
            **_BUSY,
        },
    }


def bulk_cancel_operation() -> Schema:
    time = "An RFC 3339 string, without an offset UTC (deprecated: epoch seconds), as at."
    body = object_schema(
        {
            "prefix": PREFIX_SCHEMA,
            "tag": TAG_SCHEMA,
            "routing_key": ROUTING_KEY_SCHEMA,
            "due_after": time_schema(f"Tasks due at or after this. {time}"),
            "due_after_ms": epoch_ms_schema("Tasks due at or after this, in epoch ms."),
            "due_before": time_schema(f"Tasks due before this. {time}"),
            "due_before_ms": epoch_ms_schema("Tasks due before this, in epoch ms."),
            "cursor": {
                **CURSOR_SCHEMA,
                "description": "The next_cursor of a bulk cancel with the same filter that "
                "stopped before its end: go on after the last task it read.",
            },
        },
        anyOf=[{"required": ["prefix"]}, {"required": ["tag"]}, {"required": ["routing_key"]}],
        dependentSchemas=exclusive(DUE_RANGE_PAIRS, {}),
        description="Every given field must match; at least one of prefix, tag, routing_key; "
        "at most one of due_after and due_after_ms, and of due_before and due_before_ms.",
    )
    done = object_schema(
        {
            "cancelled": COUNT,
            "too_late": COUNT,
            "next_cursor": {
                **CURSOR_SCHEMA,
                "type": ["string", "null"],
                "description": "null: every matching task was handled. Else the walk "
                "stopped before its end (bulk_cancel_timeout_s, or the daemon stopping): "
                "send the same filter with this as cursor to go on.",
            },
        },
        ["cancelled", "too_late", "next_cursor"],
    )
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
