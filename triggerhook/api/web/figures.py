"""The live figures the web view shows, as display text (pure).

They are the ones ``/v1/status`` serves: the last metrics period's counts
(turned into rates per second here), its lateness summary, a few gauges, and
totals since start. The page renders them at load and its script replaces
the text every few seconds from ``/ui/figures.json``, which serves the very
same dict, so formatting lives in one place.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from triggerhook.app import Figures
from triggerhook.runtime import points
from triggerhook.runtime.points import Field

MISSING = "-"  # not measured yet (no metrics period), or nothing to measure


@dataclass(frozen=True, slots=True)
class Figure:
    name: str  # key in figure_texts() and the page's data-figure attribute
    label: str


@dataclass(frozen=True, slots=True)
class Group:
    title: str
    figures: tuple[Figure, ...]


_RATES = ("scheduled", "fired", "published", "confirmed", "cancelled", "dead_lettered")
_LATENESS = (("p50", "median"), ("p99", "99th percentile"), ("max", "worst"))

GROUPS: tuple[Group, ...] = (
    Group(
        "Rates (per second, last period)",
        tuple(Figure(f"{n}_rate", n.replace("_", "-")) for n in _RATES),
    ),
    Group(
        "Lateness (publish time minus due time, last period)",
        tuple(Figure(f"lateness_{key}", label) for key, label in _LATENESS),
    ),
    Group(
        "Now",
        (
            Figure("tasks_db", "tasks in the database"),
            Figure("in_memory", "armed or in flight here"),
            Figure("oldest_overdue", "oldest overdue"),
            Figure("fired_total", "fired since start"),
            Figure("running", "engine running"),
            Figure("as_of", "as of (UTC)"),
        ),
    ),
)


def _count(value: Field | None) -> str:
    return MISSING if value is None else f"{int(value):,}"


def _ms(value: Field | None) -> str:
    return MISSING if value is None else f"{float(value):,.1f} ms"


def _rates(period: Mapping[str, Field]) -> dict[str, str]:
    period_ms = period.get("period_ms")
    texts: dict[str, str] = {}
    for name in _RATES:
        count = period.get(name)
        if count is None or not period_ms:
            texts[f"{name}_rate"] = MISSING
        else:
            texts[f"{name}_rate"] = f"{count * 1000 / period_ms:,.1f}"
    return texts


def figure_texts(figures: Figures, now_s: float | None = None) -> dict[str, str]:
    """Every figure of :data:`GROUPS` by name, as the page shows it."""
    period = figures.latest.get(points.ENGINE, {})
    texts = _rates(period)
    for key, _label in _LATENESS:
        texts[f"lateness_{key}"] = _ms(period.get(f"lateness_{key}_ms"))
    texts["tasks_db"] = _count(period.get("tasks_db"))
    texts["in_memory"] = _count(period.get("in_memory"))
    texts["oldest_overdue"] = _ms(period.get("oldest_overdue_ms"))
    texts["fired_total"] = _count(figures.totals.get("fired"))
    texts["running"] = "yes" if figures.running else "no"
    stamp = time.time() if now_s is None else now_s
    texts["as_of"] = time.strftime("%H:%M:%S", time.gmtime(stamp))
    return texts
