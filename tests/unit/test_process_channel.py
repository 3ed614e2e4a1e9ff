"""The channel between the firing process and an API process, over a real
socket pair (no processes): what each side sends and how the other reads it."""

from __future__ import annotations

import array
import socket
import threading
import time
from multiprocessing.connection import Connection

from support.waiting import wait_for

from triggerhook.app import Figures
from triggerhook.processes import STALE_S, EngineLink, SummedRequestStats
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
