"""InfluxDB line protocol: metrics points as text. Pure, no I/O.

One line per point, ``measurement,tag=v,... field=v,... time_ms``, as the
line protocol reference defines it (the same grammar for InfluxDB 1.x, 2.x and
3.x); the writer sends it with ``precision=ms``.

Escaping follows the servers' parser (``models/points.go``):

* measurement: ``,`` and space get a backslash;
* tag keys, tag values, field keys: ``,``, ``=`` and space get a backslash;
* a backslash is kept as it is: the parser only unescapes the three characters
  above, so ``\\\\`` would be stored as two backslashes.

What the protocol cannot carry raises :class:`InvalidPoint` (naming the part):
a newline or carriage return anywhere (it ends the line), a name or tag value
ending in a backslash (it would escape the separator after it), an empty name,
a measurement starting with ``#`` (a comment line), a point without fields, a
NaN or infinite float, an integer outside int64. Tags with an empty value are
left out (InfluxDB rejects empty tag values; an absent tag reads the same).

Fields: ``bool`` as ``true``/``false``, ``int`` as ``12i``, ``float`` as
``repr`` (shortest round-trip form: ``0.25``, ``1e-07``). Tags and fields are
sorted by key (tags as InfluxDB stores them; fields for a stable text).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from triggerhook.runtime.points import Field, Point

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MEASUREMENT_ESCAPES = str.maketrans({",": "\\,", " ": "\\ "})
_KEY_ESCAPES = str.maketrans({",": "\\,", "=": "\\=", " ": "\\ "})


class InvalidPoint(ValueError):
    """The point cannot be written as line protocol; the message names the part."""


def encode_point(point: Point) -> str:
    """One line of line protocol (no trailing newline), timestamp in ms."""
    measurement = _checked(point.measurement, "measurement")
    if measurement.startswith("#"):
        raise InvalidPoint(f"measurement {measurement!r}: a leading '#' makes a comment line")
    head = measurement.translate(_MEASUREMENT_ESCAPES) + _encode_tags(point.tags)
    if not point.fields:
        raise InvalidPoint(f"measurement {measurement!r}: a point needs at least one field")
    fields = ",".join(
        f"{_checked(key, 'field key').translate(_KEY_ESCAPES)}={_encode_value(key, value)}"
        for key, value in sorted(point.fields.items())
    )
    if isinstance(point.time_ms, bool) or not isinstance(point.time_ms, int):
        raise InvalidPoint(f"time_ms: must be an int (epoch ms), got {point.time_ms!r}")
    return f"{head} {fields} {point.time_ms}"


def encode_points(points: Iterable[Point]) -> str:
    """All points, one per line (raises :class:`InvalidPoint` on the first bad one)."""
    return "\n".join(encode_point(point) for point in points)


def _encode_tags(tags: Mapping[str, str]) -> str:
    parts = []
    for key, value in sorted(tags.items()):
        if value == "":
            continue
        escaped_key = _checked(key, "tag key").translate(_KEY_ESCAPES)
        escaped_value = _checked(value, f"tag {key!r}").translate(_KEY_ESCAPES)
        parts.append(f",{escaped_key}={escaped_value}")
    return "".join(parts)


def _encode_value(key: str, value: Field) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise InvalidPoint(f"field {key!r}: {value} is outside the int64 range")
        return f"{value}i"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidPoint(f"field {key!r}: {value} cannot be stored (not finite)")
        return repr(value)
    raise InvalidPoint(f"field {key!r}: {type(value).__name__} is not an int or float")


def _checked(text: str, what: str) -> str:
    """``text`` if line protocol can carry it as a name or tag value."""
    if not text:
        raise InvalidPoint(f"{what}: must not be empty")
    if "\n" in text or "\r" in text:
        raise InvalidPoint(f"{what} {text!r}: line protocol cannot carry a line break")
    if text.endswith("\\"):
        raise InvalidPoint(f"{what} {text!r}: must not end with a backslash")
    return text
