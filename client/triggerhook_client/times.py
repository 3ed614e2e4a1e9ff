"""Instants and durations as the client sends them (docs/api.md, "Units"): an
instant is epoch milliseconds in a ``*_ms`` field or RFC 3339 text in a field
without a suffix; a duration is milliseconds. A number given where an instant
is due (epoch seconds) is deprecated: it is warned of, and sent in milliseconds.

The rules are the daemon's, stated once in :mod:`triggerhook_client.timerules`
(which the daemon imports): sub-millisecond parts round up, never early; a
time before 1970 means "now"; the latest is 9999-12-31T23:59:59.999Z; an
8-digit integer is refused (epoch seconds in 1970, or a date?).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from decimal import Decimal

from triggerhook_client import timerules
from triggerhook_client.checks import deprecated, invalid, is_int, is_number, utf8
from triggerhook_client.rules import DUE_RULE, MAX_DUE_MS, MIN_DUE_MS


def now_ms() -> Decimal:
    """This machine's clock, in epoch ms (exact: no float rounding)."""
    return Decimal(time.time_ns()) / 1_000_000


def due_ms(at_ms: int, name: str) -> int:
    """``at_ms`` if it is within 1970-9999, else :class:`InvalidRequest` for ``name``."""
    if not MIN_DUE_MS <= at_ms <= MAX_DUE_MS:
        raise invalid(name, DUE_RULE)
    return at_ms


def delay_at_ms(delay_ms: object, name: str) -> int:
    """Now + ``delay_ms`` (whole milliseconds) in epoch ms."""
    if not is_int(delay_ms) or delay_ms < 0:
        raise invalid(name, "must be a non-negative integer number of milliseconds")
    if delay_ms > MAX_DUE_MS:  # compared before any arithmetic
        raise invalid(name, DUE_RULE)
    return due_ms(math.ceil(now_ms()) + delay_ms, name)


def delay_s_at_ms(delay_s: object, name: str) -> int:
    """Now + ``delay_s`` (deprecated: seconds) in epoch ms, rounded up: the
    delay never ends early."""
    if not is_number(delay_s) or not math.isfinite(delay_s) or delay_s < 0:
        raise invalid(name, "must be a finite, non-negative number of seconds")
    return due_ms(math.ceil(now_ms() + Decimal(str(delay_s)) * 1000), name)


def epoch_ms(value: object, name: str) -> int:
    """An instant given in epoch milliseconds (``at_ms``, ``until_ms``,
    ``deadline_ms``): an int, sent as it is (the daemon checks its range)."""
    if not is_int(value):
        raise invalid(name, "must be an integer number of epoch milliseconds")
    return value


def instant(value: object, name: str) -> str | int:
    """An instant given as ``name`` (``at``, ``until``, ``late.deadline``) as
    it is sent: a datetime or text as RFC 3339 text (a str), under the same
    name; a number (deprecated: epoch seconds) as epoch milliseconds (an int),
    under ``<name>_ms``."""
    if isinstance(value, datetime):
        return rfc_3339(value)
    if isinstance(value, str):
        return utf8(value, name)
    if is_number(value):
        deprecated(
            f"{name} as a number (epoch seconds) is deprecated: give {name}_ms or a datetime"
        )
        return _seconds_ms(value, name)
    raise invalid(name, "must be a datetime or an RFC 3339 string")


def rfc_3339(value: datetime) -> str:
    """A datetime as RFC 3339 text; a naive one is UTC."""
    return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).isoformat()


def _seconds_ms(seconds: float, name: str) -> int:
    """Epoch seconds as epoch ms, exactly as the daemon reads them."""
    try:
        return timerules.parse_at(seconds, name, past_ok=True)
    except timerules.TimeError as exc:
        raise invalid(exc.field, exc.message) from None


def instant_field(
    name: str, value: object, value_ms: object
) -> tuple[dict[str, str | int], dict[str, str]]:
    """An instant the caller gave as ``name`` (see :func:`instant`) or as
    ``name_ms`` (epoch ms), at most one: ``{field: value}`` as it is sent
    (empty when neither is given), and the rename of the daemon's field to
    the caller's (a deprecated number given as ``name`` goes as ``name_ms``)."""
    if value_ms is not None:
        if value is not None:
            raise invalid(name, f"give at most one of {name} and {name}_ms (given: both)")
        return {f"{name}_ms": epoch_ms(value_ms, f"{name}_ms")}, {}
    if value is None:
        return {}, {}
    sent = instant(value, name)
    if isinstance(sent, str):
        return {name: sent}, {}
    return {f"{name}_ms": sent}, {f"{name}_ms": name}


def every_ms(every: object, name: str) -> int:
    """``every``'s length in ms: the client needs it for a series' first time."""
    try:
        return timerules.every_ms(every, name)
    except timerules.TimeError as exc:
        raise invalid(exc.field, exc.message) from None
