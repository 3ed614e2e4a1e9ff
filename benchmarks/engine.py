"""Engine benchmarks against the real local MariaDB and RabbitMQ.

    python -m benchmarks.engine [--tasks N] [--precision-s S] [--quick] [--out DIR]

Scenarios (each in its own database and exchange, dropped afterwards):

* ``schedule_many``  N tasks in one call (one transaction)
* ``schedule_x8``    N single ``schedule`` calls from 8 threads (group commit)
* ``cancel_x8``      N single ``cancel`` calls from 8 threads
* ``burst``          N tasks due at one instant: due instant -> last row deleted
                     (preload, arm, fire, publish with confirms, delete), with a
                     consumer process draining the queue
* ``precision``      1,000 fires/s for S seconds, due times spread at random in
                     each second; lateness = x-fired-ms - x-due-ms and
                     received - due, measured by a consumer in another process

Writes ``results-<timestamp>.json`` and prints a Markdown table. ``--quick``
runs small sizes for CI and enforces no targets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pika
import pymysql

from triggerhook import Settings, TaskSpec, TriggerHook, build
from triggerhook.clock import SystemClock
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.metrics.counters import quantile
from triggerhook.store.mysql import MySQLStore, init_schema

SERVER_URL = "mysql+pymysql://root:@127.0.0.1:3306"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    target: str = ""
    met: bool | None = None
    detail: str = ""


@contextmanager
def isolated(settings: Settings) -> Iterator[Settings]:
    """A fresh database and exchange (with a queue bound to everything)."""
    name = f"th_bench_{secrets.token_hex(4)}"
    isolated_settings = replace(
        settings, database_url=f"{SERVER_URL}/{name}", exchange=name, instance_id="bench"
    )
    init_schema(isolated_settings.database_url)
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = conn.channel()
    channel.exchange_declare(name, "topic", durable=True)
    channel.queue_declare(name, durable=True)
    channel.queue_bind(name, name, "#")
    try:
        yield isolated_settings
    finally:
        channel.queue_delete(name)
        channel.exchange_delete(name)
        conn.close()
        db = pymysql.connect(host="127.0.0.1", user="root")
        db.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        db.close()


def row_count(settings: Settings) -> int:
    db = pymysql.connect(host="127.0.0.1", user="root", database=settings.exchange, autocommit=True)
    try:
        with db.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM th_tasks")
            row = cur.fetchone()
            return int(row[0]) if row else 0
    finally:
        db.close()


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    tick = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached in time")
        tick.wait(step_s)


def in_threads(count: int, work: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


# -- consumer process ---------------------------------------------------------


def _consume(queue: str, expected: int, out: Connection) -> None:
    """Child process: receive ``expected`` events; send (due, fired, received) rows."""
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=2000)
    rows: list[tuple[int, int, float]] = []
    out.send("ready")

    def on_message(ch: Any, method: Any, props: Any, _body: bytes) -> None:
        received = time.time() * 1000
        headers = props.headers
        rows.append((headers["x-due-ms"], headers["x-fired-ms"], received))
        if len(rows) % 500 == 0 or len(rows) >= expected:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if len(rows) >= expected:
            ch.stop_consuming()

    channel.basic_consume(queue, on_message)
    channel.start_consuming()
    conn.close()
    out.send(rows)


@contextmanager
def consumer(queue: str, expected: int) -> Iterator[Callable[[float], list[Any]]]:
    if expected == 0:  # no consumer wanted
        yield lambda _timeout_s: []
        return
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_consume, args=(queue, expected, child))
    proc.start()
    if parent.recv() != "ready":
        raise RuntimeError("consumer did not start")

    def result(timeout_s: float) -> list[Any]:
        if not parent.poll(timeout_s):
            raise TimeoutError("consumer did not receive every event")
        rows: list[Any] = parent.recv()
        return rows

    try:
        yield result
    finally:
        proc.terminate()
        proc.join()


# -- scenarios ----------------------------------------------------------------


def bench_create_and_cancel(base: Settings, n: int) -> list[Figure]:
    figures = []
    with isolated(base) as settings:
        hook = build(settings)
        far = int(time.time() * 1000) + 86_400_000
        specs = [TaskSpec(id=f"m{i}", at_ms=far + i) for i in range(n)]
        started = time.perf_counter()
        hook.schedule_many(specs)
        rate = n / (time.perf_counter() - started)
        figures.append(Figure("schedule_many", rate, "tasks/s", ">= 50,000", rate >= 50_000))
        hook.start()  # single calls go through group commit, as in the daemon

        def cancel(k: int) -> None:
            for i in range(k, n, 8):
                hook.cancel(f"m{i}")

        rate = n / in_threads(8, cancel)
        figures.append(Figure("cancel, 8 threads", rate, "tasks/s", ">= 7,050 (TH)", rate >= 7050))

        def schedule(k: int) -> None:
            for i in range(k, n, 8):
                hook.schedule(f"s{i}", at_ms=far + i)

        rate = n / in_threads(8, schedule)
        figures.append(Figure("schedule, 8 threads", rate, "tasks/s", ">= 10,000", rate >= 10_000))
        hook.stop()
        hook.close()
    return figures


def bench_burst(base: Settings, n: int) -> list[Figure]:
    """Twice: with the queue filling (no consumer running), then with a consumer
    process draining it at the same time on the same machine."""
    figures = []
    for with_consumer in (False, True):
        with isolated(base) as settings:
            hook = build(settings)
            due_ms = int(time.time() * 1000) + 6000  # claimed (preloaded) before due
            hook.schedule_many([TaskSpec(at_ms=due_ms) for _ in range(n)])
            with consumer(settings.exchange, n if with_consumer else 0) as events:
                hook.start()
                wait_until(lambda: row_count(settings) == 0, timeout_s=600, step_s=0.02)
                done_ms = time.time() * 1000
                received = len(events(120)) if with_consumer else 0
            hook.stop()
            hook.close()
        elapsed_s = (done_ms - due_ms) / 1000
        rate = n / elapsed_s
        name = "burst, consumer running" if with_consumer else "burst, queue filling"
        detail = f"{n} due at once; every row deleted {elapsed_s:.2f} s after the due instant"
        if with_consumer:
            detail += f"; consumer received {received}"
        figures.append(Figure(name, rate, "tasks/s", ">= 20,000", rate >= 20_000, detail))
    return figures


def _create_load(hook: TriggerHook, stop: threading.Event, threads: int = 4) -> list[int]:
    """Threads scheduling far-future tasks as fast as they can until ``stop``."""
    counts = [0] * threads
    far = int(time.time() * 1000) + 86_400_000

    def work(k: int) -> None:
        while not stop.is_set():
            hook.schedule(at_ms=far)
            counts[k] += 1

    for k in range(threads):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    return counts


def _precision_run(base: Settings, seconds: int, rate: int, load: bool) -> tuple[list[Any], int]:
    n = seconds * rate
    with isolated(base) as settings:
        hook = build(settings)
        start_ms = int(time.time() * 1000) + 3000
        rng = random.Random(7)
        specs = [
            TaskSpec(at_ms=start_ms + (i // rate) * 1000 + rng.randrange(1000)) for i in range(n)
        ]
        hook.schedule_many(specs)
        stop = threading.Event()
        with consumer(settings.exchange, n) as events:
            hook.start()
            counts = _create_load(hook, stop) if load else [0]
            rows = events(seconds + 60)
            stop.set()
        hook.stop()
        hook.close()
    return rows, sum(counts)


def bench_precision(base: Settings, seconds: int, rate: int = 1000) -> list[Figure]:
    """Steady firing; then the same while 4 threads schedule tasks flat out."""
    figures = []
    for load in (False, True):
        rows, created = _precision_run(base, seconds, rate, load)
        fired = sorted(float(r[1] - r[0]) for r in rows)
        received = sorted(r[2] - r[0] for r in rows)
        early = sum(1 for r in rows if r[1] < r[0])
        p50, p99 = quantile(fired, 0.5), quantile(fired, 0.99)
        label = f", under create load ({created / seconds:,.0f} schedule/s)" if load else ""
        detail = (
            f"{len(rows)} tasks over {seconds} s{label}; x-fired - x-due: p50 {p50:.0f} "
            f"p90 {quantile(fired, 0.9):.0f} p99 {p99:.0f} p99.9 {quantile(fired, 0.999):.0f} "
            f"max {fired[-1]:.0f} ms; received - due: p50 {quantile(received, 0.5):.1f} "
            f"p99 {quantile(received, 0.99):.1f} max {received[-1]:.1f} ms; early {early}"
        )
        suffix = " under create load" if load else ""
        figures += [
            Figure(f"lateness p50{suffix}", p50, "ms", "<= 1", p50 <= 1, detail),
            Figure(f"lateness p99{suffix}", p99, "ms", "<= 5", p99 <= 5),
            Figure(f"early events{suffix}", early, "count", "0", early == 0),
        ]
    return figures


class _DrainingPublisher:
    """Stands in for the broker: takes every fired task off the send buffer at
    once (Trigger Hook's "sending" test consumes in-process, no broker)."""

    def __init__(self, buffer: SendBuffer) -> None:
        self._buffer = buffer
        self.taken = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        pass

    def wake(self) -> None:
        with self._lock:
            self.taken += len(self._buffer.take(len(self._buffer)))

    def finish(self, deadline_s: float) -> None:
        pass

    def join(self, timeout_s: float | None = None) -> bool:
        return True

    def is_alive(self) -> bool:
        return True

    def unconfirmed(self) -> int:
        return 0

    def is_connected(self) -> bool:
        return True

    def counters(self) -> dict[str, int]:
        return {}

    def take_lateness(self) -> list[float]:
        return []


def bench_sending_and_confirm(base: Settings, n: int) -> list[Figure]:
    """Trigger Hook's two in-process lines: overdue rows preloaded (claimed) ->
    armed -> fired into the send buffer, taken by an in-process consumer; then
    the same ids confirmed -> rows deleted in batches."""
    with isolated(base) as settings:
        hook = build(settings)
        hook.schedule_many([TaskSpec(id=f"s{i}", at_ms=1_000_000) for i in range(n)])
        publishers: list[_DrainingPublisher] = []

        def factory(buffer: SendBuffer, *_args: Any) -> _DrainingPublisher:
            publishers.append(_DrainingPublisher(buffer))
            return publishers[0]

        # Nothing is confirmed while sending, so memory must hold every task.
        roomy = replace(settings, max_tasks_in_memory=n)
        store = MySQLStore(settings.database_url, settings.default_routing_key)
        engine = TriggerHook(roomy, store, SystemClock(), factory).engine
        started = time.perf_counter()
        engine.start()
        wait_until(lambda: publishers[0].taken >= n, timeout_s=600, step_s=0.005)
        sending_s = time.perf_counter() - started
        started = time.perf_counter()
        engine.confirmer.confirmed([f"s{i}" for i in range(n)])
        wait_until(lambda: engine.confirmer.deleted >= n, timeout_s=600, step_s=0.005)
        confirm_s = time.perf_counter() - started
        engine.stop()
        store.close()
        hook.close()
    sending, confirm = n / sending_s, n / confirm_s
    return [
        Figure(
            "sending (claim, arm, fire; no broker)",
            sending,
            "tasks/s",
            ">= 488,304 (TH)",
            sending >= 488_304,
            "each task's row is claimed and armed in MySQL (Trigger Hook only reads)",
        ),
        Figure(
            "confirm (batched deletes)", confirm, "tasks/s", ">= 142,468 (TH)", confirm >= 142_468
        ),
    ]


SCENARIOS: dict[str, Callable[[Settings, int], list[Figure]]] = {
    "create": bench_create_and_cancel,
    "burst": bench_burst,
    "precision": bench_precision,
    "sending": bench_sending_and_confirm,
}


def table(figures: list[Figure]) -> str:
    lines = ["| scenario | figure | target | met |", "|---|---:|---|---|"]
    for f in figures:
        met = "" if f.met is None else ("met" if f.met else "NOT MET")
        lines.append(f"| {f.name} | {f.value:,.1f} {f.unit} | {f.target} | {met} |")
    details = [f"- {f.name}: {f.detail}" for f in figures if f.detail]
    return "\n".join([*lines, "", *details])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--precision-s", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="small sizes for CI")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(SCENARIOS),
        default=sorted(SCENARIOS),
        help="run only these scenarios",
    )
    args = parser.parse_args()
    n, seconds = (2000, 3) if args.quick else (args.tasks, args.precision_s)
    base = Settings(log_level="WARNING")
    figures: list[Figure] = []
    for name in args.only:
        figures += SCENARIOS[name](base, seconds if name == "precision" else n)
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "tasks": n,
        "quick": args.quick,
        "figures": [vars(f) for f in figures],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"results-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(table(figures))
    print(f"\n(written to {path})")


if __name__ == "__main__":
    main()
