"""The clients' calls of a series' life (pause, resume, trigger, backfill) and
a series' catch-up policy: first against scripted answers (httpx.MockTransport:
the requests built, the retry decisions, the answers read), then the real
:class:`AsyncClient` against the daemon's own HTTP application over the
in-memory store (as tests/unit/test_client_contract.py does for the other
calls), each result checked against what the store then holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from support.fakes import DEFAULT_NOW_MS
from support.served import served
from triggerhook_client import (
    ApiError,
    AsyncClient,
    Client,
    Conflict,
    Copies,
    InvalidRequest,
    NotASeries,
    NotFound,
    Scheduled,
    SeriesChange,
    TaskState,
    TaskSummary,
    Unavailable,
)

from triggerhook.app import TriggerHook
from triggerhook.domain.series import PARKED_MS
from triggerhook.settings import Settings

URL = "http://daemon.test"
AT_MS = 4_000_000_000_000


class Script:
    """Answers requests from a list (the last one repeats) and records them."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def sent(self) -> list[tuple[str, str, bytes]]:
        """Each request's method, path as sent (not decoded) and body."""
        return [(r.method, r.url.raw_path.decode(), r.content) for r in self.requests]


def error(status: int, code: str, field: str | None = None) -> httpx.Response:
    body: dict[str, str] = {"code": code, "message": f"{code} happened"}
    if field:
        body["field"] = field
    return httpx.Response(status, json={"error": body})


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def make(script: Script, **kwargs: float) -> Client:
        client = Client(URL, transport=httpx.MockTransport(script), backoff_s=0.001, **kwargs)  # type: ignore[arg-type]
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def done(outcome: str) -> httpx.Response:
    return httpx.Response(200, json={"id": "s", "outcome": outcome})


def copied(outcome: str, *copies: tuple[int, str]) -> httpx.Response:
    listed = [{"id": f"s:{due}", "due_ms": due, "outcome": how} for due, how in copies]
    return httpx.Response(200, json={"id": "s", "outcome": outcome, "copies": listed})


# -- the requests and the answers ----------------------------------------------------------------


def test_pause_and_resume_post_no_body_and_read_the_outcome(
    clients: Callable[..., Client],
) -> None:
    script = Script(done("paused"), done("paused_after_this"), done("resumed"), done("ended"))
    client = clients(script)
    assert client.pause("s") == SeriesChange("s", "paused")
    assert client.pause("s") == SeriesChange("s", "paused_after_this")
    assert client.resume("s") == SeriesChange("s", "resumed")
    assert client.resume("s.1") == SeriesChange("s", "ended")  # the answer's id is read
    assert script.sent() == [
        ("POST", "/v1/tasks/s/pause", b""),
        ("POST", "/v1/tasks/s/pause", b""),
        ("POST", "/v1/tasks/s/resume", b""),
        ("POST", "/v1/tasks/s%2E1/resume", b""),  # dots encoded, as in every task path
    ]
    assert "content-type" not in script.requests[0].headers


