"""What the web view's pages and forms were asked (pure: strings in, values out).

The filter is read exactly as ``GET /v1/tasks`` reads it
(:func:`~triggerhook.api.listing.single_values` and
:func:`~triggerhook.api.listing.parse_filter`), except that an empty field
means "any" (a GET form sends every field). The outcome of a cancel comes
back in the query as codes and numbers, never as text, so that a link cannot
make the page say something of its own.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, replace

from multidict import MultiDict, MultiMapping
from triggerhook_client.rules import FILTER_FIELDS, STATE_FIELD

from triggerhook.api.listing import parse_filter, single_values
from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.task import ID_PATTERN, CancelResult
from triggerhook.errors import ValidationError

# The form's fields: the listing's filter, its times as RFC 3339 text only.
FILTER_ORDER = FILTER_FIELDS
FILTER_PARAMS = frozenset(FILTER_ORDER)
BULK_FIELDS = FILTER_PARAMS - {STATE_FIELD}
NOTICE_PARAMS = frozenset({"task", "outcome", "cancelled", "too_late", "stopped"})
PAGE_PARAMS = FILTER_PARAMS | NOTICE_PARAMS | {"cursor"}
VIEW_FIELD = "view"  # a single cancel's form: the listing to go back to
MAX_FORM_BYTES = 16 * 1024
_MAX_FIELDS = 16
_OUTCOME_TEXT = {
    CancelResult.CANCELLED.value: "cancelled",
    CancelResult.TOO_LATE.value: "too late",
    CancelResult.NOT_FOUND.value: "not found",
}


@dataclass(frozen=True, slots=True)
class View:
    """One listing page as asked: the filter as typed (to fill the form in
    again), parsed (None when invalid, with the error), the page's cursor and
    what a cancel just did."""

    values: dict[str, str]
    where: TaskFilter | None
    error: ValidationError | None = None
    cursor: str | None = None
    notice: str | None = None


def filter_values(values: Mapping[str, str]) -> dict[str, str]:
    """The non-empty filter fields, in the form's order."""
    return {key: values[key] for key in FILTER_ORDER if values.get(key)}


def read_view(query: MultiMapping[str]) -> View:
    """The page a query asks for; a bad value is reported, never raised."""
    try:
        values = single_values(query, PAGE_PARAMS)
    except ValidationError as exc:
        return View({}, None, exc)
    typed = filter_values(values)
    cursor = values.get("cursor") or None
    notice = notice_of(values)
    try:
        where = parse_filter(typed)
    except ValidationError as exc:
        return View(typed, None, exc, None, notice)
    return View(typed, where, None, cursor, notice)


def notice_of(values: Mapping[str, str]) -> str | None:
    """What a cancel did: "abc: cancelled" after a single one, "3 cancelled,
    1 too late" after a bulk one; None when the query says neither (or nonsense)."""
    task, outcome = values.get("task"), values.get("outcome")
    if task is not None and outcome in _OUTCOME_TEXT and ID_PATTERN.fullmatch(task):
        return f"{task}: {_OUTCOME_TEXT[outcome]}"
    cancelled, too_late = values.get("cancelled", ""), values.get("too_late", "")
    if cancelled.isdecimal() and too_late.isdecimal() and len(cancelled + too_late) < 20:
        # stopped: at bulk_cancel_timeout_s, before the end
        rest = "; stopped before the end: cancel again for the rest" if "stopped" in values else ""
        return f"{int(cancelled)} cancelled, {int(too_late)} too late{rest}"
    return None


def listing_url(values: Mapping[str, str], **extra: str) -> str:
    """``/ui`` with the filter ``values`` (and ``extra``) as its query."""
    query = urllib.parse.urlencode({**filter_values(values), **extra})
    return f"/ui?{query}" if query else "/ui"


def read_form(body: bytes) -> dict[str, str]:
    """A urlencoded POST body: each field once, UTF-8; ValidationError else."""
    try:
        text = body.decode("utf-8")
        pairs = urllib.parse.parse_qsl(
            text, keep_blank_values=True, strict_parsing=False, max_num_fields=_MAX_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise ValidationError("body", "must be a urlencoded form in UTF-8") from None
    fields: dict[str, str] = {}
    for key, value in pairs:
        if key in fields:
            raise ValidationError(key[:64], "given more than once")
        fields[key] = value
    return fields


def bulk_filter(fields: Mapping[str, str]) -> tuple[dict[str, str], TaskFilter]:
    """A bulk cancel form's filter (its typed values, and parsed); the rules of
    ``POST /v1/tasks/cancel`` (at least one of prefix, tag and routing key)."""
    typed = filter_values(fields)
    values = single_values(MultiDict(typed), BULK_FIELDS)
    where = parse_filter(values)
    if not where.narrowed:
        raise ValidationError("filter", "give at least one of prefix, tag and routing_key")
    return typed, where


def return_values(fields: Mapping[str, str]) -> dict[str, str]:
    """The listing a single cancel's form came from (its ``view`` field), when
    that is a valid filter; else none (the first page)."""
    try:
        pairs = urllib.parse.parse_qsl(fields.get(VIEW_FIELD, ""), max_num_fields=_MAX_FIELDS)
        typed = filter_values(single_values(MultiDict(pairs), FILTER_PARAMS))
        parse_filter(typed)
    except (ValidationError, ValueError):
        return {}
    return typed


def timeline_filter(where: TaskFilter) -> TaskFilter:
    """The timeline's own span replaces the listing's due range and state."""
    return replace(where, due_after_ms=None, due_before_ms=None, state=None)
