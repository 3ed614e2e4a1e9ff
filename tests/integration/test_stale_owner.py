"""A stale owner's confirm must not delete a newer incarnation of the task.

Issue 12, item 1 of "Why" (defect 1 of ownership v1), with real processes on
the shard protocol (docs/design/ownership.md, R2-R5): two daemons, A and B,
on one database; each publishes to its own exchange, so every event says who
published it. A's broker connection runs through a TCP proxy the test can
hold (bytes accepted, none forwarded), so A can be caught with a published,
unconfirmed event: the one moment its confirm can come stale.

1. A and B share the 64 shards; X is an id in one of A's shards. The proxy
   holds A's broker traffic, X is scheduled (OLD payload), A arms and fires
   it: the event sits in the held connection, unconfirmed; X's row stays.
2. A is paused (SIGSTOP) past its lease. B takes X's shard over (a new
   epoch), inherits X (armed by A, never deleted), fires it (OLD, by B) and
   deletes its row after the broker's confirm.
3. X is scheduled again (NEW payload, a new revision), due in 2 s.
4. The proxy lets A's traffic through and A resumes: its stale OLD event
   reaches the broker, is confirmed, and A deletes "X's" row by the confirmed
   revision, which matches nothing (v1 deleted by id: the NEW row). A's lease
   renewal is fenced: it drops the shards B took, then gets its fair share
   back by B's graceful handover.
5. B is killed (-9) before the NEW X is due, so it never publishes it.
6. The NEW X fires once (A, whether the shard came back by handover or after
   B's lease), later than due, but not lost; th_tasks ends empty.

A thread watches X's row throughout (every change, with its time), so a
failure says when the NEW row disappeared and after what. Guarded against: a
machine too slow for the margins (B killed after the NEW X was due: the test
says so rather than passing vacuously), and A publishing nothing stale (the
scenario would not have happened).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise

import httpx
import pytest
from support.daemon import (
    FAST_SETTINGS,
    Daemon,
    DaemonGroup,
    TaskTable,
    daemon_env,
    report,
    schedule_tasks,
)
from support.mysql import ARMED_IDS
from support.ownership import (
    Event,
    EventLog,
    ShardWatch,
    balanced,
    db_now_ms,
    instance_names,
    task_shard,
    unfenced,
)
from support.tcpproxy import TcpProxy, proxied
from support.waiting import wait_for

OLD = b"old incarnation"
NEW = b"new incarnation"
A, B = "stale-a", "owner-b"

LEASE_MS = int(FAST_SETTINGS["shard_lease_ms"])
OLD_DUE_AHEAD_MS = 1000  # the OLD X is due this long after it is scheduled
NEW_DUE_AHEAD_MS = 2000  # the NEW X: time for A to wake and confirm before it is due
KILL_MARGIN_MS = 150  # B is killed at least this long before the NEW X is due
QUIET_S = LEASE_MS / 1000 + 1.0  # after the last event: longer than a lease, for late copies
SETTINGS: dict[str, int | str] = {"confirm_max_delay_ms": 10}


# -- X's row, watched -----------------------------------------------------------------


@dataclass(frozen=True)
class RowState:
    """X's row as read at ``at_ms`` (database time); not ``present``: no row."""

    at_ms: int
    present: bool = False
    rev: int = 0
    payload: bytes = b""
    armed: bool = False
    shard_owner: str | None = None
    shard_epoch: int = 0

    def key(self) -> tuple[object, ...]:
        return (self.present, self.rev, self.armed, self.shard_owner, self.shard_epoch)

    def describe(self, origin_ms: int) -> str:
        when = f"{self.at_ms - origin_ms:+7d} ms"
        shard = f"shard owner {self.shard_owner} epoch {self.shard_epoch}"
        if not self.present:
            return f"{when}: no row; {shard}"
        armed = "armed" if self.armed else "unarmed"
        return f"{when}: rev {self.rev}, {self.payload!r}, {armed}; {shard}"


