"""The SQLite store beyond the contract suite (tests/contract runs it as
``sqlite``): its file, its schema check, its clock, its errors, its threads
and the indexes its statements use."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.stores import in_shard, outcomes

from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.meta import make_meta
from triggerhook.domain.task import CancelResult, InsertOutcome, Task, TaskState
from triggerhook.errors import SchemaError, StoreError, StoreUnavailable
from triggerhook.interfaces import Lease, NewRow
from triggerhook.store.sqlite import SQLiteStore
from triggerhook.store.sqlite import listing as sqlite_listing
from triggerhook.store.sqlite import sql as q

T0 = 1_700_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.ms = float(T0)

    def __call__(self) -> float:
        return self.ms


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "th.db"


@pytest.fixture
def store(path: Path) -> Iterator[SQLiteStore]:
    made = SQLiteStore(str(path), "default.rk", shard_count=4)
    yield made
    made.close()


def put(store: SQLiteStore, *tasks: Task) -> None:
    inserted = store.insert([NewRow(t) for t in tasks], atomic=False)
    assert outcomes(inserted) == [InsertOutcome.CREATED] * len(tasks)


def leases_of(store: SQLiteStore, instance: str = "me") -> list[Lease]:
    return [a.lease for a in store.acquire(instance, store.shard_count(), 30_000)]


# -- the file -----------------------------------------------------------------------------------


def test_a_reopened_file_keeps_its_tasks_their_state_and_its_shard_count(path: Path) -> None:
    first = SQLiteStore(str(path), "default.rk", shard_count=4)
    put(first, Task("soon", T0, "rk", b"\x00p"), Task("later", T0 + 10**9, ""))
    [armed] = first.arm("me", leases_of(first), T0 + 1000, 10).tasks
    assert armed.id == "soon"
    first.close()

    again = SQLiteStore(str(path), "other.rk", shard_count=16)  # the stored count wins
    try:
        assert again.shard_count() == 4
        again.check_schema()
        assert again.count_tasks() == 2
        soon, later = again.get("soon"), again.get("later")
        assert soon is not None and soon.state is TaskState.FIRING  # still armed
        assert soon.task.payload == b"\x00p"
        # The empty key was written as the first store's default.
        assert later is not None and later.task.routing_key == "default.rk"
        assert again.cancel(["soon", "later"]) == [CancelResult.TOO_LATE, CancelResult.CANCELLED]
    finally:
        again.close()


def test_two_stores_on_one_file_see_each_others_commits(path: Path) -> None:
    writer = SQLiteStore(str(path), shard_count=4)
    reader = SQLiteStore(str(path), shard_count=4)
    try:
        put(writer, Task("a", T0, "rk"))
        info = reader.get("a")
        assert info is not None and info.task.id == "a"
        assert reader.cancel(["a"]) == [CancelResult.CANCELLED]
        assert writer.get("a") is None
    finally:
        writer.close()
        reader.close()


def test_memory_databases_work_and_are_each_their_own() -> None:
    one, two = SQLiteStore(":memory:", "d", 2), SQLiteStore(":memory:", "d", 3)
    try:
        put(one, Task("a", T0, "rk"))
        assert (one.count_tasks(), two.count_tasks()) == (1, 0)
        assert (one.shard_count(), two.shard_count()) == (2, 3)
        [armed] = one.arm("me", leases_of(one), T0, 10).tasks
        assert armed.id == "a"
        assert one.delete_fired([("a", armed.rev)]) == 1
    finally:
        one.close()
        two.close()


def test_the_driver_names_sqlite_and_its_version(store: SQLiteStore) -> None:
    assert store.driver == f"sqlite3 {sqlite3.sqlite_version}"


def test_rows_are_written_in_their_shard_of_its_generation(path: Path, store: SQLiteStore) -> None:
    one, two = in_shard(3, 2)  # of 4 shards, as the store has
    put(store, Task(one, T0, "rk", meta=make_meta(tags=["x"])))
    [armed] = store.arm("me", leases_of(store), T0, 10).tasks  # the shard's generation: 2
    put(store, Task(two, T0, "rk", meta=make_meta(tags=["x"])))
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT id, shard, gen FROM th_tasks ORDER BY id").fetchall()
        tags = conn.execute("SELECT tag, due_ms, id FROM th_task_tags ORDER BY id").fetchall()
    conn.close()
    assert armed.shard == 3
    assert rows == [(one, 3, 1), (two, 3, 2)]
    assert tags == [("x", T0, one), ("x", T0, two)]
    assert store.cancel([two]) == [CancelResult.CANCELLED]
    with sqlite3.connect(path) as conn:  # its tag rows went with it
        assert conn.execute("SELECT id FROM th_task_tags").fetchall() == [(one,)]
    conn.close()


# -- foreign files ---------------------------------------------------------------------------


def test_a_file_an_earlier_release_made_gains_the_throttled_column(path: Path) -> None:
    """A file without th_tasks.throttled (as releases before schema version 6
    made it) gets it at open, every row not throttled; nothing else changes."""
    first = SQLiteStore(str(path), "default.rk", shard_count=4)
    put(first, Task("a", T0, "rk", b"p"))
    first.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("ALTER TABLE th_tasks DROP COLUMN throttled")
    again = SQLiteStore(str(path), "default.rk", shard_count=4)
    try:
        found = again.get("a")
        assert found is not None and (found.task.payload, found.throttled) == (b"p", False)
        again.check_schema()
    finally:
        again.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(th_tasks)")]
        assert columns[-1] == "throttled"
        assert conn.execute("SELECT throttled FROM th_tasks").fetchall() == [(0,)]
    SQLiteStore(str(path), "default.rk", shard_count=4).close()  # a second open adds nothing


def test_a_file_that_is_not_a_database_is_refused(path: Path) -> None:
    path.write_bytes(b"not a database at all, " * 100)
    with pytest.raises(SchemaError, match="is not a triggerhook SQLite database"):
        SQLiteStore(str(path))


def test_a_database_of_another_application_is_refused(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()
    with pytest.raises(SchemaError, match="no th_meta table"):
        SQLiteStore(str(path))
    with sqlite3.connect(path) as conn:  # untouched
        assert [r[0] for r in conn.execute(q.TABLES)] == ["users"]
    conn.close()


def test_a_file_of_another_schema_version_is_refused(path: Path, store: SQLiteStore) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE th_meta SET value = '99' WHERE name = 'schema_version'")
    conn.close()
    with pytest.raises(SchemaError, match="schema version 99, this release's is 1"):
        store.check_schema()
    with pytest.raises(SchemaError, match="schema version 99"):
        SQLiteStore(str(path))


def test_a_file_without_a_schema_version_is_refused(path: Path, store: SQLiteStore) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM th_meta WHERE name = 'schema_version'")
    conn.close()
    with pytest.raises(SchemaError, match="has no schema_version"):
        SQLiteStore(str(path))


def test_a_missing_directory_is_a_store_error_naming_the_path(tmp_path: Path) -> None:
    where = tmp_path / "no-such-dir" / "th.db"
    with pytest.raises(StoreError, match="no-such-dir"):
        SQLiteStore(str(where))


def test_a_bad_shard_count_is_refused(path: Path) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        SQLiteStore(str(path), shard_count=0)
    assert not path.exists()


# -- errors and lifetime -------------------------------------------------------------------------


def test_a_database_locked_by_another_writer_is_unavailable(path: Path) -> None:
    store = SQLiteStore(str(path), shard_count=4, busy_timeout_ms=50)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="locked") as raised:
            store.insert([NewRow(Task("a", T0, "rk"))], atomic=False)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        assert store.get("a") is None  # reads go on (WAL)
        other.execute("ROLLBACK")
        put(store, Task("a", T0, "rk"))  # and writes, once it is free
        assert store.count_tasks() == 1
    finally:
        other.close()
        store.close()


def test_a_closed_store_raises_store_errors(store: SQLiteStore) -> None:
    store.close()
    store.close()  # twice: fine
    with pytest.raises(StoreError):
        store.get("a")
    with pytest.raises(StoreError):
        store.insert([NewRow(Task("a", T0, "rk"))], atomic=False)


# -- the clock ----------------------------------------------------------------------------------


def test_the_store_runs_on_its_clock(path: Path) -> None:
    clock = FakeClock()
    store = SQLiteStore(str(path), shard_count=2, now_ms=clock)
    try:
        clock.ms = T0 + 0.7
        assert store.database_time_us() == T0 * 1000 + 700
        mine = store.acquire("me", 2, 100)
        assert len(mine) == 2
        store.register("a", 1, "h", 1, 100)
        clock.ms = T0 + 100.9  # whole ms: T0 + 100, the lease's last millisecond
        assert store.acquire("other", 2, 100) == []
        assert store.live_members() == 1
        clock.ms = T0 + 101
        assert len(store.acquire("other", 2, 100)) == 2
        assert store.live_members() == 0
    finally:
        store.close()


# -- threads ------------------------------------------------------------------------------------


def test_threads_share_the_store(store: SQLiteStore) -> None:
    leases = leases_of(store)
    armed: list[str] = []
    cancelled: list[CancelResult] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def writer(n: int) -> None:
        try:
            for i in range(40):
                put(store, Task(f"w{n}-{i:02}", T0 + i, "rk"))
                if i % 4 == 0:  # cancelled, or too late if armed meanwhile
                    cancelled.extend(store.cancel([f"w{n}-{i:02}"]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def armer() -> None:
        try:
            while not done.is_set():
                armed.extend(t.id for t in store.arm("me", leases, T0 + 100, 7).tasks)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    arming = threading.Thread(target=armer)
    arming.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    done.set()
    arming.join(30)
    assert errors == []
    armed.extend(t.id for t in store.arm("me", leases, T0 + 100, 1000).tasks)
    assert len(armed) == len(set(armed))  # each armed once
    stored = {i.task.id for i in store.list_tasks(TaskFilter(), None, 1000)}
    assert set(armed) == stored  # everything left is armed
    assert len(cancelled) == 40
    assert len(stored) == 160 - cancelled.count(CancelResult.CANCELLED)


# -- indexes ------------------------------------------------------------------------------------


def _plan(store: SQLiteStore, statement: str, params: list[object]) -> str:
    rows = store._query((f"EXPLAIN QUERY PLAN {statement}", params))
    return " | ".join(str(r[3]) for r in rows)


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (TaskFilter(), "th_tasks_listed"),
        (TaskFilter(routing_key="rk"), "th_tasks_key"),
        (TaskFilter(tag="t", routing_key="rk"), "PRIMARY KEY (tag=?"),
        (TaskFilter(due_after_ms=T0, state=TaskState.FIRING), "th_tasks_listed"),
    ],
    ids=["all", "routing-key", "tag", "due-and-state"],
)
def test_a_listing_reads_an_index_in_due_order(
    store: SQLiteStore, where: TaskFilter, index: str
) -> None:
    plan = _plan(store, *sqlite_listing.list_tasks(where, (T0, "a"), 10))
    assert index in plan
    assert "TEMP B-TREE" not in plan  # no sort
    assert "SCAN" not in plan


def test_the_arming_reads_are_index_ranges(store: SQLiteStore) -> None:
    ranged = _plan(store, q.ARM_RANGED, [0, T0, "a", T0 + 5, 10])
    fresh = _plan(store, q.ARM_FRESH, [0, 1, T0, "a", 10])
    inherited = _plan(store, q.INHERITED, [0, T0, "a", T0 + 5, "b", 2, 10])
    assert "th_tasks_fire (shard=? AND (fire_ms,id)>(?,?)" in ranged
    assert "th_tasks_gen (shard=? AND gen=? AND (fire_ms,id)<(?,?))" in fresh
    assert "th_tasks_fire (shard=? AND (fire_ms,id)>(?,?)" in inherited
    assert "TEMP B-TREE" not in ranged + fresh + inherited
    idle = _plan(store, q.ANY_DUE.format(shards=q.placeholders(2)), [0, 1, T0])
    assert "COVERING INDEX th_tasks_fire (shard=? AND fire_ms<?)" in idle
