"""A series' life over HTTP (``triggerhook.api.http_series``): pause, resume,
trigger and backfill through the daemon's own aiohttp application, over the
in-memory store with a clock that stands still (as tests/unit/test_http_api.py).

Each test pins the answer (status, JSON body, error code and ``field``) and
what the store holds afterwards; bad input writes nothing; the blocking
library calls never hold up the event loop. The same against MariaDB and
RabbitMQ, with events: tests/integration/test_series_http.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from support.fakes import FakeStore
from support.served import NOW_MS, Client, Served, served
from support.waiting import wait_until
from triggerhook_client.answer_fields import COPIED, COPY, SERIES_DONE, required

from triggerhook.domain.series import MAX_BACKFILL, MAX_SERIES_ID_FOR_COPIES, PARKED_MS
from triggerhook.domain.task import SeriesResult
from triggerhook.errors import StoreUnavailable
from triggerhook.settings import Settings

MINUTE_MS = 60_000
FIRST_MS = NOW_MS + 10 * MINUTE_MS  # beyond arm_ahead_ms: never armed meanwhile
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def daemon() -> Iterator[Served]:
    with served(Settings(instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1)) as made:
        yield made


async def answer(response: Any) -> tuple[int, Any]:
    async with response as r:
        assert r.content_type == "application/json", (r.status, await r.text())
        return r.status, await r.json()


def error(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


async def create(client: Client, task_id: str, **fields: object) -> None:
    body = {"id": task_id, "at_ms": FIRST_MS, "every": "PT1M", "payload": "p", **fields}
    status, _ = await answer(client.post("/v1/tasks", json=body))
    assert status == 201


async def shown(client: Client, task_id: str) -> dict[str, Any]:
    status, task = await answer(client.get(f"/v1/tasks/{task_id}"))
    assert status == 200
    assert isinstance(task, dict)
    return task


def due_of(store: FakeStore, task_id: str) -> int:
    stored = store.row(task_id)
    assert stored is not None, task_id
    return stored.task.due_ms


def copy(task_id: str, due_ms: int, outcome: str = "created") -> dict[str, object]:
    return {"id": f"{task_id}:{due_ms}", "due_ms": due_ms, "outcome": outcome}


def fields_of(table: Sequence[Any], data: dict[str, Any]) -> bool:
    """``data`` has every required field of ``table``, and none other."""
    names = {field.name for field in table}
    return set(required(table)) <= set(data) <= names


# -- pause and resume -------------------------------------------------------------------------


def test_a_paused_series_shows_paused_and_resumes_at_its_next_occurrence(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "s")
        paused = await answer(client.post("/v1/tasks/s/pause"))
        assert paused == (200, {"id": "s", "outcome": "paused"})
        assert fields_of(SERIES_DONE, paused[1])
        task = await shown(client, "s")
        assert (task["paused"], task["resume_ms"]) == (True, FIRST_MS)
        assert due_of(daemon.store, "s") == PARKED_MS  # no arming range reaches it
        # Again: still paused, nothing else changes (a safe retry).
        assert await answer(client.post("/v1/tasks/s/pause")) == (
            200,
            {"id": "s", "outcome": "paused"},
        )
        resumed = await answer(client.post("/v1/tasks/s/resume"))
        assert resumed == (200, {"id": "s", "outcome": "resumed"})
        task = await shown(client, "s")
        assert "paused" not in task and "resume_ms" not in task
        assert task["due_ms"] == FIRST_MS
        assert await answer(client.post("/v1/tasks/s/resume")) == (
            200,
            {"id": "s", "outcome": "resumed"},
        )

    daemon.serve(scenario)
    assert due_of(daemon.store, "s") == FIRST_MS


def test_a_series_being_published_is_paused_after_this_occurrence(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "busy", at_ms=NOW_MS + 50)  # within arm_ahead_ms: armed
        # The publisher never confirms: the occurrence stays being published.
        assert await asyncio.to_thread(wait_until, lambda: daemon.store.is_armed("busy"), 10)
        assert await answer(client.post("/v1/tasks/busy/pause")) == (
            200,
            {"id": "busy", "outcome": "paused_after_this"},
        )
        task = await shown(client, "busy")
        assert (task["state"], task["paused"]) == ("firing", True)
        assert "resume_ms" not in task  # known once this occurrence is confirmed

    daemon.serve(scenario)


def test_a_series_whose_end_passed_while_paused_ends_when_resumed(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        # catch_up skip: a missed occurrence does not fire late (one would: resumed).
        await create(client, "short", until_ms=FIRST_MS, catch_up="skip")
        assert (await answer(client.post("/v1/tasks/short/pause")))[0] == 200
        daemon.clock.advance(FIRST_MS + MINUTE_MS - NOW_MS)  # its one occurrence missed
        assert await answer(client.post("/v1/tasks/short/resume")) == (
            200,
            {"id": "short", "outcome": "ended"},
        )
        assert (await answer(client.get("/v1/tasks/short")))[0] == 404

    daemon.serve(scenario)
    assert "short" not in daemon.store.ids()


@pytest.mark.parametrize("action", ["pause", "resume", "trigger"])
def test_a_one_off_is_not_a_series_and_an_unknown_id_not_found(daemon: Served, action: str) -> None:
    async def scenario(client: Client) -> None:
        made = await answer(client.post("/v1/tasks", json={"id": "once", "at_ms": FIRST_MS}))
        assert made[0] == 201
        assert await answer(client.post(f"/v1/tasks/once/{action}")) == (
            409,
            error("not_a_series", "task 'once' is not a series (no every or cron)"),
        )
        assert await answer(client.post(f"/v1/tasks/nobody/{action}")) == (
            404,
            error("not_found", "task 'nobody' is unknown or has fired"),
        )
        status, refused = await answer(client.post(f"/v1/tasks/bad%20id/{action}"))
        assert (status, refused["error"]["code"], refused["error"]["field"]) == (
            422,
            "invalid",
            "id",
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"once"}
    assert due_of(daemon.store, "once") == FIRST_MS


@pytest.mark.parametrize("action", ["pause", "resume", "trigger"])
def test_no_body_or_an_empty_object_is_taken_and_any_field_refused(
    daemon: Served, action: str
) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "s")
        refused = await answer(client.post(f"/v1/tasks/s/{action}", json={"from_ms": 1}))
        assert refused == (422, error("invalid", "unknown field (allowed: )", "from_ms"))
        assert await answer(client.post(f"/v1/tasks/s/{action}", json=[])) == (
            422,
            error("invalid", "must be a JSON object", "body"),
        )
        assert await answer(
            client.post(f"/v1/tasks/s/{action}", data=b"{}", headers={"Content-Type": "text/plain"})
        ) == (415, error("unsupported_media_type", "Content-Type must be application/json"))
        assert due_of(daemon.store, "s") == FIRST_MS  # none of those changed anything
        assert daemon.store.ids() == {"s"}
        empty = await answer(client.post(f"/v1/tasks/s/{action}", data=b"{}", headers=JSON))
        assert empty[0] == 200
        assert (await answer(client.post(f"/v1/tasks/s/{action}")))[0] == 200  # no body

    daemon.serve(scenario)


def test_a_database_down_is_503_and_changes_nothing(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "s")
        daemon.store.fail_next("pause", StoreUnavailable("db1:3306 refused"))
        async with client.post("/v1/tasks/s/pause") as response:
            assert response.status == 503
            assert response.headers["Retry-After"] == "1"
            body = await response.json()
        assert body == error("unavailable", "database unavailable; retry")
        assert "db1" not in str(body)  # the driver's text goes to the log only
        assert due_of(daemon.store, "s") == FIRST_MS
        daemon.store.fail_next("resume", StoreUnavailable("down"))
        assert (await answer(client.post("/v1/tasks/s/resume")))[0] == 503

    daemon.serve(scenario)


def test_a_blocked_store_call_leaves_the_event_loop_serving(
    daemon: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    pause = daemon.store.pause

    def slow_pause(task_ids: Sequence[str]) -> list[SeriesResult]:
        entered.set()
        assert release.wait(10)
        return pause(task_ids)

    monkeypatch.setattr(daemon.store, "pause", slow_pause)

    async def scenario(client: Client) -> None:
        await create(client, "s")
        pausing = asyncio.ensure_future(answer(client.post("/v1/tasks/s/pause")))
        assert await asyncio.to_thread(entered.wait, 10)
        # The pause holds a pool thread; the loop still answers meanwhile.
        assert await answer(client.get("/healthz")) == (200, {"status": "ok"})
        assert not pausing.done()
        release.set()
        assert await pausing == (200, {"id": "s", "outcome": "paused"})

    daemon.serve(scenario)


# -- trigger ----------------------------------------------------------------------------------


def test_trigger_writes_one_copy_due_now_and_leaves_the_schedule(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "s", tags=["t"])
        status, triggered = await answer(client.post("/v1/tasks/s/trigger"))
        assert (status, triggered) == (
            200,
            {"id": "s", "outcome": "triggered", "copies": [copy("s", NOW_MS)]},
        )
        assert fields_of(COPIED, triggered)
        assert fields_of(COPY, triggered["copies"][0])
        one_off = await shown(client, f"s:{NOW_MS}")
        assert (one_off["payload"], one_off["tags"], one_off["late"]) == ("p", ["t"], "fire")
        assert "every" not in one_off  # a one-off task
        # The same instant again (the clock stands still): its copy exists.
        assert await answer(client.post("/v1/tasks/s/trigger", json={})) == (
            200,
            {"id": "s", "outcome": "triggered", "copies": [copy("s", NOW_MS, "exists")]},
        )
        daemon.clock.advance(5)
        status, later = await answer(client.post("/v1/tasks/s/trigger"))
        assert (status, later["copies"]) == (200, [copy("s", NOW_MS + 5)])

    daemon.serve(scenario)
    assert due_of(daemon.store, "s") == FIRST_MS  # the series itself is unchanged


def test_trigger_refuses_a_series_whose_copies_ids_would_be_too_long(daemon: Served) -> None:
    long_id = "s" * (MAX_SERIES_ID_FOR_COPIES + 1)

    async def scenario(client: Client) -> None:
        await create(client, long_id)
        status, body = await answer(client.post(f"/v1/tasks/{long_id}/trigger"))
        assert (status, body["error"]["code"], body["error"]["field"]) == (422, "invalid", "id")
        assert str(MAX_SERIES_ID_FOR_COPIES) in body["error"]["message"]

    daemon.serve(scenario)
    assert daemon.store.ids() == {long_id}


def test_a_copys_id_holding_other_content_is_a_409_conflict(daemon: Served) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "s")
        taken = {"id": f"s:{NOW_MS}", "at_ms": FIRST_MS, "payload": "other"}
        assert (await answer(client.post("/v1/tasks", json=taken)))[0] == 201
        assert await answer(client.post("/v1/tasks/s/trigger")) == (
            409,
            error("conflict", f"task 's:{NOW_MS}' already exists with different content", "id"),
        )

    daemon.serve(scenario)
    assert due_of(daemon.store, f"s:{NOW_MS}") == FIRST_MS


# -- backfill ---------------------------------------------------------------------------------


def test_backfill_writes_each_occurrence_once_and_a_repeat_finds_them(daemon: Served) -> None:
    span = {"from_ms": NOW_MS - 5 * MINUTE_MS, "to_ms": NOW_MS}
    # The series' occurrences keep its phase: FIRST_MS less whole minutes.
    dues = [NOW_MS - n * MINUTE_MS for n in range(5, 0, -1)]

    async def scenario(client: Client) -> None:
        await create(client, "s")
        done = await answer(client.post("/v1/tasks/s/backfill", json=span))
        assert done == (
            200,
            {"id": "s", "outcome": "backfilled", "copies": [copy("s", due) for due in dues]},
        )
        again = await answer(client.post("/v1/tasks/s/backfill", json=span))
        assert again[1]["copies"] == [copy("s", due, "exists") for due in dues]
        # A range with no occurrence: nothing to write.
        empty = {"from_ms": NOW_MS - MINUTE_MS + 1, "to_ms": NOW_MS - 1}
        assert await answer(client.post("/v1/tasks/s/backfill", json=empty)) == (
            200,
            {"id": "s", "outcome": "backfilled", "copies": []},
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"s", *(f"s:{due}" for due in dues)}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"to_ms": NOW_MS}, "from_ms", "is required"),
        ({"from_ms": NOW_MS - 1}, "to_ms", "is required"),
        ({"from_ms": 1.5, "to_ms": NOW_MS}, "from_ms", "must be a whole number"),
        ({"from_ms": "1", "to_ms": NOW_MS}, "from_ms", "must be a whole number"),
        ({"from_ms": -1, "to_ms": NOW_MS}, "from_ms", "must be a whole number"),
        ({"from_ms": 0, "to_ms": NOW_MS, "every": "PT1M"}, "every", "unknown field"),
        ({"from_ms": NOW_MS, "to_ms": NOW_MS}, "to_ms", "must be after from_ms"),
        ({"from_ms": NOW_MS - 1, "to_ms": NOW_MS + 1}, "to_ms", "is after now"),
        ({"from_ms": 0, "to_ms": NOW_MS}, "to_ms", f"more than {MAX_BACKFILL} occurrences"),
    ],
    ids=str,
)
def test_a_bad_backfill_is_422_naming_the_field_and_writes_nothing(
    daemon: Served, body: dict[str, object], field: str, message: str
) -> None:
    async def scenario(client: Client) -> None:
        await create(client, "s")
        status, refused = await answer(client.post("/v1/tasks/s/backfill", json=body))
        assert (status, refused["error"]["code"], refused["error"]["field"]) == (
            422,
            "invalid",
            field,
        )
        assert message in refused["error"]["message"]

    daemon.serve(scenario)
    assert daemon.store.ids() == {"s"}


def test_backfill_of_a_one_off_an_unknown_id_and_without_a_body(daemon: Served) -> None:
    span = {"from_ms": NOW_MS - MINUTE_MS, "to_ms": NOW_MS}

    async def scenario(client: Client) -> None:
        made = await answer(client.post("/v1/tasks", json={"id": "once", "at_ms": FIRST_MS}))
        assert made[0] == 201
        assert await answer(client.post("/v1/tasks/once/backfill", json=span)) == (
            409,
            error("not_a_series", "task 'once' is not a series (no every or cron)"),
        )
        assert (await answer(client.post("/v1/tasks/nobody/backfill", json=span)))[0] == 404
        # The range is its body: none at all is refused as any non-JSON body is.
        assert (await answer(client.post("/v1/tasks/once/backfill")))[0] == 415

    daemon.serve(scenario)
    assert daemon.store.ids() == {"once"}
