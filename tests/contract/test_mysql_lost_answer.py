"""An arming pass whose answer is lost (docs/design/ownership.md, R3a): the
connection breaks after the server ran the pass's statement, before the
store read the answer. A proxy between the store and MariaDB lets the
statement through and drops the answer (on a Galera failover, HAProxy cuts
the writer's sessions so, at any moment).

* The store raises ArmUnanswered naming what the pass took; the armer hands
  those ids to its next pass over the same lease (``unanswered``).
* The COMMIT went through: the rows are armed by their shard's marks and no
  later read of the pass finds them again. The next pass must take them.
* A statement before the COMMIT lost its answer: the server rolls the pass
  back; the next pass reads the rows again. Either way each row is taken
  once.
* Through the armer: a pass that leaves a lease out (it may have lapsed)
  keeps that lease's ids for a later pass (defect 6 of issue 29: the store
  kept them itself and forgot every shard's at the next pass).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.fakes import FakeClock
from support.mysql import connect, with_driver
from support.stores import DEFAULT_ROUTING_KEY, SHARD_COUNT
from support.tcpproxy import TcpProxy, proxied

from triggerhook.domain.arming import ShardMarks, shard_of
from triggerhook.domain.task import Task
from triggerhook.engine.armer import Armer
from triggerhook.engine.inventory import Inventory
from triggerhook.engine.scheduler import Scheduler
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.engine.shards import ShardTable
from triggerhook.interfaces import Acquired, ArmUnanswered, Lease, NewRow
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


def failed_pass(
    proxy: TcpProxy, store: MySQLStore, marker: bytes, leases: list[Lease]
) -> dict[Lease, frozenset[str]]:
    """One arming pass that loses the answer to its statement holding
    ``marker``; what it says it took."""
    answered = proxy.lose_answer_to(marker)
    with pytest.raises(ArmUnanswered) as raised:
        store.arm(ME, leases, store.database_time_us() // 1000 + 1000, 100)
    assert answered.wait(ANSWER_S), f"no statement held {marker!r}"
    return raised.value.taken


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
    unanswered = failed_pass(proxy, store, marker, leases)
    everything = {f"t{i}" for i in range(TASKS)}
    assert set().union(*unanswered.values()) == everything
    assert armed_ids(url) == (everything if committed else set())
    taken = store.arm(ME, leases, now_ms + 1000, 100, unanswered=unanswered).tasks
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
    unanswered = failed_pass(proxy, store, b"COMMIT", leases)
    conn: Any = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE th_shards SET owner = 'other', epoch = epoch + 1")
        conn.commit()
    finally:
        conn.close()
    armed = store.arm(ME, leases, now_ms + 1000, 100, unanswered=unanswered)
    assert armed.tasks == []
    assert sorted(armed.lost) == sorted(lease.shard for lease in leases)


def test_the_armer_keeps_a_lost_answer_of_a_lease_a_pass_left_out(
    through: tuple[TcpProxy, MySQLStore], url: str
) -> None:
    """A pass loses its COMMIT's answer; the next leaves the first lease out
    (it may have lapsed: it was acquired before the others and its renewal
    failed); once renewed, a pass takes that lease's rows."""
    proxy, store = through
    now_ms, leases = due_now(store)
    clock = FakeClock(now_ms)
    shards, inventory = ShardTable(clock, 0), Inventory(100)
    scheduler = Scheduler(clock, SendBuffer(100), shards, inventory, 100, _failed)
    armer = Armer(
        clock, store, ME, shards, inventory, scheduler,
        arm_ahead_ms=1000, interval_ms=10, batch_size=100, on_failure=_failed,
    )  # fmt: skip
    first = min((lease for lease in leases if _in(lease.shard)), key=lambda x: x.shard)
    for lease in leases:  # the first lease is valid for 1 s, the others for a lease
        until_ms = now_ms + (1000 if lease == first else LEASE_MS)
        shards.add([Acquired(lease, ShardMarks((0, ""), 1))], until_ms)
        shards.inherited_read(lease, None, done=True)
    answered = proxy.lose_answer_to(b"COMMIT")
    with pytest.raises(ArmUnanswered):
        armer.step(now_ms)
    assert answered.wait(ANSWER_S)
    clock.set(now_ms + 2000)  # the first lease may have lapsed
    assert first not in shards.for_arming()
    armer.step(clock.now)
    assert first.shard not in {t.shard for t in scheduler.take_remaining()}
    shards.renewed([first], [first], clock.now + LEASE_MS)  # its renewal went through
    armer.step(clock.now)
    retaken = scheduler.take_remaining()
    expected = {f"t{i}" for i in range(TASKS) if _in(shard_of(f"t{i}", SHARD_COUNT), first)}
    assert expected  # the first lease's shard has rows
    assert {t.id for t in retaken} == expected


def _in(shard: int, lease: Lease | None = None) -> bool:
    """Whether ``shard`` holds one of the test's rows (and is ``lease``'s)."""
    shards = {shard_of(f"t{i}", SHARD_COUNT) for i in range(TASKS)}
    return shard in shards and (lease is None or lease.shard == shard)


def _failed(name: str, exc: BaseException) -> None:
    raise AssertionError(f"{name} failed: {exc!r}")
