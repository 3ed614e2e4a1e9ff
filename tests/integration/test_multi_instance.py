"""Two daemon processes on one database and one exchange."""

from __future__ import annotations

import pytest
from support.amqp import AmqpNames, EventConsumer
from support.daemon import (
    ClaimSampler,
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
from support.waiting import now_ms, wait_for


@pytest.mark.slow
def test_two_daemons_fire_every_task_exactly_once(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    pair = [
        daemons.start(daemon_env(database_url, amqp_url, amqp_names.exchange, name), name)
        for name in ("alpha", "beta")
    ]
    for daemon in pair:
        daemon.wait_ready()

    start = now_ms()
    tasks = spread("x", 2000, start + 1000, start + 4000)
    with ClaimSampler(database_url) as sampler:
        schedule_tasks(database_url, tasks)
        events = collect_ids(event_consumer, dict(tasks), timeout_s=30, quiet_s=1.0)
    report(
        f"two daemons: {len(events)} events for {len(tasks)} tasks; claims held by "
        f"{sorted(sampler.seen)}"
    )

    assert not missing_ids(dict(tasks), events), sorted(missing_ids(dict(tasks), events))[:10]
    extra = duplicates(events)
    assert not extra, f"{sum(extra.values())} duplicates, e.g. {sorted(extra)[:10]}"
    assert len(events) == len(tasks)
    assert sampler.seen == {"alpha", "beta"}, "both daemons should have claimed tasks"
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    for daemon in pair:
        assert daemon.alive(), daemon.tail()
        assert daemon.terminate() == 0


@pytest.mark.slow
def test_survivor_fires_the_tasks_of_a_killed_daemon_after_its_lease(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    # claim_lease_ms must exceed preload_window_ms (Settings), so the window is
    # just under the 2 s lease; tasks due 3-4 s ahead enter it while both run.
    settings: dict[str, int | str] = {"preload_window_ms": 1900, "claim_lease_ms": 2000}
    victim, survivor = (
        daemons.start(
            daemon_env(database_url, amqp_url, amqp_names.exchange, name, **settings), name
        )
        for name in ("victim", "survivor")
    )
    victim.wait_ready()
    survivor.wait_ready()

    start = now_ms()
    tasks = spread("s", 1000, start + 3000, start + 4000)
    due = dict(tasks)
    schedule_tasks(database_url, tasks)
    wait_for(
        lambda: min(table.claimed_by_counts().get(n, 0) for n in ("victim", "survivor")) >= 100,
        10,
        lambda: f"claims: {table.claimed_by_counts()}",
        interval_s=0.01,
    )

    kill_ms = now_ms()
    assert victim.kill9() == -9
    claims = table.claims()
    leases = {k: until for k, (by, until, _) in claims.items() if by == "victim"}
    assert leases, "the killed daemon held no claims"

    events = collect_ids(event_consumer, due, timeout_s=30, quiet_s=1.0)
    assert not missing_ids(due, events), sorted(missing_ids(due, events))[:10]
    # The survivor took over a dead claim only after it expired.
    early = [
        e.message_id
        for e in events
        if e.message_id in leases and kill_ms <= fired_ms(e) <= leases[e.message_id]
    ]
    assert not early, f"fired before the dead claim expired: {early[:10]}"
    assert all(fired_ms(e) >= due[e.message_id or ""] for e in events)

    extra = duplicates(events)
    in_flight = set(claims) & {
        e.message_id for e in events if e.message_id and fired_ms(e) < kill_ms
    }
    report(
        f"kill one of two: victim held {len(leases)} of {len(tasks)} tasks; "
        f"{len(events)} events, {sum(extra.values())} duplicates"
    )
    assert set(extra) <= in_flight, sorted(set(extra) - in_flight)[:10]
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert survivor.alive(), survivor.tail()
    assert survivor.terminate() == 0
