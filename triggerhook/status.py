"""``triggerhook status``: a running daemon's live figures as text, for
operators without Grafana. Pure: renders what ``GET /v1/status`` answered."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_COUNTS = (
    "scheduled",
    "armed",
    "fired",
    "published",
    "confirmed",
    "deleted",
    "cancelled",
    "rescheduled",
)
_TROUBLE = (
    "returned",
    "nacked",
    "publish_retries",
    "db_errors",
    "broker_reconnects",
    "shards_lost",
)
_MEMORY = ("in_memory", "heap", "send_buffer", "unconfirmed", "shards", "members")


def render(status: Mapping[str, Any]) -> str:
    period: Mapping[str, Any] = status.get("period") or {}
    http: Mapping[str, Any] = status.get("http") or {}
    totals: Mapping[str, Any] = status.get("totals") or {}
    seconds = (period.get("period_ms") or 0) / 1000
    state = "running" if status.get("running") else "stopped"
    lines = [f"instance   {status.get('instance')}  ({state})"]
    if not period:
        lines.append("(no metrics period completed yet)")
    else:
        lines += [
            f"last {seconds:.1f} s  " + _pairs(period, _COUNTS),
            "lateness   " + _latency(period, "lateness"),
            "memory     " + _pairs(period, _MEMORY),
            f"database   tasks {period.get('tasks_db', '?')}, "
            f"oldest overdue {period.get('oldest_overdue_ms', '?')} ms",
            "trouble    " + _pairs(period, _TROUBLE),
        ]
    if http:
        requests = _pairs(http, ("requests_2xx", "requests_4xx", "requests_5xx"))
        lines.append(f"http       {requests}; latency {_latency(http, 'latency')}")
    lines.append("since start " + _pairs(totals, (*_COUNTS, *_TROUBLE)))
    return "\n".join(lines)


def _pairs(fields: Mapping[str, Any], names: tuple[str, ...]) -> str:
    return ", ".join(f"{name} {fields.get(name, 0)}" for name in names)


def _latency(fields: Mapping[str, Any], prefix: str) -> str:
    if f"{prefix}_p50_ms" not in fields:
        return "(none in the period)"
    figures = (fields[f"{prefix}_{q}_ms"] for q in ("p50", "p99", "max"))
    return "p50 {:.0f}, p99 {:.0f}, max {:.0f} ms".format(*figures)
