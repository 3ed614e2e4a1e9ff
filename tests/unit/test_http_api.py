"""The HTTP API (``triggerhook.api.http.HttpApi``) over the in-memory store, with
no MariaDB and no RabbitMQ: the engine runs (single-task writes go through its
group commit) over a :class:`~support.fakes.FakeStore`, a clock that stands
still and a publisher that never publishes; requests go through aiohttp's
``TestServer``/``TestClient``.

Each test pins the answer as docs/api.md describes it (status, JSON body, error
code and ``field``) and what the store holds afterwards: creates (single and
batch, all or nothing), lookups, reschedules and cancels (also of a task being
published: ``too_late``), bad input (``400``, ``413``, ``415``, ``422``),
authentication (``401``), the probes, ``/v1/status``, ``/metrics`` and
``/openapi.json``, a stopped engine and a store that is down (``503``). The
daemon's real listener (connection limits, timeouts) is tested as a process in
tests/integration.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from support.dedup import refuse_as_fired
from support.fakes import DEFAULT_NOW_MS, FakeClock, FakePublisher, FakeStore

from triggerhook.api import openapi
from triggerhook.api.http import HttpApi
from triggerhook.app import TriggerHook
from triggerhook.domain.task import Task
from triggerhook.errors import StoreUnavailable
from triggerhook.settings import Settings
from triggerhook.wiring import assemble, http_config

NOW_MS = int(DEFAULT_NOW_MS)
AT = "2030-01-01T00:00:00.250Z"  # far beyond arm_ahead_ms: never armed meanwhile
AT_MS = 1_893_456_000_250
LATER_MS = AT_MS + 3_600_000
DELAY_MS = 60_000  # beyond arm_ahead_ms too
MAX_PAYLOAD = 64
TOKEN = "s3cret"
DEFAULT_KEY = Settings().default_routing_key

Client = TestClient[web.Request, web.Application]
Scenario = Callable[[Client], Awaitable[None]]
Row = tuple[Task, str | None, bool, int]  # a stored row: task, holder if armed, armed, revision


@dataclass
class Daemon:
    """A started library façade, its store and clock, and the HTTP API over it."""

    hook: TriggerHook
    store: FakeStore
    clock: FakeClock
    settings: Settings
    api: HttpApi
    executor: ThreadPoolExecutor
    reasons: list[str] = field(default_factory=list)  # what /readyz reports

    def serve(self, scenario: Scenario) -> None:
        """Run ``scenario`` with a client of this daemon's HTTP API."""
        asyncio.run(_serve(self.api.app, scenario))


async def _serve(app: web.Application, scenario: Scenario) -> None:
    client: Client = TestClient(TestServer(app))
    async with client:
        await scenario(client)


@pytest.fixture
def make_daemon() -> Iterator[Callable[..., Daemon]]:
    """Builds started daemons (``Settings`` overrides as keywords); stops them after."""
    made: list[Daemon] = []

    def make(**overrides: Any) -> Daemon:
        settings = Settings(
            instance_id="unit",
            switch_interval_us=0,  # leave the interpreter's switch interval alone
            shutdown_timeout_s=1,
            max_payload_bytes=overrides.pop("max_payload_bytes", MAX_PAYLOAD),
            **overrides,
        )
        clock = FakeClock(NOW_MS)
        store = FakeStore(now_ms=clock.now_ms)
        hook = assemble(settings, store, clock, lambda buffer, sink, retry, fail: FakePublisher())
        executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="http-test")
        reasons: list[str] = []
        api = HttpApi(hook, http_config(settings), lambda: list(reasons), executor)
        daemon = Daemon(hook, store, clock, settings, api, executor, reasons)
        made.append(daemon)
        hook.start()
        return daemon

    try:
        yield make
    finally:
        failures: list[str | None] = []
        for daemon in made:
            try:
                failures.append(daemon.hook.health().failure)
                # Past every due time armed on insert, so that stopping does
                # not wait for the fake clock to reach it.
                daemon.clock.advance(10 * daemon.settings.shard_lease_ms)
                daemon.hook.close()
            finally:
                daemon.executor.shutdown(wait=True)
        assert failures == [None] * len(made)


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon()


# -- helpers ----------------------------------------------------------------------------


async def answer(response: Any) -> tuple[int, Any]:
    """The status and the decoded JSON body of an aiohttp client response."""
    async with response as r:
        assert r.content_type == "application/json", (r.status, await r.text())
        return r.status, await r.json()


