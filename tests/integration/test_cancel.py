"""cancel() against real MariaDB and RabbitMQ.

"Never fires" is proven with a sentinel: a task due after the cancelled one is
scheduled, and once the sentinel's event arrived, the cancelled task's event
would have arrived before it (one engine, the owner of both tasks' shards,
publishes in due order, and arms and fires a task before any task due later).
"""

from __future__ import annotations

import itertools
import logging
import threading

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

from triggerhook import CancelResult, TaskSpec, TaskState, ValidationError
from triggerhook.domain.arming import shard_of

log = logging.getLogger(__name__)

FAR_MS = 3_600_000


def test_cancel_scheduled_tasks_they_never_fire(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks()  # arms 200 ms ahead
    wait_for_shards(hook)
    start = now_ms()
    hook.schedule(TaskSpec("far", at_ms=start + FAR_MS))
    hook.schedule(TaskSpec("near", at_ms=start + 800))  # in a shard this instance owns
    near = rows.row("near")
    assert near is not None and near.firing == 0  # not armed yet: not in memory
    assert hook.engine.shards.owns(near.shard)

    assert hook.cancel("far") is CancelResult.CANCELLED
    assert hook.cancel("near") is CancelResult.CANCELLED

    assert rows.row("far") is None and rows.row("near") is None
    assert hook.get("near") is None
    hook.schedule(TaskSpec("sentinel", at_ms=start + 1100))
    received = collect_until(event_consumer, "sentinel", timeout_s=15)
    assert [r.message_id for r in received] == ["sentinel"]
    # The owner never armed the cancelled task: the sentinel is all it armed.
    assert hook.engine.counters()["armed"] == 1
    assert hook.cancel("near") is CancelResult.NOT_FOUND  # a second cancel
    assert wait_until(lambda: rows.count() == 0, 10)


def test_cancel_unknown_id_is_not_found(hooks: HookFactory, rows: RowReader) -> None:
    hook = hooks(start=False)
    hook.schedule(TaskSpec("other", delay_ms=FAR_MS))

    assert hook.cancel("no-such-task") is CancelResult.NOT_FOUND
    assert hook.cancel("OTHER") is CancelResult.NOT_FOUND  # ids are case-sensitive
    assert rows.row("other") is not None


@pytest.mark.parametrize("bad_id", ["bad id!", "", "x" * 65])
def test_cancel_invalid_id_is_a_validation_error(hooks: HookFactory, bad_id: str) -> None:
    hook = hooks(start=False)
    with pytest.raises(ValidationError) as info:
        hook.cancel(bad_id)
    assert info.value.field == "id"


def test_cancel_after_fired_and_deleted_is_not_found(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks()
    hook.schedule(TaskSpec("done", delay_ms=0))
    assert [e.message_id for e in event_consumer.collect(1, 10)] == ["done"]
    assert wait_until(lambda: rows.row("done") is None, 10)

    assert hook.cancel("done") is CancelResult.NOT_FOUND


def _armed(rows: RowReader, task_id: str) -> bool:
    row = rows.row(task_id)
    return row is not None and row.firing == 1


def test_cancel_task_armed_on_insert_is_too_late_and_it_fires(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    # Due within arm_ahead_ms when inserted through the shard's owner: armed
    # at once (the insert wakes the armer), well before it is due.
    hook = hooks(arm_ahead_ms=3000)
    wait_for_shards(hook)
    scheduled = hook.schedule(TaskSpec("armed", delay_ms=2000))
    wait_for(lambda: _armed(rows, "armed"), 1.5, lambda: f"not armed: {rows.row('armed')}")

    result = hook.cancel("armed")

    assert result is CancelResult.TOO_LATE
    info = hook.get("armed")
    assert info is not None and info.state is TaskState.FIRING
    events = event_consumer.collect(1, 10)
    assert [e.message_id for e in events] == ["armed"]
    assert header_int(events[0], "x-fired-ms") >= scheduled.task.due_ms
    assert wait_until(lambda: rows.count() == 0, 10)


def test_cancel_task_armed_by_the_armer_is_too_late_and_it_fires(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks(arm_ahead_ms=500)
    scheduled = hook.schedule(TaskSpec("later", delay_ms=1500))  # armed 500 ms before due
    row = rows.row("later")
    assert row is not None and row.firing == 0

    assert wait_until(lambda: _armed(rows, "later"), 5, interval_s=0.01)
    assert now_ms() < scheduled.task.due_ms, "armed too late to test cancel before the due time"
    assert hook.cancel("later") is CancelResult.TOO_LATE

    events = event_consumer.collect(1, 10)
    assert [e.message_id for e in events] == ["later"]
    assert header_int(events[0], "x-fired-ms") >= scheduled.task.due_ms
    assert wait_until(lambda: rows.count() == 0, 10)


def test_cancel_row_already_firing_is_too_late_and_it_fires(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    # A row another instance armed and then lost (crash before publishing):
    # armed by its shard's marks, in memory nowhere.
    due = now_ms() - 100
    client = hooks(start=False)
    client.schedule(TaskSpec("orphan", at_ms=due, routing_key="orphan.key", payload=b"data"))
    rows.mark_firing("orphan")

    assert client.cancel("orphan") is CancelResult.TOO_LATE
    info = client.get("orphan")
    assert info is not None and info.state is TaskState.FIRING

    engine = hooks()  # acquires the free shard, inherits the armed row and fires it
    events = event_consumer.collect(1, 10)
    assert [(e.message_id, e.routing_key, e.body) for e in events] == [
        ("orphan", "orphan.key", b"data")
    ]
    assert header_int(events[0], "x-due-ms") == due
    assert wait_until(lambda: rows.count() == 0, 10)
    assert client.cancel("orphan") is CancelResult.NOT_FOUND
    assert engine.engine.counters()["inherited"] == 1


def _id_in(shards: set[int], prefix: str) -> str:
    """A task id of one of ``shards``: ``<prefix>-<n>`` for the first such n."""
    return next(
        f"{prefix}-{n}"
        for n in itertools.count()
        if shard_of(f"{prefix}-{n}", SHARD_COUNT) in shards
    )


@pytest.mark.parametrize("b_started", [False, True], ids=["b-client", "b-engine"])
def test_cancel_task_held_by_another_instance(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer, b_started: bool
) -> None:
    """The task's shard is owned by instance a; b (a plain client, or an engine
    owning other shards) cancels it: CANCELLED, and a never fires it."""
    engine_a = hooks(instance_id="a")
    wait_for_shards(engine_a)
    client = hooks(start=False, instance_id="c")
    other = hooks(start=b_started, instance_id="b")
    if b_started:  # a hands half of the shards over to b
        half = SHARD_COUNT // 2
        wait_for_shards(engine_a, half, timeout_s=20)
        wait_for_shards(other, half, timeout_s=20)
    a_shards = {s for s, owner in rows.owners().items() if owner == "a"}
    assert a_shards == {lease.shard for lease in engine_a.engine.shards.leases()}
    held, sentinel = _id_in(a_shards, "held"), _id_in(a_shards, "sentinel")
    due = now_ms() + 1500
    client.schedule(TaskSpec(held, at_ms=due, payload="must not fire"))
    row = rows.row(held)
    assert row is not None and row.firing == 0 and rows.owners()[row.shard] == "a"

    assert other.cancel(held) is CancelResult.CANCELLED

    assert rows.row(held) is None
    # Due after it in a shard of a: had a fired the cancelled task, it would
    # have come first.
    other.schedule(TaskSpec(sentinel, at_ms=due + 300))
    received = collect_until(event_consumer, sentinel, timeout_s=15)
    assert [r.message_id for r in received] == [sentinel]
    assert engine_a.engine.counters()["armed"] == 1  # the sentinel only
    assert rows.owners()[shard_of(held, SHARD_COUNT)] == "a"  # still the owner
    assert wait_until(lambda: rows.count() == 0, 10)


@pytest.mark.parametrize("new_due_delta", [0, -400, 300], ids=["same-due", "earlier", "later"])
def test_cancel_then_reschedule_same_id_fires_the_new_task(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer, new_due_delta: int
) -> None:
    hook = hooks()  # arm 200 ms ahead, lease 2000 ms
    due = now_ms() + 800
    hook.schedule(TaskSpec("re", at_ms=due, payload="old"))  # unarmed until 200 ms before due
    assert hook.cancel("re") is CancelResult.CANCELLED

    new = hook.schedule(
        TaskSpec("re", at_ms=due + new_due_delta, routing_key="new.key", payload="new")
    )

    assert new.created is True
    hook.schedule(TaskSpec("sentinel", at_ms=due + 1000))
    received = collect_until(event_consumer, "sentinel", timeout_s=15)
    fired = [(r.message_id, r.routing_key, r.body) for r in received if r.message_id == "re"]
    assert fired == [("re", "new.key", b"new")]
    event = next(r for r in received if r.message_id == "re")
    assert header_int(event, "x-due-ms") == new.task.due_ms
    assert header_int(event, "x-fired-ms") >= new.task.due_ms
    assert wait_until(lambda: rows.count() == 0, 10)


def test_cancels_racing_the_armer_each_have_exactly_one_outcome(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    # Tasks whose arm times (due - 200 ms) fall while they are being cancelled:
    # CANCELLED ones must never fire, TOO_LATE and NOT_FOUND ones fire exactly once.
    hook = hooks()
    client = hooks(start=False)
    start = now_ms()
    count = 120
    hook.schedule_many([TaskSpec(id=f"r-{i}", at_ms=start + 400 + i * 3) for i in range(count)])
    results: dict[str, CancelResult] = {}
    lock = threading.Lock()

    def canceller(n: int) -> None:
        canceller_hook = hook if n % 2 else client  # via the engine and directly
        for i in range(n, count, 4):
            result = canceller_hook.cancel(f"r-{i}")
            with lock:
                results[f"r-{i}"] = result

    assert wait_until(lambda: now_ms() >= start + 200 + count, 5, interval_s=0.001)
    threads = [threading.Thread(target=canceller, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    hook.schedule(TaskSpec("sentinel", at_ms=max(now_ms(), start + 400 + 3 * count) + 300))
    received = collect_until(event_consumer, "sentinel", timeout_s=20)

    assert len(results) == count
    fired = [r.message_id for r in received if r.message_id != "sentinel"]
    assert len(fired) == len(set(fired)), "an event fired twice"
    cancelled = {i for i, r in results.items() if r is CancelResult.CANCELLED}
    assert cancelled.isdisjoint(fired), sorted(cancelled & set(fired))
    assert set(fired) == set(results) - cancelled
    outcomes = {o: sum(1 for r in results.values() if r is o) for o in CancelResult}
    log.info("cancel race outcomes: %s", {o.value: n for o, n in outcomes.items()})
    assert wait_until(lambda: rows.count() == 0, 10), rows.rows()
