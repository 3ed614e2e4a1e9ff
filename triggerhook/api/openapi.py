"""The OpenAPI 3.1 document of the HTTP API, served at ``/openapi.json``.

Kept beside the handlers (triggerhook/api/http.py, triggerhook/api/listing.py)
and checked against them by the schema-driven fuzz test
(tests/integration/test_http_fuzz.py) and tests/unit/test_openapi.py: every
value a schema here admits must be accepted, and every value it refuses must be
refused. The limits come from the modules that enforce them; those JSON Schema
cannot state (bytes of UTF-8, the headers' total size, a series' bounds that depend
on the time: until after the first occurrence, that one by 9999, a cron expression
matching a date within 50 years) are in descriptions.

OpenAPI 3.1 because its schemas are JSON Schema 2020-12: ``propertyNames``
(the header names) means nothing to a 3.0 (draft 4) validator. In that data
model 5.0 is an integer and 20261201.0 equals 20261201.
"""

from __future__ import annotations

import functools
import zoneinfo
from typing import Any, NamedTuple

from cronsim.cronsim import SYMBOLIC_DAYS, SYMBOLIC_MONTHS

from triggerhook.api.bodies import MAX_DELAY_S, RESERVED_IDS
from triggerhook.domain.bounds import MAX_DUE_MS
from triggerhook.domain.listing import (
    DEFAULT_PAGE,
    MAX_BUCKET_MS,
    MAX_BUCKETS,
    MAX_PAGE,
    MIN_BUCKET_MS,
)
from triggerhook.domain.meta import MAX_HEADER_VALUE_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_TAGS
from triggerhook.domain.recurrence import MAX_CRON_CHARS, parse_zone
from triggerhook.errors import ValidationError

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
_INT64 = {"type": "integer", "format": "int64", "minimum": -(2**63), "maximum": 2**63 - 1}
_COUNT = {"type": "integer", "minimum": 0}
_DATE_TIME = {"type": "string", "format": "date-time", "pattern": "^[0-9]{4}-"}


def _time_schema(description: str) -> Schema:
    """A time in a JSON body: epoch seconds (a number) or an RFC 3339 string."""
    return {
        "description": description,
        "oneOf": [
            {"type": "number", "maximum": MAX_AT_S},
            _DATE_TIME,
        ],
    }


AT_SCHEMA = _time_schema(
    "Due time: epoch seconds (fraction allowed) or an RFC 3339 string. "
    "Any past time (even before 1970) fires at once; the latest is 9999-12-31T23:59:59.999Z. "
    "An 8-digit integer (20261201) is refused: it reads as 1970 and as a date alike "
    "(write 20261201.0, or the date as RFC 3339)."
)
DELAY_SCHEMA = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_DELAY_S,
    "description": "Seconds from now.",
}
# Exactly one of at and delay (a reschedule; a create as well, unless a series).
_ONE_WHEN = [{"required": ["at"]}, {"required": ["delay"]}]
EPOCH_S = {"type": "number", "description": "Epoch seconds, millisecond precision."}


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


def _epoch_text_pattern() -> str:
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


def _time_param(name: str, description: str) -> Schema:
    """A time as a query parameter: epoch seconds or an RFC 3339 string."""
    return _query(
        name,
        {
            "type": "string",
            "maxLength": 64,
            "anyOf": [{"pattern": _epoch_text_pattern()}, _DATE_TIME],
        },
        f"{description} Epoch seconds (fraction allowed) or an RFC 3339 time.",
    )


_ERROR = {"$ref": "#/components/schemas/Error"}
_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {}]


def _json(schema: Schema) -> Schema:
    return {"content": {"application/json": {"schema": schema}}}


def _error(description: str) -> Schema:
    return {"description": description, **_json(_ERROR)}


def _object(properties: Schema, required: list[str] | None = None, **more: Any) -> Schema:
    """A JSON object with exactly these properties."""
    schema: Schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return {**schema, **more}