def test_trigger_and_backfill_read_their_copies(clients: Callable[..., Client]) -> None:
    script = Script(
        copied("triggered", (AT_MS, "created")),
        copied("backfilled", (AT_MS - 120_000, "exists"), (AT_MS - 60_000, "created")),
        copied("backfilled"),
    )
    client = clients(script)
    assert client.trigger("s") == Copies(
        "s", "triggered", (Scheduled(f"s:{AT_MS}", AT_MS, True, "created"),)
    )
    assert client.backfill("s", from_ms=AT_MS - 150_000, to_ms=AT_MS) == Copies(
        "s",
        "backfilled",
        (
            Scheduled(f"s:{AT_MS - 120_000}", AT_MS - 120_000, False, "exists"),
            Scheduled(f"s:{AT_MS - 60_000}", AT_MS - 60_000, True, "created"),
        ),
    )
    assert client.backfill("s", from_ms=0, to_ms=1) == Copies("s", "backfilled", ())
    methods_and_paths = [(method, path) for method, path, _ in script.sent()]
    assert methods_and_paths == [
        ("POST", "/v1/tasks/s/trigger"),
        ("POST", "/v1/tasks/s/backfill"),
        ("POST", "/v1/tasks/s/backfill"),
    ]
    assert json.loads(script.requests[1].content) == {
        "from_ms": AT_MS - 150_000,
        "to_ms": AT_MS,
    }
    assert script.requests[1].headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (error(404, "not_found"), NotFound),
        (error(409, "not_a_series"), NotASeries),
        (error(409, "conflict"), Conflict),  # a trigger's copy id holds another task
        (error(422, "invalid", "id"), InvalidRequest),
    ],
)
def test_refusals_raise_as_cancel_does(
    clients: Callable[..., Client], answer: httpx.Response, raised: type[ApiError]
) -> None:
    calls: list[Callable[[Client], object]] = [
        lambda c: c.pause("s"),
        lambda c: c.resume("s"),
        lambda c: c.trigger("s"),
        lambda c: c.backfill("s", from_ms=0, to_ms=1),
    ]
    for call in calls:
        script = Script(answer)
        with pytest.raises(raised) as caught:
            call(clients(script))
        assert type(caught.value) is raised
        assert caught.value.status == answer.status_code
        assert len(script.requests) == 1  # a refusal is final


def test_not_a_series_is_not_a_conflict(clients: Callable[..., Client]) -> None:
    """A caller catching Conflict (a create's other content) does not catch it."""
    with pytest.raises(NotASeries) as caught:
        clients(Script(error(409, "not_a_series"))).pause("one-off")
    assert not isinstance(caught.value, Conflict)
    assert caught.value.code == "not_a_series"


def test_pause_and_resume_are_retried_with_the_same_request(
    clients: Callable[..., Client],
) -> None:
    calls: list[tuple[Callable[[Client], object], httpx.Response]] = [
        (lambda c: c.pause("s"), done("paused")),
        (lambda c: c.resume("s"), done("resumed")),
    ]
    for call, answer in calls:
        script = Script(error(503, "unavailable"), answer)
        call(clients(script))
        assert len(script.requests) == 2
        assert len(set(script.sent())) == 1  # the same method, path and bytes


def test_a_backfill_is_never_retried(clients: Callable[..., Client]) -> None:
    """Its past copies fire at once and are deleted: a second attempt after a
    lost answer would write and fire them again."""
    script = Script(error(503, "unavailable"), copied("backfilled", (1, "exists")))
    with pytest.raises(Unavailable):
        clients(script).backfill("s", from_ms=1, to_ms=2)
    assert len(script.requests) == 1


def test_trigger_is_never_retried(clients: Callable[..., Client]) -> None:
    """The daemon names the copy by its own clock: a second attempt after a
    lost answer would fire a second copy."""
    for answer in (error(503, "unavailable"), httpx.Response(502, text="bad gateway")):
        script = Script(answer, copied("triggered", (AT_MS, "created")))
        with pytest.raises(Unavailable):
            clients(script).trigger("s")
        assert len(script.requests) == 1

    def dropped(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=request)

    sent: list[httpx.Request] = []

    def recorded(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return dropped(request)

    with (
        Client(URL, transport=httpx.MockTransport(recorded), backoff_s=0.001) as client,
        pytest.raises(Unavailable),
    ):
        client.trigger("s")
    assert len(sent) == 1


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.pause("bad id!"), "id"),
        (lambda c: c.resume("count"), "id"),  # a path of the API, never a task
        (lambda c: c.trigger(""), "id"),
        (lambda c: c.backfill("s", from_ms=1.5, to_ms=2), "from_ms"),
        (lambda c: c.backfill("s", from_ms=1, to_ms="2030-01-01"), "to_ms"),
        (lambda c: c.backfill("s", from_ms=True, to_ms=2), "from_ms"),
        (lambda c: c.schedule("s", every="PT1M", catch_up=1), "catch_up"),
        (lambda c: c.schedule("s", every="PT1M", catch_up="all", catch_up_max=5.0), "catch_up_max"),
        (
            lambda c: c.schedule("s", every="PT1M", catch_up="all", catch_up_max=True),
            "catch_up_max",
        ),
    ],
)
def test_input_the_client_can_check_is_refused_without_a_request(
    clients: Callable[..., Client], call: Callable[[Client], object], field: str
) -> None:
    script = Script(done("paused"))
    with pytest.raises(InvalidRequest) as caught:
        call(clients(script))
    assert (caught.value.status, caught.value.field) == (None, field)
    assert script.requests == []


