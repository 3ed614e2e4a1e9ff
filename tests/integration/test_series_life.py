"""A series' life through a started library engine, against real MariaDB and
RabbitMQ (docs/design/flow-control.md section 4): a paused series fires
nothing until resumed and then goes on on its schedule; trigger fires one
extra occurrence at once; backfill fires a past range, and a repeat finds
the copies still pending; catch-up "all" fires the occurrences an outage missed, each never
before its due time."""

from __future__ import annotations

from support.amqp import EventConsumer, Received
from support.hook import HookFactory, collect_until, header_int
from support.names import uid
from support.waiting import now_ms

from triggerhook import SeriesResult, TaskSpec
from triggerhook.domain.series import PARKED_MS, copy_id

SECOND = 1000


def of(events: list[Received], task_id: str) -> list[Received]:
    return [e for e in events if e.message_id == task_id]


def dues(events: list[Received], prefix: str) -> list[int]:
    return sorted(
        header_int(e, "x-due-ms") for e in events if (e.message_id or "").startswith(prefix)
    )


def test_a_paused_series_fires_nothing_until_it_is_resumed(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    hook = hooks()
    series = uid("paused")
    first = now_ms() + 2 * SECOND
    hook.schedule(TaskSpec(series, at_ms=first, every="PT1S"))
    assert hook.pause(series) is SeriesResult.PAUSED
    info = hook.get(series)
    assert info is not None and info.task.due_ms == PARKED_MS
    # Three of its occurrences' times pass while it is paused: none fires.
    quiet = uid("quiet")
    hook.schedule(TaskSpec(quiet, at_ms=first + 3 * SECOND))
    assert of(collect_until(event_consumer, quiet, 20), series) == []
    # Resumed after its occurrence passed, by the default policy ("one"): that
    # occurrence fires at once (late), then the series goes on from now.
    resumed_ms = now_ms()
    assert hook.resume(series) is SeriesResult.RESUMED
    after = uid("after")
    hook.schedule(TaskSpec(after, at_ms=resumed_ms + 2_500))
    fired = of(collect_until(event_consumer, after, 20), series)
    assert [header_int(e, "x-due-ms") for e in fired[:1]] == [first]
    assert len(fired) >= 2
    later = [header_int(e, "x-due-ms") for e in fired[1:]]
    assert all(due > resumed_ms and (due - first) % SECOND == 0 for due in later), later
    assert all(header_int(e, "x-fired-ms") >= header_int(e, "x-due-ms") for e in fired)
    hook.cancel(series)


def test_trigger_fires_one_extra_occurrence_now_and_leaves_the_schedule(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    hook = hooks()
    series = uid("trig")
    due = now_ms() + 3_600_000
    hook.schedule(TaskSpec(series, at_ms=due, every="PT1H", payload=b"body", tags=["t"]))
    copied = hook.trigger(series)
    assert copied.result is SeriesResult.TRIGGERED
    [scheduled] = copied.copies
    copy = scheduled.task
    assert copy.id == copy_id(series, copy.due_ms)
    events = of(collect_until(event_consumer, copy.id, 20), copy.id)
    assert [(e.body, header_int(e, "x-due-ms")) for e in events] == [(b"body", copy.due_ms)]
    info = hook.get(series)
    assert info is not None and info.task.due_ms == due  # the schedule unchanged
    assert hook.trigger(uid("none")).result is SeriesResult.NOT_FOUND
    hook.cancel(series)


def test_backfill_fires_a_past_range_and_a_repeat_finds_the_copies_pending(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    client = hooks(start=False)  # nothing fires until the engine starts: the copies wait
    series = uid("back")
    now = now_ms()
    client.schedule(TaskSpec(series, at_ms=now + 3_600_000, every="PT10S"))
    start = now - 60 * SECOND
    first = client.backfill(series, from_ms=start, to_ms=now - SECOND)
    assert first.result is SeriesResult.BACKFILLED
    expected = [c.task.due_ms for c in first.copies]
    assert 5 <= len(expected) <= 6 and all(start <= d < now - SECOND for d in expected)
    assert expected == sorted(expected) and {(d - expected[0]) % 10_000 for d in expected} == {0}
    assert {c.outcome.value for c in first.copies} == {"created"}
    again = client.backfill(series, from_ms=start, to_ms=now - SECOND)
    assert [(c.task.id, c.outcome.value) for c in again.copies] == [
        (c.task.id, "exists") for c in first.copies
    ]
    engine = hooks()
    sentinel = uid("sentinel")
    engine.schedule(TaskSpec(sentinel, delay_ms=1500))
    events = collect_until(event_consumer, sentinel, 20) + event_consumer.drain_quiet(0.5)
    assert dues(events, f"{series}:") == expected  # each once
    engine.cancel(series)


def test_catch_up_all_fires_each_occurrence_an_outage_missed(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    client = hooks(start=False)
    series = uid("all")
    first = now_ms() - 4_500  # its first occurrence came during an outage
    client.schedule(TaskSpec(series, at_ms=first, every="PT1S", catch_up="all", catch_up_max=3))
    engine = hooks()  # the engine comes back
    sentinel = uid("sentinel")
    engine.schedule(TaskSpec(sentinel, delay_ms=2_500))
    events = collect_until(event_consumer, sentinel, 20) + event_consumer.drain_quiet(0.5)
    # The overdue occurrence fires, then copies of the next three missed (the
    # fourth is over catch_up_max), then the series goes on after now.
    assert header_int(of(events, series)[0], "x-due-ms") == first
    assert dues(events, f"{series}:") == [first + k * SECOND for k in (1, 2, 3)]
    assert all(header_int(e, "x-fired-ms") >= header_int(e, "x-due-ms") for e in events)
    engine.cancel(series)
