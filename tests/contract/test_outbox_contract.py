"""The outbox (R6o; docs/design/flow-control.md, section 6), against every
store: a task a caller wrote with :func:`triggerhook.outbox.schedule_in`
inside its own transaction is moved into the task table by
``move_outbox`` once that transaction committed, exactly once, by its
``on_conflict`` rule; a transaction rolled back leaves nothing; a row no
release wrote is deleted unmoved; on MySQL, a row an open transaction holds
is skipped, not waited for."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support.stores import DEFAULT_ROUTING_KEY, Backend

from triggerhook.domain.meta import make_meta
from triggerhook.domain.spec import TaskSpec
from triggerhook.domain.task import InsertOutcome, Task, TaskInfo, TaskState
from triggerhook.errors import ValidationError
from triggerhook.interfaces import NewRow, TaskStore
from triggerhook.outbox import schedule_in

LATER_MS = 600_000


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def spec(task_id: str, due_ms: int, **more: Any) -> TaskSpec:
    return TaskSpec(id=task_id, at_ms=due_ms, payload=b"p", **more)


def moved(store: TaskStore, now_ms: int, limit: int = 100) -> list[tuple[str, InsertOutcome]]:
    result = store.move_outbox(limit, now_ms)
    assert result.taken == len(result.inserted)
    return [(i.task.id, i.outcome) for i in result.inserted]


def test_a_committed_task_is_moved_once(backend: Backend, store: TaskStore, now: int) -> None:
    with backend.caller() as conn:
        made = schedule_in(conn, spec("a", now + LATER_MS, tags=["t"], routing_key="rk.a"))
        schedule_in(conn, spec("b", now + LATER_MS), now_ms=now)
    assert made == Task("a", now + LATER_MS, "rk.a", b"p", meta=make_meta(tags=["t"]))
    assert store.outbox_waiting()[1] == 2
    assert moved(store, now) == [("a", InsertOutcome.CREATED), ("b", InsertOutcome.CREATED)]
    assert store.get("a") == TaskInfo(made, TaskState.SCHEDULED)
    # No routing key: the moving instance's default.
    b = store.get("b")
    assert b is not None and b.task.routing_key == DEFAULT_ROUTING_KEY
    # Gone from the outbox with the move: a second move finds nothing.
    assert moved(store, now) == []
    assert store.outbox_waiting() == (None, 0)


def test_a_rolled_back_transaction_leaves_nothing(
    backend: Backend, store: TaskStore, now: int
) -> None:
    with pytest.raises(RuntimeError), backend.caller() as conn:
        schedule_in(conn, spec("a", now + LATER_MS))
        raise RuntimeError("the business write failed")
    assert moved(store, now) == []
    assert store.get("a") is None


def test_bad_input_raises_before_anything_is_written(
    backend: Backend, store: TaskStore, now: int
) -> None:
    with backend.caller() as conn:
        with pytest.raises(ValidationError) as bad:
            schedule_in(conn, spec("a b", now + LATER_MS))
        assert bad.value.field == "id"
        with pytest.raises(ValidationError) as bad_rule:
            schedule_in(conn, spec("a", now + LATER_MS, on_conflict="overwrite"))
        assert bad_rule.value.field == "on_conflict"
        with pytest.raises(ValidationError) as not_a_connection:
            schedule_in(object(), spec("a", now + LATER_MS))
        assert not_a_connection.value.field == "connection"
    assert store.outbox_waiting() == (None, 0)


def test_the_rows_apply_in_order_by_their_rules(
    backend: Backend, store: TaskStore, now: int
) -> None:
    store.insert([NewRow(Task("kept", now + LATER_MS, "rk", b"old"))], atomic=False)
    store.insert([NewRow(Task("refused", now + LATER_MS, "rk", b"old"))], atomic=False)
    with backend.caller() as conn:
        schedule_in(conn, spec("new", now + LATER_MS))
        schedule_in(conn, spec("new", now + LATER_MS + 1, on_conflict="replace"))
        schedule_in(conn, spec("kept", now + LATER_MS, on_conflict="keep"))
        schedule_in(conn, spec("refused", now + LATER_MS))  # error: a conflict
        schedule_in(conn, TaskSpec(id="new", at_ms=now + LATER_MS + 1, payload=b"p"))  # same
    assert moved(store, now) == [
        ("new", InsertOutcome.CREATED),
        ("new", InsertOutcome.REPLACED),
        ("kept", InsertOutcome.KEPT),
        ("refused", InsertOutcome.CONFLICT),
        ("new", InsertOutcome.EXISTS),
    ]
    new, kept = store.get("new"), store.get("kept")
    assert new is not None and new.task.due_ms == now + LATER_MS + 1
    assert kept is not None and kept.task.payload == b"old"
    assert store.outbox_waiting() == (None, 0)


def test_a_move_takes_the_oldest_rows_up_to_its_limit(
    backend: Backend, store: TaskStore, now: int
) -> None:
    with backend.caller() as conn:
        for n in range(5):
            schedule_in(conn, spec(f"t{n}", now + LATER_MS), now_ms=now + n)
    assert store.outbox_waiting() == (now, 5)
    assert [tid for tid, _ in moved(store, now, limit=2)] == ["t0", "t1"]
    assert store.outbox_waiting() == (now + 2, 3)
    assert [tid for tid, _ in moved(store, now, limit=2)] == ["t2", "t3"]
    assert [tid for tid, _ in moved(store, now, limit=2)] == ["t4"]


def test_a_row_no_release_wrote_is_deleted_unmoved(
    backend: Backend, store: TaskStore, now: int
) -> None:
    with backend.caller() as conn:
        schedule_in(conn, spec("good", now + LATER_MS))
        cur = conn.cursor()
        mark = "?" if type(conn).__module__ == "sqlite3" else "%s"
        cur.execute(
            "INSERT INTO th_outbox (id, rev, due_ms, on_conflict, created_ms)"
            f" VALUES ('bad', 1, 1, {mark}, 1)",
            ("overwrite",),
        )
        cur.close()
    result = store.move_outbox(100, now)
    assert (result.taken, [(i.task.id, i.outcome) for i in result.inserted]) == (
        2,
        [("good", InsertOutcome.CREATED)],
    )
    assert store.get("bad") is None
    assert store.outbox_waiting() == (None, 0)


def test_an_id_fired_within_its_window_is_refused_at_the_move(
    backend: Backend, store: TaskStore, now: int
) -> None:
    fired = Task("w", now - 10, "rk", b"1", meta=make_meta(dedup_window_ms=60_000))
    store.insert([NewRow(fired)], atomic=False, now_ms=now)
    leases = [a.lease for a in store.acquire("me", 4, 60_000)]
    [armed] = store.arm("me", leases, now + 1000, 10).tasks
    assert store.delete_recorded([armed], now) == 1
    with backend.caller() as conn:
        schedule_in(conn, spec("w", now + LATER_MS))
    assert moved(store, now + 1) == [("w", InsertOutcome.ALREADY_FIRED)]
    assert store.get("w") is None


def test_a_row_an_open_transaction_holds_is_skipped(
    backend: Backend, store: TaskStore, now: int
) -> None:
    """MySQL: SKIP LOCKED. A caller's transaction still open holds its row:
    the move takes the committed row behind it at once, and the held one
    after its commit (SQLite has one writer at a time: nothing to skip)."""
    if not backend.name.startswith("mysql"):
        pytest.skip("SQLite: one writer at a time, no row locks to skip")
    with backend.caller() as conn:
        schedule_in(conn, spec("first", now + LATER_MS))
    holding = backend.caller()
    conn = holding.__enter__()
    try:
        schedule_in(conn, spec("open", now + LATER_MS))
        with backend.caller() as other:
            schedule_in(other, spec("behind", now + LATER_MS))
        answers: list[list[tuple[str, InsertOutcome]]] = []
        mover = threading.Thread(target=lambda: answers.append(moved(store, now)))
        mover.start()
        mover.join(30)
        assert not mover.is_alive(), "the move waited for the open transaction"
        assert answers == [[("first", InsertOutcome.CREATED), ("behind", InsertOutcome.CREATED)]]
    finally:
        holding.__exit__(None, None, None)  # commits
    assert moved(store, now) == [("open", InsertOutcome.CREATED)]
