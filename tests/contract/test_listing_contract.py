"""The TaskStore contract for metadata and finding tasks: run against the
in-memory store, SQLite and MySQL alike (see test_store_contract.py)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.stores import DEFAULT_ROUTING_KEY, SHARD_COUNT, outcomes

from triggerhook.domain.listing import (
    MAX_TIMELINE_CELLS,
    BulkCancelled,
    TaskFilter,
    decode_cursor,
)
from triggerhook.domain.meta import LateKind, LatePolicy, Meta, make_meta
from triggerhook.domain.recurrence import make_recurrence
from triggerhook.domain.task import CancelResult, InsertOutcome, Task, TaskState
from triggerhook.engine.bulk import cancel_where
from triggerhook.errors import Interrupted, TooCostly, ValidationError
from triggerhook.interfaces import Lease, Move, NewRow, TaskStore
from triggerhook.runtime.interrupt import Interrupt

FAR = 10**9
BILLING = make_meta(
    tags=["tenant:42", "billing"],
    content_type="application/json",
    content_encoding="identity",
    headers={"tenant": "42", "attempt": 1, "urgent": True},
    late=LatePolicy(LateKind.SKIP_AFTER, 5000),
)


@pytest.fixture
def now(store: TaskStore) -> int:
    return store.database_time_us() // 1000


def put(store: TaskStore, *tasks: Task) -> None:
    assert outcomes(store.insert([NewRow(t) for t in tasks], atomic=False)) == [
        InsertOutcome.CREATED
    ] * len(tasks)


def tagged(name: str, due_ms: int, *tags: str, rk: str = "rk") -> Task:
    return Task(name, due_ms, rk, b"", meta=make_meta(tags=list(tags)))


ANY = TaskFilter()


def listed(store: TaskStore, where: TaskFilter = ANY, limit: int = 1000) -> list[str]:
    return [info.task.id for info in store.list_tasks(where, None, limit)]


# -- metadata -------------------------------------------------------------------------------


def test_metadata_is_stored_and_read_back_by_get_list_and_arm(store: TaskStore, now: int) -> None:
    put(store, Task("m1", now + 10, "billing.charge", b"{}", meta=BILLING))
    info = store.get("m1")
    assert info is not None and info.task.meta == BILLING
    assert [i.task.meta for i in store.list_tasks(TaskFilter(), None, 10)] == [BILLING]
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
    [armed] = store.arm("me", leases, now + FAR, 10).tasks
    assert armed.meta == BILLING


def test_a_retry_compares_the_metadata_too(store: TaskStore, now: int) -> None:
    first = Task("m2", now + 10, "rk", b"x", meta=BILLING)
    put(store, first)
    assert outcomes(store.insert([NewRow(first)], atomic=False)) == [InsertOutcome.EXISTS]
    for other in (
        dataclasses.replace(BILLING, tags=("billing",)),
        dataclasses.replace(BILLING, headers=(("tenant", "43"),)),
        dataclasses.replace(BILLING, content_type=None),
        dataclasses.replace(BILLING, late=None),
        Meta(),
    ):
        changed = first.replace(meta=other)
        assert outcomes(store.insert([NewRow(changed)], atomic=False)) == [InsertOutcome.CONFLICT]
    info = store.get("m2")
    assert info is not None and info.task.meta == BILLING


# -- listing ----------------------------------------------------------------------------------


def test_a_listing_is_in_due_order_ties_by_id_and_pages_by_key(store: TaskStore, now: int) -> None:
    put(store, *(Task(f"l{i:02}", now + 100 * (i % 5), "rk") for i in range(20)))
    expected = sorted((now + 100 * (i % 5), f"l{i:02}") for i in range(20))
    seen: list[tuple[int, str]] = []
    after = None
    while True:
        page = store.list_tasks(TaskFilter(), after, 7)
        seen += [(i.task.due_ms, i.task.id) for i in page]
        if len(page) < 7:
            break
        after = seen[-1]
    assert seen == expected


def test_a_walk_is_stable_under_inserts_and_deletes(store: TaskStore, now: int) -> None:
    put(store, *(Task(f"s{i:02}", now + 1000 + i, "rk") for i in range(10)))
    first = store.list_tasks(TaskFilter(), None, 4)
    after = (first[-1].task.due_ms, first[-1].task.id)
    # Meanwhile: one behind the cursor (never seen), one ahead, one ahead cancelled.
    put(store, Task("behind", now + 1000, "rk"), Task("ahead", now + 1007, "rk"))
    store.cancel(["s05"])
    rest = [i.task.id for i in store.list_tasks(TaskFilter(), after, 100)]
    assert rest == ["s04", "s06", "ahead", "s07", "s08", "s09"]  # a tie: by id


def test_filters_each_and_together(store: TaskStore, now: int) -> None:
    put(
        store,
        tagged("cust1:a", now + 10, "tenant:1", rk="billing"),
        tagged("cust1:b", now + 20, "tenant:1", "vip", rk="mail"),
        tagged("cust2:a", now + 30, "tenant:2", rk="billing"),
        Task("cust10:a", now + 40, "billing"),
        Task("other", now + 50, DEFAULT_ROUTING_KEY),
    )
    assert listed(store, TaskFilter(prefix="cust1")) == ["cust1:a", "cust1:b", "cust10:a"]
    assert listed(store, TaskFilter(prefix="cust1:")) == ["cust1:a", "cust1:b"]
    assert listed(store, TaskFilter(routing_key="billing")) == ["cust1:a", "cust2:a", "cust10:a"]
    assert listed(store, TaskFilter(tag="tenant:1")) == ["cust1:a", "cust1:b"]
    assert listed(store, TaskFilter(tag="vip")) == ["cust1:b"]
    assert listed(store, TaskFilter(tag="tenant:1", routing_key="billing")) == ["cust1:a"]
    assert listed(store, TaskFilter(due_after_ms=now + 20, due_before_ms=now + 40)) == [
        "cust1:b",
        "cust2:a",
    ]
    assert listed(store, TaskFilter(routing_key=DEFAULT_ROUTING_KEY)) == ["other"]
    assert listed(store, TaskFilter(tag="nobody")) == []
    assert store.count_where(TaskFilter()) == 5
    assert store.count_where(TaskFilter(prefix="cust1")) == 3
    assert store.count_where(TaskFilter(tag="tenant:1", due_after_ms=now + 15)) == 1
    assert store.count_where(TaskFilter(routing_key="billing", due_before_ms=now + 30)) == 1


def _random_tasks(now: int) -> list[Task]:
    """60 tasks whose ids share prefixes and whose due times tie (seeded: replays)."""
    draw = random.Random(30)
    return [
        Task(
            f"{draw.choice('ab')}{draw.choice('ab')}:{i}",
            now + 10 * draw.randrange(1, 30),
            draw.choice(("rk.a", "rk.b")),
            b"",
            meta=make_meta(tags=sorted(t for t in ("t1", "t2", "t3") if draw.random() < 0.4)),
        )
        for i in range(60)
    ]


_STEPS = st.one_of(st.none(), st.integers(0, 31))  # a due bound: now + 10 ms a step


@settings(
    max_examples=60,
    deadline=None,
    # The store's tasks are written once and only read by the examples.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    prefix=st.sampled_from([None, "a", "ab", "ab:", "b", "ba:1", "c"]),
    routing_key=st.sampled_from([None, "rk.a", "rk.b", "rk"]),
    tag=st.sampled_from([None, "t1", "t2", "t3", "t4"]),
    after=_STEPS,
    before=_STEPS,
    state=st.sampled_from([None, TaskState.SCHEDULED, TaskState.FIRING]),
)
def test_a_listing_and_a_count_find_exactly_what_the_filter_means(
    store: TaskStore,
    now: int,
    prefix: str | None,
    routing_key: str | None,
    tag: str | None,
    after: int | None,
    before: int | None,
    state: TaskState | None,
) -> None:
    """TaskFilter.matches states what a filter means; every store's SQL must agree."""
    if store.count_where(ANY) == 0:
        put(store, *_random_tasks(now))
        leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
        store.arm("me", leases, now + 100, 1000)  # some armed: the state filter has both
    where = TaskFilter(
        prefix=prefix,
        routing_key=routing_key,
        tag=tag,
        due_after_ms=None if after is None else now + 10 * after,
        due_before_ms=None if before is None else now + 10 * before,
        state=state,
    )
    every = store.list_tasks(ANY, None, 1000)
    expected = [(i.task.due_ms, i.task.id) for i in every if where.matches(i)]
    seen: list[tuple[int, str]] = []
    cursor = None
    while True:  # a page at a time, as the API walks
        page = store.list_tasks(where, cursor, 7)
        seen += [(i.task.due_ms, i.task.id) for i in page]
        if len(page) < 7:
            break
        cursor = seen[-1]
    assert seen == expected
    assert store.count_where(where) == len(expected)