def test_the_daemons_range_errors_name_the_callers_arguments(
    clients: Callable[..., Client],
) -> None:
    script = Script(error(422, "invalid", "to_ms"))
    with pytest.raises(InvalidRequest) as caught:
        clients(script).backfill("s", from_ms=1, to_ms=AT_MS)
    assert (caught.value.status, caught.value.field) == (422, "to_ms")


def test_schedule_sends_the_catch_up_policy(clients: Callable[..., Client]) -> None:
    created = httpx.Response(201, json={"id": "s", "due_ms": AT_MS, "outcome": "created"})
    script = Script(created)
    client = clients(script)
    client.schedule("s", at_ms=AT_MS, every="PT1M", catch_up="all", catch_up_max=7)
    client.schedule("s", at_ms=AT_MS, cron="* * * * *", catch_up="skip")
    client.schedule("s", at_ms=AT_MS)
    bodies = [json.loads(r.content) for r in script.requests]
    assert [{k: b.get(k) for k in ("catch_up", "catch_up_max")} for b in bodies] == [
        {"catch_up": "all", "catch_up_max": 7},
        {"catch_up": "skip", "catch_up_max": None},
        {"catch_up": None, "catch_up_max": None},  # not sent: the daemon's default
    ]
    assert "catch_up" not in bodies[2] and "catch_up_max" not in bodies[2]


def test_get_reads_a_paused_series_and_its_policy(clients: Callable[..., Client]) -> None:
    shown = {
        "id": "s",
        "due_ms": PARKED_MS,
        "routing_key": "k",
        "state": "scheduled",
        "every": "PT1M",
        "catch_up": "all",
        "catch_up_max": 7,
        "occurrence": 3,
        "paused": True,
        "resume_ms": AT_MS,
        "payload": "",
    }
    client = clients(Script(httpx.Response(200, json=shown)))
    status = client.get("s")
    assert status is not None
    assert (status.paused, status.resume_ms, status.catch_up, status.catch_up_max) == (
        True,
        AT_MS,
        "all",
        7,
    )
    running = {k: v for k, v in shown.items() if k not in ("paused", "resume_ms")}
    client = clients(Script(httpx.Response(200, json={"tasks": [running], "next_cursor": None})))
    [listed] = list(client.list())
    assert (listed.paused, listed.resume_ms) == (False, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [("paused", False), ("resume_ms", "soon"), ("catch_up", 3), ("catch_up_max", -1)],
)
def test_an_unexpected_series_field_is_an_api_error(
    clients: Callable[..., Client], field: str, value: object
) -> None:
    task = {"id": "s", "due_ms": 1, "routing_key": "k", "state": "scheduled", field: value}
    with pytest.raises(ApiError) as caught:
        clients(Script(httpx.Response(200, json=task))).get("s")
    assert caught.value.code == "bad_response"
    assert field in caught.value.message


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, json={"id": "s"}),  # no outcome
        httpx.Response(200, json={"id": "s", "outcome": "triggered"}),  # no copies
        httpx.Response(200, json={"id": "s", "outcome": "triggered", "copies": [{"id": "s:1"}]}),
        httpx.Response(200, json={"id": "s", "outcome": "triggered", "copies": ["s:1"]}),
    ],
)
def test_an_unexpected_copies_answer_is_an_api_error(
    clients: Callable[..., Client], answer: httpx.Response
) -> None:
    with pytest.raises(ApiError) as caught:
        clients(Script(answer)).trigger("s")
    assert caught.value.code == "bad_response"