def read_row(table: TaskTable, task_id: str) -> RowState:
    rows = table.query(
        "SELECT (TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000),"
        " t.id, t.rev, t.payload, s.owner, s.epoch, a.id"
        " FROM th_shards s LEFT JOIN th_tasks t ON t.shard = s.shard AND t.id = %s"
        f" LEFT JOIN ({ARMED_IDS} AND t.id = %s) a ON a.id = t.id WHERE s.shard = %s",
        (task_id, task_id, task_shard(task_id)),
    )
    at, found, rev, payload, owner, epoch, armed = rows[0]
    if found is None:
        return RowState(int(at), shard_owner=owner, shard_epoch=int(epoch))
    return RowState(
        int(at), True, int(rev), bytes(payload or b""), armed is not None, owner, int(epoch)
    )


class RowWatch:
    """Reads X's row every ``interval_s`` in a thread and records each change
    (a context manager)."""

    def __init__(self, database_url: str, task_id: str, interval_s: float = 0.005) -> None:
        self._database_url = database_url
        self._task_id = task_id
        self._interval_s = interval_s
        self._history: list[RowState] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="row-watch", daemon=True)
        self.errors: list[BaseException] = []

    def _run(self) -> None:
        try:
            with TaskTable(self._database_url) as table:
                while not self._stop.is_set():
                    state = read_row(table, self._task_id)
                    with self._lock:
                        if not self._history or self._history[-1].key() != state.key():
                            self._history.append(state)
                    self._stop.wait(self._interval_s)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.errors.append(exc)

    def history(self) -> list[RowState]:
        with self._lock:
            return list(self._history)

    def describe(self, origin_ms: int) -> str:
        return "\n".join("  " + state.describe(origin_ms) for state in self.history())

    def __enter__(self) -> RowWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(10)


# -- the scenario -----------------------------------------------------------------------


def status_totals(daemon: Daemon) -> dict[str, int]:
    with httpx.Client(base_url=daemon.http_url, timeout=10.0) as http:
        answer = http.get("/v1/status")
    assert answer.status_code == 200, answer.text
    return {str(k): int(v) for k, v in answer.json()["totals"].items()}


@dataclass
class Run:
    """The scenario's processes, observers and step times (ms after ``origin``)."""

    task_id: str
    a: Daemon
    b: Daemon
    proxy: TcpProxy
    table: TaskTable
    events: EventLog
    watch: RowWatch
    shards: ShardWatch
    origin: int
    marks: dict[str, int] = field(default_factory=dict)

    def mark(self, step: str, at_ms: int | None = None) -> int:
        at = db_now_ms(self.table) if at_ms is None else at_ms
        self.marks[step] = at - self.origin
        return at

    def of(self, payload: bytes, by: str | None = None) -> list[Event]:
        return [
            e
            for e in self.events.events()
            if e.id == self.task_id and e.body == payload and (by is None or e.by == by)
        ]

    def wait(self, payload: bytes, count: int, timeout_s: float, by: str | None = None) -> bool:
        return self.events.wait(
            lambda evs: (
                sum(
                    e.id == self.task_id and e.body == payload and (by is None or e.by == by)
                    for e in evs
                )
                >= count
            ),
            timeout_s,
        )

    def story(self) -> str:
        shard = task_shard(self.task_id)
        tenures = [
            f"{t.owner}@{t.epoch} from {t.seen_ms - self.origin:+d} lease until "
            f"{t.lease_until_ms - self.origin:+d}"
            for t in self.shards.tenures(shard)
        ]
        events = "\n".join(
            f"  by {e.by}: received {e.received_ms - self.origin:+7d} ms, body {e.body!r}, "
            f"x-fired-ms {e.fired_ms - self.origin:+d}, x-rev {e.rev}"
            for e in self.events.events()
        )
        return (
            f"X = {self.task_id!r} (shard {shard}); its row over time (ms after the start):\n"
            f"{self.watch.describe(self.origin)}\nshard {shard}'s tenures: {tenures}\n"
            f"events:\n{events}\nsteps (ms): {self.marks}"
        )


