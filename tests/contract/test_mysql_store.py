"""What only the MySQL store can show: its locks under real concurrency, its
round trips, its query plans, and that MySQL's CRC32 is the shard function.

The lock protocol (docs/design/ownership.md): an arming pass locks its shard
rows exclusively; insert, cancel, reschedule and defer lock theirs in shared
mode, so each of them happens entirely before or after a pass. The tests
here hold a shard row locked from another connection and watch the store's
statement wait (InnoDB reports it as LOCK WAIT), then race arming against
cancels and inserts over many rows and check the outcome of every id.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.mysql import connect, connect_kwargs
from support.stores import SHARD_COUNT, in_shard, mysql_backend, outcomes, pymysql_backend
from support.waiting import wait_for

from triggerhook.domain.arming import BOTTOM, TOP_ID, ShardMarks, shard_of
from triggerhook.domain.meta import make_meta
from triggerhook.domain.task import CancelResult, InsertOutcome, RescheduleResult, Task
from triggerhook.interfaces import DeferOutcome, Deferral, Lease, Move, NewRow
from triggerhook.store.mysql import MySQLStore, arm_reads, sql
from triggerhook.store.mysql.tables import arm_probe

LEASE = 30_000
ME = "me"
FAR = 10**9

# Per row: armed by its shard's marks, as the stores decide it (domain/arming.is_armed).
ARMED_ROWS = (
    "SELECT t.id, (t.fire_ms < s.armed_ms OR (t.fire_ms = s.armed_ms AND t.id <= s.armed_id))"
    " AND t.gen < s.arm_gen FROM th_tasks t JOIN th_shards s ON s.shard = t.shard"
)


@pytest.fixture
def store(database_url: str) -> Iterator[MySQLStore]:
    made = mysql_backend(database_url)
    assert isinstance(made.store, MySQLStore)
    try:
        yield made.store
    finally:
        made.store.close()


@pytest.fixture
def db(database_url: str, store: MySQLStore) -> Iterator[Any]:
    """A second connection (autocommit) on the store's database."""
    conn = connect(database_url)
    try:
        yield conn
    finally:
        conn.close()


def clock(store: MySQLStore) -> int:
    return store.database_time_us() // 1000


def take_all(store: MySQLStore, instance: str = ME) -> list[Lease]:
    leases = [a.lease for a in store.acquire(instance, SHARD_COUNT, LEASE)]
    assert len(leases) == SHARD_COUNT
    return leases


