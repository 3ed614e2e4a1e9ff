"""The HTTP API of a real ``triggerhook run`` daemon (real MariaDB and RabbitMQ).

One daemon serves the whole module (its own database and exchange); each test
uses its own task ids. Events are read by ``api.events`` (routing keys
``fire.#``); tasks routed elsewhere stay armed, see support/http.py.
"""

from __future__ import annotations

import base64
import json
import logging
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx
import pytest
from support.daemon import TaskTable
from support.hook import collect_until, header_int
from support.http import ROUTED, Api, api_daemon
from support.names import uid
from support.waiting import now_ms, wait_for

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
FAR_S = 4_000_000_000  # epoch seconds in 2096: never fires during the tests
MAX_BATCH = 50


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        http_max_body_bytes=MAX_BODY,
        http_max_batch_tasks=MAX_BATCH,
        max_payload_bytes=1024,
        default_routing_key=ROUTED,
    ) as served:
        yield served
        # The daemon took every request of the module without a traceback.
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


@pytest.fixture
def table(api: Api) -> Iterator[TaskTable]:
    with TaskTable(api.database_url) as reader:
        yield reader


def error_of(response: httpx.Response) -> dict[str, str]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    error = response.json()["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    return dict(error)


def rows_with_prefix(table: TaskTable, prefix: str) -> list[str]:
    return [r[0] for r in table.query("SELECT id FROM th_tasks WHERE id LIKE %s", (prefix + "%",))]


# -- create -------------------------------------------------------------------------


def test_create_answers_201_then_200_for_the_same_content_and_409_for_other(
    http: httpx.Client,
) -> None:
    task_id = uid("c")
    body = {"id": task_id, "at": 4_000_000_000.25, "payload": "hello"}
    first = http.post("/v1/tasks", json=body)
    assert first.status_code == 201, first.text
    # at as a number (epoch seconds): deprecated, still taken; at in answers likewise.
    due = {"id": task_id, "due_ms": 4_000_000_000_250, "at": 4_000_000_000.25}
    assert first.json() == {**due, "outcome": "created"}
    again = http.post("/v1/tasks", json=body)
    assert again.status_code == 200, again.text
    assert again.json() == {**due, "outcome": "exists"}
    other = http.post("/v1/tasks", json={**body, "payload": "changed"})
    assert other.status_code == 409
    assert error_of(other)["code"] == "conflict"

    got = http.get(f"/v1/tasks/{task_id}")
    assert got.status_code == 200
    assert got.json() == {
        "id": task_id,
        "due_ms": 4_000_000_000_250,
        "at": 4_000_000_000.25,
        "routing_key": ROUTED,
        "state": "scheduled",
        "throttled": False,
        "payload": "hello",
    }
    binary_id = uid("bin")
    body_b64 = {"id": binary_id, "at": 4e9, "payload_b64": base64.b64encode(b"\xff\x00").decode()}
    assert http.post("/v1/tasks", json=body_b64).status_code == 201
    assert http.get(f"/v1/tasks/{binary_id}").json()["payload_b64"] == body_b64["payload_b64"]


def test_create_without_id_gets_a_new_id_and_rfc3339_times_are_parsed(
    http: httpx.Client,
) -> None:
    first = http.post("/v1/tasks", json={"at": "2099-01-02T03:04:05.678+01:00"})
    second = http.post("/v1/tasks", json={"at": "2099-01-02T03:04:05.678+01:00"})
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]
    expected = datetime(2099, 1, 2, 2, 4, 5, 678000, tzinfo=UTC).timestamp()
    assert first.json()["at"] == pytest.approx(expected, abs=1e-6)


def test_sub_millisecond_times_round_up_never_early(http: httpx.Client) -> None:
    response = http.post("/v1/tasks", json={"id": uid("r"), "at": 4_000_000_000.0001})
    assert response.status_code == 201
    assert response.json()["at"] == 4_000_000_000.001


