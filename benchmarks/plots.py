"""PNG plots of one run (matplotlib, Agg backend: no display needed).

* ``lateness-<run>.png``  histogram and CDF of per-task lateness, both measures
* ``burst-throughput.png`` events per second over time during the burst
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import Recorder

_RUNS = {
    "burst": "burst: all due at one instant",
    "near_due": "100 ms ahead through a non-owner",
    "precision.idle": "steady 1,000 fires/s",
    "precision.http_load": "steady 1,000 fires/s + HTTP create load",
    "hostile": "probes under hostile input",
}
_MEASURES = {"fired": "x-fired-ms - x-due-ms", "received": "received - due"}
_BIN_MS = 100


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(recorders: Sequence[Recorder], out_dir: Path) -> list[Path]:
    """Every plot the run's data allows; the paths written."""
    series = {k: v for rec in recorders for k, v in rec.series.items()}
    written = [
        _lateness(run, title, series, out_dir)
        for run, title in _RUNS.items()
        if f"{run}.fired" in series
    ]
    burst = next((rec for rec in recorders if rec.timeline), None)
    if burst is not None and "burst.received" in series:
        written.append(_throughput(burst, series["burst.received"], out_dir))
    return written


def _lateness(run: str, title: str, series: dict[str, list[float]], out_dir: Path) -> Path:
    plt = _pyplot()
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    for measure, label in _MEASURES.items():
        values = series.get(f"{run}.{measure}", [])
        if not values:
            continue
        # Log scale for the steady runs, whose tails matter; the burst spreads evenly.
        hist.hist(values, bins=100, histtype="step", label=label, log=run != "burst")
        count = len(values)
        cdf.plot(values, [(i + 1) / count for i in range(count)], label=label)
    scale = "" if run == "burst" else " (log scale)"
    hist.set(xlabel="lateness (ms)", ylabel=f"events{scale}", title=f"{title}: histogram")
    cdf.set(xlabel="lateness (ms)", ylabel="fraction of events", title="CDF", ylim=(0, 1.01))
    for axes in (hist, cdf):
        axes.legend()
        axes.grid(alpha=0.3)
    path = out_dir / f"lateness-{run.replace('.', '-')}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _per_second(times_ms: Sequence[float]) -> tuple[list[float], list[float]]:
    """Events per second in ``_BIN_MS`` bins (x: bin start, seconds after due)."""
    if not times_ms:
        return [], []
    first = int(min(times_ms) // _BIN_MS)
    bins = [0] * (int(max(times_ms) // _BIN_MS) - first + 1)
    for t in times_ms:
        bins[int(t // _BIN_MS) - first] += 1
    xs = [(first + i) * _BIN_MS / 1000 for i in range(len(bins))]
    return xs, [count * 1000 / _BIN_MS for count in bins]


def _counter_rates(
    timeline: Sequence[tuple[float, dict[str, int]]], name: str
) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for (t0, c0), (t1, c1) in itertools.pairwise(timeline):
        if t1 > t0:
            xs.append((t0 + t1) / 2000)  # the interval's middle, in seconds
            ys.append((c1[name] - c0[name]) * 1000 / (t1 - t0))
    return xs, ys


def _throughput(rec: Recorder, received_ms: Sequence[float], out_dir: Path) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(figsize=(11, 4))
    for name in ("fired", "confirmed", "deleted"):
        axes.plot(*_counter_rates(rec.timeline, name), label=f"{name} (engine counter)")
    axes.plot(*_per_second(received_ms), label="received (consumer process)")
    axes.axvline(0, color="grey", linestyle=":", label="due instant")
    axes.set_xlim(left=-0.5)  # before the instant only arming happens
    axes.set(
        xlabel="seconds after the due instant",
        ylabel="events per second",
        title="burst: throughput over time",
    )
    axes.legend()
    axes.grid(alpha=0.3)
    path = out_dir / "burst-throughput.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
