"""The HTTP API's query parameters and the bulk cancel's body, each field
defined once: its name, its JSON Schema and what it means. The parsers
(:mod:`triggerhook.api.listing`) take the names each operation allows from
here, and the OpenAPI document (:mod:`triggerhook.api.openapi_listing`) its
parameters and properties, so that the two cannot name different fields.

The names are the client's too (:mod:`triggerhook_client.rules`: the filters,
and an instant's ``*_ms`` twin); the values are checked by the parsers
(tests/unit/test_openapi.py holds the schemas to them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from triggerhook_client.rules import STATE_FIELD, in_ms

from triggerhook.api.openapi_parts import (
    DATE_TIME,
    PREFIX_SCHEMA,
    ROUTING_KEY_SCHEMA,
    STATE_SCHEMA,
    TAG_SCHEMA,
    Schema,
    epoch_ms_schema,
    epoch_text_pattern,
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


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a query or a body: ``schema`` of its value; as a query
    parameter, ``description`` and ``deprecated`` are the parameter's."""

    name: str
    schema: Schema
    description: str = ""
    deprecated: bool = False

    def parameter(self) -> Schema:
        """As an OpenAPI query parameter."""
        found = query(self.name, self.schema, self.description)
        return {**found, "deprecated": True} if self.deprecated else found


Fields = tuple[Field, ...]


def names(fields: Iterable[Field]) -> frozenset[str]:
    return frozenset(field.name for field in fields)


def parameters(fields: Iterable[Field]) -> list[Schema]:
    return [field.parameter() for field in fields]


def properties(fields: Iterable[Field]) -> Schema:
    return {field.name: field.schema for field in fields}


def pairs(fields: Fields) -> tuple[tuple[str, str], ...]:
    """The instants among ``fields`` given as text or in epoch ms (at most
    one of each pair), in their order: ``(name, name_ms)``."""
    given = names(fields)
    return tuple((f.name, in_ms(f.name)) for f in fields if in_ms(f.name) in given)


# -- query parameters -----------------------------------------------------------------------------


def _instant_params(name: str, description: str) -> Fields:
    """An instant as query parameters: ``name`` (an RFC 3339 string, or
    deprecated epoch seconds) or ``name_ms`` (epoch ms), at most one."""
    text = Field(
        name,
        {
            "type": "string",
            "maxLength": 64,
            "anyOf": [{"pattern": epoch_text_pattern()}, DATE_TIME],
        },
        f"{description} An RFC 3339 time (without an offset: UTC); epoch seconds (fraction "
        f"allowed) are deprecated. At most one of {name} and {name}_ms.",
    )
    ms = Field(
        in_ms(name),
        epoch_ms_schema(f"{description} Epoch milliseconds (before 1970: the epoch)."),
        f"{description} Epoch milliseconds. At most one of {name} and {name}_ms.",
    )
    return (text, ms)


# Which tasks: id prefix, routing key, tag (every one given must match).
SELECTION_QUERY: Fields = (
    Field("prefix", PREFIX_SCHEMA, "Tasks whose id starts with this."),
    Field("routing_key", ROUTING_KEY_SCHEMA, "Tasks with this routing key."),
    Field("tag", TAG_SCHEMA, "Tasks with this tag."),
)
DUE_RANGE_QUERY: Fields = (
    *_instant_params("due_after", "Tasks due at or after this time."),
    *_instant_params("due_before", "Tasks due before this time."),
)
FILTER_QUERY: Fields = (
    *SELECTION_QUERY,
    *DUE_RANGE_QUERY,
    Field(STATE_FIELD, STATE_SCHEMA, "scheduled: may still be cancelled; firing: being published."),
)

CURSOR_SCHEMA = {  # URL-safe base64 (padded) of "due_ms:id", at most 120 characters
    "type": "string",
    "minLength": 4,
    "maxLength": 120,
    "pattern": "^([A-Za-z0-9_-]{4})*([A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$",
    "description": "Opaque: a next_cursor this API gave out (any other is refused, 422).",
}
LIST_QUERY: Fields = (
    *FILTER_QUERY,
    Field(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE},
        "Tasks per page.",
    ),
    Field("cursor", CURSOR_SCHEMA, "The next_cursor of the previous page."),
)
COUNT_QUERY: Fields = (
    *FILTER_QUERY,
    Field(
        "up_to",
        {"type": "integer", "minimum": 1, "maximum": MAX_COUNT_UP_TO},
        "Count at most this many (reading no more matches); absent: an exact count.",
    ),
)
BUCKET_S = {"minimum": MIN_BUCKET_MS // 1000, "maximum": MAX_BUCKET_MS // 1000}
BUCKET_MS = {"minimum": MIN_BUCKET_MS, "maximum": MAX_BUCKET_MS}
DEFAULT_BUCKET_MS = 60_000
DEFAULT_BUCKETS = 60
TIMELINE_QUERY: Fields = (
    *SELECTION_QUERY,
    *_instant_params("start", "The first bucket's start (default: the current bucket's)."),
    Field(
        "bucket_ms",
        {"type": "integer", "default": DEFAULT_BUCKET_MS, **BUCKET_MS},
        "Bucket length, milliseconds. At most one of bucket_ms and bucket.",
    ),
    Field("bucket", {"type": "integer", **BUCKET_S}, "Deprecated: bucket_ms, in s.", True),
    Field(
        "buckets",
        {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS, "default": DEFAULT_BUCKETS},
        f"How many buckets; bucket_ms x buckets at most {MAX_TIMELINE_SPAN_MS} "
        f"({MAX_TIMELINE_SPAN_MS // 86_400_000} days), else 422. An answer of more "
        f"than {MAX_TIMELINE_CELLS} counts (routing keys x buckets) is refused "
        "(422 too_costly).",
    ),
)

# -- the bulk cancel's body -----------------------------------------------------------------------

_TIME = "An RFC 3339 string, without an offset UTC (deprecated: epoch seconds), as at."
BULK_BODY: Fields = (
    Field("prefix", PREFIX_SCHEMA),
    Field("tag", TAG_SCHEMA),
    Field("routing_key", ROUTING_KEY_SCHEMA),
    Field("due_after", time_schema(f"Tasks due at or after this. {_TIME}")),
    Field("due_after_ms", epoch_ms_schema("Tasks due at or after this, in epoch ms.")),
    Field("due_before", time_schema(f"Tasks due before this. {_TIME}")),
    Field("due_before_ms", epoch_ms_schema("Tasks due before this, in epoch ms.")),
    Field(
        "cursor",
        {
            **CURSOR_SCHEMA,
            "description": "The next_cursor of a bulk cancel with the same filter that "
            "stopped before its end: go on after the last task it read.",
        },
    ),
)
