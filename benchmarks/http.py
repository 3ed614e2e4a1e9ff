"""HTTP API benchmarks against a real ``triggerhook run`` daemon process.

    python -m benchmarks.http [--tasks N] [--clients C] [--quick]

Scenarios (one daemon in its own database and exchange, dropped afterwards):

* ``http_batch``   N tasks in POST /v1/tasks/batch requests of 10,000 tasks,
                   two requests in flight
* ``http_single``  N single POST /v1/tasks from C concurrent keep-alive clients
                   (default 32): requests/s and latency p50/p99
* ``http_precision`` 1,000 fires/s for S seconds (``--precision-s``, due times
                   spread at random in each second) while C clients POST
                   single tasks flat out: lateness x-fired-ms - x-due-ms

The load generator is this process (aiohttp client on uvloop); the daemon,
MariaDB and RabbitMQ run beside it on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

import aiohttp
import uvloop

from benchmarks.engine import Figure, consumer, isolated, row_count, table, wait_until
from triggerhook import Settings
from triggerhook.metrics.counters import quantile

BATCH = 10_000


# Extra daemon settings for every scenario (e.g. --metrics-url), as env variables.
EXTRA_ENV: dict[str, str] = {}


@contextmanager
def daemon(settings: Settings, port: int) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERHOOK_")}
    env.update(EXTRA_ENV)
    env.update(
        TRIGGERHOOK_DATABASE_URL=settings.database_url,
        TRIGGERHOOK_EXCHANGE=settings.exchange,
        TRIGGERHOOK_INSTANCE_ID="bench-http",
        TRIGGERHOOK_HTTP_PORT=str(port),
        TRIGGERHOOK_COMMAND_QUEUE=f"{settings.exchange}.commands",
        TRIGGERHOOK_LOG_LEVEL="WARNING",
    )
    proc = subprocess.Popen([sys.executable, "-m", "triggerhook", "run"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), timeout_s=30, step_s=0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _ready(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


async def _batches(url: str, n: int, far_s: float) -> float:
    bodies = [
        json.dumps(
            {"tasks": [{"id": f"b{i}", "at": far_s} for i in range(s, min(n, s + BATCH))]}
        ).encode()
        for s in range(0, n, BATCH)
    ]
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(url) as session:
        queue = list(bodies)
        started = time.perf_counter()

        async def worker() -> None:
            while queue:
                body = queue.pop()
                async with session.post("/v1/tasks/batch", data=body, headers=headers) as r:
                    assert r.status == 201, await r.text()

        await asyncio.gather(worker(), worker())
        return time.perf_counter() - started


async def _singles(url: str, n: int, clients: int, far_s: float) -> tuple[float, list[float]]:
    latencies: list[float] = []
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector) as session:
        next_id = iter(range(n))
        started = time.perf_counter()

        async def client() -> None:
            for i in next_id:
                body = json.dumps({"id": f"s{i}", "at": far_s}).encode()
                sent = time.perf_counter()
                async with session.post("/v1/tasks", data=body, headers=headers) as r:
                    assert r.status == 201, await r.text()
                    await r.read()
                latencies.append(time.perf_counter() - sent)

        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - started, latencies


async def _load_until(url: str, clients: int, stop_at: float, far_s: float) -> int:
    """Single POSTs from ``clients`` clients until ``stop_at`` (perf_counter)."""
    sent = 0
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector) as session:

        async def client(k: int) -> None:
            nonlocal sent
            n = 0
            while time.perf_counter() < stop_at:
                body = json.dumps({"id": f"load{k}-{n}", "at": far_s}).encode()
                async with session.post("/v1/tasks", data=body, headers=headers) as r:
                    assert r.status == 201, await r.text()
                n += 1
                sent += 1

        await asyncio.gather(*(client(k) for k in range(clients)))
    return sent


def bench_precision(seconds: int, clients: int, rate: int = 1000) -> list[Figure]:
    n = seconds * rate
    with isolated(Settings()) as settings, daemon(settings, 18_182) as url:
        start_s = time.time() + 5
        rng = random.Random(7)
        tasks = [
            {"at": start_s + i // rate + rng.randrange(1000) / 1000, "routing_key": "p"}
            for i in range(n)
        ]
        uvloop.run(_post_batches(url, tasks))
        with consumer(settings.exchange, n) as events:
            stop_at = time.perf_counter() + (start_s - time.time()) + seconds
            sent = uvloop.run(_load_until(url, clients, stop_at, time.time() + 86_400))
            rows = events(60)
    fired = sorted(float(r[1] - r[0]) for r in rows)
    early = sum(1 for r in rows if r[1] < r[0])
    p50, p99 = quantile(fired, 0.5), quantile(fired, 0.99)
    detail = (
        f"{len(rows)} fires over {seconds} s while {clients} clients posted "
        f"{sent / seconds:,.0f} req/s; x-fired - x-due: p50 {p50:.0f} p90 "
        f"{quantile(fired, 0.9):.0f} p99 {p99:.0f} p99.9 {quantile(fired, 0.999):.0f} "
        f"max {fired[-1]:.0f} ms; early {early}"
    )
    return [
        Figure("lateness p99 under HTTP load", p99, "ms", "<= 10", p99 <= 10, detail),
        Figure("early events under HTTP load", early, "count", "0", early == 0),
    ]


async def _post_batches(url: str, tasks: list[dict[str, object]]) -> None:
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(url) as session:
        for start in range(0, len(tasks), BATCH):
            body = json.dumps({"tasks": tasks[start : start + BATCH]}).encode()
            async with session.post("/v1/tasks/batch", data=body, headers=headers) as r:
                assert r.status == 201, await r.text()


def bench(n: int, clients: int, quick: bool) -> list[Figure]:
    figures = []
    far_s = time.time() + 86_400
    with isolated(Settings()) as settings, daemon(settings, 18_181) as url:
        batch_s = uvloop.run(_batches(url, n, far_s))
        assert row_count(settings) == n
        rate = n / batch_s
        figures.append(
            Figure("http_batch", rate, "tasks/s", ">= 30,000", None if quick else rate >= 30_000)
        )
        single_s, latencies = uvloop.run(_singles(url, n, clients, far_s))
        assert row_count(settings) == 2 * n
        rate = n / single_s
        latencies.sort()
        p99_ms = quantile(latencies, 0.99) * 1000
        p50_ms = quantile(latencies, 0.50) * 1000
        met = None if quick else rate >= 3000 and p99_ms <= 50
        detail = f"{clients} clients; latency p50 {p50_ms:.1f} ms, p99 {p99_ms:.1f} ms"
        figures.append(Figure("http_single", rate, "req/s", ">= 3,000, p99 <= 50 ms", met, detail))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--precision-s", type=int, default=60)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["throughput", "precision"])
    parser.add_argument(
        "--metrics-url", help="the daemon writes metrics to this InfluxDB (database 'bench')"
    )
    args = parser.parse_args()
    if args.metrics_url:
        EXTRA_ENV.update(
            TRIGGERHOOK_METRICS_URL=args.metrics_url, TRIGGERHOOK_METRICS_DATABASE="bench"
        )
    n = 2_000 if args.quick else args.tasks
    figures = []
    if args.only != "precision":
        figures += bench(n, args.clients, args.quick)
    if args.only != "throughput":
        figures += bench_precision(3 if args.quick else args.precision_s, args.clients)
    print(table(figures))
    print(json.dumps([asdict(f) for f in figures]))


if __name__ == "__main__":
    main()
