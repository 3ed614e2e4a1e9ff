"""Library scenarios: the engine in this process, MariaDB and RabbitMQ real.

* ``create``   N tasks in one ``schedule_many``; N single ``schedule`` calls
               from 8 threads (group commit, engine started as in the daemon)
* ``delete``   N single ``cancel`` calls from 8 threads
* ``sending``  N overdue rows -> armed, heap -> send buffer, taken
               in-process (Trigger Hook's "sending": no broker); then "confirm":
               the same N ids confirmed -> rows deleted in batches; then N
               overdue rows through the real broker until every event is confirmed
* ``burst``    N tasks due at one instant, a consumer process receiving: from
               the due instant until the last event is received and the last
               row deleted; per-task lateness; throughput over time
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks.common import (
    FAR_FUTURE_MS,
    SEQUENTIAL,
    CpuMeter,
    Recorder,
    RowWrites,
    Sampler,
    consuming,
    in_threads,
    isolated,
    rate,
    record_lateness,
    record_sequential,
    wait_until,
)
from triggerhook import CancelResult, Task, TaskSpec, assemble, build
from triggerhook.clock import SystemClock
from triggerhook.engine.engine import Engine
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.store.mysql import MySQLStore

THREADS = 8
OVERDUE_MS = 1_000_000  # 1970: every row is overdue from the start


def _timeout_s(n: int) -> float:
    """Generous: a scenario slower than 500 tasks/s is reported as failed."""
    return 60 + n / 500


def _check_rows(actual: int, expected: int, what: str) -> None:
    if actual != expected:
        raise RuntimeError(f"{what}: {actual} rows in the table, expected {expected}")


# -- create and delete -----------------------------------------------------------


def create(rec: Recorder, n: int) -> None:
    with isolated() as place, build(place.settings) as hook:
        far_ms = int(time.time() * 1000) + FAR_FUTURE_MS
        specs = [TaskSpec(id=f"m{i}", at_ms=far_ms + i) for i in range(n)]
        started = time.perf_counter()
        hook.schedule_many(specs)
        rec.add("create.schedule_many", rate(n, time.perf_counter() - started))
        _check_rows(place.rows(), n, "after schedule_many")
        hook.start()  # single calls share transactions (group commit), as in the daemon

        def schedule(k: int) -> None:
            for i in range(k, n, THREADS):
                hook.schedule(TaskSpec(f"s{i}", at_ms=far_ms + i))

        rec.add("create.schedule_x8", rate(n, in_threads(THREADS, schedule)))
        _check_rows(place.rows(), 2 * n, "after schedule x8")
        calls = min(n, SEQUENTIAL)
        _sequential(
            rec,
            "create.sequential",
            lambda i: hook.schedule(TaskSpec(f"q{i}", at_ms=far_ms + i)),
            calls,
        )
        _check_rows(place.rows(), 2 * n + calls, "after sequential schedules")


def delete(rec: Recorder, n: int) -> None:
    with isolated() as place, build(place.settings) as hook:
        far_ms = int(time.time() * 1000) + FAR_FUTURE_MS
        hook.schedule_many([TaskSpec(id=f"m{i}", at_ms=far_ms + i) for i in range(n)])
        hook.start()
        refused = [0] * THREADS

        def cancel(k: int) -> None:
            for i in range(k, n, THREADS):
                if hook.cancel(f"m{i}") is not CancelResult.CANCELLED:
                    refused[k] += 1

        calls = min(n, SEQUENTIAL)
        hook.schedule_many([TaskSpec(id=f"q{i}", at_ms=far_ms + i) for i in range(calls)])
        rec.add("delete.cancel_x8", rate(n, in_threads(THREADS, cancel)))
        if sum(refused):
            raise RuntimeError(f"{sum(refused)} cancels were not CANCELLED")

        def cancel_one(i: int) -> None:
            if hook.cancel(f"q{i}") is not CancelResult.CANCELLED:
                raise RuntimeError(f"cancel of q{i} was not CANCELLED")

        _sequential(rec, "delete.sequential", cancel_one, calls)
        _check_rows(place.rows(), 0, "after cancel x8 and sequential cancels")


def _sequential(rec: Recorder, key: str, call: Callable[[int], object], calls: int) -> None:
    """``calls`` calls from one caller, one after another: their latency."""
    latencies_ms: list[float] = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        latencies_ms.append((time.perf_counter() - started) * 1000)
    record_sequential(rec, key, latencies_ms, sum(latencies_ms) / 1000, "calls")


# -- sending and confirm -------------------------------------------------------------


class _DrainingPublisher:
    """Stands in for the broker: takes every fired task off the send buffer at
    once (Trigger Hook's "sending" test consumes in-process, no broker)."""

    def __init__(self, buffer: SendBuffer) -> None:
        self._buffer = buffer
        self.taken = 0
        self.tasks: list[Task] = []  # what it took: confirmed afterwards, by revision
        self._lock = threading.Lock()

    def start(self) -> None:
        pass

    def wake(self) -> None:
        with self._lock:
            tasks = self._buffer.take(len(self._buffer))
            self.tasks.extend(tasks)
            self.taken += len(tasks)

    def finish(self, deadline_s: float) -> None:
        pass

    def join(self, timeout_s: float | None = None) -> bool:
        return True

    def is_alive(self) -> bool:
        return True

    def stalled(self, now_s: float, max_silence_s: float) -> bool:
        return False  # no thread of its own

    def unconfirmed(self) -> int:
        return 0

    def is_connected(self) -> bool:
        return True

    def counters(self) -> dict[str, int]:
        return {}

    def take_lateness(self) -> list[float]:
        return []


def sending(rec: Recorder, n: int) -> None:
    with rec.part("sending and confirm, no broker"):
        _sending_without_broker(rec, n)
    with rec.part("sending through RabbitMQ"):
        _sending_through_broker(rec, n)


def _sending_without_broker(rec: Recorder, n: int) -> None:
    with isolated() as place, build(place.settings) as hook:
        hook.schedule_many([TaskSpec(id=f"s{i}", at_ms=OVERDUE_MS) for i in range(n)])
        publishers: list[_DrainingPublisher] = []

        def factory(buffer: SendBuffer, *_args: Any) -> _DrainingPublisher:
            publishers.append(_DrainingPublisher(buffer))
            return publishers[0]

        # Nothing is confirmed while sending, so memory must hold every task.
        roomy = replace(place.settings, max_tasks_in_memory=max(n, 1))
        store = MySQLStore(roomy.database_url, roomy.default_routing_key)
        engine = assemble(roomy, store, SystemClock(), factory).engine
        try:
            started = time.perf_counter()
            engine.start()
            wait_until(lambda: publishers[0].taken >= n, _timeout_s(n), "every task sent")
            sent_s = time.perf_counter() - started
            rec.add(
                "sending.no_broker",
                rate(n, sent_s),
                "rows armed by shard (a write per shard and pass, none per row) before they fire",
            )
            _confirm(rec, engine, publishers[0].tasks)
        finally:
            engine.stop()
            store.close()
        _check_rows(place.rows(), 0, "after confirm")


def _confirm(rec: Recorder, engine: Engine, tasks: list[Task]) -> None:
    n = len(tasks)
    started = time.perf_counter()
    engine.confirmer.confirmed(tasks)
    wait_until(lambda: engine.confirmer.deleted >= n, _timeout_s(n), "every row deleted")
    batch = engine.config.confirm_batch_size
    rec.add("confirm.delete", rate(n, time.perf_counter() - started), f"batches of {batch:,}")


def _sending_through_broker(rec: Recorder, n: int) -> None:
    with isolated() as place, build(place.settings) as hook:
        hook.schedule_many([TaskSpec(at_ms=OVERDUE_MS) for _ in range(n)])
        engine = hook.engine
        cpu = CpuMeter({"engine": os.getpid()})
        cpu.start()
        started = time.perf_counter()
        hook.start()
        publisher = engine.publisher
        wait_until(
            lambda: publisher.counters()["confirmed"] >= n, _timeout_s(n), "every event confirmed"
        )
        confirmed_s = time.perf_counter() - started
        wait_until(lambda: engine.confirmer.deleted >= n, _timeout_s(n), "every row deleted")
        deleted_s = time.perf_counter() - started
        cpu.stop()
        rec.add(
            "sending.broker",
            rate(n, confirmed_s),
            f"persistent, into a durable queue, no consumer; last row deleted after "
            f"{deleted_s:.2f} s; {cpu.text()}",
        )
        _check_rows(place.rows(), 0, "after sending through the broker")


# -- burst ---------------------------------------------------------------------------


def _burst_counters(engine: Engine) -> dict[str, int]:
    published = engine.publisher.counters()
    return {
        "fired": engine.scheduler.fired,
        "published": published.get("published", 0),
        "confirmed": published.get("confirmed", 0),
        "deleted": engine.confirmer.deleted,
    }


def burst(rec: Recorder, n: int) -> None:
    with isolated() as place, consuming(place.name, n) as consumer:
        writes = RowWrites(place.name)
        writes.start()  # from before the insert: every row write of the tasks
        with build(place.settings) as hook:
            # Due late enough that the insert is done and the engine holds its
            # shards before the instant; it arms them arm_ahead_ms before.
            lead_ms = place.settings.arm_ahead_ms + 2000 + n * 0.04
            due_ms = int(time.time() * 1000 + lead_ms)
            hook.schedule_many([TaskSpec(at_ms=due_ms) for _ in range(n)])
            engine = hook.engine
            sampler = Sampler(lambda: _burst_counters(engine), interval_s=0.1)
            sampler.start()
            started_ms = time.time() * 1000
            hook.start()
            cpu = CpuMeter({"engine": os.getpid(), "consumer": consumer.pid})
            try:
                threading.Event().wait(max(0.0, due_ms / 1000 - time.time()))
                cpu.start()  # from the due instant
                deleted_ms = 1000 * wait_until(
                    lambda: engine.confirmer.deleted >= n, _timeout_s(n), "every row deleted"
                )
                events = consumer.events(_timeout_s(n))
                cpu.stop()
            finally:
                sampler.stop()
                sampler.join()
        writes.stop()
        _check_rows(place.rows(), 0, "after the burst")
    rec.add(
        "burst.row_writes",
        writes.per_task(n),
        f"rows changed per task, insert to delete (TABLE_STATISTICS): {writes.text()}",
    )
    received_ms = max(e[2] for e in events)
    end_s = (max(received_ms, deleted_ms) - due_ms) / 1000
    detail = (
        f"{n:,} due at once; engine started {due_ms - started_ms:,.0f} ms before; last event "
        f"received {(received_ms - due_ms) / 1000:.2f} s, last row deleted "
        f"{(deleted_ms - due_ms) / 1000:.2f} s after the due instant; a consumer process "
        f"received {len(events):,}; {cpu.text()}"
    )
    rec.add("burst.end_to_end", rate(n, end_s), detail)
    record_lateness(rec, "burst", "burst", events)
    rec.timeline = [(t_ms - due_ms, counts) for t_ms, counts in sampler.samples]


# -- near-due tasks through an instance that owns none of their shards -------------------


def near_due(rec: Recorder, seconds: int, rate: int) -> None:
    """Single ``schedule`` calls, ``rate`` a second for ``seconds``, each due
    100 ms ahead, through a TriggerHook that owns no shard (not started: a
    plain client of the database); the engine owning every shard arms them at
    its next pass (``arm_interval_ms``), as nothing wakes it."""
    n = seconds * rate
    with (
        isolated() as place,
        consuming(place.name, n) as consumer,
        build(place.settings) as owner,
        build(place.settings) as writer,
    ):
        owner.start()
        shards = owner.engine.shards
        wait_until(lambda: len(shards) == 64, 30, "the owner holds every shard")
        started_s = time.monotonic()
        for i in range(n):
            pause_s = started_s + i / rate - time.monotonic()
            if pause_s > 0:
                threading.Event().wait(pause_s)  # pacing the load, not a test's wait
            writer.schedule(TaskSpec(delay_ms=100))
        events = consumer.events(_timeout_s(n) + seconds)
    label = "scheduled 100 ms ahead through a non-owner"
    record_lateness(rec, "near_due", label, events)
    rec.add("near_due.fired_p99", rec.distributions[-2].stats["p99"], f"{n:,} tasks at {rate}/s")
