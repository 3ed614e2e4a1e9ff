"""``triggerhook run`` as a firing process and API processes (``api_processes``):
the API is served by a child, its soon-due writes wake the firing process's
armer, several children share the port and their figures add up, a child
that dies stops the daemon (exit 1), a child that hangs (SIGSTOP) is killed
and replaced and the commands it had taken are applied, and children stop
when the firing process is gone."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer
from support.commands import CommandClient
from support.daemon import Daemon, DaemonGroup, TaskTable, daemon_env, fired_ms, report
from support.waiting import now_ms, wait_for

from triggerhook.processes import HUNG_AFTER_S

Start = Callable[..., Daemon]


@pytest.fixture
def start(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    table: TaskTable,  # the schema
    daemons: DaemonGroup,
) -> Start:
    """``start(name, **settings)``: a daemon on the test's database and exchange, ready."""

    def started(name: str, **settings: int | str) -> Daemon:
        env = daemon_env(database_url, amqp_url, amqp_names.exchange, name, **settings)
        daemon = daemons.start(env)
        daemon.wait_ready()
        return daemon

    return started


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # a process that just ended
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


def _api_children(daemon: Daemon, count: int) -> list[int]:
    def found() -> list[int]:
        return [
            child
            for child in _children(daemon.pid)
            if b"api-process" in Path(f"/proc/{child}/cmdline").read_bytes()
        ]

    wait_for(lambda: len(found()) == count, 20, lambda: f"API processes: {found()}")
    return found()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "Z"  # exited, not yet reaped by its (dead) parent's reaper


def test_the_api_runs_in_its_own_process_and_its_soon_due_writes_wake_the_armer(
    start: Start, event_consumer: EventConsumer, table: TaskTable
) -> None:
    # Arming passes 50 s apart: a task POSTed 300 ms ahead fires within the
    # test's bound only if the API process's wake reaches the armer.
    daemon = start("split", api_processes=1, arm_ahead_ms=60_000, arm_interval_ms=50_000)
    (child,) = _api_children(daemon, 1)
    daemon.wait_for_line("api_process=0", 10)

    due_ms = now_ms() + 300
    with httpx.Client(base_url=daemon.http_url, timeout=10) as http:
        wait_for(lambda: http.get("/readyz").status_code == 200, 20, "the API never got ready")
        answer = http.post("/v1/tasks", json={"id": "near", "at": due_ms / 1000})
        assert answer.status_code == 201, answer.text
        (event,) = event_consumer.collect(1, timeout_s=10)
        assert event.message_id == "near"
        assert fired_ms(event) >= due_ms
        wait_for(lambda: table.count() == 0, 10, "the fired task's row was not deleted")

        # The firing process's figures (as it last sent them), with the API
        # process's write and requests.
        def totals() -> dict[str, int]:
            return dict(http.get("/v1/status").json()["totals"])

        wait_for(lambda: totals()["deleted"] == 1, 10, lambda: str(totals()))
        assert totals()["scheduled"] == 1 and totals()["requests_2xx"] >= 2, totals()

    assert daemon.terminate() == 0
    assert _gone(child)
    assert daemon.count("Traceback") == 0
    assert daemon.count("its channel broke") == 0


def test_two_api_processes_share_the_port_and_their_figures_add_up(start: Start) -> None:
    daemon = start("two", api_processes=2)
    assert len(_api_children(daemon, 2)) == 2
    far_s = now_ms() / 1000 + 3600
    with httpx.Client(base_url=daemon.http_url, timeout=10) as http:
        wait_for(lambda: http.get("/readyz").status_code == 200, 20, "the API never got ready")
        for k in range(40):
            # A new connection each: the kernel spreads them over both listeners.
            with httpx.Client(base_url=daemon.http_url, timeout=10) as once:
                answer = once.post("/v1/tasks", json={"id": f"t{k}", "at": far_s})
                assert answer.status_code == 201, answer.text

        def scheduled() -> int:
            return int(http.get("/v1/status").json()["totals"]["scheduled"])

        wait_for(lambda: scheduled() == 40, 10, lambda: f"scheduled: {scheduled()}")
        metrics = http.get("/metrics").text
    # One scrape counts every process's answers (40 POSTs, the readiness probe).
    (requests,) = [
        line
        for line in metrics.splitlines()
        if line.startswith('triggerhook_http_requests_total{status_class="2xx",')
    ]
    assert float(requests.rsplit(" ", 1)[1]) >= 41, requests
    assert daemon.count("api_process=0") > 0 and daemon.count("api_process=1") > 0
    assert daemon.terminate() == 0
    # A clean stop closes each channel after its link thread read the end of it.
    assert daemon.count("its channel broke") == 0


