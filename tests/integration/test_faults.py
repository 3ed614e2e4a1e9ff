"""Fault injection against the real daemon process: kill -9, RabbitMQ stopped and
restarted, MariaDB unreachable for a few seconds. Events are at-least-once.

On the shard protocol (docs/design/ownership.md): after kill -9 the shards
are taken over when their leases run out, by another instance or by a new
process under the same name (which can have the name only once the killed
one's heartbeat ran out, R1); the new owner fires again what the dead one had
armed, so a duplicate is only ever of a row armed in the dead one's shards
at the kill. A single instance cut off from MariaDB past its lease renews
its lapsed leases afterwards (nobody took them) and fires what waited.

The RabbitMQ test stops the shared broker: run this module alone, last."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from support.amqp import AmqpNames, EventConsumer, Received
from support.daemon import (
    FAST_SETTINGS,
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
from support.ownership import SHARD_COUNT, armed_in_shards_of, db_now_ms, shards_of
from support.tcpproxy import proxied
from support.waiting import now_ms, wait_for

TASKS = 2000
LEASE_MS = int(FAST_SETTINGS["shard_lease_ms"])
# Long enough that a restart's start-up (over 2 s on a loaded CI machine, where
# 4 s once let the heartbeat run out first) still comes while it holds.
RESTART_LEASE_MS = 10_000
REFUSED = "is in use by a live process"
TOOK_OVER = "took over instance name"


def assert_fired_after_due(events: list[Received], due: dict[str, int]) -> None:
    early = [
        e.message_id
        for e in events
        if e.message_id and (fired_ms(e) < due[e.message_id] or e.received_ms < due[e.message_id])
    ]
    assert not early, f"fired before due: {early[:10]}"


def check_duplicates_after_kill(
    events: list[Received],
    due: dict[str, int],
    in_flight: set[str],
    label: str,
    extra_text: str = "",
) -> None:
    """Only a task the killed run had armed (its row armed in the shards it
    held, at the kill: published perhaps, not deleted) may be delivered twice,
    and at most twice."""
    extra = duplicates(events)
    total = len(due)
    late = max(fired_ms(e) - due[e.message_id or ""] for e in events)
    report(
        f"{label}: {len(events)} events for {total} tasks, {sum(extra.values())} duplicates "
        f"({len(extra)} ids); {len(in_flight)} tasks were armed by the killed run at the kill"
        f"{extra_text}; worst x-fired-ms after due {late} ms"
    )
    assert set(extra) <= in_flight, sorted(set(extra) - in_flight)[:10]
    assert all(n == 1 for n in extra.values()), extra
    assert sum(extra.values()) < total


def kill_after_some_events(
    consumer: EventConsumer,
    daemons: DaemonGroup,
    env: dict[str, str],
    name: str,
    table: TaskTable,
) -> tuple[list[Received], set[str], dict[int, tuple[int, int]], int]:
    """Start a daemon and kill -9 it once 300 events arrived. Returns those
    events, the rows armed in its shards at the kill (what it may have had in
    flight), its shards then (shard -> (epoch, lease end)) and the kill's
    database time."""
    daemon = daemons.start(env, name)
    first = consumer.collect(300, timeout_s=30)
    assert len(first) == 300, daemon.tail()
    assert daemon.kill9() == -9
    killed = db_now_ms(table)
    instance = env["TRIGGERHOOK_INSTANCE_ID"]
    in_flight = armed_in_shards_of(table, instance)
    held = shards_of(table, instance)
    assert held, "the killed daemon held no shards"
    assert in_flight, "the killed daemon had nothing armed"
    return first, in_flight, held, killed


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
    # A longer lease than the tests' 2 s: the restart below must come while
    # the killed process's heartbeat still holds (a lease less a third), as
    # after systemd's RestartSec=5s at the default lease.
    env = daemon_env(
        database_url, amqp_url, amqp_names.exchange, "phoenix", shard_lease_ms=RESTART_LEASE_MS
    )

    first, in_flight, held, killed = kill_after_some_events(
        event_consumer, daemons, env, "phoenix-1", table
    )
    rows_after_kill = table.ids()
    assert rows_after_kill, "every task was done before the kill"
    assert len(held) == SHARD_COUNT

    # R1: the killed process's heartbeat still holds, but it is gone from this
    # host: a restart at once takes its name over (once the heartbeat missed a
    # renewal) instead of exiting 2 (before, systemd's RestartPreventExitStatus=2
    # then left the service down), and its shards once their leases ran out:
    # what the killed run had armed fires again.
    heartbeat_end = table.members()["phoenix"]
    second = daemons.start(env, "phoenix-2")
    took = second.wait_for_line(TOOK_OVER, 20)
    took_ms = db_now_ms(table)
    assert "gone from this host" in took, took
    assert took_ms < heartbeat_end, "the restart came after the heartbeat ran out"
    assert second.count(REFUSED) == 0, second.tail()
    rest = collect_ids(event_consumer, rows_after_kill, timeout_s=30)
    events = first + rest

    assert not missing_ids(due, events), sorted(missing_ids(due, events))[:10]
    assert_fired_after_due(events, due)
    lease_end = max(until for _, until in held.values())
    # Fired again: by the new process. Events the killed run published itself
    # before the kill (x-fired-ms <= killed) can arrive after the first 300
    # were collected, and are in ``rest`` too.
    taken = [fired_ms(e) for e in rest if e.message_id in in_flight and fired_ms(e) > killed]
    check_duplicates_after_kill(
        events,
        due,
        in_flight,
        "kill-9 same id",
        f"; the name taken over {took_ms - killed} ms after the kill (its heartbeat ran "
        f"until {heartbeat_end - killed} ms after it), the leases ran out {lease_end - killed} ms",
    )
    # Nothing the killed run had armed fired again before its leases ended.
    assert all(at > lease_end for at in taken), (min(taken), lease_end)
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert second.terminate() == 0
    assert second.count("Traceback") == 0, second.tail()


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

    first, in_flight, held, killed = kill_after_some_events(
        event_consumer,
        daemons,
        daemon_env(database_url, amqp_url, amqp_names.exchange, "doomed"),
        "doomed",
        table,
    )
    rows_after_kill = table.ids()
    assert rows_after_kill, "every task was done before the kill"
    lease_end = max(until for _, until in held.values())

    heir = daemons.start(daemon_env(database_url, amqp_url, amqp_names.exchange, "heir"), "heir")
    wait_for(
        lambda: table.owner_counts() == {"heir": SHARD_COUNT},
        LEASE_MS / 1000 + 20,
        lambda: f"the heir did not take every shard: {table.owner_counts()}",
    )
    taken = db_now_ms(table)
    rest = collect_ids(event_consumer, rows_after_kill, timeout_s=30)
    events = first + rest

    assert not missing_ids(due, events), sorted(missing_ids(due, events))[:10]
    assert_fired_after_due(events, due)
    # The heir fired nothing of the dead instance's shards before their leases
    # ended. (Events the dead instance published itself before the kill,
    # x-fired-ms <= killed, can arrive after the first 300 were collected.)
    early = [e.message_id for e in rest if killed < fired_ms(e) <= lease_end]
    assert not early, f"fired by the heir before the dead leases ended: {early[:10]}"
    assert heir.count(TOOK_OVER) == 0
    check_duplicates_after_kill(
        events,
        due,
        in_flight,
        "kill-9 other id",
        f"; the leases ended {lease_end - killed} ms after the kill, the heir held every "
        f"shard {taken - killed} ms after it",
    )
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert heir.terminate() == 0
    assert heir.count("Traceback") == 0, heir.tail()


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
        f"{len(due)} tasks, {sum(duplicates(events).values())} duplicates; worst x-fired-ms "
        f"after due {max(fired_ms(e) - due[e.message_id or ''] for e in events)} ms"
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
        late = sorted(fired_ms(e) - due[e.message_id or ""] for e in events)
        report(
            f"mysql cut 3s (longer than the {LEASE_MS} ms lease: nobody else takes it over, "
            f"the lapsed leases are renewed): {len(events)} events for {len(due)} tasks, "
            f"{sum(duplicates(events).values())} duplicates; x-fired-ms after due: median "
            f"{late[len(late) // 2]} ms, worst {late[-1]} ms"
        )
        wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
        daemon.wait_for_line("recovered after", 1, start=mark)
        assert daemon.alive(), daemon.tail()
        assert daemon.terminate() == 0
