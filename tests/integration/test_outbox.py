"""Scheduling inside the caller's transaction (``schedule_in``, the outbox;
docs/design/flow-control.md section 6) against a real daemon, MariaDB and
RabbitMQ: a task written in a transaction that commits fires, once and not
early; one whose transaction rolls back, or is chosen as a deadlock's
victim, never fires and leaves nothing; through PyMySQL, mysqlclient
(MySQLdb) and a SQLAlchemy Session alike."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import MySQLdb
import pymysql
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from support.hook import collect_until, header_int
from support.http import ROUTED, Api
from support.mysql import connect_kwargs, with_driver
from support.names import uid
from support.waiting import now_ms

from triggerhook import TaskSpec, schedule_in

TIMEOUT_S = 30.0
DEADLOCK = 1213  # ER_LOCK_DEADLOCK: the victim's transaction is rolled back


def pymysql_conn(url: str) -> Any:
    kwargs = connect_kwargs(url)
    kwargs["autocommit"] = False
    return pymysql.connect(**kwargs)


def mysqldb_conn(url: str) -> Any:
    kwargs = connect_kwargs(url)
    return MySQLdb.connect(
        host=kwargs["host"],
        port=kwargs["port"],
        user=kwargs["user"],
        password=kwargs["password"],
        database=kwargs["database"],
        charset="utf8mb4",
    )


@pytest.fixture
def orders(api: Api) -> Iterator[str]:
    """A business table of the test's own, in the daemon's database."""
    table = uid("orders").replace("-", "_").replace(".", "_")
    conn = pymysql.connect(**connect_kwargs(api.database_url))
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE `{table}` (id VARCHAR(64) PRIMARY KEY, n INT NOT NULL)")
        yield table
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE `{table}`")
    finally:
        conn.close()


def fired_once_not_early(api: Api, task_id: str, due_ms: int, sentinel: str) -> None:
    events = [e for e in collect_until(api.events, sentinel, TIMEOUT_S) if e.message_id == task_id]
    assert len(events) == 1, events
    assert header_int(events[0], "x-due-ms") == due_ms
    assert events[0].received_ms >= due_ms


def after(http: httpx.Client, due_ms: int) -> str:
    """A sentinel due after ``due_ms``: once it arrived, anything due before has too."""
    sentinel = uid("sentinel")
    made = http.post("/v1/tasks", json={"id": sentinel, "at_ms": due_ms + 1000})
    assert made.status_code == 201, made.text
    return sentinel


@pytest.mark.parametrize("connect", [pymysql_conn, mysqldb_conn], ids=["pymysql", "mysqldb"])
def test_a_committed_business_write_fires_its_task(
    api: Api, http: httpx.Client, orders: str, connect: Callable[[str], Any]
) -> None:
    task_id = uid("remind")
    conn = connect(api.database_url)
    try:
        cur = conn.cursor()
        cur.execute(f"INSERT INTO `{orders}` (id, n) VALUES (%s, 1)", (task_id,))
        task = schedule_in(conn, TaskSpec(id=task_id, delay_ms=500, routing_key=ROUTED))
        cur.close()
        conn.commit()
    finally:
        conn.close()
    fired_once_not_early(api, task_id, task.due_ms, after(http, task.due_ms))


def test_a_sqlalchemy_session_commits_its_task_with_its_writes(
    api: Api, http: httpx.Client, orders: str
) -> None:
    task_id = uid("session")
    engine = create_engine(with_driver(api.database_url, "pymysql"))
    try:
        with Session(engine) as session, session.begin():
            session.connection().exec_driver_sql(
                f"INSERT INTO `{orders}` (id, n) VALUES (%s, 1)", (task_id,)
            )
            task = schedule_in(session, TaskSpec(id=task_id, delay_ms=500, routing_key=ROUTED))
    finally:
        engine.dispose()
    fired_once_not_early(api, task_id, task.due_ms, after(http, task.due_ms))


def test_a_rolled_back_transaction_never_fires(api: Api, http: httpx.Client, orders: str) -> None:
    task_id = uid("rolled")
    conn = pymysql_conn(api.database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{orders}` (id, n) VALUES (%s, 1)", (task_id,))
        task = schedule_in(conn, TaskSpec(id=task_id, delay_ms=300, routing_key=ROUTED))
        conn.rollback()
    finally:
        conn.close()
    sentinel = after(http, task.due_ms)
    events = collect_until(api.events, sentinel, TIMEOUT_S)
    assert [e for e in events if e.message_id == task_id] == []
    assert http.get(f"/v1/tasks/{task_id}").status_code == 404


def test_a_deadlock_victim_leaves_nothing_behind(api: Api, http: httpx.Client, orders: str) -> None:
    """Two business transactions lock two rows in opposite orders, each
    having scheduled a task: MariaDB rolls one back (1213), whose task never
    fires; the other commits, and its task fires."""
    first, second = uid("dl-a"), uid("dl-b")
    setup = pymysql.connect(**connect_kwargs(api.database_url))
    with setup.cursor() as cur:
        cur.execute(f"INSERT INTO `{orders}` (id, n) VALUES ('x', 0), ('y', 0)")
    setup.close()
    both_hold = threading.Barrier(2, timeout=TIMEOUT_S)
    outcome: dict[str, str] = {}
    due_ms = now_ms() + 1500

    def business(task_id: str, rows: tuple[str, str]) -> None:
        conn = pymysql_conn(api.database_url)
        try:
            schedule_in(conn, TaskSpec(id=task_id, at_ms=due_ms, routing_key=ROUTED))
            with conn.cursor() as cur:
                cur.execute(f"UPDATE `{orders}` SET n = n + 1 WHERE id = %s", (rows[0],))
                both_hold.wait()
                cur.execute(f"UPDATE `{orders}` SET n = n + 1 WHERE id = %s", (rows[1],))
            conn.commit()
            outcome[task_id] = "committed"
        except pymysql.err.OperationalError as exc:
            assert exc.args[0] == DEADLOCK, exc
            conn.rollback()
            outcome[task_id] = "deadlock"
        finally:
            conn.close()

    threads = [
        threading.Thread(target=business, args=(first, ("x", "y"))),
        threading.Thread(target=business, args=(second, ("y", "x"))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert sorted(outcome.values()) == ["committed", "deadlock"], outcome
    survivor = next(t for t, how in outcome.items() if how == "committed")
    victim = next(t for t, how in outcome.items() if how == "deadlock")
    events = collect_until(api.events, after(http, due_ms), TIMEOUT_S)
    assert [e.message_id for e in events if e.message_id in (first, second)] == [survivor]
    assert http.get(f"/v1/tasks/{victim}").status_code == 404