def error(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


def at_s(due_ms: int) -> float:
    return due_ms / 1000


def due(task_id: str, due_ms: int) -> dict[str, object]:
    """A write's answer: the id and the due time (``at`` in seconds: deprecated)."""
    return {"id": task_id, "due_ms": due_ms, "at": at_s(due_ms)}


def created(task_id: str, due_ms: int, outcome: str = "created") -> dict[str, object]:
    """A create's answer: a write's, and its outcome."""
    return {**due(task_id, due_ms), "outcome": outcome}


def task_body(task_id: str | None = "t-1", **fields: object) -> dict[str, object]:
    body: dict[str, object] = {"at": AT}
    if task_id is not None:
        body["id"] = task_id
    body.update(fields)
    return body


def arm(store: FakeStore) -> None:
    """Every stored task committed to firing (being published), as if armed by
    another instance (none here holds it in memory)."""
    assert store.ids()
    for task_id in store.ids():
        stored = store.row(task_id)
        assert stored is not None
        store.put(stored.task, rev=stored.rev, fire_ms=stored.fire_ms, armed=True)
        assert store.is_armed(task_id)


def row(store: FakeStore, task_id: str) -> Row:
    """One stored row (task, the owner of its shard if armed, armed, revision);
    it must exist."""
    stored = store.row(task_id)
    assert stored is not None, f"no row {task_id!r}"
    armed = store.is_armed(task_id)
    holder = store.shards[stored.shard].owner if armed else None
    return stored.task, holder, armed, stored.rev


def sized(task_id: str, size: int) -> bytes:
    """A create body of exactly ``size`` bytes (padded in its payload)."""
    bare = json.dumps(task_body(task_id, payload="")).encode()
    body = json.dumps(task_body(task_id, payload="x" * (size - len(bare)))).encode()
    assert len(body) == size
    return body


JSON = {"Content-Type": "application/json"}


# -- create ---------------------------------------------------------------------------


def test_create_answers_201_with_the_id_and_at_in_seconds(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        body = task_body(routing_key="billing.charge", payload="hi")
        made = await answer(client.post("/v1/tasks", json=body))
        assert made == (201, created("t-1", 1_893_456_000_250))
        # Epoch seconds in, too (a fraction allowed).
        numeric = task_body("t-2", at=1_893_456_000.25)
        assert await answer(client.post("/v1/tasks", json=numeric)) == (
            201,
            created("t-2", 1_893_456_000_250),
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1", "t-2"}
    task, holder, firing, _rev = row(daemon.store, "t-1")
    assert task == Task("t-1", AT_MS, "billing.charge", b"hi")
    assert (holder, firing) == (None, False)  # due beyond arm_ahead_ms
    assert row(daemon.store, "t-2")[0] == Task("t-2", AT_MS, DEFAULT_KEY, b"")


def test_create_takes_at_ms_delay_ms_and_rfc_3339_text(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        for task_id, when, due_ms in (
            ("ms", {"at_ms": AT_MS}, AT_MS),
            ("ms-float", {"at_ms": float(AT_MS)}, AT_MS),  # JSON's 5.0: an integer
            ("delay", {"delay_ms": DELAY_MS}, NOW_MS + DELAY_MS),
            ("naive", {"at": "2030-01-01T00:00:00.250"}, AT_MS),  # no offset: UTC
            ("past", {"at_ms": -1}, 0),  # before 1970: due at once
        ):
            made = await answer(client.post("/v1/tasks", json={"id": task_id, **when}))
            assert made == (201, created(task_id, due_ms))
        for body, field_name, given in (
            ({"at_ms": AT_MS, "delay_ms": 1}, "at_ms", "at_ms, delay_ms"),
            ({"at": AT, "at_ms": AT_MS}, "at", "at, at_ms"),
            ({"delay_ms": 1, "delay": 1}, "delay_ms", "delay_ms, delay"),
        ):
            message = f"give exactly one of at, at_ms and delay_ms (given: {given})"
            assert await answer(client.post("/v1/tasks", json={"id": "x", **body})) == (
                422,
                error("invalid", message, field_name),
            )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"ms", "ms-float", "delay", "naive", "past"}
    assert row(daemon.store, "delay")[0].due_ms == NOW_MS + DELAY_MS


def test_the_same_create_again_is_200_and_other_content_is_a_409_conflict(
    daemon: Daemon,
) -> None:
    body = task_body(payload="hi")
    first: list[Row] = []

    async def scenario(client: Client) -> None:
        assert await answer(client.post("/v1/tasks", json=body)) == (
            201,
            created("t-1", AT_MS),
        )
        first.append(row(daemon.store, "t-1"))
        assert await answer(client.post("/v1/tasks", json=body)) == (
            200,
            created("t-1", AT_MS, "exists"),
        )
        for other in ({**body, "payload": "other"}, {**body, "at": at_s(LATER_MS)}):
            assert await answer(client.post("/v1/tasks", json=other)) == (
                409,
                error("conflict", "task 't-1' already exists with different content", "id"),
            )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1"}
    assert row(daemon.store, "t-1") == first[0]  # same content, same revision: not rewritten


def test_a_create_without_an_id_gets_a_new_uuid4(daemon: Daemon) -> None:
    ids: list[str] = []

    async def scenario(client: Client) -> None:
        for _ in range(2):
            status, data = await answer(client.post("/v1/tasks", json={"delay": 60}))
            assert status == 201
            assert data["at"] == at_s(NOW_MS + DELAY_MS)
            ids.append(data["id"])

    daemon.serve(scenario)
    assert all(str(uuid.UUID(tid)) == tid and uuid.UUID(tid).version == 4 for tid in ids)
    assert len(set(ids)) == 2
    assert daemon.store.ids() == set(ids)
    assert row(daemon.store, ids[0])[0] == Task(ids[0], NOW_MS + DELAY_MS, DEFAULT_KEY, b"")


def test_at_is_answered_in_milliseconds_rounded_up_and_past_times_as_the_epoch(
    daemon: Daemon,
) -> None:
    async def scenario(client: Client) -> None:
        sub_ms = task_body("r", at=1_893_456_000.2501)
        assert await answer(client.post("/v1/tasks", json=sub_ms)) == (
            201,
            created("r", 1_893_456_000_251),  # never early
        )
        for name, past in (("p", -5), ("q", "1960-01-01T00:00:00Z")):
            assert await answer(client.post("/v1/tasks", json={"id": name, "at": past})) == (
                201,
                created(name, 0),
            )

    daemon.serve(scenario)
    assert row(daemon.store, "r")[0].due_ms == 1_893_456_000_251
    assert row(daemon.store, "p")[0].due_ms == row(daemon.store, "q")[0].due_ms == 0


def test_a_task_due_within_arm_ahead_is_being_published_at_once(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        soon = {"id": "soon", "delay": 0.1}  # within arm_ahead_ms (200 ms)
        assert await answer(client.post("/v1/tasks", json=soon)) == (
            201,
            created("soon", NOW_MS + 100),
        )
        # Armed by this engine (it owns every shard) within moments of the insert.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            status, data = await answer(client.get("/v1/tasks/soon"))
            if data.get("state") == "firing":
                break
            await asyncio.sleep(0.01)
        assert (status, data["state"]) == (200, "firing")
        assert await answer(client.delete("/v1/tasks/soon")) == (
            409,
            error("too_late", "task 'soon' is being published"),
        )

    daemon.serve(scenario)
    assert row(daemon.store, "soon")[1:3] == ("unit", True)  # armed by this engine


def test_a_delay_create_sent_again_later_conflicts(daemon: Daemon) -> None:
    body = {"id": "d", "delay": 60}

    async def scenario(client: Client) -> None:
        assert await answer(client.post("/v1/tasks", json=body)) == (
            201,
            created("d", NOW_MS + DELAY_MS),
        )
        # At the same instant: the same due time, a safe repeat.
        assert (await answer(client.post("/v1/tasks", json=body)))[0] == 200
        daemon.clock.advance(500)  # the delay is turned into a due time on arrival
        assert await answer(client.post("/v1/tasks", json=body)) == (
            409,
            error("conflict", "task 'd' already exists with different content", "id"),
        )

    daemon.serve(scenario)
    assert row(daemon.store, "d")[0].due_ms == NOW_MS + DELAY_MS


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        (task_body(at="notatime"), "at"),
        (task_body(at="20261201"), "at"),  # ambiguous: a date or seconds?
        (task_body(at=True), "at"),
        ({"id": "t-1", "delay": -1}, "delay"),
        ({"id": "t-1", "delay": "soon"}, "delay"),
        (task_body(delay=5), "at"),  # both at and delay
        ({"id": "t-1"}, "at"),  # neither
        (task_body(routing_key="bad key!"), "routing_key"),
        (task_body(payload="x" * (MAX_PAYLOAD + 1)), "payload"),
        (task_body(payload_b64="not base64!"), "payload_b64"),
        (task_body(payload="a", payload_b64="YQ=="), "payload"),
        (task_body("bad id!"), "id"),
        (task_body("batch"), "id"),  # reserved: the batch endpoint's name
        (task_body(colour="red"), "colour"),  # unknown fields are refused
        ([task_body()], "body"),
        (task_body(at="10000-01-01T00:00:00Z"), "at"),  # after 9999-12-31T23:59:59.999Z
        (task_body(at=253_402_300_800), "at"),
        (task_body(at="2030-01-01T00:00:00" + "0" * 60 + "Z"), "at"),  # over 64 characters
        (b'{"id": "t-1", "at": 1e400}', "at"),  # beyond the float range: infinite
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_an_invalid_create_is_422_naming_the_field_and_writes_nothing(
    daemon: Daemon, body: object, field_name: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def scenario(client: Client) -> None:
        status, data = await answer(client.post("/v1/tasks", data=raw, headers=JSON))
        assert status == 422, data
        assert set(data) == {"error"}
        assert set(data["error"]) == {"code", "message", "field"}
        assert data["error"]["code"] == "invalid"
        assert data["error"]["field"] == field_name
        assert isinstance(data["error"]["message"], str) and data["error"]["message"]

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": "t-1", "at": ',
        b'{"id": "t-1", "at": NaN}',
        b'{"id": "t-1", "at": Infinity}',
        b'{"id": "t-\xff", "at": 1893456000}',  # not UTF-8
        b'{"id": "t-1", "at": 1893456000, "payload": "\\ud800"}',  # a lone surrogate
        b"",
    ],
    ids=["truncated", "nan", "infinity", "not-utf8", "lone-surrogate", "empty"],
)
def test_a_body_that_is_not_json_is_400_and_writes_nothing(daemon: Daemon, raw: bytes) -> None:
    async def scenario(client: Client) -> None:
        status, data = await answer(client.post("/v1/tasks", data=raw, headers=JSON))
        assert status == 400
        assert set(data["error"]) == {"code", "message"}
        assert data["error"]["code"] == "malformed_json"
        assert data["error"]["message"].startswith("body is not valid JSON: ")

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"]
)
def test_a_body_that_is_not_declared_json_is_415_and_writes_nothing(
    daemon: Daemon, content_type: str
) -> None:
    raw = json.dumps(task_body()).encode()

    async def scenario(client: Client) -> None:
        headers = {"Content-Type": content_type}
        assert await answer(client.post("/v1/tasks", data=raw, headers=headers)) == (
            415,
            error("unsupported_media_type", "Content-Type must be application/json"),
        )
        # Without any Content-Type (aiohttp's client then says application/octet-stream).
        status, data = await answer(client.post("/v1/tasks", data=raw))
        assert (status, data["error"]["code"]) == (415, "unsupported_media_type")

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


def test_a_json_content_type_with_parameters_is_json(daemon: Daemon) -> None:
    raw = json.dumps(task_body()).encode()

    async def scenario(client: Client) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8"}
        assert await answer(client.post("/v1/tasks", data=raw, headers=headers)) == (
            201,
            created("t-1", AT_MS),
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1"}


def test_a_body_over_http_max_body_bytes_is_413_and_writes_nothing(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(http_max_body_bytes=1024, max_payload_bytes=4096)
    too_large = error("too_large", "body is over the limit of 1024 bytes")

    async def scenario(client: Client) -> None:
        async with client.post("/v1/tasks", data=sized("over", 1025), headers=JSON) as r:
            assert (r.status, await r.json()) == (413, too_large)
            assert r.headers.get("Connection", "").lower() == "close"  # the body was not read
        assert await answer(client.post("/v1/tasks", data=sized("fits", 1024), headers=JSON)) == (
            201,
            created("fits", AT_MS),
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"fits"}


def test_a_chunked_body_over_the_limit_is_413_and_writes_nothing(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(http_max_body_bytes=1024, max_payload_bytes=4096)
    raw = sized("over", 1025)

    async def chunks() -> Any:
        for start in range(0, len(raw), 100):
            yield raw[start : start + 100]

    async def scenario(client: Client) -> None:
        async with client.post("/v1/tasks", data=chunks(), headers=JSON) as r:
            assert r.request_info.headers.get("Transfer-Encoding") == "chunked"
            assert (r.status, await r.json()) == (
                413,
                error("too_large", "body is over the limit of 1024 bytes"),
            )

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


# -- batch create -------------------------------------------------------------------------


def test_a_batch_creates_every_task_and_answers_their_ids_in_order(daemon: Daemon) -> None:
    body = {
        "tasks": [
            task_body("a", payload="1"),
            task_body(None, routing_key="orders.expire"),
            {"id": "c", "delay": 60},
        ]
    }
    ids: list[str] = []

    async def scenario(client: Client) -> None:
        status, data = await answer(client.post("/v1/tasks/batch", json=body))
        assert status == 201
        assert set(data) == {"ids", "outcomes"}
        assert data["outcomes"] == ["created"] * 3
        ids.extend(data["ids"])

    daemon.serve(scenario)
    assert len(ids) == 3
    assert (ids[0], ids[2]) == ("a", "c")
    assert uuid.UUID(ids[1]).version == 4
    assert daemon.store.ids() == set(ids)
    assert row(daemon.store, "a")[0] == Task("a", AT_MS, DEFAULT_KEY, b"1")
    assert row(daemon.store, ids[1])[0] == Task(ids[1], AT_MS, "orders.expire", b"")
    assert row(daemon.store, "c")[0] == Task("c", NOW_MS + DELAY_MS, DEFAULT_KEY, b"")


def test_the_same_batch_again_changes_nothing(daemon: Daemon) -> None:
    body = {"tasks": [task_body("a"), task_body("b", payload="2")]}
    before: list[dict[str, Row]] = []

    async def scenario(client: Client) -> None:
        made = {"ids": ["a", "b"], "outcomes": ["created", "created"]}
        assert await answer(client.post("/v1/tasks/batch", json=body)) == (201, made)
        before.append({tid: row(daemon.store, tid) for tid in ("a", "b")})
        again = {"ids": ["a", "b"], "outcomes": ["exists", "exists"]}
        assert await answer(client.post("/v1/tasks/batch", json=body)) == (201, again)

    daemon.serve(scenario)
    assert {tid: row(daemon.store, tid) for tid in daemon.store.ids()} == before[0]


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        (
            {"tasks": [task_body("a"), task_body("b", routing_key="bad key!")]},
            "tasks[1].routing_key",
        ),
        ({"tasks": [task_body("a"), task_body("b"), {"id": "c"}]}, "tasks[2].at"),
        ({"tasks": [task_body("a", payload="x" * (MAX_PAYLOAD + 1))]}, "tasks[0].payload"),
        ({"tasks": [task_body("a"), task_body("batch")]}, "tasks[1].id"),
        ({"tasks": [task_body("a"), [1]]}, "tasks[1]"),
        ({"tasks": []}, "tasks"),
        ({"tasks": task_body("a")}, "tasks"),
        ({"tasks": [task_body("a")], "extra": 1}, "extra"),
    ],
    ids=[
        "routing_key",
        "at",
        "payload",
        "id",
        "not-an-object",
        "empty",
        "not-a-list",
        "unknown-field",
    ],
)
def test_a_batch_with_one_bad_task_is_422_naming_it_and_writes_nothing(
    daemon: Daemon, body: object, field_name: str
) -> None:
    async def scenario(client: Client) -> None:
        status, data = await answer(client.post("/v1/tasks/batch", json=body))
        assert status == 422, data
        assert (data["error"]["code"], data["error"]["field"]) == ("invalid", field_name)

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


def test_a_batch_over_http_max_batch_tasks_is_422(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(http_max_batch_tasks=2)

    async def scenario(client: Client) -> None:
        three = {"tasks": [task_body(name) for name in ("a", "b", "c")]}
        assert await answer(client.post("/v1/tasks/batch", json=three)) == (
            422,
            error("invalid", "must hold 1 to 2 tasks, got 3", "tasks"),
        )
        two = {"tasks": [task_body(name) for name in ("a", "b")]}
        made = {"ids": ["a", "b"], "outcomes": ["created", "created"]}
        assert await answer(client.post("/v1/tasks/batch", json=two)) == (201, made)

    daemon.serve(scenario)
    assert daemon.store.ids() == {"a", "b"}


def test_a_batch_with_a_conflicting_id_is_409_naming_the_task_and_writes_nothing(
    daemon: Daemon,
) -> None:
    stored: list[Row] = []

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body("a"))))[0] == 201
        stored.append(row(daemon.store, "a"))
        batch = {"tasks": [task_body("b"), task_body("a", payload="other"), task_body("c")]}
        assert await answer(client.post("/v1/tasks/batch", json=batch)) == (
            409,
            error("conflict", "task 'a' already exists with different content", "tasks[1].id"),
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"a"}
    assert row(daemon.store, "a") == stored[0]


def test_a_batch_giving_one_id_twice_with_other_content_names_the_second(
    daemon: Daemon,
) -> None:
    async def scenario(client: Client) -> None:
        batch = {"tasks": [task_body("x"), task_body("x", payload="other")]}
        status, data = await answer(client.post("/v1/tasks/batch", json=batch))
        assert (status, data["error"]["code"]) == (409, "conflict")
        assert data["error"]["field"] == "tasks[1].id"

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


def test_a_batch_giving_one_id_twice_with_the_same_content_stores_it_once(
    daemon: Daemon,
) -> None:
    async def scenario(client: Client) -> None:
        batch = {"tasks": [task_body("y"), task_body("y")]}
        assert await answer(client.post("/v1/tasks/batch", json=batch)) == (
            201,
            {"ids": ["y", "y"], "outcomes": ["created", "exists"]},
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"y"}


# -- the dedup window ------------------------------------------------------------------

FIRED_MS = NOW_MS - 5_000
DAY_MS = 86_400_000
MAX_WINDOW_MS = 30 * DAY_MS


def test_a_dedup_window_is_stored_shown_and_part_of_the_content(daemon: Daemon) -> None:
    body = task_body(dedup_window_ms=DAY_MS)

    async def scenario(client: Client) -> None:
        assert await answer(client.post("/v1/tasks", json=body)) == (201, created("t-1", AT_MS))
        status, shown = await answer(client.get("/v1/tasks/t-1"))
        assert (status, shown["dedup_window_ms"]) == (200, DAY_MS)
        status, page = await answer(client.get("/v1/tasks?prefix=t-"))
        assert (status, page["tasks"][0]["dedup_window_ms"]) == (200, DAY_MS)
        # The same again (5.0 is 5 in JSON) is a safe repeat; another window, other content.
        again = task_body(dedup_window_ms=float(DAY_MS))
        assert await answer(client.post("/v1/tasks", json=again)) == (
            200,
            created("t-1", AT_MS, "exists"),
        )
        for other in (task_body(dedup_window_ms=DAY_MS + 1), task_body()):
            assert (await answer(client.post("/v1/tasks", json=other)))[0] == 409
        # No window (0, or none given) shows none.
        none = task_body("t-0", dedup_window_ms=0)
        assert (await answer(client.post("/v1/tasks", json=none)))[0] == 201
        assert "dedup_window_ms" not in (await answer(client.get("/v1/tasks/t-0")))[1]

    daemon.serve(scenario)
    assert row(daemon.store, "t-1")[0].meta.dedup_window_ms == DAY_MS
    assert row(daemon.store, "t-0")[0].meta.dedup_window_ms == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "must be a non-negative integer number of milliseconds"),
        (1.5, "must be a non-negative integer number of milliseconds"),
        ("60000", "must be a non-negative integer number of milliseconds"),
        (True, "must be a non-negative integer number of milliseconds"),
        (MAX_WINDOW_MS + 1, f"at most {MAX_WINDOW_MS} ms (30 days)"),
        (None, "must not be null (leave the field out)"),
    ],
    ids=str,
)
def test_a_bad_dedup_window_is_422_naming_it_single_and_in_a_batch(
    daemon: Daemon, value: object, message: str
) -> None:
    async def scenario(client: Client) -> None:
        assert await answer(client.post("/v1/tasks", json=task_body(dedup_window_ms=value))) == (
            422,
            error("invalid", message, "dedup_window_ms"),
        )
        batch = {"tasks": [task_body("a"), task_body("b", dedup_window_ms=value)]}
        assert await answer(client.post("/v1/tasks/batch", json=batch)) == (
            422,
            error("invalid", message, "tasks[1].dedup_window_ms"),
        )
        ok = task_body("max", dedup_window_ms=MAX_WINDOW_MS)
        assert (await answer(client.post("/v1/tasks", json=ok)))[0] == 201

    daemon.serve(scenario)
    assert daemon.store.ids() == {"max"}