_BODY_ERRORS = {
    "400": _error("Malformed JSON."),
    "408": _error("The body did not arrive within http_body_timeout_s."),
    "413": _error("Body larger than http_max_body_bytes."),
    "415": _error("Content-Type is not application/json."),
    "422": _error("A field is invalid; error.field names it."),
}
_COMMON = {
    "401": _error("Missing or wrong bearer token (when api_token is set)."),
    "503": _error("Database unavailable or daemon stopping; retry."),
}


def _only(*methods: str) -> Schema:
    """The 405 of any other method on the path (Allow lists these)."""
    allowed = ", ".join(methods)
    return {"405": _error(f"A method other than {allowed} on this path (Allow: {allowed}).")}


_TASK_PATH_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "A task id. batch, count, timeline and cancel are never one: those "
    "paths are other operations.",
    "schema": ID_SCHEMA,
}

# -- task metadata ------------------------------------------------------------------------------

HEADER_VALUE_SCHEMA = {
    "oneOf": [
        {
            "type": "string",
            "maxLength": MAX_HEADER_VALUE_BYTES,
            "description": f"At most {MAX_HEADER_VALUE_BYTES} bytes as UTF-8.",
        },
        _INT64,
        {"type": "boolean"},
    ]
}
# Printable ASCII without space, 1-128 characters, not starting with x- or X-
# (those are the engine's own headers): a first character other than x/X, or
# x/X followed by nothing or by anything but "-".
_HEADER_NAME_PATTERN = "^([!-WYZ-wyz-~][!-~]{0,127}|[xX]([!-,.-~][!-~]{0,126})?)$"
HEADERS_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_HEADERS,
    "propertyNames": {"pattern": _HEADER_NAME_PATTERN},
    "additionalProperties": HEADER_VALUE_SCHEMA,
    "description": "Custom AMQP headers of the event. Names: 1-128 printable ASCII "
    "characters without space, not starting with x- (any case: the engine's); "
    f"at most {MAX_HEADERS_BYTES} bytes of names and values in all (an integer or a "
    "boolean counts 8).",
}
PROPERTY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 255,
    "pattern": "^[ -~]{1,255}$",
    "description": "An AMQP property of the event: 1-255 printable ASCII characters.",
}
_SKIP_AFTER = {
    **_INT64,
    "minimum": 0,
    "description": "More than this many ms late: dead-lettered instead.",
}


def _late_schema(deadline: Schema) -> Schema:
    return {
        "description": "What to do when the task is found late at publish time (by the "
        "engine's clock): fire it anyway, or dead-letter it (cause: late) when more "
        "than skip_after_ms late or past a deadline. Absent: the daemon's late_policy.",
        "oneOf": [
            {"type": "string", "enum": ["fire"]},
            _object({"skip_after_ms": _SKIP_AFTER}, ["skip_after_ms"]),
            _object({"deadline": deadline}, ["deadline"]),
        ],
    }


def _metadata(late_deadline: Schema) -> Schema:
    """Tags, AMQP properties, headers and late-fire policy of a task."""
    return {
        "tags": {
            "type": "array",
            "maxItems": MAX_TAGS,
            "items": TAG_SCHEMA,
            "description": "Labels to list, count and cancel by (a set: kept sorted).",
        },
        "content_type": PROPERTY_SCHEMA,
        "content_encoding": PROPERTY_SCHEMA,
        "headers": HEADERS_SCHEMA,
        "late": _late_schema(late_deadline),
    }


# -- series (recurring tasks) ---------------------------------------------------------------------

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


def _cron_schema(gap: str, edge: str, description: str) -> Schema:
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


def _timezone_schema() -> Schema:
    return {
        "type": "string",
        "maxLength": 64,
        "pattern": _zones_pattern(time_zones()),
        "description": "The IANA time zone the cron expression is read in (Europe/Berlin): "
        f"a name ({ZONE_NAME_PATTERN}, at most 64 characters) of the server's time-zone "
        "database, one of those this pattern lists (the database of the server's host).",
    }


