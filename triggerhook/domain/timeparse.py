"""Parsing due times and durations into epoch milliseconds (UTC).

Every interface (library, HTTP, AMQP commands, CLI) parses times here, so the
rules hold everywhere. The rules themselves are stated once, in
:mod:`triggerhook_client.timerules`, which the client uses too (standard
library only; its docstring lists them: sub-millisecond parts round up, input
costs linear time, an 8-digit integer ``at`` is refused, errors name the field
and never echo a long input in full). This module raises their refusals as
:class:`ValidationError`, naming the same field.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from triggerhook_client.timerules import MAX_DURATION_MS, MAX_TEXT_CHARS, TimeError
from triggerhook_client.timerules import datetime_to_ms as _datetime_to_ms
from triggerhook_client.timerules import due_from as _due_from
from triggerhook_client.timerules import parse_at as _parse_at
from triggerhook_client.timerules import parse_duration_ms as _parse_duration_ms
from triggerhook_client.timerules import seconds_to_ms as _seconds_to_ms

from triggerhook.errors import ValidationError

__all__ = [
    "MAX_DURATION_MS",
    "MAX_TEXT_CHARS",
    "datetime_to_ms",
    "due_from",
    "parse_at",
    "parse_duration_ms",
    "seconds_to_ms",
]


def _refused(exc: TimeError) -> ValidationError:
    return ValidationError(exc.field, exc.message)


def seconds_to_ms(
    seconds: float | int | Decimal | str, field: str = "at", past_ok: bool = False
) -> int:
    """Epoch seconds (fraction allowed) to epoch ms, rounding up sub-ms parts.

    With ``past_ok`` a time before 1970 means "already due" and becomes 0.
    """
    try:
        return _seconds_to_ms(seconds, field, past_ok)
    except TimeError as exc:
        raise _refused(exc) from None


def datetime_to_ms(value: datetime, field: str = "at", past_ok: bool = False) -> int:
    """A datetime to epoch ms; a naive datetime is taken as UTC."""
    try:
        return _datetime_to_ms(value, field, past_ok)
    except TimeError as exc:
        raise _refused(exc) from None


def parse_at(value: object, field: str = "at", past_ok: bool = False) -> int:
    """A due time given as a datetime, epoch seconds, or an RFC 3339 string
    (``past_ok``: see :func:`seconds_to_ms`)."""
    try:
        return _parse_at(value, field, past_ok)
    except TimeError as exc:
        raise _refused(exc) from None


def due_from(at: object, at_ms: object, delay_ms: object, now_ms: float) -> int:
    """The due time from exactly one of: ``at`` (see :func:`parse_at`), ``at_ms``
    (epoch milliseconds) or ``delay_ms`` (milliseconds from ``now_ms``)."""
    try:
        return _due_from(at, at_ms, delay_ms, now_ms)
    except TimeError as exc:
        raise _refused(exc) from None


def parse_duration_ms(text: str, field: str = "in") -> int:
    """``250ms``, ``5s``, ``2h``, ``1h30m`` or a bare number of seconds, to ms."""
    try:
        return _parse_duration_ms(text, field)
    except TimeError as exc:
        raise _refused(exc) from None
