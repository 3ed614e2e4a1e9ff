"""One of two instances cut off from the database for longer than its lease
(docs/design/ownership.md, R2, R4), with real processes under a steady load.

Instance A reaches MariaDB through a TCP proxy; B directly. Each publishes
to its own exchange, so every event says who published it (the events carry
no instance header), and a thread samples ``th_shards`` with the database's
time (A's leases as the database has them: A cannot renew while cut). A arms
further ahead than its lease lasts (``arm_ahead_ms`` 3 s), so at the cut it
holds armed tasks due after its leases end: exactly the copies it must not
publish (without R4 it would, at their due times).

What is asserted:

* B takes A's shards over once their leases ran out (within the lease plus
  a few seconds), inherits what A had armed and fires it.
* A publishes nothing of a shard after its lease on it ended: every event A
  published carries an ``x-fired-ms`` (its publish time, on the database's
  clock) within a lease A held on the task's shard, as sampled — in
  particular none of the cut-off epoch after that lease's end.
* After the cut heals A rejoins: its renewal is fenced (it drops the shards
  it lost, logged), and it gets its fair share back by B's graceful handover.
* Nothing is lost or early; duplicates only of what A had in flight at the
  cut (the rows armed in A's shards then: published, but the delete after
  the confirm could not reach the database), each once by A and once by B.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
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
from support.tcpproxy import TcpProxy, proxied
from support.waiting import wait_for

A, B = "cut-a", "steady-b"
LEASE_MS = int(FAST_SETTINGS["shard_lease_ms"])
CUT_AT_MS = 3000  # after the first task is due
A_ARM_AHEAD_MS = 3000  # A arms this far ahead: at the cut it holds tasks due past its lease
A_SETTINGS: dict[str, int | str] = {
    "arm_ahead_ms": A_ARM_AHEAD_MS,
    "http_enabled": "false",
    "commands_enabled": "false",
}
CUT_MIN_MS = LEASE_MS + 1500  # the cut lasts at least this long, and until B holds A's shards
TAKEOVER_S = LEASE_MS / 1000 + 5
QUIET_S = LEASE_MS / 1000 + 0.5


@dataclass
class Cut:
    """What the test saw of the cut (database times, ms)."""

    cut: int  # the proxy cut A off
    held: dict[int, tuple[int, int]]  # A's shards then: shard -> (epoch, lease end)
    in_flight: set[str]  # the rows armed in A's shards then
    taken: int  # B held every one of them
    healed: int  # the proxy forwarded again
    rejoined: int  # the shards were shared fairly again

    @property
    def lease_end(self) -> int:
        return max(until for _, until in self.held.values())


def sessions_from(table: TaskTable, ports: set[int]) -> list[int]:
    """Ids of the server's sessions connected from these local ports."""
    rows = table.query("SELECT ID, HOST FROM information_schema.PROCESSLIST")
    return [int(r[0]) for r in rows if str(r[1]).rsplit(":", 1)[-1] in {str(p) for p in ports}]


def cut_a_off(table: TaskTable, proxies: list[TcpProxy], a: Daemon, watch: ShardWatch) -> Cut:
    """Cut A's connections through ``proxies`` for longer than its lease (and
    until B holds A's shards), then let it reconnect and wait until it has its
    share again."""
    mark = a.mark()
    sessions = proxies[-1].upstream_ports()  # A's database sessions
    assert sessions, "A has no database session through the proxy"
    for proxy in proxies:
        proxy.cut()
    cut = db_now_ms(table)
    # Until the server saw them go, a statement of theirs may still commit.
    wait_for(
        lambda: not sessions_from(table, sessions),
        5,
        lambda: f"A's sessions outlive the cut: {sessions_from(table, sessions)}",
    )
    held = shards_of(table, A)  # as the database has them: A cannot renew now
    in_flight = armed_in_shards_of(table, A)
    assert held and in_flight, f"A held {len(held)} shards and {len(in_flight)} armed rows"
    assert db_now_ms(table) < min(until for _, until in held.values()), (
        "A's leases ended before they were read"
    )
    a.wait_for_line("retrying in", 5, start=mark)
    taken = watch.wait_for(lambda o: owned_by(o, held, [B]), TAKEOVER_S, cut)
    assert taken is not None, f"B did not take A's shards over: {watch.counts()}"
    wait_for(lambda: db_now_ms(table) >= cut + CUT_MIN_MS, 10, "clock")
    assert a.alive(), a.tail()
    for proxy in proxies:
        proxy.restore()
    healed = db_now_ms(table)
    a.wait_for_line("lost shard", 10, start=mark)  # its renewal was fenced
    rejoined = watch.wait_for(lambda o: balanced(o, [A, B]), 15, healed)
    assert rejoined is not None, f"A never got its share back: {watch.counts()}"
    return Cut(cut, held, in_flight, taken, healed, rejoined)


