"""The Python client (``triggerhook_client``) against a real ``triggerhook run``
daemon (real MariaDB and RabbitMQ), which requires a bearer token.

Every scenario runs twice: with :class:`Client`, and with :class:`AsyncClient`
driven by an asyncio event loop (``Blocking`` below runs each coroutine to the
end on one loop, so the async client keeps its connections between calls).
Events are read by ``api.events`` (routing keys ``fire.#``; dead letters come
as ``fire.dead``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
import pytest
from support.amqp import Received
from support.daemon import TaskTable, closed_port
from support.hook import collect_until, header_int
from support.http import ROUTED, Api, api_daemon
from support.names import uid
from support.tcpproxy import TcpProxy
from support.waiting import now_ms, wait_for
from triggerhook_client import (
    ApiError,
    AsyncClient,
    BatchScheduled,
    BulkCancelled,
    Client,
    Conflict,
    HeaderValue,
    Health,
    InvalidRequest,
    Late,
    NotFound,
    Scheduled,
    TaskPage,
    TaskRequest,
    TaskStatus,
    TaskSummary,
    Timeline,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook_client import At as AtType

from triggerhook.domain.task import TaskState

TOKEN = "client-test-" + secrets.token_hex(8)
FAR_S = 4_000_000_000  # epoch seconds in 2096: never fires during the tests
FAR_MS = FAR_S * 1000
DEAD = "fire.dead"  # the daemon's dead_letter_routing_key: the test consumer gets them


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        api_token=TOKEN,
        max_payload_bytes=1024,
        http_max_batch_tasks=50,
        default_routing_key=ROUTED,
        dead_letter_routing_key=DEAD,
        dead_letter_queue="",
    ) as served:
        yield served
        assert served.daemon.terminate() == 0, served.daemon.tail()
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


@pytest.fixture
def table(api: Api) -> Iterator[TaskTable]:
    with TaskTable(api.database_url) as reader:
        yield reader


# -- one interface over both clients ------------------------------------------------------


class Hook(Protocol):
    """What both clients offer, called synchronously (filters as keywords)."""

    def schedule(
        self,
        id: str | None = None,
        *,
        at: AtType | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
        tags: Iterable[str] | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        late: Late | None = None,
        every: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        until: AtType | None = None,
        until_ms: int | None = None,
        delay_s: float | None = None,
        dst_repeated: str | None = None,
        dst_skipped: str | None = None,
        on_conflict: str | None = None,
    ) -> Scheduled: ...

    def list(
        self,
        *,
        prefix: str | None = ...,
        routing_key: str | None = ...,
        tag: str | None = ...,
        due_after: AtType | None = ...,
        due_after_ms: int | None = ...,
        due_before: AtType | None = ...,
        due_before_ms: int | None = ...,
        state: TaskState | str | None = ...,
        page_size: int = ...,
    ) -> Iterator[TaskSummary]: ...

    def list_page(
        self,
        *,
        prefix: str | None = ...,
        routing_key: str | None = ...,
        tag: str | None = ...,
        due_after: AtType | None = ...,
        due_after_ms: int | None = ...,
        due_before: AtType | None = ...,
        due_before_ms: int | None = ...,
        state: TaskState | str | None = ...,
        limit: int | None = ...,
        cursor: str | None = ...,
    ) -> TaskPage: ...

    def count(
        self,
        *,
        prefix: str | None = ...,
        routing_key: str | None = ...,
        tag: str | None = ...,
        due_after: AtType | None = ...,
        due_after_ms: int | None = ...,
        due_before: AtType | None = ...,
        due_before_ms: int | None = ...,
        state: TaskState | str | None = ...,
    ) -> int: ...

    def timeline(
        self,
        *,
        prefix: str | None = ...,
        routing_key: str | None = ...,
        tag: str | None = ...,
        bucket_ms: int | None = ...,
        buckets: int | None = ...,
        start: AtType | None = ...,
        start_ms: int | None = ...,
        bucket_s: int | None = ...,
    ) -> Timeline: ...

    def cancel_where(
        self,
        *,
        prefix: str | None = ...,
        tag: str | None = ...,
        routing_key: str | None = ...,
        due_after: AtType | None = ...,
        due_after_ms: int | None = ...,
        due_before: AtType | None = ...,
        due_before_ms: int | None = ...,
        timeout_s: float = ...,
    ) -> BulkCancelled: ...

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> builtins.list[str]: ...

    def schedule_batch(self, tasks: Sequence[TaskRequest]) -> builtins.list[BatchScheduled]: ...

    def reschedule(
        self,
        id: str,
        *,
        at: AtType | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        delay_s: float | None = None,
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
        at_ms: int | None = None,
        delay_ms: int | None = None,
        routing_key: str | None = None,
        payload: str | bytes | None = None,
        tags: Iterable[str] | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
        headers: Mapping[str, HeaderValue] | None = None,
        late: Late | None = None,
        every: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        until: AtType | None = None,
        until_ms: int | None = None,
        delay_s: float | None = None,
        dst_repeated: str | None = None,
        dst_skipped: str | None = None,
        on_conflict: str | None = None,
    ) -> Scheduled:
        coro = self.client.schedule(
            id,
            at=at,
            at_ms=at_ms,
            delay_ms=delay_ms,
            delay_s=delay_s,
            routing_key=routing_key,
            payload=payload,
            tags=tags,
            content_type=content_type,
            content_encoding=content_encoding,
            headers=headers,
            late=late,
            every=every,
            cron=cron,
            timezone=timezone,
            until=until,
            until_ms=until_ms,
            dst_repeated=dst_repeated,
            dst_skipped=dst_skipped,
            on_conflict=on_conflict,
        )
        return self._run(coro)

    def list(self, **filters: Any) -> Iterator[TaskSummary]:
        """The whole async iteration, run to its end (arguments checked at the call)."""
        walk = self.client.list(**filters)

        async def every() -> builtins.list[TaskSummary]:
            return [task async for task in walk]

        return iter(self._run(every()))

    def list_page(self, **filters: Any) -> TaskPage:
        return self._run(self.client.list_page(**filters))

    def count(self, **filters: Any) -> int:
        return self._run(self.client.count(**filters))

    def timeline(self, **filters: Any) -> Timeline:
        return self._run(self.client.timeline(**filters))

    def cancel_where(self, **filters: Any) -> BulkCancelled:
        return self._run(self.client.cancel_where(**filters))

    def schedule_many(self, tasks: Sequence[TaskRequest]) -> builtins.list[str]:
        return self._run(self.client.schedule_many(tasks))

    def schedule_batch(self, tasks: Sequence[TaskRequest]) -> builtins.list[BatchScheduled]:
        return self._run(self.client.schedule_batch(tasks))

    def reschedule(
        self,
        id: str,
        *,
        at: AtType | None = None,
        at_ms: int | None = None,
        delay_ms: int | None = None,
        delay_s: float | None = None,
    ) -> Scheduled:
        coro = self.client.reschedule(id, at=at, at_ms=at_ms, delay_ms=delay_ms, delay_s=delay_s)
        return self._run(coro)

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
    connection broken after the daemon committed), each after ``hold()``
    returned (what is to happen before the retry). Records every request."""

    def __init__(
        self, refuse: int = 0, lose: int = 0, hold: Callable[[], None] | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._refuse = refuse
        self._lose = lose
        self._hold = hold
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
                if self._hold is not None:
                    self._hold()
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

    by_delay = hook.schedule(text_id, delay_ms=300, payload="héllo")
    assert by_delay.created and by_delay.id == text_id
    assert start + 300 <= by_delay.due_ms <= now_ms() + 300 + 1
    by_epoch = hook.schedule(bytes_id, at_ms=start + 400, routing_key="fire.custom", payload=raw)
    assert by_epoch == Scheduled(bytes_id, start + 400, True, "created")
    naive = datetime.fromtimestamp((start + 450) / 1000, UTC).replace(tzinfo=None)
    assert hook.schedule(dt_id, at=naive).due_ms == start + 450  # naive = UTC
    rfc = datetime.fromtimestamp((start + 500) / 1000, UTC).isoformat()
    assert hook.schedule(rfc_id, at=rfc).due_ms == start + 500

    events = {e.message_id: e for e in collect_until(api.events, rfc_id, timeout_s=15)}
    assert events[text_id].body == "héllo".encode()
    assert events[text_id].routing_key == ROUTED
    assert header_int(events[text_id], "x-due-ms") == by_delay.due_ms
    assert events[bytes_id].body == raw
    assert events[bytes_id].routing_key == "fire.custom"
    assert header_int(events[bytes_id], "x-due-ms") == start + 400
    assert header_int(events[dt_id], "x-due-ms") == start + 450
    for event in events.values():
        assert header_int(event, "x-fired-ms") >= header_int(event, "x-due-ms")
    wait_for(lambda: hook.get(rfc_id) is None, 10, "fired task still stored")


def test_schedule_repeats_safely_and_conflicts_on_other_content(hook: Hook) -> None:
    task_id = uid("same")
    first = hook.schedule(task_id, at_ms=FAR_MS + 250, payload="a")
    assert first == Scheduled(task_id, FAR_S * 1000 + 250, True, "created")
    assert hook.schedule(task_id, at_ms=FAR_MS + 250, payload="a") == Scheduled(
        task_id, FAR_S * 1000 + 250, False, "exists"
    )
    with pytest.raises(Conflict) as caught:
        hook.schedule(task_id, at_ms=FAR_MS + 250, payload="b")
    assert (caught.value.status, caught.value.code, caught.value.field) == (409, "conflict", "id")
    assert task_id in str(caught.value)


def test_schedule_without_id_gets_a_new_one_and_sub_ms_rounds_up(hook: Hook) -> None:
    first = hook.schedule(at="2096-10-02T07:06:40.0001Z")
    second = hook.schedule(at="2096-10-02T07:06:40.0001Z")
    assert first.id != second.id and len(first.id) == 36
    assert first.due_ms == FAR_S * 1000 + 1


def test_the_deprecated_spellings_still_work(hook: Hook) -> None:
    """delay_s (seconds), a number as at (epoch seconds) and the results'
    at_ms: each warned of, each meaning what it did."""
    with pytest.warns(DeprecationWarning, match="at as a number"):
        made = hook.schedule(uid("secs"), at=FAR_S + 0.0001)  # sub-ms: rounded up
    assert made.due_ms == FAR_S * 1000 + 1
    with pytest.warns(DeprecationWarning, match="Scheduled.at_ms is deprecated"):
        assert made.at_ms == made.due_ms
    before = now_ms()
    with pytest.warns(DeprecationWarning, match="delay_s is deprecated"):
        delayed = hook.schedule(uid("delay-s"), delay_s=600.0005)
    assert before + 600_001 <= delayed.due_ms <= now_ms() + 600_001
    status = hook.get(delayed.id)
    assert status is not None
    with pytest.warns(DeprecationWarning, match="TaskStatus.at_ms is deprecated"):
        assert status.at_ms == delayed.due_ms
    with pytest.warns(DeprecationWarning, match="until as a number"):
        series = hook.schedule(uid("until-s"), every="PT1H", until=FAR_S)
    shown = hook.get(series.id)
    assert shown is not None and shown.until_ms == FAR_MS


@pytest.mark.parametrize(
    ("kwargs", "status", "field"),
    [
        ({"at_ms": FAR_MS, "routing_key": "bad key"}, 422, "routing_key"),
        ({"at_ms": FAR_MS, "payload": "x" * 1025}, 422, "payload"),
        ({"at_ms": FAR_MS, "payload": b"x" * 1025}, 422, "payload"),
        ({"at_ms": FAR_MS, "id": "bad id!"}, 422, "id"),
        ({"at": "yesterday"}, 422, "at"),
        ({"at": "10000-01-01T00:00:00Z"}, 422, "at"),
        ({"at_ms": 253_402_300_800_000}, 422, "at_ms"),  # year 10000
        ({"at_ms": 1.5}, None, "at_ms"),
        ({"delay_ms": 10**18}, None, "delay_ms"),  # past 9999: refused by the client
        ({"delay_ms": -1}, None, "delay_ms"),
        ({"at_ms": FAR_MS, "delay_ms": 5}, None, "at_ms"),
        ({"at": "2096-10-02T07:06:40Z", "at_ms": FAR_MS}, None, "at"),
        ({}, None, "at"),
        # Deprecated spellings: a number as at (converted to at_ms by the client), delay_s.
        ({"at": 253_402_300_800}, None, "at"),  # year 10000
        ({"delay_s": 1e15}, None, "delay_s"),
        ({"delay_s": -1}, None, "delay_s"),
        ({"at_ms": FAR_MS, "delay_s": 5}, None, "at_ms"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
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
    tasks = [TaskRequest(f"{prefix}-{n}", at_ms=(FAR_S + n) * 1000) for n in range(5)]
    tasks.append(TaskRequest(delay_ms=3_600_000, payload=b"\x01"))
    ids = hook.schedule_many(tasks)
    assert ids[:5] == [f"{prefix}-{n}" for n in range(5)]
    assert len(ids) == 6 and ids[5] not in ids[:5]
    status = hook.get(f"{prefix}-3")
    assert status == TaskStatus(f"{prefix}-3", (FAR_S + 3) * 1000, ROUTED, TaskState.SCHEDULED)
    delayed = hook.get(ids[5])
    assert delayed is not None and abs(delayed.due_ms - (now_ms() + 3_600_000)) < 60_000
    assert hook.schedule_many(tasks[:5]) == ids[:5]  # the same batch again: a safe repeat
    assert hook.schedule_many([]) == []


def test_schedule_many_names_the_task_of_an_error_and_writes_nothing(
    hook: Hook, table: TaskTable
) -> None:
    prefix = uid("bad")
    hook.schedule(f"{prefix}-x", at_ms=FAR_MS)
    before = table.count()
    good = [TaskRequest(f"{prefix}-{n}", at_ms=FAR_MS) for n in range(3)]
    with pytest.raises(Conflict) as conflict:
        hook.schedule_many([*good, TaskRequest(f"{prefix}-x", at_ms=(FAR_S + 1) * 1000)])
    assert conflict.value.field == "tasks[3].id"
    with pytest.raises(InvalidRequest) as invalid:
        hook.schedule_many([*good, TaskRequest(at_ms=FAR_MS, routing_key="no way")])
    assert (invalid.value.status, invalid.value.field) == (422, "tasks[3].routing_key")
    with pytest.raises(InvalidRequest) as too_late:
        hook.schedule_many([*good, TaskRequest(delay_ms=-1)])
    assert (too_late.value.status, too_late.value.field) == (None, "tasks[3].delay_ms")
    with pytest.raises(InvalidRequest) as too_many:
        hook.schedule_many([TaskRequest(at_ms=FAR_MS)] * 51)
    assert too_many.value.field == "tasks"
    assert table.count() == before


def test_schedule_batch_answers_each_task_s_outcome_in_order(hook: Hook) -> None:
    stored, new = uid("batch-stored"), uid("batch-new")
    hook.schedule(stored, at_ms=FAR_MS, payload="a")
    kept = hook.schedule_batch(
        [
            TaskRequest(stored, at_ms=FAR_MS + 1, payload="b", on_conflict="keep"),
            TaskRequest(new, at_ms=FAR_MS + 5, on_conflict="keep"),
        ]
    )
    assert kept == [BatchScheduled(stored, False, "kept"), BatchScheduled(new, True, "created")]
    status = hook.get(stored)
    assert status is not None and (status.due_ms, status.payload) == (FAR_MS, b"a")
    replaced = hook.schedule_batch(
        [
            TaskRequest(new, at_ms=FAR_MS + 5, on_conflict="keep"),  # the same task: exists
            TaskRequest(stored, at_ms=FAR_MS + 2, payload="c", on_conflict="replace"),
        ]
    )
    assert replaced == [
        BatchScheduled(new, False, "exists"),
        BatchScheduled(stored, False, "replaced"),
    ]
    status = hook.get(stored)
    assert status is not None and (status.due_ms, status.payload) == (FAR_MS + 2, b"c")
    # schedule_many reads the same answer: its ids only.
    assert hook.schedule_many([TaskRequest(stored, at_ms=FAR_MS, on_conflict="keep")]) == [stored]
    assert hook.schedule_batch([]) == []


# -- reschedule, cancel, get ------------------------------------------------------------------


def test_reschedule_moves_the_fire_time(api: Api, hook: Hook) -> None:
    start = now_ms()
    moved, sentinel = uid("mv"), uid("sentinel")
    hook.schedule(moved, at_ms=start + 600_000)
    assert hook.reschedule(moved, at_ms=start + 500) == Scheduled(
        moved, start + 500, False, "rescheduled"
    )
    status = hook.get(moved)
    assert status is not None and status.due_ms == start + 500
    hook.schedule(sentinel, at_ms=start + 900)

    events = [e for e in collect_until(api.events, sentinel, 15) if e.message_id == moved]
    assert len(events) == 1
    assert header_int(events[0], "x-due-ms") == start + 500
    assert header_int(events[0], "x-fired-ms") >= start + 500


def test_reschedule_by_delay_and_its_errors(hook: Hook) -> None:
    task_id = uid("rd")
    hook.schedule(task_id, at_ms=FAR_MS)
    before = now_ms()
    moved = hook.reschedule(task_id, delay_ms=60_001)
    assert before + 60_001 <= moved.due_ms <= now_ms() + 60_001
    status = hook.get(task_id)
    assert status is not None and status.due_ms == moved.due_ms
    before = now_ms()
    with pytest.warns(DeprecationWarning, match="delay_s is deprecated"):
        moved = hook.reschedule(task_id, delay_s=60.0005)  # deprecated: seconds
    assert before + 60_001 <= moved.due_ms <= now_ms() + 60_001
    assert hook.reschedule(task_id, at="2096-10-02T07:06:40").due_ms == FAR_MS  # no offset: UTC
    with pytest.raises(InvalidRequest) as both:
        hook.reschedule(task_id, at_ms=FAR_MS, delay_ms=1000)
    assert (both.value.status, both.value.field) == (None, "at_ms")
    assert "give exactly one of at, at_ms and delay_ms (given: at_ms, delay_ms)" in str(both.value)
    with pytest.raises(InvalidRequest) as bad_at:
        hook.reschedule(task_id, at="soon")
    assert (bad_at.value.status, bad_at.value.field) == (422, "at")
    with pytest.raises(NotFound) as missing:
        hook.reschedule(uid("unknown"), delay_ms=5000)
    assert (missing.value.status, missing.value.code) == (404, "not_found")


def test_cancel_and_get(hook: Hook) -> None:
    task_id = uid("cx")
    hook.schedule(task_id, at_ms=FAR_MS, routing_key="fire.cx")
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
    assert hook.schedule(task_id, at_ms=FAR_MS).created
    try:
        status = hook.get(task_id)
        assert status is not None and status.id == task_id
        assert hook.reschedule(task_id, at_ms=(FAR_S + 1) * 1000).due_ms == (FAR_S + 1) * 1000
    finally:
        hook.cancel(task_id)
    assert hook.get(task_id) is None


def test_a_task_being_published_is_too_late(hook: Hook, table: TaskTable) -> None:
    task_id = uid("stuck")
    hook.schedule(task_id, at_ms=FAR_MS)
    table.mark_firing(task_id)  # armed by some instance: committed to firing

    status = hook.get(task_id)
    assert status is not None and status.state is TaskState.FIRING
    with pytest.raises(TooLate) as cancel:
        hook.cancel(task_id)
    assert (cancel.value.status, cancel.value.code) == (409, "too_late")
    with pytest.raises(TooLate):
        hook.reschedule(task_id, delay_ms=60_000)


# -- auth, health, failures -----------------------------------------------------------------


@pytest.mark.parametrize("token", ["wrong-token", None])
def test_a_wrong_or_missing_token_is_unauthorized(
    connect: Connect, table: TaskTable, token: str | None
) -> None:
    intruder = connect(token=token)
    before = table.count()
    calls: list[Callable[[], object]] = [
        lambda: intruder.schedule(at_ms=FAR_MS),
        lambda: intruder.schedule_many([TaskRequest(at_ms=FAR_MS)]),
        lambda: intruder.reschedule("x", delay_ms=1000),
        lambda: intruder.cancel("x"),
        lambda: intruder.get("x"),
        lambda: next(intruder.list()),
        intruder.list_page,
        intruder.count,
        intruder.timeline,
        lambda: intruder.cancel_where(prefix="x"),
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
        client.schedule(uid("nobody"), delay_ms=1000)
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
    result = client.schedule(task_id, delay_ms=600_000, payload="x")
    assert result.id == task_id and not result.created  # the lost attempt created it
    assert len(faults.sent) == 2 and faults.sent[0] == faults.sent[1]
    assert faults.sent_at[1] - faults.sent_at[0] >= 0.025  # long enough for "now" to move
    status = client.get(task_id)
    assert status is not None and status.due_ms == result.due_ms

    # Without an id: the client chose it, so the retry names the same task.
    faults = Faults(lose=1)
    client = connect(faults=faults, backoff_s=0.05)
    before = table.count()
    anonymous = client.schedule(delay_ms=600_000)
    assert not anonymous.created and faults.sent[0] == faults.sent[1]
    assert table.count() == before + 1


def test_a_refused_connection_is_retried(connect: Connect) -> None:
    faults = Faults(refuse=2)
    client = connect(faults=faults, backoff_s=0.01)
    task_id = uid("refused")
    assert client.schedule(task_id, at_ms=FAR_MS).created
    assert len(faults.sent) == 3
    client.cancel(task_id)


def test_client_errors_are_never_retried(connect: Connect) -> None:
    faults = Faults()
    client = connect(faults=faults, backoff_s=0.01)
    task_id = uid("once")
    client.schedule(task_id, at_ms=FAR_MS)
    with pytest.raises(Conflict):
        client.schedule(task_id, at_ms=(FAR_S + 1) * 1000)
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
            client.schedule(f"{prefix}-{n}", at_ms=FAR_MS)
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
                *(client.schedule(f"{prefix}-{n}", at_ms=(FAR_S + n) * 1000) for n in range(20))
            )
            got = await asyncio.gather(*(client.get(s.id) for s in made))
            return list(made), list(got)

    made, got = asyncio.run(scenario())
    assert all(s.created for s in made)
    assert [s.due_ms for s in made] == [(FAR_S + n) * 1000 for n in range(20)]
    assert [g.id if g else None for g in got] == [s.id for s in made]


def test_api_errors_are_triggerhook_errors() -> None:
    from triggerhook.errors import TriggerHookError

    for cls in (InvalidRequest, Unauthorized, NotFound, Conflict, TooLate, Unavailable):
        assert issubclass(cls, ApiError) and issubclass(cls, TriggerHookError)


# -- metadata and the late-fire policy --------------------------------------------------------


def test_metadata_goes_out_with_the_event(api: Api, hook: Hook) -> None:
    task_id = uid("meta")
    hook.schedule(
        task_id,
        delay_ms=300,
        payload='{"n": 1}',
        tags=["tenant:7", "billing"],
        content_type="application/json",
        content_encoding="identity",
        headers={"tenant": "7", "attempt": 3, "urgent": True},
    )
    status = hook.get(task_id)
    assert status is not None
    assert status.tags == ("billing", "tenant:7")  # a set, kept sorted
    assert (status.content_type, status.content_encoding) == ("application/json", "identity")
    assert status.headers == {"attempt": 3, "tenant": "7", "urgent": True}
    assert status.late is None  # the daemon's late_policy applies
    [event] = [e for e in collect_until(api.events, task_id, 15) if e.message_id == task_id]
    assert event.body == b'{"n": 1}'
    assert (event.content_type, event.content_encoding) == ("application/json", "identity")
    assert (event.headers["tenant"], event.headers["attempt"], event.headers["urgent"]) == (
        "7",
        3,
        True,
    )


def test_a_repeat_must_carry_the_same_metadata(hook: Hook) -> None:
    task_id = uid("again")
    late: Late = {"deadline": datetime.fromtimestamp(FAR_S + 60, UTC)}
    assert hook.schedule(task_id, at_ms=FAR_MS, tags=["a", "b"], late=late).created
    assert not hook.schedule(task_id, at_ms=FAR_MS, tags=["b", "a", "a"], late=late).created
    status = hook.get(task_id)
    assert status is not None and status.late == {"deadline_ms": (FAR_S + 60) * 1000}
    # What get shows, sent back, is the same task.
    assert not hook.schedule(task_id, at_ms=FAR_MS, tags=status.tags, late=status.late).created
    with pytest.raises(Conflict):
        hook.schedule(task_id, at_ms=FAR_MS, tags=["a", "b"], late="fire")
    with pytest.raises(Conflict):
        hook.schedule(task_id, at_ms=FAR_MS, tags=["a"], late=late)


@pytest.mark.parametrize(
    ("kwargs", "status", "field"),
    [
        ({"headers": {"x-due-ms": 1}}, 422, "headers.x-due-ms"),
        ({"headers": {"h": "v" * 1025}}, 422, "headers.h"),
        ({"headers": {"h": 1.5}}, None, "headers.h"),
        ({"tags": [f"t{i}" for i in range(9)]}, 422, "tags"),
        ({"tags": ["ok", "not ok"]}, 422, "tags[1]"),
        ({"tags": "billing"}, None, "tags"),
        ({"content_type": ""}, 422, "content_type"),
        ({"late": {"skip_after_ms": -1}}, None, "late.skip_after_ms"),
        ({"late": {"deadline": "someday"}}, 422, "late.deadline"),
    ],
)
def test_bad_metadata_raises_invalid_request_naming_the_field(
    hook: Hook, table: TaskTable, kwargs: dict[str, Any], status: int | None, field: str
) -> None:
    before = table.count()
    with pytest.raises(InvalidRequest) as caught:
        hook.schedule(uid("bad"), at_ms=FAR_MS, **kwargs)
    assert (caught.value.status, caught.value.field) == (status, field)
    assert table.count() == before


def test_a_task_found_too_late_is_dead_lettered(api: Api, hook: Hook) -> None:
    past = datetime.fromtimestamp((now_ms() - 60_000) / 1000, UTC)
    skipped, expired, fired = uid("skipped"), uid("expired"), uid("fired")
    hook.schedule_many(
        [
            TaskRequest(skipped, at=past, late={"skip_after_ms": 1000}, headers={"h": "v"}),
            TaskRequest(expired, delay_ms=0, late={"deadline": past}),
            TaskRequest(fired, at=past, late="fire"),
        ]
    )
    seen: dict[str, list[Received]] = {}
    wanted = {(skipped, DEAD), (expired, DEAD), (fired, ROUTED)}

    def all_in() -> bool:
        for event in api.events.collect(10, 0.5):
            seen.setdefault(str(event.message_id), []).append(event)
        return wanted <= {(i, e.routing_key) for i, es in seen.items() for e in es}

    wait_for(all_in, 20, lambda: f"not all received: {sorted(seen)}")
    assert seen[skipped][0].headers["x-triggerhook-dead-cause"] == "late"
    assert seen[skipped][0].headers["h"] == "v"
    assert seen[expired][0].headers["x-triggerhook-dead-cause"] == "late"
    for task_id in (skipped, expired, fired):
        wait_for(lambda: hook.get(task_id) is None, 10)  # noqa: B023


# -- listing, counting, the timeline, bulk cancel ------------------------------------------------


def schedule_tenant(hook: Hook, tenant: str, count: int = 12) -> list[str]:
    """``count`` tasks of a tenant: two per second from FAR_S, keys fire.a and
    fire.b in turn, the first three also tagged vip."""
    tasks = [
        TaskRequest(
            f"{tenant}:{i:02}",
            at_ms=(FAR_S + i // 2) * 1000,
            routing_key=("fire.a", "fire.b")[i % 2],
            tags=[tenant, *(["vip"] if i < 3 else [])],
        )
        for i in range(count)
    ]
    return hook.schedule_many(tasks)


def test_list_walks_every_page_in_due_order(connect: Connect) -> None:
    faults = Faults()  # counts the requests
    client = connect(faults=faults)
    tenant = uid("walk")
    ids = schedule_tenant(client, tenant, 25)
    before = len(faults.sent)
    walked = list(client.list(tag=tenant, page_size=10))
    assert [t.id for t in walked] == ids
    assert len(faults.sent) - before == 3  # pages of 10, 10 and 5
    assert walked[0] == TaskSummary(
        ids[0], FAR_S * 1000, "fire.a", TaskState.SCHEDULED, tags=tuple(sorted([tenant, "vip"]))
    )
    assert all(isinstance(t, TaskSummary) and not isinstance(t, TaskStatus) for t in walked)
    # Exactly a page: the last full page has a cursor, the next one is empty.
    before = len(faults.sent)
    assert len(list(client.list(prefix=f"{tenant}:0", page_size=5))) == 10
    assert len(faults.sent) - before == 3
    assert list(client.list(tag=uid("nobody"))) == []


def test_list_page_count_and_filters(hook: Hook) -> None:
    tenant = uid("tenant")
    ids = schedule_tenant(hook, tenant)
    first = hook.list_page(tag=tenant, limit=5)
    second = hook.list_page(tag=tenant, limit=5, cursor=first.next_cursor)
    third = hook.list_page(tag=tenant, limit=5, cursor=second.next_cursor)
    assert [t.id for t in first.tasks + second.tasks + third.tasks] == ids
    assert third.next_cursor is None
    by_key = hook.list(prefix=tenant, routing_key="fire.b")
    assert [t.id for t in by_key] == ids[1::2]
    ranged = hook.list(
        prefix=tenant,
        due_after=datetime.fromtimestamp(FAR_S + 2, UTC),
        due_before=f"{datetime.fromtimestamp(FAR_S + 4, UTC).isoformat()}",
    )
    assert [t.id for t in ranged] == ids[4:8]
    assert hook.count(tag=tenant) == 12
    assert hook.count(tag="vip", prefix=tenant) == 3
    assert hook.count(prefix=tenant, due_before="2096-10-02T07:06:41Z") == 2
    with pytest.warns(DeprecationWarning, match="due_before as a number"):
        assert hook.count(prefix=tenant, due_before=FAR_S + 1) == 2  # deprecated: seconds
    assert hook.count(prefix=tenant, due_before_ms=FAR_S * 1000 + 1000) == 2
    assert hook.count(prefix=tenant, due_after_ms=FAR_S * 1000 + 1000) == 10
    assert hook.count(prefix=tenant, state=TaskState.FIRING) == 0
    assert hook.count(prefix=tenant, state="scheduled") == 12


def test_timeline_counts_per_routing_key(hook: Hook) -> None:
    tenant = uid("line")
    schedule_tenant(hook, tenant)
    start = datetime.fromtimestamp(FAR_S, UTC)
    line = hook.timeline(prefix=tenant, bucket_ms=2000, buckets=3, start=start)
    assert hook.timeline(prefix=tenant, bucket_ms=2000, buckets=3, start_ms=FAR_S * 1000) == line
    assert line == Timeline(FAR_S * 1000, 2000, 3, {"fire.a": (2, 2, 2), "fire.b": (2, 2, 2)})
    assert line.end_ms == (FAR_S + 6) * 1000
    assert hook.timeline(prefix=uid("none"), start="2096-10-02T07:06:40Z").counts == {}


def test_cancel_where_cancels_what_the_filters_name(hook: Hook, table: TaskTable) -> None:
    tenant = uid("bulk")
    ids = schedule_tenant(hook, tenant)
    bystander = uid("bystander")
    hook.schedule(bystander, at_ms=FAR_MS, routing_key="fire.a")
    assert hook.cancel_where(tag=tenant, routing_key="fire.a") == BulkCancelled(6, 0)
    assert hook.cancel_where(tag=tenant, routing_key="fire.a") == BulkCancelled(0, 0)
    due_after = "2096-10-02T07:06:45Z"  # FAR_S + 5
    assert hook.cancel_where(prefix=tenant, due_after=due_after) == BulkCancelled(1, 0)
    assert [t.id for t in hook.list(prefix=tenant)] == ids[1:10:2]
    table.mark_firing(ids[1])  # armed by some instance: committed to firing
    assert hook.cancel_where(tag=tenant) == BulkCancelled(4, 1)
    assert table.ids() >= {ids[1], bystander}
    assert hook.get(bystander) is not None
    hook.cancel(bystander)


def test_cancel_where_names_some_tasks_or_sends_nothing(connect: Connect) -> None:
    faults = Faults()
    client = connect(faults=faults)
    nothing_named: list[dict[str, Any]] = [{}, {"due_before": "2096-10-02T07:06:40Z"}]
    for filters in nothing_named:
        with pytest.raises(InvalidRequest) as caught:
            client.cancel_where(**filters)
        assert caught.value.status is None
        assert "prefix, tag and routing_key" in str(caught.value)
    with pytest.raises(InvalidRequest) as bad:
        client.cancel_where(tag="not a tag")
    assert (bad.value.status, bad.value.field) == (422, "tag")
    assert len(faults.sent) == 1  # only the one the daemon refused


def test_a_retried_bulk_cancel_is_safe(connect: Connect, table: TaskTable) -> None:
    """The first answer is lost after the daemon cancelled: the retry cancels
    nothing more (idempotent), and says so."""
    setup = connect()
    tenant = uid("lost")
    ids = schedule_tenant(setup, tenant, 5)
    faults = Faults(lose=1)
    client = connect(faults=faults, backoff_s=0.01)
    assert client.cancel_where(tag=tenant) == BulkCancelled(0, 0)  # the lost attempt did it
    assert len(faults.sent) == 2 and faults.sent[0] == faults.sent[1]
    assert faults.sent[0][:2] == ("POST", "/v1/tasks/cancel")
    assert not table.ids() & set(ids)


def test_listing_errors_name_the_callers_arguments(hook: Hook) -> None:
    with pytest.raises(InvalidRequest) as walked:
        list(hook.list(page_size=1001))
    assert (walked.value.status, walked.value.field) == (422, "page_size")
    with pytest.raises(InvalidRequest) as cursor:
        hook.list_page(cursor="bm9wZQ")
    assert (cursor.value.status, cursor.value.field) == (422, "cursor")
    with pytest.raises(InvalidRequest) as bucket:
        hook.timeline(bucket_ms=10**11)
    assert (bucket.value.status, bucket.value.field) == (422, "bucket_ms")
    with pytest.raises(InvalidRequest) as local:
        hook.count(due_after=[1])  # type: ignore[arg-type]
    assert (local.value.status, local.value.field) == (None, "due_after")


# -- series ---------------------------------------------------------------------------------------


def test_on_conflict_keeps_or_replaces_through_the_client(hook: Hook) -> None:
    task_id = uid("upsert")
    assert hook.schedule(task_id, at_ms=FAR_MS, payload="a").outcome == "created"
    kept = hook.schedule(task_id, at_ms=FAR_MS + 1, payload="b", on_conflict="keep")
    assert (kept.outcome, kept.due_ms, kept.created) == ("kept", FAR_MS, False)
    replaced = hook.schedule(task_id, at_ms=FAR_MS + 2, payload="c", on_conflict="replace")
    assert (replaced.outcome, replaced.due_ms) == ("replaced", FAR_MS + 2)
    status = hook.get(task_id)
    assert status is not None and (status.due_ms, status.payload) == (FAR_MS + 2, b"c")
    with pytest.raises(Conflict):
        hook.schedule(task_id, at_ms=FAR_MS, payload="a")  # error: the default
    with pytest.raises(InvalidRequest) as refused:
        hook.schedule(task_id, at_ms=FAR_MS, on_conflict="later")
    assert (refused.value.status, refused.value.field) == (422, "on_conflict")


# Berlin's clocks go back at 01:00 UTC on 2030-10-27: 02:30 is shown at 00:30 and 01:30 UTC.
BERLIN_BACK_MS = 1_919_289_600_000  # 2030-10-27T00:00:00Z
FIRST_PASS_MS, SECOND_PASS_MS = BERLIN_BACK_MS + 1_800_000, BERLIN_BACK_MS + 5_400_000


def test_a_cron_series_keeps_its_dst_policy(hook: Hook) -> None:
    def berlin(
        task_id: str, dst_repeated: str | None = None, dst_skipped: str | None = None
    ) -> Scheduled:
        return hook.schedule(
            task_id,
            cron="30 2 * * *",
            timezone="Europe/Berlin",
            at_ms=BERLIN_BACK_MS,
            dst_repeated=dst_repeated,
            dst_skipped=dst_skipped,
        )

    plain, last = uid("dst"), uid("dst-last")
    assert berlin(plain).due_ms == FIRST_PASS_MS  # cron's rule: the first pass
    assert berlin(last, dst_repeated="last", dst_skipped="skip").due_ms == SECOND_PASS_MS
    status = hook.get(last)
    assert status is not None
    assert (status.dst_repeated, status.dst_skipped) == ("last", "skip")
    shown = hook.get(plain)
    assert shown is not None and (shown.dst_repeated, shown.dst_skipped) == (None, None)
    # The same again is a safe retry; another policy is other content.
    assert berlin(last, dst_repeated="last", dst_skipped="skip").outcome == "exists"
    with pytest.raises(Conflict):
        berlin(last, dst_repeated="both", dst_skipped="skip")
    with pytest.raises(InvalidRequest) as refused:
        hook.schedule(uid("dst"), every="PT1M", dst_repeated="last")
    assert (refused.value.status, refused.value.field) == (422, "dst_repeated")


def test_a_series_fires_each_occurrence_and_ends_at_until(api: Api, hook: Hook) -> None:
    task_id = uid("series")
    first_ms = now_ms() + 300
    made = hook.schedule(
        task_id, at_ms=first_ms, every="PT1S", until_ms=first_ms + 1000, payload="s"
    )
    assert made == Scheduled(task_id, first_ms, True, "created")
    status = hook.get(task_id)
    assert status is not None
    assert (status.every, status.cron, status.until_ms, status.occurrence, status.stopping) == (
        "PT1S",
        None,
        first_ms + 1000,
        1,
        False,
    )
    [listed] = hook.list(prefix=task_id)
    assert (listed.every, listed.until_ms, listed.occurrence) == ("PT1S", first_ms + 1000, 1)
    wait_for(lambda: hook.get(task_id) is None, 15, "the series did not end at until")
    sentinel = hook.schedule(uid("sentinel"), delay_ms=0).id
    fired = [e for e in collect_until(api.events, sentinel, 15) if e.message_id == task_id]
    assert sorted({(header_int(e, "x-occurrence"), header_int(e, "x-due-ms")) for e in fired}) == [
        (1, first_ms),
        (2, first_ms + 1000),
    ]
    assert all(e.body == b"s" for e in fired)


def test_an_untimed_series_starts_one_every_from_now_or_at_the_next_minute(hook: Hook) -> None:
    before = now_ms()
    every = hook.schedule(uid("every"), every="PT10M", tags=["series"])
    assert before + 600_000 <= every.due_ms <= now_ms() + 600_000 + 1
    cron = hook.schedule(uid("cron"), cron="*/5 * * * *", timezone="Europe/Berlin", until_ms=FAR_MS)
    assert cron.due_ms % 300_000 == 0 and before <= cron.due_ms <= now_ms() + 300_000
    status = hook.get(cron.id)
    assert status is not None
    assert (status.due_ms, status.every, status.cron, status.timezone) == (
        cron.due_ms,
        None,
        "*/5 * * * *",
        "Europe/Berlin",
    )
    assert (status.until_ms, status.occurrence) == (FAR_S * 1000, 1)
    for task_id in (every.id, cron.id):
        hook.cancel(task_id)  # a cancel stops a series
        assert hook.get(task_id) is None


@pytest.mark.parametrize(
    "series",
    [{"every": "PT10M"}, {"cron": "0 0 1 1 *", "timezone": "Europe/Berlin"}],
    ids=["every", "cron"],
)
def test_a_retried_untimed_series_is_a_safe_repeat(
    connect: Connect, table: TaskTable, series: dict[str, str]
) -> None:
    """The first attempt's answer is lost after the daemon stored the series;
    the retry, sent a back-off later, names the same first occurrence (the
    client chose it before the first attempt), so it is a safe repeat."""
    faults = Faults(lose=1)
    client = connect(faults=faults, backoff_s=0.05)
    before = table.count()
    result = client.schedule(uid("retry-series"), **series)  # type: ignore[arg-type]
    assert not result.created  # the lost attempt created it
    assert len(faults.sent) == 2 and faults.sent[0] == faults.sent[1]
    assert faults.sent_at[1] - faults.sent_at[0] >= 0.025  # long enough for "now" to move
    assert table.count() == before + 1
    status = client.get(result.id)
    assert status is not None and (status.due_ms, status.occurrence) == (result.due_ms, 1)
    client.cancel(result.id)


def test_a_retry_after_the_first_occurrence_fired_is_a_conflict(api: Api, connect: Connect) -> None:
    """The documented limit: the lost attempt's series has moved on to its
    second occurrence when the retry arrives, so the daemon sees other
    content; get shows the caller's schedule, past its first occurrence."""
    task_id = uid("moved-on")
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def until_it_fired() -> None:
        with httpx.Client(base_url=api.url, headers=headers, timeout=10) as raw:
            wait_for(
                lambda: raw.get(f"/v1/tasks/{task_id}").json().get("occurrence", 0) >= 2,
                15,
                "the first occurrence did not fire",
            )

    faults = Faults(lose=1, hold=until_it_fired)
    client = connect(faults=faults, backoff_s=0.01)
    with pytest.raises(Conflict):
        client.schedule(task_id, every="PT1S", until_ms=FAR_MS)
    assert len(faults.sent) == 2 and faults.sent[0] == faults.sent[1]
    status = client.get(task_id)
    assert status is not None and status.every == "PT1S"
    assert status.occurrence is not None and status.occurrence >= 2
    with contextlib.suppress(TooLate):  # being published: that occurrence is the last
        client.cancel(task_id)
    wait_for(lambda: client.get(task_id) is None, 10, "the series did not stop")


@pytest.mark.parametrize(
    ("kwargs", "status", "field"),
    [
        ({"every": "P1M"}, None, "every"),  # refused by the client
        ({"every": "PT0.5S"}, None, "every"),
        ({"until": "2096-10-02T07:06:40Z"}, None, "at"),  # not a series, and no time
        ({"until_ms": FAR_MS}, None, "at"),
        ({"every": "PT1S", "cron": "* * * * *"}, 422, "every"),
        ({"cron": "61 * * * *"}, 422, "cron"),
        ({"cron": "* * * *"}, 422, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, 422, "timezone"),
        ({"every": "PT1S", "timezone": "UTC"}, 422, "timezone"),
        ({"every": "PT1S", "until": "yesterday"}, 422, "until"),
        ({"every": "PT1S", "at_ms": FAR_MS, "until": "2096-10-02T07:06:39Z"}, 422, "until"),
        ({"every": "PT1S", "at_ms": FAR_MS, "until_ms": FAR_MS - 1}, 422, "until_ms"),
        ({"at_ms": FAR_MS, "until": "2096-10-02T07:06:41Z"}, 422, "until"),
        ({"at_ms": FAR_MS, "until_ms": FAR_MS + 1}, 422, "until_ms"),
    ],
)
def test_bad_series_raise_invalid_request_naming_the_field(
    hook: Hook, table: TaskTable, kwargs: dict[str, Any], status: int | None, field: str
) -> None:
    before = table.count()
    with pytest.raises(InvalidRequest) as caught:
        hook.schedule(uid("bad"), **kwargs)
    assert (caught.value.status, caught.value.field) == (status, field)
    with pytest.raises(InvalidRequest) as in_batch:
        hook.schedule_many([TaskRequest(uid("ok"), every="PT1M"), TaskRequest(**kwargs)])
    assert (in_batch.value.status, in_batch.value.field) == (status, f"tasks[1].{field}")
    assert table.count() == before