def test_the_async_client_makes_the_same_calls() -> None:
    script = Script(
        done("paused"),
        done("resumed"),
        copied("triggered", (AT_MS, "created")),
        copied("backfilled", (AT_MS - 60_000, "exists")),
        error(409, "not_a_series"),
    )

    async def run() -> None:
        transport = httpx.MockTransport(script)
        async with AsyncClient(URL, transport=transport, backoff_s=0.001) as client:
            assert await client.pause("s") == SeriesChange("s", "paused")
            assert await client.resume("s") == SeriesChange("s", "resumed")
            triggered = await client.trigger("s")
            assert [c.id for c in triggered.copies] == [f"s:{AT_MS}"]
            backfilled = await client.backfill("s", from_ms=AT_MS - 60_000, to_ms=AT_MS)
            assert backfilled.copies == (
                Scheduled(f"s:{AT_MS - 60_000}", AT_MS - 60_000, False, "exists"),
            )
            with pytest.raises(NotASeries):
                await client.pause("one-off")

    asyncio.run(run())
    assert [path for _, path, _ in script.sent()] == [
        "/v1/tasks/s/pause",
        "/v1/tasks/s/resume",
        "/v1/tasks/s/trigger",
        "/v1/tasks/s/backfill",
        "/v1/tasks/one-off/pause",
    ]


# -- against the daemon's own HTTP application ---------------------------------------------------

NOW_MS = int(DEFAULT_NOW_MS)  # the engine's clock stands still: nothing is ever due
MINUTE_MS = 60_000


@dataclass
class InProcess:
    hook: TriggerHook
    app: web.Application

    def serve(self, scenario: Callable[[AsyncClient], Awaitable[None]]) -> None:
        """Run ``scenario`` with the real client of this daemon (no retries)."""

        async def run() -> None:
            server = TestServer(self.app)
            await server.start_server()
            try:
                async with AsyncClient(str(server.make_url("")), retries=0) as client:
                    await scenario(client)
            finally:
                await server.close()

        asyncio.run(run())


@pytest.fixture
def daemon() -> Iterator[InProcess]:
    with served(Settings(instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1)) as made:
        yield InProcess(made.hook, made.api.app)


def test_a_series_life_through_the_client(daemon: InProcess) -> None:
    first_ms = NOW_MS + MINUTE_MS

    async def scenario(client: AsyncClient) -> None:
        made = await client.schedule(
            "s", at_ms=first_ms, every="PT1M", catch_up="all", catch_up_max=5
        )
        assert made == Scheduled("s", first_ms, True, "created")
        shown = await client.get("s")
        assert shown is not None
        assert (shown.catch_up, shown.catch_up_max, shown.paused) == ("all", 5, False)

        assert await client.pause("s") == SeriesChange("s", "paused")
        assert await client.pause("s") == SeriesChange("s", "paused")  # again: no change
        paused = await client.get("s")
        assert paused is not None
        assert (paused.paused, paused.resume_ms, paused.due_ms) == (True, first_ms, PARKED_MS)
        assert await client.resume("s") == SeriesChange("s", "resumed")
        resumed = await client.get("s")
        assert resumed is not None
        assert (resumed.paused, resumed.resume_ms, resumed.due_ms) == (False, None, first_ms)

        triggered = await client.trigger("s")
        assert triggered == Copies(
            "s", "triggered", (Scheduled(f"s:{NOW_MS}", NOW_MS, True, "created"),)
        )

        span = {"from_ms": NOW_MS - 3 * MINUTE_MS, "to_ms": NOW_MS}
        backfilled = await client.backfill("s", **span)
        dues = [NOW_MS - 3 * MINUTE_MS, NOW_MS - 2 * MINUTE_MS, NOW_MS - MINUTE_MS]
        assert backfilled == Copies(
            "s", "backfilled", tuple(Scheduled(f"s:{d}", d, True, "created") for d in dues)
        )
        again = await client.backfill("s", **span)  # the copies still pending: exists
        assert [c.outcome for c in again.copies] == ["exists"] * 3

    daemon.serve(scenario)
    for due in (NOW_MS, NOW_MS - 3 * MINUTE_MS, NOW_MS - MINUTE_MS):
        info = daemon.hook.get(f"s:{due}")
        assert info is not None and info.task.due_ms == due
        assert info.task.meta.recur is None  # a one-off copy
    series = daemon.hook.get("s")
    assert series is not None and series.task.due_ms == first_ms


