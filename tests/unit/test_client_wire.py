"""The client's own logic, against scripted answers (httpx.MockTransport): the
request bodies it builds, its retry policy, and how answers map to results and
exceptions. Behaviour against the real daemon: tests/integration/test_client.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

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
from triggerhook.domain.task import TaskState

URL = "http://daemon.test"
Handler = Callable[[httpx.Request], httpx.Response]


def error(status: int, code: str, field: str | None = None, **headers: str) -> httpx.Response:
    body: dict[str, str] = {"code": code, "message": f"{code} happened"}
    if field:
        body["field"] = field
    return httpx.Response(status, json={"error": body}, headers=headers)


class Script:
    """Answers requests from a list (the last one repeats) and records them."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.first_request = threading.Event()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        self.first_request.set()
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        # A fresh copy each time: httpx takes over the stream of what it is given.
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def body(self, index: int = -1) -> dict[str, object]:
        data = json.loads(self.requests[index].content)
        assert isinstance(data, dict)
        return data


@pytest.fixture
def clients() -> Iterator[Callable[..., Client]]:
    made: list[Client] = []

    def make(script: Handler, **kwargs: object) -> Client:
        client = Client(URL, transport=httpx.MockTransport(script), **kwargs)  # type: ignore[arg-type]
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


CREATED = httpx.Response(201, json={"id": "t", "at": 4_000_000_000.25})


# -- request bodies ---------------------------------------------------------------------------


def test_delay_becomes_an_absolute_time_rounded_up(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    before_ms = time.time_ns() / 1e6
    clients(script).schedule("t", delay_s=1.2345)
    after_ms = time.time_ns() / 1e6
    body = script.body()
    assert set(body) == {"id", "at"}
    at_ms = float(body["at"]) * 1000  # type: ignore[arg-type]
    assert at_ms == round(at_ms)  # whole milliseconds
    assert before_ms + 1234.5 <= at_ms < after_ms + 1234.5 + 1


def test_payloads_ids_and_times_on_the_wire(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    client = clients(script)
    client.schedule("t", at=4e9, payload=b"\x00\xff", routing_key="a.b")
    assert script.body() == {
        "id": "t",
        "at": 4e9,
        "routing_key": "a.b",
        "payload_b64": base64.b64encode(b"\x00\xff").decode(),
    }
    client.schedule(at=datetime(2030, 1, 1, 0, 0, 0, 250_000), payload="héllo")
    body = script.body()
    assert body["at"] == "2030-01-01T00:00:00.250000+00:00"  # naive = UTC
    assert body["payload"] == "héllo"
    assert isinstance(body["id"], str) and len(body["id"]) == 36  # chosen by the client
    paris = timezone(timedelta(hours=1))
    client.schedule(at=datetime(2030, 1, 1, 1, tzinfo=paris))
    assert script.body()["at"] == "2030-01-01T01:00:00+01:00"
    client.schedule(at="2030-01-01T00:00:00Z")
    assert script.body()["at"] == "2030-01-01T00:00:00Z"
    assert script.requests[-1].headers["content-type"] == "application/json"
    assert "authorization" not in script.requests[-1].headers


def test_token_is_sent_as_bearer(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(404, json={"error": {"code": "not_found", "message": "-"}}))
    assert clients(script, token="s3cret").get("t") is None
    assert script.requests[0].headers["authorization"] == "Bearer s3cret"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "at"),
        ({"at": 4e9, "delay_s": 1}, "at"),
        ({"at": True}, "at"),
        ({"at": float("inf")}, "at"),
        ({"at": [1]}, "at"),
        ({"delay_s": float("nan")}, "delay_s"),
        ({"delay_s": -0.5}, "delay_s"),
        ({"delay_s": "5"}, "delay_s"),
        ({"delay_s": 1e300}, "delay_s"),
        ({"at": 4e9, "payload": 5}, "payload"),
    ],
)
def test_input_the_client_can_check_is_refused_without_a_request(
    clients: Callable[..., Client], kwargs: dict[str, object], field: str
) -> None:
    script = Script(CREATED)
    with pytest.raises(InvalidRequest) as caught:
        clients(script).schedule("t", **kwargs)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.field) == (None, field)
    assert script.requests == []


def test_task_ids_in_paths_are_checked_and_dots_encoded(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(204))
    client = clients(script)
    for bad in ("", "a/b", "x" * 65, "../x"):
        with pytest.raises(InvalidRequest) as caught:
            client.cancel(bad)
        assert caught.value.field == "id"
    assert script.requests == []
    client.cancel("..")
    assert script.requests[0].url.raw_path == b"/v1/tasks/%2E%2E"


def test_batch_errors_name_the_callers_fields(clients: Callable[..., Client]) -> None:
    script = Script(error(422, "invalid", "tasks[1].at"))
    with pytest.raises(InvalidRequest) as caught:
        clients(script).schedule_many([TaskRequest(at=4e9), TaskRequest(delay_s=1e9)])
    assert caught.value.field == "tasks[1].delay_s"  # it was given as a delay
    assert len(script.body()["tasks"]) == 2  # type: ignore[arg-type]


# -- answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "cls"),
    [
        (error(400, "malformed_json"), InvalidRequest),
        (error(413, "too_large"), InvalidRequest),
        (error(415, "unsupported_media_type"), InvalidRequest),
        (error(422, "invalid", "routing_key"), InvalidRequest),
        (error(401, "unauthorized"), Unauthorized),
        (error(404, "not_found"), NotFound),
        (error(409, "conflict", "id"), Conflict),
        (error(409, "too_late"), TooLate),
        (error(405, "method_not_allowed"), ApiError),
        (error(500, "internal"), ApiError),
        (httpx.Response(500, text="<html>oops</html>"), ApiError),
    ],
)
def test_error_answers_map_to_exceptions_and_are_not_retried(
    clients: Callable[..., Client], answer: httpx.Response, cls: type[ApiError]
) -> None:
    script = Script(answer)
    with pytest.raises(ApiError) as caught:
        clients(script, backoff_s=0).reschedule("t", at=4e9)
    assert type(caught.value) is cls
    assert caught.value.status == answer.status_code
    assert len(script.requests) == 1