def a_fires_x_into_a_held_connection(run: Run, database_url: str) -> int:
    """Step 1. Returns the OLD X's revision."""
    run.proxy.hold()
    run.mark("A's broker traffic held")
    due = db_now_ms(run.table) + OLD_DUE_AHEAD_MS
    schedule_tasks(database_url, [(run.task_id, due)], OLD)
    wait_for(
        lambda: status_totals(run.a)["published"] >= 1,
        OLD_DUE_AHEAD_MS / 1000 + 5,
        lambda: f"A never published X\n{run.story()}\n{run.a.tail()}",
    )
    published = run.mark("A published X (held)")
    assert published >= due, run.story()
    row = read_row(run.table, run.task_id)
    assert row.present and row.armed and row.payload == OLD and row.shard_owner == A, (
        f"X should be armed by A, its row kept (unconfirmed): {row}\n{run.story()}"
    )
    totals = status_totals(run.a)
    assert totals["confirmed"] == 0 and not run.of(OLD), (
        f"A's event got through the held proxy: {totals}\n{run.story()}"
    )
    return row.rev


def b_takes_the_shard_and_fires_x(run: Run, old_rev: int) -> None:
    """Step 2."""
    run.a.pause()
    paused = run.mark("A paused")
    shard = task_shard(run.task_id)
    lease_end = max(u for s, (o, _, u) in run.table.shards().items() if s == shard and o == A)
    taken = run.shards.wait_for(
        lambda owners: owners.get(shard) == B, LEASE_MS / 1000 + 10, since_ms=paused
    )
    assert taken is not None, f"B never took X's shard over\n{run.story()}"
    run.mark("B owns X's shard", taken)
    assert taken > lease_end, f"B took X's shard before A's lease ended\n{run.story()}"
    assert run.wait(OLD, 1, 10, by=B), f"B never fired the inherited X\n{run.story()}"
    fired = run.of(OLD, by=B)[0]
    run.mark("B's OLD X received", fired.received_ms)
    assert fired.rev == old_rev, run.story()
    wait_for(
        lambda: not read_row(run.table, run.task_id).present,
        10,
        lambda: f"B did not delete X's row after its confirm\n{run.story()}",
    )
    run.mark("OLD row deleted")
    assert run.a.stopped(), f"A is not stopped any more\n{run.a.tail()}"


def x_again_then_a_wakes(run: Run, database_url: str, old_rev: int) -> tuple[int, int]:
    """Steps 3-4. Returns the NEW X's revision and due time."""
    due = db_now_ms(run.table) + NEW_DUE_AHEAD_MS
    schedule_tasks(database_url, [(run.task_id, due)], NEW)
    row = read_row(run.table, run.task_id)
    assert row.present and row.payload == NEW and not row.armed, f"{row}\n{run.story()}"
    assert row.rev != old_rev, "both incarnations got the same revision"
    run.mark("NEW X stored", row.at_ms)

    run.proxy.flow()
    run.a.resume()
    run.mark("A resumed")
    assert run.wait(OLD, 1, 5, by=A), (
        f"A's held OLD X never reached the broker after SIGCONT: the scenario did not happen\n"
        f"{run.story()}\n{run.a.tail()}"
    )
    stale = run.of(OLD, by=A)[0]
    run.mark("A's stale OLD X received", stale.received_ms)
    assert stale.rev == old_rev, run.story()
    # Its confirm reached A: A's delete by that revision follows within
    # confirm_max_delay_ms. The row watch would see the NEW row go.
    wait_for(
        lambda: status_totals(run.a)["confirmed"] >= 1,
        5,
        lambda: f"A never got its stale confirm\n{run.story()}\n{run.a.tail()}",
    )
    run.mark("A confirmed its stale X")
    return row.rev, due


def b_dies_before_the_new_x_is_due(run: Run, new_due: int) -> None:
    """Step 5."""
    assert run.b.kill9() == -9
    dead = run.mark("B killed")
    assert dead < new_due - KILL_MARGIN_MS, (
        f"B died {dead - new_due} ms from the NEW X's due time (it may have fired it): too slow "
        f"for the scenario\n{run.story()}"
    )
    assert not run.of(NEW, by=B), f"B fired the NEW X before it was due\n{run.story()}"


