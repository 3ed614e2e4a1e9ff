"""Parsing due times and durations into epoch milliseconds (UTC).

Sub-millisecond fractions round *up*, so a task never fires before the instant
its caller named.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from triggerhook.domain.task import MAX_DUE_MS, MIN_DUE_MS, validate_due_ms
from triggerhook.errors import ValidationError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Floats below this take the fast path (far past year 9999; no overflow in * 1000).
_FLOAT_FAST_PATH_S = 1e15


def seconds_to_ms(
    seconds: float | int | Decimal | str, field: str = "at", past_ok: bool = False
) -> int:
    """Epoch seconds (fraction allowed) to epoch ms, rounding up sub-ms parts.

    With ``past_ok`` a time before 1970 means "already due" and becomes 0.
    """
    if isinstance(seconds, bool):
        raise ValidationError(field, "must be a number of seconds, not a boolean")
    if isinstance(seconds, int):
        return _checked(seconds * 1000, field, past_ok)
    if isinstance(seconds, float) and abs(seconds) < _FLOAT_FAST_PATH_S:
        return _checked(_float_seconds_to_ms(seconds), field, past_ok)
    try:
        exact = Decimal(str(seconds))
    except InvalidOperation as exc:
        raise ValidationError(field, f"{seconds!r} is not a number") from exc
    if not exact.is_finite():
        raise ValidationError(field, "must be a finite number")
    return _checked(math.ceil(exact * 1000), field, past_ok)


def _float_seconds_to_ms(seconds: float) -> int:
    """The fast path for floats (a JSON body's numbers): ``x * 1000`` carries a
    rounding error of a few ulps, so a product within that error of a whole
    millisecond is that millisecond; anything else rounds up."""
    scaled = seconds * 1000.0
    nearest = round(scaled)
    if abs(scaled - nearest) <= max(1e-6, 4 * math.ulp(scaled)):
        return nearest
    return math.ceil(scaled)


def datetime_to_ms(value: datetime, field: str = "at", past_ok: bool = False) -> int:
    """A datetime to epoch ms; a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - datetime(1970, 1, 1, tzinfo=UTC)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return _checked(-(-micros // 1000), field, past_ok)


def parse_at(value: object, field: str = "at", past_ok: bool = False) -> int:
    """A due time given as a datetime, epoch seconds, or an RFC 3339 string
    (``past_ok``: see :func:`seconds_to_ms`)."""
    if isinstance(value, datetime):
        return datetime_to_ms(value, field, past_ok)
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return seconds_to_ms(value, field, past_ok)
    if isinstance(value, str):
        text = value.strip()
        if _looks_numeric(text):
            return seconds_to_ms(text, field, past_ok)
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError as exc:
            raise ValidationError(
                field, f"{value!r} is neither epoch seconds nor an ISO-8601 time"
            ) from exc
        return datetime_to_ms(parsed, field, past_ok)
    raise ValidationError(field, "must be a datetime, epoch seconds or an ISO-8601 string")


def due_from(at: object, at_ms: object, delay_ms: object, now_ms: float) -> int:
    """The due time from exactly one of: ``at`` (see :func:`parse_at`), ``at_ms``
    (epoch milliseconds) or ``delay_ms`` (milliseconds from ``now_ms``)."""
    given = [v is not None for v in (at, at_ms, delay_ms)]
    if sum(given) != 1:
        raise ValidationError("at", "give exactly one of at, at_ms and delay_ms")
    if at is not None:
        return parse_at(at)
    if at_ms is not None:
        return _checked(_integer_ms(at_ms, "at_ms"), "at_ms")
    delay = _nonnegative(_integer_ms(delay_ms, "delay_ms"), "delay_ms")
    return _checked(math.ceil(now_ms) + delay, "delay_ms")


def _integer_ms(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, "must be an integer number of milliseconds")
    return value


def parse_duration_ms(text: str, field: str = "in") -> int:
    """``250ms``, ``5s``, ``2h``, ``1h30m`` or a bare number of seconds, to ms."""
    cleaned = text.strip().lower()
    if _looks_numeric(cleaned):
        return _nonnegative(math.ceil(Decimal(cleaned) * 1000), field)
    total = Decimal(0)
    pos = 0
    for match in _DURATION_PART.finditer(cleaned):
        if match.start() != pos:
            break
        total += Decimal(match.group(1)) * _UNIT_MS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(cleaned):
        raise ValidationError(field, f"{text!r} is not a duration like 250ms, 5s, 2h or 1h30m")
    return _nonnegative(math.ceil(total), field)


def _looks_numeric(text: str) -> bool:
    return re.fullmatch(r"[+-]?\d+(?:\.\d*)?", text) is not None


def _nonnegative(ms: int, field: str) -> int:
    if ms < 0:
        raise ValidationError(field, "must not be negative")
    return ms


def _checked(ms: int, field: str, past_ok: bool = False) -> int:
    if MIN_DUE_MS <= ms <= MAX_DUE_MS:
        return ms
    if past_ok and ms < MIN_DUE_MS:
        return MIN_DUE_MS
    try:
        return validate_due_ms(ms)
    except ValidationError as exc:
        raise ValidationError(field, exc.message) from None