def test_a_create_of_an_id_fired_within_its_window_is_409_already_fired_with_fired_ms(
    daemon: Daemon,
) -> None:
    refuse_as_fired(daemon.store, {"t-1": FIRED_MS})
    refused = error(
        "already_fired",
        f"task 't-1' fired at {FIRED_MS} (epoch ms), within its dedup window",
        "id",
    )
    refused["error"]["fired_ms"] = FIRED_MS

    async def scenario(client: Client) -> None:
        body = task_body(dedup_window_ms=DAY_MS)
        assert await answer(client.post("/v1/tasks", json=body)) == (409, refused)
        assert (await answer(client.get("/v1/tasks/t-1")))[0] == 404  # nothing written
        # Whatever the create says (its own window, on_conflict): the id fired.
        for other in (task_body(), task_body(on_conflict="replace")):
            assert await answer(client.post("/v1/tasks", json=other)) == (409, refused)

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


def test_a_batch_with_an_id_fired_within_its_window_is_409_naming_it_and_writes_nothing(
    daemon: Daemon,
) -> None:
    refuse_as_fired(daemon.store, {"b": FIRED_MS})

    async def scenario(client: Client) -> None:
        batch = {"tasks": [task_body("a"), task_body("b"), task_body("c")]}
        status, data = await answer(client.post("/v1/tasks/batch", json=batch))
        assert status == 409
        assert data["error"] == {
            "code": "already_fired",
            "message": f"task 'b' fired at {FIRED_MS} (epoch ms), within its dedup window",
            "field": "tasks[1].id",
            "fired_ms": FIRED_MS,
        }

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


