"""Precision while hostile input is sent, through a ``triggerhook run`` daemon.

Probe tasks fire steadily (default 200/s for 30 s, routing key ``probe.*``,
received by a consumer process) while, at the same time:

* ``POST /v1/tasks`` with a 300,000-digit ``at`` (and AMQP create commands
  with one), flat out from one client — each must be refused (400 /
  dead-lettered) at linear cost;
* 10 MB bodies to ``POST /v1/tasks/batch``, declared and chunked — 413;
* 600 tasks due at the start on routing keys nobody is bound to — retried
  unarmed, then dead-lettered (``publish_max_attempts`` 5 here, so they finish
  within the run);
* 300 slow clients trickling a request head one byte every 0.5 s.

Figures: probe lateness (x-fired - x-due and received - due) p50/p99/max,
early and missing probes, what each hostile sender was answered, dead letters
received. The target is the issue's: max lateness ≤ 50 ms, none missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from typing import Any

import aiohttp
import pika
import uvloop

from benchmarks.common import (
    CpuMeter,
    Recorder,
    amqp_url,
    consuming,
    daemon_processes,
    isolated,
    record_lateness,
)
from benchmarks.http import JSON_HEADERS, daemon, post_batches

HUGE_DIGITS = 300_000
BIG_BODY_BYTES = 10 * 1024 * 1024
UNROUTABLE = 600
SLOW_CLIENTS = 300
_HOSTILE_SETTINGS = {"publish_max_attempts": "5", "publish_retry_max_ms": "2000"}


def run(rec: Recorder, seconds: int, probes_per_s: int, quick: bool) -> None:
    scale = 10 if quick else 1  # CI: a tenth of each hostile load
    with isolated() as place:
        _route_only_probes(place.name)
        with daemon(place.settings, _HOSTILE_SETTINGS) as running:
            n = seconds * probes_per_s
            start_ms = int(time.time() * 1000) + 3000
            probes: list[dict[str, object]] = [
                {"at": (start_ms + (k * 1000) // probes_per_s) / 1000, "routing_key": "probe.x"}
                for k in range(n)
            ]
            nobody: list[dict[str, object]] = [
                {"at": start_ms / 1000, "routing_key": f"nobody.home.{k % 60}"}
                for k in range(UNROUTABLE // scale)
            ]
            uvloop.run(post_batches(running.url, probes + nobody))
            with consuming(place.name, n) as consumer:
                cpu = CpuMeter({**daemon_processes(running.pid), "load": os.getpid()})
                cpu.start()
                answers = uvloop.run(
                    _hostile(running.url, place.name, start_ms / 1000 + seconds, scale)
                )
                events = consumer.events(seconds + 60)
                cpu.stop()
            dead = _dead_letters(f"{place.name}.dead", len(nobody), 30)
    _record(rec, events, n, answers, dead, len(nobody), cpu.text())


def _route_only_probes(name: str) -> None:
    """The place's queue takes ``probe.#`` only: everything else is unroutable."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    try:
        channel = conn.channel()
        channel.queue_unbind(name, name, "#")
        channel.queue_bind(name, name, "probe.#")
    finally:
        conn.close()


def _dead_letters(queue: str, expected: int, timeout_s: float) -> int:
    """How many dead letters arrived in ``queue`` (waiting up to ``timeout_s`` for all)."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    deadline = time.monotonic() + timeout_s
    try:
        channel = conn.channel()
        while True:
            depth = channel.queue_declare(queue, passive=True).method.message_count
            if depth >= expected or time.monotonic() > deadline:
                return int(depth)
            conn.sleep(0.2)
    finally:
        conn.close()


async def _hostile(url: str, exchange: str, end_s: float, scale: int) -> Counter[str]:
    """Every hostile sender until ``end_s``; what each was answered, counted."""
    answers: Counter[str] = Counter()
    async with aiohttp.ClientSession(url) as session:
        await asyncio.gather(
            _huge_numbers(session, end_s, answers),
            _big_bodies(session, end_s, answers),
            _slow_clients(url, end_s, SLOW_CLIENTS // scale, answers),
            asyncio.to_thread(_huge_commands, f"{exchange}.commands", end_s, answers),
        )
    return answers


async def _huge_numbers(session: aiohttp.ClientSession, end_s: float, seen: Counter[str]) -> None:
    body = json.dumps({"at": "9" * HUGE_DIGITS, "routing_key": "probe.x"}).encode()
    while time.time() < end_s:
        async with session.post("/v1/tasks", data=body, headers=JSON_HEADERS) as response:
            await response.read()
            seen[f"huge at: HTTP {response.status}"] += 1


async def _big_bodies(session: aiohttp.ClientSession, end_s: float, seen: Counter[str]) -> None:
    body = b"[" + b" " * (BIG_BODY_BYTES - 2) + b"]"

    async def chunks() -> Any:
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    while time.time() < end_s:
        for kind, data in (("declared", body), ("chunked", None)):
            try:
                async with session.post(
                    "/v1/tasks/batch", data=data if data is not None else chunks(),
                    headers=JSON_HEADERS,
                ) as response:  # fmt: skip
                    await response.read()
                    seen[f"10 MB body ({kind}): HTTP {response.status}"] += 1
            except aiohttp.ClientError:  # the server may close before reading it all
                seen[f"10 MB body ({kind}): connection closed"] += 1
        await asyncio.sleep(0.2)


async def _slow_clients(url: str, end_s: float, count: int, seen: Counter[str]) -> None:
    host, port = url.removeprefix("http://").split(":")

    async def one() -> None:
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            seen["slow client: connect refused"] += 1
            return
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 1000
        try:
            for byte in head:
                if time.time() >= end_s:
                    seen["slow client: still open at the end"] += 1
                    return
                writer.write(bytes((byte,)))
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 0.5) == b"":
                        seen["slow client: closed by the server"] += 1
                        return
                except TimeoutError:
                    continue
        except OSError:
            seen["slow client: closed by the server"] += 1
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(count)))


def _huge_commands(queue: str, end_s: float, seen: Counter[str]) -> None:
    """AMQP create commands with a 300,000-digit time (they need no token here)."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url()))
    try:
        channel = conn.channel()
        body = json.dumps({"at": "9" * HUGE_DIGITS, "routing_key": "probe.x"}).encode()
        props = pika.BasicProperties(type="create", content_type="application/json")
        while time.time() < end_s:
            channel.basic_publish("", queue, body, props)
            seen["huge at: AMQP command sent"] += 1
            conn.sleep(0.05)
    finally:
        conn.close()


def _record(
    rec: Recorder,
    events: list[tuple[int, int, float]],
    expected: int,
    answers: Counter[str],
    dead: int,
    unroutable: int,
    cpu_text: str,
) -> None:
    record_lateness(rec, "hostile", "probes under hostile input", events)
    fired = rec.distributions[-2]
    answered = "; ".join(f"{what}: {count:,}" for what, count in sorted(answers.items()))
    rec.add("hostile.fired_p50", fired.stats["p50"], f"{len(events):,} probes; {cpu_text}")
    rec.add("hostile.fired_p99", fired.stats["p99"])
    rec.add("hostile.fired_max", fired.stats["max"], answered)
    rec.add("hostile.early", fired.early + rec.distributions[-1].early)
    rec.add("hostile.missing", expected - len(events))
    rec.add("hostile.dead_letters", dead, f"of {unroutable} unroutable tasks")
