"""``on_conflict`` (error, keep, replace) through the HTTP API of a real
daemon, the library and the AMQP command channel, against real MariaDB and
RabbitMQ: a debounce fires once, with the last content, never before the last
due time; a replace of a task being published is too late and the old content
fires; keep answers the stored task."""

from __future__ import annotations

import httpx
import pytest
from support.amqp import EventConsumer
from support.commands import CommandClient, Consumers
from support.hook import HookFactory, RowReader, collect_until, header_int
from support.http import Api
from support.names import uid
from support.waiting import now_ms, wait_for

from triggerhook import InsertOutcome, TaskSpec, TooLateError

REPLY_TIMEOUT_S = 15.0
QUIET_MS = 800  # the debounce's quiet period


def test_a_debounce_fires_once_with_the_last_content_at_its_time(
    api: Api, http: httpx.Client
) -> None:
    task_id, sentinel = uid("deb"), uid("sentinel")
    answers = []
    for n in range(5):
        body = {"id": task_id, "delay_ms": QUIET_MS, "payload": f"n={n}", "on_conflict": "replace"}
        answer = http.post("/v1/tasks", json=body)
        assert answer.status_code == (201 if n == 0 else 200), answer.text
        answers.append(answer.json())
    assert [a["outcome"] for a in answers] == ["created"] + ["replaced"] * 4
    last_due_ms = answers[-1]["due_ms"]
    made = http.post("/v1/tasks", json={"id": sentinel, "at_ms": last_due_ms + 500})
    assert made.status_code == 201, made.text

    events = [e for e in collect_until(api.events, sentinel, 20) if e.message_id == task_id]
    assert [e.body for e in events] == [b"n=4"]  # once, with the last content
    assert header_int(events[0], "x-due-ms") == last_due_ms
    assert events[0].received_ms >= last_due_ms  # never before the last due time


def test_keep_answers_the_stored_task_and_a_batch_says_each_outcome(http: httpx.Client) -> None:
    task_id = uid("keep")
    first = http.post("/v1/tasks", json={"id": task_id, "at_ms": 4_000_000_000_000})
    assert first.status_code == 201, first.text
    kept = http.post(
        "/v1/tasks", json={"id": task_id, "at_ms": 4_000_000_001_000, "on_conflict": "keep"}
    )
    assert kept.status_code == 200, kept.text
    assert (kept.json()["outcome"], kept.json()["due_ms"]) == ("kept", 4_000_000_000_000)
    other = uid("new")
    batch = http.post(
        "/v1/tasks/batch",
        json={
            "tasks": [
                {"id": task_id, "at_ms": 4_000_000_002_000, "on_conflict": "replace"},
                {"id": task_id, "at_ms": 4_000_000_003_000, "on_conflict": "keep"},
                {"id": other, "at_ms": 4_000_000_000_000},
            ]
        },
    )
    assert batch.status_code == 201, batch.text
    assert batch.json() == {
        "ids": [task_id, task_id, other],
        "outcomes": ["replaced", "kept", "created"],
    }
    assert http.get(f"/v1/tasks/{task_id}").json()["due_ms"] == 4_000_000_002_000
    refused = http.post(
        "/v1/tasks", json={"id": task_id, "at_ms": 4_000_000_000_000, "on_conflict": "later"}
    )
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", "on_conflict")
    assert "error, keep, replace" in error["message"]


def test_a_replace_of_a_task_being_published_is_too_late_and_the_old_content_fires(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks(arm_ahead_ms=3000)
    made = hook.schedule(TaskSpec("armed", delay_ms=2000, payload=b"old"))
    wait_for(lambda: (row := rows.row("armed")) is not None and row.firing == 1, 1.5, "not armed")
    with pytest.raises(TooLateError) as raised:
        hook.schedule(TaskSpec("armed", delay_ms=60_000, payload=b"new", on_conflict="replace"))
    assert raised.value.task_id == "armed"
    [event] = event_consumer.collect(1, 15)
    assert (event.message_id, event.body) == ("armed", b"old")
    assert header_int(event, "x-due-ms") == made.task.due_ms
    wait_for(lambda: rows.row("armed") is None, 10, "the fired row was not deleted")


def test_a_replace_through_the_library_is_armed_as_the_new_task(
    hooks: HookFactory, event_consumer: EventConsumer
) -> None:
    hook = hooks()
    due = now_ms() + 60_000
    hook.schedule(TaskSpec("swap", at_ms=due, routing_key="swap.a", payload=b"1"))
    soon = now_ms() + 300
    spec = TaskSpec("swap", at_ms=soon, routing_key="swap.b", payload=b"2", on_conflict="replace")
    assert hook.schedule(spec).outcome is InsertOutcome.REPLACED
    [event] = event_consumer.collect(1, 15)
    assert (event.message_id, event.routing_key, event.body) == ("swap", "swap.b", b"2")
    assert header_int(event, "x-due-ms") == soon


def test_an_amqp_create_replies_with_its_outcome(
    hooks: HookFactory, consumers: Consumers, client: CommandClient, command_queue: str
) -> None:
    consumers.start(hooks(), command_queue)
    body = {"id": "cmd-keep", "at_ms": 4_000_000_000_000}
    replies = []
    for extra in ({}, {"at_ms": 4_000_000_001_000, "on_conflict": "keep"}):
        correlation_id = client.send("create", {**body, **extra}, reply=True)
        assert correlation_id is not None
        replies.append(client.reply(correlation_id, REPLY_TIMEOUT_S).json())
    assert [(r["ok"], r["outcome"], r["created"]) for r in replies] == [
        (True, "created", True),
        (True, "kept", False),
    ]
    assert replies[1]["due_ms"] == 4_000_000_000_000  # the stored task's
