"""A series' life over HTTP against a real daemon (MariaDB, RabbitMQ): a paused
series does not fire and shows paused; resumed, it fires; a trigger's copy
and a backfill's copies arrive as events; a repeated backfill finds its
copies; a one-off task is not a series, an unknown id is not found.

"Does not fire" is proven with a sentinel, as in test_cancel.py: a one-off
due after the paused occurrence arrives, and the series' event never did.
The daemon is conftest.py's ``api`` (events consumed on ``fire.#``).
"""

from __future__ import annotations

import httpx
import pytest
from support.amqp import Received
from support.hook import collect_until, header_int
from support.http import Api
from support.names import uid
from support.waiting import now_ms, wait_for

from triggerhook.domain.series import PARKED_MS

# A routing key no queue is bound to: its events come back unroutable and are
# retried with back-off, so their tasks stay stored meanwhile.
HELD = "held.series"


def events_of(events: list[Received], task_id: str) -> list[Received]:
    return [e for e in events if e.message_id == task_id]


def end_series(http: httpx.Client, task_id: str) -> None:
    """Cancel the series (409 while an occurrence is being published: again)."""

    def cancelled() -> bool:
        return http.delete(f"/v1/tasks/{task_id}").status_code in (204, 404)

    wait_for(cancelled, 15, f"series {task_id} not cancelled")


def test_a_paused_series_does_not_fire_and_resumed_it_does(api: Api, http: httpx.Client) -> None:
    task_id, sentinel = uid("paused"), uid("sentinel")
    first_ms = now_ms() + 1500
    body = {"id": task_id, "at_ms": first_ms, "every": "PT1S", "payload": "tick"}
    assert http.post("/v1/tasks", json=body).status_code == 201

    paused = http.post(f"/v1/tasks/{task_id}/pause")
    assert (paused.status_code, paused.json()) == (200, {"id": task_id, "outcome": "paused"})
    shown = http.get(f"/v1/tasks/{task_id}").json()
    assert (shown["paused"], shown["resume_ms"], shown["due_ms"]) == (True, first_ms, PARKED_MS)
    assert http.post(f"/v1/tasks/{task_id}/pause").json()["outcome"] == "paused"  # a retry

    sentinel_body = {"id": sentinel, "at_ms": first_ms + 1500}
    assert http.post("/v1/tasks", json=sentinel_body).status_code == 201
    received = collect_until(api.events, sentinel, 15)
    assert events_of(received, task_id) == []  # its first occurrence passed unfired

    resumed = http.post(f"/v1/tasks/{task_id}/resume", json={})
    assert (resumed.status_code, resumed.json()) == (200, {"id": task_id, "outcome": "resumed"})
    assert "paused" not in http.get(f"/v1/tasks/{task_id}").json()
    # catch_up one (the default): the occurrence missed while paused fires now, once.
    fired = collect_until(api.events, task_id, 15)[-1]
    assert (header_int(fired, "x-occurrence"), header_int(fired, "x-due-ms")) == (1, first_ms)
    assert fired.body == b"tick"
    end_series(http, task_id)


def test_trigger_fires_a_copy_now_and_leaves_the_schedule(api: Api, http: httpx.Client) -> None:
    task_id = uid("trig")
    first_ms = now_ms() + 3_600_000
    body = {"id": task_id, "at_ms": first_ms, "every": "PT1H", "payload": "extra"}
    assert http.post("/v1/tasks", json=body).status_code == 201
    before = now_ms()

    triggered = http.post(f"/v1/tasks/{task_id}/trigger")
    assert triggered.status_code == 200, triggered.text
    answer = triggered.json()
    assert (answer["id"], answer["outcome"]) == (task_id, "triggered")
    [copy] = answer["copies"]
    assert copy["outcome"] == "created" and copy["id"] == f"{task_id}:{copy['due_ms']}"
    assert before - 5_000 <= copy["due_ms"] <= now_ms() + 5_000  # the database's now
    event = collect_until(api.events, copy["id"], 15)[-1]
    assert event.body == b"extra"
    assert header_int(event, "x-due-ms") == copy["due_ms"]
    # The series itself is untouched: still due at its first occurrence.
    assert http.get(f"/v1/tasks/{task_id}").json()["due_ms"] == first_ms
    assert http.delete(f"/v1/tasks/{task_id}").status_code == 204


