"""The dedup window (``dedup_window_ms``) end to end, against real MariaDB and
RabbitMQ: through the HTTP API of a real daemon, the library and the AMQP
command channel. A task with a window fires; a create of its id within the
window is refused (``409 already_fired`` with ``fired_ms``, the library's
``AlreadyFiredError``, the command's ``already_fired`` reply) and writes
nothing; once the window has passed the id is created again. A task without a
window can be created again as soon as it fired, as before the window existed.
"""

from __future__ import annotations

import httpx
import pytest
from support.amqp import EventConsumer, Received
from support.commands import CommandClient, Consumers
from support.hook import HookFactory, RowReader, collect_until, header_int
from support.http import Api
from support.names import uid
from support.waiting import now_ms, wait_for

from triggerhook import AlreadyFiredError, TaskSpec

WINDOW_MS = 2500  # short, to see it end; long enough to be met within it on a slow machine
FAR_MS = 4_000_000_000_000  # 2096: never due while the tests run
# The store judges the window by the engine's clock (the database's, known to
# clock_uncertainty_max_ms); the tests' clock is this host's: the same clock.
CLOCK_SLACK_MS = 100
REPLY_TIMEOUT_S = 15.0


def _fired(http: httpx.Client, api: Api, task_id: str) -> Received:
    """The event of ``task_id``, once its row is gone (deleted after the
    broker's confirm, which writes its fired record: R5d)."""
    [event] = [e for e in collect_until(api.events, task_id, 20) if e.message_id == task_id]
    wait_for(
        lambda: http.get(f"/v1/tasks/{task_id}").status_code == 404,
        10,
        f"{task_id}: its row was not deleted after the confirm",
    )
    return event


def _refusal(answer: httpx.Response) -> dict[str, object]:
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert isinstance(error, dict)
    assert error["code"] == "already_fired", error
    return error


def test_a_task_with_a_window_is_refused_within_it_and_created_again_after_it(
    api: Api, http: httpx.Client
) -> None:
    task_id, other = uid("dedup"), uid("other")
    body = {"id": task_id, "delay_ms": 0, "payload": "once", "dedup_window_ms": WINDOW_MS}
    made = http.post("/v1/tasks", json=body)
    assert made.status_code == 201, made.text
    event = _fired(http, api, task_id)
    assert event.body == b"once"

    # Within the window: refused, saying when it fired; nothing written.
    error = _refusal(http.post("/v1/tasks", json={**body, "delay_ms": 60_000}))
    fired_ms = error["fired_ms"]
    assert isinstance(fired_ms, int)
    assert error["field"] == "id"
    assert task_id in str(error["message"]) and str(fired_ms) in str(error["message"])
    assert header_int(event, "x-fired-ms") <= fired_ms <= now_ms() + CLOCK_SLACK_MS
    assert http.get(f"/v1/tasks/{task_id}").status_code == 404
    # So is a batch holding it (all or nothing: the other task is not stored either).
    batch = {"tasks": [{"id": other, "at_ms": FAR_MS}, {"id": task_id, "at_ms": FAR_MS}]}
    in_batch = _refusal(http.post("/v1/tasks/batch", json=batch))
    assert (in_batch["field"], in_batch["fired_ms"]) == ("tasks[1].id", fired_ms)
    assert http.get(f"/v1/tasks/{other}").status_code == 404

    # After the window: created again. Each refused attempt meanwhile wrote nothing.
    again = {"id": task_id, "at_ms": FAR_MS, "dedup_window_ms": WINDOW_MS}
    created: list[httpx.Response] = []

    def create_again() -> bool:
        answer = http.post("/v1/tasks", json=again)
        if answer.status_code == 409:
            assert _refusal(answer)["fired_ms"] == fired_ms
            assert now_ms() <= fired_ms + WINDOW_MS + 5_000, "still refused long after the window"
            return False
        created.append(answer)
        return True

    wait_for(create_again, WINDOW_MS / 1000 + 15, "never created again", interval_s=0.1)
    [answer] = created
    assert (answer.status_code, answer.json()["outcome"]) == (201, "created"), answer.text
    assert now_ms() >= fired_ms + WINDOW_MS - CLOCK_SLACK_MS  # not before the window ended
    shown = http.get(f"/v1/tasks/{task_id}").json()
    assert (shown["due_ms"], shown["dedup_window_ms"]) == (FAR_MS, WINDOW_MS)


