"""Firing against real MariaDB and RabbitMQ: wire format, never early, deletion,
bounded memory (unroutable events: test_dead_letters.py).

Lateness is measured and logged (``-o log_cli=true --log-cli-level=INFO`` shows
it, ``record_property`` stores it in JUnit XML) but never asserted tightly:
speed targets belong to the benchmarks, correctness to the tests.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from support.amqp import EventConsumer, Received
from support.hook import (
    HookFactory,
    RowReader,
    header_int,
    publisher_of,
    wait_for_shards,
)
from support.waiting import now_ms, wait_until

from triggerhook import TaskSpec
from triggerhook.domain.task import Task
from triggerhook.engine.inventory import Inventory

log = logging.getLogger(__name__)

RecordProperty = Callable[[str, object], None]


def _lateness_summary(values: Sequence[int]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"n={len(ordered)} min={ordered[0]} median={statistics.median(ordered)} "
        f"p99={p99} max={ordered[-1]} (ms)"
    )


def _assert_not_early(events: Sequence[Received]) -> None:
    for event in events:
        due = header_int(event, "x-due-ms")
        fired = header_int(event, "x-fired-ms")
        assert fired >= due, f"{event.message_id} fired {due - fired} ms early"
        assert event.received_ms >= due, f"{event.message_id} received before due"


# -- 3. wire format ---------------------------------------------------------------


def test_wire_format(hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer) -> None:
    hook = hooks()
    due = now_ms() + 300
    tasks = {
        "wire-default": hook.schedule(TaskSpec("wire-default", at_ms=due)).task,
        "wire-custom": hook.schedule(
            TaskSpec(
                "wire-custom",
                at_ms=due + 1,
                routing_key="orders.created.eu",
                payload=b"\x00\x01\xff",
            )
        ).task,
        "wire-text": hook.schedule(TaskSpec("wire-text", at_ms=due + 2, payload="héllo ✓")).task,
    }

    events = {e.message_id: e for e in event_consumer.collect(3, 15)}

    assert set(events) == set(tasks)
    expected = {
        "wire-default": ("triggerhook.fire", b""),
        "wire-custom": ("orders.created.eu", b"\x00\x01\xff"),
        "wire-text": ("triggerhook.fire", "héllo ✓".encode()),
    }
    for task_id, (routing_key, body) in expected.items():
        event = events[task_id]
        assert event.routing_key == routing_key
        assert event.body == body
        assert event.delivery_mode == 2
        assert set(event.headers) == {"x-due-ms", "x-fired-ms", "x-rev"}
        due_ms = header_int(event, "x-due-ms")
        fired_ms = header_int(event, "x-fired-ms")
        assert due_ms == tasks[task_id].due_ms
        assert fired_ms >= due_ms
        assert event.timestamp == fired_ms // 1000
        assert header_int(event, "x-rev") > 0  # the stored row's revision (random, 63 bits)
    # Each incarnation has its own revision.
    assert len({header_int(e, "x-rev") for e in events.values()}) == len(events)
    # 5. after firing and confirmation the rows are deleted.
    assert wait_until(lambda: rows.count() == 0, 10), rows.rows()


def test_custom_default_routing_key(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks(default_routing_key="custom.default")
    scheduled = hook.schedule(TaskSpec("dflt", delay_ms=0))

    events = event_consumer.collect(1, 15)

    assert scheduled.task.routing_key == "custom.default"
    assert [(e.message_id, e.routing_key) for e in events] == [("dflt", "custom.default")]
    assert wait_until(lambda: rows.count() == 0, 10)


def test_large_payload_and_long_names_are_delivered_intact(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    # Bodies over the negotiated frame size (128 KiB by default) span several frames.
    hook = hooks(max_payload_bytes=400_000)
    big = bytes(range(256)) * 1200  # 307200 bytes
    long_id = "i" * 64
    long_key = ".".join(["k" * 50] * 5)[:255]
    hook.schedule(TaskSpec("big", delay_ms=0, payload=big))
    hook.schedule(TaskSpec(long_id, delay_ms=0, routing_key=long_key, payload=b""))

    events = {e.message_id: e for e in event_consumer.collect(2, 15)}

    assert set(events) == {"big", long_id}
    assert events["big"].body == big
    assert (events[long_id].routing_key, events[long_id].body) == (long_key, b"")
    assert wait_until(lambda: rows.count() == 0, 10)


# -- 4. never early -----------------------------------------------------------------


def test_never_early_spread_and_simultaneous(
    hooks: HookFactory,
    rows: RowReader,
    event_consumer: EventConsumer,
    record_property: RecordProperty,
) -> None:
    hook = hooks()
    assert hook.engine.scheduler.driven  # the AMQP publisher's loop times the fires
    start = now_ms()
    # 300 tasks spread over 1.5 s: the first ones are due within arm_ahead_ms
    # when written (armed at once), the later ones armed as their time comes.
    spread = [TaskSpec(id=f"s-{i}", at_ms=start + 100 + i * 5, payload=str(i)) for i in range(300)]
    hook.schedule_many(spread)
    # 100 more all due at one instant, from concurrent schedule() calls (group commit).
    instant = start + 1000
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(25):
                hook.schedule(TaskSpec(f"i-{n}-{i}", at_ms=instant))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors

    events = event_consumer.collect(400, 30)

    # The driven scheduler's timers: one that fired is not cancelled again
    # (pika would count a cancellation it never takes back, ~one per fire,
    # and past 1,000 of them rebuild its timer heap on every loop turn).
    conn = publisher_of(hook)._loop.connection
    assert conn is not None
    assert conn.ioloop._timer._num_cancellations < 50  # pika 1.4.4's counter
    ids = {e.message_id for e in events}
    assert len(events) == 400 and len(ids) == 400, f"got {len(events)} events, {len(ids)} ids"
    _assert_not_early(events)
    for event in events:
        if event.message_id and event.message_id.startswith("s-"):
            assert event.body == event.message_id[2:].encode()
    fired_late = [header_int(e, "x-fired-ms") - header_int(e, "x-due-ms") for e in events]
    received_late = [e.received_ms - header_int(e, "x-due-ms") for e in events]
    record_property("fired_lateness", _lateness_summary(fired_late))
    record_property("received_lateness", _lateness_summary(received_late))
    log.info("400 tasks: fired lateness %s", _lateness_summary(fired_late))
    log.info("400 tasks: received lateness %s", _lateness_summary(received_late))
    assert wait_until(lambda: rows.count() == 0, 10), f"{rows.count()} rows left"


def test_overdue_task_fires_at_once(
    hooks: HookFactory,
    rows: RowReader,
    event_consumer: EventConsumer,
    record_property: RecordProperty,
) -> None:
    hook = hooks()
    due = now_ms() - 5000

    hook.schedule(TaskSpec("overdue", at_ms=due))
    returned_ms = now_ms()
    events = event_consumer.collect(1, 10)

    assert [e.message_id for e in events] == ["overdue"]
    assert header_int(events[0], "x-due-ms") == due
    _assert_not_early(events)
    after_ms = events[0].received_ms - returned_ms
    record_property("overdue_received_after_ms", after_ms)
    log.info("overdue task received %d ms after schedule() returned", after_ms)
    assert after_ms < 2000  # correctness bound ("at once"), not a speed target
    assert wait_until(lambda: rows.count() == 0, 10)


def test_task_due_50ms_ahead_fires(
    hooks: HookFactory,
    rows: RowReader,
    event_consumer: EventConsumer,
    record_property: RecordProperty,
) -> None:
    hook = hooks()
    lateness: list[int] = []
    for n in range(5):
        scheduled = hook.schedule(TaskSpec(f"soon-{n}", delay_ms=50))
        events = event_consumer.collect(1, 10)
        assert [e.message_id for e in events] == [f"soon-{n}"]
        _assert_not_early(events)
        assert header_int(events[0], "x-due-ms") == scheduled.task.due_ms
        lateness.append(header_int(events[0], "x-fired-ms") - scheduled.task.due_ms)
    record_property("soon_fired_lateness_ms", lateness)
    log.info("tasks due 50 ms ahead: fired lateness %s ms", lateness)
    assert wait_until(lambda: rows.count() == 0, 10)


# -- 7. unroutable events: see test_dead_letters.py ----------------------------------


# -- 8. bounded memory ------------------------------------------------------------------


def _record_sizes(monkeypatch: pytest.MonkeyPatch, inventory: Inventory) -> list[int]:
    """Wrap ``inventory.admit``: the returned list gets the size after each admit."""
    original_admit = inventory.admit
    sizes: list[int] = []
    lock = threading.Lock()

    def admit(tasks: Sequence[Task], reserved: int) -> list[Task]:
        fresh = original_admit(tasks, reserved)
        with lock:
            sizes.append(len(inventory))
        return fresh

    monkeypatch.setattr(inventory, "admit", admit)
    return sizes


def test_memory_stays_bounded_with_a_large_backlog(
    hooks: HookFactory,
    rows: RowReader,
    event_consumer: EventConsumer,
    monkeypatch: pytest.MonkeyPatch,
    record_property: RecordProperty,
) -> None:
    knobs: dict[str, Any] = {"max_tasks_in_memory": 50, "arm_batch_size": 20}
    client = hooks(start=False, **knobs)
    start = now_ms()
    client.schedule_many([TaskSpec(id=f"b-{i}", at_ms=start - 1000 - i) for i in range(500)])
    assert rows.count() == 500

    hook = hooks(start=False, **knobs)
    sizes = _record_sizes(monkeypatch, hook.engine.inventory)
    hook.start()

    events = event_consumer.collect(500, 60)

    assert len({e.message_id for e in events}) == 500
    _assert_not_early(events)
    assert wait_until(lambda: rows.count() == 0, 15), f"{rows.count()} rows left"
    record_property("inventory_peak", max(sizes))
    log.info("inventory peak %d over %d admits", max(sizes), len(sizes))
    assert len(sizes) >= 10  # 500 tasks in batches of at most 20
    assert max(sizes) <= 50, f"inventory grew to {max(sizes)} (> max_tasks_in_memory=50)"


@pytest.mark.parametrize("api", ["schedule", "schedule_many"])
def test_memory_stays_bounded_under_concurrent_schedule_calls(
    hooks: HookFactory,
    rows: RowReader,
    event_consumer: EventConsumer,
    monkeypatch: pytest.MonkeyPatch,
    record_property: RecordProperty,
    api: str,
) -> None:
    # Concurrent callers write, through the engine that owns every shard,
    # four times more tasks due within arm_ahead_ms than memory holds: each
    # insert wakes the armer, which arms the rows written since its last pass
    # (many of them below its watermark) but never more than the room left.
    # The rest wait in the database, unarmed, and are armed as room frees up.
    hook = hooks(start=False, max_tasks_in_memory=50, arm_ahead_ms=10_000)
    inventory = hook.engine.inventory
    sizes = _record_sizes(monkeypatch, inventory)
    hook.start()
    assert publisher_of(hook).connected.wait(20)
    wait_for_shards(hook)
    start = now_ms()
    due = start + 4000  # after every call returned: nothing fires before
    callers, per_caller = 8, 25
    errors: list[BaseException] = []

    def caller(n: int) -> None:
        specs = [TaskSpec(id=f"c-{n}-{i}", at_ms=due + i) for i in range(per_caller)]
        try:
            if api == "schedule":
                for spec in specs:
                    hook.schedule(spec)
            else:
                hook.schedule_many(specs)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=caller, args=(n,), name=f"caller-{n}") for n in range(callers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not errors, errors
    assert now_ms() < due, "the calls took too long for this test"
    total = callers * per_caller
    assert rows.count() == total
    # Memory fills up to its bound before anything is due, and no further.
    assert wait_until(lambda: len(inventory) == 50, 3), len(inventory)
    assert now_ms() < due
    assert len({r.id for r in rows.rows().values() if r.firing}) == 50

    events = event_consumer.collect(total, 30)

    assert sorted(e.message_id or "" for e in events) == sorted(
        f"c-{n}-{i}" for n in range(callers) for i in range(per_caller)
    )
    _assert_not_early(events)
    assert wait_until(lambda: rows.count() == 0, 15), f"{rows.count()} rows left"
    record_property("inventory_peak", max(sizes))
    log.info("concurrent %s: inventory peak %d over %d admits", api, max(sizes), len(sizes))
    assert max(sizes) <= 50, f"inventory grew to {max(sizes)} (> max_tasks_in_memory=50)"
