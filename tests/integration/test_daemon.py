"""The daemon (``python -m triggerhook run``) as a separate process: firing,
graceful stop on SIGTERM, a second SIGTERM during a stop, and what its
readiness answers and its log let out."""

from __future__ import annotations

import contextlib
import logging
import secrets
import signal
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer
from support.daemon import (
    DaemonGroup,
    TaskTable,
    base_env,
    closed_port,
    daemon_env,
    fired_ms,
    run_cli,
    schedule_tasks,
    settings_env,
    spread,
)
from support.mysql import connect
from support.tcpproxy import proxied
from support.waiting import now_ms, wait_for

from triggerhook import Settings
from triggerhook.wiring import build_daemon

SIGTERM_EXIT = 128 + 15  # the CLI's os._exit(128 + signum) on a second signal


def test_daemon_fires_tasks_with_the_documented_wire_format(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    daemon = daemons.start(daemon_env(database_url, amqp_url, amqp_names.exchange, "wire"))
    daemon.wait_ready()

    start = now_ms()
    tasks = spread("wire", 20, start + 300, start + 1300)
    schedule_tasks(database_url, tasks, payload=b"\x00body\xff")
    due = dict(tasks)

    events = event_consumer.collect(len(tasks), timeout_s=15)
    assert sorted(e.message_id or "" for e in events) == sorted(due)
    for event in events:
        assert event.message_id is not None
        assert event.routing_key == "triggerhook.fire"
        assert event.body == b"\x00body\xff"
        assert event.delivery_mode == 2
        due_ms = due[event.message_id]
        assert event.headers["x-due-ms"] == due_ms
        assert fired_ms(event) >= due_ms
        assert event.timestamp == fired_ms(event) // 1000
    wait_for(lambda: table.count() == 0, 10, lambda: f"rows left: {table.ids()}")
    assert event_consumer.drain_quiet(0.3) == []

    assert daemon.terminate() == 0
    assert daemon.count("Traceback") == 0


def test_run_init_db_creates_the_schema_and_cli_schedules_into_a_running_daemon(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    daemons: DaemonGroup,
) -> None:
    """``run --init-db`` on an empty database; ``schedule`` from another process."""
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "initdb")
    daemon = daemons.start(env, "initdb", "--init-db")
    daemon.wait_ready()

    cli = {**base_env(), **settings_env(database_url=database_url)}
    result = run_cli(["schedule", "--id", "cli-task", "--in", "500ms", "--routing-key", "a.b"], cli)
    assert result.returncode == 0, result.stderr

    (event,) = event_consumer.collect(1, timeout_s=10)
    assert (event.message_id, event.routing_key, event.body) == ("cli-task", "a.b", b"")
    with TaskTable(database_url) as table:
        wait_for(lambda: table.count() == 0, 10, "the fired task's row was not deleted")
    daemon.signal(signal.SIGINT)  # Ctrl-C stops as gracefully as SIGTERM
    assert daemon.wait_exit(10) == 0
    daemon.wait_for_line("signal SIGINT: stopping gracefully", 1)


