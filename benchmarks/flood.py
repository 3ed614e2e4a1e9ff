"""One namespace floods its create quota (issue 33), through a ``triggerhook
run`` daemon with a namespaces file: does another namespace's firing move?

Namespace ``flood`` may create ``create_rate`` tasks a second; ``quiet`` has
no quota. Tasks of ``quiet`` fire a steady 1,000/s (made before they are due,
through ``api_token``) while ``quiet`` keeps creating (far-future tasks, one
every 10 ms). Twice, each in its own database and daemon: alone, then with
``flood``'s clients sending single creates as fast as they are answered (at
least 10 times its rate: the figure says how many times it was).

Figures: the steady events' lateness p99 alone and beside the flood
(x-fired-ms - x-due-ms) and the difference; the flood's attempts a second
against its rate; the creates it was let through a second (at most the rate,
and the burst once); ``quiet``'s own creates refused during the flood (none);
events early or missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import uvloop

from benchmarks.common import Event, Recorder, consuming, isolated, record_lateness
from benchmarks.http import JSON_HEADERS, daemon, post_batches
from benchmarks.precision import due_times

STEADY = "quiet.steady"
ADMIN, QUIET, FLOOD = "bench-admin", "th_bench_quiet", "th_bench_flood"
FAR_MS = 30 * 24 * 3600 * 1000  # the creates during the run: due long after it
QUIET_EVERY_S = 0.01


@dataclass(frozen=True)
class Sizes:
    steady_s: int  # seconds of the steady key
    create_rate: int  # flood's create_rate, a second (burst: one second's)
    flood_clients: int  # its concurrent senders
    steady_per_s: int = 1000


FULL = Sizes(steady_s=25, create_rate=100, flood_clients=8)
QUICK = Sizes(steady_s=3, create_rate=100, flood_clients=4)


@dataclass
class Outcome:
    steady: list[Event]
    flood: Counter[int]  # its answers' statuses
    flood_s: float  # how long it was sent for
    quiet: Counter[int]


def run(rec: Recorder, sizes: Sizes) -> None:
    runs: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="th-flood-") as folder:
        path = Path(folder) / "namespaces.toml"
        path.write_text(_namespaces(sizes.create_rate))
        with rec.part("the quiet namespace alone"):
            runs["alone"] = _once(sizes, path, flood=False)
        with rec.part("the quiet namespace beside a flood"):
            runs["beside"] = _once(sizes, path, flood=True)
    with rec.part("the figures"):
        _record(rec, sizes, runs["alone"], runs["beside"])


def _namespaces(create_rate: int) -> str:
    def sha(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    return f"""
[[namespace]]
name = "quiet"
id_prefix = "quiet-"
routing_keys = ["quiet.#"]

[[namespace]]
name = "flood"
id_prefix = "flood-"
routing_keys = ["flood.#"]
create_rate = "{create_rate}/s"

[[token]]
name = "quiet-api"
namespace = "quiet"
scopes = ["write"]
sha256 = "{sha(QUIET)}"

