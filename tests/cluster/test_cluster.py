"""The engine on a real cluster, started by ``scripts/cluster up`` (three
Galera nodes behind HAProxy, three RabbitMQ nodes, three daemons): tasks
scheduled through all three daemons fire while, one after another, the
Galera writer, the RabbitMQ node of daemon 1 and daemon 3 are killed with
``kill -9``, and tasks cancelled meanwhile never fire. Events are read from a
quorum queue. Afterwards: every task received at least once, none early by
the database's clock (``x-fired-ms``), no task whose cancel succeeded
received. The CI-sized subset of the cluster fault tests (issue 16)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.amqp import AmqpNames, EventConsumer, Received
from support.daemon import duplicates, fired_ms, missing_ids, report
from support.names import unique_name
from support.waiting import now_ms, wait_for
from triggerhook_client import Client, NotFound, TaskRequest, TooLate

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "cluster"
PORTS = (3310, 3311, 3312, 3313, 5681, 5682, 5683, 8091, 8092, 8093)
DAEMONS = ("http://127.0.0.1:8091", "http://127.0.0.1:8092", "http://127.0.0.1:8093")
BROKER = " ".join(f"amqp://guest:guest@127.0.0.1:{port}/%2F" for port in (5682, 5683, 5681))
TASKS_PER_DAEMON = 400
CANCELS = 150
SPAN_MS = 12_000  # the tasks come due over this span, while the faults happen
UP_TIMEOUT_S = 600
CLUSTER_DIR = "/var/tmp/triggerhook-cluster-test"  # not the one `scripts/cluster` uses


def in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def cluster(*args: str, timeout_s: float = UP_TIMEOUT_S) -> str:
    env = {**os.environ, "TRIGGERHOOK_CLUSTER_DIR": CLUSTER_DIR}
    done = subprocess.run(
        [str(CLUSTER), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"scripts/cluster {' '.join(args)}:\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def up() -> Iterator[None]:
    taken = [port for port in PORTS if in_use(port)]
    assert not taken, f"ports {taken} are in use: another cluster? (scripts/cluster down)"
    try:
        cluster("up")
        yield
    finally:
        cluster("down", timeout_s=300)


class Collector:
    """Consumes the events in a thread until stopped, through any live node."""

    def __init__(self, names: AmqpNames) -> None:
        self._consumer = EventConsumer(BROKER, names, queue_arguments={"x-queue-type": "quorum"})
        self._consumer.declare()
        self.events: list[Received] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.events += self._consumer.collect(1000, timeout_s=0.2)

    def stop(self) -> list[Received]:
        self._stop.set()
        self._thread.join(10)
        self.events += self._consumer.drain_quiet(1.0)
        self._consumer.close()
        return self.events


def schedule(start_ms: int) -> dict[str, int]:
    """Tasks due over SPAN_MS from ``start_ms``, a share through each daemon."""
    due: dict[str, int] = {}
    for n, url in enumerate(DAEMONS):
        tasks = [
            TaskRequest(f"c{n}-{i}", at_ms=start_ms + i * SPAN_MS // TASKS_PER_DAEMON + n)
            for i in range(TASKS_PER_DAEMON)
        ]
        with Client(url) as client:
            client.schedule_many(tasks)
        due.update((t.id or "", t.at_ms or 0) for t in tasks)
    return due


def cancel_some(ids: list[str], stop: threading.Event) -> tuple[set[str], set[str]]:
    """Cancel ``ids`` through daemon 2 (never killed) one by one as the faults
    happen: the ids cancelled, and those the daemon said were too late."""
    cancelled: set[str] = set()
    too_late: set[str] = set()
    with Client(DAEMONS[1], retries=20) as client:
        for task_id in ids:
            if stop.is_set():
                break
            try:
                client.cancel(task_id)
                cancelled.add(task_id)
            except TooLate:
                too_late.add(task_id)
            except NotFound:  # fired already (the cancel came after its due time)
                too_late.add(task_id)
            stop.wait(SPAN_MS / 1000 / len(ids) / 2)  # pacing: spread over half the span
    return cancelled, too_late


def wait_until(moment_ms: int) -> None:
    wait_for(lambda: now_ms() >= moment_ms, 30, "clock")


@pytest.mark.slow
def test_tasks_fire_through_a_writer_a_broker_node_and_a_daemon_killed(up: None) -> None:
    names = AmqpNames(exchange="triggerhook", queue=unique_name("events_"))
    collector = Collector(names)
    start = now_ms() + 3000
    due = schedule(start)
    stop = threading.Event()
    victims = [task_id for task_id in sorted(due) if task_id.startswith("c1-")][-CANCELS:]
    results: list[tuple[set[str], set[str]]] = []
    canceller = threading.Thread(target=lambda: results.append(cancel_some(victims, stop)))
    canceller.start()
    faults = {}
    for after_ms, kind, n in ((1000, "galera", "1"), (4000, "rabbit", "1"), (7000, "daemon", "3")):
        wait_until(start + after_ms)
        cluster("kill", kind, n, timeout_s=30)
        faults[f"{kind} {n}"] = now_ms()
    canceller.join(120)
    stop.set()
    cancelled, too_late = results[0]
    expected = set(due) - cancelled
    wait_for(lambda: not missing_ids(expected, collector.events), 90, "every task received")
    events = collector.stop()
    received = {e.message_id or "" for e in events}
    assert not missing_ids(expected, events)
    assert not received & cancelled, sorted(received & cancelled)[:10]
    early = [e.message_id for e in events if fired_ms(e) < due[e.message_id or ""]]
    assert not early, early[:10]
    extra = duplicates(events)
    late = sorted(fired_ms(e) - due[e.message_id or ""] for e in events)
    report(
        f"cluster: {len(events)} events for {len(expected)} tasks ({len(cancelled)} cancelled, "
        f"{len(too_late)} too late to cancel), {sum(extra.values())} duplicates; lateness "
        f"p50 {late[len(late) // 2]} ms, p99 {late[len(late) * 99 // 100]} ms, "
        f"max {late[-1]} ms; faults at "
        + ", ".join(f"{what} +{at_ms - start} ms" for what, at_ms in faults.items())
    )
    assert cancelled, "no cancel succeeded: the test proved nothing about cancels"