def test_run_refuses_a_database_without_schema(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    daemon = daemons.start(daemon_env(database_url, amqp_url, amqp_names.exchange, "noschema"))
    assert daemon.wait_exit(30) == 2
    output = "\n".join(daemon.lines)
    assert "db init" in output
    assert "Traceback" not in output


def test_sigterm_stops_gracefully_and_releases_shards_and_name(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    # A shard lease (and heartbeat) much longer than the test shows the stop
    # released the shards and the instance name: its successor, under the same
    # name, starts at once and fires the far tasks on time.
    settings: dict[str, int | str] = {"shard_lease_ms": 60_000, "shutdown_timeout_s": 5}
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "stopper", **settings)
    daemon = daemons.start(env, "stopper")
    daemon.wait_ready()
    daemon.wait_for_line("acquired 64 shards", 10)

    start = now_ms()
    near = spread("near", 20, start + 300, start + 1300)
    far = spread("far", 10, start + 6000, start + 6500)
    schedule_tasks(database_url, near + far)
    far_ids = {task_id for task_id, _ in far}

    events = event_consumer.collect(len(near), timeout_s=15)
    assert sorted(e.message_id or "" for e in events) == sorted(t for t, _ in near)
    wait_for(lambda: table.ids() == far_ids, 10, lambda: f"rows: {table.ids()}")
    assert table.owner_counts() == {"stopper": 64}
    assert set(table.members()) == {"stopper"}

    mark = daemon.mark()
    began = time.monotonic()
    code = daemon.terminate(timeout_s=5 + 5)
    stop_s = time.monotonic() - began
    assert code == 0, daemon.tail()
    assert stop_s < 5, f"graceful stop took {stop_s:.1f}s (shutdown_timeout_s=5)"
    daemon.wait_for_line("released 64 shards", 1, start=mark)

    # Every shard released, the name given up; nothing armed, nothing fired.
    assert table.owner_counts() == {None: 64}
    assert {lease for _, _, lease in table.shards().values()} == {0}
    assert table.members() == {}
    assert table.ids() == far_ids
    assert table.armed_ids() == set()
    assert event_consumer.drain_quiet(0.3) == []

    # The same name again, at once (not refused as in use), firing them on
    # time: released shards are not waiting for the (60 s) lease to expire.
    successor = daemons.start(env, "successor")
    late = event_consumer.collect(len(far), timeout_s=(start + 6500 - now_ms()) / 1000 + 10)
    assert sorted(e.message_id or "" for e in late) == sorted(far_ids)
    due = dict(far)
    for event in late:
        assert event.message_id is not None
        assert fired_ms(event) >= due[event.message_id]
    wait_for(lambda: table.count() == 0, 10, lambda: f"rows left: {table.ids()}")
    assert successor.count("in use") == 0, successor.tail()
    assert successor.terminate() == 0


def test_stop_publishes_the_armed_tasks_at_their_due_time(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    """Armed tasks are committed to fire: a stop requested before they are due
    still publishes each of them (not early), then deletes the rows."""
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "armed", arm_ahead_ms=1000)
    daemon = daemons.start(env, "armed")
    daemon.wait_ready()
    start = now_ms()
    tasks = spread("armed", 10, start + 1500, start + 1600)
    schedule_tasks(database_url, tasks)

    wait_for(
        lambda: table.armed_ids() == {t for t, _ in tasks},
        10,
        lambda: f"not all armed: {table.armed_ids()}",
        interval_s=0.01,
    )
    assert now_ms() < start + 1500, "too slow to stop before the tasks were due"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(10) == 0

    events = event_consumer.drain_quiet(0.5)
    assert sorted(e.message_id or "" for e in events) == sorted(t for t, _ in tasks)
    due = dict(tasks)
    assert all(fired_ms(e) >= due[e.message_id or ""] for e in events)
    assert table.count() == 0
    assert table.owner_counts() == {None: 64}


def test_stop_is_bounded_by_shutdown_timeout_when_the_broker_is_unreachable(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    """An armed task that cannot be published: the stop gives up after
    shutdown_timeout_s, exits 0, releases the shards; the row stays armed and
    the next owner of its shard inherits it and fires it (at-least-once)."""
    dead_amqp = f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F"
    env = daemon_env(database_url, dead_amqp, amqp_names.exchange, "nobroker", shutdown_timeout_s=1)
    daemon = daemons.start(env, "nobroker")
    daemon.wait_for_line("engine started", 20)
    daemon.wait_for_line("cannot connect to RabbitMQ", 20)

    schedule_tasks(database_url, [("stuck", now_ms() + 200)])
    wait_for(lambda: table.armed_ids() == {"stuck"}, 10, "never armed")

    began = time.monotonic()
    assert daemon.terminate(timeout_s=10) == 0
    stop_s = time.monotonic() - began
    assert stop_s < 1 + 2.5, f"stop took {stop_s:.1f}s with shutdown_timeout_s=1"
    daemon.wait_for_line("stopped with unpublished tasks", 1)
    assert table.owner_counts() == {None: 64}
    assert table.members() == {}
    assert table.armed_ids() == {"stuck"}  # still committed to fire

    successor = daemons.start(
        daemon_env(database_url, amqp_url, amqp_names.exchange, "rescuer"), "rescuer"
    )
    (event,) = event_consumer.collect(1, timeout_s=15)
    assert event.message_id == "stuck"
    successor.wait_for_line("firing 1 tasks armed by the shard's previous owner", 5)
    wait_for(lambda: table.count() == 0, 10, "the fired task's row was not deleted")
    assert successor.terminate() == 0


def test_second_sigterm_during_a_stop_exits_at_once(
    database_url: str,
    amqp_names: AmqpNames,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    # The broker is unreachable and a task is armed, so a graceful stop would
    # wait the whole (long) shutdown timeout for its publish.
    dead_amqp = f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F"
    env = daemon_env(
        database_url, dead_amqp, amqp_names.exchange, "impatient", shutdown_timeout_s=120
    )
    daemon = daemons.start(env, "impatient")
    daemon.wait_for_line("engine started", 20)
    schedule_tasks(database_url, [("pending", now_ms() + 200)])
    wait_for(lambda: table.armed_ids() == {"pending"}, 10, "never armed")

    daemon.signal(signal.SIGTERM)
    daemon.wait_for_line("stopping gracefully", 10)
    assert daemon.alive()

    began = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait_exit(5) == SIGTERM_EXIT
    assert time.monotonic() - began < 5
    daemon.wait_for_line("second signal", 1)
    # Nothing was released (the leases let another instance take over later):
    # the shards and the name are still held, the task still armed.
    assert table.owner_counts() == {"impatient": 64}
    assert set(table.members()) == {"impatient"}
    assert table.armed_ids() == {"pending"}
    assert daemon.count("released") == 0, daemon.tail()


def test_daemon_exits_non_zero_when_a_thread_cannot_recover(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    """A permanent error (the tasks table is gone) must not leave a wedged daemon:
    it logs the cause and exits with status 1, for a supervisor to act on."""
    daemon = daemons.start(daemon_env(database_url, amqp_url, amqp_names.exchange, "doomed"))
    daemon.wait_ready()
    table.query("DROP TABLE th_task_tags, th_tasks")  # the tags' foreign key needs both

    assert daemon.wait_exit(timeout_s=15) == 1
    assert daemon.count("has no triggerhook tables") >= 1, daemon.tail()
    assert daemon.count("exiting after a fatal engine failure") == 1, daemon.tail()


# -- what the daemon lets out: readiness reasons and log lines ------------------------------


def _readyz(port: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30)


def test_readyz_names_an_unreachable_database_without_its_error_text(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, table: TaskTable, daemons: DaemonGroup
) -> None:
    """/readyz (public, unauthenticated) says which dependency fails and how,
    never the driver's error text (host names, ports); that detail goes to the
    log at WARNING, once however often /readyz is probed."""
    with proxied(database_url) as (proxy, via_proxy_url):
        env = daemon_env(via_proxy_url, amqp_url, amqp_names.exchange, "dbdown")
        daemon = daemons.start(env, "dbdown")
        daemon.wait_ready()
        port = env["TRIGGERHOOK_HTTP_PORT"]
        wait_for(lambda: _readyz(port).status_code == 200, 10, daemon.tail)

        mark = daemon.mark()
        proxy.cut()
        unready: list[httpx.Response] = []

        def probe_unready() -> bool:
            answer = _readyz(port)
            if answer.status_code == 503:
                unready.append(answer)
            return len(unready) >= 6

        wait_for(probe_unready, 30, daemon.tail)
        for answer in unready:
            body = answer.json()
            assert body["status"] == "unready" and len(body["reasons"]) == 1, body
            assert body["reasons"][0].startswith("mysql: "), body
            for detail in ("127.0.0.1", str(proxy.port), "Errno", "connect", "MySQL", "(20"):
                assert detail not in answer.text, answer.text
        detail = daemon.wait_for_line("readiness: mysql: unreachable:", 5, start=mark)
        assert "WARNING" in detail and "database unavailable" in detail, detail
        assert daemon.count("readiness: mysql: unreachable:", start=mark) == 1, daemon.tail()

        proxy.restore()
        wait_for(lambda: _readyz(port).status_code == 200, 30, daemon.tail)
        assert daemon.terminate() == 0, daemon.tail()


@pytest.mark.parametrize("case", ["unreachable", "no-schema"])
def test_readiness_reasons_name_the_dependency_and_its_kind_of_failure(
    case: str, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Service.readiness (what /readyz and the READY decision use), in process
    against the real server: a fixed reason per kind of failure, the raw error
    logged at WARNING once however often it is asked."""
    url = f"mysql+pymysql://root:@127.0.0.1:{closed_port()}/th_x"
    if case == "no-schema":
        url = database_url  # exists, empty: no tables
    expected = {
        "unreachable": "mysql: unreachable",
        "no-schema": "mysql: schema missing or not current (`triggerhook db status` says which)",
    }[case]
    # In one process (api_processes = 0): the readiness that checks the store
    # itself (an API process's does the same; a daemon test covers that one).
    settings = Settings(database_url=url, instance_id="probe", http_enabled=False, api_processes=0)
    service = build_daemon(settings)
    hook = service.hook
    try:
        with caplog.at_level(logging.WARNING, logger="triggerhook.service"):
            answers = [service.readiness() for _ in range(3)]
    finally:
        hook.close()
    for reasons in answers:
        assert expected in reasons, reasons
        assert "engine: not running" in reasons, reasons  # never started
        assert all("127.0.0.1" not in r and "th_" not in r for r in reasons), reasons
    details = [r for r in caplog.records if r.getMessage().startswith("readiness: mysql:")]
    assert len(details) == 1, [r.getMessage() for r in caplog.records]
    assert details[0].levelno == logging.WARNING
    raw = "database unavailable" if case == "unreachable" else "db init"
    assert raw in details[0].getMessage(), details[0].getMessage()


@contextlib.contextmanager
def mysql_user(mysql_url: str, database: str, password: str) -> Iterator[str]:
    """A MariaDB user with ``password`` and every right on ``database``; dropped after."""
    user = f"th_{secrets.token_hex(4)}"
    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            for host in ("%", "localhost", "127.0.0.1"):
                cur.execute("CREATE USER %s@%s IDENTIFIED BY %s", (user, host, password))
                cur.execute(f"GRANT ALL ON `{database}`.* TO %s@%s", (user, host))
        yield user
    finally:
        with conn.cursor() as cur:
            for host in ("%", "localhost", "127.0.0.1"):
                cur.execute("DROP USER IF EXISTS %s@%s", (user, host))
        conn.close()


def test_no_password_from_a_url_reaches_the_log(
    mysql_url: str,
    database_url: str,
    amqp_names: AmqpNames,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    """Credentials in database_url (real ones), amqp_url (refused by the broker)
    and metrics_url (nothing listens): at DEBUG, through connection failures and
    a stop, the log shows each URL with its password masked, and never a password."""
    db_secret, amqp_secret, metrics_secret = (f"pw-{secrets.token_hex(8)}" for _ in range(3))
    parts = urlsplit(database_url)
    database = parts.path.lstrip("/")
    with mysql_user(mysql_url, database, db_secret) as user:
        settings: dict[str, int | str] = {
            "log_level": "DEBUG",
            "metrics_url": f"http://influx:{metrics_secret}@127.0.0.1:{closed_port()}",
            "metrics_interval_ms": 200,
            # The command consumer dies on the broker's refusal of bad credentials
            # (a pika connection-workflow AssertionError, a separate defect), which
            # would end the daemon; the publisher meets the same refusal and retries.
            "commands_enabled": "false",
        }
        env = daemon_env(
            f"mysql+pymysql://{user}:{db_secret}@{parts.netloc.rpartition('@')[2]}/{database}",
            f"amqp://guest:{amqp_secret}@127.0.0.1:5672/%2F",
            amqp_names.exchange,
            "secretive",
            **settings,
        )
        daemon = daemons.start(env, "secretive")
        daemon.wait_for_line("engine started", 20)  # the database credentials work
        writing = daemon.wait_for_line("metrics: writing to", 10)
        assert "http://influx:***@127.0.0.1:" in writing, writing
        down = daemon.wait_for_line("metrics: InfluxDB unavailable", 20)
        assert "influx:***@" in down, down
        daemon.wait_for_line("publishing failed", 20)  # the broker refused amqp_secret
        assert daemon.terminate() == 0, daemon.tail()

    output = "\n".join(daemon.lines + daemon.stdout_lines)
    for secret in (db_secret, amqp_secret, metrics_secret):
        assert secret not in output, daemon.tail(200)