[[token]]
name = "flood-api"
namespace = "flood"
scopes = ["write"]
sha256 = "{sha(FLOOD)}"
"""


def _once(sizes: Sizes, namespaces: Path, flood: bool) -> Outcome:
    extra = {"api_token": ADMIN, "namespaces_file": str(namespaces)}
    n = sizes.steady_s * sizes.steady_per_s
    with isolated() as place, daemon(place.settings, extra) as running:
        start_ms = int(time.time() * 1000) + 5000 + n // 20
        steady: list[dict[str, object]] = [
            {"id": f"quiet-{k}", "at_ms": due_ms, "routing_key": STEADY}
            for k, due_ms in enumerate(due_times(start_ms, sizes.steady_s, sizes.steady_per_s))
        ]
        uvloop.run(post_batches(running.url, steady, headers=_bearer(ADMIN)))
        with consuming(place.name, n) as consumer:
            end_s = start_ms / 1000 + sizes.steady_s
            outcome = uvloop.run(_load(running.url, start_ms / 1000, end_s, sizes, flood))
            outcome.steady = consumer.events(end_s - time.time() + 60)
    return outcome


def _bearer(token: str) -> dict[str, str]:
    return {**JSON_HEADERS, "Authorization": f"Bearer {token}"}


async def _load(url: str, start_s: float, end_s: float, sizes: Sizes, flood: bool) -> Outcome:
    """``quiet``'s creates, and ``flood``'s when asked, from ``start_s`` to ``end_s``."""
    await asyncio.sleep(max(0.0, start_s - time.time()))
    quiet: Counter[int] = Counter()
    floods: Counter[int] = Counter()
    async with aiohttp.ClientSession(url) as session:
        senders = [_creates(session, QUIET, "quiet.created", end_s, quiet, QUIET_EVERY_S)]
        if flood:
            senders += [
                _creates(session, FLOOD, "flood.created", end_s, floods, 0.0)
                for _ in range(sizes.flood_clients)
            ]
        begun = time.time()
        await asyncio.gather(*senders)
        took_s = time.time() - begun
    return Outcome([], floods, took_s, quiet)


async def _creates(
    session: aiohttp.ClientSession,
    token: str,
    key: str,
    end_s: float,
    seen: Counter[int],
    every_s: float,
) -> None:
    headers = _bearer(token)
    while time.time() < end_s:
        body = json.dumps({"at_ms": int(time.time() * 1000) + FAR_MS, "routing_key": key})
        async with session.post("/v1/tasks", data=body, headers=headers) as response:
            await response.read()
            seen[response.status] += 1
        if every_s:
            await asyncio.sleep(every_s)


def _record(rec: Recorder, sizes: Sizes, alone: Outcome, beside: Outcome) -> None:
    n = sizes.steady_s * sizes.steady_per_s
    record_lateness(rec, "flood.alone", "steady 1,000/s alone", alone.steady)
    alone_fired = rec.distributions[-2]
    record_lateness(rec, "flood.beside", "steady 1,000/s beside the flood", beside.steady)
    beside_fired = rec.distributions[-2]
    alone_p99, beside_p99 = alone_fired.stats["p99"], beside_fired.stats["p99"]
    rec.add("flood.alone_p99", alone_p99, f"{len(alone.steady):,} events")
    rec.add("flood.beside_p99", beside_p99, f"{len(beside.steady):,} events")
    rec.add("flood.p99_added_ms", beside_p99 - alone_p99)
    attempts = sum(beside.flood.values())
    admitted = beside.flood[201]
    statuses = ", ".join(f"{status}: {count:,}" for status, count in sorted(beside.flood.items()))
    rec.add(
        "flood.attempt_ratio",
        attempts / beside.flood_s / sizes.create_rate,
        f"{attempts:,} creates in {beside.flood_s:.1f} s from {sizes.flood_clients} clients"
        f" against create_rate {sizes.create_rate}/s ({statuses})",
    )
    # The bucket starts full: one burst (a second's) more than the rate allows.
    allowed = sizes.create_rate * (beside.flood_s + 1)
    rec.add(
        "flood.admitted_ratio",
        admitted / allowed,
        f"{admitted:,} let through; the rate and one burst allow {allowed:,.0f}",
    )
    refused = sum(c for status, c in beside.quiet.items() if status != 201)
    rec.add(
        "flood.quiet_refused",
        refused,
        f"of quiet's {sum(beside.quiet.values()):,} creates during the flood",
    )
    early = sum(1 for o in (alone, beside) for e in o.steady if e[1] < e[0])
    rec.add("flood.early", early, "events with x-fired-ms < x-due-ms, both runs")
    rec.add("flood.missing", 2 * n - len(alone.steady) - len(beside.steady), "both runs")
