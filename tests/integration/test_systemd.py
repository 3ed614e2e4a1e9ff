"""The daemon under systemd's notification protocol: a test socket stands in
for systemd (NOTIFY_SOCKET, WATCHDOG_USEC), and receives READY once the engine
and the interfaces are up, WATCHDOG pings while it runs, STOPPING on SIGTERM."""

from __future__ import annotations

import signal

import httpx
from support.amqp import AmqpNames
from support.daemon import DaemonGroup, daemon_env
from support.notify import NotifySocket


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
