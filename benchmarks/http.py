"""HTTP scenarios against a real ``triggerhook run`` daemon process.

* ``create``  N tasks in ``POST /v1/tasks/batch`` requests of 10,000 tasks, two
              in flight; then N single ``POST /v1/tasks`` from C concurrent
              keep-alive clients (default 32): requests/s and latency
* ``delete``  N single ``DELETE /v1/tasks/{id}`` from C clients

The load generator is this process (aiohttp client on uvloop); the daemon,
MariaDB and RabbitMQ run beside it on the same machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import aiohttp
import uvloop

from benchmarks.common import (
    FAR_FUTURE_MS,
    SEQUENTIAL,
    Recorder,
    isolated,
    rate,
    record_sequential,
    summary,
    wait_until,
)
from triggerhook import Settings

BATCH = 10_000
JSON_HEADERS = {"Content-Type": "application/json"}


# Below Linux's ephemeral range (32768-60999 by default): no outgoing connection
# (the daemon's own, to the database and the broker, made before its API
# process binds) can take the port between the pick and the bind.
_PORTS = range(20000, 32768)


def free_port() -> int:
    rng = random.Random()
    for _ in range(200):
        port = rng.choice(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS.start}-{_PORTS.stop - 1}")


@dataclass(frozen=True)
class Daemon:
    url: str
    pid: int


def spawn(
    settings: Settings, extra: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """A ``triggerhook run`` process on the scenario's database and exchange and
    its API's URL, once ``/readyz`` answers 200 (the caller stops it);
    ``extra``: more settings (name -> value)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIGGERHOOK_")}
    port = free_port()
    env.update(
        TRIGGERHOOK_DATABASE_URL=settings.database_url,
        TRIGGERHOOK_AMQP_URL=settings.amqp_url,
        TRIGGERHOOK_EXCHANGE=settings.exchange,
        TRIGGERHOOK_INSTANCE_ID="bench-http",
        TRIGGERHOOK_HTTP_PORT=str(port),
        TRIGGERHOOK_COMMAND_QUEUE=f"{settings.exchange}.commands",
        TRIGGERHOOK_DEAD_LETTER_QUEUE=settings.dead_letter_queue,
        TRIGGERHOOK_LOG_LEVEL="WARNING",
    )
    env.update({f"TRIGGERHOOK_{name.upper()}": value for name, value in (extra or {}).items()})
    proc = subprocess.Popen([sys.executable, "-m", "triggerhook", "run"], env=env)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited with status {proc.returncode} before ready")
        return answers_ready(url)

    try:
        wait_until(ready, 60, "daemon ready", step_s=0.1)
    except BaseException:
        stop(proc)
        raise
    return proc, url


@contextmanager
def daemon(settings: Settings, extra: Mapping[str, str] | None = None) -> Iterator[Daemon]:
    """:func:`spawn` for the ``with`` block; it must exit with status 0."""
    proc, url = spawn(settings, extra)
    try:
        yield Daemon(url, proc.pid)
    finally:
        code = stop(proc)
        delete_command_queues(settings.exchange)
    if code != 0:  # only reached when the scenario itself went through
        raise RuntimeError(f"the daemon exited with status {code}")


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.terminate()
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def answers_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def delete_command_queues(exchange: str) -> None:
    import pika

    from benchmarks.common import amqp_url

    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    try:
        channel = conn.channel()
        channel.queue_delete(f"{exchange}.commands")
        channel.queue_delete(f"{exchange}.commands.dead")
    finally:
        conn.close()


# -- load generators -------------------------------------------------------------------


async def post_batches(
    url: str,
    tasks: list[dict[str, object]],
    in_flight: int = 2,
    headers: Mapping[str, str] = JSON_HEADERS,
) -> float:
    """POST ``tasks`` in batches of ``BATCH`` (with ``headers``); wall seconds."""
    bodies = [
        json.dumps({"tasks": tasks[s : s + BATCH]}).encode() for s in range(0, len(tasks), BATCH)
    ]
    bodies.reverse()
    async with aiohttp.ClientSession(url) as session:
        started = time.perf_counter()

        async def worker() -> None:
            while bodies:
                body = bodies.pop()
                async with session.post("/v1/tasks/batch", data=body, headers=headers) as r:
                    if r.status != 201:
                        raise RuntimeError(f"batch answered {r.status}: {await r.text()}")

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return time.perf_counter() - started


