"""The OpenAPI document's schemas of a series' schedule: ``every`` (ISO 8601
durations), ``cron`` (Debian cron's syntax, as cronsim reads it) and the time
zones, each a pattern that admits exactly what the server takes (checked by
tests/unit/test_openapi.py). Used by :mod:`triggerhook.api.openapi`.
"""

from __future__ import annotations

import functools
import zoneinfo
from typing import Any, NamedTuple

from cronsim.cronsim import SYMBOLIC_DAYS, SYMBOLIC_MONTHS

from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.recurrence import MAX_CRON_CHARS, parse_zone
from triggerhook.errors import ValidationError

Schema = dict[str, Any]

# every: the significant digits a number may have here. The server takes 9 digits a number
# and MAX_DUE_MS in all, a sum no pattern states; within these caps every sum is below it
# (tests/unit/test_openapi.py checks), so all the document admits is taken. Longer periods
# (over 1,900 years: P100000W) are taken too, but left out of the pattern.
EVERY_DIGITS = {"W": 5, "D": 6, "H": 7, "M": 9, "S": 9}
# Python's str.split() separates cron fields at any of these (its whitespace).
CRON_SPACE = "\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_STEP = "0*[1-9][0-9]*"


def _every_pattern() -> str:
    """ISO 8601 durations of weeks, days, hours, minutes and seconds (to the ms)."""
    w, d, h, m, s = (f"{_every_number(unit)}{unit}" for unit in "WDHMS")
    s = s.replace("S", "([.,][0-9]{1,3})?S")
    return f"^P({w})?({d})?(T({h}({m})?({s})?|{m}({s})?|{s}))?$"


def _every_number(unit: str) -> str:
    """At most EVERY_DIGITS[unit] significant digits, 9 in all (as the server counts)."""
    digits = EVERY_DIGITS[unit]
    return f"0{{0,{9 - digits}}}[0-9]{{1,{digits}}}" if digits < 9 else "[0-9]{1,9}"


EVERY_SCHEMA: Schema = {
    "type": "string",
    "maxLength": 64,
    "pattern": _every_pattern(),
    # Under a second (PT0.5S), and P alone.
    "not": {"pattern": "^P(0+W)?(0+D)?(T(0+H)?(0+M)?(0+([.,][0-9]+)?S)?)?$"},
    "description": "A series every so long: an ISO 8601 duration in weeks, days, hours, "
    "minutes and seconds (PT15M, P1D, P2W, PT1.5S; to the millisecond, . or ,), at least "
    "PT1S; elapsed time (P1D is 86,400 s). No months or years: use cron. At most "
    f"{MAX_DUE_MS} ms in all, and 9 digits a number: this document admits at most "
    + ", ".join(f"{n} significant digits of {unit}" for unit, n in EVERY_DIGITS.items())
    + ", which keeps every sum within the limit; longer periods within it are taken too.",
}
# How an answer shows it (render.py): days, then hours, minutes, seconds below their next unit.
_SHOWN_H, _SHOWN_M = "([1-9]|1[0-9]|2[0-3])H", "([1-9]|[1-5][0-9])M"
_SHOWN_S = "(([1-9]|[1-5][0-9])(\\.[0-9]{0,2}[1-9])?|0\\.[0-9]{0,2}[1-9])S"
_SHOWN_CLOCK = f"T({_SHOWN_H}({_SHOWN_M})?({_SHOWN_S})?|{_SHOWN_M}({_SHOWN_S})?|{_SHOWN_S})"
EVERY_SHOWN_SCHEMA: Schema = {
    "type": "string",
    "pattern": f"^P([1-9][0-9]{{0,6}}D({_SHOWN_CLOCK})?|{_SHOWN_CLOCK})$",
    "description": "every as a duration: days (no weeks), hours, minutes, seconds.",
}


class _CronField(NamedTuple):
    """One field of a cron expression as cronsim reads it: numbers lo..hi,
    and names (case ignored) for the values from ``first_name`` on."""

    lo: int
    hi: int
    names: tuple[str, ...] = ()
    first_name: int = 0

    def name_values(self) -> list[tuple[str, int]]:
        return [(name, self.first_name + i) for i, name in enumerate(self.names)]


_MINUTE = _CronField(0, 59)
_HOUR = _CronField(0, 23)
_DAY = _CronField(1, 31)
_MONTH = _CronField(1, 12, tuple(SYMBOLIC_MONTHS), 1)  # JAN..DEC
_WEEKDAY = _CronField(0, 7, tuple(SYMBOLIC_DAYS), 0)  # SUN..SAT, and 7 is Sunday too