def test_at_ms_and_delay_ms_are_the_due_time_in_milliseconds(http: httpx.Client) -> None:
    task_id = uid("ms")
    created = http.post("/v1/tasks", json={"id": task_id, "at_ms": 4_000_000_000_001})
    assert created.status_code == 201, created.text
    due = {"id": task_id, "due_ms": 4_000_000_000_001, "at": 4_000_000_000.001}
    assert created.json() == {**due, "outcome": "created"}
    assert http.get(f"/v1/tasks/{task_id}").json()["due_ms"] == 4_000_000_000_001
    start = now_ms()
    delayed = http.post("/v1/tasks", json={"id": uid("dms"), "delay_ms": 3_600_000})
    assert delayed.status_code == 201, delayed.text
    assert start + 3_600_000 <= delayed.json()["due_ms"] <= now_ms() + 3_600_000 + 1
    naive = http.post("/v1/tasks", json={"id": uid("naive"), "at": "2096-10-02T07:06:40.001"})
    assert naive.json()["due_ms"] == 4_000_000_000_001  # no offset: UTC
    start = now_ms()
    moved = http.patch(f"/v1/tasks/{task_id}", json={"delay_ms": 7_200_000})
    assert moved.status_code == 200, moved.text
    assert start + 7_200_000 <= moved.json()["due_ms"] <= now_ms() + 7_200_000 + 1
    again = http.patch(f"/v1/tasks/{task_id}", json={"at_ms": 4_000_000_000_002})
    assert again.json() == {"id": task_id, "due_ms": 4_000_000_000_002, "at": 4_000_000_000.002}


@pytest.mark.parametrize(
    ("when", "field", "given"),
    [
        ({"at_ms": 4_000_000_000_000, "delay_ms": 5}, "at_ms", "at_ms, delay_ms"),
        ({"at": "2096-10-02T07:06:40Z", "at_ms": 4_000_000_000_000}, "at", "at, at_ms"),
        ({"delay_ms": 5, "delay": 5}, "delay_ms", "delay_ms, delay"),
    ],
)
def test_more_than_one_due_time_is_refused_naming_them(
    http: httpx.Client, when: dict[str, object], field: str, given: str
) -> None:
    task_id = uid("two")
    message = f"give exactly one of at, at_ms and delay_ms (given: {given})"
    created = http.post("/v1/tasks", json={"id": task_id, **when})
    assert created.status_code == 422, created.text
    assert error_of(created) == {"code": "invalid", "message": message, "field": field}
    assert http.post("/v1/tasks", json={"id": task_id, "at_ms": 4e12}).status_code == 201
    moved = http.patch(f"/v1/tasks/{task_id}", json=when)
    assert moved.status_code == 422, moved.text
    assert error_of(moved) == {"code": "invalid", "message": message, "field": field}
    assert http.get(f"/v1/tasks/{task_id}").json()["due_ms"] == 4_000_000_000_000


