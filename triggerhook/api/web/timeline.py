"""The timeline as an inline SVG bar chart (pure): tasks due per minute for
the next hour, stacked by routing key.

Inline SVG needs no script and no inline style (the page's CSP allows
neither): colours come from classes ``k0`` ... ``k7`` of the stylesheet, and
each bar segment has a ``<title>`` (the browser's tooltip) with its numbers.
The busiest routing keys get a colour each; the rest share "other", so the
chart stays readable whatever the number of keys.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape

from triggerhook.domain.listing import Timeline

COLOURS = 7  # classes k0..k6 for routing keys, k7 for "other"
OTHER = "(other keys)"
WIDTH, HEIGHT = 720, 180  # the plot area, in SVG user units
_LEFT, _BOTTOM, _TOP = 40, 22, 10  # margins: y labels, x labels, headroom
_TICKS = 4  # x labels: start, quarters, end


@dataclass(frozen=True, slots=True)
class Series:
    key: str
    colour: int  # class k<colour>
    counts: list[int]

    @property
    def total(self) -> int:
        return sum(self.counts)


def series_of(timeline: Timeline) -> list[Series]:
    """The routing keys with the most tasks first (ties by name), beyond
    :data:`COLOURS` merged into one :data:`OTHER` series."""
    ranked = sorted(timeline.counts.items(), key=lambda item: (-sum(item[1]), item[0]))
    shown = [Series(key, i, list(counts)) for i, (key, counts) in enumerate(ranked[:COLOURS])]
    rest = ranked[COLOURS:]
    if rest:
        merged = [sum(column) for column in zip(*(counts for _, counts in rest), strict=True)]
        shown.append(Series(OTHER, COLOURS, merged))
    return shown


def clock(ms: int) -> str:
    """Epoch ms as UTC ``HH:MM``."""
    return time.strftime("%H:%M", time.gmtime(ms / 1000))


def _bars(timeline: Timeline, series: list[Series], peak: int) -> list[str]:
    step = WIDTH / timeline.buckets
    scale = (HEIGHT - _TOP) / peak
    parts: list[str] = []
    for index in range(timeline.buckets):
        base = float(HEIGHT)
        at = clock(timeline.start_ms + index * timeline.bucket_ms)
        for line in series:
            count = line.counts[index]
            if not count:
                continue
            tall = count * scale
            base -= tall
            parts.append(
                f'<rect class="k{line.colour}" x="{_LEFT + index * step + 1:.1f}" '
                f'y="{base:.1f}" width="{max(step - 2, 1):.1f}" height="{tall:.1f}">'
                f"<title>{escape(at)} UTC, {escape(line.key)}: {count}</title></rect>"
            )
    return parts


def _axes(timeline: Timeline, peak: int) -> list[str]:
    parts = [
        f'<line class="axis" x1="{_LEFT}" y1="{HEIGHT}" x2="{_LEFT + WIDTH}" y2="{HEIGHT}"/>',
        f'<text class="label" x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">{peak}</text>',
        f'<text class="label" x="{_LEFT - 4}" y="{HEIGHT}" text-anchor="end">0</text>',
    ]
    for tick in range(_TICKS + 1):
        index = timeline.buckets * tick // _TICKS
        x = _LEFT + WIDTH * tick / _TICKS
        at = clock(timeline.start_ms + index * timeline.bucket_ms)
        parts.append(
            f'<text class="label" x="{x:.1f}" y="{HEIGHT + 16}" text-anchor="middle">{at}</text>'
        )
    return parts


def timeline_svg(timeline: Timeline) -> str:
    """The chart (with its legend), or a sentence when nothing is due."""
    series = series_of(timeline)
    totals = [sum(column) for column in zip(*(s.counts for s in series), strict=True)]
    if not totals or not max(totals):
        return '<p class="empty" id="timeline-empty">Nothing is due in this span.</p>'
    peak = max(totals)
    label = f"tasks due per {timeline.bucket_ms // 1000} s, by routing key; most in one: {peak}"
    svg = (
        f'<svg id="timeline-chart" role="img" viewBox="0 0 {_LEFT + WIDTH + 10} '
        f'{HEIGHT + _BOTTOM}" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>"
        + "".join(_axes(timeline, peak) + _bars(timeline, series, peak))
        + "</svg>"
    )
    legend = "".join(
        f'<li><span class="swatch k{s.colour}"></span>{escape(s.key)} '
        f'<span class="total">{s.total:,}</span></li>'
        for s in series
    )
    return f'{svg}<ul class="legend" id="timeline-legend">{legend}</ul>'
