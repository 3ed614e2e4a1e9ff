"""The OpenAPI document's operations of a series' life: ``POST
/v1/tasks/{id}/pause``, ``/resume``, ``/trigger`` and ``/backfill``
(:mod:`triggerhook.api.http_series`), with the backfill's body (the table of
:mod:`triggerhook.api.fields_task`, which its parser uses too) and their
answers (the tables of :mod:`triggerhook_client.answer_fields`, which the
client decodes by, made schemas by :mod:`triggerhook.api.openapi_answers`;
the outcomes each operation gives are stated here, as enums). Used by
:mod:`triggerhook.api.openapi`.
"""

from __future__ import annotations

from triggerhook_client.answer_fields import COPIED, COPY, SERIES_DONE, field

from triggerhook.api.fields import properties
from triggerhook.api.fields_task import BACKFILL_BODY
from triggerhook.api.openapi_answers import open_answer
from triggerhook.api.openapi_parts import (
    BODY_ERRORS,
    COMMON,
    ID_SCHEMA,
    SECURITY,
    Schema,
    error,
    json_content,
    object_schema,
)
from triggerhook.domain.series import MAX_BACKFILL, MAX_SERIES_ID_FOR_COPIES

# -- the answers ---------------------------------------------------------------------------------

_OUTCOME = "outcome"


def _outcome(*codes: str, description: str) -> Schema:
    return {_OUTCOME: {"type": "string", "enum": list(codes), "description": description}}


def _copied(outcome: str, description: str, min_copies: int, max_copies: int) -> Schema:
    said = field(COPY, _OUTCOME).description
    copy = open_answer(COPY, _outcome("created", "exists", description=said))
    copies = {"type": "array", "minItems": min_copies, "maxItems": max_copies, "items": copy}
    return open_answer(COPIED, {**_outcome(outcome, description=description), "copies": copies})


# -- the operations ------------------------------------------------------------------------------


def _path_param(schema: Schema, description: str) -> Schema:
    return {
        "name": "id",
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema,
    }


_SERIES_ID = _path_param(ID_SCHEMA, "A series' id (a task with every or cron).")
# Its copies' ids are "<id>:<due ms>", which the id rule bounds.
_COPIED_SERIES_ID = _path_param(
    {**ID_SCHEMA, "maxLength": MAX_SERIES_ID_FOR_COPIES},
    f"A series' id (a task with every or cron), of at most {MAX_SERIES_ID_FOR_COPIES} "
    "characters: its copies' ids are <id>:<due ms>.",
)
_NO_BODY = {
    "required": False,
    **json_content(object_schema({}, description="None is needed: send no body, or {}.")),
}
_NOT_FOUND = {"404": error("Unknown, or fired and deleted.")}
_NOT_A_SERIES = "not_a_series: a one-off task (no every or cron); nothing written"


def _operation(summary: str, description: str, answers: Schema, body: Schema) -> Schema:
    return {
        "summary": summary,
        "description": description,
        "security": SECURITY,
        "requestBody": body,
        "responses": {
            **answers,
            **_NOT_FOUND,
            **BODY_ERRORS,
            "422": error("Invalid id, or a field of the body; error.field names it."),
            **COMMON,
        },
    }


def _pause() -> Schema:
    answer = open_answer(
        SERIES_DONE,
        _outcome(
            "paused",
            "paused_after_this",
            description="paused (also when it was paused already), or paused_after_this: "
            "its occurrence being published still fires, none after it.",
        ),
    )
    return _operation(
        "Pause a series",
        "No occurrence fires until it is resumed; the task stays, showing paused and "
        "resume_ms (the occurrence it resumes at).",
        {
            "200": {"description": "Paused.", **json_content(answer)},
            "409": error(f"{_NOT_A_SERIES}."),
        },
        _NO_BODY,
    )


def _resume() -> Schema:
    answer = open_answer(
        SERIES_DONE,
        _outcome(
            "resumed",
            "ended",
            description="resumed (also when it was not paused), or ended: no occurrence "
            "was left (its end passed while it was paused), so it is deleted.",
        ),
    )
    return _operation(
        "Resume a paused series",
        "At the occurrence it would have fired next; one missed while it was paused goes "
        "by its catch_up policy.",
        {
            "200": {"description": "Resumed, or ended.", **json_content(answer)},
            "409": error(f"{_NOT_A_SERIES}."),
        },
        _NO_BODY,
    )


def _trigger() -> Schema:
    answer = _copied("triggered", "triggered: the copy fires now.", 1, 1)
    operation = _operation(
        "Fire one extra occurrence of a series now",
        "A one-off copy of the series' content with the id <id>:<now ms> (cancel it by "
        "that id); the series' schedule is unchanged.",
        {
            "200": {"description": "Triggered: its copy.", **json_content(answer)},
            "409": error(f"{_NOT_A_SERIES}; or conflict: the copy's id holds another task."),
        },
        _NO_BODY,
    )
    operation["parameters"] = [_COPIED_SERIES_ID]
    operation["responses"]["422"] = error(
        "Invalid id, or a field of the body (error.field names it); or (field id) a series "
        f"whose id is longer than {MAX_SERIES_ID_FOR_COPIES} characters."
    )
    return operation


def _backfill() -> Schema:
    body = object_schema(
        properties(BACKFILL_BODY),
        ["from_ms", "to_ms"],
        description="The range [from_ms, to_ms) of the series' occurrences to fire now.",
    )
    answer = _copied("backfilled", "backfilled: the range's occurrences fire now.", 0, MAX_BACKFILL)
    operation = _operation(
        "Fire a series' past occurrences in a range now",
        "Each occurrence of the series' schedule in [from_ms, to_ms) (epoch ms; to_ms not "
        f"after now; at most {MAX_BACKFILL}) as a one-off copy <id>:<due ms>, all in one "
        "transaction; a repeated backfill finds those still pending (exists), but writes, "
        "and fires, again those that fired already (deleted once confirmed), but a copy "
        "that fired within the series' dedup window is answered already_fired, not "
        "written again.",
        {
            "200": {
                "description": "Backfilled: the copies (none: none in the range).",
                **json_content(answer),
            },
            "409": error(
                f"{_NOT_A_SERIES}; or conflict: a copy's id holds another task. None written."
            ),
        },
        {"required": True, **json_content(body)},
    )
    operation["parameters"] = [_COPIED_SERIES_ID]
    operation["responses"]["422"] = error(
        "Invalid id or body: a field is missing, unknown or out of range, to_ms is not "
        f"after from_ms or is after now, or the range holds more than {MAX_BACKFILL} "
        "occurrences; error.field names it. Nothing written."
    )
    return operation


def series_paths() -> Schema:
    """The four paths, by their place under ``/v1/tasks/{id}``."""
    return {
        "/v1/tasks/{id}/pause": {"parameters": [_SERIES_ID], "post": _pause()},
        "/v1/tasks/{id}/resume": {"parameters": [_SERIES_ID], "post": _resume()},
        "/v1/tasks/{id}/trigger": {"post": _trigger()},
        "/v1/tasks/{id}/backfill": {"post": _backfill()},
    }
