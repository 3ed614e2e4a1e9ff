"""Library API against real MariaDB and RabbitMQ: commits, idempotency, get(), stop().

Every assertion reads real state: rows through a separate PyMySQL connection
(``rows`` fixture) and events through a real consumer (``event_consumer``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from support.amqp import EventConsumer
from support.hook import (
    SHARD_COUNT,
    HookFactory,
    RowReader,
    collect_until,
    header_int,
    wait_for_shards,
)
from support.waiting import now_ms, wait_for, wait_until

from triggerhook import (
    ConflictError,
    Task,
    TaskInfo,
    TaskSpec,
    TaskState,
    ValidationError,
)
from triggerhook.domain.arming import shard_of

FAR_MS = 3_600_000  # an hour ahead: never fires during a test


def _armed(rows: RowReader, task_id: str) -> bool:
    row = rows.row(task_id)
    return row is not None and row.firing == 1


# -- 1. a returned schedule call has its row committed ---------------------------


def test_schedule_without_engine_commits_before_return(hooks: HookFactory, rows: RowReader) -> None:
    hook = hooks(start=False)
    due = now_ms() + FAR_MS

    result = hook.schedule(TaskSpec("direct-1", at_ms=due, routing_key="a.b", payload=b"\x00p"))

    row = rows.row("direct-1")
    assert row is not None, "row not visible to another connection after schedule returned"
    assert result.created is True
    assert result.task == Task("direct-1", due, "a.b", b"\x00p")
    assert (row.due_ms, row.routing_key, row.payload) == (due, "a.b", b"\x00p")
    # Written unarmed, to fire at its due time, in the shard its id hashes to.
    assert (row.fire_ms, row.firing, row.attempts) == (due, 0, 0)
    assert row.shard == shard_of("direct-1", SHARD_COUNT)


def test_schedule_on_running_engine_commits_before_return(
    hooks: HookFactory, rows: RowReader, database_url: str
) -> None:
    # A long arming interval: a soon-due row armed well within it was armed
    # because the insert woke this instance's armer (it owns every shard).
    hook = hooks(arm_ahead_ms=30_000, arm_interval_ms=29_000)
    wait_for_shards(hook)
    start = now_ms()
    threads_count, per_thread = 8, 25
    missing: list[str] = []
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        reader = RowReader(database_url)  # each thread checks with its own connection
        try:
            for i in range(per_thread):
                task_id = f"gc-{n}-{i}"
                # Alternate: far ahead, and nearer (but beyond arm_ahead_ms).
                due = start + (FAR_MS if i % 2 else 120_000)
                hook.schedule(TaskSpec(task_id, at_ms=due, payload=task_id))
                if reader.row(task_id) is None:
                    missing.append(task_id)
        except BaseException as exc:
            errors.append(exc)
        finally:
            reader.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    assert missing == [], f"rows not visible right after schedule returned: {missing}"
    stored = rows.rows()
    assert len(stored) == threads_count * per_thread
    for task_id, row in stored.items():
        assert row.payload == task_id.encode()
        assert row.shard == shard_of(task_id, SHARD_COUNT), row
        assert row.firing == 0, row  # not due within arm_ahead_ms: left unarmed

    # Due within arm_ahead_ms: armed by this instance (its shard's owner) at
    # once, not at the next arming interval.
    hook.schedule(TaskSpec("gc-armed", delay_ms=20_000))
    returned = time.monotonic()
    wait_for(lambda: _armed(rows, "gc-armed"), 10, lambda: f"not armed: {rows.row('gc-armed')}")
    armed_after_s = time.monotonic() - returned
    assert armed_after_s < 1.5, f"armed {armed_after_s:.2f}s after the insert (interval 29 s)"
    assert "gc-armed" in hook.engine.inventory.snapshot()
    assert {r.firing for r in rows.rows().values() if r.id != "gc-armed"} == {0}


@pytest.mark.parametrize("started", [False, True], ids=["no-engine", "engine"])
def test_schedule_many_commits_before_return(
    hooks: HookFactory, rows: RowReader, started: bool
) -> None:
    hook = hooks(start=started)
    hook.schedule(TaskSpec("existing", at_ms=now_ms() + FAR_MS, payload="same"))
    existing = rows.row("existing")
    assert existing is not None
    specs = [TaskSpec(id=f"many-{i}", delay_ms=FAR_MS + i, payload=f"p{i}") for i in range(50)]
    specs.append(TaskSpec(id="existing", at_ms=existing.due_ms, payload="same"))

    results = hook.schedule_many(specs)

    stored = rows.rows()
    assert set(stored) == {f"many-{i}" for i in range(50)} | {"existing"}
    assert [r.created for r in results] == [True] * 50 + [False]
    for result in results:
        row = stored[result.task.id]
        assert (row.due_ms, row.payload) == (result.task.due_ms, result.task.payload)


# -- 2. idempotency and conflicts -----------------------------------------------


@pytest.mark.parametrize("scheduler_started", [False, True], ids=["client", "engine"])
def test_same_content_is_idempotent_and_fires_once(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer, scheduler_started: bool
) -> None:
    engine = hooks()
    scheduler = engine if scheduler_started else hooks(start=False)
    due = now_ms() + 400

    first = scheduler.schedule(TaskSpec("once", at_ms=due, routing_key="r.k", payload=b"x"))
    again = scheduler.schedule(TaskSpec("once", at_ms=due, routing_key="r.k", payload=b"x"))
    third = engine.schedule(TaskSpec("once", at_ms=due, routing_key="r.k", payload=b"x"))
    scheduler.schedule(TaskSpec("sentinel", at_ms=due + 300))

    assert (first.created, again.created, third.created) == (True, False, False)
    assert first.task == again.task == third.task
    received = collect_until(event_consumer, "sentinel", timeout_s=15)
    received += event_consumer.drain_quiet(0.3)
    assert [r.message_id for r in received].count("once") == 1
    assert wait_until(lambda: rows.count() == 0, 10), rows.rows()


@pytest.mark.parametrize(
    ("due_delta", "routing_key", "payload"),
    [
        (1, "orig.key", b"orig"),
        (0, "other.key", b"orig"),
        (0, "orig.key", b"other"),
        (0, "orig.key", None),
        (0, None, b"orig"),
    ],
    ids=["due", "routing_key", "payload", "no-payload", "default-routing-key"],
)
@pytest.mark.parametrize("started", [False, True], ids=["no-engine", "engine"])
def test_different_content_conflicts_and_leaves_row_unchanged(
    hooks: HookFactory,
    rows: RowReader,
    started: bool,
    due_delta: int,
    routing_key: str | None,
    payload: bytes | None,
) -> None:
    hook = hooks(start=started)
    due = now_ms() + FAR_MS
    hook.schedule(TaskSpec("c1", at_ms=due, routing_key="orig.key", payload=b"orig"))
    before = rows.row("c1")
    assert before is not None

    with pytest.raises(ConflictError) as info:
        hook.schedule(
            TaskSpec("c1", at_ms=due + due_delta, routing_key=routing_key, payload=payload)
        )

    assert info.value.task_id == "c1"
    assert rows.row("c1") == before
    assert rows.count() == 1


@pytest.mark.parametrize("started", [False, True], ids=["no-engine", "engine"])
def test_schedule_many_with_a_conflict_writes_nothing(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer, started: bool
) -> None:
    hook = hooks(start=started)
    soon = now_ms() + 300  # due soon: a running engine would arm them at once
    hook.schedule(TaskSpec("taken", at_ms=soon + FAR_MS, payload="v1"))
    before = rows.row("taken")
    specs = [
        TaskSpec(id="new-1", at_ms=soon),
        TaskSpec(id="new-2", at_ms=soon, payload="p"),
        TaskSpec(id="taken", at_ms=soon + FAR_MS, payload="v2"),  # other payload
        TaskSpec(id="new-3", delay_ms=FAR_MS),
    ]

    with pytest.raises(ConflictError) as info:
        hook.schedule_many(specs)

    assert info.value.task_id == "taken"
    assert set(rows.rows()) == {"taken"}
    assert rows.row("taken") == before
    if started:
        assert len(hook.engine.inventory) == 0  # nothing adopted into memory
        hook.schedule(TaskSpec("sentinel", at_ms=soon + 300))
        received = collect_until(event_consumer, "sentinel", timeout_s=15)
        assert [r.message_id for r in received] == ["sentinel"]


def test_schedule_many_repeated_id_with_other_content_writes_nothing(
    hooks: HookFactory, rows: RowReader
) -> None:
    hook = hooks(start=False)
    due = now_ms() + FAR_MS
    specs = [
        TaskSpec(id="dup", at_ms=due),
        TaskSpec(id="other", at_ms=due),
        TaskSpec(id="dup", at_ms=due + 1),
    ]

    with pytest.raises(ConflictError):
        hook.schedule_many(specs)

    assert rows.count() == 0


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (TaskSpec(id="bad id!", delay_ms=1000), "tasks[2].id"),
        (TaskSpec(delay_ms=1000, routing_key="no spaces"), "tasks[2].routing_key"),
        (TaskSpec(delay_ms=1000, payload=b"x" * 17), "tasks[2].payload"),
        (TaskSpec(delay_ms=-5), "tasks[2].delay_ms"),
        (TaskSpec(at="not a time"), "tasks[2].at"),
        (TaskSpec(), "tasks[2].at"),
    ],
    ids=["id", "routing_key", "payload", "delay", "at", "no-due"],
)
def test_schedule_many_validation_error_names_index_and_writes_nothing(
    hooks: HookFactory, rows: RowReader, bad: TaskSpec, field: str
) -> None:
    hook = hooks(start=False, max_payload_bytes=16)
    good = [TaskSpec(id=f"ok-{i}", delay_ms=FAR_MS) for i in range(3)]

    with pytest.raises(ValidationError) as info:
        hook.schedule_many([good[0], good[1], bad, good[2]])

    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert rows.count() == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": "has space", "delay_ms": 1000}, "id"),
        ({"id": "x" * 65, "delay_ms": 1000}, "id"),
        ({"delay_ms": 1000, "routing_key": "no spaces"}, "routing_key"),
        ({"delay_ms": 1000, "payload": b"x" * 17}, "payload"),
        ({"delay_ms": 1000, "at_ms": 5}, "at"),
        ({"at_ms": 1.5}, "at_ms"),
        ({}, "at"),
    ],
    ids=["id-space", "id-long", "routing_key", "payload", "two-dues", "at_ms-float", "no-due"],
)
@pytest.mark.parametrize("started", [False, True], ids=["no-engine", "engine"])
def test_schedule_validation_error_names_the_field_and_writes_nothing(
    hooks: HookFactory, rows: RowReader, kwargs: dict[str, Any], field: str, started: bool
) -> None:
    hook = hooks(start=started, max_payload_bytes=16)

    with pytest.raises(ValidationError) as info:
        hook.schedule(TaskSpec(**kwargs))

    assert info.value.field == field
    assert rows.count() == 0


# -- 9. get() -------------------------------------------------------------------


def test_get_reports_scheduled_firing_and_gone(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks(arm_ahead_ms=3000)
    far = now_ms() + FAR_MS
    hook.schedule(TaskSpec("future", at_ms=far, routing_key="g.k", payload=b"pl"))
    armed = hook.schedule(TaskSpec("armed", delay_ms=2000))  # within arm_ahead_ms

    # Armed by the shard's owner (this instance) soon after the insert.
    wait_for(lambda: _armed(rows, "armed"), 1.5, lambda: f"not armed: {rows.row('armed')}")
    future_info = hook.get("future")
    armed_info = hook.get("armed")

    assert future_info == TaskInfo(Task("future", far, "g.k", b"pl"), TaskState.SCHEDULED)
    assert armed_info == TaskInfo(armed.task, TaskState.FIRING)
    assert armed_info.task.routing_key == "triggerhook.fire"
    assert hook.get("never-scheduled") is None

    events = event_consumer.collect(1, 15)
    assert [e.message_id for e in events] == ["armed"]
    assert wait_until(lambda: rows.row("armed") is None, 10)
    assert hook.get("armed") is None
    assert hook.get("future") == future_info


@pytest.mark.parametrize("bad_id", ["bad id!", "", "x" * 65, "ü"])
def test_get_invalid_id_is_a_validation_error_naming_id(hooks: HookFactory, bad_id: str) -> None:
    hook = hooks(start=False)
    with pytest.raises(ValidationError) as info:
        hook.get(bad_id)
    assert info.value.field == "id"


# -- 10. graceful stop ------------------------------------------------------------


def test_graceful_stop_releases_shards_and_name_and_another_instance_fires_on_time(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    # A lease far longer than the test: the successor fires the tasks on time
    # only because the stop released the shards (it did not wait for expiry).
    knobs: dict[str, Any] = {"shard_lease_ms": 60_000}
    client = hooks(start=False, **knobs)
    start = now_ms()
    due = {f"pre-{i}": start + 3000 + i for i in range(10)}
    due |= {f"ins-{i}": start + 3000 + i for i in range(10)}
    # Due after the stop, not within arm_ahead_ms of it: never armed by the first.
    client.schedule_many([TaskSpec(id=t, at_ms=d) for t, d in due.items() if t.startswith("pre-")])
    hook = hooks(instance_id="first", **knobs)
    wait_for_shards(hook)
    for task_id, due_ms in due.items():
        if task_id.startswith("ins-"):
            hook.schedule(TaskSpec(task_id, at_ms=due_ms))  # through its engine
    assert set(rows.owners().values()) == {"first"}
    assert rows.members() == {"first"}

    clean = hook.stop()

    assert clean is True
    assert not hook.engine.running
    after = rows.rows()
    assert set(after) == set(due)
    assert {r.firing for r in after.values()} == {0}, after  # nothing armed...
    assert event_consumer.drain_quiet(0.3) == []  # ...nothing fired
    assert set(rows.owners().values()) == {None}  # every shard released
    assert set(rows.leases().values()) == {0}
    assert rows.members() == set()  # and the name

    successor = hooks(instance_id="second", **knobs)
    events = event_consumer.collect(len(due), (start + 3010 - now_ms()) / 1000 + 10)

    assert sorted(e.message_id or "" for e in events) == sorted(due)
    for event in events:
        assert header_int(event, "x-fired-ms") >= due[event.message_id or ""]
    assert wait_until(lambda: rows.count() == 0, 10), rows.rows()
    assert successor.engine.counters()["inherited"] == 0  # nothing was left armed
