"""The OpenAPI document's shared building blocks: the schemas of ids, routing
keys, tags, id prefixes and states; times (RFC 3339 text, epoch milliseconds,
deprecated epoch seconds, and the pattern of epoch seconds as query text); and
the helpers of responses, parameters and objects (bearer security, the common
errors, ``dependentSchemas`` of fields that exclude each other). Used by
:mod:`triggerhook.api.openapi`, :mod:`triggerhook.api.openapi_listing` and the
field tables (:mod:`triggerhook.api.fields`, :mod:`triggerhook.api.fields_task`).
"""

from __future__ import annotations

from typing import Any

from triggerhook_client.rules import RESERVED_IDS

from triggerhook.domain.bounds import MAX_DUE_MS

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
COUNT = {"type": "integer", "minimum": 0}
DATE_TIME = {"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-"}

_DEPRECATED_SECONDS = {
    "type": "number",
    "maximum": MAX_AT_S,
    "deprecated": True,
    "description": "Deprecated: epoch seconds (fraction allowed). Use the *_ms field, or text.",
}


def time_schema(description: str) -> Schema:
    """A time in a JSON body: an RFC 3339 string (without an offset: UTC), or
    epoch seconds (a number: deprecated)."""
    return {"description": description, "oneOf": [DATE_TIME, _DEPRECATED_SECONDS]}


def epoch_ms_schema(description: str) -> Schema:
    """An instant in epoch milliseconds: any whole number up to 9999 (before 1970: the epoch)."""
    return {"type": "integer", "maximum": MAX_DUE_MS, "description": description}


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


def epoch_text_pattern() -> str:
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


_ERROR = {"$ref": "#/components/schemas/Error"}
SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {}]


def json_content(schema: Schema) -> Schema:
    return {"content": {"application/json": {"schema": schema}}}


def error(description: str) -> Schema:
    return {"description": description, **json_content(_ERROR)}


def object_schema(properties: Schema, required: list[str] | None = None, **more: Any) -> Schema:
    """A JSON object with exactly these properties."""
    schema: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return {**schema, **more}


BODY_ERRORS = {
    "400": error("Malformed JSON."),
    "408": error("The body did not arrive within http_body_timeout_s."),
    "413": error("Body larger than http_max_body_bytes."),
    "415": error("Content-Type is not application/json."),
    "422": error("A field is invalid; error.field names it."),
}
COMMON = {
    "401": error("Missing or wrong bearer token (when api_token or namespaces_file is set)."),
    "403": error(
        "The token may not do this: the task id or routing key is outside its namespace, "
        "or it lacks the scope (namespaces_file); error.message names the rule."
    ),
    "503": error("Database unavailable or daemon stopping; retry."),
}
# A create's: over its namespace's quota (namespaces_file).
OVER_QUOTA = {
    "429": error(
        "Over the namespace's create_rate or max_pending (namespaces_file): nothing "
        "written; error.message names the quota. Retry after Retry-After seconds."
    )
}


def only(*methods: str) -> Schema:
    """The 405 of any other method on the path (Allow lists these)."""
    allowed = ", ".join(methods)
    return {"405": error(f"A method other than {allowed} on this path (Allow: {allowed}).")}


def query(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def exclusive(groups: tuple[tuple[str, ...], ...], more: dict[str, Schema]) -> Schema:
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
