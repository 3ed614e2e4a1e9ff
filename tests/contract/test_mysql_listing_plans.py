"""The query plans of listing, counting and the timeline on MySQL: each filter
is served by an index, and a page in due order is read in index order (no
sort of the matches), whatever the table holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from support.mysql import connect
from support.stores import DEFAULT_ROUTING_KEY, mysql_backend

from triggerhook.domain.arming import shard_of
from triggerhook.domain.listing import TaskFilter
from triggerhook.domain.meta import make_meta
from triggerhook.domain.task import Task, TaskState
from triggerhook.interfaces import NewRow
from triggerhook.store.mysql import MySQLStore, queries, sql

ROWS = 6000


@pytest.fixture(scope="module")
def filled(database_url_module: str) -> Iterator[tuple[MySQLStore, Any, int]]:
    made = mysql_backend(database_url_module)
    store = made.store
    assert isinstance(store, MySQLStore)
    now = store.database_time_us() // 1000
    rows = [
        NewRow(
            Task(
                f"c{i % 300}:{i}",
                now + 10 * i,
                ("billing", "mail", "push")[i % 3],
                b"",
                meta=make_meta(tags=[f"tenant:{i % 50}"] + (["vip"] if i % 100 == 0 else [])),
            )
        )
        for i in range(ROWS)
    ]
    for start in range(0, ROWS, 2000):
        store.insert(rows[start : start + 2000], atomic=True)
    conn = connect(database_url_module)
    with conn.cursor() as cur:
        cur.execute("ANALYZE TABLE th_tasks, th_task_tags")
        cur.fetchall()
    try:
        yield store, conn, now
    finally:
        conn.close()
        store.close()


def explain(db: Any, built: tuple[str, list[Any]]) -> list[dict[str, Any]]:
    with db.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("EXPLAIN " + built[0], built[1])
        return list(cur.fetchall())


def access(plan: list[dict[str, Any]], table: str) -> tuple[str, str]:
    [row] = [p for p in plan if p["table"] == table]
    return row["type"], row["key"]


def sorted_rows(plan: list[dict[str, Any]]) -> bool:
    return any("filesort" in (p["Extra"] or "") for p in plan)


def listing(where: TaskFilter, after: tuple[int, str] | None = None) -> tuple[str, list[Any]]:
    return queries.list_tasks(where, after, 100)


def test_a_page_of_everything_reads_th_tasks_listed_in_order(
    filled: tuple[MySQLStore, Any, int],
) -> None:
    store, db, now = filled
    for where, after in (
        (TaskFilter(), None),
        (TaskFilter(), (now + 500, "c50:50")),
        (TaskFilter(due_after_ms=now + 1000, due_before_ms=now + 5000), None),
        (TaskFilter(state=TaskState.SCHEDULED), (now + 500, "c50:50")),
    ):
        plan = explain(db, listing(where, after))
        assert access(plan, "t") in (("index", "th_tasks_listed"), ("range", "th_tasks_listed"))
        assert not sorted_rows(plan)
    assert len(store.list_tasks(TaskFilter(), None, 100)) == 100


def test_a_routing_keys_page_reads_th_tasks_key_in_order(
    filled: tuple[MySQLStore, Any, int],
) -> None:
    _store, db, now = filled
    for where in (
        TaskFilter(routing_key="mail"),
        TaskFilter(routing_key="mail", due_after_ms=now + 3000),
        TaskFilter(routing_key=DEFAULT_ROUTING_KEY),
    ):
        plan = explain(db, listing(where, (now + 20, "c2:2")))
        assert access(plan, "t") == ("range", "th_tasks_key")
        assert not sorted_rows(plan)


def test_a_tags_page_reads_th_task_tags_in_order(filled: tuple[MySQLStore, Any, int]) -> None:
    store, db, now = filled
    for where in (TaskFilter(tag="vip"), TaskFilter(tag="tenant:7", due_before_ms=now + 30_000)):
        plan = explain(db, listing(where, (now, "")))
        assert access(plan, "g") == ("range", "PRIMARY")
        assert access(plan, "t") == ("eq_ref", "PRIMARY")
        assert not sorted_rows(plan)
    assert [i.task.id for i in store.list_tasks(TaskFilter(tag="vip"), None, 3)] == [
        "c0:0",
        "c100:100",
        "c200:200",
    ]


def test_an_id_prefix_is_a_range_of_the_primary_key_or_of_the_listing_key(
    filled: tuple[MySQLStore, Any, int],
) -> None:
    store, db, _now = filled
    plan = explain(db, listing(TaskFilter(prefix="c42:")))
    assert access(plan, "t") in (("range", "PRIMARY"), ("index", "th_tasks_listed"))
    assert store.count_where(TaskFilter(prefix="c42:")) == ROWS // 300


def test_counts_and_the_timeline_read_indexes_only(filled: tuple[MySQLStore, Any, int]) -> None:
    store, db, now = filled
    by_tag = explain(db, queries.count(TaskFilter(tag="tenant:3")))
    assert access(by_tag, "g") == ("ref", "PRIMARY")
    by_key = explain(db, queries.count(TaskFilter(routing_key="push")))
    assert access(by_key, "t")[1] == "th_tasks_key"
    assert "Using index" in (by_key[0]["Extra"] or "")
    line = explain(db, queries.timeline(TaskFilter(), now, 60_000, 60))
    assert access(line, "t") == ("range", "th_tasks_listed")
    assert "Using index" in (line[0]["Extra"] or "")  # covering: no row is read
    counts = store.timeline(TaskFilter(), now, 1000, 60).counts
    assert sum(sum(c) for c in counts.values()) == ROWS
    assert store.count_where(TaskFilter(routing_key="push")) == ROWS // 3


def test_the_armed_tasks_are_read_from_each_shards_range_below_its_watermark(
    filled: tuple[MySQLStore, Any, int],
) -> None:
    # state=firing reads th_tasks_fire up to each shard's watermark (few rows:
    # the armed, and those written since the shard's last pass), not every
    # row in due order; with nothing armed it reads the shards' marks only.
    store, db, now = filled
    armed = [(shard, now + 500) for shard in range(store.shard_count())]
    for where in (
        TaskFilter(state=TaskState.FIRING),
        TaskFilter(state=TaskState.FIRING, routing_key="mail", due_after_ms=now),
        TaskFilter(state=TaskState.FIRING, prefix="c7:"),
    ):
        for built in (
            queries.list_tasks(where, None, 100, armed),
            queries.list_tasks(where, (now + 20, "c2:2"), 1, armed),
            queries.count(where, None, armed),
            queries.count(where, 10, armed),
        ):
            assert access(explain(db, built), "t") == ("range", "th_tasks_fire"), built[0]
    vip = TaskFilter(state=TaskState.FIRING, tag="vip")
    by_tag = explain(db, queries.list_tasks(vip, None, 5, armed))
    assert access(by_tag, "t") == ("range", "th_tasks_fire")
    assert access(by_tag, "g") == ("ref", "th_task_tags_id")
    assert store.list_tasks(TaskFilter(state=TaskState.FIRING), None, 1) == []


def test_a_capped_count_reads_no_more_than_its_cap(filled: tuple[MySQLStore, Any, int]) -> None:
    store, db, _now = filled
    with db.cursor() as cur:
        cur.execute("FLUSH STATUS")
        cur.execute(*queries.count(TaskFilter(), 10))
        assert cur.fetchall() == ((10,),)
        cur.execute("SHOW SESSION STATUS LIKE 'Handler_read_next'")
        [(_name, read_next)] = cur.fetchall()
    assert int(read_next) <= 10  # index entries read: the cap's, not the table's
    assert store.count_where(TaskFilter(), up_to=10) == 10
    assert store.count_where(TaskFilter(), up_to=ROWS + 1) == ROWS


def test_a_cancel_of_a_batch_reads_its_ids_by_the_primary_key(
    filled: tuple[MySQLStore, Any, int],
) -> None:
    # A bulk cancel's batch of 500 ids must not scan its shards' rows (locking
    # every one: arming and firing would wait for it).
    store, db, _now = filled
    ids = [f"c{i % 300}:{i}" for i in range(500)]
    shards = sorted({shard_of(i, store.shard_count()) for i in ids})
    statement = sql.CANCEL_UNARMED.format(
        shards=sql.placeholders(len(shards)), ids=sql.placeholders(len(ids)), armed=sql.ARMED
    )
    plan = explain(db, (statement, [*shards, *ids]))
    assert access(plan, "t") == ("range", "PRIMARY")