def test_the_state_filter_tells_armed_tasks(store: TaskStore, now: int) -> None:
    put(store, Task("soon", now + 10, "rk"), Task("later", now + FAR, "rk"))
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
    assert [t.id for t in store.arm("me", leases, now + 1000, 10).tasks] == ["soon"]
    assert listed(store, TaskFilter(state=TaskState.FIRING)) == ["soon"]
    assert listed(store, TaskFilter(state=TaskState.SCHEDULED)) == ["later"]
    assert [i.state for i in store.list_tasks(TaskFilter(), None, 10)] == [
        TaskState.FIRING,
        TaskState.SCHEDULED,
    ]
    assert store.count_where(TaskFilter(state=TaskState.FIRING)) == 1
    # The keys of a bulk cancel's batches ignore the state.
    assert [k[1] for k in store.match_keys(TaskFilter(state=TaskState.FIRING), None, 10)] == [
        "soon",
        "later",
    ]


def test_tags_follow_their_task_through_reschedule_cancel_and_fire(
    store: TaskStore, now: int
) -> None:
    put(store, *(tagged(f"t{i}", now + 1000 + i, "batch") for i in range(4)))
    assert store.reschedule([Move("t0", now + 5000)])[0].task is not None
    assert listed(store, TaskFilter(tag="batch")) == ["t1", "t2", "t3", "t0"]
    assert listed(store, TaskFilter(tag="batch", due_after_ms=now + 4000)) == ["t0"]
    store.cancel(["t1"])
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
    armed = store.arm("me", leases, now + 1002, 10).tasks
    assert [t.id for t in armed] == ["t2"]
    assert store.delete_fired([(t.id, t.rev) for t in armed]) == 1
    assert listed(store, TaskFilter(tag="batch")) == ["t3", "t0"]
    # The same ids again, without the tag: the old incarnations' tags are gone.
    put(store, Task("t1", now + 10, "rk"), Task("t2", now + 10, "rk"))
    assert listed(store, TaskFilter(tag="batch")) == ["t3", "t0"]
    assert store.count_where(TaskFilter(tag="batch")) == 2


