"""A batch create's answer read per task (``schedule_batch``: each task's id
and outcome, in order) against scripted answers, no network: the parsing
(:mod:`triggerhook_client.answers`), and both clients over it. Against the
real daemon: tests/integration/test_client.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from triggerhook_client import (
    ApiError,
    AsyncClient,
    BatchScheduled,
    Client,
    Conflict,
    TaskRequest,
    answers,
)
from triggerhook_client.calls import BaseClient

URL = "http://daemon.test"
AT_MS = 4_000_000_000_000


def answer(body: object, status: int = 201) -> httpx.Response:
    return httpx.Response(status, json=body)


# -- the parsing ------------------------------------------------------------------------------


def test_each_task_reads_its_outcome_in_order() -> None:
    read = answers.batch(
        answer(
            {
                "ids": ["a", "b", "c", "d"],
                "outcomes": ["created", "exists", "replaced", "kept"],
            }
        )
    )
    assert read == [
        BatchScheduled("a", True, "created"),
        BatchScheduled("b", False, "exists"),
        BatchScheduled("c", False, "replaced"),
        BatchScheduled("d", False, "kept"),
    ]


def test_an_outcome_a_newer_daemon_adds_is_given_as_it_comes() -> None:
    read = answers.batch(answer({"ids": ["a", "b"], "outcomes": ["merged", "created"]}))
    assert read == [BatchScheduled("a", False, "merged"), BatchScheduled("b", True, "created")]


def test_an_older_daemon_s_batch_without_outcomes_reads_as_created() -> None:
    # As schedule reads a create's answer that names no outcome: by its status, 201.
    read = answers.batch(answer({"ids": ["a", "b"]}))
    assert read == [BatchScheduled("a", True, "created"), BatchScheduled("b", True, "created")]
    assert answers.batch(answer({"ids": []})) == []


def test_the_ids_are_the_batch_s_ids() -> None:
    body = {"ids": ["a", "b"], "outcomes": ["kept", "created"]}
    assert answers.ids(answer(body)) == ["a", "b"]
    assert answers.ids(answer({"ids": ["a", "b"]})) == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ({"ids": ["a", "b"], "outcomes": ["created"]}, "outcomes is not one outcome per id"),
        ({"ids": ["a"], "outcomes": ["created", "kept"]}, "outcomes is not one outcome per id"),
        ({"ids": ["a"], "outcomes": "created"}, "outcomes is not a list of strings"),
        ({"ids": ["a"], "outcomes": [None]}, "outcomes is not a list of strings"),
        ({"ids": "a", "outcomes": ["created"]}, "ids is not a list of strings"),
        ({"outcomes": ["created"]}, "ids is not a list of strings"),
    ],
)
def test_a_batch_answer_that_is_not_the_api_s_is_a_bad_response(body: Any, what: str) -> None:
    for read in (answers.batch, answers.ids):  # schedule_many reads the same answer
        with pytest.raises(ApiError) as caught:
            read(answer(body))
        assert (caught.value.status, caught.value.code) == (201, "bad_response")
        assert str(caught.value).endswith(f"unexpected answer: {what}")


def test_the_batch_call_is_schedule_many_s_request() -> None:
    tasks = [TaskRequest("a", at_ms=AT_MS, on_conflict="keep"), TaskRequest("b", at_ms=AT_MS)]
    batch, many = BaseClient._schedule_batch_call(tasks), BaseClient._schedule_many_call(tasks)
    assert (batch.method, batch.path, batch.ok) == (many.method, many.path, many.ok)
    assert (batch.body, batch.rename, batch.retry) == (many.body, many.rename, many.retry)
    assert batch.body is not None
    assert json.loads(batch.body) == {
        "tasks": [{"id": "a", "at_ms": AT_MS, "on_conflict": "keep"}, {"id": "b", "at_ms": AT_MS}]
    }


# -- both clients -----------------------------------------------------------------------------


class Script:
    """Answers every request with ``answers`` in turn; records the requests."""

    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        given = self.responses.pop(0)
        return httpx.Response(given.status_code, headers=given.headers, content=given.content)


TASKS = [
    TaskRequest("a", at_ms=AT_MS, on_conflict="keep"),
    TaskRequest("b", at_ms=AT_MS, on_conflict="replace"),
]
KEPT_REPLACED = {"ids": ["a", "b"], "outcomes": ["kept", "replaced"]}
READ = [BatchScheduled("a", False, "kept"), BatchScheduled("b", False, "replaced")]


def sync_batch(script: Script, tasks: list[TaskRequest]) -> list[BatchScheduled]:
    with Client(URL, transport=httpx.MockTransport(script), backoff_s=0) as client:
        return client.schedule_batch(tasks)


def async_batch(script: Script, tasks: list[TaskRequest]) -> list[BatchScheduled]:
    async def run() -> list[BatchScheduled]:
        transport = httpx.MockTransport(script)
        async with AsyncClient(URL, transport=transport, backoff_s=0) as client:
            return await client.schedule_batch(tasks)

    return asyncio.run(run())


BOTH = pytest.mark.parametrize("batch", [sync_batch, async_batch], ids=["sync", "async"])


@BOTH
def test_schedule_batch_answers_each_task_s_outcome(batch: Any) -> None:
    script = Script(answer(KEPT_REPLACED))
    assert batch(script, TASKS) == READ
    [sent] = script.requests
    assert (sent.method, sent.url.path) == ("POST", "/v1/tasks/batch")
    assert [t["on_conflict"] for t in json.loads(sent.content)["tasks"]] == ["keep", "replace"]


@BOTH
def test_schedule_batch_of_no_tasks_sends_nothing(batch: Any) -> None:
    script = Script()
    assert batch(script, []) == []
    assert script.requests == []


@BOTH
def test_schedule_batch_is_retried_as_schedule_many_is(batch: Any) -> None:
    unavailable = answer({"error": {"code": "unavailable", "message": "down"}}, 503)
    script = Script(unavailable, answer(KEPT_REPLACED))
    assert batch(script, TASKS) == READ
    assert len(script.requests) == 2
    assert script.requests[0].content == script.requests[1].content  # the same bytes


@BOTH
def test_schedule_batch_names_the_task_of_an_error(batch: Any) -> None:
    refused = {"error": {"code": "conflict", "message": "other content", "field": "tasks[1].id"}}
    with pytest.raises(Conflict) as caught:
        batch(Script(answer(refused, 409)), TASKS)
    assert caught.value.field == "tasks[1].id"
