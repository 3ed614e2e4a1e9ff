"""The Python client (``triggerhook.client``) against a real ``triggerhook run``
daemon (real MariaDB and RabbitMQ), which requires a bearer token.

Every scenario runs twice: with :class:`Client`, and with :class:`AsyncClient`
driven by an asyncio event loop (``Blocking`` below runs each coroutine to the
end on one loop, so the async client keeps its connections between calls).
Events are read by ``api.events`` (routing keys ``fire.#``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
import pytest
from support.daemon import TaskTable, closed_port
from support.hook import collect_until, header_int
from support.http import ROUTED, Api, api_daemon
from support.tcpproxy import TcpProxy
from support.waiting import now_ms, wait_for

from triggerhook.client import (
    ApiError,
    AsyncClient,
    Client,
    Conflict,
    Health,
    InvalidRequest,
    NotFound,
    Scheduled,
    TaskRequest,
    TaskStatus,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook.client import At as AtType
from triggerhook.domain.task import TaskState

TOKEN = "client-test-" + secrets.token_hex(8)
FAR_S = 4_000_000_000  # epoch seconds in 2096: never fires during the tests


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        api_token=TOKEN,
        max_payload_bytes=1024,
        http_max_batch_tasks=50,
        default_routing_key=ROUTED,
    ) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


@pytest.fixture
def table(api: Api) -> Iterator[TaskTable]:
    with TaskTable(api.database_url) as reader:
        yield reader


def uid(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


# -- one interface over both clients ------------------------------------------------------


class Hook(Protocol):
    """What both clients offer, called synchronously."""

    def schedule(
        self,
        id: str | None = None,
        *,
        at: AtType | None = None,
        delay_s: float | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
    ) -> Scheduled: ...

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> list[str]: ...

    def reschedule(
        self, id: str, *, at: AtType | None = None, delay_s: float | None = None
    ) -> Scheduled: ...

    def cancel(self, id: str) -> None: ...

    def get(self, id: str) -> TaskStatus | None: ...

    def health(self) -> Health: ...

    def ready(self) -> bool: ...


class Blocking:
    """An :class:`AsyncClient` whose coroutines run to the end on ``runner``'s loop."""

    def __init__(self, client: AsyncClient, runner: asyncio.Runner) -> None:
        self.client = client
        self._run = runner.run

    def schedule(
        self,
        id: str | None = None,
        *,
        at: AtType | None = None,
        delay_s: float | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
    ) -> Scheduled:
        coro = self.client.schedule(
            id, at=at, delay_s=delay_s, routing_key=routing_key, payload=payload
        )
        return self._run(coro)

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> list[str]:
        return self._run(self.client.schedule_many(tasks))

    def reschedule(
        self, id: str, *, at: AtType | None = None, delay_s: float | None = None
    ) -> Scheduled:
        return self._run(self.client.reschedule(id, at=at, delay_s=delay_s))

    def cancel(self, id: str) -> None:
        self._run(self.client.cancel(id))

    def get(self, id: str) -> TaskStatus | None:
        return self._run(self.client.get(id))

    def health(self) -> Health:
        return self._run(self.client.health())

    def ready(self) -> bool:
        return self._run(self.client.ready())


class Faults:
    """Fault injection in the client's transport, in front of the real daemon:
    the first ``refuse`` attempts fail before sending (as a refused connection);
    the next ``lose`` are sent and answered, but the answer is dropped (as a
    connection broken after the daemon committed). Records every request."""

    def __init__(self, refuse: int = 0, lose: int = 0) -> None:
        self._lock = threading.Lock()
        self._refuse = refuse
        self._lose = lose
        self.sent: list[tuple[str, str, bytes]] = []  # method, path, body
        self.sent_at: list[float] = []  # time.monotonic() of each attempt

    def before(self, request: httpx.Request) -> None:
        with self._lock:
            self.sent.append((request.method, request.url.path, request.read()))
            self.sent_at.append(time.monotonic())
            if self._refuse > 0:
                self._refuse -= 1
                raise httpx.ConnectError("injected: connection refused", request=request)

    def after(self, request: httpx.Request) -> None:
        with self._lock:
            if self._lose > 0:
                self._lose -= 1
                raise httpx.ReadError("injected: answer lost", request=request)


