"""``get`` of a task a rate limit holds back (docs/api.md, "When a task goes"),
through a started library engine on real MariaDB and RabbitMQ: a held task
the engine postpones to the database (R8p) reads back ``scheduled``,
``throttled`` and when it goes (``fire_ms``); it still can be cancelled, and
the others go at their instants, not before.

The hold is the catch-up's (``catch_up_rate``, overdue tasks of any key): a
key ``rate_limits`` names has its own lane, which never takes more than half
the memory, so its held tasks are not written back (docs/design/flow-control.md,
3b); the catch-up's share the memory with every other task."""

from __future__ import annotations

from support.amqp import EventConsumer
from support.hook import HookFactory, collect_until, header_int
from support.waiting import now_ms, wait_for

from triggerhook import TaskSpec
from triggerhook.domain.task import CancelResult, TaskInfo, TaskState

KEY = "orders.overdue"
COUNT = 8


def test_a_postponed_task_reads_back_throttled_with_when_it_goes(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    # A token every 500 ms for tasks over a second late; memory for 4 tasks,
    # so held ones cannot all stay in it: those whose token is past
    # arm_ahead_ms (200) wait in the database.
    hook = hooks(catch_up_rate="2/s burst 1", catch_up_after_ms=1000, max_tasks_in_memory=4)
    start = now_ms()
    due = start - 10_000  # ten seconds overdue: the catch-up's
    ids = [f"slow-{i}" for i in range(COUNT)]
    hook.schedule_many([TaskSpec(task_id, at_ms=due, routing_key=KEY) for task_id in ids])

    waiting: list[TaskInfo] = []

    def two_throttled() -> bool:
        found = [hook.get(task_id) for task_id in ids]
        waiting[:] = [info for info in found if info is not None and info.throttled]
        return len(waiting) >= 2

    wait_for(two_throttled, 10, "two tasks postponed to the database")
    for info in waiting:
        assert info.state is TaskState.SCHEDULED  # unarmed: it waits for its token
        assert info.fire_ms is not None and info.fire_ms >= start + 500  # a token or more later
    # Still a scheduled task: a cancel applies (and ends the wait).
    gone = waiting[0].task.id
    assert hook.cancel(gone) is CancelResult.CANCELLED
    assert hook.get(gone) is None
    # The others go, each at its token's instant or after (the engine's clock).
    hook.schedule(TaskSpec("sentinel", at_ms=start + (COUNT + 1) * 500))
    events = collect_until(event_consumer, "sentinel", 30)
    fired = {e.message_id: header_int(e, "x-fired-ms") for e in events if e.routing_key == KEY}
    assert set(fired) == set(ids) - {gone}
    for info in waiting[1:]:
        assert info.fire_ms is not None and fired[info.task.id] >= info.fire_ms
