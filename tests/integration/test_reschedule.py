"""reschedule() against real MariaDB and RabbitMQ (the library API).

"Never fires at the old time" is proven with a sentinel, as in test_cancel.py.
"""

from __future__ import annotations

import pytest
from support.amqp import EventConsumer
from support.hook import HookFactory, RowReader, collect_until, header_int, wait_for_shards
from support.waiting import now_ms, wait_for, wait_until

from triggerhook import RescheduleResult, ValidationError
from triggerhook.domain.spec import TaskSpec

FAR_MS = 3_600_000


def test_reschedule_a_far_task_to_soon_fires_it_at_the_new_time_only(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks()
    start = now_ms()
    hook.schedule(TaskSpec("move", at_ms=start + FAR_MS, payload=b"body", routing_key="rk.move"))

    moved = hook.reschedule("move", at_ms=start + 600)

    assert moved.result is RescheduleResult.RESCHEDULED
    assert moved.task is not None and moved.task.due_ms == start + 600
    assert (moved.task.payload, moved.task.routing_key) == (b"body", "rk.move")
    row = rows.row("move")
    assert row is not None and (row.due_ms, row.fire_ms) == (start + 600, start + 600)
    events = event_consumer.collect(1, 10)
    assert [e.message_id for e in events] == ["move"]
    assert header_int(events[0], "x-due-ms") == start + 600
    assert header_int(events[0], "x-fired-ms") >= start + 600
    assert events[0].body == b"body"
    assert wait_until(lambda: rows.count() == 0, 10)


@pytest.mark.parametrize("via_engine", [True, False])
def test_reschedule_a_held_task_later_it_never_fires_at_the_old_time(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer, via_engine: bool
) -> None:
    holder = hooks()
    wait_for_shards(holder)  # the owner of every shard
    caller = holder if via_engine else hooks(start=False)  # another process, say
    start = now_ms()
    holder.schedule(TaskSpec("held", at_ms=start + 700))
    row = rows.row("held")
    assert row is not None and row.firing == 0  # to be armed by holder 200 ms before due

    moved = caller.reschedule("held", delay_ms=FAR_MS)
    assert moved.result is RescheduleResult.RESCHEDULED

    holder.schedule(TaskSpec("sentinel", at_ms=start + 1000))
    received = collect_until(event_consumer, "sentinel", timeout_s=15)
    assert [r.message_id for r in received] == ["sentinel"]
    row = rows.row("held")
    assert row is not None and row.firing == 0 and row.due_ms >= start + FAR_MS
    assert row.fire_ms == row.due_ms
    assert holder.engine.counters()["armed"] == 1  # the sentinel: never the moved task
    assert "held" not in holder.engine.inventory.snapshot()


def test_reschedule_results_for_unknown_armed_and_invalid(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks(arm_ahead_ms=3000)
    wait_for_shards(hook)
    assert hook.reschedule("nobody", delay_ms=5).result is RescheduleResult.NOT_FOUND
    hook.schedule(TaskSpec("armed", delay_ms=2000))  # within arm_ahead_ms: armed at once

    def armed() -> bool:
        row = rows.row("armed")
        return row is not None and row.firing == 1

    wait_for(armed, 1.5, lambda: f"not armed: {rows.row('armed')}")
    late = hook.reschedule("armed", delay_ms=FAR_MS)
    assert late.result is RescheduleResult.TOO_LATE and late.task is None
    assert [e.message_id for e in event_consumer.collect(1, 10)] == ["armed"]

    with pytest.raises(ValidationError) as bad_id:
        hook.reschedule("no good", delay_ms=5)
    assert bad_id.value.field == "id"
    hook.schedule(TaskSpec("kept", delay_ms=FAR_MS))
    with pytest.raises(ValidationError) as two_times:
        hook.reschedule("kept", at_ms=now_ms(), delay_ms=5)
    assert two_times.value.field == "at"
    with pytest.raises(ValidationError) as negative:
        hook.reschedule("kept", delay_ms=-1)
    assert negative.value.field == "delay_ms"
    assert rows.row("kept") is not None
