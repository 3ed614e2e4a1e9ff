"""Library API against real MariaDB and RabbitMQ: commits, idempotency, get(), stop().

Every assertion reads real state: rows through a separate PyMySQL connection
(``rows`` fixture) and events through a real consumer (``event_consumer``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support.amqp import EventConsumer
from support.hook import HookFactory, RowReader, collect_until
from support.waiting import now_ms, wait_until

from triggerhook import (
    ConflictError,
    Task,
    TaskInfo,
    TaskSpec,
    TaskState,
    ValidationError,
)

FAR_MS = 3_600_000  # an hour ahead: never fires during a test


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
    assert (row.claimed_by, row.claim_until_ms, row.firing) == (None, 0, 0)


def test_schedule_on_running_engine_commits_before_return(
    hooks: HookFactory, rows: RowReader, database_url: str
) -> None:
    # Large window and arm lead so claimed-on-insert rows stay put during the test.
    hook = hooks(preload_window_ms=30_000, claim_lease_ms=60_000, arm_ahead_ms=1000)
    start = now_ms()
    threads_count, per_thread = 8, 25
    missing: list[str] = []
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        reader = RowReader(database_url)  # each thread checks with its own connection
        try:
            for i in range(per_thread):
                task_id = f"gc-{n}-{i}"
                # Alternate: beyond the window (left for preloaders) and inside it
                # (claimed by this instance in the same transaction).
                due = start + (FAR_MS if i % 2 else 20_000)
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
        if row.due_ms == start + 20_000:
            assert (row.claimed_by, row.firing) == (hook.instance_id, 0), row
        else:
            assert row.claimed_by is None, row

    # Due within arm_ahead_ms: committed armed (firing = 1) before schedule returns.
    hook.schedule(TaskSpec("gc-armed", delay_ms=800))
    armed = rows.row("gc-armed")
    assert armed is not None
    assert (armed.claimed_by, armed.firing) == (hook.instance_id, 1)


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
    soon = now_ms() + 300  # inside the preload window: a running engine plans to claim
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
    hook = hooks(arm_ahead_ms=1000, preload_window_ms=2000, claim_lease_ms=4000)
    far = now_ms() + FAR_MS
    hook.schedule(TaskSpec("future", at_ms=far, routing_key="g.k", payload=b"pl"))
    armed = hook.schedule(TaskSpec("armed", delay_ms=800))  # within arm_ahead_ms: armed on insert

    future_info = hook.get("future")
    armed_info = hook.get("armed")

    assert future_info == TaskInfo(Task("future", far, "g.k", b"pl"), TaskState.SCHEDULED)
    assert armed_info == TaskInfo(armed.task, TaskState.FIRING)
    assert armed_info.task.routing_key == "triggerhook.fire"
    row = rows.row("armed")
    assert row is not None and row.firing == 1
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


def test_graceful_stop_releases_claims_of_tasks_not_yet_due(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    knobs: dict[str, Any] = {"preload_window_ms": 10_000, "claim_lease_ms": 20_000}
    client = hooks(start=False, **knobs)
    start = now_ms()
    # Due inside the window but long after the test: claimed, never armed.
    client.schedule_many([TaskSpec(id=f"pre-{i}", at_ms=start + 8000 + i) for i in range(10)])
    hook = hooks(**knobs)
    for i in range(10):
        hook.schedule(TaskSpec(f"ins-{i}", at_ms=start + 8000 + i))  # claimed on insert
    ids = {f"pre-{i}" for i in range(10)} | {f"ins-{i}" for i in range(10)}

    def all_claimed() -> bool:
        return all(r.claimed_by == hook.instance_id for r in rows.rows().values())

    assert wait_until(all_claimed, 10), rows.rows()
    assert wait_until(lambda: len(hook.engine.inventory) == 20, 10)
    assert all(r.claim_until_ms > start for r in rows.rows().values())

    clean = hook.stop()

    assert clean is True
    after = rows.rows()
    assert set(after) == ids
    for row in after.values():
        assert (row.claimed_by, row.claim_until_ms, row.firing) == (None, 0, 0), row
    assert event_consumer.drain_quiet(0.3) == []
    assert not hook.engine.running