_SERIES = {"anyOf": [{"required": ["every"]}, {"required": ["cron"]}]}


def _series_fields() -> Schema:
    """A series as a create body gives it (only with every or cron)."""
    return {
        "every": EVERY_SCHEMA,
        "cron": _cron_schema(
            f"[{CRON_SPACE}]+",
            f"[{CRON_SPACE}]*",
            "A series by a cron expression of 5 fields (minute hour day-of-month month "
            "day-of-week; Debian cron's syntax as cronsim reads it: lists, ranges, steps, "
            "names, L, LW, nL, n#k) in timezone; fields separated by any whitespace. Not an "
            "expression no date matches: days no listed month has (0 0 30 2 *, refused by "
            "this schema), or none within 50 years (0 0 LW * */6: the last weekday on a "
            "weekend; 422). With at or delay, the first occurrence is the first matching "
            "minute at or after that time; it must come by 9999-12-31T23:59:59.999Z (else 422).",
        ),
        "timezone": {"$ref": "#/components/schemas/TimeZone", "default": "UTC"},
        "until": _time_schema(
            "The series' end: its last occurrence is the last one at or before it. Epoch "
            "seconds or an RFC 3339 string, as at; not before the first occurrence (else 422)."
        ),
    }


def _series_shown() -> Schema:
    """A series as lookups and listings show it."""
    return {
        "every": EVERY_SHOWN_SCHEMA,
        "cron": {"$ref": "#/components/schemas/ShownCron"},
        "timezone": {"$ref": "#/components/schemas/TimeZone"},
        "until": EPOCH_S,
        "occurrence": {
            "type": "integer",
            "minimum": 1,
            "description": "The pending occurrence (1: the first); its event carries it as "
            "header x-occurrence.",
        },
        "stopping": {
            "const": True,
            "description": "A cancel came while this occurrence was being published: the "
            "series ends with it.",
        },
    }


_SHOWN_SERIES_RULES = {
    "not": {"required": ["every", "cron"]},
    "dependentRequired": {
        "every": ["occurrence"],
        "cron": ["timezone", "occurrence"],
        "timezone": ["cron"],
    },
    "dependentSchemas": {name: _SERIES for name in ("until", "occurrence", "stopping")},
}


