"""One instance name, one live process (R1 of docs/design/ownership.md), with
real processes on one database.

* A second process started under the name of a live one exits 2 at start-up,
  with one clear line on stderr naming the host and pid that hold the name
  and no traceback; the first keeps its name and its shards and keeps firing.
* A graceful stop gives the name up at once: a new process under it starts
  right away (it does not wait for the old heartbeat to run out) and fires.
* A process paused (SIGSTOP) past its lease whose name another process took
  over meanwhile exits 1 as soon as it wakes; the new holder keeps the name
  and every shard, and fires.
* A process killed with SIGKILL and started again at once under its fixed
  name takes the name over (its holder is gone from this host) instead of
  exiting 2, becomes ready and fires.
"""

from __future__ import annotations

import re
import time

import pytest
from support.amqp import AmqpNames, EventConsumer
from support.daemon import (
    FAST_SETTINGS,
    DaemonGroup,
    TaskTable,
    collect_ids,
    daemon_env,
    duplicates,
    missing_ids,
    report,
    schedule_tasks,
    spread,
)
from support.ownership import SHARD_COUNT, db_now_ms
from support.waiting import now_ms, wait_for

LEASE_MS = int(FAST_SETTINGS["shard_lease_ms"])
REFUSAL = re.compile(
    r"^triggerhook: error: instance name '(?P<name>[^']+)' is in use by a live process on "
    r"host '(?P<host>[^']+)', pid (?P<pid>\d+)"
)
NAME_LOST = "another process took over the instance name"
TOOK_OVER = "took over instance name"
NO_HTTP: dict[str, int | str] = {"http_enabled": "false"}  # not needed: one port less to collide


def owns_everything(table: TaskTable, name: str) -> bool:
    return table.owner_counts() == {name: SHARD_COUNT}


def fire_some(
    consumer: EventConsumer, database_url: str, prefix: str, count: int = 30
) -> list[str]:
    """Schedule ``count`` tasks due within 0.5-1.5 s; all must fire exactly once."""
    start = now_ms()
    tasks = spread(prefix, count, start + 500, start + 1500)
    schedule_tasks(database_url, tasks)
    events = collect_ids(consumer, dict(tasks), timeout_s=15, quiet_s=0.5)
    assert not missing_ids(dict(tasks), events), sorted(missing_ids(dict(tasks), events))
    assert not duplicates(events), duplicates(events)
    return [task_id for task_id, _ in tasks]