def the_new_x_fires(run: Run) -> Event:
    """Step 6."""
    takeover_s = LEASE_MS / 1000 + NEW_DUE_AHEAD_MS / 1000 + 10
    if not run.wait(NEW, 1, takeover_s):
        history = run.watch.history()
        gone = [
            s.describe(run.origin)
            for before, s in pairwise(history)
            if before.present and before.payload == NEW and not s.present
        ]
        raise AssertionError(
            f"LOST: the NEW X never fired{'; its row vanished at ' + gone[0] if gone else ''}\n"
            f"{run.story()}\n{run.a.tail()}"
        )
    new = run.of(NEW)[0]
    run.mark("NEW X received", new.received_ms)
    run.events.quiet(QUIET_S)
    return new


@pytest.mark.slow
def test_a_paused_owners_stale_confirm_leaves_the_new_incarnation(
    database_url: str, amqp_url: str, table: TaskTable, daemons: DaemonGroup
) -> None:
    started = time.monotonic()
    with (
        instance_names(amqp_url, [A, B]) as names,
        proxied(amqp_url) as (proxy, a_amqp_url),
        EventLog(amqp_url, names) as events,
        ShardWatch(database_url) as shards,
    ):
        a = daemons.start(
            daemon_env(
                database_url,
                a_amqp_url,
                names[A].exchange,
                A,
                commands_enabled="false",
                **SETTINGS,
            ),
            A,
        )
        b = daemons.start(daemon_env(database_url, amqp_url, names[B].exchange, B, **SETTINGS), B)
        a.wait_ready()
        b.wait_ready()
        wait_for(lambda: balanced(shards_now(table), [A, B]), 20, lambda: str(table.owner_counts()))
        mine = {s for s, (o, _, _) in table.shards().items() if o == A}
        task_id = next(f"x-{n}" for n in range(10_000) if task_shard(f"x-{n}") in mine)

        with RowWatch(database_url, task_id) as watch:
            run = Run(task_id, a, b, proxy, table, events, watch, shards, db_now_ms(table))
            old_rev = a_fires_x_into_a_held_connection(run, database_url)
            b_takes_the_shard_and_fires_x(run, old_rev)
            new_rev, new_due = x_again_then_a_wakes(run, database_url, old_rev)
            b_dies_before_the_new_x_is_due(run, new_due)
            new = the_new_x_fires(run)
        assert not watch.errors, watch.errors
        assert not shards.errors and not events.errors, (shards.errors, events.errors)

        story = run.story()
        report(
            f"stale owner: {len(run.of(OLD))} OLD and {len(run.of(NEW))} NEW events; NEW X "
            f"{new.received_ms - new_due} ms late (fired by {new.by}); "
            f"{time.monotonic() - started:.1f} s in all\n{story}"
        )
        assert len(run.of(NEW)) == 1, f"the NEW X fired {len(run.of(NEW))} times\n{story}"
        assert new.rev == new_rev and new.by == A, story
        assert new.received_ms >= new_due and new.fired_ms >= new_due, (
            f"the NEW X fired before its due time\n{story}"
        )
        # The NEW row stayed from its insert until it fired: A's stale delete
        # (by the OLD revision) removed nothing.
        stored = run.origin + run.marks["NEW X stored"]
        vanished = [
            s for s in watch.history() if stored <= s.at_ms < new.fired_ms and not s.present
        ]
        assert not vanished, f"the NEW row vanished before it fired\n{story}"
        # Once by B (inherited), once stale from A (the held event); nothing else.
        assert [e.by for e in run.of(OLD)] == [B, A], story
        assert {e.rev for e in run.of(OLD)} == {old_rev}, story
        assert {e.id for e in events.events()} == {task_id}, story
        # Every event's x-fired-ms lies within a lease its publisher held.
        assert not unfenced(events.events(), shards), unfenced(events.events(), shards)
        assert a.count("lost shard") >= 1, a.tail()  # A's renewal was fenced
        wait_for(lambda: table.count() == 0, 15, lambda: f"rows left: {table.ids()}")
        assert a.alive(), a.tail()
        assert a.terminate() == 0, a.tail()
        assert a.count("Traceback") == 0, a.tail()


def shards_now(table: TaskTable) -> dict[int, str | None]:
    return {s: o for s, (o, _, _) in table.shards().items()}
