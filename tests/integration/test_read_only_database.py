"""A database that goes read-only under a running daemon (a demoted writer
after a failover): ``SET GLOBAL read_only = ON`` on a MariaDB server of this
module's own (tests/support/private_mariadb.py: never the shared one), for a
user without READ ONLY ADMIN, as the daemon's should be.

The daemon rides it out: it stays up, ``/readyz`` names it, HTTP writes answer
503 with ``Retry-After``, a command is retried (neither answered nor
dead-lettered) and applied once the database takes writes again, and a task
due meanwhile fires then: not early, not lost. Before, the shard keeper's
heartbeat died of the server's error 1290 and the daemon exited 1.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer
from support.commands import CommandClient
from support.daemon import (
    Daemon,
    DaemonGroup,
    TaskTable,
    daemon_env,
    fired_ms,
    report,
    schedule_tasks,
)
from support.mysql import with_driver
from support.names import unique_name
from support.private_mariadb import PrivateMariaDB, private_mariadb
from support.waiting import now_ms, wait_for

from triggerhook import Settings, TaskSpec, build
from triggerhook.errors import StoreReadOnly
from triggerhook.store.mysql import init_schema

READ_ONLY_REASON = "mysql: read-only (writes refused)"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateMariaDB]:
    """One private server for the module (it starts in about a second)."""
    with private_mariadb() as mariadb:
        yield mariadb


@pytest.fixture
def app_url(server: PrivateMariaDB) -> Iterator[str]:
    """A database with the schema (made by root) and the URL of an ordinary
    user with every right on it; the server is writable again afterwards."""
    name, user = unique_name(), unique_name("th_app_")
    server.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    init_schema(f"{server.url}/{name}")
    url = server.add_user(user, secrets.token_hex(8), name)
    try:
        yield url
    finally:
        server.execute(
            "SET GLOBAL read_only = OFF", f"DROP USER '{user}'@'%'", f"DROP DATABASE `{name}`"
        )


def _readyz(daemon: Daemon) -> httpx.Response:
    return httpx.get(f"{daemon.http_url}/readyz", timeout=WAIT_S)


def _reasons(daemon: Daemon) -> list[str]:
    answer = _readyz(daemon)
    return list(answer.json().get("reasons", [])) if answer.status_code == 503 else []


@pytest.mark.parametrize("driver", ["mysqldb", "pymysql"])
def test_a_write_to_a_read_only_server_is_a_transient_refusal(
    server: PrivateMariaDB, app_url: str, driver: str
) -> None:
    hook = build(Settings(database_url=with_driver(app_url, driver), instance_id="client"))
    try:
        server.execute("SET GLOBAL read_only = ON")
        with pytest.raises(StoreReadOnly) as refused:
            hook.schedule(TaskSpec("t-1", delay_ms=60_000))
        assert refused.value.kind == "read-only"
        assert "1290" in str(refused.value)  # the server's own words, for the log
        assert hook.get("t-1") is None  # reads go on
        server.execute("SET GLOBAL read_only = OFF")
        assert hook.schedule(TaskSpec("t-1", delay_ms=60_000)).created
    finally:
        hook.close()


def test_the_daemon_rides_out_a_read_only_database(
    server: PrivateMariaDB,
    app_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    client: CommandClient,
    daemons: DaemonGroup,
) -> None:
    daemon = daemons.start(daemon_env(app_url, amqp_url, amqp_names.exchange, "ro"), "ro")
    daemon.wait_ready()
    wait_for(lambda: _readyz(daemon).status_code == 200, WAIT_S, daemon.tail)
    due_ms = now_ms() + 3000  # armed only within arm_ahead_ms of it: during the outage
    schedule_tasks(app_url, [("due-meanwhile", due_ms)])
    mark = daemon.mark()

    server.execute("SET GLOBAL read_only = ON")
    wait_for(lambda: READ_ONLY_REASON in _reasons(daemon), WAIT_S, daemon.tail)
    answer = httpx.post(
        f"{daemon.http_url}/v1/tasks", json={"id": "by-http", "delay_ms": 60_000}, timeout=WAIT_S
    )
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["error"]["code"] == "unavailable"
    correlation_id = client.send("create", {"id": "by-command", "delay_ms": 60_000}, reply=True)
    assert correlation_id is not None
    daemon.wait_for_line("command failed (attempt 2)", WAIT_S, start=mark)
    # Past the task's due time, the database still read-only: nothing fired.
    assert event_consumer.collect(1, timeout_s=max(0.0, (due_ms + 1000 - now_ms()) / 1000)) == []
    assert client.replies_pending(0.1) == 0  # neither answered...
    assert client.depth(f"{amqp_names.commands}.dead") == 0  # ...nor dead-lettered
    assert daemon.alive(), daemon.tail()
    assert READ_ONLY_REASON in _reasons(daemon)

    server.execute("SET GLOBAL read_only = OFF")
    writable_ms = now_ms()
    reply = client.reply(correlation_id, WAIT_S).json()
    assert reply["ok"] is True and reply["created"] is True, reply
    replied_ms = now_ms()
    [event] = event_consumer.collect(1, timeout_s=WAIT_S)
    assert event.message_id == "due-meanwhile"
    assert fired_ms(event) >= due_ms  # late, never early
    wait_for(lambda: _readyz(daemon).status_code == 200, WAIT_S, daemon.tail)
    report(
        f"writable again at +0: command applied at +{replied_ms - writable_ms} ms, the task "
        f"due meanwhile fired at +{fired_ms(event) - writable_ms} ms "
        f"({fired_ms(event) - due_ms} ms late), ready at +{now_ms() - writable_ms} ms or sooner"
    )
    assert event_consumer.drain_quiet(0.5) == []  # once
    with TaskTable(app_url) as table:
        assert table.ids() == {"by-command"}  # the 503 wrote nothing
    assert daemon.count("database read-only: (1290", start=mark) > 0, daemon.tail()
    assert daemon.terminate() == 0, daemon.tail()
    assert daemon.count("Traceback") == 0, daemon.tail()