def test_the_daemons_refusals_as_the_client_raises_them(daemon: InProcess) -> None:
    async def scenario(client: AsyncClient) -> None:
        await client.schedule("one-off", at_ms=NOW_MS + MINUTE_MS)
        await client.schedule("s", every="PT1M")
        for call in (
            client.pause("one-off"),
            client.resume("one-off"),
            client.trigger("one-off"),
            client.backfill("one-off", from_ms=0, to_ms=NOW_MS),
        ):
            with pytest.raises(NotASeries) as refused:
                await call
            assert (refused.value.status, refused.value.code) == (409, "not_a_series")
        for call in (
            client.pause("nope"),
            client.resume("nope"),
            client.trigger("nope"),
            client.backfill("nope", from_ms=0, to_ms=NOW_MS),
        ):
            with pytest.raises(NotFound):
                await call
        for span, field in (
            ({"from_ms": NOW_MS, "to_ms": NOW_MS + 1}, "to_ms"),  # in the future
            ({"from_ms": NOW_MS - 1, "to_ms": NOW_MS - 2}, "to_ms"),  # reversed
            ({"from_ms": -1, "to_ms": NOW_MS}, "from_ms"),
            ({"from_ms": 0, "to_ms": NOW_MS}, "to_ms"),  # far more than 1000 occurrences
        ):
            with pytest.raises(InvalidRequest) as invalid:
                await client.backfill("s", **span)
            assert (invalid.value.status, invalid.value.field) == (422, field), span
        with pytest.raises(InvalidRequest) as invalid:
            await client.schedule("s2", every="PT1M", catch_up="some")
        assert (invalid.value.status, invalid.value.field) == (422, "catch_up")
        with pytest.raises(InvalidRequest) as invalid:
            await client.schedule("s2", every="PT1M", catch_up="one", catch_up_max=5)
        assert (invalid.value.status, invalid.value.field) == (422, "catch_up_max")

    daemon.serve(scenario)
    one_off = daemon.hook.get("one-off")
    assert one_off is not None and one_off.state is TaskState.SCHEDULED
    assert daemon.hook.count() == 2  # nothing else written
    assert daemon.hook.get("s2") is None


def test_a_listed_series_shows_its_pause(daemon: InProcess) -> None:
    async def scenario(client: AsyncClient) -> None:
        await client.schedule("s", at_ms=NOW_MS + MINUTE_MS, every="PT1M", catch_up="skip")
        await client.pause("s")
        [listed] = [t async for t in client.list(prefix="s")]
        assert listed == TaskSummary(
            "s",
            PARKED_MS,
            "triggerhook.fire",  # the default routing key
            TaskState.SCHEDULED,
            every="PT1M",
            catch_up="skip",
            occurrence=1,
            paused=True,
            resume_ms=NOW_MS + MINUTE_MS,
        )

    daemon.serve(scenario)