def test_the_dedup_window_setting_is_the_window_of_a_task_without_one(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dedup_window_ms=DAY_MS)

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body("dflt"))))[0] == 201
        explicit = task_body("none", dedup_window_ms=0)
        assert (await answer(client.post("/v1/tasks", json=explicit)))[0] == 201

    daemon.serve(scenario)
    assert row(daemon.store, "dflt")[0].meta.dedup_window_ms == DAY_MS
    assert row(daemon.store, "none")[0].meta.dedup_window_ms == 0


# -- get ------------------------------------------------------------------------------


def test_get_answers_a_stored_task_and_404_for_an_unknown_one(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        text = task_body(routing_key="billing.charge", payload="héllo")
        assert (await answer(client.post("/v1/tasks", json=text)))[0] == 201
        binary = task_body("bin", payload_b64=base64.b64encode(b"\xff\x00").decode())
        assert (await answer(client.post("/v1/tasks", json=binary)))[0] == 201

        assert await answer(client.get("/v1/tasks/t-1")) == (
            200,
            {
                **due("t-1", AT_MS),
                "routing_key": "billing.charge",
                "state": "scheduled",
                "throttled": False,
                "payload": "héllo",
            },
        )
        assert await answer(client.get("/v1/tasks/bin")) == (
            200,
            {
                **due("bin", AT_MS),
                "routing_key": DEFAULT_KEY,
                "state": "scheduled",
                "throttled": False,
                "payload_b64": "/wA=",
            },
        )
        assert await answer(client.get("/v1/tasks/nope")) == (
            404,
            error("not_found", "task 'nope' is unknown or has fired"),
        )
        status, data = await answer(client.get("/v1/tasks/bad%20id!"))
        assert (status, data["error"]["code"], data["error"]["field"]) == (422, "invalid", "id")

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1", "bin"}


def test_get_of_a_throttled_task_says_so_and_when_it_goes(daemon: Daemon) -> None:
    """A row a rate limit postponed (R8p) waits unarmed until its token's
    instant: scheduled, throttled, and fire_ms (the listing says the same);
    a failed delivery's retry is not throttled, but says when it goes too."""
    wait_ms, retry_ms = AT_MS + 4_000, AT_MS + 60_000

    def write_back(task_id: str, fire_ms: int, throttled: int) -> None:
        # As POSTPONE (throttled 1) and DEFER (0) leave the row: the stores'
        # writes are the contract suite's (tests/contract/test_throttled_contract.py).
        with daemon.store._transaction() as cur:
            cur.execute(
                "UPDATE th_tasks SET fire_ms = ?, throttled = ? WHERE id = ?",
                (fire_ms, throttled, task_id),
            )

    async def scenario(client: Client) -> None:
        for task_id in ("slow", "retry"):
            body = task_body(task_id, routing_key="billing.charge")
            assert (await answer(client.post("/v1/tasks", json=body)))[0] == 201
        write_back("slow", wait_ms, 1)
        write_back("retry", retry_ms, 0)
        shown = {
            **due("slow", AT_MS),
            "routing_key": "billing.charge",
            "state": "scheduled",
            "throttled": True,
            "fire_ms": wait_ms,
        }
        assert await answer(client.get("/v1/tasks/slow")) == (200, {**shown, "payload": ""})
        status, data = await answer(client.get("/v1/tasks/retry"))
        assert (status, data["throttled"], data["fire_ms"]) == (200, False, retry_ms)
        status, page = await answer(client.get("/v1/tasks?routing_key=billing.charge"))
        assert status == 200 and page["tasks"][0] == {
            **shown,
            "id": "retry",
            "throttled": False,
            "fire_ms": retry_ms,
        }
        assert page["tasks"][1] == shown
        # A reschedule ends the wait: due then, as any task.
        patched = await answer(client.patch("/v1/tasks/slow", json={"at_ms": LATER_MS}))
        assert patched[0] == 200
        status, data = await answer(client.get("/v1/tasks/slow"))
        assert (data["state"], data["throttled"], "fire_ms" in data) == ("scheduled", False, False)

    daemon.serve(scenario)


def test_get_of_a_task_being_published_says_firing(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201
        arm(daemon.store)
        status, data = await answer(client.get("/v1/tasks/t-1"))
        assert (status, data["state"]) == (200, "firing")

    daemon.serve(scenario)


# -- reschedule -------------------------------------------------------------------------


def test_reschedule_moves_the_task_and_answers_the_new_at(daemon: Daemon) -> None:
    revs: list[int] = []

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body(payload="p"))))[0] == 201
        revs.append(row(daemon.store, "t-1")[3])
        later = {"at": at_s(LATER_MS)}
        assert await answer(client.patch("/v1/tasks/t-1", json=later)) == (
            200,
            due("t-1", LATER_MS),
        )
        assert row(daemon.store, "t-1")[0] == Task("t-1", LATER_MS, DEFAULT_KEY, b"p")
        revs.append(row(daemon.store, "t-1")[3])
        assert await answer(client.patch("/v1/tasks/t-1", json={"delay": 60})) == (
            200,
            due("t-1", NOW_MS + DELAY_MS),
        )
        revs.append(row(daemon.store, "t-1")[3])
        assert await answer(client.patch("/v1/tasks/t-1", json={"at_ms": LATER_MS + 1})) == (
            200,
            due("t-1", LATER_MS + 1),
        )
        revs.append(row(daemon.store, "t-1")[3])
        moved = await answer(client.patch("/v1/tasks/t-1", json={"delay_ms": DELAY_MS + 1}))
        assert moved == (200, due("t-1", NOW_MS + DELAY_MS + 1))

    daemon.serve(scenario)
    task, holder, firing, rev = row(daemon.store, "t-1")
    assert task == Task("t-1", NOW_MS + DELAY_MS + 1, DEFAULT_KEY, b"p")
    assert (holder, firing) == (None, False)
    assert len({*revs, rev}) == 5  # every move writes a new revision


