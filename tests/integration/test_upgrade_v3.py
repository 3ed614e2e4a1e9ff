"""The upgrade of a version 2 database (claims per row) to version 3 (shards),
store/mysql/migrations.py, on a real table of 100,000 pending tasks: some claimed
by an instance (lease in the future), some armed, some waiting for the retry
of an undelivered event. ``init_schema`` takes it on to the head (version
4's task metadata and listing keys, on top of version 3's shards: every row
kept without metadata; version 5's tables for the dedup window and the
outbox). After it, the store API alone must hand out every task exactly once:
the v2-armed ones as inherited by the first owner (fired again, once), every
other one by arming; cancel of a v2-armed task is too late, of any other it
works. And an upgrade interrupted halfway through to_v3 resumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.mysql import connect, old_schema, query

from triggerhook.domain.arming import BOTTOM, shard_of
from triggerhook.domain.task import CancelResult, Task
from triggerhook.interfaces import Acquired, Lease
from triggerhook.store.mysql import MySQLStore, init_schema
from triggerhook.store.mysql.sql import SCHEMA_VERSION

ME = "upgrader"
LEASE = 60_000
SHARDS = 64

_V2_TABLES = old_schema(2)  # schema.sql as release 2 made it
_INSERT_V2 = (
    "INSERT INTO th_tasks (id, due_ms, routing_key, payload, claimed_by, claim_until_ms,"
    " firing, rev, attempts) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)

PENDING, CLAIMED, ARMED, DEFERRED = "pending", "claimed", "armed", "deferred"


def _kind(n: int) -> str:
    """Of every 100 tasks: 3 armed, 2 deferred, 25 claimed, 70 pending."""
    k = n % 100
    return ARMED if k < 3 else DEFERRED if k < 5 else CLAIMED if k < 30 else PENDING


def _v2_row(n: int, now: int) -> tuple[Any, ...]:
    """A row as version 2 left it: armed rows due about now (armed up to
    arm_ahead_ms early, or not yet published), claimed ones soon, deferred
    ones past due with their retry ahead, the rest any time in the next hour
    (and one in ten of those overdue: a backlog)."""
    kind, spread = _kind(n), (n * 7919) % 3_600_000
    due = {
        ARMED: now - 5000 + spread % 5200,
        CLAIMED: now + spread % 60_000,
        DEFERRED: now - 1000 - spread % 60_000,
    }.get(kind, now + spread - (1_800_000 if n % 10 == 1 else 0))
    claimed_by = "old-instance" if kind in (CLAIMED, ARMED) else None
    until = {CLAIMED: now + 30_000, ARMED: now + 30_000, DEFERRED: due + 65_000}.get(kind, 0)
    attempts = 2 if kind == DEFERRED else 0
    rk = None if n % 10 == 0 else "v2.rk"
    armed = int(kind == ARMED)
    return (f"task-{n:06d}", due, rk, b"p%d" % n, claimed_by, until, armed, n, attempts)


def _build_v2(database_url: str, count: int, now: int) -> None:
    conn = connect(database_url)
    try:
        with conn.cursor() as cur:
            for statement in _V2_TABLES:
                cur.execute(statement)
            for start in range(0, count, 5000):
                rows = [_v2_row(n, now) for n in range(start, min(count, start + 5000))]
                cur.executemany(_INSERT_V2, rows)
    finally:
        conn.close()


@pytest.fixture
def store(database_url: str) -> Iterator[MySQLStore]:
    made = MySQLStore(database_url, "default.rk")
    try:
        yield made
    finally:
        made.close()


def _read_inherited(store: MySQLStore, acquired: list[Acquired]) -> list[Task]:
    out: list[Task] = []
    for a in acquired:
        after = None
        while True:
            tasks, last = store.inherited(a, after, 1000)
            out += tasks
            if last is None:
                break
            after = last
    return out


def _arm_everything(store: MySQLStore, leases: list[Lease], horizon_ms: int) -> list[Task]:
    out: list[Task] = []
    while True:
        armed = store.arm(ME, leases, horizon_ms, 5000)
        assert armed.lost == []
        if not armed.tasks:
            return out
        out += armed.tasks


def test_a_version_2_database_upgrades_and_every_task_comes_out_once(
    database_url: str, store: MySQLStore
) -> None:
    count = 100_000
    now = store.database_time_us() // 1000
    _build_v2(database_url, count, now)
    kinds = {f"task-{n:06d}": _kind(n) for n in range(count)}

    assert init_schema(database_url) == SCHEMA_VERSION
    assert init_schema(database_url, shard_count=8) == SCHEMA_VERSION  # idempotent; keeps its 64
    assert store.shard_count() == SHARDS
    store.check_schema()
    columns = {r[0] for r in query(database_url, "SHOW COLUMNS FROM th_tasks")}
    assert {"claimed_by", "claim_until_ms", "firing"}.isdisjoint(columns)
    assert {"shard", "gen", "fire_ms"} <= columns
    assert "meta" in columns  # version 4
    keys: dict[str, list[str]] = {}
    for r in sorted(query(database_url, "SHOW KEYS FROM th_tasks"), key=lambda r: (r[2], r[3])):
        keys.setdefault(r[2], []).append(r[4])  # Key_name, Seq_in_index, Column_name
    # Version 3's shard keys; version 4's listing keys in place of its th_tasks_due_ms.
    assert keys == {
        "PRIMARY": ["id"],
        "th_tasks_fire": ["shard", "fire_ms", "id"],
        "th_tasks_gen": ["shard", "gen", "fire_ms", "id"],
        "th_tasks_listed": ["due_ms", "id", "routing_key"],
        "th_tasks_key": ["routing_key", "due_ms"],
    }
    # Version 4 keeps every row as it is, without metadata or tags.
    assert query(database_url, "SELECT COUNT(*) FROM th_tasks") == [(count,)]
    assert query(database_url, "SELECT COUNT(*) FROM th_tasks WHERE meta IS NOT NULL") == [(0,)]
    assert query(database_url, "SELECT COUNT(*) FROM th_task_tags") == [(0,)]
    assert query(database_url, "SELECT COUNT(*) FROM th_shards") == [(SHARDS,)]
    # The shards are zlib's CRC-32, as the stores compute them.
    [(wrong,)] = query(
        database_url, "SELECT COUNT(*) FROM th_tasks WHERE shard <> CRC32(id) MOD 64"
    )
    assert wrong == 0
    for tid, shard, fire_ms, due_ms in query(
        database_url, "SELECT id, shard, fire_ms, due_ms FROM th_tasks WHERE id < 'task-001000'"
    ):
        assert shard == shard_of(tid, SHARDS)
        assert fire_ms == (due_ms + 65_000 if kinds[tid] == DEFERRED else due_ms)

    armed_v2 = {tid for tid, kind in kinds.items() if kind == ARMED}
    unarmed = sorted(set(kinds) - armed_v2)
    assert store.cancel([sorted(armed_v2)[0]]) == [CancelResult.TOO_LATE]
    cancelled = [next(t for t in unarmed if kinds[t] == kind) for kind in (PENDING, CLAIMED)]
    cancelled.append(next(t for t in unarmed if kinds[t] == DEFERRED))
    assert store.cancel(cancelled) == [CancelResult.CANCELLED] * 3

    acquired = store.acquire(ME, SHARDS, LEASE)
    assert len(acquired) == SHARDS
    assert sum(a.took.armed != BOTTOM for a in acquired) > SHARDS // 2
    inherited = _read_inherited(store, acquired)
    armed = _arm_everything(store, [a.lease for a in acquired], now + 10**9)

    inherited_ids, armed_ids = [t.id for t in inherited], [t.id for t in armed]
    assert len(inherited_ids) == len(set(inherited_ids)) == len(armed_v2)
    assert set(inherited_ids) == armed_v2
    assert len(armed_ids) == len(set(armed_ids))
    assert set(armed_ids) == set(unarmed) - set(cancelled)
    assert _read_inherited(store, acquired) == inherited  # a fixed set, read again the same
    for t in inherited + armed:
        n = int(t.id.removeprefix("task-"))
        assert (t.rev, t.payload, t.shard) == (n, b"p%d" % n, shard_of(t.id, SHARDS))
        assert t.routing_key == ("default.rk" if n % 10 == 0 else "v2.rk")
        assert t.attempts == (2 if kinds[t.id] == DEFERRED else 0)


def test_an_interrupted_upgrade_resumes(database_url: str, store: MySQLStore) -> None:
    now = 1_700_000_000_000
    _build_v2(database_url, 1000, now)
    # As if an upgrade stopped after adding the columns and filling part of
    # them wrongly, before the shard rows and the keys.
    conn = connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "ALTER TABLE th_tasks ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0 AFTER id,"
                " ADD COLUMN gen BIGINT NOT NULL DEFAULT 7 AFTER rev"
            )
            cur.execute("UPDATE th_tasks SET shard = 99 WHERE id < 'task-000500'")
    finally:
        conn.close()
    assert init_schema(database_url, shard_count=16) == SCHEMA_VERSION
    [(wrong,)] = query(
        database_url, "SELECT COUNT(*) FROM th_tasks WHERE shard <> CRC32(id) MOD 16"
    )
    assert wrong == 0
    gens = dict(query(database_url, "SELECT gen, COUNT(*) FROM th_tasks GROUP BY gen"))
    assert gens == {0: 30, 1: 970}  # 3 in 100 armed by version 2
    acquired = store.acquire(ME, 16, LEASE)
    assert len(_read_inherited(store, acquired)) == 30
    assert len(_arm_everything(store, [a.lease for a in acquired], now + 10**9)) == 970