def _create_schema(max_payload_bytes: int) -> Schema:
    schema = _object(
        {
            "id": NEW_ID_SCHEMA,
            "at": AT_SCHEMA,
            "delay": DELAY_SCHEMA,
            "routing_key": ROUTING_KEY_SCHEMA,
            "payload": {
                "type": "string",
                "maxLength": max_payload_bytes,
                "description": f"UTF-8 text of at most {max_payload_bytes} bytes.",
            },
            "payload_b64": {
                "type": "string",
                "format": "byte",
                "maxLength": -(-max_payload_bytes // 3) * 4,
                "description": f"Base64 of at most {max_payload_bytes} bytes.",
            },
            **_metadata(_time_schema("Epoch seconds or an RFC 3339 string, as at.")),
            **_series_fields(),
        },
        anyOf=[*_ONE_WHEN, *_SERIES["anyOf"]],
        dependentRequired={"timezone": ["cron"]},
        dependentSchemas={"until": _SERIES},
        description="Exactly one of at and delay, or (a series: every or cron) neither; at "
        "most one of payload and payload_b64, and of every and cron; timezone only with "
        "cron, until only in a series (without at or delay the first occurrence is one "
        "every from now, or the next matching minute). The metadata and the schedule are "
        "part of the content an idempotent re-create compares.",
    )
    schema["not"] = {"anyOf": [{"required": pair} for pair in _AT_MOST_ONE]}
    return schema


_AT_MOST_ONE = (["at", "delay"], ["payload", "payload_b64"], ["every", "cron"])


def _task_schema(payload: bool) -> Schema:
    """A stored task as a lookup (with its payload) or a listing shows it."""
    properties: Schema = {
        "id": ID_SCHEMA,
        "at": EPOCH_S,
        "routing_key": {"type": "string"},
        "state": STATE_SCHEMA,
        **_metadata(EPOCH_S),
        **_series_shown(),
    }
    properties["tags"] = {**properties["tags"], "uniqueItems": True}
    required = ["id", "at", "routing_key", "state"]
    if not payload:
        return _object(properties, required, allOf=[_SHOWN_SERIES_RULES])
    properties["payload"] = {"type": "string", "description": "The payload, if UTF-8 text."}
    properties["payload_b64"] = {"type": "string", "format": "byte", "description": "Else base64."}
    return _object(
        properties,
        required,
        allOf=[_SHOWN_SERIES_RULES],
        oneOf=[{"required": ["payload"]}, {"required": ["payload_b64"]}],
    )


# -- finding tasks --------------------------------------------------------------------------------


def _query(name: str, schema: Schema, description: str) -> Schema:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _selection_params() -> list[Schema]:
    """Which tasks: id prefix, routing key, tag (every one given must match)."""
    return [
        _query("prefix", PREFIX_SCHEMA, "Tasks whose id starts with this."),
        _query("routing_key", ROUTING_KEY_SCHEMA, "Tasks with this routing key."),
        _query("tag", TAG_SCHEMA, "Tasks with this tag."),
    ]


def _filter_params() -> list[Schema]:
    return [
        *_selection_params(),
        _time_param("due_after", "Tasks due at or after this time."),
        _time_param("due_before", "Tasks due before this time."),
        _query(
            "state", STATE_SCHEMA, "scheduled: may still be cancelled; firing: being published."
        ),
    ]


CURSOR_SCHEMA = {  # URL-safe base64 (padded) of "due_ms:id", at most 120 characters
    "type": "string",
    "minLength": 4,
    "maxLength": 120,
    "pattern": "^([A-Za-z0-9_-]{4})*([A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$",
    "description": "Opaque: a next_cursor this API gave out (any other is refused, 422).",
}
_QUERY_ERRORS = {
    "422": _error("A parameter is invalid, unknown or given twice; error.field names it."),
}


def _list_operation() -> Schema:
    page = _object(
        {
            "tasks": {"type": "array", "maxItems": MAX_PAGE, "items": _task_schema(False)},
            "next_cursor": {
                **CURSOR_SCHEMA,
                "type": ["string", "null"],
                "description": "Where the next page starts; null after the last page. A page "
                "shorter than limit is the last; a full one always has a cursor (the next "
                "page may be empty).",
            },
        },
        ["tasks", "next_cursor"],
    )
    return {
        "summary": "List tasks in due order (ties by id), a page at a time",
        "security": _SECURITY,
        "parameters": [
            *_filter_params(),
            _query(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE},
                "Tasks per page.",
            ),
            _query("cursor", CURSOR_SCHEMA, "The next_cursor of the previous page."),
        ],
        "responses": {
            "200": {"description": "A page (no payloads).", **_json(page)},
            **_QUERY_ERRORS,
            **_only("GET", "POST"),
            **_COMMON,
        },
    }


def _count_operation() -> Schema:
    return {
        "summary": "Count tasks (exact; reads every match)",
        "security": _SECURITY,
        "parameters": _filter_params(),
        "responses": {
            "200": {
                "description": "How many match.",
                **_json(_object({"count": _COUNT}, ["count"])),
            },
            **_QUERY_ERRORS,
            **_only("GET"),
            **_COMMON,
        },
    }