def test_backfill_fires_each_past_occurrence(api: Api, http: httpx.Client) -> None:
    task_id = uid("fill")
    end_ms = now_ms() - 1000  # not after the daemon's now
    # Its phase: whole minutes from end_ms, so the range holds exactly three.
    body = {"id": task_id, "at_ms": end_ms + 3_600_000, "every": "PT1M", "payload": "past"}
    assert http.post("/v1/tasks", json=body).status_code == 201
    span = {"from_ms": end_ms - 180_000, "to_ms": end_ms}
    dues = [end_ms - 180_000, end_ms - 120_000, end_ms - 60_000]

    done = http.post(f"/v1/tasks/{task_id}/backfill", json=span)
    assert done.status_code == 200, done.text
    ids = [f"{task_id}:{due}" for due in dues]
    assert done.json() == {
        "id": task_id,
        "outcome": "backfilled",
        "copies": [
            {"id": copy_id, "due_ms": due, "outcome": "created"}
            for copy_id, due in zip(ids, dues, strict=True)
        ],
    }
    received: list[Received] = []
    for copy_id in ids:
        received += collect_until(api.events, copy_id, 15)
    fired = {e.message_id: header_int(e, "x-due-ms") for e in received if e.message_id in ids}
    assert fired == dict(zip(ids, dues, strict=True))
    assert http.delete(f"/v1/tasks/{task_id}").status_code == 204


def test_a_repeated_backfill_finds_its_copies(http: httpx.Client) -> None:
    task_id = uid("refill")
    end_ms = now_ms() - 1000
    body = {"id": task_id, "at_ms": end_ms + 3_600_000, "every": "PT1M", "routing_key": HELD}
    assert http.post("/v1/tasks", json=body).status_code == 201
    span = {"from_ms": end_ms - 120_000, "to_ms": end_ms}
    first = http.post(f"/v1/tasks/{task_id}/backfill", json=span).json()
    assert [c["outcome"] for c in first["copies"]] == ["created", "created"]
    # Unroutable, the copies are still stored (retried): found, nothing written twice.
    again = http.post(f"/v1/tasks/{task_id}/backfill", json=span).json()
    assert again["copies"] == [{**c, "outcome": "exists"} for c in first["copies"]]
    for copy in first["copies"]:
        assert http.get(f"/v1/tasks/{copy['id']}").json()["due_ms"] == copy["due_ms"]


@pytest.mark.parametrize("action", ["pause", "resume", "trigger", "backfill"])
def test_a_one_off_is_409_not_a_series_and_an_unknown_id_404(
    http: httpx.Client, action: str
) -> None:
    one_off, unknown = uid("once"), uid("nobody")
    assert http.post("/v1/tasks", json={"id": one_off, "delay_ms": 3_600_000}).status_code == 201
    body = {"from_ms": now_ms() - 60_000, "to_ms": now_ms() - 1000}
    refused = http.post(f"/v1/tasks/{one_off}/{action}", json=body if action == "backfill" else {})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "not_a_series"
    missing = http.post(f"/v1/tasks/{unknown}/{action}", json=body if action == "backfill" else {})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert http.get(f"/v1/tasks/{one_off}").json()["due_ms"] > now_ms()  # unchanged
    assert http.delete(f"/v1/tasks/{one_off}").status_code == 204


def test_a_bad_backfill_is_422_naming_the_field_and_writes_nothing(http: httpx.Client) -> None:
    task_id = uid("badfill")
    body = {"id": task_id, "delay_ms": 3_600_000, "every": "PT1M"}
    assert http.post("/v1/tasks", json=body).status_code == 201
    for span, field in (
        ({"from_ms": 0}, "to_ms"),
        ({"from_ms": 0, "to_ms": now_ms() + 60_000}, "to_ms"),  # after now
        ({"from_ms": 0, "to_ms": now_ms() - 1000}, "to_ms"),  # over 1,000 occurrences
        ({"from_ms": "0", "to_ms": 1}, "from_ms"),
        ({"from_ms": 0, "to_ms": 1, "until": 5}, "until"),
    ):
        refused = http.post(f"/v1/tasks/{task_id}/backfill", json=span)
        assert refused.status_code == 422, (span, refused.text)
        assert refused.json()["error"]["field"] == field, span
    listed = http.get("/v1/tasks", params={"prefix": f"{task_id}:"}).json()
    assert listed["tasks"] == []  # no copy written
    assert http.delete(f"/v1/tasks/{task_id}").status_code == 204
