"""R10 (docs/design/ownership.md): a transaction left idle — its process paused
between a locking read and its commit — is aborted by MariaDB after
``database_idle_transaction_timeout_s``, and its locks are freed for the
other instances. And the other way round: a statement the client stops
waiting for does not run on in the server. Against the real server."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pymysql
import pytest
from support.mysql import connect
from support.waiting import wait_until

from triggerhook.errors import StoreUnavailable
from triggerhook.store.mysql.connection import STATEMENT_MARGIN_S, ConnectionPool, Target, target


def _setup(database_url: str) -> None:
    with connect(database_url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("INSERT INTO t VALUES (1)")
        conn.commit()


def _can_lock(database_url: str) -> bool:
    """Another session locks the row without waiting (NOWAIT)."""
    with connect(database_url) as conn, conn.cursor() as cur:
        try:
            cur.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE NOWAIT")
        except pymysql.err.OperationalError:  # 1205 / 3572: locked by the idle one
            return False
        conn.rollback()
        return True


def test_a_paused_transaction_is_aborted_and_its_locks_freed(database_url: str) -> None:
    _setup(database_url)
    pool = ConnectionPool(target(database_url), 1, idle_transaction_timeout_s=1)
    freed = threading.Event()
    with pytest.raises(StoreUnavailable), pool.transaction() as cur:
        cur.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE")
        assert not _can_lock(database_url)  # held while the transaction lives
        # "Paused" here: nothing more is sent until the row is free.
        if wait_until(lambda: _can_lock(database_url), 15):
            freed.set()
        cur.execute("SELECT 1")  # the paused process resumes: its session is gone
    assert freed.is_set(), "the idle transaction kept its lock"
    # The pool opens a fresh session for the next caller.
    with pool.transaction() as cur:
        cur.execute("SELECT @@session.idle_transaction_timeout")
        assert cur.fetchone() == (1,)
    pool.close()


def test_without_the_timeout_the_lock_stays(database_url: str) -> None:
    # The other side of the test above: it is the setting that frees the lock.
    _setup(database_url)
    pool = ConnectionPool(target(database_url), 1, idle_transaction_timeout_s=0)
    with pool.transaction() as cur:
        cur.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE")
        assert not wait_until(lambda: _can_lock(database_url), 3)
    assert _can_lock(database_url)
    pool.close()


def test_the_server_stops_a_statement_before_the_client_gives_up(database_url: str) -> None:
    io_timeout_s = 3
    to = target(database_url)
    short = Target(to.driver, replace(to.endpoint, io_timeout_s=io_timeout_s))
    pool = ConnectionPool(short, 1)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="max_statement_time"), pool.transaction() as cur:
        cur.execute("SELECT SLEEP(20)")
    # Stopped by the server (its error, before the client's read timeout),
    assert time.monotonic() - started < io_timeout_s
    with pool.transaction() as cur:
        cur.execute("SELECT @@session.max_statement_time")
        row = cur.fetchone()
        assert row is not None and float(row[0]) == io_timeout_s - STATEMENT_MARGIN_S
        # and nothing of it runs on there.
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.processlist"
            " WHERE info LIKE 'SELECT SLEEP(20)%'"
        )
        assert cur.fetchone() == (0,)
    pool.close()
