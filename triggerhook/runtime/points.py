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


@dataclass(frozen=True, slots=True)
class Point:
    measurement: str
    tags: Mapping[str, str]  # always "instance" and "host"
    fields: Mapping[str, Field]  # ints are counts/sizes, floats are ms figures
    time_ms: int  # end of the period, epoch ms
