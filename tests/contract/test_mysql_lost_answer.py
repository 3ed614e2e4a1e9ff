"""An arming pass whose answer is lost (docs/design/ownership.md, R3a): the
connection breaks after the server ran the pass's statement, before the
store read the answer. A proxy between the store and MariaDB lets the
statement through and drops the answer (on a Galera failover, HAProxy cuts
the writer's sessions so, at any moment).

* The COMMIT went through: the rows are armed by their shard's marks and no
  later read of the pass finds them again. The next pass must take them.
* A statement before the COMMIT lost its answer: the server rolls the pass
  back; the next pass reads the rows again. Either way each row is taken
  once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.mysql import connect, with_driver
from support.stores import DEFAULT_ROUTING_KEY, SHARD_COUNT
from support.tcpproxy import TcpProxy, proxied

from triggerhook.domain.task import Task
from triggerhook.errors import StoreUnavailable
from triggerhook.interfaces import Lease, NewRow
from triggerhook.store.mysql import MySQLStore, init_schema

ME = "me"
LEASE_MS = 30_000
TASKS = 12
ANSWER_S = 10  # the server answers a statement within this

ARMED_ROWS = (
    "SELECT t.id FROM th_tasks t JOIN th_shards s ON s.shard = t.shard"
    " WHERE (t.fire_ms < s.armed_ms OR (t.fire_ms = s.armed_ms AND t.id <= s.armed_id))"
    " AND t.gen < s.arm_gen"
)


@pytest.fixture(params=["mysqlclient", "pymysql"])
def url(request: pytest.FixtureRequest, database_url: str) -> str:
    """The database, with the schema, in each driver's URL."""
    init_schema(database_url, SHARD_COUNT)
    return database_url if request.param == "mysqlclient" else with_driver(database_url, "pymysql")


@pytest.fixture
def through(url: str) -> Iterator[tuple[TcpProxy, MySQLStore]]:
    """A proxy in front of the database and a store that goes through it."""
    with proxied(url) as (proxy, proxied_url):
        store = MySQLStore(proxied_url, DEFAULT_ROUTING_KEY)
        try:
            yield proxy, store
        finally:
            store.close()


def armed_ids(url: str) -> set[str]:
    conn: Any = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(ARMED_ROWS)
            return {row[0] for row in cur.fetchall()}
    finally:
        conn.close()


def due_now(store: MySQLStore) -> tuple[int, list[Lease]]:
    """TASKS rows due now, every shard leased to ME; the database's time."""
    now_ms = store.database_time_us() // 1000
    store.insert([NewRow(Task(f"t{i}", now_ms - i, "rk")) for i in range(TASKS)], atomic=False)
    leases = [a.lease for a in store.acquire(ME, SHARD_COUNT, LEASE_MS)]
    assert len(leases) == SHARD_COUNT
    return now_ms, leases


def failed_pass(proxy: TcpProxy, store: MySQLStore, marker: bytes, leases: list[Lease]) -> None:
    """One arming pass that loses the answer to its statement holding ``marker``."""
    answered = proxy.lose_answer_to(marker)
    with pytest.raises(StoreUnavailable):
        store.arm(ME, leases, store.database_time_us() // 1000 + 1000, 100)
    assert answered.wait(ANSWER_S), f"no statement held {marker!r}"


@pytest.mark.parametrize(
    ("marker", "committed"),
    [
        (b"COMMIT", True),  # armed: no later read finds them, the next pass takes them
        (b"UPDATE th_shards SET armed_ms", False),  # rolled back: read again
    ],
)
def test_the_pass_after_one_whose_answer_was_lost_takes_each_row_once(
    through: tuple[TcpProxy, MySQLStore], url: str, marker: bytes, committed: bool
) -> None:
    proxy, store = through
    now_ms, leases = due_now(store)
    failed_pass(proxy, store, marker, leases)
    everything = {f"t{i}" for i in range(TASKS)}
    assert armed_ids(url) == (everything if committed else set())
    taken = store.arm(ME, leases, now_ms + 1000, 100).tasks
    assert sorted(t.id for t in taken) == sorted(everything)
    assert {t.epoch for t in taken} == {lease.epoch for lease in leases}
    assert store.arm(ME, leases, now_ms + 1000, 100).tasks == []  # each once


def test_a_lost_answer_in_a_shard_lost_since_is_left_to_its_new_owner(
    through: tuple[TcpProxy, MySQLStore], url: str
) -> None:
    """Shards taken over meanwhile: their rows are the new owner's (R2
    inherits them); the old owner's next pass takes nothing of them."""
    proxy, store = through
    now_ms, leases = due_now(store)
    failed_pass(proxy, store, b"COMMIT", leases)
    conn: Any = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE th_shards SET owner = 'other', epoch = epoch + 1")
        conn.commit()
    finally:
        conn.close()
    armed = store.arm(ME, leases, now_ms + 1000, 100)
    assert armed.tasks == []
    assert sorted(armed.lost) == sorted(lease.shard for lease in leases)