def test_reschedule_of_an_unknown_task_is_404_and_creates_nothing(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        assert await answer(client.patch("/v1/tasks/nope", json={"at": AT})) == (
            404,
            error("not_found", "task 'nope' is unknown or has fired"),
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        ({"at": AT, "delay": 5}, "at"),
        ({"at_ms": AT_MS, "delay_ms": 5}, "at_ms"),
        ({"at": AT, "at_ms": AT_MS}, "at"),
        ({"delay_ms": 5, "delay": 5}, "delay_ms"),
        ({}, "at"),
        ({"delay": -1}, "delay"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"delay_ms": 1.5}, "delay_ms"),
        ({"at_ms": "soon"}, "at_ms"),
        ({"at": "notatime"}, "at"),
        ({"at": AT, "payload": "x"}, "payload"),
    ],
    ids=[
        "both",
        "at_ms-and-delay_ms",
        "at-and-at_ms",
        "delay_ms-and-delay",
        "neither",
        "negative-delay",
        "negative-delay_ms",
        "fractional-delay_ms",
        "text-at_ms",
        "bad-at",
        "unknown-field",
    ],
)
def test_an_invalid_reschedule_is_422_and_changes_nothing(
    daemon: Daemon, body: dict[str, object], field_name: str
) -> None:
    before: list[Row] = []

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201
        before.append(row(daemon.store, "t-1"))
        status, data = await answer(client.patch("/v1/tasks/t-1", json=body))
        assert (status, data["error"]["code"], data["error"]["field"]) == (
            422,
            "invalid",
            field_name,
        )

    daemon.serve(scenario)
    assert row(daemon.store, "t-1") == before[0]


