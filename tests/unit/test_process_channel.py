"""The channel between the firing process and an API process, over a real
socket pair (no processes): what each side sends and how the other reads it."""

from __future__ import annotations

import array
import io
import socket
import struct
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

import pytest
from support.waiting import wait_for

from triggerhook.app import Figures
from triggerhook.processes import (
    FIRST_BEAT_S,
    HUNG_AFTER_S,
    MAX_REPLACEMENTS,
    REPLACEMENT_WINDOW_S,
    REPORT_INTERVAL_S,
    STALE_S,
    ApiProcesses,
    EngineLink,
    SummedRequestStats,
    _Member,
)
from triggerhook.runtime.counters import RequestStats
from triggerhook.settings import Settings


def _pair() -> tuple[Connection, EngineLink]:
    ours, theirs = socket.socketpair()
    return Connection(ours.detach()), EngineLink(Connection(theirs.detach()))


def test_the_link_reads_the_settings_first_then_the_engines_state() -> None:
    parent, link = _pair()
    settings = Settings(instance_id="engine-1", api_processes=2)
    parent.send(("settings", settings))
    assert link.settings() == settings
    gone = threading.Event()
    link.start(on_gone=gone.set)
    assert link.engine_reasons() == ["engine: not reporting yet"]
    assert link.figures() is None
    figures = Figures("engine-1", True, {"fired": 3}, {"engine": {"heap": 1}})
    parent.send(("engine", ["rabbitmq: publisher not connected"], figures))
    wait_for(lambda: link.figures() is not None, 5, "no engine state")
    assert link.figures() == figures
    assert link.engine_reasons() == ["rabbitmq: publisher not connected"]
    parent.send(("engine", [], figures))
    wait_for(lambda: link.engine_reasons() == [], 5, "still not ready")
    assert not gone.is_set()
    parent.close()
    assert gone.wait(5)


def test_a_report_older_than_the_stale_bound_is_not_ready() -> None:
    parent, link = _pair()
    link.start(on_gone=lambda: None)
    parent.send(("engine", [], Figures("e", True, {}, {})))
    wait_for(lambda: link.engine_reasons() == [], 5, "still not ready")
    link._reported_s = time.monotonic() - STALE_S - 1  # as if the firing process hung
    assert link.engine_reasons() == ["engine: not reporting"]
    parent.close()


def test_the_link_sends_soon_and_its_state_with_the_latencies_taken() -> None:
    parent, link = _pair()
    stats = RequestStats()
    stats.record(201, 1.5)
    stats.record(404, 2.5)
    link.soon()
    link.report(["mysql: unreachable"], stats, stats.counters(), {"scheduled": 7})
    assert parent.recv() == ("soon",)
    kind, reasons, http_totals, engine_totals, latencies = parent.recv()
    assert (kind, reasons, engine_totals) == ("state", ["mysql: unreachable"], {"scheduled": 7})
    assert http_totals["requests_2xx"] == 1 and http_totals["requests_4xx"] == 1
    assert list(array.array("d", latencies)) == [1.5, 2.5]
    assert stats.latency.take() == []  # taken by the report: sent once
    parent.close()


def test_a_send_after_the_firing_process_hung_up_does_not_raise() -> None:
    parent, link = _pair()
    parent.close()
    link.soon()  # the reader thread notices the hang-up and stops the process


def test_summed_request_stats_add_each_processes_latest_totals() -> None:
    summed = SummedRequestStats()
    summed.report(0, {"requests_2xx": 5, "connections_refused": 1}, b"")
    summed.report(1, {"requests_2xx": 3}, array.array("d", [4.0]).tobytes())
    summed.report(0, {"requests_2xx": 6, "connections_refused": 1}, b"")  # a later total
    assert summed.counters() == {"requests_2xx": 9, "connections_refused": 1}
    assert summed.latency.take() == [4.0]


def test_a_large_report_arriving_in_pieces_is_read_whole() -> None:
    """A report with many latencies (a busy API process) spans many socket
    reads; the firing process's link thread must wait for all of it, not take
    the first piece for a hung-up channel."""
    ours, theirs = socket.socketpair()
    woken = threading.Event()
    processes = ApiProcesses(Settings(), 1, woken.set, SummedRequestStats())
    member = _Member(0, 1, None, Connection(ours.detach()), 0.0)  # type: ignore[arg-type]
    reader = threading.Thread(target=processes._read, args=(member,), daemon=True)
    reader.start()
    latencies = array.array("d", [float(k) for k in range(200_000)]).tobytes()  # 1.6 MB
    frame = io.BytesIO()
    ForkingPickler(frame).dump(("state", [], {"requests_2xx": 3}, {"scheduled": 2}, latencies))
    data = frame.getvalue()
    sender = theirs.dup()
    sender.settimeout(10)  # a reader that gave up must fail the test, not hang it
    theirs.close()
    header = struct.pack("!i", -1) + struct.pack("!Q", len(data))  # Connection's framing
    for start in range(0, len(header + data), 65_536):  # pieces, each a write of its own
        sender.sendall((header + data)[start : start + 65_536])
        threading.Event().wait(0.001)
    sender.sendall(_frame(("soon",)))
    assert woken.wait(10), "the message after the large one never arrived"
    assert member.connected and member.reported_s is not None
    assert processes.http.counters() == {"requests_2xx": 3}
    assert processes.engine_totals() == {"scheduled": 2}
    assert len(processes.http.latency.take()) == 200_000
    sender.close()
    reader.join(5)
    assert not member.connected  # end of file: gone


