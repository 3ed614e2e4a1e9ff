"""The time rules of the daemon and its client, stated once: due times and
durations parsed into epoch milliseconds (UTC). Every interface of the daemon
(library, HTTP, AMQP commands, CLI) parses times with these
(triggerhook/domain/timeparse.py raises their errors as its own), and the
client converts a deprecated number of epoch seconds with them. Standard
library only.

* Sub-millisecond fractions round *up*, so a task never fires before the
  instant its caller named.
* Hostile input costs linear time: text is length-capped before any regex or
  conversion, and every number is range-checked by its magnitude (digits
  before the point, a Decimal's exponent, an int compared as it is) before any
  exact arithmetic. Only ASCII digits count as digits.
* An 8-digit integer ``at`` (``20261201``) is refused: it reads as epoch
  seconds in 1970 and as a compact ISO date alike.
* Errors (:class:`TimeError`) name the field and never echo a long input in full.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_CEILING, Context, Decimal

from triggerhook_client.rules import DUE_RULE, MAX_DUE_MS, MIN_DUE_MS


class TimeError(ValueError):
    """A time or duration refused: ``field`` as the caller wrote it, and why.
    Each side raises it as its own error (the daemon's ValidationError, the
    client's InvalidRequest)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# Longest due time or duration accepted as text; an ISO-8601 time with
# microseconds and an offset is 32 characters.
MAX_TEXT_CHARS = 64
# Epoch seconds up to 9999-12-31 have 12 digits before the point; ms have 15.
_MAX_SECONDS_DIGITS = len(str(MAX_DUE_MS // 1000))
_MAX_MS_DIGITS = len(str(MAX_DUE_MS))
_MAX_SECONDS = MAX_DUE_MS // 1000 + 1  # exclusive bound, in whole seconds
# The longest duration: anything longer cannot end before 9999 (about 8,000 years).
MAX_DURATION_MS = MAX_DUE_MS
# Longest part of an input repeated in an error message.
_SHOWN_CHARS = 40

# [0-9], never \d: \d also matches Arabic-Indic, fullwidth and other digits.
_NUMBER = re.compile(r"([+-]?)([0-9]+)(?:\.([0-9]*))?")
_DURATION_PART = re.compile(r"([0-9]+)(?:\.([0-9]+))?(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Seconds with more than 6 fractional digits: datetime keeps 6 (truncating).
_SUB_MICROSECOND = re.compile(r"[0-9]{2}[.,][0-9]{6}([0-9]+)")
# Floats below this take the fast path (far past year 9999; no overflow in * 1000).
_FLOAT_FAST_PATH_S = 1e15
# Exact arithmetic: multiplying and taking the integral part never round (the
# operands are exact; precision only caps, it allocates nothing); and should
# anything round, it rounds up, never early.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_CEILING, traps=[])
_RANGE_MESSAGE = DUE_RULE
_COMPACT_DATE_MIN, _COMPACT_DATE_MAX = 10_000_000, 99_999_999


def seconds_to_ms(
    seconds: float | int | Decimal | str, field: str = "at", past_ok: bool = False
) -> int:
    """Epoch seconds (fraction allowed) to epoch ms, rounding up sub-ms parts.

    With ``past_ok`` a time before 1970 means "already due" and becomes 0.
    """
    if isinstance(seconds, bool):
        raise TimeError(field, "must be a number of seconds, not a boolean")
    if isinstance(seconds, int):
        if not -_MAX_SECONDS < seconds < _MAX_SECONDS:  # compared, never multiplied
            return _out_of_range(field, seconds < 0, past_ok)
        return _checked(seconds * 1000, field, past_ok)
    if isinstance(seconds, float):
        return _float_seconds_to_ms(seconds, field, past_ok)
    if isinstance(seconds, Decimal):
        return _decimal_seconds_to_ms(seconds, field, past_ok)
    if isinstance(seconds, str):
        match = _NUMBER.fullmatch(_bounded_text(seconds, field))
        if match is None:
            raise TimeError(field, f"{_shown(seconds)} is not a number")
        return _number_text_to_ms(match, field, past_ok)
    raise TimeError(field, "must be a number of seconds")


def _float_seconds_to_ms(seconds: float, field: str, past_ok: bool) -> int:
    if not math.isfinite(seconds):
        raise TimeError(field, "must be a finite number")
    if abs(seconds) >= _FLOAT_FAST_PATH_S:
        return _out_of_range(field, seconds < 0, past_ok)
    # The shortest decimal that reads back as this float is the number the
    # caller wrote (0.1, not 0.1000000000000000055...), and it is exact: its
    # sub-millisecond part rounds up, at any magnitude (a tolerance of a few
    # ulps of ``x * 1000`` would round 253402300799.99902 down to ...799.999).
    return _decimal_seconds_to_ms(Decimal(repr(seconds)), field, past_ok)


def _decimal_seconds_to_ms(seconds: Decimal, field: str, past_ok: bool) -> int:
    if not seconds.is_finite():
        raise TimeError(field, "must be a finite number")
    if seconds.is_zero():
        return MIN_DUE_MS
    magnitude = seconds.adjusted()  # |seconds| is in [10**magnitude, 10**(magnitude+1))
    if magnitude >= _MAX_SECONDS_DIGITS:
        return _out_of_range(field, seconds.is_signed(), past_ok)
    if magnitude < -3:  # under a millisecond: the next ms up
        return _checked(0 if seconds.is_signed() else 1, field, past_ok)
    ms = _EXACT.to_integral_value(_EXACT.multiply(seconds, 1000))
    return _checked(int(ms), field, past_ok)


def _number_text_to_ms(match: re.Match[str], field: str, past_ok: bool) -> int:
    """Epoch seconds as text (a :data:`_NUMBER` match), range-checked by the
    number of digits before the point before anything is converted."""
    sign, whole, _fraction = match.groups()
    if len(whole.lstrip("0")) > _MAX_SECONDS_DIGITS:
        return _out_of_range(field, sign == "-", past_ok)
    return _decimal_seconds_to_ms(Decimal(match.group(0)), field, past_ok)


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
    if isinstance(value, int) and not isinstance(value, bool):
        if _COMPACT_DATE_MIN <= value <= _COMPACT_DATE_MAX:
            raise TimeError(field, _ambiguous(str(value)))
        return seconds_to_ms(value, field, past_ok)
    if isinstance(value, int | float | Decimal):  # bool included: refused there
        return seconds_to_ms(value, field, past_ok)
    if isinstance(value, str):
        return _parse_at_text(value, field, past_ok)
    raise TimeError(field, "must be a datetime, epoch seconds or an ISO-8601 string")


def _parse_at_text(value: str, field: str, past_ok: bool) -> int:
    text = _bounded_text(value, field)
    match = _NUMBER.fullmatch(text)
    if match is not None:
        sign, whole, fraction = match.groups()
        if sign != "-" and fraction is None and len(whole) == 8:
            raise TimeError(field, _ambiguous(whole))
        return _number_text_to_ms(match, field, past_ok)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise TimeError(
            field, f"{_shown(value)} is neither epoch seconds nor an ISO-8601 time"
        ) from None
    sub_micro = _SUB_MICROSECOND.search(text)
    if sub_micro is not None and sub_micro.group(1).strip("0"):
        # datetime dropped the digits past the microsecond: round up, never early.
        try:
            parsed += timedelta(microseconds=1)
        except OverflowError:  # past 9999-12-31T23:59:59.999999
            return _out_of_range(field, False, past_ok)
    return datetime_to_ms(parsed, field, past_ok)


def _ambiguous(digits: str) -> str:
    """Why an 8-digit integer is refused, with both readings and how to write each."""
    epoch = datetime.fromtimestamp(int(digits), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    date = f"{digits[:4]}-{digits[4:6]}-{digits[6:]}"
    return (
        f"{digits} is ambiguous: as epoch seconds it is {epoch}, as a date (YYYYMMDD) "
        f"{date}; write the date as {date!r} (or {date + 'T00:00:00Z'!r}), "
        f"or epoch seconds with a fraction, e.g. {digits}.0"
    )


def due_from(at: object, at_ms: object, delay_ms: object, now_ms: float) -> int:
    """The due time from exactly one of: ``at`` (see :func:`parse_at`), ``at_ms``
    (epoch milliseconds) or ``delay_ms`` (milliseconds from ``now_ms``)."""
    given = [v is not None for v in (at, at_ms, delay_ms)]
    if sum(given) != 1:
        raise TimeError("at", "give exactly one of at, at_ms and delay_ms")
    if at is not None:
        return parse_at(at)
    if at_ms is not None:
        return _checked(_integer_ms(at_ms, "at_ms"), "at_ms")  # compared only
    delay = _duration_checked(_integer_ms(delay_ms, "delay_ms"), "delay_ms")
    return _checked(math.ceil(now_ms) + delay, "delay_ms")


def _integer_ms(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TimeError(field, "must be an integer number of milliseconds")
    return value


def parse_duration_ms(text: str, field: str = "in") -> int:
    """``250ms``, ``5s``, ``2h``, ``1h30m`` or a bare number of seconds, to ms."""
    if not isinstance(text, str):
        raise TimeError(field, "must be a duration like 250ms, 5s, 2h or 1h30m")
    cleaned = _bounded_text(text, field).lower()
    number = _NUMBER.fullmatch(cleaned)
    if number is not None:
        return _bare_seconds_duration_ms(number, field)
    total = Decimal(0)
    pos = 0
    for match in _DURATION_PART.finditer(cleaned):
        if match.start() != pos:
            break
        whole, _fraction, unit = match.groups()
        if len(whole.lstrip("0")) > _MAX_MS_DIGITS:  # before converting it
            raise TimeError(field, _too_long())
        part = _EXACT.multiply(Decimal(match.group(0)[: -len(unit)]), _UNIT_MS[unit])
        total = _EXACT.add(total, part)
        pos = match.end()
    if pos == 0 or pos != len(cleaned):
        raise TimeError(field, f"{_shown(text)} is not a duration like 250ms, 5s, 2h or 1h30m")
    if total > MAX_DURATION_MS:  # each part is bounded, so the sum is small
        raise TimeError(field, _too_long())
    return int(_EXACT.to_integral_value(total))


def _bare_seconds_duration_ms(match: re.Match[str], field: str) -> int:
    sign, whole, _fraction = match.groups()
    if len(whole.lstrip("0")) > _MAX_SECONDS_DIGITS:
        if sign == "-":
            raise TimeError(field, "must not be negative")
        raise TimeError(field, _too_long())
    ms = int(_EXACT.to_integral_value(_EXACT.multiply(Decimal(match.group(0)), 1000)))
    return _duration_checked(ms, field)


def _duration_checked(ms: int, field: str) -> int:
    if ms < 0:
        raise TimeError(field, "must not be negative")
    if ms > MAX_DURATION_MS:
        raise TimeError(field, _too_long())
    return ms


def _too_long() -> str:
    return f"must be at most {MAX_DURATION_MS} ms (about 8,000 years)"


def _bounded_text(value: str, field: str) -> str:
    """``value`` stripped, once it is known to be short ASCII text (checked
    first: everything after this costs time in its length)."""
    if len(value) > MAX_TEXT_CHARS:
        raise TimeError(
            field, f"is {len(value)} characters long, over the limit of {MAX_TEXT_CHARS}"
        )
    if not value.isascii():
        raise TimeError(field, f"{_shown(value)} is not ASCII text (digits must be 0-9)")
    return value.strip()


def _shown(value: str) -> str:
    """``value`` for an error message: its repr, cut short if it is long."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


def _out_of_range(field: str, negative: bool, past_ok: bool) -> int:
    """A time known, by its magnitude alone, to be outside 1970-9999."""
    if negative and past_ok:
        return MIN_DUE_MS
    raise TimeError(field, _RANGE_MESSAGE)


def _checked(ms: int, field: str, past_ok: bool = False) -> int:
    if MIN_DUE_MS <= ms <= MAX_DUE_MS:
        return ms
    if past_ok and ms < MIN_DUE_MS:
        return MIN_DUE_MS
    raise TimeError(field, _RANGE_MESSAGE)


# A series' period: an ISO 8601 duration in weeks, days, hours, minutes and
# seconds (to the millisecond, . or ,), elapsed time (P1D is 86,400 s). No
# months or years: their length depends on the calendar (a cron series has it).
_EVERY = re.compile(
    r"P(?:([0-9]{1,9})W)?(?:([0-9]{1,9})D)?"
    r"(?:T(?:([0-9]{1,9})H)?(?:([0-9]{1,9})M)?(?:([0-9]{1,9})(?:[.,]([0-9]{1,3}))?S)?)?"
)
_EVERY_UNIT_MS = (7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000)
MIN_EVERY_MS = 1000
_EVERY_RULE = "must be an ISO 8601 duration such as PT15M or P1D (no months or years: use cron)"


def every_ms(value: object, field: str = "every") -> int:
    """A series' ``every`` (an ISO 8601 duration, at least PT1S) in ms."""
    found = _EVERY.fullmatch(value) if isinstance(value, str) and len(value) <= 64 else None
    if found is None or value in ("P", "PT") or str(value).endswith("T"):
        raise TimeError(field, _EVERY_RULE)
    *parts, fraction = found.groups()
    ms = sum(int(part) * unit for part, unit in zip(parts, _EVERY_UNIT_MS, strict=True) if part)
    return every_checked(ms + int((fraction or "0").ljust(3, "0")), field)


def every_checked(ms: int, field: str = "every") -> int:
    """A series' period in ms, if a series can have it: at least 1 s, and
    short enough to fit between 1970 and 9999."""
    if ms < MIN_EVERY_MS:
        raise TimeError(field, "must be at least 1 s (PT1S)")
    if ms > MAX_DUE_MS:
        raise TimeError(field, "is longer than any series can run (past 9999)")
    return ms