def test_created_tasks_fire_with_their_payload_and_routing_key(
    api: Api, http: httpx.Client
) -> None:
    start = now_ms()
    text_id, bin_id, ms_id = uid("text"), uid("bin"), uid("ms")
    raw = b"\x00\xffbinary"
    assert http.post("/v1/tasks", json={"id": text_id, "delay": 0.3, "payload": "héllo"}).is_success
    by_ms = http.post("/v1/tasks", json={"id": ms_id, "delay_ms": 350})
    assert by_ms.status_code == 201, by_ms.text
    created = http.post(
        "/v1/tasks",
        json={
            "id": bin_id,
            "at": (start + 400) / 1000,
            "routing_key": "fire.custom",
            "payload_b64": base64.b64encode(raw).decode(),
        },
    )
    assert created.status_code == 201, created.text

    events = {e.message_id: e for e in collect_until(api.events, bin_id, timeout_s=15)}
    assert events[text_id].body == "héllo".encode()
    assert events[text_id].routing_key == ROUTED
    assert header_int(events[text_id], "x-due-ms") >= start + 300
    assert header_int(events[ms_id], "x-due-ms") == by_ms.json()["due_ms"] >= start + 350
    assert events[bin_id].body == raw
    assert events[bin_id].routing_key == "fire.custom"
    assert header_int(events[bin_id], "x-due-ms") == start + 400
    assert header_int(events[bin_id], "x-fired-ms") >= start + 400
    wait_for(lambda: http.get(f"/v1/tasks/{bin_id}").status_code == 404, 10)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "at"),
        ({"at": 4e9, "delay": 5}, "at"),
        ({"at": True}, "at"),
        ({"at": "yesterday"}, "at"),
        ({"at": 253_402_300_800}, "at"),  # year 10000
        ({"at": 1e308}, "at"),
        ({"at": -1e308, "delay": 1}, "at"),
        ({"at": 4e9, "id": "batch"}, "id"),
        ({"at": [1]}, "at"),
        ({"delay": -1}, "delay"),
        ({"delay": "5"}, "delay"),
        ({"delay": 1e300}, "delay"),
        ({"at": 4e9, "id": "bad id!"}, "id"),
        ({"at": 4e9, "id": "x" * 65}, "id"),
        ({"at": 4e9, "id": 7}, "id"),
        ({"at": 4e9, "routing_key": "bad key"}, "routing_key"),
        ({"at": 4e9, "routing_key": ""}, "routing_key"),
        ({"at": 4e9, "payload": 5}, "payload"),
        ({"at": 4e9, "payload": "x" * 1025}, "payload"),
        ({"at": 4e9, "payload": "a", "payload_b64": "YQ=="}, "payload"),
        ({"at": 4e9, "payload_b64": "not base64!"}, "payload_b64"),
        ({"at": 4e9, "colour": "red"}, "colour"),
        ([{"at": 4e9}], "body"),
        ("text", "body"),
    ],
)
def test_invalid_create_bodies_get_422_naming_the_field_and_write_nothing(
    http: httpx.Client, table: TaskTable, body: object, field: str
) -> None:
    before = table.count()
    response = http.post("/v1/tasks", json=body)
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["field"] == field
    assert table.count() == before


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"at": NaN}', b'{"at": Infinity}', b"\xff\xfe{}", b"", b"[" * 60_000],
)
def test_malformed_json_gets_400(http: httpx.Client, raw: bytes) -> None:
    response = http.post("/v1/tasks", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert error_of(response)["code"] == "malformed_json"


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_wrong_content_type_gets_415(http: httpx.Client, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = http.post("/v1/tasks", content=b'{"delay": 1}', headers=headers)
    assert response.status_code == 415, response.text
    assert error_of(response)["code"] == "unsupported_media_type"


def test_json_with_charset_is_accepted(http: httpx.Client) -> None:
    response = http.post(
        "/v1/tasks",
        content=json.dumps({"id": uid("cs"), "at": 4e9}).encode(),
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201, response.text


def test_oversized_bodies_get_413_declared_or_streamed(
    http: httpx.Client, table: TaskTable
) -> None:
    before = table.count()
    big = json.dumps({"at": 4e9, "payload": "x" * MAX_BODY}).encode()
    declared = http.post("/v1/tasks", content=big, headers={"Content-Type": "application/json"})
    assert declared.status_code == 413
    assert error_of(declared)["code"] == "too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        yield big[:1000]
        yield big[1000:]

    streamed = http.post(
        "/v1/tasks", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status_code == 413
    assert table.count() == before
    assert http.get("/healthz").status_code == 200


# -- batch ----------------------------------------------------------------------------


def test_batch_stores_all_and_answers_ids_in_order(http: httpx.Client, table: TaskTable) -> None:
    prefix = uid("b")
    tasks: list[dict[str, object]] = [{"id": f"{prefix}-{n}", "at": 4e9 + n} for n in range(20)]
    tasks.append({"at": 4e9})  # without id
    response = http.post("/v1/tasks/batch", json={"tasks": tasks})
    assert response.status_code == 201, response.text
    ids = response.json()["ids"]
    assert ids[:20] == [f"{prefix}-{n}" for n in range(20)]
    assert len(ids) == 21 and ids[20] not in ids[:20]
    assert len(rows_with_prefix(table, prefix)) == 20
    # The same batch again is a safe retry.
    assert http.post("/v1/tasks/batch", json={"tasks": tasks[:20]}).status_code == 201


@pytest.mark.parametrize(
    ("tasks", "field"),
    [
        ([{"at": 4e9}, {"at": 4e9}, {"at": 4e9}, {"delay": "soon"}], "tasks[3].delay"),
        ([{"at": 4e9}, {"at": 4e9, "id": "no way"}], "tasks[1].id"),
        ([{"at": 4e9}, {"at": 4e9, "extra": 1}], "tasks[1].extra"),
        ([{"at": 4e9}, 5], "tasks[1]"),
        ([], "tasks"),
        ([{"at": 4e9}] * (MAX_BATCH + 1), "tasks"),
    ],
)
def test_invalid_batches_name_the_index_and_field_and_write_nothing(
    http: httpx.Client, table: TaskTable, tasks: list[object], field: str
) -> None:
    before = table.count()
    response = http.post("/v1/tasks/batch", json={"tasks": tasks})
    assert response.status_code == 422, response.text
    assert error_of(response)["field"] == field
    assert table.count() == before


def test_batch_with_a_conflicting_id_writes_nothing(http: httpx.Client, table: TaskTable) -> None:
    prefix = uid("bc")
    assert http.post("/v1/tasks", json={"id": f"{prefix}-x", "at": 4e9}).status_code == 201
    tasks = [{"id": f"{prefix}-{n}", "at": 4e9} for n in range(5)]
    tasks.append({"id": f"{prefix}-x", "at": 4e9 + 1})
    response = http.post("/v1/tasks/batch", json={"tasks": tasks})
    assert response.status_code == 409, response.text
    assert error_of(response) | {"message": ""} == {
        "code": "conflict",
        "message": "",
        "field": "tasks[5].id",
    }
    assert rows_with_prefix(table, prefix) == [f"{prefix}-x"]


# -- get, reschedule, cancel ---------------------------------------------------------------


def test_get_unknown_is_404_and_invalid_id_is_422(http: httpx.Client) -> None:
    assert error_of(http.get(f"/v1/tasks/{uid('none')}"))["code"] == "not_found"
    invalid = http.get("/v1/tasks/" + "x" * 65)
    assert invalid.status_code == 422
    assert error_of(invalid)["field"] == "id"


def test_reschedule_moves_the_fire_time(api: Api, http: httpx.Client) -> None:
    start = now_ms()
    moved, sentinel = uid("mv"), uid("sentinel")
    assert http.post("/v1/tasks", json={"id": moved, "at": (start + 600_000) / 1000}).is_success
    response = http.patch(f"/v1/tasks/{moved}", json={"at": (start + 500) / 1000})
    assert response.status_code == 200, response.text
    assert response.json() == {"id": moved, "due_ms": start + 500, "at": (start + 500) / 1000}
    assert http.get(f"/v1/tasks/{moved}").json()["at"] == (start + 500) / 1000
    assert http.post("/v1/tasks", json={"id": sentinel, "at": (start + 900) / 1000}).is_success

    events = [e for e in collect_until(api.events, sentinel, 15) if e.message_id == moved]
    assert len(events) == 1
    assert header_int(events[0], "x-due-ms") == start + 500
    assert header_int(events[0], "x-fired-ms") >= start + 500


def test_reschedule_later_does_not_fire_at_the_old_time(api: Api, http: httpx.Client) -> None:
    start = now_ms()
    task_id, sentinel = uid("later"), uid("sentinel")
    # Due soon: the daemon holds it in memory already when it is moved away.
    assert http.post("/v1/tasks", json={"id": task_id, "at": (start + 700) / 1000}).is_success
    response = http.patch(f"/v1/tasks/{task_id}", json={"delay": 3600})
    assert response.status_code == 200, response.text
    assert http.post("/v1/tasks", json={"id": sentinel, "at": (start + 1200) / 1000}).is_success
    events = collect_until(api.events, sentinel, 15)
    assert task_id not in {e.message_id for e in events}
    assert http.get(f"/v1/tasks/{task_id}").json()["state"] == "scheduled"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({}, 422, "at"),
        ({"at": 4e9, "delay": 1}, 422, "at"),
        ({"delay": -5}, 422, "delay"),
        ({"at": 4e9, "payload": "x"}, 422, "payload"),
    ],
)
def test_invalid_reschedules_get_422(
    http: httpx.Client, body: dict[str, object], status: int, field: str
) -> None:
    task_id = uid("rs")
    assert http.post("/v1/tasks", json={"id": task_id, "at": 4e9}).is_success
    response = http.patch(f"/v1/tasks/{task_id}", json=body)
    assert response.status_code == status, response.text
    assert error_of(response)["field"] == field
    assert http.get(f"/v1/tasks/{task_id}").json()["at"] == 4e9


def test_reschedule_and_cancel_of_unknown_tasks_are_404(http: httpx.Client) -> None:
    unknown = uid("unknown")
    assert http.patch(f"/v1/tasks/{unknown}", json={"delay": 5}).status_code == 404
    assert http.delete(f"/v1/tasks/{unknown}").status_code == 404


def test_cancel_answers_204_and_the_task_never_fires(api: Api, http: httpx.Client) -> None:
    start = now_ms()
    task_id, sentinel = uid("cx"), uid("sentinel")
    assert http.post("/v1/tasks", json={"id": task_id, "at": (start + 700) / 1000}).is_success
    response = http.delete(f"/v1/tasks/{task_id}")
    assert response.status_code == 204 and response.content == b""
    assert http.delete(f"/v1/tasks/{task_id}").status_code == 404
    assert http.get(f"/v1/tasks/{task_id}").status_code == 404
    assert http.post("/v1/tasks", json={"id": sentinel, "at": (start + 1000) / 1000}).is_success
    assert task_id not in {e.message_id for e in collect_until(api.events, sentinel, 15)}


def test_a_task_being_published_is_too_late_to_cancel_or_reschedule(
    http: httpx.Client, table: TaskTable
) -> None:
    task_id = uid("stuck")
    assert http.post("/v1/tasks", json={"id": task_id, "at": FAR_S}).is_success
    table.mark_firing(task_id)  # armed by some instance: committed to firing
    assert http.get(f"/v1/tasks/{task_id}").json()["state"] == "firing"
    cancel = http.delete(f"/v1/tasks/{task_id}")
    assert cancel.status_code == 409
    assert error_of(cancel)["code"] == "too_late"
    move = http.patch(f"/v1/tasks/{task_id}", json={"delay": 60})
    assert move.status_code == 409
    assert error_of(move)["code"] == "too_late"


# -- the rest of the surface --------------------------------------------------------------


def test_health_readiness_and_openapi(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready"}
    document = http.get("/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert set(document["paths"]) >= {"/v1/tasks", "/v1/tasks/batch", "/v1/tasks/{id}"}


def test_unknown_routes_and_methods_get_json_errors(http: httpx.Client) -> None:
    missing = http.get("/v2/nothing")
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "not_found"
    wrong = http.put("/v1/tasks", json={})
    assert wrong.status_code == 405
    assert "POST" in wrong.headers["Allow"]
    assert error_of(wrong)["code"] == "method_not_allowed"


# -- races with firing --------------------------------------------------------------------


def test_cancels_and_reschedules_racing_the_firing_each_have_exactly_one_outcome(
    api: Api, http: httpx.Client
) -> None:
    # Tasks whose arm times (due - 200 ms) fall while they are being cancelled or
    # moved: 204 ones never fire; moved (200) ones fire once, at the new time;
    # 409 (too late) ones fire once at the old time; 404 ones fired already.
    prefix = uid("race")
    count = 120
    start = now_ms()
    tasks = [{"id": f"{prefix}-{i}", "at": (start + 400 + i * 3) / 1000} for i in range(count)]
    for part in range(0, count, MAX_BATCH):
        batch = {"tasks": tasks[part : part + MAX_BATCH]}
        assert http.post("/v1/tasks/batch", json=batch).status_code == 201
    new_due_ms = start + 3000
    wait_for(lambda: now_ms() >= start + 200 + count, 5)

    def race(i: int) -> tuple[str, int]:
        task_id = f"{prefix}-{i}"
        with api.client() as client:
            if i % 2:
                return task_id, client.delete(f"/v1/tasks/{task_id}").status_code
            moved = client.patch(f"/v1/tasks/{task_id}", json={"at": new_due_ms / 1000})
            return task_id, moved.status_code

    with ThreadPoolExecutor(8) as pool:
        outcomes = dict(pool.map(race, range(count)))
    sentinel = uid("sentinel")
    assert http.post("/v1/tasks", json={"id": sentinel, "at": (new_due_ms + 300) / 1000}).is_success
    events = [e for e in collect_until(api.events, sentinel, 20) if e.message_id in outcomes]

    fired: dict[str, list[int]] = {}
    for event in events:
        fired.setdefault(str(event.message_id), []).append(header_int(event, "x-due-ms"))
    assert all(len(dues) == 1 for dues in fired.values()), "an event fired twice"
    assert set(outcomes.values()) <= {200, 204, 404, 409}
    log.info("race outcomes: %s", Counter(outcomes.values()))
    for task_id, status in outcomes.items():
        if status == 204:
            assert task_id not in fired
        elif status == 200:
            assert fired[task_id] == [new_due_ms]
        else:  # 409 and 404: fired at the old time
            assert task_id in fired and fired[task_id] != [new_due_ms]
