"""Throughput across instances: burst and steady load with 1, 2 and 3 daemons
on the local cluster (``scripts/cluster up --no-daemons``; issue 16).

For each daemon count k (default 1, 2, 3), in a database and a quorum queue
of its own on the cluster, k daemons started together, their shards spread
(:mod:`benchmarks.cluster`); a consumer process reads the queue through the
first broker node (auto-ack) in both parts:

* **burst**: N tasks (default 100,000) due at one instant, posted ahead through
  the batch endpoint, a share through each daemon. Figures from the due instant
  until the last event is received and the last row deleted: tasks/s, the
  lateness (received - due) p50/p99/max and the engine's (x-fired - x-due) p99,
  the CPU seconds of each group of processes.
* **steady**: rates stepped up (default 1,000, 2,000, 4,000 and 8,000 fires/s,
  20 s each) as in :mod:`benchmarks.capacity`, with its criteria of a step held
  (p99 ≤ 5 ms, none early, none missing, no backlog growth), until a step is not
  held; each step in the same database and daemons (the queue purged first).

CPU is metered by group (:class:`benchmarks.cluster.GroupMeter`). A group
using about as many cores as the machine has, or one single-threaded part of a
server (the writer node, a quorum queue's leader), is where throughput stops.

Figures: ``instances.<k>.`` ``burst_tasks_per_s``, ``burst_s``,
``burst_p50_ms``, ``burst_p99_ms``, ``burst_max_ms``, ``burst_fired_p99_ms``,
``burst_cpu_<group>_s``, ``held_fires_per_s``; per step
``instances.<k>.<rate>.fired_p99`` and ``cpu_<group>_per_1k_s``; the lateness
distributions. :func:`draw` plots them against k (``instances.png``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import uvloop

from benchmarks.capacity import (
    DRAIN_S,
    LEAD_S,
    RECEIVE_BOUND_S,
    Step,
    not_held,
    quarter_medians_ms,
    receive_bound_ms,
    rows_left_after,
)
from benchmarks.catalogue import Spec
from benchmarks.cluster import (
    CONSUMER,
    DAEMONS,
    GALERA,
    HAPROXY,
    MACHINE,
    RABBIT_1,
    RABBITMQ,
    WRITER,
    GroupMeter,
    check_cluster,
    cluster_daemons,
    cluster_place,
    daemons_text,
    meter,
    on_cluster,
)
from benchmarks.common import (
    Distribution,
    Event,
    Place,
    Recorder,
    consume_until,
    consuming,
    rate,
    record_lateness,
    wait_until,
    with_channel,
)
from benchmarks.http import Daemon, post_batches
from benchmarks.plots import pyplot, save
from benchmarks.precision import due_times

log = logging.getLogger(__name__)

SCENARIO = "instances"
COUNTS = (1, 2, 3)
BURST_N = 100_000
RATES = (1_000, 2_000, 4_000, 8_000)
STEP_S = 20
QUICK_BURST_N = 2_000
QUICK_RATES = (500, 1_000)
QUICK_STEP_S = 2

# Posting through the cluster's single writer (every commit certified and
# replicated to two more nodes on this machine) is slower than on one server;
# the lead assumes this rate, and posting must end before the first arming.
POST_TASKS_PER_S = 8_000

BURST_GROUPS = {
    DAEMONS: "daemons",
    GALERA: "galera",
    WRITER: "galera_writer",
    RABBITMQ: "rabbitmq",
    RABBIT_1: "rabbitmq_node1",
    HAPROXY: "haproxy",
    CONSUMER: "consumer",
    MACHINE: "machine",
}
STEP_GROUPS = {DAEMONS: "daemons", GALERA: "galera", RABBITMQ: "rabbitmq", CONSUMER: "consumer"}


def _burst_specs(k: int) -> tuple[Spec, ...]:
    who = f"{daemons_text(k)} on the cluster"
    key = f"{SCENARIO}.{k}"
    fixed = (
        (
            "burst_tasks_per_s",
            "burst, due instant → last event received and row deleted",
            "tasks/s",
        ),
        ("burst_s", "burst, seconds from the due instant to the end", "s"),
        ("burst_p50_ms", "burst lateness p50 (received - due)", "ms"),
        ("burst_p99_ms", "burst lateness p99 (received - due)", "ms"),
        ("burst_max_ms", "burst lateness max (received - due)", "ms"),
        ("burst_fired_p99_ms", "burst lateness p99 (x-fired - x-due)", "ms"),
    )
    cpu = tuple(
        (f"burst_cpu_{name}_s", f"burst, CPU of {group}", "CPU-s")
        for group, name in BURST_GROUPS.items()
    )
    held = (("held_fires_per_s", "highest steady rate held (capacity's criteria)", "fires/s"),)
    return tuple(
        Spec(f"{key}.{measure}", SCENARIO, f"{who}: {label}", unit)
        for measure, label, unit in (*fixed, *cpu, *held)
    )


SPECS: tuple[Spec, ...] = tuple(spec for k in COUNTS for spec in _burst_specs(k))


def specs(rec: Recorder) -> tuple[Spec, ...]:
    """Every spec of the figures ``rec`` holds: :data:`SPECS` and the
    per-step ones (``instances.<k>.<rate>.*``)."""
    return (*SPECS, *_step_specs(rec))


def _step_specs(rec: Recorder) -> tuple[Spec, ...]:
    """Specs of the per-step figures ``rec`` holds (``instances.<k>.<rate>.*``)."""
    labels = {"fired_p99": ("lateness p99 (x-fired - x-due)", "ms")}
    labels.update(
        (f"cpu_{name}_per_1k_s", (f"{group} CPU per 1,000 fires", "CPU-s"))
        for group, name in STEP_GROUPS.items()
    )
    specs = []
    for figure in rec.figures:
        parts = figure.key.split(".")
        if len(parts) == 4 and parts[2].isdigit() and parts[3] in labels:
            label, unit = labels[parts[3]]
            k, fires = int(parts[1]), int(parts[2])
            specs.append(
                Spec(figure.key, SCENARIO, f"{daemons_text(k)}, {fires:,} fires/s: {label}", unit)
            )
    return tuple(specs)


def run(
    rec: Recorder,
    counts: Sequence[int] = COUNTS,
    burst_n: int = BURST_N,
    rates: Sequence[int] = RATES,
    step_s: int = STEP_S,
) -> None:
    """For each k of ``counts``: k daemons, a burst of ``burst_n``, then
    ``rates`` (ascending) for ``step_s`` each until one is not held."""
    with on_cluster():
        check_cluster()
        for k in counts:
            with (
                rec.part(daemons_text(k)),
                cluster_place() as place,
                cluster_daemons(place, k) as daemons,
            ):
                with rec.part(f"{daemons_text(k)}: burst"):
                    _burst(rec, k, place, daemons, burst_n)
                _steady(rec, k, place, daemons, rates, step_s)


async def _post_spread(urls: Sequence[str], tasks: list[dict[str, object]]) -> float:
    """A share of ``tasks`` through each daemon at once; wall seconds."""
    share = -(-len(tasks) // len(urls))
    started = time.perf_counter()
    await asyncio.gather(
        *(post_batches(url, tasks[i * share : (i + 1) * share]) for i, url in enumerate(urls))
    )
    return time.perf_counter() - started


def _lead_s(n: int) -> float:
    return LEAD_S + n / POST_TASKS_PER_S


def _post_before(
    place: Place, daemons: Sequence[Daemon], tasks: list[dict[str, object]], due_ms: int
) -> float:
    """Post ``tasks`` (the first due at ``due_ms``); tasks/s. Posting must end
    before the first arming."""
    elapsed_s = uvloop.run(_post_spread([d.url for d in daemons], tasks))
    if time.time() * 1000 > due_ms - place.settings.arm_ahead_ms:
        raise RuntimeError(
            f"posting {len(tasks):,} tasks took {elapsed_s:.1f} s, past the first arming "
            f"(POST_TASKS_PER_S {POST_TASKS_PER_S:,} is too high for this machine)"
        )
    return rate(len(tasks), elapsed_s)


# -- burst -----------------------------------------------------------------------------------


def _burst(rec: Recorder, k: int, place: Place, daemons: Sequence[Daemon], n: int) -> None:
    due_ms = int((time.time() + _lead_s(n)) * 1000)
    with consuming(place.name, n) as consumer:
        tasks: list[dict[str, object]] = [{"at": due_ms / 1000, "routing_key": "b"}] * n
        posted = _post_before(place, daemons, tasks, due_ms)
        cpu = meter(daemons, consumer.pid)
        threading.Event().wait(max(0.0, due_ms / 1000 - time.time()))
        cpu.start()  # from the due instant
        events: list[Event] = consumer.events(60 + n / 500)
        deleted_s = wait_until(lambda: place.rows() == 0, DRAIN_S, "rows deleted", step_s=0.05)
        cpu.stop()
    received_ms = max(e[2] for e in events)
    end_s = (max(received_ms, deleted_s * 1000) - due_ms) / 1000
    key = f"{SCENARIO}.{k}"
    rec.add(
        f"{key}.burst_tasks_per_s",
        rate(n, end_s),
        f"{n:,} due at once, posted at {posted:,.0f} tasks/s through {daemons_text(k)}; "
        f"last event received {(received_ms - due_ms) / 1000:.2f} s, last row deleted "
        f"{deleted_s - due_ms / 1000:.2f} s after the due instant; {cpu.text()}",
    )
    rec.add(f"{key}.burst_s", end_s)
    _record_burst(rec, k, events, cpu)


def _record_burst(rec: Recorder, k: int, events: Sequence[Event], cpu: GroupMeter) -> None:
    key = f"{SCENARIO}.{k}"
    record_lateness(rec, f"{key}.burst", f"{daemons_text(k)}, burst", events)
    fired, received = _last_two(rec, f"{key}.burst")
    for q in ("p50", "p99", "max"):
        rec.add(f"{key}.burst_{q}_ms", received.stats[q], "received - due")
    rec.add(
        f"{key}.burst_fired_p99_ms",
        fired.stats["p99"],
        f"x-fired - x-due: p50 {fired.stats['p50']:,.0f}, max {fired.stats['max']:,.0f} ms",
    )
    for group, name in BURST_GROUPS.items():
        if group in cpu.used:
            rec.add(
                f"{key}.burst_cpu_{name}_s",
                cpu.used[group],
                f"{cpu.cores(group):.2f} cores over {cpu.wall_s:.1f} s "
                f"(the machine has {os.cpu_count()})",
            )


def _last_two(rec: Recorder, prefix: str) -> tuple[Distribution, Distribution]:
    """The fired and received distributions just recorded; their raw series
    dropped (no plot draws them; a full run's would be big)."""
    for measure in ("fired", "received"):
        del rec.series[f"{prefix}.{measure}"]
    return rec.distributions[-2], rec.distributions[-1]


# -- steady ----------------------------------------------------------------------------------


def _steady(
    rec: Recorder,
    k: int,
    place: Place,
    daemons: Sequence[Daemon],
    rates: Sequence[int],
    seconds: int,
) -> None:
    """Each rate of ``rates`` until one is not held; ``held_fires_per_s``."""
    verdicts: dict[int, list[str]] = {}
    for fires_per_s in rates:
        with rec.part(f"{daemons_text(k)}, {fires_per_s:,} fires/s"):
            step = _step(place, daemons, fires_per_s, seconds)
            verdicts[fires_per_s] = _record_step(rec, k, step)
        if fires_per_s not in verdicts:
            return  # a step that failed says nothing of the rate held
        if verdicts[fires_per_s]:
            break  # not held
    held = [r for r, why in verdicts.items() if not why]
    steps = "; ".join(
        f"{r:,}/s " + ("held" if not why else "not held: " + ", ".join(why))
        for r, why in verdicts.items()
    )
    more = (
        " (every rate tried held: the rate held may be higher)" if len(held) == len(rates) else ""
    )
    rec.add(
        f"{SCENARIO}.{k}.held_fires_per_s",
        max(held, default=0),
        f"{steps}; {seconds} s a step{more}",
    )


def _purge(name: str) -> None:
    with_channel(lambda ch: ch.queue_purge(name))


def _step(place: Place, daemons: Sequence[Daemon], fires_per_s: int, seconds: int) -> Step:
    n = fires_per_s * seconds
    _purge(place.name)  # nothing left of the previous part
    start_ms = int((time.time() + _lead_s(n)) * 1000)
    due_ms = due_times(start_ms, seconds, fires_per_s)
    bound_ms = receive_bound_ms(start_ms, seconds)
    with consuming(place.name, n, consume_until(bound_ms / 1000)) as consumer:
        tasks: list[dict[str, object]] = [{"at": d / 1000, "routing_key": "c"} for d in due_ms]
        _post_before(place, daemons, tasks, start_ms)
        del tasks
        cpu = meter(daemons, consumer.pid)
        first_arming_s = (start_ms - place.settings.arm_ahead_ms) / 1000
        threading.Event().wait(max(0.0, first_arming_s - time.time()))  # firing's CPU only
        cpu.start()
        events: list[Event] = consumer.events(bound_ms / 1000 - time.time() + 60)
        rows_left = rows_left_after(place, DRAIN_S if len(events) == n else 0)
        cpu.stop()
    return Step(fires_per_s, seconds, start_ms, due_ms, events, cpu, rows_left)


def _record_step(rec: Recorder, k: int, step: Step) -> list[str]:
    """The step's figures; why it was not held (empty: held)."""
    if not step.events:
        raise RuntimeError(f"no event received in {RECEIVE_BOUND_S} s after the last due time")
    prefix = f"{SCENARIO}.{k}.{step.fires_per_s}"
    record_lateness(rec, prefix, f"{daemons_text(k)}, {step.fires_per_s:,} fires/s", step.events)
    fired, received = _last_two(rec, prefix)
    early = fired.early + received.early
    missing = len(step.due_ms) - len(step.events)
    first_ms, last_ms = quarter_medians_ms(step)
    why = not_held(fired.stats["p99"], early, missing, last_ms - first_ms)
    rec.add(
        f"{prefix}.fired_p99",
        fired.stats["p99"],
        f"{'not held: ' + ', '.join(why) if why else 'held'}; {len(step.events):,} of "
        f"{len(step.due_ms):,} received over {step.seconds} s, {early:,} early, median "
        f"lateness first quarter {first_ms:,.1f} ms, last {last_ms:,.1f} ms; "
        f"{step.rows_left:,} rows left at the end; {step.cpu.text()}",
    )
    fires = len(step.events)
    for group, name in STEP_GROUPS.items():
        if group in step.cpu.used:
            used_s = step.cpu.used[group]
            rec.add(
                f"{prefix}.cpu_{name}_per_1k_s",
                used_s / fires * 1000,
                f"{used_s:,.2f} CPU-s over {fires:,} fires in {step.cpu.wall_s:,.1f} s",
            )
    return why


# -- the plot ----------------------------------------------------------------------------------


def _against_k(
    counts: Sequence[int], value: Callable[[int], float | None]
) -> tuple[list[int], list[float]]:
    """(k, value(k)) for the counts that have a value, as two lists."""
    points = [(k, v) for k in counts if (v := value(k)) is not None]
    return [k for k, _ in points], [v for _, v in points]


def _figure(values: dict[str, float], k: int, measure: str) -> float | None:
    return values.get(f"{SCENARIO}.{k}.{measure}")


def _cores(values: dict[str, float], k: int, name: str) -> float | None:
    """Cores a group used over the burst (its CPU-s / the burst's seconds)."""
    used_s, burst_s = _figure(values, k, f"burst_cpu_{name}_s"), _figure(values, k, "burst_s")
    return used_s / burst_s if used_s is not None and burst_s else None


def draw(rec: Recorder, out_dir: Path) -> Path | None:
    """``instances.png``: burst tasks/s and the steady rate held against the
    number of daemons, and each group's cores during the burst; None when the
    run has no such figure."""
    values = {f.key: f.value for f in rec.figures}
    ends = (".burst_s", ".held_fires_per_s")
    counts = sorted({int(key.split(".")[1]) for key in values if key.endswith(ends)})
    if not counts:
        return None
    plt = pyplot()
    fig, (rates, cores) = plt.subplots(1, 2, figsize=(12, 4))
    for measure, label in (
        ("burst_tasks_per_s", "burst: tasks/s, due instant → end"),
        ("held_fires_per_s", "steady: highest rate held, fires/s"),
    ):
        xs, ys = _against_k(counts, functools.partial(_figure, values, measure=measure))
        rates.plot(xs, ys, marker="o", label=label)
    rates.set(xlabel="daemons", ylabel="per second", title="throughput across instances")
    rates.set_ylim(bottom=0)
    for group, name in BURST_GROUPS.items():
        xs, ys = _against_k(counts, functools.partial(_cores, values, name=name))
        style = "--" if group == MACHINE else "-"
        cores.plot(xs, ys, style, marker="o", label=group)
    cores.axhline(os.cpu_count() or 1, color="red", linestyle=":", label="the machine's cores")
    cores.set(xlabel="daemons", ylabel="cores (CPU-s / s)", title="burst: CPU by group")
    cores.set_ylim(bottom=0)
    rates.legend(fontsize="small")
    cores.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    for axes in (rates, cores):
        axes.set_xticks(counts)
        axes.grid(alpha=0.3)
    return save(plt, fig, out_dir / "instances.png")
