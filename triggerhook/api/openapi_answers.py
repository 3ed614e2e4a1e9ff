"""The OpenAPI document's answer schemas, built from the answers' field tables
(:mod:`triggerhook_client.answer_fields`, which the client decodes by): each
property's name, ``required``, ``deprecated`` and description come from there.
What a table cannot say is here: each field's detailed JSON Schema, by its
kind (a count, a cursor, a state) or, where the daemon knows more, by its name
(an id's pattern, the metadata as a create body takes it, a series' schedule
as answers show it, a timeline's bounds). Used by :mod:`triggerhook.api.openapi`
and :mod:`triggerhook.api.openapi_listing`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from triggerhook_client.answer_fields import AnswerField, Kind, required

from triggerhook.api.fields import BUCKET_MS, BUCKET_S, CURSOR_SCHEMA, properties
from triggerhook.api.fields_task import SHOWN_DEADLINES, metadata_fields
from triggerhook.api.openapi_parts import (
    COUNT,
    ID_SCHEMA,
    ROUTING_KEY_SCHEMA,
    STATE_SCHEMA,
    Schema,
    object_schema,
)
from triggerhook.api.openapi_schedule import EVERY_SHOWN_SCHEMA
from triggerhook.domain.listing import MAX_BUCKETS

# A field's schema by its kind (headers, a late-fire policy, a list of objects
# and a timeline's counts are known by name only).
_BY_KIND: dict[Kind, Schema] = {
    Kind.TEXT: {"type": "string"},
    Kind.BASE64: {"type": "string", "format": "byte"},
    Kind.MS: {"type": "integer"},
    Kind.COUNT: COUNT,
    Kind.SECONDS: {"type": "number"},
    Kind.STATE: STATE_SCHEMA,
    Kind.TEXTS: {"type": "array", "items": {"type": "string"}},
    Kind.OCCURRENCE: {"type": "integer", "minimum": 1},
    Kind.TRUE: {"const": True},
    Kind.FLAG: {"type": "boolean"},
    Kind.CURSOR: {**CURSOR_SCHEMA, "type": ["string", "null"]},
    Kind.OBJECT: {"type": "object"},
}


def _by_name() -> dict[str, Schema]:
    meta = properties(metadata_fields(SHOWN_DEADLINES))  # as a create body gives them
    return {
        "id": ID_SCHEMA,
        **meta,
        "tags": {**meta["tags"], "uniqueItems": True},
        "every": EVERY_SHOWN_SCHEMA,
        "cron": {"$ref": "#/components/schemas/ShownCron"},
        "timezone": {"$ref": "#/components/schemas/TimeZone"},
        "ids": {"type": "array", "items": ID_SCHEMA},
        "bucket_ms": {"type": "integer", **BUCKET_MS},
        "bucket": {"type": "number", **BUCKET_S},
        "buckets": {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS},
        "routing_keys": {
            "type": "object",
            "propertyNames": ROUTING_KEY_SCHEMA,
            "additionalProperties": {"type": "array", "items": COUNT, "minItems": 1},
        },
        "totals": {"type": "object", "additionalProperties": {"type": "integer"}},
    }


def detail(field: AnswerField, more: Mapping[str, Schema] | None = None) -> Schema:
    """``field``'s schema without its description: from ``more`` (what the
    caller knows of it), else by its name, else by its kind."""
    if more and field.name in more:
        return more[field.name]
    return _BY_NAME.get(field.name) or _BY_KIND[field.kind]


def shown(fields: Iterable[AnswerField], more: Mapping[str, Schema] | None = None) -> Schema:
    """The properties of an answer of ``fields``: each its :func:`detail`,
    deprecated and described as its table says."""
    found: Schema = {}
    for field in fields:
        schema = detail(field, more)
        if field.deprecated:
            schema = {**schema, "deprecated": True}
        if field.description:
            schema = {**schema, "description": field.description}
        found[field.name] = schema
    return found


def open_answer(fields: Iterable[AnswerField], more: Mapping[str, Schema] | None = None) -> Schema:
    """An answer of these fields (others allowed)."""
    fields = tuple(fields)
    return {"type": "object", "required": required(fields), "properties": shown(fields, more)}


def closed_answer(
    fields: Iterable[AnswerField], more: Mapping[str, Schema] | None = None, **rules: object
) -> Schema:
    """An answer of exactly these fields (and ``rules``: allOf, oneOf, ...)."""
    fields = tuple(fields)
    return object_schema(shown(fields, more), required(fields), **rules)


_BY_NAME = _by_name()