def test_a_task_without_a_window_can_be_created_again_as_soon_as_it_fired(
    api: Api, http: httpx.Client
) -> None:
    task_id = uid("nowin")
    made = http.post("/v1/tasks", json={"id": task_id, "delay_ms": 0, "payload": "first"})
    assert made.status_code == 201, made.text
    _fired(http, api, task_id)
    again = http.post("/v1/tasks", json={"id": task_id, "at_ms": FAR_MS})
    assert (again.status_code, again.json()["outcome"]) == (201, "created"), again.text


def test_a_window_of_zero_is_no_window(api: Api, http: httpx.Client) -> None:
    task_id = uid("zero")
    body = {"id": task_id, "delay_ms": 0, "dedup_window_ms": 0}
    assert http.post("/v1/tasks", json=body).status_code == 201
    _fired(http, api, task_id)
    assert http.post("/v1/tasks", json={**body, "delay_ms": 60_000}).status_code == 201


def test_the_library_raises_already_fired_and_writes_nothing(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks()
    task_id = uid("lib")
    hook.schedule(TaskSpec(task_id, delay_ms=0, dedup_window_ms=60_000))
    [event] = event_consumer.collect(1, 15)
    assert event.message_id == task_id
    wait_for(lambda: rows.row(task_id) is None, 10, "the fired row was not deleted")
    with pytest.raises(AlreadyFiredError) as raised:
        hook.schedule(TaskSpec(task_id, at_ms=FAR_MS))
    assert raised.value.task_id == task_id
    assert header_int(event, "x-fired-ms") <= raised.value.fired_ms <= now_ms() + CLOCK_SLACK_MS
    with pytest.raises(AlreadyFiredError) as in_batch:
        hook.schedule_many(
            [TaskSpec(uid("lib-other"), at_ms=FAR_MS), TaskSpec(task_id, at_ms=FAR_MS)]
        )
    assert in_batch.value.index == 1
    assert rows.row(task_id) is None


def test_the_dedup_window_setting_is_the_window_of_a_task_without_one(
    hooks: HookFactory, rows: RowReader, event_consumer: EventConsumer
) -> None:
    hook = hooks(dedup_window_ms=60_000)
    task_id = uid("dflt")
    assert hook.schedule(TaskSpec(task_id, delay_ms=0)).task.meta.dedup_window_ms == 60_000
    [event] = event_consumer.collect(1, 15)
    assert event.message_id == task_id
    wait_for(lambda: rows.row(task_id) is None, 10, "the fired row was not deleted")
    with pytest.raises(AlreadyFiredError):
        hook.schedule(TaskSpec(task_id, at_ms=FAR_MS))


def test_an_amqp_create_within_the_window_is_answered_already_fired(
    hooks: HookFactory,
    rows: RowReader,
    event_consumer: EventConsumer,
    consumers: Consumers,
    client: CommandClient,
    command_queue: str,
) -> None:
    hook = hooks()
    consumers.start(hook, command_queue)
    task_id = uid("cmd")
    hook.schedule(TaskSpec(task_id, delay_ms=0, dedup_window_ms=60_000))
    [event] = event_consumer.collect(1, 15)
    assert event.message_id == task_id
    wait_for(lambda: rows.row(task_id) is None, 10, "the fired row was not deleted")
    correlation_id = client.send("create", {"id": task_id, "at_ms": FAR_MS}, reply=True)
    assert correlation_id is not None
    reply = client.reply(correlation_id, REPLY_TIMEOUT_S).json()
    assert reply["ok"] is False
    assert reply["error"]["code"] == "already_fired"
    assert isinstance(reply["error"]["fired_ms"], int)
    assert rows.row(task_id) is None