def _frame(message: object) -> bytes:
    buf = io.BytesIO()
    ForkingPickler(buf).dump(message)
    payload = buf.getvalue()
    return struct.pack("!i", len(payload)) + payload


def test_reports_to_a_firing_process_that_stopped_reading_are_skipped_not_fatal() -> None:
    """A paused firing process reads nothing: the reports skip while the
    buffer fills (no wait, no giving the link up), and flow again once it reads."""
    ours, theirs = socket.socketpair()
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 1, 0))  # as run's
    parent, link = Connection(ours.detach()), EngineLink(Connection(theirs.detach()))
    gone = threading.Event()
    link.start(on_gone=gone.set)
    stats = RequestStats()
    started_s = time.monotonic()
    for n in range(20_000):  # far more than the socket's buffer holds
        if gone.is_set():
            break
        stats.record(200, float(n))
        link.report([], stats, stats.counters(), {"scheduled": n})
    assert time.monotonic() - started_s < 10  # never waited out the 1 s send timeout
    assert not gone.is_set()
    assert _skipping(link)
    received = []
    while parent.poll(0):  # the pause ends: the firing process reads the backlog
        received.append(parent.recv())
    assert 0 < len(received) < 20_000
    link.report([], stats, stats.counters(), {"scheduled": -1})
    assert parent.recv()[3] == {"scheduled": -1}  # then the next report arrives
    assert not _skipping(link) and not gone.is_set()
    parent.close()


def _skipping(link: EngineLink) -> bool:
    return link._skipping


def test_an_api_process_is_hung_once_its_beats_stop_for_the_bound() -> None:
    member = _Member(0, 1, None, None, 100.0)  # type: ignore[arg-type]
    assert member.hung(100.0 + FIRST_BEAT_S) is None  # still starting
    assert "after its start" in str(member.hung(100.1 + FIRST_BEAT_S))
    member.beat_s = 200.0
    assert member.hung(200.0 + HUNG_AFTER_S) is None
    assert member.hung(200.1 + HUNG_AFTER_S) == "no sign of life for 10.1 s"
    # The firing process itself was paused: the silence counts afresh.
    member.count_from(300.0)
    assert member.hung(300.0 + HUNG_AFTER_S) is None
    member.stuck = True  # stopped reading its channel mid-message
    assert member.hung(300.0) == "it stopped reading its channel"


def test_a_beat_is_skipped_rather_than_waiting_for_another_send() -> None:
    parent, link = _pair()
    with link._send_lock:  # another thread is sending a report
        link.beat()
    link.beat()
    assert parent.poll(5)
    assert parent.recv() == ("beat",)
    assert not parent.poll(0.1), "the beat sent while the lock was held was not skipped"


class _FakeProc:
    """Stands in for an API process's Popen: records the signal."""

    pid = 4242
    returncode = None

    def __init__(self) -> None:
        self.killed = 0

    def kill(self) -> None:
        self.killed += 1


def _supervised(beat_s: float) -> tuple[ApiProcesses, _Member, _FakeProc]:
    ours, _theirs = socket.socketpair()
    processes = ApiProcesses(Settings(), 1, lambda: None, SummedRequestStats())
    proc = _FakeProc()
    member = _Member(0, 1, proc, Connection(ours.detach()), 0.0)  # type: ignore[arg-type]
    member.beat_s = beat_s
    processes._members.append(member)
    return processes, member, proc


def _no_figures() -> Figures:
    raise AssertionError("not due")


def test_a_silent_api_process_is_killed_but_not_after_the_firing_process_own_pause() -> None:
    processes, member, proc = _supervised(beat_s=100.0)
    processes._next_report_s = float("inf")  # no state to send in this test
    assert processes.tick(105.0, [], _no_figures) is None
    # The supervision rounds stopped for 7 s (the firing process was paused):
    # the API process's silence is counted afresh, not killed.
    assert processes.tick(112.0, [], _no_figures) is None
    assert proc.killed == 0
    # Rounds every 0.25 s from then on: killed once silent for over HUNG_AFTER_S.
    now_s = 112.0
    while proc.killed == 0:
        now_s += REPORT_INTERVAL_S
        assert processes.tick(now_s, [], _no_figures) is None
    assert now_s - 112.0 == pytest.approx(HUNG_AFTER_S + REPORT_INTERVAL_S)
    assert proc.killed == 1 and member.killed_as_hung
    assert processes.alive()  # being replaced counts as alive for the watchdog


def test_too_many_hung_api_processes_stop_the_daemon() -> None:
    processes, member, proc = _supervised(beat_s=0.0)
    for k in range(MAX_REPLACEMENTS):
        assert processes._kill_hung(member, "silent", 10.0 * k) is None
    failure = processes._kill_hung(member, "silent", 40.0)
    assert failure is not None and "not replacing it again" in failure
    assert proc.killed == MAX_REPLACEMENTS
    # Long enough apart, replacements go on.
    assert processes._kill_hung(member, "silent", 40.0 + REPLACEMENT_WINDOW_S + 1) is None