def check(cut: Cut, tally: Tally, watch: ShardWatch, label: str, seconds: float) -> None:
    events = tally.events
    # A's events of the tasks of the shards it held at the cut, due before the
    # cut healed: A cannot have had those from a later tenure (B took the
    # shards at their lease end and fired them), so each is of the cut-off one.
    cut_off = [
        e
        for e in events
        if e.by == A and task_shard(e.id) in cut.held and tally.due[e.id] < cut.healed
    ]
    last_fired = max((e.fired_ms for e in cut_off), default=cut.cut)
    last_received = max((e.received_ms for e in cut_off), default=cut.cut)
    from_b = {e.id for e in events if e.by == B}
    dropped_by_a = cut.in_flight - {e.id for e in cut_off}
    report(
        f"{label} {cut.healed - cut.cut} ms (lease {LEASE_MS} ms): A held {len(cut.held)} "
        f"shards and {len(cut.in_flight)} armed rows at the cut; A's last event of them fired "
        f"{last_fired - cut.cut} ms after the cut, {cut.lease_end - last_fired} ms before its "
        f"lease end (received {cut.lease_end - last_received} ms before it); B held them "
        f"{cut.taken - cut.lease_end:+d} ms from A's lease end; A back to its share "
        f"{cut.rejoined - cut.healed} ms after the cut healed; of A's armed rows, "
        f"{len(dropped_by_a & from_b)} were fired by B only; {tally.summary()}; "
        f"{seconds:.1f} s in all"
    )
    problems = tally.problems()
    late = [
        f"{e.id} fired {e.fired_ms - cut.held[task_shard(e.id)][1]} ms after the lease end"
        for e in cut_off
        if e.fired_ms > cut.held[task_shard(e.id)][1]
    ]
    if late:
        problems.append(f"A published {len(late)} tasks after its lease ended: {late[:5]}")
    wrong = unfenced(events, watch)
    if wrong:
        problems.append(f"{len(wrong)} events published without a lease: {wrong[:3]}")
    unexpected = sorted(set(tally.duplicated) - cut.in_flight)
    if unexpected:
        problems.append(f"duplicates of tasks A had not in flight: {unexpected[:10]}")
    for task_id in tally.duplicated:
        copies = sorted(e.by for e in events if e.id == task_id)
        if copies != sorted([A, B]):
            problems.append(f"{task_id} fired by {copies}")
    if not dropped_by_a <= from_b:
        problems.append(f"A's armed rows B never fired: {sorted(dropped_by_a - from_b)[:10]}")
    if not any(e.by == A and e.fired_ms > cut.rejoined for e in events):
        problems.append("A fired nothing after it rejoined")
    if not cut.lease_end < cut.taken <= cut.cut + LEASE_MS + 5000:
        problems.append(f"B took A's shards over at {cut.taken - cut.cut} ms after the cut")
    assert not problems, "\n".join(problems)


def run_cut(
    database_url: str,
    amqp_url: str,
    table: TaskTable,
    daemons: DaemonGroup,
    *,
    cut_broker: bool,
) -> None:
    """A and B under a steady stream; A cut off (from the database, and from
    the broker too when ``cut_broker``) past its lease, then healed."""
    started = time.monotonic()
    label = "database and broker cut" if cut_broker else "database cut"
    with (
        instance_names(amqp_url, [A, B]) as names,
        proxied(database_url) as (db_proxy, a_database_url),
        proxied(amqp_url) as (amqp_proxy, a_amqp_url),
        EventLog(amqp_url, names) as log,
        ShardWatch(database_url) as watch,
    ):
        a_env = daemon_env(
            a_database_url,
            a_amqp_url if cut_broker else amqp_url,
            names[A].exchange,
            A,
            **A_SETTINGS,
        )
        a = daemons.start(a_env, A)
        a.wait_ready()
        b = daemons.start(
            daemon_env(database_url, amqp_url, names[B].exchange, B, http_enabled="false"), B
        )
        b.wait_ready()
        assert watch.wait_for(lambda o: balanced(o, [A, B]), 15) is not None, watch.counts()

        # A steady stream: 200 tasks a second for 11 s.
        begin = db_now_ms(table)
        tasks = spread("c", 2200, begin + 1000, begin + 12000)
        due = dict(tasks)
        schedule_tasks(database_url, tasks)
        wait_for(lambda: db_now_ms(table) >= begin + CUT_AT_MS, 10, "clock")
        # The broker first: what A fires meanwhile stays in its send buffer.
        proxies = [amqp_proxy, db_proxy] if cut_broker else [db_proxy]
        cut = cut_a_off(table, proxies, a, watch)

        assert log.wait_ids(due, 30), (
            f"missing: {sorted(set(due) - {e.id for e in log.events()})[:10]}"
        )
        log.quiet(QUIET_S)
        check(cut, Tally(due, log.events()), watch, label, time.monotonic() - started)
        assert not watch.errors and not log.errors, (watch.errors, log.errors)

        wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
        for daemon in (a, b):
            assert daemon.alive(), daemon.tail()
            assert daemon.terminate() == 0, daemon.tail()
            assert daemon.count("Traceback") == 0, daemon.tail()


@pytest.mark.slow
def test_an_instance_cut_off_from_the_database_past_its_lease(
    database_url: str, amqp_url: str, table: TaskTable, daemons: DaemonGroup
) -> None:
    run_cut(database_url, amqp_url, table, daemons, cut_broker=False)


@pytest.mark.slow
def test_an_instance_cut_off_from_database_and_broker_past_its_lease(
    database_url: str, amqp_url: str, table: TaskTable, daemons: DaemonGroup
) -> None:
    """A network partition of A's host: what A had fired into its send buffer
    (or published, unconfirmed) when the broker went away must not go out
    after its lease ended, when the broker is back (R4: a stale owner stops
    publishing the shard's tasks)."""
    run_cut(database_url, amqp_url, table, daemons, cut_broker=True)