class FaultySync(httpx.BaseTransport):
    def __init__(self, faults: Faults) -> None:
        self._faults = faults
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._faults.before(request)
        response = self._inner.handle_request(request)
        response.read()
        self._faults.after(request)
        return response

    def close(self) -> None:
        self._inner.close()


class FaultyAsync(httpx.AsyncBaseTransport):
    def __init__(self, faults: Faults) -> None:
        self._faults = faults
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._faults.before(request)
        response = await self._inner.handle_async_request(request)
        await response.aread()
        self._faults.after(request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


Connect = Callable[..., Hook]  # (url=api.url, token=TOKEN, faults=None, **client kwargs)


@pytest.fixture(params=["sync", "async"])
def connect(request: pytest.FixtureRequest, api: Api) -> Iterator[Connect]:
    """Opens clients of the kind the test runs with; all closed after the test."""
    flavour: str = request.param
    with contextlib.ExitStack() as stack:
        runner = stack.enter_context(asyncio.Runner()) if flavour == "async" else None

        def make(
            url: str = api.url,
            token: str | None = TOKEN,
            faults: Faults | None = None,
            **kwargs: Any,
        ) -> Hook:
            if runner is None:
                transport = FaultySync(faults) if faults else None
                client = Client(url, token=token, transport=transport, **kwargs)
                stack.callback(client.close)
                return client
            async_transport = FaultyAsync(faults) if faults else None
            async_client = AsyncClient(url, token=token, transport=async_transport, **kwargs)
            stack.callback(runner.run, async_client.aclose())
            return Blocking(async_client, runner)

        yield make


@pytest.fixture
def hook(connect: Connect) -> Hook:
    return connect()


# -- schedule -------------------------------------------------------------------------------


def test_scheduled_tasks_fire_with_their_payloads_and_due_times(api: Api, hook: Hook) -> None:
    start = now_ms()
    text_id, bytes_id, dt_id, rfc_id = uid("text"), uid("bytes"), uid("dt"), uid("rfc")
    raw = b"\x00\xffbinary"

    by_delay = hook.schedule(text_id, delay_s=0.3, payload="héllo")
    assert by_delay.created and by_delay.id == text_id
    assert start + 300 <= by_delay.at_ms <= now_ms() + 300 + 1
    by_epoch = hook.schedule(
        bytes_id, at=(start + 400) / 1000, routing_key="fire.custom", payload=raw
    )
    assert by_epoch == Scheduled(bytes_id, start + 400, True)
    naive = datetime.fromtimestamp((start + 450) / 1000, UTC).replace(tzinfo=None)
    assert hook.schedule(dt_id, at=naive).at_ms == start + 450  # naive = UTC
    rfc = datetime.fromtimestamp((start + 500) / 1000, UTC).isoformat()
    assert hook.schedule(rfc_id, at=rfc).at_ms == start + 500

    events = {e.message_id: e for e in collect_until(api.events, rfc_id, timeout_s=15)}
    assert events[text_id].body == "héllo".encode()
    assert events[text_id].routing_key == ROUTED
    assert header_int(events[text_id], "x-due-ms") == by_delay.at_ms
    assert events[bytes_id].body == raw
    assert events[bytes_id].routing_key == "fire.custom"
    assert header_int(events[bytes_id], "x-due-ms") == start + 400
    assert header_int(events[dt_id], "x-due-ms") == start + 450
    for event in events.values():
        assert header_int(event, "x-fired-ms") >= header_int(event, "x-due-ms")
    wait_for(lambda: hook.get(rfc_id) is None, 10, "fired task still stored")


def test_schedule_repeats_safely_and_conflicts_on_other_content(hook: Hook) -> None:
    task_id = uid("same")
    first = hook.schedule(task_id, at=FAR_S + 0.25, payload="a")
    assert first == Scheduled(task_id, FAR_S * 1000 + 250, True)
    assert hook.schedule(task_id, at=FAR_S + 0.25, payload="a") == Scheduled(
        task_id, FAR_S * 1000 + 250, False
    )
    with pytest.raises(Conflict) as caught:
        hook.schedule(task_id, at=FAR_S + 0.25, payload="b")
    assert (caught.value.status, caught.value.code, caught.value.field) == (409, "conflict", "id")
    assert task_id in str(caught.value)


def test_schedule_without_id_gets_a_new_one_and_sub_ms_rounds_up(hook: Hook) -> None:
    first = hook.schedule(at=FAR_S + 0.0001)
    second = hook.schedule(at=FAR_S + 0.0001)
    assert first.id != second.id and len(first.id) == 36
    assert first.at_ms == FAR_S * 1000 + 1


@pytest.mark.parametrize(
    ("kwargs", "status", "field"),
    [
        ({"at": FAR_S, "routing_key": "bad key"}, 422, "routing_key"),
        ({"at": FAR_S, "payload": "x" * 1025}, 422, "payload"),
        ({"at": FAR_S, "payload": b"x" * 1025}, 422, "payload"),
        ({"at": FAR_S, "id": "bad id!"}, 422, "id"),
        ({"at": "yesterday"}, 422, "at"),
        ({"at": 253_402_300_800}, 422, "at"),  # year 10000
        ({"delay_s": 1e15}, None, "delay_s"),  # past 9999: refused by the client
        ({"delay_s": -1}, None, "delay_s"),
        ({"at": FAR_S, "delay_s": 5}, None, "at"),
        ({}, None, "at"),
    ],
)
def test_invalid_schedules_raise_invalid_request_naming_the_field(
    hook: Hook, table: TaskTable, kwargs: dict[str, Any], status: int | None, field: str
) -> None:
    before = table.count()
    with pytest.raises(InvalidRequest) as caught:
        hook.schedule(**kwargs)
    assert (caught.value.status, caught.value.field) == (status, field)
    assert str(caught.value).startswith(f"{field}: ")
    assert table.count() == before


# -- schedule_many ------------------------------------------------------------------------


def test_schedule_many_stores_all_in_order(hook: Hook) -> None:
    prefix = uid("many")
    tasks = [TaskRequest(f"{prefix}-{n}", at=FAR_S + n) for n in range(5)]
    tasks.append(TaskRequest(delay_s=3600, payload=b"\x01"))
    ids = hook.schedule_many(tasks)
    assert ids[:5] == [f"{prefix}-{n}" for n in range(5)]
    assert len(ids) == 6 and ids[5] not in ids[:5]
    status = hook.get(f"{prefix}-3")
    assert status == TaskStatus(f"{prefix}-3", (FAR_S + 3) * 1000, ROUTED, TaskState.SCHEDULED)
    delayed = hook.get(ids[5])
    assert delayed is not None and abs(delayed.at_ms - (now_ms() + 3_600_000)) < 60_000
    assert hook.schedule_many(tasks[:5]) == ids[:5]  # the same batch again: a safe repeat
    assert hook.schedule_many([]) == []


def test_schedule_many_names_the_task_of_an_error_and_writes_nothing(
    hook: Hook, table: TaskTable
) -> None:
    prefix = uid("bad")
    hook.schedule(f"{prefix}-x", at=FAR_S)
    before = table.count()
    good = [TaskRequest(f"{prefix}-{n}", at=FAR_S) for n in range(3)]
    with pytest.raises(Conflict) as conflict:
        hook.schedule_many([*good, TaskRequest(f"{prefix}-x", at=FAR_S + 1)])
    assert conflict.value.field == "tasks[3].id"
    with pytest.raises(InvalidRequest) as invalid:
        hook.schedule_many([*good, TaskRequest(at=FAR_S, routing_key="no way")])
    assert (invalid.value.status, invalid.value.field) == (422, "tasks[3].routing_key")
    with pytest.raises(InvalidRequest) as too_late:
        hook.schedule_many([*good, TaskRequest(delay_s=float("nan"))])
    assert (too_late.value.status, too_late.value.field) == (None, "tasks[3].delay_s")
    with pytest.raises(InvalidRequest) as too_many:
        hook.schedule_many([TaskRequest(at=FAR_S)] * 51)
    assert too_many.value.field == "tasks"
    assert table.count() == before


# -- reschedule, cancel, get ------------------------------------------------------------------


def test_reschedule_moves_the_fire_time(api: Api, hook: Hook) -> None:
    start = now_ms()
    moved, sentinel = uid("mv"), uid("sentinel")
    hook.schedule(moved, at=(start + 600_000) / 1000)
    assert hook.reschedule(moved, at=(start + 500) / 1000) == Scheduled(moved, start + 500, False)
    status = hook.get(moved)
    assert status is not None and status.at_ms == start + 500
    hook.schedule(sentinel, at=(start + 900) / 1000)

    events = [e for e in collect_until(api.events, sentinel, 15) if e.message_id == moved]
    assert len(events) == 1
    assert header_int(events[0], "x-due-ms") == start + 500
    assert header_int(events[0], "x-fired-ms") >= start + 500


def test_reschedule_by_delay_and_its_errors(hook: Hook) -> None:
    task_id = uid("rd")
    hook.schedule(task_id, at=FAR_S)
    before = now_ms()
    moved = hook.reschedule(task_id, delay_s=60.0005)
    assert before + 60_001 <= moved.at_ms <= now_ms() + 60_001
    status = hook.get(task_id)
    assert status is not None and status.at_ms == moved.at_ms
    with pytest.raises(InvalidRequest) as both:
        hook.reschedule(task_id, at=FAR_S, delay_s=1)
    assert (both.value.status, both.value.field) == (None, "at")
    with pytest.raises(InvalidRequest) as bad_at:
        hook.reschedule(task_id, at="soon")
    assert (bad_at.value.status, bad_at.value.field) == (422, "at")
    with pytest.raises(NotFound) as missing:
        hook.reschedule(uid("unknown"), delay_s=5)
    assert (missing.value.status, missing.value.code) == (404, "not_found")


def test_cancel_and_get(hook: Hook) -> None:
    task_id = uid("cx")
    hook.schedule(task_id, at=FAR_S, routing_key="fire.cx")
    assert hook.get(task_id) == TaskStatus(task_id, FAR_S * 1000, "fire.cx", TaskState.SCHEDULED)
    hook.cancel(task_id)
    assert hook.get(task_id) is None
    with pytest.raises(NotFound) as again:
        hook.cancel(task_id)
    assert again.value.status == 404
    with pytest.raises(InvalidRequest) as invalid:
        hook.get("bad id!")
    assert (invalid.value.status, invalid.value.field) == (None, "id")


@pytest.mark.parametrize("task_id", [".", "..", "a..b"])
def test_ids_made_of_dots_are_not_path_segments(hook: Hook, task_id: str) -> None:
    assert hook.schedule(task_id, at=FAR_S).created
    try:
        status = hook.get(task_id)
        assert status is not None and status.id == task_id
        assert hook.reschedule(task_id, at=FAR_S + 1).at_ms == (FAR_S + 1) * 1000
    finally:
        hook.cancel(task_id)
    assert hook.get(task_id) is None


def test_a_task_being_published_is_too_late(hook: Hook, table: TaskTable) -> None:
    task_id = uid("stuck")
    hook.schedule(task_id, at=FAR_S)
    table.mark_firing(task_id)  # armed by some instance: committed to firing

    status = hook.get(task_id)
    assert status is not None and status.state is TaskState.FIRING
    with pytest.raises(TooLate) as cancel:
        hook.cancel(task_id)
    assert (cancel.value.status, cancel.value.code) == (409, "too_late")
    with pytest.raises(TooLate):
        hook.reschedule(task_id, delay_s=60)


# -- auth, health, failures -----------------------------------------------------------------


@pytest.mark.parametrize("token", ["wrong-token", None])
def test_a_wrong_or_missing_token_is_unauthorized(
    connect: Connect, table: TaskTable, token: str | None
) -> None:
    intruder = connect(token=token)
    before = table.count()
    calls: list[Callable[[], object]] = [
        lambda: intruder.schedule(at=FAR_S),
        lambda: intruder.schedule_many([TaskRequest(at=FAR_S)]),
        lambda: intruder.reschedule("x", delay_s=1),
        lambda: intruder.cancel("x"),
        lambda: intruder.get("x"),
    ]
    for call in calls:
        with pytest.raises(Unauthorized) as caught:
            call()
        assert (caught.value.status, caught.value.code) == (401, "unauthorized")
    assert table.count() == before
    assert intruder.ready()  # the probes need no token


def test_health_and_ready(hook: Hook) -> None:
    assert hook.health() == Health(True, ())
    assert hook.ready() is True


def test_nothing_listening_is_unavailable_after_the_retries(connect: Connect) -> None:
    faults = Faults()
    url = f"http://127.0.0.1:{closed_port()}"
    client = connect(url=url, faults=faults, retries=2, backoff_s=0.05)
    with pytest.raises(Unavailable) as caught:
        client.schedule(uid("nobody"), delay_s=1)
    assert (caught.value.status, caught.value.code) == (None, "unreachable")
    assert len(faults.sent) == 3  # the first attempt and two retries
    assert len({body for _, _, body in faults.sent}) == 1  # each the same request
    assert client.ready() is False
    with pytest.raises(Unavailable):
        client.health()
    assert len(faults.sent) == 5  # the probes are not retried


def test_a_retried_delayed_schedule_is_a_safe_repeat(connect: Connect, table: TaskTable) -> None:
    """The answer to the first attempt is lost after the daemon stored the task;
    the retry, sent a back-off later, must not be a conflict: the client made
    the delay absolute before the first attempt."""
    faults = Faults(lose=1)
    client = connect(faults=faults, backoff_s=0.05)
    task_id = uid("retry")
    result = client.schedule(task_id, delay_s=600, payload="x")
    assert result.id == task_id and not result.created  # the lost attempt created it
    assert len(faults.sent) == 2 and faults.sent[0] == faults.sent[1]
    assert faults.sent_at[1] - faults.sent_at[0] >= 0.025  # long enough for "now" to move
    status = client.get(task_id)
    assert status is not None and status.at_ms == result.at_ms

    # Without an id: the client chose it, so the retry names the same task.
    faults = Faults(lose=1)
    client = connect(faults=faults, backoff_s=0.05)
    before = table.count()
    anonymous = client.schedule(delay_s=600)
    assert not anonymous.created and faults.sent[0] == faults.sent[1]
    assert table.count() == before + 1


def test_a_refused_connection_is_retried(connect: Connect) -> None:
    faults = Faults(refuse=2)
    client = connect(faults=faults, backoff_s=0.01)
    task_id = uid("refused")
    assert client.schedule(task_id, at=FAR_S).created
    assert len(faults.sent) == 3
    client.cancel(task_id)


def test_client_errors_are_never_retried(connect: Connect) -> None:
    faults = Faults()
    client = connect(faults=faults, backoff_s=0.01)
    task_id = uid("once")
    client.schedule(task_id, at=FAR_S)
    with pytest.raises(Conflict):
        client.schedule(task_id, at=FAR_S + 1)
    with pytest.raises(NotFound):
        client.cancel(uid("none"))
    with pytest.raises(InvalidRequest):
        client.schedule(at="never")
    assert len(faults.sent) == 4  # one request each
    unauthorized = connect(token="nope", faults=faults, backoff_s=0.01)
    with pytest.raises(Unauthorized):
        unauthorized.get(task_id)
    assert len(faults.sent) == 5


def test_connections_are_kept_alive_between_calls(api: Api, connect: Connect) -> None:
    port = int(api.url.rsplit(":", 1)[1])
    with TcpProxy("127.0.0.1", port) as proxy:
        client = connect(url=f"http://127.0.0.1:{proxy.port}")
        prefix = uid("ka")
        for n in range(10):
            client.schedule(f"{prefix}-{n}", at=FAR_S)
            assert client.get(f"{prefix}-{n}") is not None
        assert proxy.active_connections == 1
        # The daemon went away: Unavailable, not a hang or a driver error.
        proxy.cut()
        with pytest.raises(Unavailable):
            client.get(f"{prefix}-0")


def test_the_async_client_serves_concurrent_calls(api: Api) -> None:
    async def scenario() -> tuple[list[Scheduled], list[TaskStatus | None]]:
        async with AsyncClient(api.url, token=TOKEN) as client:
            prefix = uid("gather")
            made = await asyncio.gather(
                *(client.schedule(f"{prefix}-{n}", at=FAR_S + n) for n in range(20))
            )
            got = await asyncio.gather(*(client.get(s.id) for s in made))
            return list(made), list(got)

    made, got = asyncio.run(scenario())
    assert all(s.created for s in made)
    assert [s.at_ms for s in made] == [(FAR_S + n) * 1000 for n in range(20)]
    assert [g.id if g else None for g in got] == [s.id for s in made]


def test_api_errors_are_triggerhook_errors() -> None:
    from triggerhook.errors import TriggerHookError

    for cls in (InvalidRequest, Unauthorized, NotFound, Conflict, TooLate, Unavailable):
        assert issubclass(cls, ApiError) and issubclass(cls, TriggerHookError)