def test_an_api_process_that_dies_stops_the_daemon_with_status_1(start: Start) -> None:
    daemon = start("diechild", api_processes=1)
    (child,) = _api_children(daemon, 1)
    os.kill(child, signal.SIGKILL)
    assert daemon.wait_exit(20) == 1
    line = daemon.wait_for_line("exiting after a fatal failure", 1)
    assert "API process 0 exited with status -9" in line
    assert daemon.count("Traceback") == 0


def _state(pid: int) -> str:
    """The process's state letter (``T``: stopped by a signal)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _ready(http: httpx.Client) -> bool:
    """``/readyz`` answers 200 (no listener yet, or no answer in time: not)."""
    try:
        return http.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False


def test_a_hung_api_process_is_killed_and_replaced_and_its_commands_are_applied(
    start: Start, table: TaskTable, client: CommandClient, command_queue: str
) -> None:
    daemon = start("hung", api_processes=1)
    (child,) = _api_children(daemon, 1)
    with httpx.Client(base_url=daemon.http_url, timeout=10) as http:
        wait_for(lambda: http.get("/readyz").status_code == 200, 20, "the API never got ready")

    os.kill(child, signal.SIGSTOP)  # hung: as if deadlocked, or its VM stopped
    stopped_at = now_ms()
    wait_for(lambda: _state(child) == "T", 5, "the API process did not stop")
    far_s = now_ms() / 1000 + 3600
    sent = {
        f"held-{k}": client.send("create", {"id": f"held-{k}", "at": far_s}, reply=True)
        for k in range(5)
    }
    # The stopped process's consumer has them (prefetched, unacknowledged):
    # none is ready in the queue, none is applied.
    wait_for(lambda: client.depth(command_queue) == 0, 10, "the commands were not prefetched")
    assert table.count() == 0
    with pytest.raises(httpx.TimeoutException):  # its HTTP API hangs
        httpx.get(f"{daemon.http_url}/readyz", timeout=1)

    line = daemon.wait_for_line("API process 0 is hung", HUNG_AFTER_S + 10)
    detected_ms = now_ms() - stopped_at
    assert "no sign of life for" in line, line
    assert detected_ms <= (HUNG_AFTER_S + 2) * 1000, f"detected after {detected_ms} ms"
    wait_for(lambda: _gone(child), 10, "the hung API process was not killed")
    (successor,) = _api_children(daemon, 1)
    assert successor != child

    with httpx.Client(base_url=daemon.http_url, timeout=2) as http:
        wait_for(lambda: _ready(http), 30, "the API never came back")
        answered_ms = now_ms() - stopped_at
    # Redelivered once the hung consumer's connection died, and applied.
    for task_id, correlation_id in sent.items():
        assert correlation_id is not None
        reply = client.reply(correlation_id, 30).json()
        assert reply["ok"] and reply["id"] == task_id, reply
    assert table.ids() == set(sent)
    assert client.depth(command_queue) == 0

    assert daemon.alive(), daemon.tail()
    assert daemon.terminate() == 0, daemon.tail()
    assert daemon.count("Traceback") == 0
    report(
        f"hung API process: detected {detected_ms} ms after SIGSTOP (bound {HUNG_AFTER_S:.0f} s), "
        f"HTTP answered again after {answered_ms} ms, {len(sent)} prefetched commands applied"
    )


def test_api_processes_stop_when_the_firing_process_is_killed(start: Start) -> None:
    daemon = start("dieparent", api_processes=1)
    (child,) = _api_children(daemon, 1)
    assert daemon.kill9() == -9
    wait_for(lambda: _gone(child), 20, "the API process outlived the firing process")
    daemon.wait_for_line("the firing process is gone", 5)


def test_api_processes_0_serves_everything_from_one_process(start: Start) -> None:
    daemon = start("single", api_processes=0)
    with httpx.Client(base_url=daemon.http_url, timeout=10) as http:
        wait_for(lambda: http.get("/readyz").status_code == 200, 20, "never ready")
    assert _children(daemon.pid) == []
    assert daemon.count("api_process=") == 0
    assert daemon.terminate() == 0
