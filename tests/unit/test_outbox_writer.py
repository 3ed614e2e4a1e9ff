"""The outbox without a server: :func:`triggerhook.outbox.schedule_in`
on sqlite3 and SQLAlchemy connections to an SQLite store's file (the dev
store: the same table and mover as MySQL's), and the ``th-outbox`` thread's
loop (engine/outbox.py) over a move it is given."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from triggerhook.domain.spec import TaskSpec
from triggerhook.domain.task import InsertOutcome
from triggerhook.engine.outbox import OutboxMover
from triggerhook.errors import StoreUnavailable, ValidationError
from triggerhook.outbox import schedule_in
from triggerhook.store.sqlite import SQLiteStore

LATER_MS = 600_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    made = SQLiteStore(str(tmp_path / "th.db"), "dflt", 4)
    yield made
    made.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def moved_ids(store: SQLiteStore) -> list[tuple[str, InsertOutcome]]:
    return [(i.task.id, i.outcome) for i in store.move_outbox(100, now_ms()).inserted]


def test_a_sqlalchemy_connection_commits_with_the_business_write(
    store: SQLiteStore, tmp_path: Path
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'th.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id TEXT)"))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO orders VALUES ('o1')"))
        schedule_in(conn, TaskSpec(id="remind-o1", at_ms=now_ms() + LATER_MS))
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(text("INSERT INTO orders VALUES ('o2')"))
        schedule_in(conn, TaskSpec(id="remind-o2", at_ms=now_ms() + LATER_MS))
        raise RuntimeError("rolled back")
    engine.dispose()
    assert moved_ids(store) == [("remind-o1", InsertOutcome.CREATED)]
    assert store.get("remind-o2") is None


def test_a_sqlalchemy_session_writes_in_its_transaction(store: SQLiteStore, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'th.db'}")
    with Session(engine) as session, session.begin():
        schedule_in(session, TaskSpec(id="s1", delay_ms=LATER_MS, routing_key="rk.s"))
    with Session(engine) as session:
        schedule_in(session, TaskSpec(id="s2", delay_ms=LATER_MS))
        session.rollback()
    engine.dispose()
    assert moved_ids(store) == [("s1", InsertOutcome.CREATED)]
    info = store.get("s1")
    assert info is not None and info.task.routing_key == "rk.s"


def test_a_sqlite3_connection_and_its_rollback(store: SQLiteStore, tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "th.db")
    try:
        schedule_in(conn, TaskSpec(id="a", delay_ms=LATER_MS))
        conn.rollback()
        schedule_in(conn, TaskSpec(id="b", delay_ms=LATER_MS))
        conn.commit()
    finally:
        conn.close()
    assert moved_ids(store) == [("b", InsertOutcome.CREATED)]


def test_what_is_not_a_connection_is_refused(store: SQLiteStore) -> None:
    for thing in (object(), "sqlite:///th.db", None):
        with pytest.raises(ValidationError) as refused:
            schedule_in(thing, TaskSpec(id="a", delay_ms=LATER_MS))
        assert refused.value.field == "connection"


# -- th-outbox: the mover's loop -------------------------------------------------------------


class Moves:
    """A move that answers from a script (rows taken per call, or an error)."""

    def __init__(self, script: list[int | Exception]) -> None:
        self.script = script
        self.calls: list[float] = []
        self.done = threading.Event()

    def __call__(self, limit: int) -> int:
        self.calls.append(time.monotonic())
        if not self.script:
            self.done.set()
            return 0
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def run_until_done(moves: Moves, poll_ms: int, batch: int = 10) -> OutboxMover:
    failures: list[BaseException] = []
    mover = OutboxMover(moves, poll_ms, lambda _n, exc: failures.append(exc), batch)
    mover.start()
    try:
        assert moves.done.wait(20), "the mover did not get through its script"
    finally:
        mover.stop()
        assert mover.join(5)
    assert failures == []
    return mover


def test_a_full_batch_is_followed_at_once_and_a_short_one_waits() -> None:
    moves = Moves([10, 10, 3])
    run_until_done(moves, poll_ms=3000)
    gaps = [b - a for a, b in zip(moves.calls, moves.calls[1:], strict=False)]
    # After the two full batches, the next move at once (told from a poll by
    # half of one: no timing is judged closer); after the short one, a poll later.
    assert gaps[0] < 1.5 and gaps[1] < 1.5, gaps
    assert gaps[2] >= 2.99, gaps


def test_a_transient_failure_is_retried() -> None:
    moves = Moves([StoreUnavailable("down"), 2])
    mover = run_until_done(moves, poll_ms=50)
    assert mover.transient_errors == 1
    assert len(moves.calls) >= 3


def test_it_stops_promptly_while_waiting() -> None:
    moves = Moves([])
    mover = OutboxMover(moves, 60_000, lambda _n, _exc: None)
    mover.start()
    assert moves.done.wait(5)
    started = time.monotonic()
    mover.stop()
    assert mover.join(5)
    assert time.monotonic() - started < 2.0
