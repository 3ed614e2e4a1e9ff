"""sd_notify: messages on a real datagram socket; the watchdog's decisions."""

from __future__ import annotations

import os

from support.notify import NotifySocket

from triggerhook.sdnotify import Notifier
from triggerhook.service import Watchdog


def test_messages_reach_the_notify_socket() -> None:
    with NotifySocket() as sock:
        notifier = Notifier({"NOTIFY_SOCKET": sock.path})
        assert notifier.enabled
        assert notifier.ready("running as x")
        assert notifier.watchdog()
        assert notifier.stopping("bye")
        assert sock.wait_for("STOPPING", timeout_s=5)
        assert sock.messages == [
            {"READY": "1", "STATUS": "running as x"},
            {"WATCHDOG": "1"},
            {"STOPPING": "1", "STATUS": "bye"},
        ]


def test_outside_systemd_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled and notifier.watchdog_s is None
    assert not notifier.ready("x")


def test_a_vanished_socket_is_logged_not_raised() -> None:
    assert not Notifier({"NOTIFY_SOCKET": "/nonexistent/notify.sock"}).ready("x")


def test_watchdog_timeout_only_for_this_process() -> None:
    mine = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(mine).watchdog_s == 4.0
    assert Notifier({**mine, "WATCHDOG_PID": "1"}).watchdog_s is None
    assert Notifier({"WATCHDOG_USEC": "0"}).watchdog_s is None
    assert Notifier({"WATCHDOG_USEC": "soon"}).watchdog_s is None


def test_watchdog_pings_at_half_the_timeout_only_while_the_engine_responds() -> None:
    with NotifySocket() as sock:
        notifier = Notifier({"NOTIFY_SOCKET": sock.path, "WATCHDOG_USEC": "4000000"})
        responsive = [True]
        asked: list[float] = []

        def engine_responsive(max_silence_s: float) -> bool:
            asked.append(max_silence_s)
            return responsive[0]

        watchdog = Watchdog(notifier, engine_responsive)
        assert watchdog.interval_s == 2.0
        watchdog.tick(100.0)  # ping
        watchdog.tick(101.0)  # too soon
        watchdog.tick(102.0)  # ping
        responsive[0] = False
        watchdog.tick(104.0)  # wedged: withheld
        assert sock.wait_for("WATCHDOG", 2, timeout_s=5)
        assert sock.count("WATCHDOG") == 2
        assert watchdog.withheld == 1
        assert asked == [2.0, 2.0, 2.0]


def test_no_watchdog_configured_no_pings() -> None:
    watchdog = Watchdog(Notifier({}), lambda _s: True)
    watchdog.tick(0.0)
    assert watchdog.interval_s is None and watchdog.withheld == 0


def test_status_alone_updates_what_systemctl_shows() -> None:
    with NotifySocket() as sock:
        notifier = Notifier({"NOTIFY_SOCKET": sock.path})
        assert notifier.status("starting, not ready: rabbitmq: publisher not connected")
        assert sock.wait_for("STATUS", timeout_s=5)
        assert sock.messages == [
            {"STATUS": "starting, not ready: rabbitmq: publisher not connected"}
        ]
