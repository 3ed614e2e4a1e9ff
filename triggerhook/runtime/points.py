"""One metrics point, as written to InfluxDB. Pure data, no I/O.

The measurements and their fields are documented in docs/metrics.md; the
Grafana dashboard (grafana/) queries exactly these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ENGINE = "triggerhook"  # one point per instance per period
HTTP = "triggerhook_http"  # one point per instance per period, when the HTTP API runs

Field = int | float

# A figure per label value (a rate limit's pattern) is the field
# ``<name>:<label>``: InfluxDB gets it as it is, Prometheus as the family of
# ``name`` with the label (metrics/prometheus.py).
_LABEL_SEP = ":"


def labelled(name: str, label: str) -> str:
    """The field of figure ``name`` for one label value."""
    return f"{name}{_LABEL_SEP}{label}"


def split_label(field: str) -> tuple[str, str | None]:
    """A field's figure and its label value (None: a field without one)."""
    name, sep, label = field.partition(_LABEL_SEP)
    return (name, label) if sep else (field, None)


@dataclass(frozen=True, slots=True)
class Point:
    measurement: str
    tags: Mapping[str, str]  # always "instance" and "host"
    fields: Mapping[str, Field]  # ints are counts/sizes, floats are ms figures
    time_ms: int  # end of the period, epoch ms