def test_the_timeline_counts_per_routing_key_and_bucket(store: TaskStore, now: int) -> None:
    start = now // 60_000 * 60_000 + 60_000
    put(
        store,
        Task("a", start, "billing"),
        Task("b", start + 59_999, "billing"),
        Task("c", start + 60_000, "billing"),
        Task("d", start + 120_000, "mail"),
        Task("e", start + 180_000, "mail"),  # past the span
        Task("f", start - 1, "mail"),  # before it
        tagged("g", start + 1, "vip", rk="mail"),
    )
    line = store.timeline(TaskFilter(), start, 60_000, 3)
    assert (line.start_ms, line.bucket_ms, line.buckets, line.end_ms) == (
        start,
        60_000,
        3,
        start + 180_000,
    )
    assert line.counts == {"billing": [2, 1, 0], "mail": [1, 0, 1]}
    assert store.timeline(TaskFilter(tag="vip"), start, 60_000, 3).counts == {"mail": [1, 0, 0]}
    assert store.timeline(TaskFilter(routing_key="billing"), start, 1000, 2).counts == {
        "billing": [1, 0]
    }
    assert store.timeline(TaskFilter(prefix="zzz"), start, 60_000, 3).counts == {}


# -- bulk cancel --------------------------------------------------------------------------------


