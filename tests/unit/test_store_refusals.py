"""A database that refuses writes (read-only, full) is transient: StoreReadOnly.

* Translation at the adapter boundary: each MySQL/MariaDB code (both
  drivers), and SQLite's own read-only and full errors (made for real).
* The engine rides it out: its threads back off and keep going, and the
  readiness reasons name the kind of refusal (never the server's text) until
  a write succeeds; a group commit's refusal is remembered only for a while.
* The HTTP API answers a refused write 503 with ``Retry-After``, not 500.

The same against a real MariaDB set read-only, and a real daemon:
tests/integration/test_read_only_database.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import MySQLdb
import pymysql
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from support.fakes import FakeClock, FakePublisher, FakeStore
from support.waiting import wait_for

from triggerhook.api.http import HttpApi
from triggerhook.app import TriggerHook
from triggerhook.engine import groupcommit
from triggerhook.engine.groupcommit import GroupCommitter
from triggerhook.errors import StoreError, StoreReadOnly, StoreUnavailable
from triggerhook.service import Service
from triggerhook.settings import Settings
from triggerhook.store.mysql import drivers
from triggerhook.store.sqlite.schema import translated
from triggerhook.wiring import assemble, http_config

DRIVERS = {"pymysql": pymysql.err, "mysqldb": MySQLdb}
READ_ONLY, FULL = "read-only", "out of space"
WAIT_S = 10.0

# (code, the server's message, the class, StoreReadOnly.kind or None)
CODES = [
    (1290, "The MariaDB server is running with the --read-only option so it cannot execute "
     "this statement", StoreReadOnly, READ_ONLY),
    (1290, "The MySQL server is running with the --super-read-only option so it cannot "
     "execute this statement", StoreReadOnly, READ_ONLY),
    (1792, "Cannot execute statement in a READ ONLY transaction.", StoreReadOnly, READ_ONLY),
    (3100, "Error on observer while running replication hook 'before_commit'.", StoreReadOnly,
     READ_ONLY),
    (1036, "Table 'th_tasks' is read only", StoreReadOnly, READ_ONLY),
    (1836, "Running in read-only mode", StoreReadOnly, READ_ONLY),
    (1874, "InnoDB is in read only mode.", StoreReadOnly, READ_ONLY),
    (1114, "The table 'th_tasks' is full", StoreReadOnly, FULL),
    (1021, "Disk full (/var/lib/mysql/th/th_tasks.ibd); waiting for someone to free some "
     'space... (errno: 28 "No space left on device")', StoreReadOnly, FULL),
    # 1030 and 1180 carry an errno: MariaDB's wording, then MySQL's.
    (1030, 'Got error 28 "No space left on device" from storage engine InnoDB', StoreReadOnly,
     FULL),
    (1030, "Got error 28 - 'No space left on device' from storage engine", StoreReadOnly, FULL),
    (1030, 'Got error 165 "Table is read only" from storage engine InnoDB', StoreReadOnly,
     READ_ONLY),
    (1180, 'Got error 28 "No space left on device" during COMMIT', StoreReadOnly, FULL),
    # Any other failed COMMIT was rolled back: nothing written, retried as an outage.
    (1180, 'Got error 6 "No such device or address" during COMMIT', StoreUnavailable, None),
    # Another engine error is no passing state: as before.
    (1030, 'Got error 168 "Unknown (generic) error from engine" from storage engine InnoDB',
     StoreError, None),
]  # fmt: skip


@pytest.mark.parametrize("name", list(DRIVERS))
@pytest.mark.parametrize(("code", "message", "expected", "kind"), CODES)
def test_refused_writes_translate_at_the_driver_seam(
    name: str, code: int, message: str, expected: type[Exception], kind: str | None
) -> None:
    driver = drivers.load(name)
    exc = DRIVERS[name].OperationalError(code, message)  # both drivers' class for these
    translated_exc = driver.translate(exc, "th")
    assert type(translated_exc) is expected
    if kind is not None:
        assert isinstance(translated_exc, StoreReadOnly)
        assert translated_exc.kind == kind
        assert message in str(translated_exc)  # the detail, for the log
    if expected is not StoreError:
        assert not driver.is_connection_error(exc)  # the session stays: no reconnect


def test_sqlite_read_only_and_full_files_refuse_writes_transiently() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.execute("PRAGMA query_only = ON")  # as a file opened read-only: SQLITE_READONLY
    with pytest.raises(sqlite3.OperationalError) as read_only:
        conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("PRAGMA query_only = OFF")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 1}")  # as a full disk: SQLITE_FULL
    with pytest.raises(sqlite3.OperationalError) as full:
        for _ in range(10):
            conn.execute("INSERT INTO t VALUES (?)", (b"x" * 4096,))
    conn.close()

    refused = translated(read_only.value, "th.db")
    assert isinstance(refused, StoreReadOnly)
    assert refused.kind == READ_ONLY
    assert "readonly database" in str(refused)
    refused = translated(full.value, "th.db")
    assert isinstance(refused, StoreReadOnly)
    assert refused.kind == FULL
    assert "full" in str(refused)


# -- the engine rides it out, and readiness names it ---------------------------------


def _refused() -> Exception:
    """What the MySQL store raises when the server is read-only."""
    exc = pymysql.err.OperationalError(1290, "The MariaDB server is running with --read-only")
    return drivers.load("pymysql").translate(exc, "th")


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def hook(store: FakeStore) -> Iterator[TriggerHook]:
    """A started engine (its keeper's round: a third of a 1.5 s lease)."""
    settings = Settings(
        instance_id="unit",
        shard_lease_ms=1500,
        database_idle_transaction_timeout_s=1,
        switch_interval_us=0,
    )
    clock = FakeClock()
    hook = assemble(settings, store, clock, lambda buffer, sink, retry, fail: FakePublisher())
    hook.start()
    try:
        yield hook
    finally:
        clock.advance(10 * settings.shard_lease_ms)
        hook.close()


def test_the_keeper_backs_off_and_readiness_names_the_refusal(
    hook: TriggerHook, store: FakeStore
) -> None:
    service = Service(hook, shutdown_timeout_s=1.0)
    try:
        assert service.engine_reasons() == []
        # Six refusals in a row: over half a second of back-off to see them in.
        store.fail_next("heartbeat", *[_refused() for _ in range(6)])

        refused = ["mysql: read-only (writes refused)"]
        wait_for(lambda: service.engine_reasons() == refused, WAIT_S, "no refusal named")
        assert hook.health().alive  # no thread died of it

        wait_for(lambda: hook.health().store_refusal is None, WAIT_S, "refusal not cleared")
        assert service.engine_reasons() == []
        assert hook.health().alive and hook.health().failure is None
        assert hook.engine.keeper.transient_errors == 6
    finally:
        service.executor.shutdown(wait=False)


def test_a_refused_group_commit_is_named_until_a_write_or_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failing = threading.Event()

    def write(rows: object) -> list[int]:
        if failing.is_set():
            raise _refused()
        return [1]

    committer: GroupCommitter[int, int] = GroupCommitter(write, 10, 1, lambda _n, _e: None)
    committer.start()
    try:
        assert committer.submit(1, 5.0) == 1
        assert committer.refusal() is None
        failing.set()
        with pytest.raises(StoreReadOnly):
            committer.submit(1, 5.0)
        refusal = committer.refusal()
        assert refusal is not None and refusal.kind == READ_ONLY
        failing.clear()
        assert committer.submit(1, 5.0) == 1  # a write went through: forgotten
        assert committer.refusal() is None
        failing.set()
        with pytest.raises(StoreReadOnly):
            committer.submit(1, 5.0)
        monkeypatch.setattr(groupcommit, "REFUSAL_HOLD_S", 0.0)  # no write since, for long
        assert committer.refusal() is None
    finally:
        committer.stop()
        committer.join(5.0)


def test_http_answers_a_refused_write_503_with_retry_after(
    hook: TriggerHook, store: FakeStore
) -> None:
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="refusal-test")
    api = HttpApi(hook, http_config(Settings(instance_id="unit")), list, executor)
    store.fail_next("insert", _refused())

    async def scenario() -> tuple[int, str | None, object]:
        client: TestClient[web.Request, web.Application] = TestClient(TestServer(api.app))
        async with client:
            answer = await client.post("/v1/tasks", json={"id": "t-1", "delay_ms": 60_000})
            return answer.status, answer.headers.get("Retry-After"), await answer.json()

    try:
        status, retry_after, body = asyncio.run(scenario())
    finally:
        executor.shutdown(wait=True)
    assert (status, retry_after) == (503, "1")
    assert body == {"error": {"code": "unavailable", "message": "database unavailable; retry"}}
    assert store.ids() == set()