def _numbers(lo: int, hi: int) -> str:
    """The decimal integers lo..hi (0 <= lo <= hi <= 99) without leading zeros."""
    decades = [
        (tens, max(lo, tens * 10) % 10, min(hi, tens * 10 + 9) % 10)
        for tens in range(lo // 10, hi // 10 + 1)
    ]
    parts = [_digit(first, last) for tens, first, last in decades if tens == 0]
    full = [tens for tens, first, last in decades if tens and (first, last) == (0, 9)]
    if full:
        parts.append(f"{_digit(full[0], full[-1])}[0-9]")
    parts += [f"{tens}{_digit(a, b)}" for tens, a, b in decades if tens and tens not in full]
    return "|".join(parts)


def _digit(first: int, last: int) -> str:
    if first > last:
        return ""
    return str(first) if first == last else f"[{first}-{last}]"


def _caseless(name: str) -> str:
    return "".join(f"[{c}{c.lower()}]" for c in name)


def _values(field: _CronField, lo: int, hi: int) -> str:
    """One value of ``field`` in lo..hi: a number (leading zeros allowed) or a name."""
    names = [_caseless(name) for name, value in field.name_values() if lo <= value <= hi]
    return "(" + "|".join([f"0*({_numbers(lo, hi)})", *names]) + ")"


def _cron_term(field: _CronField) -> str:
    """One term of a field's comma-separated list: *, a value or an ascending
    range, each with an optional /step; the day of month also L and LW, the
    day of week also nL (the last such weekday) and value#n (the nth, 1-5)."""
    ranges = "|".join(
        f"{_values(field, v, v)}-{_values(field, v, field.hi)}"
        for v in range(field.lo, field.hi + 1)
    )
    terms = [f"(\\*|{_values(field, field.lo, field.hi)}|{ranges})(/{_STEP})?"]
    if field is _DAY:
        terms.append(f"[Ll][Ww]?(/{_STEP})?")
    if field is _WEEKDAY:
        terms += ["0*[0-7][Ll]", f"{_values(field, field.lo, field.hi)}#0*[1-5]"]
    return "|".join(terms)


def _listed(term: str) -> str:
    return f"({term})(,({term}))*"


_CRON_FIELDS = (_MINUTE, _HOUR, _DAY, _MONTH, _WEEKDAY)


def _cron_pattern(gap: str, edge: str) -> str:
    """Five fields separated by ``gap``, with ``edge`` around them."""
    fields = gap.join(_listed(_cron_term(field)) for field in _CRON_FIELDS)
    return f"^{edge}{fields}{edge}$"


def _stepped(field: _CronField, items: list[int], step: int) -> set[int]:
    """What cronsim makes of ``items``/``step``: one item counts on to the field's end."""
    if len(items) == 1:
        return set(range(items[0], field.hi + 1)[::step])
    return set(sorted(items)[::step])


def _steps(ks: list[int], longest: int) -> str:
    """Steps of these sizes, ``longest`` standing for itself and any longer one."""
    if ks == list(range(1, longest + 1)):
        return _STEP
    runs: list[list[int]] = []
    for k in ks:
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    sizes = [_numbers(run[0], 99 if run[-1] == longest else run[-1]) for run in runs]
    if longest in ks:
        sizes.append("[1-9][0-9]{2,}")
    return f"0*({'|'.join(sizes)})"


def _terms_within(field: _CronField, allowed: set[int]) -> str:
    """The terms of ``field`` (no L, #) whose every value is in ``allowed``."""
    span = field.hi - field.lo + 1  # a step this long or longer keeps the first value only
    bases = [("\\*", list(range(field.lo, field.hi + 1)))]
    for a in range(field.lo, field.hi + 1):
        bases.append((_values(field, a, a), [a]))
        for b in range(a, field.hi + 1):
            bases.append((f"{_values(field, a, a)}-{_values(field, b, b)}", list(range(a, b + 1))))
    terms = []
    for text, items in bases:
        if set(items) <= allowed:
            terms.append(text)
        ks = [k for k in range(1, span + 1) if _stepped(field, items, k) <= allowed]
        if ks:
            terms.append(f"{text}/{_steps(ks, span)}")
    return _listed("|".join(terms))


def _impossible_days(gap: str, edge: str) -> str:
    """The expressions cronsim refuses as "Bad day-of-month": with a day of week
    starting with * (days of month and of week must then both match), days of
    month beyond any listed month's length (30 and 31 in February alone, 31 in
    months of 30 days at most)."""
    token = f"[^{CRON_SPACE}]+"
    feb = f"{_terms_within(_DAY, {30, 31})}{gap}{_terms_within(_MONTH, {2})}"
    short = f"{_terms_within(_DAY, {31})}{gap}{_terms_within(_MONTH, {2, 4, 6, 9, 11})}"
    return f"^{edge}{token}{gap}{token}{gap}({feb}|{short}){gap}\\*[^{CRON_SPACE}]*{edge}$"


def cron_schema(gap: str, edge: str, description: str) -> Schema:
    return {
        "type": "string",
        "format": "cron",  # an annotation (a fuzzer can draw from a generator of its own)
        "minLength": 1,
        "maxLength": MAX_CRON_CHARS,
        "pattern": _cron_pattern(gap, edge),
        "not": {"pattern": _impossible_days(gap, edge)},
        "description": description,
    }


# An IANA zone name as the server reads it; which of these exist says the database.
ZONE_NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,3}$"


@functools.cache
def time_zones() -> tuple[str, ...]:
    """The names of this host's time-zone database the server takes (the daemon
    serves the document of its own host)."""
    return tuple(sorted(name for name in zoneinfo.available_timezones() if _zone_taken(name)))


def _zone_taken(name: str) -> bool:
    try:
        parse_zone(name)
    except ValidationError:
        return False
    return True


def _zones_pattern(zones: tuple[str, ...]) -> str:
    """Exactly these names (as a pattern rather than an enum: a fuzzer's coverage
    phase would try every member of an enum), grouped by their area."""
    areas: dict[str, list[str]] = {}
    for name in zones:
        area, _, place = name.replace("+", "\\+").partition("/")
        areas.setdefault(area, []).append(place)
    names = []
    for area, places in areas.items():
        within = "|".join(place for place in places if place)
        if not within:
            names.append(area)
        else:
            names.append(f"{area}(/({within})){'?' if '' in places else ''}")
    return f"^({'|'.join(names)})$"


def timezone_schema() -> Schema:
    return {
        "type": "string",
        "maxLength": 64,
        "pattern": _zones_pattern(time_zones()),
        "description": "The IANA time zone the cron expression is read in (Europe/Berlin): "
        f"a name ({ZONE_NAME_PATTERN}, at most 64 characters) of the server's time-zone "
        "database, one of those this pattern lists (the database of the server's host).",
    }
