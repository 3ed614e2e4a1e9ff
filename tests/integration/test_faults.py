"""Fault injection against the real daemon process: kill -9, RabbitMQ stopped and
restarted, MariaDB unreachable for a few seconds. Events are at-least-once."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from support.amqp import AmqpNames, EventConsumer, Received
from support.daemon import (
    DaemonGroup,
    TaskTable,
    collect_ids,
    daemon_env,
    duplicates,
    fired_ms,
    missing_ids,
    report,
    schedule_tasks,
    spread,
)
from support.tcpproxy import proxied
from support.waiting import now_ms, wait_for

TASKS = 2000


def assert_fired_after_due(events: list[Received], due: dict[str, int]) -> None:
    early = [e.message_id for e in events if e.message_id and fired_ms(e) < due[e.message_id]]
    assert not early, f"fired before due: {early[:10]}"


def check_duplicates_after_kill(
    events: list[Received],
    rows_after_kill: set[str],
    restart_ms: int,
    total: int,
    label: str,
) -> None:
    """Only a task the killed run had published (an event fired before the restart)
    whose row it had not deleted yet may be delivered twice."""
    extra = duplicates(events)
    in_flight = rows_after_kill & {
        e.message_id for e in events if e.message_id and fired_ms(e) < restart_ms
    }
    report(
        f"{label}: {len(events)} events for {total} tasks, {sum(extra.values())} duplicates "
        f"({len(extra)} ids); {len(in_flight)} tasks were in flight at the kill"
    )
    assert set(extra) <= in_flight, sorted(set(extra) - in_flight)[:10]
    assert sum(extra.values()) <= len(in_flight)
    assert sum(extra.values()) < total


def kill_after_some_events(
    consumer: EventConsumer, daemons: DaemonGroup, env: dict[str, str], name: str
) -> list[Received]:
    """Start a daemon and kill -9 it once 300 events arrived; returns those."""
    daemon = daemons.start(env, name)
    first = consumer.collect(300, timeout_s=30)
    assert len(first) == 300, daemon.tail()
    assert daemon.kill9() == -9
    return first


@pytest.mark.slow
def test_kill9_then_restart_same_instance_fires_every_task(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    start = now_ms()
    tasks = spread("k", TASKS, start + 1500, start + 4500)
    schedule_tasks(database_url, tasks)
    due = dict(tasks)
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        "phoenix",
        preload_window_ms=2000,
        claim_lease_ms=60_000,  # the restart must not wait for it
    )

    first = kill_after_some_events(event_consumer, daemons, env, "phoenix-1")
    rows_after_kill = table.ids()
    assert rows_after_kill, "every task was done before the kill"
    assert table.claimed_by_counts().get("phoenix", 0) > 0, "the killed daemon held no claims"

    restart_ms = now_ms()
    second = daemons.start(env, "phoenix-2")
    # Its own claims from the killed run are taken back at once, not after the lease.
    second.wait_for_line("claims left by a previous run of this instance", 20)
    rest = collect_ids(event_consumer, rows_after_kill, timeout_s=30)
    events = first + rest

    assert not missing_ids(due, events), sorted(missing_ids(due, events))[:10]
    assert_fired_after_due(events, due)
    check_duplicates_after_kill(events, rows_after_kill, restart_ms, TASKS, "kill-9 same id")
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert second.terminate() == 0


@pytest.mark.slow
def test_kill9_then_another_instance_takes_over_after_the_lease(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    start = now_ms()
    tasks = spread("t", TASKS, start + 1500, start + 4500)
    schedule_tasks(database_url, tasks)
    due = dict(tasks)
    settings: dict[str, int | str] = {"preload_window_ms": 1500, "claim_lease_ms": 2000}

    first = kill_after_some_events(
        event_consumer,
        daemons,
        daemon_env(database_url, amqp_url, amqp_names.exchange, "doomed", **settings),
        "doomed",
    )
    claims_after_kill = table.claims()
    rows_after_kill = set(claims_after_kill)
    assert rows_after_kill, "every task was done before the kill"
    leases = {k: until for k, (by, until, _) in claims_after_kill.items() if by == "doomed"}
    assert leases, "the killed daemon held no claims"

    restart_ms = now_ms()
    heir = daemons.start(
        daemon_env(database_url, amqp_url, amqp_names.exchange, "heir", **settings), "heir"
    )
    rest = collect_ids(event_consumer, rows_after_kill, timeout_s=30)
    events = first + rest

    assert not missing_ids(due, events), sorted(missing_ids(due, events))[:10]
    assert_fired_after_due(events, due)
    # The heir fired a task the dead instance held only after that claim expired.
    early = [
        e.message_id
        for e in rest
        if e.message_id in leases and restart_ms <= fired_ms(e) <= leases[e.message_id]
    ]
    assert not early, f"fired by the heir before the dead claim expired: {early[:10]}"
    assert heir.count("left by a previous run") == 0
    check_duplicates_after_kill(events, rows_after_kill, restart_ms, TASKS, "kill-9 other id")
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert heir.terminate() == 0


def rabbitmqctl(*args: str, timeout_s: float = 120.0) -> None:
    result = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert result.returncode == 0, f"rabbitmqctl {' '.join(args)}: {result.stderr}"


@pytest.mark.slow
def test_rabbitmq_restart_while_tasks_come_due(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    daemon = daemons.start(daemon_env(database_url, amqp_url, amqp_names.exchange, "bunny"))
    daemon.wait_ready()

    start = now_ms()
    tasks = spread("r", 60, start + 2000, start + 8000)
    schedule_tasks(database_url, tasks)
    due = dict(tasks)

    mark = daemon.mark()
    down_ms = now_ms()
    try:
        rabbitmqctl("stop_app")
        daemon.wait_for_line(
            ("RabbitMQ connection closed", "cannot connect to RabbitMQ"), 10, start=mark
        )
        # Keep the broker down while the first tasks come due (the outage stays < 10 s).
        wait_for(lambda: now_ms() >= start + 3500, 10, "clock")
    finally:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")
    up_ms = now_ms()
    came_due_while_down = [t for t, d in tasks if down_ms <= d <= up_ms]
    assert came_due_while_down, "no task came due during the outage"
    daemon.wait_for_line("publishing to exchange", 30, start=mark)

    events = collect_ids(event_consumer, due, timeout_s=40)
    assert not missing_ids(due, events), sorted(missing_ids(due, events))
    assert_fired_after_due(events, due)
    report(
        f"rabbitmq restart: outage {(up_ms - down_ms) / 1000:.1f}s, "
        f"{len(came_due_while_down)} tasks came due during it; {len(events)} events for "
        f"{len(due)} tasks, {sum(duplicates(events).values())} duplicates"
    )
    assert daemon.alive(), daemon.tail()
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert daemon.terminate() == 0


def test_mysql_unreachable_for_a_few_seconds(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    with proxied(database_url) as (proxy, proxied_url):
        env = daemon_env(proxied_url, amqp_url, amqp_names.exchange, "flaky-db")
        daemon = daemons.start(env)
        daemon.wait_ready()

        start = now_ms()
        tasks = spread("m", 50, start + 1000, start + 6000)
        schedule_tasks(database_url, tasks)  # directly, not through the proxy
        due = dict(tasks)
        first = event_consumer.collect(3, timeout_s=10)
        assert len(first) == 3, daemon.tail()

        mark = daemon.mark()
        cut_ms = now_ms()
        outage_ends = time.monotonic() + 3.0
        proxy.cut()
        try:
            daemon.wait_for_line("retrying in", 3.0, start=mark)
            threading.Event().wait(max(0.0, outage_ends - time.monotonic()))  # the outage
            assert daemon.alive(), daemon.tail()
        finally:
            proxy.restore()
        restored_ms = now_ms()
        assert any(cut_ms <= d <= restored_ms for d in due.values()), "nothing came due"

        rest = set(due) - {e.message_id for e in first}
        events = first + collect_ids(event_consumer, rest, timeout_s=30)
        assert not missing_ids(due, events), sorted(missing_ids(due, events))
        assert_fired_after_due(events, due)
        report(
            f"mysql cut 3s: {len(events)} events for {len(due)} tasks, "
            f"{sum(duplicates(events).values())} duplicates"
        )
        wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
        daemon.wait_for_line("recovered after", 1, start=mark)
        assert daemon.alive(), daemon.tail()
        assert daemon.terminate() == 0
