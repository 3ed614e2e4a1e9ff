"""The Prometheus text exposition of the daemon's figures (``GET /metrics``). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from triggerhook.runtime.points import Field

# Fields of a period's point that are per-period counts: Prometheus gets their
# totals instead (``<name>_total``), which it turns into rates itself.
_PERIOD_ONLY = frozenset({"period_ms", "metrics_dropped"})


def render(
    labels: Mapping[str, str],
    totals: Mapping[str, int],
    latest: Mapping[str, Mapping[str, Field]],
) -> str:
    """``totals``: counters since start; ``latest``: measurement -> the last
    period's fields, of which the non-count ones are exposed as gauges."""
    label_text = ",".join(f'{key}="{_escape(value)}"' for key, value in sorted(labels.items()))
    lines: list[str] = []
    for name, value in sorted(totals.items()):
        metric = f"triggerhook_{name}_total"
        lines += [f"# TYPE {metric} counter", f"{metric}{{{label_text}}} {value}"]
    for measurement, fields in sorted(latest.items()):
        for name, figure in sorted(fields.items()):
            if name in totals or name in _PERIOD_ONLY:
                continue
            metric = f"{measurement}_{name}"
            lines += [f"# TYPE {metric} gauge", f"{metric}{{{label_text}}} {figure}"]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
