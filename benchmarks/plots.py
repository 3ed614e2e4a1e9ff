"""PNG plots of one run (matplotlib, Agg backend: no display needed).

* ``lateness-<run>.png``  histogram and CDF of per-task lateness, both measures
* ``burst-throughput.png`` events per second over time during the burst
* ``capacity.png``        lateness percentiles and CPU per 1,000 fires, against the rate
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
    "precision.http_load_one": "the same, all in one process (api_processes = 0)",
    "hostile": "probes under hostile input",
}
_MEASURES = {"fired": "x-fired-ms - x-due-ms", "received": "received - due"}
_BIN_MS = 100


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
    capacity = next((rec for rec in recorders if rec.scenario == "capacity"), None)
    if capacity is not None and any(d.key.endswith(".fired") for d in capacity.distributions):
        written.append(_capacity(capacity, out_dir))
    return written


def _lateness(run: str, title: str, series: dict[str, list[float]], out_dir: Path) -> Path:
    plt = pyplot()
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
    return save(plt, fig, out_dir / f"lateness-{run.replace('.', '-')}.png")


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
    plt = pyplot()
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
    return save(plt, fig, out_dir / "burst-throughput.png")


_LATENESS_TICKS_MS = (0, *(m * 10**e for e in range(6) for m in (1, 2, 5)))
_CPU_OF = {"daemon": "daemon", "mariadb": "MariaDB", "rabbitmq": "RabbitMQ"}


def _capacity(rec: Recorder, out_dir: Path) -> Path:
    """Per step of the capacity scenario: publish lateness percentiles, and CPU
    per 1,000 fires of each process, against the rate (log2: the steps double)."""
    plt = pyplot()
    steps = sorted(
        (int(d.key.split(".")[1]), d.stats) for d in rec.distributions if d.key.endswith(".fired")
    )
    rates = [rate for rate, _ in steps]
    values = {f.key: f.value for f in rec.figures}
    fig, (late, cpu) = plt.subplots(1, 2, figsize=(11, 4))
    for q in ("p50", "p99", "p99.9", "max"):
        late.plot(rates, [stats[q] for _, stats in steps], marker="o", label=q)
    late.axhline(5, color="red", linestyle=":", label="5 ms (the held bound of p99)")
    late.set_yscale("symlog", linthresh=1)  # from under 1 ms to seconds when not held
    top_ms = max(stats["max"] for _, stats in steps)
    ticks = [t for t in _LATENESS_TICKS_MS if t <= max(top_ms, 5) * 2]
    late.set_yticks(ticks, [f"{t:,}" for t in ticks])
    late.set_ylim(bottom=0)
    late.set(xlabel="fires/s", ylabel="x-fired - x-due (ms)", title="capacity: publish lateness")
    for name, who in _CPU_OF.items():
        keys = [(rate, f"capacity.{rate}.cpu_{name}_per_1k_s") for rate in rates]
        points = [(rate, values[key]) for rate, key in keys if key in values]
        cpu.plot([x for x, _ in points], [y for _, y in points], marker="o", label=who)
    cpu.set(xlabel="fires/s", ylabel="CPU-s per 1,000 fires", title="CPU per 1,000 fires")
    cpu.set_ylim(bottom=0)
    held = values.get("capacity.held_fires_per_s")
    for axes in (late, cpu):
        if held:
            axes.axvline(held, color="grey", linestyle="--", label=f"held up to {held:,.0f}/s")
        axes.set_xscale("log", base=2)
        axes.set_xticks(rates, [f"{rate:,}" for rate in rates], minor=False)
        axes.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
        axes.legend()
        axes.grid(alpha=0.3)
    return save(plt, fig, out_dir / "capacity.png")
