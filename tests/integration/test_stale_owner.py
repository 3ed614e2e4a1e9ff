"""A paused owner's stale confirm must not delete a newer incarnation of the task.

Issue 12, item 1 of "Why", with real processes: two daemons, A and B, on one
database and one exchange.

1. A holds task X armed: X is scheduled through A's HTTP API due inside A's
   ``arm_ahead_ms``, so A claims and arms it in the INSERT itself (B, already
   running, can never claim a row claimed in the statement that creates it).
2. A is paused (SIGSTOP) while X is still well before its due time: A's
   scheduler holds X in memory, unpublished.
3. A's lease expires; B takes X over, fires it (the OLD payload) and deletes
   its row after the broker's confirm.
4. The client schedules X again through B's HTTP API, new payload, due inside
   B's ``arm_ahead_ms``: B claims and arms the new row at once (``firing = 1``).
5. A resumes (SIGCONT) and publishes its stale X (the old payload a second
   time: a duplicate, which at-least-once allows). Its confirmer then deletes
   X's row. Before the fix, ``DELETE ... WHERE id IN (...) AND firing = 1``
   removes the NEW row, armed by B; with the fix only the revision A
   published is deleted, and the new row stays.
6. B is killed (-9) before the new X is due, so B never publishes it.
7. A takes B's claim over after the lease and fires the new X; th_tasks ends
   empty. Before the fix, nothing is left to fire: the new X is lost.

When events carry ``x-rev`` (the revision of the row each was read from),
both old copies carry A's row's revision and the new X B's, which differs.

A thread watches X's row throughout (every change, with its time), so a
failure says when and after what the new row disappeared. Guarded against:
A stopped inside its claim transaction (it would keep X locked from B's
``SKIP LOCKED`` claim, so B would never take X over: A is stopped again at
another moment); a machine too slow for the margins (A stopped too close to
X's due time, B killed after the new X was due: the test says so rather than
passing vacuously); A publishing its stale copy only after B's claim expired
(the scenario would not have happened).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

import httpx
import pytest
from support.amqp import AmqpNames, EventConsumer, Received
from support.daemon import Daemon, DaemonGroup, TaskTable, daemon_env, fired_ms, report
from support.hook import header_int
from support.waiting import now_ms, wait_for

TASK_ID = "x"
OLD = b"old incarnation"
NEW = b"new incarnation"

LEASE_MS = 3000  # claim_lease_ms: how long B waits for the paused A's claim (and A for B's)
# Everything claimed is armed at once (arm_ahead_ms <= preload_window_ms < claim_lease_ms).
WINDOW_MS = 2900
ARM_AHEAD_MS = 2900
DUE_AHEAD_MS = 2600  # each incarnation is due this long after it is scheduled: armed on insert
STOP_MARGIN_MS = 1500  # A is stopped at least this long before X is due: X not yet published
PAUSE_ATTEMPTS = 3  # A is stopped again if stopped holding a row lock
TRX_SNAPSHOT_S = 0.15  # INNODB_TRX is at most 100 ms old: read it this long after the stop
KILL_MARGIN_MS = 300  # B is killed at least this long before the new X is due
QUIET_S = LEASE_MS / 1000 + 1.0  # after the last event: longer than a lease, for late copies
# Daemon log lines of a lost broker connection (for the failure message).
BROKER_TROUBLE = ("RabbitMQ connection closed", "cannot connect to RabbitMQ")
SETTINGS: dict[str, int | str] = {
    "claim_lease_ms": LEASE_MS,
    "preload_window_ms": WINDOW_MS,
    "arm_ahead_ms": ARM_AHEAD_MS,
    "confirm_max_delay_ms": 10,
}


# -- X's row, watched -----------------------------------------------------------------


@dataclass(frozen=True)
class RowState:
    """X's row as read at ``at_ms`` (test clock); not ``present``: no row."""

    at_ms: int
    claimed_by: str | None = None
    claim_until_ms: int = 0
    firing: int = 0
    rev: int = 0
    payload: bytes | None = None
    present: bool = False

    def key(self) -> tuple[object, ...]:
        return (self.present, self.claimed_by, self.claim_until_ms, self.firing, self.rev)

    def describe(self, origin_ms: int) -> str:
        when = f"{self.at_ms - origin_ms:+7d} ms"
        if not self.present:
            return f"{when}: no row"
        return (
            f"{when}: claimed by {self.claimed_by} until {self.claim_until_ms - origin_ms:+d} ms, "
            f"firing {self.firing}, rev {self.rev}, payload {self.payload!r}"
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

    def _read(self, table: TaskTable) -> RowState:
        rows = table.query(
            "SELECT claimed_by, claim_until_ms, firing, rev, payload FROM th_tasks WHERE id = %s",
            (self._task_id,),
        )
        at_ms = now_ms()
        if not rows:
            return RowState(at_ms)
        by, until, firing, rev, payload = rows[0]
        return RowState(at_ms, by, int(until), int(firing), int(rev), bytes(payload or b""), True)

    def _run(self) -> None:
        try:
            with TaskTable(self._database_url) as table:
                while not self._stop.is_set():
                    state = self._read(table)
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


def current_row(table: TaskTable) -> RowState:
    rows = table.query(
        "SELECT claimed_by, claim_until_ms, firing, rev, payload FROM th_tasks WHERE id = %s",
        (TASK_ID,),
    )
    if not rows:
        return RowState(now_ms())
    by, until, firing, rev, payload = rows[0]
    return RowState(now_ms(), by, int(until), int(firing), int(rev), bytes(payload or b""), True)


# -- events ---------------------------------------------------------------------------


class Events:
    """Everything received for the test's exchange, in arrival order."""

    def __init__(self, consumer: EventConsumer) -> None:
        self._consumer = consumer
        self.seen: list[Received] = []

    def of(self, payload: bytes) -> list[Received]:
        return [e for e in self.seen if e.body == payload]

    def wait(self, payload: bytes, count: int, timeout_s: float) -> bool:
        """Consume until ``count`` events with ``payload`` were seen (True) or
        ``timeout_s`` passed (False); everything received is kept."""
        deadline = time.monotonic() + timeout_s
        while len(self.of(payload)) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.seen.extend(self._consumer.collect(1, timeout_s=min(left, 0.2)))
        return True

    def drain(self, quiet_s: float) -> None:
        self.seen.extend(self._consumer.drain_quiet(quiet_s))

    def describe(self, origin_ms: int) -> str:
        return "\n".join(
            f"  received {e.received_ms - origin_ms:+7d} ms: id {e.message_id!r}, body {e.body!r}, "
            f"x-fired-ms {fired_ms(e) - origin_ms:+d}, x-rev {e.headers.get('x-rev')!r}"
            for e in self.seen
        )


# -- the HTTP API ---------------------------------------------------------------------


def schedule_through(daemon: Daemon, payload: bytes, due_ms: int) -> None:
    with httpx.Client(base_url=daemon.http_url, timeout=10.0) as http:
        answer = http.post(
            "/v1/tasks", json={"id": TASK_ID, "at": due_ms / 1000, "payload": payload.decode()}
        )
    assert answer.status_code == 201, (daemon.name, answer.status_code, answer.text)


def wait_row(
    table: TaskTable, test: Callable[[RowState], bool], timeout_s: float, what: str
) -> RowState:
    found: list[RowState] = []

    def check() -> bool:
        found[:] = [current_row(table)]
        return test(found[0])

    wait_for(check, timeout_s, lambda: f"{what}; X's row: {found[0] if found else None}")
    return found[0]


@dataclass
class Run:
    """The scenario's processes, observers and step times (ms after ``origin``)."""

    a: Daemon
    b: Daemon
    table: TaskTable
    events: Events
    watch: RowWatch
    origin: int
    marks: dict[str, int] = field(default_factory=dict)

    def mark(self, step: str, at_ms: int | None = None) -> int:
        at = now_ms() if at_ms is None else at_ms
        self.marks[step] = at - self.origin
        return at

    def story(self) -> str:
        lost = [d.name for d in (self.a, self.b) if any(d.count(t) for t in BROKER_TROUBLE)]
        return (
            f"X's row over time (ms after the start):\n{self.watch.describe(self.origin)}\n"
            f"events:\n{self.events.describe(self.origin)}\nsteps (ms): {self.marks}"
            + (
                f"\nnote: {lost} lost the broker connection (another run restarting "
                "RabbitMQ?): rerun"
                if lost
                else ""
            )
        )


def pause_holding_no_locks(run: Run) -> None:
    """SIGSTOP A at a moment it holds no row lock. Stopped inside a transaction,
    A would keep X locked: its claim query (``SELECT ... FOR UPDATE SKIP
    LOCKED``) keeps a lock on every row it scanned, claimable or not, until it
    commits, and B's claim query would pass X by for as long as A is stopped
    (one run, before this guard, saw B never take X over). A holds such locks
    only briefly at each poll, so another stop finds a moment without."""

    def no_locks() -> bool:
        return not run.table.locking_transactions(run.a.tcp_ports())

    for attempt in range(PAUSE_ATTEMPTS):
        run.a.pause()
        # INNODB_TRX is a snapshot InnoDB refreshes at most every 100 ms: read
        # it that long after the stop (a statement A sent just before has run
        # by then, too).
        threading.Event().wait(TRX_SNAPSHOT_S)
        if no_locks():
            run.marks["pauses retried"] = attempt
            return
        run.a.resume()
        wait_for(no_locks, 10, lambda: f"A keeps its locks while running\n{run.a.tail()}")
    raise AssertionError(f"A held row locks at each of {PAUSE_ATTEMPTS} pauses")


def a_holds_x_then_pauses(run: Run) -> tuple[RowState, int]:
    """Steps 1-2: A claims and arms X in the INSERT, then is stopped well before
    X is due (its scheduler holds X, unpublished). Returns A's row and X's due time."""
    due = now_ms() + DUE_AHEAD_MS
    schedule_through(run.a, OLD, due)
    held = current_row(run.table)
    assert (held.claimed_by, held.firing, held.payload) == (run.a.name, 1, OLD), (
        f"X should be claimed and armed by A on insert: {held}"
    )
    pause_holding_no_locks(run)
    stopped = run.mark("A stopped")
    assert due - stopped >= STOP_MARGIN_MS, (
        f"A stopped only {due - stopped} ms before X is due (need {STOP_MARGIN_MS}): too slow "
        "to be sure it had not published X"
    )
    assert current_row(run.table).key() == held.key(), run.story()
    return held, due


def b_takes_x_over(run: Run, held_by_a: RowState, due: int) -> Received:
    """Step 3: B claims X once A's lease expired, fires it and deletes its row."""
    budget_s = (held_by_a.claim_until_ms - now_ms() + LEASE_MS) / 1000 + 10
    assert run.events.wait(OLD, 1, budget_s), (
        f"B never fired X after A's lease; A's locking transactions: "
        f"{run.table.locking_transactions(run.a.tcp_ports())}\n{run.story()}"
    )
    fired = run.events.of(OLD)[0]
    run.mark("B fired the old X", fired.received_ms)
    # A is stopped, and B may take X only after A's claim expired.
    assert fired_ms(fired) > held_by_a.claim_until_ms, (
        f"X fired before A's claim expired\n{run.story()}"
    )
    assert fired_ms(fired) >= due, run.story()
    wait_row(run.table, lambda r: not r.present, 10, "B did not delete X's row after its confirm")
    run.mark("old row deleted")
    assert run.a.stopped(), f"A is not stopped any more\n{run.a.tail()}"
    return fired


def b_arms_the_new_x(run: Run, held_by_a: RowState) -> tuple[RowState, int]:
    """Step 4: X again, new content, through B: B claims and arms it on insert.
    Returns B's row and the new X's due time."""
    due = now_ms() + DUE_AHEAD_MS
    schedule_through(run.b, NEW, due)
    held = current_row(run.table)
    assert (held.claimed_by, held.firing, held.payload) == (run.b.name, 1, NEW), (
        f"the new X should be claimed and armed by B on insert: {held}\n{run.story()}"
    )
    assert held.rev != held_by_a.rev, "both incarnations got the same revision"
    run.mark("new X armed by B", held.at_ms)
    return held, due


def a_resumes_and_b_dies(run: Run, held_by_b: RowState, due: int) -> Received:
    """Steps 5-6: A resumes and publishes its stale X (its confirmer then deletes
    "X's" row); B is killed before the new X is due. Returns A's stale copy."""
    run.a.resume()
    run.mark("A resumed")
    # The stale copy comes at once; B must die before the new X is due, whatever.
    run.events.wait(OLD, 2, max(0.0, (due - KILL_MARGIN_MS - now_ms()) / 1000))
    assert run.b.kill9() == -9
    dead = run.mark("B killed")
    assert dead < due, (
        f"B died {dead - due} ms after the new X was due (it may have fired it): too slow for "
        f"the scenario\n{run.story()}"
    )
    assert not run.events.of(NEW), f"the new X fired before B was killed\n{run.story()}"
    assert run.events.wait(OLD, 2, 10), (
        f"A never published its stale X after SIGCONT: the scenario did not happen\n{run.story()}"
    )
    stale = run.events.of(OLD)[1]
    run.mark("A's stale X received", stale.received_ms)
    assert stale.received_ms < held_by_b.claim_until_ms, (
        "A published its stale X only after B's claim on the new X expired: the scenario did "
        f"not happen\n{run.story()}"
    )
    report(
        f"stale owner: {run.marks}; X's row after the kill: "
        f"{current_row(run.table).describe(run.origin)}"
    )
    return stale


def the_new_x_fires(run: Run, held_by_b: RowState) -> None:
    """Step 7: A takes B's claim over after the lease and fires the new X; then
    nothing more arrives for longer than a lease."""
    takeover_s = (max(held_by_b.claim_until_ms - now_ms(), 0) + LEASE_MS) / 1000 + 10
    if not run.events.wait(NEW, 1, takeover_s):
        history = run.watch.history()
        vanished = [
            after
            for before, after in pairwise(history)
            if before.present and before.payload == NEW and not after.present
        ]
        lost = "the new X never fired"
        if vanished:
            resumed = run.origin + run.marks["A resumed"]
            lost = (
                f"the new X's row (payload {NEW!r}, armed by B) was gone at "
                f"{vanished[0].at_ms - run.origin:+d} ms, {vanished[0].at_ms - resumed} ms after "
                "A resumed, and the new X never fired"
            )
        raise AssertionError(
            f"LOST: {lost}; th_tasks now: {run.table.claims()}\n{run.story()}\n{run.a.tail()}"
        )
    run.mark("new X received", run.events.of(NEW)[0].received_ms)
    run.events.drain(QUIET_S)


@pytest.mark.slow
def test_a_paused_owners_stale_confirm_leaves_the_new_incarnation(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
) -> None:
    started = time.monotonic()
    a, b = (
        daemons.start(
            daemon_env(database_url, amqp_url, amqp_names.exchange, name, **SETTINGS), name
        )
        for name in ("stale-a", "owner-b")
    )
    a.wait_ready()
    b.wait_ready()
    events = Events(event_consumer)
    with RowWatch(database_url, TASK_ID) as watch:
        run = Run(a, b, table, events, watch, origin=now_ms())
        held_by_a, old_due = a_holds_x_then_pauses(run)
        b_takes_x_over(run, held_by_a, old_due)
        held_by_b, new_due = b_arms_the_new_x(run, held_by_a)
        stale = a_resumes_and_b_dies(run, held_by_b, new_due)
        the_new_x_fires(run, held_by_b)
    assert not watch.errors, watch.errors

    new_events = events.of(NEW)
    report(
        f"stale owner: {len(events.of(OLD))} old and {len(new_events)} new events, "
        f"{time.monotonic() - started:.1f} s in all\n{run.story()}"
    )
    assert len(new_events) == 1, f"the new X fired {len(new_events)} times\n{run.story()}"
    new = new_events[0]
    assert new.received_ms >= new_due and fired_ms(new) >= new_due, (
        f"the new X fired before its due time\n{run.story()}"
    )
    # Once by B, once stale from A; nothing else.
    assert len(events.of(OLD)) == 2, (
        f"the old X fired {len(events.of(OLD))} times, not 2\n{run.story()}"
    )
    assert {e.message_id for e in events.seen} == {TASK_ID}, run.story()
    if any("x-rev" in e.headers for e in events.seen):
        # x-rev: the revision of the row an event was read from. Both old copies
        # are one incarnation (a consumer may deduplicate them), the new X another.
        revs = [header_int(e, "x-rev") for e in (*events.of(OLD), new)]
        assert revs == [held_by_a.rev, held_by_a.rev, held_by_b.rev], run.story()
        assert header_int(stale, "x-rev") != header_int(new, "x-rev"), run.story()
    wait_for(lambda: table.count() == 0, 15, lambda: f"rows left: {table.claims()}")
    assert a.alive(), a.tail()
    assert a.terminate() == 0, a.tail()
    assert a.count("Traceback") == 0, a.tail()
