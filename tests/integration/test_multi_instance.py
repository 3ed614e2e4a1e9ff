"""Several daemon processes on one database: shards shared fairly, a crash
taken over after the lease, instances joining and leaving under load
(docs/design/ownership.md, R1-R4).

Each daemon publishes to its own exchange (the test consumes them all), so
every event says which instance published it; a thread samples ``th_shards``
with the database's time, so the test knows who held which shard when. Every
test checks, besides its own claims: every task received, none before its
due time (by the receipt stamp and by ``x-fired-ms``), and every event
published within a lease its publisher held on the task's shard (R4).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence

import pytest
from support.amqp import AmqpNames
from support.daemon import (
    FAST_SETTINGS,
    Daemon,
    DaemonGroup,
    TaskTable,
    daemon_env,
    report,
    schedule_tasks,
    spread,
)
from support.ownership import (
    EventLog,
    ShardWatch,
    Tally,
    armed_in_shards_of,
    balanced,
    db_now_ms,
    instance_names,
    owned_by,
    shards_of,
    task_shard,
    unfenced,
)
from support.waiting import wait_for

LEASE_MS = int(FAST_SETTINGS["shard_lease_ms"])
REBALANCE_S = 15  # a generous bound on a rebalance (measured: ~1-2 s)
QUIET_S = LEASE_MS / 1000 + 0.5  # after the last expected event: late copies come by then


def start(
    daemons: DaemonGroup,
    names: dict[str, AmqpNames],
    database_url: str,
    amqp_url: str,
    instance: str,
) -> Daemon:
    # No HTTP API: not needed here, and one port less to collide.
    env = daemon_env(
        database_url, amqp_url, names[instance].exchange, instance, http_enabled="false"
    )
    return daemons.start(env, instance)


def wait_balanced(watch: ShardWatch, instances: Sequence[str], since_ms: int, what: str) -> int:
    """Wait until the shards are shared fairly among ``instances`` (and only
    them); the time (database ms) that first held after ``since_ms``."""
    at = watch.wait_for(lambda owners: balanced(owners, instances), REBALANCE_S, since_ms)
    assert at is not None, f"{what}: shards never balanced over {instances}: {watch.counts()}"
    return at


def check_events(tally: Tally, watch: ShardWatch) -> None:
    problems = tally.problems()
    wrong = unfenced(tally.events, watch)
    if wrong:
        problems.append(f"{len(wrong)} events published without a lease: {wrong[:5]}")
    assert not problems, "\n".join(problems)


def stop_all(daemons: Sequence[Daemon], table: TaskTable) -> None:
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    for daemon in daemons:
        assert daemon.alive(), daemon.tail()
        assert daemon.terminate() == 0, daemon.tail()
        assert daemon.count("Traceback") == 0, daemon.tail()


@pytest.mark.slow
def test_two_instances_share_the_shards_and_fire_each_task_once(
    database_url: str, amqp_url: str, table: TaskTable, daemons: DaemonGroup
) -> None:
    started = time.monotonic()
    pair = ["alpha", "beta"]
    with (
        instance_names(amqp_url, pair) as names,
        EventLog(amqp_url, names) as log,
        ShardWatch(database_url) as watch,
    ):
        alpha = start(daemons, names, database_url, amqp_url, "alpha")
        alpha.wait_ready()
        beta = start(daemons, names, database_url, amqp_url, "beta")
        beta.wait_for_line("engine started", 20)
        joined = db_now_ms(table)
        fair = wait_balanced(watch, pair, joined, "beta joined")
        beta.wait_ready()
        assert watch.counts() == {"alpha": 32, "beta": 32}, watch.counts()

        begin = db_now_ms(table)
        tasks = spread("x", 2000, begin + 1000, begin + 4000)
        due = dict(tasks)
        schedule_tasks(database_url, tasks)
        assert log.wait_ids(due, 30), (
            f"missing: {sorted(set(due) - {e.id for e in log.events()})[:10]}"
        )
        log.quiet(1.0)
        tally = Tally(due, log.events())
        report(
            f"two instances: shards 32/32 {fair - joined} ms after the second started; "
            f"{tally.summary()}; {time.monotonic() - started:.1f} s in all"
        )
        check_events(tally, watch)
        assert not tally.duplicated, (
            f"{tally.extra} duplicates, e.g. {sorted(tally.duplicated)[:10]}"
        )
        assert set(tally.by()) == set(pair), f"both should have fired tasks: {tally.by()}"
        # Each fired the tasks of its own shards.
        assert watch.counts() == {"alpha": 32, "beta": 32}, watch.counts()
        assert not watch.errors and not log.errors, (watch.errors, log.errors)
        stop_all([alpha, beta], table)


@pytest.mark.slow
def test_kill9_of_one_of_three_mid_burst(
    database_url: str, amqp_url: str, table: TaskTable, daemons: DaemonGroup
) -> None:
    started = time.monotonic()
    trio = ["victim", "left", "right"]
    survivors = trio[1:]
    with (
        instance_names(amqp_url, trio) as names,
        EventLog(amqp_url, names) as log,
        ShardWatch(database_url) as watch,
    ):
        running = {name: start(daemons, names, database_url, amqp_url, name) for name in trio}
        for daemon in running.values():
            daemon.wait_ready()
        wait_balanced(watch, trio, 0, "three started")

        begin = db_now_ms(table)
        tasks = spread("b", 3000, begin + 1500, begin + 5500)
        due = dict(tasks)
        schedule_tasks(database_url, tasks)
        # Mid-burst: a third of the tasks fired.
        assert log.wait(lambda evs: len(evs) >= 1000, 20), f"only {len(log)} events"
        running["victim"].signal(signal.SIGKILL)
        killed = db_now_ms(table)
        # What the victim may have had in flight: the rows armed in its shards
        # (nobody else can touch them until its leases end). Read at once, the
        # wait for its exit after: on CI's loaded machine that wait (then also
        # for its API process to close the log pipes) outlasted its leases.
        in_flight = armed_in_shards_of(table, "victim")
        held = shards_of(table, "victim")
        assert held, "the victim held no shards"
        lease_end = max(until for _, until in held.values())
        assert lease_end > db_now_ms(table), "the victim's leases ran out before they were read"
        assert running["victim"].kill9() == -9  # reaped
        fired_by_victim = sum(e.by == "victim" for e in log.events())

        taken = watch.wait_for(
            lambda owners: owned_by(owners, held, survivors), LEASE_MS / 1000 + 5, killed
        )
        assert taken is not None, (
            f"the victim's shards were not taken over within {LEASE_MS} ms + 5 s: {watch.counts()}"
        )
        assert log.wait_ids(due, 30), (
            f"missing: {sorted(set(due) - {e.id for e in log.events()})[:10]}"
        )
        log.quiet(QUIET_S)
        events = log.events()
        tally = Tally(due, events)
        victims_tasks = {i for i in due if task_shard(i) in held}
        late_victim = Tally({i: due[i] for i in victims_tasks}, events).lateness_ms()
        report(
            f"kill -9 of one of three: killed after {fired_by_victim} events by it, holding "
            f"{len(held)} shards and {len(in_flight)} armed rows; its shards taken over "
            f"{taken - killed} ms after the kill ({taken - lease_end:+d} ms from its lease end); "
            f"{tally.summary()}; worst lateness of its shards' tasks "
            f"{late_victim[-1] if late_victim else 0} ms; {time.monotonic() - started:.1f} s in all"
        )
        check_events(tally, watch)
        # Duplicates: only of what the victim had armed, each once by the
        # victim and once by the heir.
        unexpected = sorted(set(tally.duplicated) - in_flight)
        assert not unexpected, (
            f"{len(unexpected)} duplicates of tasks the victim had not armed: {unexpected[:10]}"
        )
        for task_id in tally.duplicated:
            copies = sorted(e.by == "victim" for e in events if e.id == task_id)
            assert copies == [False, True], (task_id, [e.by for e in events if e.id == task_id])
        assert all(e.fired_ms <= killed for e in events if e.by == "victim")
        assert taken - killed <= LEASE_MS + 5000
        wait_balanced(watch, survivors, taken, "after the kill")
        assert not watch.errors and not log.errors, (watch.errors, log.errors)
        stop_all([running[name] for name in survivors], table)


@pytest.mark.slow
def test_instances_join_and_leave_under_load(
    database_url: str, amqp_url: str, table: TaskTable, daemons: DaemonGroup
) -> None:
    started = time.monotonic()
    trio = ["one", "two", "three"]
    with (
        instance_names(amqp_url, trio) as names,
        EventLog(amqp_url, names) as log,
        ShardWatch(database_url) as watch,
    ):
        one = start(daemons, names, database_url, amqp_url, "one")
        one.wait_ready()
        wait_for(lambda: watch.counts() == {"one": 64}, 10, lambda: str(watch.counts()))

        # A steady stream: 200 tasks a second for 12 s.
        begin = db_now_ms(table)
        tasks = spread("s", 2400, begin + 1000, begin + 13000)
        due = dict(tasks)
        schedule_tasks(database_url, tasks)
        times: dict[str, int] = {}

        def at(offset_ms: int) -> None:
            wait_for(lambda: db_now_ms(table) >= begin + offset_ms, 30, "clock")

        at(2000)
        two = start(daemons, names, database_url, amqp_url, "two")
        two.wait_for_line("engine started", 20)
        joined = db_now_ms(table)
        times["second joined"] = wait_balanced(watch, trio[:2], joined, "two joined") - joined

        at(5000)
        three = start(daemons, names, database_url, amqp_url, "three")
        three.wait_for_line("engine started", 20)
        joined = db_now_ms(table)
        times["third joined"] = wait_balanced(watch, trio, joined, "three joined") - joined

        at(9000)
        two.signal(signal.SIGTERM)
        left = db_now_ms(table)
        rebalanced = wait_balanced(watch, ["one", "three"], left, "two left")
        times["second left"] = rebalanced - left
        assert two.wait_exit(20) == 0, two.tail()

        assert log.wait_ids(due, 30), (
            f"missing: {sorted(set(due) - {e.id for e in log.events()})[:10]}"
        )
        log.quiet(QUIET_S)
        tally = Tally(due, log.events())
        report(
            f"join and leave under load: shards rebalanced {times} ms after each change; "
            f"{tally.summary()}; {time.monotonic() - started:.1f} s in all"
        )
        check_events(tally, watch)
        assert not tally.duplicated, (
            f"{tally.extra} duplicates (a graceful handover must have none), e.g. "
            f"{sorted(tally.duplicated)[:10]}"
        )
        assert set(tally.by()) == set(trio), f"all three should have fired: {tally.by()}"
        assert two.count("Traceback") == 0, two.tail()
        assert not watch.errors and not log.errors, (watch.errors, log.errors)
        stop_all([one, three], table)