def _timeline_operation() -> Schema:
    bucket_s = {"minimum": MIN_BUCKET_MS // 1000, "maximum": MAX_BUCKET_MS // 1000}
    answer = _object(
        {
            "start": EPOCH_S,
            "bucket": {"type": "number", "multipleOf": 1, **bucket_s},
            "buckets": {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS},
            "routing_keys": {
                "type": "object",
                "propertyNames": ROUTING_KEY_SCHEMA,
                "additionalProperties": {"type": "array", "items": _COUNT, "minItems": 1},
                "description": "Per routing key, the tasks due in each bucket (buckets "
                "counts); keys with no task in the span are absent.",
            },
        },
        ["start", "bucket", "buckets", "routing_keys"],
    )
    return {
        "summary": "Tasks due per routing key in consecutive time buckets",
        "security": _SECURITY,
        "parameters": [
            *_selection_params(),
            _time_param("start", "The first bucket's start (default: the current bucket's)."),
            _query(
                "bucket", {"type": "integer", "default": 60, **bucket_s}, "Bucket length, seconds."
            ),
            _query(
                "buckets",
                {"type": "integer", "minimum": 1, "maximum": MAX_BUCKETS, "default": 60},
                "How many buckets.",
            ),
        ],
        "responses": {
            "200": {"description": "The counts.", **_json(answer)},
            **_QUERY_ERRORS,
            **_only("GET"),
            **_COMMON,
        },
    }


def _bulk_cancel_operation() -> Schema:
    time = "Epoch seconds or an RFC 3339 string, as at."
    body = _object(
        {
            "prefix": PREFIX_SCHEMA,
            "tag": TAG_SCHEMA,
            "routing_key": ROUTING_KEY_SCHEMA,
            "due_after": _time_schema(f"Tasks due at or after this. {time}"),
            "due_before": _time_schema(f"Tasks due before this. {time}"),
        },
        anyOf=[{"required": ["prefix"]}, {"required": ["tag"]}, {"required": ["routing_key"]}],
        description="Every given field must match; at least one of prefix, tag, routing_key.",
    )
    done = _object({"cancelled": _COUNT, "too_late": _COUNT}, ["cancelled", "too_late"])
    return {
        "summary": "Cancel every matching task (blocks until done, in batches of 500)",
        "security": _SECURITY,
        "requestBody": {"required": True, **_json(body)},
        "responses": {
            "200": {
                "description": "Cancelled (they never fire), and matched but too late "
                "(being published).",
                **_json(done),
            },
            **_BODY_ERRORS,
            **_only("POST"),
            **_COMMON,
        },
    }


# -- single tasks ---------------------------------------------------------------------------------

_CREATED = {
    "type": "object",
    "required": ["id", "at"],
    "properties": {"id": ID_SCHEMA, "at": EPOCH_S},
}


def _create_operation() -> Schema:
    return {
        "summary": "Schedule one task",
        "security": _SECURITY,
        "requestBody": {"required": True, **_json({"$ref": "#/components/schemas/CreateTask"})},
        "responses": {
            "201": {"description": "Created.", **_json(_CREATED)},
            "200": {"description": "Existed with the same content.", **_json(_CREATED)},
            "409": _error("The id exists with different content."),
            **_BODY_ERRORS,
            **_COMMON,
        },
    }


def _batch_operation(max_batch_tasks: int) -> Schema:
    body = _object(
        {
            "tasks": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_batch_tasks,
                "items": {"$ref": "#/components/schemas/CreateTask"},
            }
        },
        ["tasks"],
    )
    ids = {
        "type": "object",
        "required": ["ids"],
        "properties": {"ids": {"type": "array", "items": ID_SCHEMA}},
    }
    return {
        "summary": "Schedule many tasks, all or nothing",
        "security": _SECURITY,
        "requestBody": {"required": True, **_json(body)},
        "responses": {
            "201": {"description": "All stored (or existed with the same content).", **_json(ids)},
            "409": _error("An id exists with different content; nothing stored."),
            **_BODY_ERRORS,
            **_COMMON,
        },
    }