def test_an_html_error_page_keeps_its_status_line(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(500, text="<html>oops</html>"))
    with pytest.raises(ApiError) as caught:
        clients(script).get("t")
    assert (caught.value.code, str(caught.value)) == ("http_500", "500 Internal Server Error")


def test_results(clients: Callable[..., Client]) -> None:
    client = clients(
        Script(
            httpx.Response(200, json={"id": "t", "at": 1.0015}),
            httpx.Response(200, json={"id": "t", "at": 2.5}),
            httpx.Response(
                200, json={"id": "t", "at": 3.25, "routing_key": "k", "state": "firing"}
            ),
            httpx.Response(201, json={"ids": ["a", "b"]}),
            httpx.Response(204),
            httpx.Response(503, json={"status": "unready", "reasons": ["mysql: down"]}),
        )
    )
    assert client.schedule("t", at=1.0015) == Scheduled("t", 1002, False)  # round(), as sent
    assert client.reschedule("t", at=2.5) == Scheduled("t", 2500, False)
    assert client.get("t") == TaskStatus("t", 3250, "k", TaskState.FIRING)
    assert client.schedule_many([TaskRequest(at=1), TaskRequest(at=2)]) == ["a", "b"]
    client.cancel("t")
    assert client.health() == Health(False, ("mysql: down",))


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json=[1]),
        httpx.Response(200, json={"id": 5, "at": 1}),
        httpx.Response(200, json={"id": "t", "at": "soon"}),
    ],
)
def test_unexpected_success_bodies_are_api_errors(
    clients: Callable[..., Client], answer: httpx.Response
) -> None:
    with pytest.raises(ApiError) as caught:
        clients(Script(answer)).reschedule("t", at=1)
    assert caught.value.code == "bad_response"


# -- retries ---------------------------------------------------------------------------------


def test_503_is_retried_with_identical_content(clients: Callable[..., Client]) -> None:
    script = Script(error(503, "unavailable"), error(503, "stopping"), CREATED)
    assert clients(script, backoff_s=0.001).schedule(delay_s=5).created
    assert len(script.requests) == 3
    assert len({r.content for r in script.requests}) == 1


@pytest.mark.parametrize("status", [502, 503, 504])
def test_unavailable_after_the_retries(clients: Callable[..., Client], status: int) -> None:
    script = Script(httpx.Response(status, text="gateway says no"))
    with pytest.raises(Unavailable) as caught:
        clients(script, retries=2, backoff_s=0.001).cancel("t")
    assert caught.value.status == status
    assert len(script.requests) == 3


def test_retry_after_is_honoured(clients: Callable[..., Client]) -> None:
    script = Script(error(503, "unavailable", **{"Retry-After": "0.3"}), CREATED)
    start = time.monotonic()
    clients(script, backoff_s=0.001).schedule("t", at=4e9)
    assert time.monotonic() - start >= 0.3
    assert len(script.requests) == 2


def test_close_ends_a_back_off_wait(clients: Callable[..., Client]) -> None:
    script = Script(error(503, "unavailable"))
    client = clients(script, backoff_s=30)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            client.schedule("t", at=4e9)
        except ApiError as exc:
            raised.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    assert script.first_request.wait(5)
    client.close()
    worker.join(5)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], Unavailable)
    assert len(script.requests) == 1


def test_probes_are_not_retried(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(502, text="bad gateway"))
    client = clients(script, backoff_s=0.001)
    assert client.ready() is False
    with pytest.raises(Unavailable):
        client.health()
    assert len(script.requests) == 2


def test_a_transport_error_that_would_repeat_is_not_retried(
    clients: Callable[..., Client],
) -> None:
    calls: list[httpx.Request] = []

    def broken(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.LocalProtocolError("client bug")

    with pytest.raises(Unavailable) as caught:
        clients(broken, backoff_s=0.001).get("t")
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.LocalProtocolError)
    assert len(calls) == 1


@pytest.mark.parametrize("url", ["ftp://x", "daemon:8080", "http://", "http://[::1", ""])
def test_base_url_must_be_http(url: str) -> None:
    with pytest.raises(ValueError, match="base_url"):
        Client(url)


# -- the async client shares all of it ----------------------------------------------------------


def test_async_client_retries_and_maps_errors_the_same_way() -> None:
    script = Script(error(503, "unavailable"), CREATED, error(409, "too_late"))

    async def handler(request: httpx.Request) -> httpx.Response:
        return script(request)

    async def scenario() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(URL, transport=transport, backoff_s=0.001, token="t") as client:
            assert (await client.schedule(delay_s=1)).created
            with pytest.raises(TooLate):
                await client.cancel("t")
            with pytest.raises(InvalidRequest):
                await client.schedule()

    asyncio.run(scenario())
    assert len(script.requests) == 3
    assert script.requests[0].content == script.requests[1].content
    assert script.requests[0].headers["authorization"] == "Bearer t"


def test_naive_and_aware_datetimes_agree(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    client = clients(script)
    client.schedule("t", at=datetime(2030, 1, 1, 12))
    client.schedule("t", at=datetime(2030, 1, 1, 12, tzinfo=UTC))
    naive, aware = (
        datetime.fromisoformat(str(json.loads(r.content)["at"])) for r in script.requests
    )
    assert naive == aware