def test_bulk_cancel_cancels_the_matches_in_batches_and_counts_the_armed(
    store: TaskStore, now: int
) -> None:
    put(store, *(tagged(f"r{i:03}", now + 10 + i, "reminder") for i in range(25)))
    put(store, Task("keep", now + 5, "rk"), tagged("keep2", now + 7, "other"))
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
    armed = store.arm("me", leases, now + 12, 100).tasks  # keep, keep2, r000-r002
    assert sorted(t.id for t in armed) == ["keep", "keep2", "r000", "r001", "r002"]
    done = cancel_where(store, TaskFilter(tag="reminder"), batch=4)
    assert done == BulkCancelled(cancelled=22, too_late=3)
    assert listed(store, TaskFilter(tag="reminder")) == ["r000", "r001", "r002"]
    assert store.count_where(TaskFilter()) == 5
    assert cancel_where(store, TaskFilter(prefix="nothing-")) == BulkCancelled(0, 0)


def test_bulk_cancel_by_prefix_and_due_range(store: TaskStore, now: int) -> None:
    put(store, *(Task(f"c:{i}", now + 1000 * i, "rk") for i in range(6)))
    where = TaskFilter(prefix="c:", due_after_ms=now + 2000, due_before_ms=now + 4000)
    assert cancel_where(store, where) == BulkCancelled(2, 0)
    assert listed(store) == ["c:0", "c:1", "c:4", "c:5"]


def test_bulk_cancel_must_name_tasks(store: TaskStore, now: int) -> None:
    put(store, Task("x", now + 10, "rk"))
    with pytest.raises(ValidationError, match="prefix, tag and routing_key"):
        cancel_where(store, TaskFilter(due_before_ms=now + FAR))
    assert listed(store) == ["x"]


# -- the bounds of reads of many tasks --------------------------------------------------------


def test_a_count_up_to_a_cap_stops_there(store: TaskStore, now: int) -> None:
    put(store, *(tagged(f"u{i:02}", now + 1000 + i, "cap", rk="billing") for i in range(12)))
    put(store, Task("other", now + 5, "mail"))
    assert store.count_where(TaskFilter(), up_to=5) == 5  # at least 5
    assert store.count_where(TaskFilter(), up_to=13) == 13  # exactly 13: it never says more
    assert store.count_where(TaskFilter(), up_to=100) == 13
    assert store.count_where(TaskFilter(tag="cap"), up_to=3) == 3
    assert store.count_where(TaskFilter(routing_key="billing", due_after_ms=now + 1010), 50) == 2
    assert store.count_where(TaskFilter(state=TaskState.SCHEDULED), up_to=4) == 4
    assert store.count_where(TaskFilter(state=TaskState.FIRING), up_to=4) == 0
    assert store.count_where(TaskFilter(prefix="nobody"), up_to=1) == 0