def query(db: Any, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with db.cursor() as cur:
        cur.execute(statement, params)
        return list(cur.fetchall())


def armed_state(db: Any) -> dict[str, bool]:
    return {tid: bool(armed) for tid, armed in query(db, ARMED_ROWS)}


# -- the shard function ------------------------------------------------------------------------


def test_mysql_crc32_is_the_shard_function(db: Any) -> None:
    names = ["a", "A", "task-1", "0f8fad5b-d9cb-469f-a165-70867728950e", "x" * 64, "a.b:c_d-e"]
    for count in (1, 4, 64, 4096):
        [found] = query(
            db,
            "SELECT " + ", ".join(["CRC32(%s) MOD %s"] * len(names)),
            [v for name in names for v in (name, count)],
        )
        assert list(found) == [shard_of(name, count) for name in names]


def test_rows_are_written_in_their_shard_of_its_generation(store: MySQLStore, db: Any) -> None:
    now = clock(store)
    store.insert([NewRow(Task(f"r{i}", now, "rk")) for i in range(20)], atomic=False)
    rows = query(db, "SELECT id, shard, gen, fire_ms, due_ms FROM th_tasks")
    assert len(rows) == 20
    for tid, shard, gen, fire_ms, due_ms in rows:
        assert (shard, gen, fire_ms) == (shard_of(tid, SHARD_COUNT), 1, due_ms)


# -- shard locks --------------------------------------------------------------------------------


def _waiting(db: Any) -> int:
    """Statements of other sessions in progress on this database. (A lock wait
    in the optimizer's look-up of a row by its key, as for ``shard IN (2)``,
    shows in the process list but not as LOCK WAIT in INNODB_TRX.)"""
    [(count,)] = query(
        db,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
        " WHERE db = DATABASE() AND id <> CONNECTION_ID() AND info IS NOT NULL",
    )
    return int(count)


def _run_behind_lock(
    database_url: str, db: Any, shard: int, operation: Callable[[], object], mode: str
) -> object:
    """Run ``operation`` on a thread while another connection holds ``shard``'s
    row (``mode``: FOR UPDATE, as arming, or LOCK IN SHARE MODE, as a writer)
    and has bumped its arm_gen (when exclusive); it must wait for the lock
    (LOCK WAIT) and finish after the commit. Returns what it returned."""
    holder = pymysql.connect(**{**connect_kwargs(database_url), "autocommit": False})
    result: list[object] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(operation())
        except BaseException as exc:  # handed to the test thread
            failed.append(exc)

    try:
        with holder.cursor() as cur:
            cur.execute(f"SELECT arm_gen FROM th_shards WHERE shard = %s {mode}", (shard,))
            if mode == "FOR UPDATE":
                cur.execute("UPDATE th_shards SET arm_gen = arm_gen + 1 WHERE shard = %s", (shard,))
        worker = threading.Thread(target=run)
        worker.start()
        wait_for(lambda: _waiting(db) == 1, 10, "the operation never waited for the lock")
        assert worker.is_alive()
        holder.commit()
        worker.join(10)
        assert not worker.is_alive()
    finally:
        holder.close()
    if failed:
        raise failed[0]
    return result[0]


@pytest.mark.parametrize("path", ["one statement", "general"])
def test_insert_waits_for_an_arming_pass_and_writes_its_new_generation(
    store: MySQLStore, db: Any, database_url: str, path: str
) -> None:
    now = clock(store)
    [a, b] = in_shard(2, 2)
    rows = [NewRow(Task(a, now, "rk")), NewRow(Task(b, now, "rk"))]
    if path == "general":  # a repeated id takes the general path
        rows.append(rows[0])
    inserted = _run_behind_lock(
        database_url, db, 2, lambda: store.insert(rows, atomic=False), "FOR UPDATE"
    )
    created, exists = InsertOutcome.CREATED, InsertOutcome.EXISTS
    assert isinstance(inserted, list)
    assert outcomes(inserted) == [created] * 2 + [exists] * (len(rows) - 2)
    # It read arm_gen after the pass committed: the new generation (2).
    assert query(db, "SELECT id, gen FROM th_tasks ORDER BY id") == [(a, 2), (b, 2)]


def test_cancel_reschedule_and_defer_wait_for_an_arming_pass(
    store: MySQLStore, db: Any, database_url: str
) -> None:
    now = clock(store)
    [a, b, c] = in_shard(1, 3)
    store.insert([NewRow(Task(n, now + 10 * i, "rk")) for i, n in enumerate([a, b, c])], False)
    leases = take_all(store)
    [copy] = store.arm(ME, leases, now, 10).tasks  # a
    cancel = _run_behind_lock(database_url, db, 1, lambda: store.cancel([b]), "FOR UPDATE")
    assert cancel == [CancelResult.CANCELLED]
    moved = _run_behind_lock(
        database_url, db, 1, lambda: store.reschedule([Move(c, now + 5)]), "FOR UPDATE"
    )
    assert [m.result for m in moved] == [RescheduleResult.RESCHEDULED]  # type: ignore[attr-defined]
    deferred = _run_behind_lock(
        database_url, db, 1, lambda: store.defer(ME, [Deferral(copy, now + 5)]), "FOR UPDATE"
    )
    assert deferred == [DeferOutcome.DEFERRED]


def test_arming_waits_for_a_writer_of_the_shard(
    store: MySQLStore, db: Any, database_url: str
) -> None:
    now = clock(store)
    [a] = in_shard(3, 1)
    store.insert([NewRow(Task(a, now, "rk"))], atomic=False)
    leases = take_all(store)
    armed = _run_behind_lock(
        database_url, db, 3, lambda: store.arm(ME, leases, now + 10, 10), "LOCK IN SHARE MODE"
    )
    assert [t.id for t in armed.tasks] == [a]  # type: ignore[attr-defined]


# -- races --------------------------------------------------------------------------------------


def _threads(targets: list[Callable[[], None]]) -> None:
    failures: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # handed to the test thread
                failures.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []  # no deadlock, no lock wait timeout, nothing


def test_cancels_racing_arming_either_cancel_or_arm_every_row(store: MySQLStore, db: Any) -> None:
    now = clock(store)
    names = [f"race-{i:04d}" for i in range(800)]
    store.insert([NewRow(Task(n, now + i, "rk")) for i, n in enumerate(names)], atomic=True)
    leases = take_all(store)
    armed: list[str] = []
    results: dict[str, CancelResult] = {}
    lock = threading.Lock()

    def armer() -> None:
        for step in range(0, 900, 9):  # the horizon sweeps the rows' due times
            armed.extend(t.id for t in store.arm(ME, leases, now + step, 40).tasks)
        while batch := store.arm(ME, leases, now + FAR, 40).tasks:
            armed.extend(t.id for t in batch)

    def canceller(part: list[str]) -> None:
        random.shuffle(part)
        for start in range(0, len(part), 5):
            ids = part[start : start + 5]
            answers = store.cancel(ids)
            with lock:
                results.update(zip(ids, answers, strict=True))

    shuffled = random.sample(names, len(names))
    _threads([armer] + [lambda p=shuffled[k::3]: canceller(p) for k in range(3)])  # type: ignore[misc]

    assert len(armed) == len(set(armed))  # nothing armed twice
    assert set(results) == set(names)
    for name in names:
        if results[name] is CancelResult.CANCELLED:
            assert name not in armed, f"{name} was cancelled and armed"
        else:
            assert results[name] is CancelResult.TOO_LATE, (name, results[name])
            assert name in armed, f"{name} was too late to cancel but never armed"
    assert set(armed) | {n for n, r in results.items() if r is CancelResult.CANCELLED} == set(names)
    state = armed_state(db)
    assert set(state) == set(armed) and all(state.values())
    counts = Counter(results.values())
    assert counts[CancelResult.CANCELLED] and counts[CancelResult.TOO_LATE]  # a real race


def test_inserts_racing_arming_never_arm_a_row_unread(store: MySQLStore, db: Any) -> None:
    now = clock(store)
    leases = take_all(store)
    armed: list[str] = []
    done = threading.Event()

    def armer() -> None:
        step = 0
        while not done.is_set() or step % 5:
            step += 1
            # Horizons that move on and step back: rows land above and below.
            horizon = now + 20 * step - 500 * (step % 3)
            armed.extend(t.id for t in store.arm(ME, leases, horizon, 25).tasks)

    def inserter(k: int) -> None:
        rng = random.Random(k)
        for batch in range(40):
            base = [f"i{k}-{batch}-{n}" for n in range(15)]
            rows = [NewRow(Task(n, now + rng.randrange(-1000, 3000), "rk")) for n in base]
            if batch % 4 == 0:
                rows.append(rows[0])  # the general path (a repeat)
            store.insert(rows, atomic=False)

    inserters = [lambda k=k: inserter(k) for k in range(3)]

    def all_inserters() -> None:
        _threads(inserters)  # type: ignore[arg-type]
        done.set()

    _threads([armer, all_inserters])

    state = armed_state(db)
    assert len(state) == 3 * 40 * 15
    assert len(armed) == len(set(armed))
    unread = [tid for tid, is_armed in state.items() if is_armed and tid not in armed]
    assert unread == [], f"armed without being read by any pass: {unread[:10]}"
    assert all(state[tid] for tid in armed)
    assert 0 < len(armed) < len(state)  # both kinds are there


# -- round trips ----------------------------------------------------------------------------------


class _Trips:
    """Counts the statements sent (COMMIT and ROLLBACK included) per thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        original = pymysql.connections.Connection._execute_command  # type: ignore[attr-defined]

        def counting(conn: Any, command: int, payload: Any) -> Any:
            if command == pymysql.constants.COMMAND.COM_QUERY:
                text = payload.decode() if isinstance(payload, bytes) else str(payload)
                self.sent.append(text.split(None, 1)[0].upper())
            return original(conn, command, payload)

        monkeypatch.setattr(pymysql.connections.Connection, "_execute_command", counting)

    def during(self, call: Callable[[], object]) -> list[str]:
        self.sent.clear()
        call()
        return list(self.sent)


@pytest.fixture
def pymysql_store(database_url: str) -> Iterator[MySQLStore]:
    """The store through PyMySQL, whose statements :class:`_Trips` can count
    (the store sends the same ones through either driver)."""
    made = pymysql_backend(database_url)
    assert isinstance(made.store, MySQLStore)
    try:
        yield made.store
    finally:
        made.store.close()


def test_round_trips(pymysql_store: MySQLStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = pymysql_store
    now = clock(store)
    leases = take_all(store)
    store.arm(ME, leases, now, 10)  # both pools have connections now
    store.cancel(["nothing"])
    trips = _Trips(monkeypatch)
    rows = [NewRow(Task(f"rt{i}", now + i, "rk")) for i in range(50)]
    assert trips.during(lambda: store.insert(rows, atomic=False)) == ["INSERT"]
    # After a pass that armed nothing, an idle pass is one cheap unlocked read
    # (is anything due at all?)...
    assert trips.during(lambda: store.arm(ME, leases, now - 10_000, 100)) == ["SELECT"]
    # ... and a pass that finds something: that read, the pass's reads, then
    # lock, read, marks, commit.
    assert trips.during(lambda: store.arm(ME, leases, now + 20, 100)) == [
        "SELECT",
        "(SELECT",
        "SELECT",
        "(SELECT",
        "UPDATE",
        "COMMIT",
    ]
    # A pass after one that armed something goes straight to the lock.
    assert trips.during(lambda: store.arm(ME, leases, now + 40, 100)) == [
        "SELECT",
        "(SELECT",
        "UPDATE",
        "COMMIT",
    ]
    # Nothing more due: lock, read, commit; the next idle pass finds armed rows
    # still in the table (due, not yet deleted), so the pass's reads follow.
    assert trips.during(lambda: store.arm(ME, leases, now + 40, 100)) == [
        "SELECT",
        "(SELECT",
        "COMMIT",
    ]
    assert trips.during(lambda: store.arm(ME, leases, now + 40, 100)) == ["SELECT", "(SELECT"]
    # Cancel, the usual case (every id there, none armed): one statement.
    assert trips.during(lambda: store.cancel(["rt45", "rt46"])) == ["DELETE", "COMMIT"]
    # Else: that statement rolled back, then lock shards, lock rows, delete, commit.
    assert trips.during(lambda: store.cancel(["rt47", "rt1"])) == [
        "DELETE",
        "ROLLBACK",
        "SELECT",
        "SELECT",
        "DELETE",
        "COMMIT",
    ]
    assert trips.during(lambda: store.delete_fired([("rt1", 5), ("rt2", 6)])) == ["DELETE"]
    assert trips.during(lambda: store.renew(ME, leases, LEASE)) == ["UPDATE", "SELECT"]
    # Between full passes (urgent_ms), after a pass that armed something: one read.
    assert len(store.arm(ME, leases, now + 60, 100).tasks) > 0
    assert trips.during(lambda: store.arm(ME, leases, now + 80, 100, urgent_ms=now + 70)) == [
        "(SELECT"
    ]


# -- the skip probe ------------------------------------------------------------------------------

_PROBED = [(shard, i) for shard in range(SHARD_COUNT) for i in range(16)]
_STEP_MS = 10  # rows and marks sit on a grid of this step after now
_MARK = st.one_of(
    st.just(BOTTOM),
    # Steps from the bound's (the interesting ones are near it); an id within the rows'.
    st.tuples(st.integers(-3, 2), st.sampled_from(["", "p12-", TOP_ID])),
)


@pytest.fixture
def probed(store: MySQLStore, db: Any) -> int:
    """Rows of every shard on a grid of due times and generations 1-6, written
    once for all the examples; now, where the grid starts."""
    now = clock(store)
    rng = random.Random(5)
    rows = []
    for shard, i in _PROBED:
        [tid] = in_shard(shard, 1, f"p{i}-")
        fire_ms = now + _STEP_MS * rng.randint(0, 12) + rng.choice((0, 0, 1))  # on or just past
        rows.append((tid, shard, rng.randint(1, 6), fire_ms))
    with db.cursor() as cur:
        cur.executemany(
            "INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms)"
            " VALUES (%s, %s, 1, %s, %s, %s)",
            [(tid, shard, gen, fire_ms, fire_ms) for tid, shard, gen, fire_ms in rows],
        )
    return now


@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # rows only read
)
@given(
    marks=st.lists(st.tuples(_MARK, st.integers(1, 7)), min_size=SHARD_COUNT, max_size=SHARD_COUNT),
    bound_step=st.integers(3, 10),
    bound_past=st.integers(0, 1),
    shards=st.sets(st.integers(0, SHARD_COUNT - 1), min_size=1),
)
def test_the_skip_probe_finds_a_row_exactly_where_the_reads_would(
    store: MySQLStore,
    probed: int,
    marks: list[tuple[tuple[int, str], int]],
    bound_step: int,
    bound_past: int,
    shards: set[int],
) -> None:
    """Its oracle is the pass's own reads (what the probe replaced): a row
    from one exactly when the other finds one."""
    now = probed
    held = {
        s: ShardMarks(
            mark if mark == BOTTOM else (now + _STEP_MS * (bound_step + mark[0]), mark[1]), gen
        )
        for s, (mark, gen) in enumerate(marks)
        if s in shards
    }
    bound_ms = now + _STEP_MS * bound_step + bound_past
    # Each shard alone too: over several, one shard's row answers for all.
    for some in [held, *({s: m} for s, m in held.items())]:
        with store._tables.read() as tx:
            reads = tx.read_for_arming(some, bound_ms, 1)
            assert tx.any_to_arm(some, bound_ms) == bool(reads.ranged or reads.fresh), some


# -- query plans ---------------------------------------------------------------------------------


def _explain(db: Any, statement: str, params: Any) -> list[dict[str, Any]]:
    with db.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("EXPLAIN " + statement, params)
        return list(cur.fetchall())


def test_the_arming_reads_are_index_ranges_without_a_sort(store: MySQLStore, db: Any) -> None:
    now = clock(store)
    for batch in range(5):
        rows = [NewRow(Task(f"p{batch}-{i}", now + i * 7, "rk")) for i in range(2000)]
        store.insert(rows, atomic=True)
    query(db, "ANALYZE TABLE th_tasks")
    armed_ms, armed_id, gen = now + 5000, "p2-7", 3
    held = {s: ShardMarks((armed_ms, armed_id if s % 2 else TOP_ID), gen) for s in range(64)}
    plan = _explain(db, *arm_reads(held, now + 5200, 100))
    tables = [p for p in plan if p["table"] == "th_tasks"]
    assert [(p["type"], p["key"]) for p in tables] == [
        ("range", "th_tasks_fire"),
        ("range", "th_tasks_gen"),
    ]
    assert not any("filesort" in (p["Extra"] or "") for p in plan)
    took = (1, -(2**62), -(2**62), "", armed_ms, armed_ms, armed_id, gen, 100)
    [inherited] = _explain(db, sql.INHERITED, took)
    assert (inherited["type"], inherited["key"]) == ("range", "th_tasks_fire")
    assert "filesort" not in (inherited["Extra"] or "")
    probe = _explain(db, *arm_probe({**held, 0: ShardMarks((now, "p0-7"), gen)}, now + 5200))
    assert [(p["type"], p["key"]) for p in probe if p["table"] == "th_tasks"] == [
        ("range", "th_tasks_gen"),
        ("range", "th_tasks_fire"),
    ]
    [any_due] = _explain(db, sql.ANY_DUE.format(shards=sql.placeholders(64)), [*range(64), now])
    assert (any_due["type"], any_due["key"]) == ("range", "th_tasks_fire")
    assert "Using index" in (any_due["Extra"] or "")  # the index alone, no row read
    [earliest] = _explain(db, sql.EARLIEST_DUE, ())
    assert "Select tables optimized away" in (earliest["Extra"] or "")  # the index's first entry
    assert store.earliest_due_ms() == now


# -- the dedup window's fast-path flag (docs/design/flow-control.md, section 2) ------------------


def test_the_fast_insert_runs_only_while_no_window_was_written(
    pymysql_store: MySQLStore, db: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = pymysql_store
    now = clock(store)
    store.insert([NewRow(Task("p0", now + 60_000, "rk", b"1"))], atomic=False)  # warm
    trips = _Trips(monkeypatch)
    plain = [NewRow(Task("p1", now + 60_000, "rk", b"1"))]
    assert trips.during(lambda: store.insert(plain, atomic=False)) == ["INSERT"]  # fast
    assert query(db, "SELECT value FROM th_meta WHERE name = 'dedup_windows'") == [("0",)]
    windowed = Task("w1", now + 60_000, "rk", b"1", meta=make_meta(dedup_window_ms=1000))
    store.insert([NewRow(windowed)], atomic=False)
    assert query(db, "SELECT value FROM th_meta WHERE name = 'dedup_windows'") == [("1",)]
    # A store that has not seen the flag tries the fast statement once: it
    # inserts nothing, and the locked path writes the row.
    other = pymysql_backend(database_url).store
    try:
        row = NewRow(Task("p2", now + 60_000, "rk", b"1"))
        assert outcomes(other.insert([row], atomic=False)) == [InsertOutcome.CREATED]
        assert (
            trips.during(lambda: other.insert([NewRow(Task("p3", now, "rk"))], atomic=False))[0]
            != "INSERT"
        )  # no fast attempt any more
    finally:
        other.close()


def test_setting_the_flag_waits_for_a_fast_insert_holding_it(
    pymysql_store: MySQLStore, database_url: str
) -> None:
    """A fast statement reads the flag row in share mode: the windowed
    insert that sets it waits until that statement ended, so no fast insert
    can land after a windowed task's record exists."""
    store = pymysql_store
    now = clock(store)
    holder = pymysql.connect(**{**connect_kwargs(database_url), "autocommit": False})
    done = threading.Event()
    try:
        with holder.cursor() as cur:  # what the fast statement holds while it runs
            cur.execute("SELECT value FROM th_meta WHERE name = 'dedup_windows' LOCK IN SHARE MODE")
        windowed = Task("w1", now + 60_000, "rk", b"1", meta=make_meta(dedup_window_ms=1000))

        def write() -> None:
            store.insert([NewRow(windowed)], atomic=False)
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        setting = (
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
            " WHERE info LIKE 'UPDATE th_meta SET value = %%'"
        )
        with holder.cursor() as cur:  # the writer's statement runs, held by the lock
            wait_for(lambda: cur.execute(setting) and cur.fetchone()[0] == 1, 30)
        assert not done.is_set(), "the flag was set while a fast statement held it"
        holder.commit()  # the fast statement ends
        assert done.wait(30)
        writer.join(30)
    finally:
        holder.close()
