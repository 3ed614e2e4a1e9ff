"""The bounds on reads of many tasks, without a server: the interrupt, the
session limits the listing connections get on MariaDB and on MySQL (no MySQL
server runs here: the statements and the error mapping are checked), and
SQLite's own time limit and interrupt (docs/api.md, "Reads of many tasks")."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest

from triggerhook.api.web.forms import View, notice_of
from triggerhook.api.web.handlers import COUNT_UP_TO
from triggerhook.api.web.pages import Listing, listing_page
from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.task import TaskState
from triggerhook.errors import Interrupted, StoreUnavailable, TooCostly
from triggerhook.runtime.interrupt import DEADLINE, Interrupt
from triggerhook.store.mysql import sql
from triggerhook.store.mysql.connection import ConnectionPool, target
from triggerhook.store.sqlite import SQLiteStore

# -- the interrupt -------------------------------------------------------------------------------


def test_an_interrupt_says_why_and_cuts_the_step_in_flight_once() -> None:
    stop = Interrupt()
    assert (stop.why, stop.stopping, stop.is_set) == (None, False, False)
    stop.check()  # nothing to say
    cuts: list[str] = []
    with stop.cutting(lambda: cuts.append("cut")):
        stop.set("its client went away")
        stop.set("the daemon is stopping")  # the first reason stays
    assert cuts == ["cut"]
    assert (stop.why, stop.stopping, stop.is_set) == ("its client went away", True, True)
    with pytest.raises(Interrupted, match="stopped: its client went away"):
        stop.check()
    with pytest.raises(Interrupted), stop.cutting(lambda: cuts.append("never")):
        pass  # a step is not even begun
    assert cuts == ["cut"]


def test_a_cut_never_reaches_a_step_that_has_ended() -> None:
    stop = Interrupt()
    cuts: list[str] = []
    with stop.cutting(lambda: cuts.append("first")):
        pass
    stop.set("late")
    assert cuts == []


def test_a_deadline_stops_between_steps_but_cuts_nothing() -> None:
    now = [100.0]
    stop = Interrupt(deadline_s=101.0, clock=lambda: now[0])
    assert not stop.stopping
    now[0] = 101.0
    assert (stop.why, stop.stopping, stop.is_set) == (DEADLINE, True, False)
    with pytest.raises(Interrupted, match=DEADLINE):
        stop.check()
    cuts: list[str] = []
    with stop.cutting(lambda: cuts.append("cut")):  # a step may still begin, and finish
        pass
    assert cuts == []


# -- the listing connections' session limits (MariaDB, MySQL) ------------------------------------


class _Cursor:
    def __init__(self) -> None:
        self.executed: list[tuple[str, Any]] = []

    def execute(self, query: str, args: Any = None) -> int:
        self.executed.append((query, args))
        return 0


def _pool(statement_timeout_ms: int) -> ConnectionPool:
    # Nothing connects until a connection is borrowed.
    to = target("mysql+pymysql://root@127.0.0.1:3306/th_unit")
    return ConnectionPool(to, 1, autocommit=True, statement_timeout_ms=statement_timeout_ms)


def test_the_listing_connections_get_their_limit_on_mariadb_and_on_mysql() -> None:
    mariadb, mysql = _Cursor(), _Cursor()
    _pool(250)._limit_session(mariadb, mariadb=True)  # type: ignore[arg-type]
    _pool(250)._limit_session(mysql, mariadb=False)  # type: ignore[arg-type]
    assert mariadb.executed == [(sql.STATEMENT_TIME_LIMIT, (0.25,))]  # seconds
    assert mysql.executed == [(sql.SELECT_TIME_LIMIT, (250,))]  # milliseconds
    engine = _Cursor()
    _pool(0)._limit_session(engine, mariadb=True)  # type: ignore[arg-type]
    assert engine.executed == [(sql.STATEMENT_TIME_LIMIT, (29,))]  # just before the read timeout
    longer = _Cursor()
    _pool(120_000)._limit_session(longer, mariadb=True)  # type: ignore[arg-type]
    assert longer.executed == [(sql.STATEMENT_TIME_LIMIT, (29,))]  # never past the client's


@pytest.mark.parametrize("code", [1969, 3024])  # MariaDB's max_statement_time, MySQL's
def test_a_statement_stopped_at_the_listing_limit_is_too_costly_not_an_outage(code: int) -> None:
    stopped = pymysql.err.OperationalError(code, "Query execution was interrupted")
    refused = _pool(250)._translate(stopped)
    assert isinstance(refused, TooCostly) and not isinstance(refused, StoreUnavailable)
    assert "longer than 250 ms" in str(refused) and "narrow the filter" in str(refused)
    # The engine's connections: MariaDB's limit there is just before the
    # client's own read timeout, a database too slow to answer: transient.
    if code == 1969:
        assert isinstance(_pool(0)._translate(stopped), StoreUnavailable)


# -- SQLite: its progress handler ---------------------------------------------------------------


@pytest.fixture
def filled(tmp_path: Path) -> SQLiteStore:
    """A store of 200,000 tasks, filled by one statement."""
    store = SQLiteStore(str(tmp_path / "t.db"), "rk", 4, listing_timeout_ms=1)
    store._conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)"
        " INSERT INTO th_tasks (id, shard, rev, gen, fire_ms, due_ms, routing_key)"
        " SELECT 'f-' || i, i % 4, 1, 1, 4000000000000 + i, 4000000000000 + i, 'rk' FROM n"
    )
    return store


def test_sqlite_stops_a_read_past_its_time_limit(filled: SQLiteStore) -> None:
    scheduled = TaskFilter(state=TaskState.SCHEDULED)
    with pytest.raises(TooCostly, match="longer than 1 ms"):
        filled.count_where(scheduled)
    assert filled.count_where(scheduled, up_to=100) == 100  # a cheap form of it is answered
    assert len(filled.list_tasks(TaskFilter(), None, 10)) == 10
    filled.close()


def test_sqlite_stops_a_read_whose_interrupt_is_set_meanwhile(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "t.db"), "rk", 4)  # no time limit
    stop = Interrupt()
    # The interrupt is set from another thread once the read runs; its query
    # (rows without end) would never return by itself.
    endless: tuple[str, list[Any]] = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n",
        [],
    )
    threading.Timer(0.2, stop.set, ("its client went away",)).start()
    with pytest.raises(Interrupted, match="its client went away"):
        store._query(endless, stop)
    assert store.count_where(TaskFilter()) == 0  # the connection serves on
    store.close()


# -- the web view ---------------------------------------------------------------------------------


def test_the_web_view_says_a_bulk_cancel_stopped_and_a_count_that_stopped() -> None:
    done = {"cancelled": "1000", "too_late": "2"}
    assert notice_of(done) == "1000 cancelled, 2 too late"
    assert notice_of({**done, "stopped": "1"}) == (
        "1000 cancelled, 2 too late; stopped before the end: cancel again for the rest"
    )
    view = View({"tag": "a"}, TaskFilter(tag="a"))
    listing = Listing(view, "i-1", {}, [], count=COUNT_UP_TO, count_capped=True)
    assert "100,000+ matching" in listing_page(listing)
    assert "3 matching" in listing_page(replace(listing, count=3, count_capped=False))