def test_state_firing_finds_exactly_the_armed_tasks_whatever_else_is_stored(
    store: TaskStore, now: int
) -> None:
    # Nothing armed anywhere: an empty answer (MySQL reads the shards' marks only).
    put(store, *(tagged(f"f{i:02}", now + 10 * i, "vip" if i % 2 else "std") for i in range(20)))
    firing = TaskFilter(state=TaskState.FIRING)
    assert listed(store, firing) == [] and store.count_where(firing) == 0
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
    armed = sorted(t.id for t in store.arm("me", leases, now + 55, 100).tasks)
    assert armed == [f"f{i:02}" for i in range(6)]
    # A task written after the pass, due before the watermark: not armed (yet).
    put(store, Task("late-comer", now - 1, "rk"))
    assert listed(store, firing) == armed
    assert store.count_where(firing) == 6 and store.count_where(firing, up_to=2) == 2
    assert listed(store, TaskFilter(state=TaskState.FIRING, tag="vip")) == ["f01", "f03", "f05"]
    later = TaskFilter(state=TaskState.FIRING, prefix="f0", due_after_ms=now + 20)
    assert listed(store, later) == ["f02", "f03", "f04", "f05"]
    page = store.list_tasks(firing, None, 4)
    rest = store.list_tasks(firing, (page[-1].task.due_ms, page[-1].task.id), 4)
    assert [i.task.id for i in page + rest] == armed
    assert "late-comer" in listed(store, TaskFilter(state=TaskState.SCHEDULED))


def test_a_timeline_of_more_counts_than_it_may_hold_is_too_costly(
    store: TaskStore, now: int
) -> None:
    buckets = 1440
    most_keys = MAX_TIMELINE_CELLS // buckets  # 69 routing keys of 1,440 buckets
    start = now // 60_000 * 60_000 + 60_000
    put(store, *(Task(f"k{i:03}", start + i, f"key.{i:03}") for i in range(most_keys)))
    line = store.timeline(TaskFilter(), start, 60_000, buckets)
    assert len(line.counts) == most_keys and line.counts["key.000"][0] == 1
    put(store, Task("one-more", start + 5, "key.extra"))
    with pytest.raises(TooCostly, match="more than 69 routing keys"):
        store.timeline(TaskFilter(), start, 60_000, buckets)
    assert len(store.timeline(TaskFilter(), start, 60_000, 60).counts) == most_keys + 1
    assert store.timeline(TaskFilter(prefix="k00"), start, 60_000, buckets).counts.keys() == {
        f"key.00{i}" for i in range(10)
    }


def test_a_read_whose_interrupt_is_set_stops_with_interrupted(store: TaskStore, now: int) -> None:
    put(store, Task("i1", now + 10, "rk"))
    stop = Interrupt()
    stop.set("its client went away")
    for read in (
        lambda: store.list_tasks(TaskFilter(), None, 10, stop),
        lambda: store.list_tasks(TaskFilter(state=TaskState.FIRING), None, 10, stop),
        lambda: store.match_keys(TaskFilter(prefix="i"), None, 10, stop),
        lambda: store.count_where(TaskFilter(), None, stop),
        lambda: store.timeline(TaskFilter(), now, 60_000, 60, stop),
    ):
        with pytest.raises(Interrupted, match="its client went away"):
            read()
    # An interrupt not set changes nothing; nor does a deadline (it stops
    # only a walk of many steps, between them: the bulk cancel).
    assert listed(store) == ["i1"]
    assert store.count_where(TaskFilter(), None, Interrupt(deadline_s=0.0)) == 1


def test_a_bulk_cancel_stops_between_batches_and_goes_on_from_its_cursor(
    store: TaskStore, now: int
) -> None:
    put(store, *(tagged(f"b{i:02}", now + 1000 + i, "walk") for i in range(10)))
    put(store, tagged("armed", now + 5, "walk"))
    leases = [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]
    assert [t.id for t in store.arm("me", leases, now + 100, 10).tasks] == ["armed"]
    where = TaskFilter(tag="walk")
    past = Interrupt(deadline_s=0.0)  # its time limit passed: one batch, then stop
    first = cancel_where(store, where, batch=4, interrupt=past)
    assert (first.cancelled, first.too_late) == (3, 1)
    assert first.cursor is not None and decode_cursor(first.cursor) == (now + 1002, "b02")
    second = cancel_where(store, where, batch=4, after=decode_cursor(first.cursor), interrupt=past)
    assert second == BulkCancelled(4, 0, second.cursor) and second.cursor is not None
    last = cancel_where(store, where, batch=4, after=decode_cursor(second.cursor))
    assert last == BulkCancelled(3, 0)  # the end: no cursor
    assert listed(store, where) == ["armed"]  # being published: too late, counted once