@pytest.mark.slow
def test_a_second_process_under_a_live_name_refuses_to_start(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    started = time.monotonic()
    first = daemons.start(
        daemon_env(database_url, amqp_url, amqp_names.exchange, "twin", **NO_HTTP), "twin-1"
    )
    first.wait_ready()
    wait_for(lambda: owns_everything(table, "twin"), 10, lambda: str(table.owner_counts()))
    heartbeat_before = table.members()["twin"]

    # Tasks coming due while the second process tries to start.
    begin = now_ms()
    tasks = spread("during", 40, begin + 1000, begin + 3000)
    schedule_tasks(database_url, tasks)

    refused_at = time.monotonic()
    second = daemons.start(
        daemon_env(database_url, amqp_url, amqp_names.exchange, "twin", **NO_HTTP), "twin-2"
    )
    code = second.wait_exit(30)
    refused_s = time.monotonic() - refused_at
    stderr = second.lines
    assert code == 2, f"the second process exited {code}, not 2\n{second.tail()}"
    errors = [line for line in stderr if line.startswith("triggerhook: error:")]
    assert len(errors) == 1, f"expected one error line\n{second.tail()}"
    match = REFUSAL.match(errors[0])
    assert match is not None, f"unclear refusal: {errors[0]!r}"
    assert match["name"] == "twin" and int(match["pid"]) == first.pid, errors[0]
    assert not any("Traceback" in line for line in stderr), second.tail()
    assert second.count("engine started") == 0, second.tail()

    # The first keeps its name and every shard, and fires what came due.
    events = collect_ids(event_consumer, dict(tasks), timeout_s=15, quiet_s=0.5)
    assert not missing_ids(dict(tasks), events), sorted(missing_ids(dict(tasks), events))
    assert not duplicates(events), duplicates(events)
    assert first.alive(), first.tail()
    assert table.members().keys() == {"twin"}
    assert table.members()["twin"] >= heartbeat_before  # still renewed by the first
    assert owns_everything(table, "twin"), table.owner_counts()
    assert first.count(NAME_LOST) == 0 and first.count("lost shard") == 0, first.tail()
    fire_some(event_consumer, database_url, "after")

    # A graceful stop frees the name at once: the next process under it starts
    # without waiting for the old heartbeat to run out.
    assert first.terminate() == 0, first.tail()
    stopped_ms = db_now_ms(table)
    assert "twin" not in table.members(), f"the name is still held: {table.members()}"
    assert table.owner_counts() == {None: SHARD_COUNT}, table.owner_counts()
    third = daemons.start(
        daemon_env(database_url, amqp_url, amqp_names.exchange, "twin", **NO_HTTP), "twin-3"
    )
    third.wait_ready()
    ready_ms = db_now_ms(table)
    assert third.count(TOOK_OVER) == 0, third.tail()  # a free name, not an expired one
    wait_for(lambda: owns_everything(table, "twin"), 10, lambda: str(table.owner_counts()))
    fire_some(event_consumer, database_url, "third")
    assert third.terminate() == 0, third.tail()
    for daemon in (first, third):
        assert daemon.count("Traceback") == 0, daemon.tail()
    report(
        f"instance name twice: the second process exited 2 after {refused_s:.1f} s; after the "
        f"first stopped, a new process under the name was ready {ready_ms - stopped_ms} ms "
        f"later (lease {LEASE_MS} ms); {time.monotonic() - started:.1f} s in all"
    )


@pytest.mark.slow
def test_a_process_whose_name_was_taken_over_while_paused_exits_on_waking(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    started = time.monotonic()
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "sleeper", **NO_HTTP)
    old = daemons.start(env, "sleeper-old")
    old.wait_ready()
    wait_for(lambda: owns_everything(table, "sleeper"), 10, lambda: str(table.owner_counts()))
    old_epochs = {s: e for s, (_, e, _) in table.shards().items()}

    old.pause()
    paused_ms = db_now_ms(table)
    # Past the heartbeat and every lease, by the database's clock.
    wait_for(
        lambda: (
            db_now_ms(table)
            > max(table.members()["sleeper"], *(u for _, _, u in table.shards().values()))
        ),
        LEASE_MS / 1000 + 5,
        "the paused process's heartbeat and leases never ran out",
    )
    new = daemons.start(
        daemon_env(database_url, amqp_url, amqp_names.exchange, "sleeper", **NO_HTTP), "new"
    )
    new.wait_ready()
    new.wait_for_line(TOOK_OVER, 5)
    # Under the same name, but every shard at a new epoch: the old process's
    # leases are fenced off.
    wait_for(
        lambda: (
            owns_everything(table, "sleeper")
            and all(e > old_epochs[s] for s, (_, e, _) in table.shards().items())
            and min(u for _, _, u in table.shards().values()) > db_now_ms(table)
        ),
        10,
        lambda: f"the new process did not take every shard: {table.shards()}",
    )
    assert old.stopped(), old.tail()

    woke_at = time.monotonic()
    paused_for_ms = db_now_ms(table) - paused_ms
    old.resume()
    code = old.wait_exit(LEASE_MS / 1000 + 10)
    exit_s = time.monotonic() - woke_at
    assert code == 1, f"the paused process exited {code} on waking, not 1\n{old.tail()}"
    assert old.count(NAME_LOST) >= 1, old.tail()

    # The new holder kept the name and the shards, and fires.
    assert new.alive(), new.tail()
    assert new.count(NAME_LOST) == 0, new.tail()
    assert table.members().keys() == {"sleeper"}
    assert table.members()["sleeper"] > db_now_ms(table), "the new holder's heartbeat lapsed"
    assert owns_everything(table, "sleeper"), table.owner_counts()
    fire_some(event_consumer, database_url, "woken")
    assert new.terminate() == 0, new.tail()
    assert new.count("Traceback") == 0, new.tail()
    traceback = old.count("Traceback") > 0
    report(
        f"name taken over while paused: paused {paused_for_ms} ms (lease {LEASE_MS} ms); "
        f"exited {code} {exit_s:.2f} s after SIGCONT"
        f"{' (with a traceback in its log)' if traceback else ''}; "
        f"{time.monotonic() - started:.1f} s in all"
    )


@pytest.mark.slow
def test_a_process_killed_with_sigkill_restarts_at_once_under_its_fixed_name(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    # The default lease (10 s), so that the killed process's heartbeat is
    # surely still live when its successor starts (before R1's takeover that
    # successor exited 2: "instance name ... is in use by a live process").
    lease_ms = 10_000
    env = daemon_env(
        database_url, amqp_url, amqp_names.exchange, "phoenix", shard_lease_ms=lease_ms, **NO_HTTP
    )
    first = daemons.start(env, "phoenix-1")
    first.wait_ready()
    wait_for(lambda: owns_everything(table, "phoenix"), 15, lambda: str(table.owner_counts()))
    assert first.kill9() == -9
    restarted_at = time.monotonic()
    assert table.members()["phoenix"] > db_now_ms(table), "the killed holder's heartbeat expired"

    second = daemons.start(env, "phoenix-2")
    second.wait_ready(lease_ms / 1000 + 20)
    ready_s = time.monotonic() - restarted_at
    took = second.wait_for_line(TOOK_OVER, 1)
    assert f"from pid {first.pid}" in took and "gone from this host" in took, took
    assert second.alive() and second.count("is in use by a live process") == 0, second.tail()
    # Half a lease at most after the last renewal, plus the start of Python.
    assert ready_s < lease_ms / 2000 + 10, f"ready only after {ready_s:.1f} s"
    assert table.members().keys() == {"phoenix"}
    assert table.members()["phoenix"] > db_now_ms(table)

    # The dead process's shards come free after their lease: taken, and fired from.
    wait_for(
        lambda: owns_everything(table, "phoenix"),
        lease_ms / 1000 + 15,
        lambda: str(table.owner_counts()),
    )
    fire_some(event_consumer, database_url, "reborn")
    assert second.terminate() == 0, second.tail()
    assert second.count("Traceback") == 0, second.tail()
    report(
        f"kill -9 and restart under a fixed name: ready {ready_s:.1f} s after the kill "
        f"(lease {lease_ms} ms), the name taken over from the dead pid"
    )
