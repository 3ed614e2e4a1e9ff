"""The daemon under systemd's notification protocol: a test socket stands in
for systemd (NOTIFY_SOCKET, WATCHDOG_USEC), and receives READY once the daemon
is ready (``/readyz`` answers 200), WATCHDOG pings while it runs, STOPPING on
SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
from support.amqp import AmqpNames
from support.daemon import DaemonGroup, closed_port, daemon_env
from support.notify import NotifySocket
from support.tcpproxy import proxied

# How many daemon starts the READY-under-load test makes: the race it guards
# against (READY ~80 ms before the command consumer connected) showed up in
# some starts only.
_LOADED_STARTS = 6


def test_ready_watchdog_and_stopping_arrive(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    with NotifySocket() as notify:
        env = daemon_env(database_url, amqp_url, amqp_names.exchange, "notified")
        env.update(NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="1000000")
        daemon = daemons.start(env, "notified", "--init-db")

        assert notify.wait_for("READY"), daemon.tail()
        # READY comes once the API answers: it can be used at once.
        port = env["TRIGGERHOOK_HTTP_PORT"]
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
        assert notify.messages[0]["STATUS"] == "running as notified"
        assert notify.wait_for("WATCHDOG", count=3, timeout_s=10), notify.messages
        assert notify.count("STOPPING") == 0

        daemon.signal(signal.SIGTERM)
        assert daemon.wait_exit(20) == 0
        assert notify.wait_for("STOPPING", timeout_s=5)
        keys = [next(iter(m)) for m in notify.messages]
        assert keys[0] == "READY" and keys[-1] == "STOPPING"
        assert set(keys[1:-1]) == {"WATCHDOG"}


@contextlib.contextmanager
def cpu_load() -> Iterator[None]:
    """One busy-looping process per core while the block runs (as on a loaded
    CI machine: the daemon's threads then start and connect slowly)."""
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for proc in busy:
            proc.kill()
        for proc in busy:
            proc.wait(10)


def test_ready_means_readyz_answers_200_even_under_cpu_load(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    """READY is the promise that the daemon is ready: a /readyz right after it
    answers 200, with the command consumer and the publisher connected."""
    for start in range(_LOADED_STARTS):
        name = f"loaded-{start}"
        with NotifySocket() as notify, cpu_load():
            env = daemon_env(database_url, amqp_url, amqp_names.exchange, name)
            env["NOTIFY_SOCKET"] = notify.path
            daemon = daemons.start(env, name, "--init-db")
            assert notify.wait_for("READY", timeout_s=60), daemon.tail()
            ready = httpx.get(f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}/readyz")
            assert ready.status_code == 200, (start, ready.text, daemon.tail())
            assert ready.json() == {"status": "ready"}, ready.text
            assert daemon.terminate(20) == 0, daemon.tail()


def test_ready_waits_for_a_broker_that_answers_late(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    """The broker refuses connections at the start: the engine and the HTTP API
    are up, but READY waits until the publisher and the command consumer are
    connected, and a /readyz right after it answers 200."""
    with NotifySocket() as notify, proxied(amqp_url) as (proxy, late_amqp):
        proxy.cut()
        env = daemon_env(database_url, late_amqp, amqp_names.exchange, "late")
        env["NOTIFY_SOCKET"] = notify.path
        daemon = daemons.start(env, "late", "--init-db")
        daemon.wait_for_line("http api listening", 20)
        daemon.wait_for_line("cannot connect to RabbitMQ", 20)
        daemon.wait_for_line("command consumer cannot connect to RabbitMQ", 20)
        url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}/readyz"
        assert httpx.get(url).status_code == 503
        assert notify.count("READY") == 0, notify.messages

        proxy.restore()
        assert notify.wait_for("READY", timeout_s=30), daemon.tail()
        ready = httpx.get(url)
        assert ready.status_code == 200, (ready.text, daemon.tail())
        assert daemon.terminate(20) == 0, daemon.tail()


def test_no_ready_while_a_dependency_is_down_and_a_stop_is_honoured(
    database_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    """With the broker unreachable the daemon is not ready: no READY, the reason
    logged once the startup bound passed; SIGTERM while waiting stops it (0)."""
    dead_amqp = f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F"
    with NotifySocket() as notify:
        env = daemon_env(database_url, dead_amqp, amqp_names.exchange, "waiting")
        env.update(NOTIFY_SOCKET=notify.path, WATCHDOG_USEC="1000000")
        daemon = daemons.start(env, "waiting", "--init-db")
        line = daemon.wait_for_line("not ready after", 40)
        assert "rabbitmq: publisher not connected" in line, line
        assert notify.count("READY") == 0, notify.messages
        # systemd's watchdog runs only once start-up completed: no pings before READY.
        assert notify.count("WATCHDOG") == 0, notify.messages
        # systemctl status shows why it is still starting (the datagram may
        # arrive just after the log line).
        assert notify.wait_for("STATUS", timeout_s=5), notify.messages
        assert any("rabbitmq" in m.get("STATUS", "") for m in notify.messages), notify.messages
        ready = httpx.get(f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}/readyz")
        assert ready.status_code == 503, ready.text

        daemon.signal(signal.SIGTERM)
        assert daemon.wait_exit(20) == 0, daemon.tail()
        assert notify.wait_for("STOPPING", timeout_s=5), notify.messages
        assert notify.count("READY") == 0, notify.messages
        assert daemon.count("Traceback") == 0, daemon.tail()