def test_a_bulk_cancel_interrupted_before_its_first_batch_did_nothing(
    store: TaskStore, now: int
) -> None:
    put(store, tagged("n1", now + 1000, "walk"))
    stop = Interrupt()
    stop.set("the daemon is stopping")
    with pytest.raises(Interrupted):
        cancel_where(store, TaskFilter(tag="walk"), interrupt=stop)
    assert listed(store) == ["n1"]


# -- series (R5s) -----------------------------------------------------------------------------


def series(name: str, due_ms: int, until_ms: int | None = None, tags: tuple[str, ...] = ()) -> Task:
    """A task recurring every second."""
    recur = make_recurrence(every=1000, until_ms=until_ms)
    return Task(name, due_ms, "rk", b"", meta=make_meta(recur=recur, tags=list(tags)))


@pytest.fixture
def leases(store: TaskStore) -> list[Lease]:
    """Every shard, held by "me"."""
    return [a.lease for a in store.acquire("me", SHARD_COUNT, 30_000)]


def arm_everything(store: TaskStore, leases: list[Lease], horizon_ms: int) -> list[Task]:
    return store.arm("me", leases, horizon_ms, 100).tasks


def test_a_confirmed_occurrence_becomes_the_next_one(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    put(store, series("s", now + 10, tags=("daily",)))
    [fired] = arm_everything(store, leases, now + 100)
    assert fired.meta.recur is not None and fired.meta.recur.occurrence == 1
    assert store.advance([fired], now + 20) == 1
    info = store.get("s")
    assert info is not None and info.state is TaskState.SCHEDULED  # unarmed again
    assert info.task.due_ms == now + 1010
    assert info.task.meta.recur is not None and info.task.meta.recur.occurrence == 2
    assert info.task.meta.tags == ("daily",)
    # The same confirm again (a stale instance): the row moved on, nothing happens.
    assert store.advance([fired], now + 20) == 0
    assert store.get("s") == info
    # Its tag row follows the new due time.
    later = TaskFilter(tag="daily", due_after_ms=now + 1000)
    assert [i.task.id for i in store.list_tasks(later, None, 5)] == ["s"]
    [second] = arm_everything(store, leases, now + 2000)
    assert second.rev != fired.rev and second.due_ms == now + 1010


def test_occurrences_missed_in_an_outage_are_not_replayed(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    put(store, series("s", now + 10))
    [fired] = arm_everything(store, leases, now + 100)
    assert store.advance([fired], now + 5_500) == 1  # confirmed 5.5 s late
    info = store.get("s")
    assert info is not None and info.task.due_ms == now + 6010
    assert info.task.meta.recur is not None and info.task.meta.recur.occurrence == 2


def test_a_series_ends_with_its_last_occurrence(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    put(
        store,
        series("s", now + 10, until_ms=now + 1010),
        series("t", now + 10, until_ms=now + 1009),
    )
    fired = arm_everything(store, leases, now + 100)
    assert store.advance(fired, now + 20) == 2
    assert store.get("t") is None  # its next would be after its end: it ended
    info = store.get("s")  # its next is at its end (inclusive): the last one
    assert info is not None and info.task.due_ms == now + 1010


def test_a_cancel_too_late_for_an_occurrence_stops_the_series(
    store: TaskStore, now: int, leases: list[Lease]
) -> None:
    put(store, series("s", now + 10), series("u", now + FAR))
    [fired] = arm_everything(store, leases, now + 100)
    assert store.cancel(["s"]) == [CancelResult.TOO_LATE]
    info = store.get("s")
    assert info is not None and info.state is TaskState.FIRING
    assert info.task.meta.recur is not None and info.task.meta.recur.stopped
    assert store.advance([fired], now + 20) == 1
    assert store.get("s") is None  # stopped: no next occurrence
    assert store.cancel(["u"]) == [CancelResult.CANCELLED]  # unarmed: the whole series
    assert store.get("u") is None
