"""The connection pool's pre-ping and recycle (store/mysql/connection.py), on the real
MariaDB: a session the server dropped while idle (KILL, as a restart or an
idle limit would) is replaced on checkout, not handed to the first statement;
a connection past its age is closed and replaced. The pool's clock is a fake
the test moves (the server's sessions are real)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest
from support.mysql import connect
from support.waiting import wait_for

from triggerhook.errors import StoreUnavailable
from triggerhook.store.mysql.connection import ConnectionPool, Cursor, target

PING_IDLE_S = 5.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pool(database_url: str, clock: FakeClock) -> Iterator[ConnectionPool]:
    made = ConnectionPool(
        target(database_url), 4, recycle_s=3600, ping_idle_s=PING_IDLE_S, clock=clock
    )
    try:
        yield made
    finally:
        made.close()


def _session_of(cur: Cursor) -> int:
    cur.execute("SELECT CONNECTION_ID()")
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def _session(pool: ConnectionPool) -> int:
    """The server's id of the session the pool lends next."""
    with pool.transaction() as cur:
        return _session_of(cur)


def _open_sessions(mysql_url: str, sessions: set[int]) -> set[int]:
    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT ID FROM information_schema.PROCESSLIST")
            return {int(row[0]) for row in cur.fetchall()} & sessions
    finally:
        conn.close()


def _kill(mysql_url: str, *sessions: int) -> None:
    """Drop the sessions server-side and wait until the server has closed them."""
    conn = connect(mysql_url)
    try:
        with conn.cursor() as cur:
            for session in sessions:
                cur.execute("KILL CONNECTION %s", (session,))
    finally:
        conn.close()
    wait_for(lambda: not _open_sessions(mysql_url, set(sessions)), 10, "killed sessions linger")


def test_a_connection_dropped_while_idle_is_pinged_and_replaced(
    mysql_url: str, pool: ConnectionPool, clock: FakeClock
) -> None:
    first = _session(pool)
    assert _session(pool) == first  # reused while fresh
    _kill(mysql_url, first)
    clock.now += PING_IDLE_S
    second = _session(pool)  # the first statement after the drop succeeds
    assert second != first
    assert _session(pool) == second


def test_a_recently_used_connection_is_not_pinged(
    mysql_url: str, pool: ConnectionPool, clock: FakeClock
) -> None:
    """Without a ping (used under PING_IDLE_S ago) the dead session reaches the
    statement, which fails as unavailable (and the caller retries)."""
    first = _session(pool)
    _kill(mysql_url, first)
    clock.now += PING_IDLE_S - 1
    with pytest.raises(StoreUnavailable):
        _session(pool)
    assert _session(pool) != first  # the dead one was discarded


def test_after_a_dead_connection_the_others_borrowed_before_are_pinged(
    mysql_url: str, pool: ConnectionPool, clock: FakeClock
) -> None:
    with pool.transaction() as outer, pool.transaction() as inner:  # two sessions, both idle
        sessions = {_session_of(outer), _session_of(inner)}
    assert len(sessions) == 2
    _kill(mysql_url, *sessions)  # e.g. a database restart
    clock.now += 1  # recently used: no ping due by idle time
    with pytest.raises(StoreUnavailable):
        _session(pool)  # the first one's statement finds it dead ...
    clock.now += 1
    replacement = _session(pool)  # ... so the other, borrowed before, is pinged first
    assert replacement not in sessions


def test_a_connection_past_its_age_is_replaced(
    mysql_url: str, database_url: str, clock: FakeClock
) -> None:
    pool = ConnectionPool(target(database_url), 2, recycle_s=60, ping_idle_s=10**6, clock=clock)
    try:
        first = _session(pool)
        clock.now += 59
        assert _session(pool) == first
        clock.now += 1
        second = _session(pool)
        assert second != first
        wait_for(lambda: not _open_sessions(mysql_url, {first}), 10, "the old session stays open")
        clock.now += 59
        assert _session(pool) == second
    finally:
        pool.close()


def test_a_tls_file_gone_after_start_makes_the_database_unavailable(
    database_url: str, tmp_path: Path
) -> None:
    """The files are checked when the URL is parsed (a ConfigError at start,
    tests/unit/test_database_url.py); one removed later fails new connections
    as unavailable, naming it, and they are retried."""
    ca = tmp_path / "ca.pem"
    shutil.copy(certifi.where(), ca)
    pool = ConnectionPool(target(f"{database_url}?ssl_ca={ca}"), 1)
    ca.unlink()
    try:
        with pytest.raises(StoreUnavailable, match=f"TLS files \\(ssl_ca='{ca}'\\)"):
            _session(pool)
    finally:
        pool.close()