def test_reschedule_of_a_task_being_published_is_409_too_late(daemon: Daemon) -> None:
    before: list[Row] = []

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201
        arm(daemon.store)
        before.append(row(daemon.store, "t-1"))
        assert await answer(client.patch("/v1/tasks/t-1", json={"at": at_s(LATER_MS)})) == (
            409,
            error("too_late", "task 't-1' is being published"),
        )

    daemon.serve(scenario)
    assert row(daemon.store, "t-1") == before[0]
    assert row(daemon.store, "t-1")[2] is True  # still armed


# -- cancel -----------------------------------------------------------------------------


def test_cancel_answers_204_and_deletes_the_row(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        for name in ("t-1", "t-2"):
            assert (await answer(client.post("/v1/tasks", json=task_body(name))))[0] == 201
        async with client.delete("/v1/tasks/t-1") as r:
            assert (r.status, await r.read()) == (204, b"")
        assert daemon.store.ids() == {"t-2"}
        assert await answer(client.delete("/v1/tasks/t-1")) == (
            404,
            error("not_found", "task 't-1' is unknown or has fired"),
        )

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-2"}


def test_cancel_of_an_unknown_task_is_404(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        assert await answer(client.delete("/v1/tasks/nope")) == (
            404,
            error("not_found", "task 'nope' is unknown or has fired"),
        )

    daemon.serve(scenario)


def test_cancel_of_a_task_being_published_is_409_too_late_and_keeps_it(daemon: Daemon) -> None:
    before: list[Row] = []

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201
        arm(daemon.store)
        before.append(row(daemon.store, "t-1"))
        assert await answer(client.delete("/v1/tasks/t-1")) == (
            409,
            error("too_late", "task 't-1' is being published"),
        )

    daemon.serve(scenario)
    assert row(daemon.store, "t-1") == before[0]


# -- authentication -----------------------------------------------------------------------

UNAUTHORIZED = error("unauthorized", "missing or wrong bearer token")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": ""}],
    ids=["missing", "wrong", "no-scheme", "empty"],
)
def test_with_api_token_a_request_without_the_token_is_401_and_writes_nothing(
    make_daemon: Callable[..., Daemon], headers: dict[str, str]
) -> None:
    daemon = make_daemon(api_token=TOKEN)
    right = {"Authorization": f"Bearer {TOKEN}"}
    before: list[Row] = []

    async def refused(response: Any) -> None:
        async with response as r:
            assert (r.status, await r.json()) == (401, UNAUTHORIZED)
            assert r.headers["WWW-Authenticate"] == "Bearer"

    async def scenario(client: Client) -> None:
        await refused(client.post("/v1/tasks", json=task_body("t-2"), headers=headers))
        batch = {"tasks": [task_body("t-3")]}
        await refused(client.post("/v1/tasks/batch", json=batch, headers=headers))
        assert daemon.store.ids() == set()
        assert await answer(client.post("/v1/tasks", json=task_body(), headers=right)) == (
            201,
            created("t-1", AT_MS),
        )
        before.append(row(daemon.store, "t-1"))
        later = {"at": at_s(LATER_MS)}
        await refused(client.patch("/v1/tasks/t-1", json=later, headers=headers))
        await refused(client.delete("/v1/tasks/t-1", headers=headers))
        await refused(client.get("/v1/tasks/t-1", headers=headers))
        await refused(client.get("/v1/status", headers=headers))
        assert (await answer(client.get("/v1/tasks/t-1", headers=right)))[0] == 200

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1"}
    assert row(daemon.store, "t-1") == before[0]


def test_with_api_token_the_probes_openapi_and_metrics_stay_open(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(api_token=TOKEN)

    async def scenario(client: Client) -> None:
        for path in ("/healthz", "/readyz", "/openapi.json", "/metrics"):
            async with client.get(path) as r:
                assert r.status == 200, path

    daemon.serve(scenario)


def test_metrics_require_token_guards_metrics_too(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(api_token=TOKEN, metrics_require_token=True)

    async def scenario(client: Client) -> None:
        assert await answer(client.get("/metrics")) == (401, UNAUTHORIZED)
        async with client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status == 200
            assert "triggerhook_scheduled_total" in await r.text()
        assert await answer(client.get("/healthz")) == (200, {"status": "ok"})

    daemon.serve(scenario)


# -- probes, status, metrics, the OpenAPI document -----------------------------------------------


def test_healthz(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        assert await answer(client.get("/healthz")) == (200, {"status": "ok"})

    daemon.serve(scenario)


def test_readyz_is_200_when_ready_and_503_with_the_reasons_when_not(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        assert await answer(client.get("/readyz")) == (200, {"status": "ready"})
        daemon.reasons.extend(["mysql: database unavailable", "engine: not running"])
        assert await answer(client.get("/readyz")) == (
            503,
            {
                "status": "unready",
                "reasons": ["mysql: database unavailable", "engine: not running"],
            },
        )
        daemon.reasons.clear()
        assert await answer(client.get("/readyz")) == (200, {"status": "ready"})

    daemon.serve(scenario)


def test_status_shows_the_instance_and_the_totals(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        for name in ("a", "b"):
            assert (await answer(client.post("/v1/tasks", json=task_body(name))))[0] == 201
        assert (await answer(client.patch("/v1/tasks/a", json={"delay": 60})))[0] == 200
        async with client.delete("/v1/tasks/b") as r:
            assert r.status == 204
        status, data = await answer(client.get("/v1/status"))
        assert status == 200
        assert set(data) == {"instance", "running", "period", "http", "totals"}
        assert (data["instance"], data["running"]) == ("unit", True)
        totals = data["totals"]
        expected = {"scheduled", "cancelled", "rescheduled", "armed", "fired", "deleted"}
        assert expected | {"db_errors", "commits_refused", "commits_abandoned"} <= set(totals)
        assert all(isinstance(value, int) for value in totals.values())
        assert (totals["scheduled"], totals["rescheduled"], totals["cancelled"]) == (2, 1, 1)
        assert (totals["fired"], totals["db_errors"]) == (0, 0)
        assert isinstance(data["period"], dict) and isinstance(data["http"], dict)

    daemon.serve(scenario)


def test_metrics_is_the_prometheus_text_of_the_totals(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201
        async with client.get("/metrics") as r:
            assert r.status == 200
            assert (r.content_type, r.charset) == ("text/plain", "utf-8")
            text = await r.text()
        lines = text.splitlines()
        assert text.endswith("\n")
        label = '{triggerhook_instance="unit"}'
        assert "# TYPE triggerhook_scheduled_total counter" in lines
        assert f"triggerhook_scheduled_total{label} 1.0" in lines
        assert f"triggerhook_cancelled_total{label} 0.0" in lines
        posted = 'triggerhook_http_requests_total{status_class="2xx",triggerhook_instance="unit"}'
        assert f"{posted} 1.0" in lines  # the POST
        assert f"triggerhook_http_connections_refused_total{label} 0.0" in lines
        for line in lines:  # every line a HELP or TYPE comment or a sample
            kind, _, rest = line.partition(" ")
            if kind == "#":
                assert rest.split()[0] in ("HELP", "TYPE"), line
            else:
                float(rest)

    daemon.serve(scenario)


def test_openapi_document_is_served(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        status, data = await answer(client.get("/openapi.json"))
        assert status == 200
        assert str(data["openapi"]).startswith("3.")
        assert {
            "/v1/tasks",
            "/v1/tasks/batch",
            "/v1/tasks/count",
            "/v1/tasks/timeline",
            "/v1/tasks/cancel",
            "/v1/tasks/{id}",
            "/readyz",
        } <= set(data["paths"])
        assert set(data["paths"]["/v1/tasks"]) == {"get", "post"}
        assert data == openapi.document(MAX_PAYLOAD, daemon.settings.http_max_batch_tasks)

    daemon.serve(scenario)


# -- routes, a stopped engine, a store that is down ------------------------------------------------


def test_unknown_routes_are_404_and_other_methods_405_with_allow(daemon: Daemon) -> None:
    async def scenario(client: Client) -> None:
        status, data = await answer(client.get("/v1/nothing"))
        assert (status, data["error"]["code"]) == (404, "not_found")
        async with client.get("/v1/tasks/batch") as r:
            assert (r.status, (await r.json())["error"]["code"]) == (405, "method_not_allowed")
            assert r.headers["Allow"] == "POST"
        async with client.put("/v1/tasks/t-1", json=task_body()) as r:
            assert (r.status, (await r.json())["error"]["code"]) == (405, "method_not_allowed")
            assert {m.strip() for m in r.headers["Allow"].split(",")} == {
                "GET",
                "PATCH",
                "DELETE",
            }

    daemon.serve(scenario)
    assert daemon.store.ids() == set()


def test_after_the_engine_stopped_writes_are_503_stopping_and_write_nothing(
    daemon: Daemon,
) -> None:
    before: list[Row] = []
    stopping = error("stopping", "the daemon is stopping; retry on another")

    async def scenario(client: Client) -> None:
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201
        before.append(row(daemon.store, "t-1"))
        daemon.clock.advance(10 * daemon.settings.shard_lease_ms)
        await asyncio.to_thread(daemon.hook.stop)
        assert await answer(client.post("/v1/tasks", json=task_body("t-2"))) == (503, stopping)
        patch = {"at": at_s(LATER_MS)}
        assert await answer(client.patch("/v1/tasks/t-1", json=patch)) == (503, stopping)
        assert await answer(client.delete("/v1/tasks/t-1")) == (503, stopping)
        status, data = await answer(client.get("/v1/status"))
        assert (status, data["running"]) == (200, False)

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1"}
    assert row(daemon.store, "t-1") == before[0]


def test_a_store_failure_is_503_unavailable_naming_only_the_database(daemon: Daemon) -> None:
    unavailable = error("unavailable", "database unavailable; retry")

    async def scenario(client: Client) -> None:
        daemon.store.fail_next("insert", StoreUnavailable("db1.internal:3306 refused"))
        async with client.post("/v1/tasks", json=task_body()) as r:
            assert (r.status, await r.json()) == (503, unavailable)
            assert r.headers["Retry-After"] == "1"
            assert "db1" not in await r.text()
        assert daemon.store.ids() == set()
        daemon.store.fail_next("get", StoreUnavailable("db1.internal:3306 refused"))
        assert await answer(client.get("/v1/tasks/t-1")) == (503, unavailable)
        # The database is back: the same request now succeeds.
        assert (await answer(client.post("/v1/tasks", json=task_body())))[0] == 201

    daemon.serve(scenario)
    assert daemon.store.ids() == {"t-1"}
