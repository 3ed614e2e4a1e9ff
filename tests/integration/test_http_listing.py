"""Metadata, late-fire policy, listing, counting and bulk cancel over the HTTP
API of a real ``triggerhook run`` daemon (real MariaDB and RabbitMQ).

One daemon serves the module. Its dead letters go to ``fire.dead``, which the
test consumer (``fire.#``) receives with the events.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from support.amqp import Received
from support.daemon import TaskTable
from support.hook import collect_until, header_int
from support.http import ROUTED, Api, api_daemon
from support.names import uid
from support.waiting import now_ms, wait_for

FAR_S = 4_000_000_000  # epoch seconds in 2096: never fires during the tests
DEAD = "fire.dead"


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        default_routing_key=ROUTED,
        dead_letter_routing_key=DEAD,
        dead_letter_queue="",
    ) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


def as_text(value: object) -> str:
    assert isinstance(value, str), value
    return value


def error_of(response: httpx.Response) -> tuple[int, str, str | None]:
    error = response.json()["error"]
    return response.status_code, error["code"], error.get("field")


# -- metadata ---------------------------------------------------------------------------


def test_a_tasks_properties_and_headers_go_out_with_its_event(api: Api, http: httpx.Client) -> None:
    task_id = uid("meta")
    body = {
        "id": task_id,
        "delay": 0.2,
        "payload": '{"n": 1}',
        "tags": ["tenant:7", "billing"],
        "content_type": "application/json",
        "content_encoding": "identity",
        "headers": {"tenant": "7", "attempt": 3, "urgent": True},
    }
    assert http.post("/v1/tasks", json=body).status_code == 201
    shown = http.get(f"/v1/tasks/{task_id}").json()
    assert shown["tags"] == ["billing", "tenant:7"]  # a set, kept sorted
    assert (shown["content_type"], shown["content_encoding"]) == ("application/json", "identity")
    assert shown["headers"] == {"attempt": 3, "tenant": "7", "urgent": True}
    [event] = [e for e in collect_until(api.events, task_id, 15) if e.message_id == task_id]
    assert (event.content_type, event.content_encoding) == ("application/json", "identity")
    assert (event.headers["tenant"], event.headers["attempt"], event.headers["urgent"]) == (
        "7",
        3,
        True,
    )
    assert header_int(event, "x-rev") != 0


def test_a_retry_must_carry_the_same_metadata(http: httpx.Client) -> None:
    task_id = uid("again")
    body = {"id": task_id, "at": FAR_S, "tags": ["a"], "headers": {"h": "1"}}
    assert http.post("/v1/tasks", json=body).status_code == 201
    assert http.post("/v1/tasks", json={**body, "tags": ["a", "a"]}).status_code == 200
    assert http.post("/v1/tasks", json={**body, "headers": {"h": "2"}}).status_code == 409
    assert http.post("/v1/tasks", json={**body, "tags": ["b"]}).status_code == 409
    assert http.delete(f"/v1/tasks/{task_id}").status_code == 204


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"headers": {"x-due-ms": 1}}, "headers.x-due-ms"),
        ({"headers": {"X-Mine": "a"}}, "headers.X-Mine"),
        ({"headers": {"h": 1.5}}, "headers.h"),
        ({"headers": {"h": "v" * 1025}}, "headers.h"),
        ({"headers": {f"h{i}": i for i in range(17)}}, "headers"),
        ({"headers": ["h"]}, "headers"),
        ({"tags": "one"}, "tags"),
        ({"tags": [f"t{i}" for i in range(9)]}, "tags"),
        ({"tags": ["ok", "not ok"]}, "tags[1]"),
        ({"content_type": ""}, "content_type"),
        ({"content_encoding": "gzip\n"}, "content_encoding"),
        ({"late": "skip"}, "late"),
        ({"late": {"skip_after_ms": -1}}, "late.skip_after_ms"),
        ({"late": {"deadline": "someday"}}, "late.deadline"),
        ({"late": {"never": 1}}, "late.never"),
    ],
)
def test_bad_metadata_is_refused_naming_the_field(
    http: httpx.Client, extra: dict[str, object], field: str
) -> None:
    task_id = uid("bad")
    response = http.post("/v1/tasks", json={"id": task_id, "at": FAR_S, **extra})
    assert error_of(response) == (422, "invalid", field), response.text
    assert http.get(f"/v1/tasks/{task_id}").status_code == 404


# -- late-fire policy and dead letters ---------------------------------------------------------


def test_a_task_found_too_late_is_dead_lettered_with_its_cause(
    api: Api, http: httpx.Client
) -> None:
    past_ms = now_ms() - 60_000
    past_s = past_ms / 1000
    late_id, deadline_id, fires_id = uid("late"), uid("deadline"), uid("fires")
    deadline_ms_id = uid("deadline-ms")
    tasks = [
        {"id": late_id, "at": past_s, "late": {"skip_after_ms": 1000}, "headers": {"h": "v"}},
        {"id": deadline_id, "delay": 0, "late": {"deadline": past_s}},  # deprecated seconds
        {"id": deadline_ms_id, "delay_ms": 0, "late": {"deadline_ms": past_ms}},
        {"id": fires_id, "at": past_s, "late": "fire"},
    ]
    assert http.post("/v1/tasks/batch", json={"tasks": tasks}).status_code == 201
    seen: dict[str, list[Received]] = {}
    wanted = {(late_id, DEAD), (deadline_id, DEAD), (deadline_ms_id, DEAD), (fires_id, ROUTED)}

    def all_in() -> bool:
        for event in api.events.collect(10, 0.5):
            seen.setdefault(str(event.message_id), []).append(event)
        return wanted <= {(i, e.routing_key) for i, es in seen.items() for e in es}

    wait_for(all_in, 20, f"not all received: {seen}")
    late = seen[late_id][0].headers
    assert late["x-triggerhook-dead-cause"] == "late"
    assert "after its due time (skip_after_ms 1000)" in as_text(late["x-triggerhook-dead-reason"])
    assert late["x-triggerhook-routing-key"] == ROUTED
    assert late["h"] == "v"
    for task_id in (deadline_id, deadline_ms_id):
        deadline = seen[task_id][0].headers
        assert "past its deadline" in as_text(deadline["x-triggerhook-dead-reason"])
    # Their rows went once the dead letter was confirmed; none went out on its own key.
    for task_id in (late_id, deadline_id, fires_id):
        wait_for(lambda: http.get(f"/v1/tasks/{task_id}").status_code == 404, 10)  # noqa: B023
    assert [e.routing_key for e in seen[late_id]] == [DEAD]
    status = http.get("/v1/status").json()
    assert status["totals"]["late_skipped"] >= 3


# -- listing, counting, bulk cancel ------------------------------------------------------------


def test_list_filters_and_pages_through_the_tasks(http: httpx.Client) -> None:
    tenant = uid("tenant")
    tasks = [
        {
            "id": f"{tenant}:{i:02}",
            "at": FAR_S + i // 2,
            "routing_key": ("fire.a", "fire.b")[i % 2],
            "tags": [tenant] + (["vip"] if i < 3 else []),
        }
        for i in range(12)
    ]
    assert http.post("/v1/tasks/batch", json={"tasks": tasks}).status_code == 201
    ids: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"tag": tenant, "limit": "5", **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/tasks", params=params).json()
        ids += [t["id"] for t in page["tasks"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert ids == [t["id"] for t in tasks] and pages == 3
    first = http.get("/v1/tasks", params={"prefix": f"{tenant}:0", "limit": "1"}).json()
    assert first["tasks"][0] == {
        "id": f"{tenant}:00",
        "due_ms": FAR_S * 1000,
        "at": FAR_S,
        "routing_key": "fire.a",
        "state": "scheduled",
        "throttled": False,
        "tags": sorted([tenant, "vip"]),
    }
    by_key = http.get("/v1/tasks", params={"prefix": tenant, "routing_key": "fire.b"}).json()
    assert [t["id"] for t in by_key["tasks"]] == [t["id"] for t in tasks[1::2]]
    # The same range in each unit: epoch ms, RFC 3339, deprecated epoch seconds.
    far = datetime.fromtimestamp(FAR_S, UTC)
    for after, before in (
        ({"due_after_ms": str(FAR_S * 1000 + 2000)}, {"due_before_ms": str(FAR_S * 1000 + 4000)}),
        (
            {"due_after": (far + timedelta(seconds=2)).isoformat()},
            {"due_before": (far + timedelta(seconds=4)).isoformat()},
        ),
        ({"due_after": str(FAR_S + 2)}, {"due_before_ms": str(FAR_S * 1000 + 4000)}),
    ):
        ranged = {"prefix": tenant, **after, **before}
        assert [t["id"] for t in http.get("/v1/tasks", params=ranged).json()["tasks"]] == [
            t["id"] for t in tasks[4:8]
        ], ranged
    exact = {"at_least": False}  # an exact count (no up_to)
    assert http.get("/v1/tasks/count", params={"tag": tenant}).json() == {"count": 12, **exact}
    assert http.get("/v1/tasks/count", params={"prefix": tenant, "state": "firing"}).json() == {
        "count": 0,
        **exact,
    }
    capped = http.get("/v1/tasks/count", params={"tag": tenant, "up_to": "5"}).json()
    assert capped == {"count": 5, "at_least": True}
    line = http.get(
        "/v1/tasks/timeline",
        params={
            "prefix": tenant,
            "start_ms": str(FAR_S * 1000),
            "bucket_ms": "2000",
            "buckets": "3",
        },
    ).json()
    deprecated = http.get(
        "/v1/tasks/timeline",
        params={"prefix": tenant, "start": str(FAR_S), "bucket": "2", "buckets": "3"},
    ).json()
    assert deprecated == line
    assert line == {
        "start_ms": FAR_S * 1000,
        "bucket_ms": 2000,
        "start": FAR_S,  # deprecated: seconds
        "bucket": 2,
        "buckets": 3,
        "routing_keys": {"fire.a": [2, 2, 2], "fire.b": [2, 2, 2]},
    }
    done = http.post("/v1/tasks/cancel", json={"tag": tenant, "routing_key": "fire.a"})
    assert done.json() == {"cancelled": 6, "too_late": 0, "next_cursor": None}
    done = http.post(
        "/v1/tasks/cancel", json={"prefix": tenant, "due_after_ms": FAR_S * 1000 + 5000}
    )
    assert done.json() == {"cancelled": 1, "too_late": 0, "next_cursor": None}
    assert http.get("/v1/tasks/count", params={"prefix": tenant}).json() == {"count": 5, **exact}
    assert http.post("/v1/tasks/cancel", json={"tag": tenant}).json()["cancelled"] == 5


def test_a_bulk_cancel_of_tasks_being_published_counts_them_too_late(
    http: httpx.Client, table: TaskTable
) -> None:
    tag = uid("stuck")
    tasks = [{"id": f"{tag}-{i}", "at": FAR_S, "tags": [tag]} for i in range(4)]
    assert http.post("/v1/tasks/batch", json={"tasks": tasks}).status_code == 201
    for i in range(3):
        table.mark_firing(f"{tag}-{i}")  # armed by some instance: committed to firing
    assert http.get("/v1/tasks/count", params={"tag": tag, "state": "firing"}).json() == {
        "count": 3,
        "at_least": False,
    }
    listed = http.get("/v1/tasks", params={"tag": tag, "state": "scheduled"}).json()["tasks"]
    assert [t["id"] for t in listed] == [f"{tag}-3"]
    assert http.post("/v1/tasks/cancel", json={"tag": tag}).json() == {
        "cancelled": 1,
        "too_late": 3,
        "next_cursor": None,
    }
    assert sorted(
        r[0] for r in table.query("SELECT id FROM th_task_tags WHERE tag = %s", (tag,))
    ) == [f"{tag}-{i}" for i in range(3)]


@pytest.fixture
def table(api: Api) -> Iterator[TaskTable]:
    with TaskTable(api.database_url) as reader:
        yield reader


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/tasks", {"limit": "0"}, "limit"),
        ("/v1/tasks", {"limit": "1001"}, "limit"),
        ("/v1/tasks", {"limit": "ten"}, "limit"),
        ("/v1/tasks", {"cursor": "bm9wZQ"}, "cursor"),
        ("/v1/tasks", {"cursor": "!!"}, "cursor"),
        ("/v1/tasks", {"state": "done"}, "state"),
        ("/v1/tasks", {"prefix": "bad prefix"}, "prefix"),
        ("/v1/tasks", {"tag": ""}, "tag"),
        ("/v1/tasks", {"due_after": "soon"}, "due_after"),
        ("/v1/tasks", {"colour": "red"}, "colour"),
        ("/v1/tasks", {"routing_key": "x" * 301}, "routing_key"),
        ("/v1/tasks/count", {"limit": "5"}, "limit"),
        ("/v1/tasks", {"due_after_ms": "1.5"}, "due_after_ms"),
        ("/v1/tasks", {"due_before_ms": str(10**16)}, "due_before_ms"),
        ("/v1/tasks/count", {"due_after": "2030-01-01", "due_after_ms": "5"}, "due_after"),
        ("/v1/tasks/timeline", {"bucket": "0"}, "bucket"),
        ("/v1/tasks/timeline", {"bucket_ms": "999"}, "bucket_ms"),
        ("/v1/tasks/timeline", {"bucket_ms": "60000", "bucket": "60"}, "bucket"),
        ("/v1/tasks/timeline", {"start_ms": "now"}, "start_ms"),
        ("/v1/tasks/timeline", {"due_after_ms": "5"}, "due_after_ms"),
        ("/v1/tasks/timeline", {"buckets": "1441"}, "buckets"),
        ("/v1/tasks/timeline", {"bucket_ms": "86400000", "buckets": "1440"}, "buckets"),
        ("/v1/tasks/count", {"up_to": "0"}, "up_to"),
        ("/v1/tasks/count", {"up_to": "many"}, "up_to"),
        ("/v1/tasks/timeline", {"state": "firing"}, "state"),
    ],
)
def test_bad_query_parameters_get_422_naming_them(
    http: httpx.Client, path: str, params: dict[str, str], field: str
) -> None:
    assert error_of(http.get(path, params=params)) == (422, "invalid", field)


def test_a_parameter_given_twice_and_a_bulk_cancel_naming_nothing_are_refused(
    http: httpx.Client,
) -> None:
    assert error_of(http.get("/v1/tasks?tag=a&tag=b")) == (422, "invalid", "tag")
    for body in (
        {},
        {"due_before": FAR_S},
        {"state": "firing", "tag": "a"},
        ["a"],
        {"tag": "a", "due_before": FAR_S, "due_before_ms": FAR_S * 1000},
        {"tag": "a", "due_after_ms": "5"},
        {"tag": "a", "cursor": "bm9wZQ"},  # no cursor this API gave out
    ):
        response = http.post("/v1/tasks/cancel", json=body)
        assert response.status_code == 422, response.text
    assert http.get("/v1/tasks/cancel").status_code == 405
    assert http.delete("/v1/tasks/count").status_code == 405
    assert error_of(http.post("/v1/tasks", json={"id": "timeline", "at": FAR_S})) == (
        422,
        "invalid",
        "id",
    )