def _task_path() -> Schema:
    return {
        "parameters": [_TASK_PATH_PARAM],
        "get": {
            "summary": "Look a task up",
            "security": _SECURITY,
            "responses": {
                "200": {"description": "Stored, not yet fired.", **_json(_task_schema(True))},
                "404": _error("Unknown, or fired and deleted."),
                "422": _error("Invalid id."),
                **_COMMON,
            },
        },
        "patch": {
            "summary": "Reschedule a task",
            "security": _SECURITY,
            "requestBody": {
                "required": True,
                **_json(
                    _object(
                        {"at": AT_SCHEMA, "delay": DELAY_SCHEMA},
                        oneOf=_ONE_WHEN,
                        description="Exactly one of at and delay.",
                    )
                ),
            },
            "responses": {
                "200": {"description": "Moved to the new time.", **_json(_CREATED)},
                "404": _error("Unknown, or fired and deleted."),
                "409": _error("Too late: being published at its old time."),
                **_BODY_ERRORS,
                **_COMMON,
            },
        },
        "delete": {
            "summary": "Cancel a task",
            "security": _SECURITY,
            "responses": {
                "204": {"description": "Cancelled: it will never fire."},
                "404": _error("Unknown, or fired and deleted."),
                "409": _error("Too late: being published."),
                "422": _error("Invalid id."),
                **_COMMON,
            },
        },
    }


# -- probes and figures ---------------------------------------------------------------------------

_HEALTH = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"type": "string"}},
}


def _probe_paths() -> Schema:
    unready = {
        "type": "object",
        "required": ["status", "reasons"],
        "properties": {
            "status": {"type": "string"},
            "reasons": {"type": "array", "items": {"type": "string"}},
        },
    }
    return {
        "/healthz": {
            "get": {
                "summary": "The process is alive",
                "responses": {"200": {"description": "Alive.", **_json(_HEALTH)}},
            }
        },
        "/readyz": {
            "get": {
                "summary": "MySQL and RabbitMQ reachable, engine threads alive",
                "responses": {
                    "200": {"description": "Ready.", **_json(_HEALTH)},
                    "503": {"description": "Not ready; reasons listed.", **_json(unready)},
                },
            }
        },
    }


def _figure_paths() -> Schema:
    status = {
        "type": "object",
        "required": ["instance", "running", "period", "http", "totals"],
        "properties": {
            "instance": {"type": "string"},
            "running": {"type": "boolean"},
            "period": {"type": "object"},
            "http": {"type": "object"},
            "totals": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
    }
    return {
        "/v1/status": {
            "get": {
                "summary": "Live figures: the last metrics period and totals since start",
                "security": _SECURITY,
                "responses": {
                    "200": {"description": "Field meanings: docs/metrics.md.", **_json(status)},
                    "401": _COMMON["401"],
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "The same figures in the Prometheus text format",
                "description": (
                    "Open unless metrics_scrape_token, or metrics_require_token (and "
                    "api_token), is set; then Bearer <metrics_scrape_token> (or api_token)."
                ),
                "security": _SECURITY,
                "responses": {
                    "200": {
                        "description": "Prometheus text format 0.0.4 (OpenMetrics on request).",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "401": _COMMON["401"],
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3.1 document."}},
            }
        },
    }


_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": "string"},
            },
        }
    },
}


def document(max_payload_bytes: int, max_batch_tasks: int) -> Schema:
    """The document for a daemon with these limits."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "triggerhook", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "CreateTask": _create_schema(max_payload_bytes),
                "TimeZone": _timezone_schema(),
                "ShownCron": _cron_schema(
                    " ", "", "The cron expression, its fields separated by one space."
                ),
                "Error": _ERROR_SCHEMA,
            },
        },
        "paths": {
            "/v1/tasks": {"post": _create_operation(), "get": _list_operation()},
            "/v1/tasks/batch": {"post": _batch_operation(max_batch_tasks)},
            "/v1/tasks/count": {"get": _count_operation()},
            "/v1/tasks/timeline": {"get": _timeline_operation()},
            "/v1/tasks/cancel": {"post": _bulk_cancel_operation()},
            "/v1/tasks/{id}": _task_path(),
            **_probe_paths(),
            **_figure_paths(),
        },
    }
