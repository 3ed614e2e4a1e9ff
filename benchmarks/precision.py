"""Precision under steady load, through a ``triggerhook run`` daemon.

R fires/s (default 1,000) for S seconds (default 60), due times spread at
random within each second, posted ahead through the batch endpoint; a consumer
process receives every event. Three times, each in its own database and
daemon: with the daemon otherwise idle, and while C clients (default 32) POST
single far-future tasks flat out, to the daemon as it runs by default (an API
process beside the firing one) and, as the peer of the same run, to one with
everything in one process (``api_processes = 0``). Per task: x-fired-ms -
x-due-ms (the engine's lateness) and received - due (what a consumer sees);
events early by either.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field

import aiohttp
import uvloop

from benchmarks.common import (
    FAR_FUTURE_MS,
    CpuMeter,
    Event,
    Recorder,
    consuming,
    daemon_processes,
    isolated,
    record_lateness,
)
from benchmarks.http import JSON_HEADERS, daemon, post_batches


@dataclass(frozen=True)
class Run:
    """One of the runs: its figures' prefix, its label, with HTTP load or not,
    the daemon's extra settings, and fields every task is created with."""

    prefix: str
    label: str
    load: bool
    extra: dict[str, str]
    task_fields: dict[str, object] = field(default_factory=dict)


_RUNS = (
    Run("precision.idle", "steady load", False, {}),
    Run("precision.http_load", "steady load + HTTP create load", True, {}),
    Run(
        "precision.http_load_one",
        "steady load + HTTP create load, all in one process",
        True,
        {"api_processes": "0"},
    ),
)


def run(rec: Recorder, seconds: int, fires_per_s: int, clients: int) -> None:
    for how in _RUNS:
        with rec.part(how.label):
            run_once(rec, how, seconds, fires_per_s, clients)


def due_times(start_ms: int, seconds: int, fires_per_s: int) -> list[int]:
    rng = random.Random(7)
    return [
        start_ms + second * 1000 + rng.randrange(1000)
        for second in range(seconds)
        for _ in range(fires_per_s)
    ]


def run_once(rec: Recorder, how: Run, seconds: int, fires_per_s: int, clients: int) -> None:
    n = seconds * fires_per_s
    with isolated() as place, daemon(place.settings, how.extra) as running:
        # Far enough ahead that the batches are in before the first is due.
        start_ms = int(time.time() * 1000) + 3000 + n // 20
        tasks: list[dict[str, object]] = [
            {"at": due_ms / 1000, "routing_key": "p", **how.task_fields}
            for due_ms in due_times(start_ms, seconds, fires_per_s)
        ]
        uvloop.run(post_batches(running.url, tasks))
        with consuming(place.name, n) as consumer:
            cpu = CpuMeter(
                {
                    **daemon_processes(running.pid),
                    "load generator": os.getpid(),
                    "consumer": consumer.pid,
                }
            )
            cpu.start()
            load_rate = None
            if how.load:
                load_started_s = time.time()
                sent = uvloop.run(_load_until(running.url, clients, start_ms / 1000 + seconds))
                load_rate = sent / (time.time() - load_started_s)
            events = consumer.events(seconds + 60 + (start_ms / 1000 - time.time()))
            cpu.stop()
    _record(rec, how, events, seconds, clients, load_rate, cpu)


def _record(
    rec: Recorder,
    how: Run,
    events: list[Event],
    seconds: int,
    clients: int,
    load_rate: float | None,
    cpu: CpuMeter,
) -> None:
    """``load_rate``: requests/s of the HTTP load, None when there was none."""
    prefix = how.prefix
    record_lateness(rec, prefix, how.label, events)
    fired, received = rec.distributions[-2], rec.distributions[-1]
    detail = f"{len(events):,} fires over {seconds} s"
    if load_rate is not None:
        rec.add(
            f"{prefix}.requests",
            load_rate,
            f"{clients} clients posting single far-future tasks throughout",
        )
        detail += f" while {clients} clients posted {load_rate:,.0f} req/s"
    detail += f"; {cpu.text()}"
    rec.add(f"{prefix}.fired_p50", fired.stats["p50"], detail)
    rec.add(f"{prefix}.fired_p99", fired.stats["p99"])
    rec.add(f"{prefix}.fired_max", fired.stats["max"])
    fires = max(1, len(events))
    for who in ("MariaDB", "daemon"):
        if who in cpu.used:
            rec.add(
                f"{prefix}.cpu_{who.lower()}_us",
                cpu.used[who] / fires * 1e6,
                f"{who} CPU per fired task, µs ({cpu.used[who]:.1f} CPU-s over {fires:,} fires)",
            )
    if "MariaDB" in cpu.used:
        both_s = cpu.used["MariaDB"] + cpu.used["daemon"]
        rec.add(f"{prefix}.cpu_both_us", both_s / fires * 1e6, f"{both_s:.1f} CPU-s")
    rec.add(
        f"{prefix}.early",
        fired.early + received.early,
        f"{fired.early} with x-fired-ms < x-due-ms, {received.early} received before due",
    )


async def _load_until(url: str, clients: int, end_s: float) -> int:
    """Single POSTs from ``clients`` keep-alive clients until ``end_s`` (epoch);
    how many were answered 201."""
    far_s = int(time.time() + FAR_FUTURE_MS / 1000)
    counts = [0] * clients
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector) as session:

        async def client(k: int) -> None:
            while time.time() < end_s:
                body = json.dumps({"id": f"load{k}-{counts[k]}", "at": far_s}).encode()
                async with session.post("/v1/tasks", data=body, headers=JSON_HEADERS) as r:
                    await r.read()
                    if r.status != 201:
                        raise RuntimeError(f"POST answered {r.status}")
                counts[k] += 1

        await asyncio.gather(*(client(k) for k in range(clients)))
    return sum(counts)
