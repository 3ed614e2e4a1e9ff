"""Rate limits and the throttled catch-up (docs/operations.md, "Rate limits")
through a started library engine, against real MariaDB and RabbitMQ: a
backlog on a limited key leaves at its rate and never before its token, the
other keys keep their pace, the catch-up limits only late tasks."""

from __future__ import annotations

from support.amqp import EventConsumer, Received
from support.hook import HookFactory, collect_until, header_int
from support.waiting import now_ms

from triggerhook import TaskSpec

LIMITED, FREE = "orders.limited", "orders.free"


def named(event: Received, prefix: str) -> bool:
    return (event.message_id or "").startswith(prefix)


def fired_ms(events: list[Received], key: str) -> list[int]:
    return sorted(header_int(e, "x-fired-ms") for e in events if e.routing_key == key)


def test_a_backlog_on_a_limited_key_leaves_at_its_rate(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    hook = hooks(rate_limits=f"{LIMITED}=20/s burst 5")
    due = now_ms() + 300
    specs = [TaskSpec(f"lim-{i:02d}", at_ms=due, routing_key=LIMITED) for i in range(25)]
    specs += [TaskSpec(f"free-{i}", at_ms=due, routing_key=FREE) for i in range(5)]
    hook.schedule_many(specs)
    hook.schedule(TaskSpec("sentinel", at_ms=due + 1500))
    events = collect_until(event_consumer, "sentinel", 20)
    events += event_consumer.drain_quiet(0.5)
    limited, free = fired_ms(events, LIMITED), fired_ms(events, FREE)
    assert len(limited) == 25 and len(free) == 5
    assert min(limited) >= due and min(free) >= due  # never early
    # Five at once (the burst), then one token every 50 ms from the instant
    # they came due, which is not before ``due``: the k-th held one fires at or
    # after due + k * 50 (by the engine's clock, as x-fired-ms).
    for k, at in enumerate(limited[5:], start=1):
        assert at >= due + k * 50, (k, at - due)
    totals = hook.figures().totals
    assert totals["throttled"] == 20  # the other key's none: not held
    # Per pattern (metrics): the same 20, the k-th waiting k tokens of 50 ms
    # from when it was held (whole ms: up to 1 more each; less when the
    # scheduler took them in more than one batch, a few ms apart).
    assert totals[f"throttled:{LIMITED}"] == 20
    waited_ms = sum(range(50, 1001, 50))
    assert waited_ms - 20 * 50 < totals[f"throttle_wait_ms:{LIMITED}"] <= waited_ms + 20


def test_the_catch_up_limits_overdue_tasks_only(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    hook = hooks(start=False)
    now = now_ms()
    # Ten tasks an hour overdue (a backlog), five due soon (on time).
    hook.schedule_many([TaskSpec(f"old-{i}", at_ms=now - 3_600_000) for i in range(10)])
    hook.schedule_many([TaskSpec(f"new-{i}", at_ms=now + 400) for i in range(5)])
    engine = hooks(catch_up_rate="10/s burst 2", catch_up_after_ms=1000)
    engine.schedule(TaskSpec("sentinel", at_ms=now + 1500))
    events = collect_until(event_consumer, "sentinel", 20)
    events += event_consumer.drain_quiet(0.5)
    old = sorted(header_int(e, "x-fired-ms") for e in events if named(e, "old-"))
    new = sorted(header_int(e, "x-fired-ms") for e in events if named(e, "new-"))
    assert len(old) == 10 and len(new) == 5
    assert min(new) >= now + 400  # never early
    # Two at once, eight held for their tokens (their instants: the unit tests
    # of the scheduler's throttle); none of the on-time ones was held.
    assert engine.figures().totals["throttled"] == 8
    assert engine.figures().totals["throttled:(catch_up)"] == 8