@dataclass(frozen=True)
class Calls:
    """N requests of one kind: request ``i`` is ``method path(i)`` with ``body(i)``."""

    method: str
    path: Callable[[int], str]
    body: Callable[[int], bytes | None]
    expect: int


async def requests(url: str, n: int, clients: int, calls: Calls) -> tuple[float, list[float]]:
    """``n`` requests from ``clients`` concurrent keep-alive clients: wall seconds
    and each request's latency (ms)."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector) as session:
        next_index = iter(range(n))
        started = time.perf_counter()

        async def client() -> None:
            for i in next_index:
                body = calls.body(i)
                headers = JSON_HEADERS if body is not None else None
                sent = time.perf_counter()
                async with session.request(
                    calls.method, calls.path(i), data=body, headers=headers
                ) as r:
                    await r.read()
                    if r.status != calls.expect:
                        raise RuntimeError(f"{calls.method} answered {r.status}")
                latencies.append((time.perf_counter() - sent) * 1000)

        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - started, latencies


def _far_s() -> float:
    return (time.time() * 1000 + FAR_FUTURE_MS) / 1000


def _latency_detail(clients: int, latencies: list[float]) -> str:
    stats = summary(sorted(latencies))
    return (
        f"{clients} clients; latency p50 {stats['p50']:.1f} ms, p90 {stats['p90']:.1f} ms, "
        f"p99 {stats['p99']:.1f} ms, max {stats['max']:.1f} ms"
    )


def create(rec: Recorder, n: int, clients: int) -> None:
    with isolated() as place, daemon(place.settings) as running:
        url = running.url
        far_s = int(_far_s())
        tasks: list[dict[str, object]] = [{"id": f"b{i}", "at": far_s} for i in range(n)]
        rec.add("create.http_batch", rate(n, uvloop.run(post_batches(url, tasks))))
        if place.rows() != n:
            raise RuntimeError(f"{place.rows()} rows after the batches, expected {n}")
        calls = Calls(
            "POST",
            lambda _i: "/v1/tasks",
            lambda i: json.dumps({"id": f"s{i}", "at": far_s}).encode(),
            201,
        )
        elapsed_s, latencies = uvloop.run(requests(url, n, clients, calls))
        detail = _latency_detail(clients, latencies)
        rec.add("create.http_single", rate(n, elapsed_s), detail)
        rec.add("create.http_single_p99", summary(sorted(latencies))["p99"])
        if place.rows() != 2 * n:
            raise RuntimeError(f"{place.rows()} rows after the single POSTs, expected {2 * n}")
        one = min(n, SEQUENTIAL)
        calls = Calls(
            "POST",
            lambda _i: "/v1/tasks",
            lambda i: json.dumps({"id": f"q{i}", "at": far_s}).encode(),
            201,
        )
        _sequential(rec, "create.http_sequential", url, one, calls)
        if place.rows() != 2 * n + one:
            raise RuntimeError(f"{place.rows()} rows after the sequential POSTs")


def delete(rec: Recorder, n: int, clients: int) -> None:
    with isolated() as place, daemon(place.settings) as running:
        url = running.url
        far_s = int(_far_s())
        one = min(n, SEQUENTIAL)
        tasks: list[dict[str, object]] = [{"id": f"d{i}", "at": far_s} for i in range(n)]
        tasks += [{"id": f"e{i}", "at": far_s} for i in range(one)]
        uvloop.run(post_batches(url, tasks))
        calls = Calls("DELETE", lambda i: f"/v1/tasks/d{i}", lambda _i: None, 204)
        elapsed_s, latencies = uvloop.run(requests(url, n, clients, calls))
        detail = _latency_detail(clients, latencies)
        rec.add("delete.http_single", rate(n, elapsed_s), detail)
        rec.add("delete.http_single_p99", summary(sorted(latencies))["p99"])
        calls = Calls("DELETE", lambda i: f"/v1/tasks/e{i}", lambda _i: None, 204)
        _sequential(rec, "delete.http_sequential", url, one, calls)
        if place.rows() != 0:
            raise RuntimeError(f"{place.rows()} rows left after the DELETEs")


def _sequential(rec: Recorder, key: str, url: str, n: int, calls: Calls) -> None:
    """``n`` requests from one client, one after another: their latency."""
    elapsed_s, latencies = uvloop.run(requests(url, n, 1, calls))
    record_sequential(rec, key, latencies, elapsed_s, "requests from one keep-alive client")
