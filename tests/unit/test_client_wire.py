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
from triggerhook_client import (
    AlreadyFired,
    ApiError,
    AsyncClient,
    BulkCancelled,
    Client,
    Conflict,
    Health,
    InvalidRequest,
    NotFound,
    Scheduled,
    TaskPage,
    TaskRequest,
    TaskState,
    TaskStatus,
    TaskSummary,
    Timeline,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook_client.calls import DEFAULT_BULK_TIMEOUT_S, DEFAULT_PAGE_SIZE, DEFAULT_TIMEOUT_S

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

    def params(self, index: int = -1) -> dict[str, str]:
        """The query string of a request (each parameter once, as the API wants)."""
        items = self.requests[index].url.params.multi_items()
        assert len(items) == len({key for key, _ in items}), items
        return dict(items)

    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]


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


AT_MS = 4_000_000_000_000
CREATED = httpx.Response(201, json={"id": "t", "due_ms": 4_000_000_000_250, "at": 4_000_000_000.25})


# -- request bodies ---------------------------------------------------------------------------


def test_delay_becomes_an_absolute_time_rounded_up(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    before_ms = time.time_ns() / 1e6
    clients(script).schedule("t", delay_ms=1235)
    after_ms = time.time_ns() / 1e6
    body = script.body()
    assert set(body) == {"id", "at_ms"}
    at_ms = body["at_ms"]
    assert isinstance(at_ms, int)  # whole milliseconds
    assert before_ms + 1235 <= at_ms < after_ms + 1235 + 1


def test_delay_s_is_deprecated_and_still_rounds_up(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    before_ms = time.time_ns() / 1e6
    with pytest.warns(DeprecationWarning, match="delay_s is deprecated") as warned:
        clients(script).schedule("t", delay_s=1.2345)
    after_ms = time.time_ns() / 1e6
    assert warned[0].filename == __file__  # the caller's line, not the client's
    body = script.body()
    assert set(body) == {"id", "at_ms"}  # sent under the new name
    at_ms = body["at_ms"]
    assert isinstance(at_ms, int)
    assert before_ms + 1234.5 <= at_ms < after_ms + 1234.5 + 1


def test_a_number_as_at_is_deprecated_epoch_seconds(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    client = clients(script)
    for at, at_ms in ((4e9, AT_MS), (4_000_000_000.0001, AT_MS + 1), (-5, 0), (0, 0)):
        with pytest.warns(DeprecationWarning, match="at as a number") as warned:
            client.schedule("t", at=at)
        assert warned[0].filename == __file__
        assert script.body() == {"id": "t", "at_ms": at_ms}  # rounded up, never early
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidRequest) as ambiguous:
        client.schedule("t", at=20261201)  # 1970 or a date? as the daemon, refused
    assert ambiguous.value.field == "at" and "ambiguous" in ambiguous.value.message
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidRequest) as late:
        client.schedule("t", at=253_402_300_800)
    assert late.value.field == "at"
    assert len(script.requests) == 4


def test_reschedule_sends_the_new_names(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(200, json={"id": "t", "due_ms": AT_MS, "at": 4e9}))
    client = clients(script)
    assert client.reschedule("t", at_ms=AT_MS) == Scheduled("t", AT_MS, False, "rescheduled")
    assert script.body() == {"at_ms": AT_MS}
    client.reschedule("t", at="2096-10-02T07:06:40")  # no offset: the daemon reads UTC
    assert script.body() == {"at": "2096-10-02T07:06:40"}
    before_ms = time.time_ns() / 1e6
    client.reschedule("t", delay_ms=500)
    assert before_ms + 500 <= sent_at_ms(script) < time.time_ns() / 1e6 + 501
    with pytest.warns(DeprecationWarning, match="delay_s is deprecated"):
        client.reschedule("t", delay_s=0.5)
    assert set(script.body()) == {"at_ms"}
    with pytest.warns(DeprecationWarning, match="at as a number"):
        client.reschedule("t", at=4e9)
    assert script.body() == {"at_ms": AT_MS}
    script.answers = [error(422, "invalid", "at_ms")]
    with pytest.raises(InvalidRequest) as caught:
        client.reschedule("t", delay_ms=10)
    assert caught.value.field == "delay_ms"  # the daemon's at_ms was the caller's delay


def test_payloads_ids_and_times_on_the_wire(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    client = clients(script)
    client.schedule("t", at_ms=AT_MS, payload=b"\x00\xff", routing_key="a.b")
    assert script.body() == {
        "id": "t",
        "at_ms": AT_MS,
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
        ({"at": "2030-01-01T00:00:00Z", "at_ms": AT_MS}, "at"),
        ({"at_ms": AT_MS, "delay_ms": 1}, "at_ms"),
        ({"delay_ms": 1, "delay_s": 1}, "delay_ms"),
        ({"at": True}, "at"),
        ({"at": float("inf")}, "at"),
        ({"at": [1]}, "at"),
        ({"at_ms": 1.5}, "at_ms"),
        ({"at_ms": "4000000000000"}, "at_ms"),
        ({"at_ms": True}, "at_ms"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"delay_ms": 1.5}, "delay_ms"),
        ({"delay_ms": 10**20}, "delay_ms"),
        ({"delay_s": float("nan")}, "delay_s"),
        ({"delay_s": -0.5}, "delay_s"),
        ({"delay_s": "5"}, "delay_s"),
        ({"delay_s": 1e300}, "delay_s"),
        ({"at_ms": AT_MS, "payload": 5}, "payload"),
        ({"at_ms": AT_MS, "every": "PT1M", "until": 5, "until_ms": 5}, "until"),
        ({"at_ms": AT_MS, "every": "PT1M", "until_ms": 1.5}, "until_ms"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # delay_s, a number as at
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
    script = Script(error(422, "invalid", "tasks[1].at_ms"))
    with pytest.raises(InvalidRequest) as caught:
        clients(script).schedule_many([TaskRequest(at_ms=AT_MS), TaskRequest(delay_ms=10**12)])
    assert caught.value.field == "tasks[1].delay_ms"  # it was given as a delay
    assert len(script.body()["tasks"]) == 2  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidRequest) as deprecated:
        clients(script).schedule_many([TaskRequest(at_ms=AT_MS), TaskRequest(delay_s=1e9)])
    assert deprecated.value.field == "tasks[1].delay_s"
    script.answers = [error(422, "invalid", "tasks[0].until_ms")]
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidRequest) as until:
        clients(script).schedule_many([TaskRequest(every="PT1M", until=4e9)])
    assert until.value.field == "tasks[0].until"  # it was given as until


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
        (error(409, "already_fired", "id"), AlreadyFired),
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
        clients(script, backoff_s=0).reschedule("t", at_ms=AT_MS)
    assert type(caught.value) is cls
    assert caught.value.status == answer.status_code
    assert len(script.requests) == 1


def test_a_schedule_of_an_id_fired_within_its_window_raises_already_fired_once(
    clients: Callable[..., Client],
) -> None:
    body = {"code": "already_fired", "message": "fired", "field": "id", "fired_ms": AT_MS - 1}
    script = Script(httpx.Response(409, json={"error": body}))
    with pytest.raises(Conflict) as caught:  # a Conflict: code that catches those catches it
        clients(script, backoff_s=0).schedule("t", at_ms=AT_MS, dedup_window_ms=60_000)
    assert isinstance(caught.value, AlreadyFired)
    assert (caught.value.field, caught.value.fired_ms) == ("id", AT_MS - 1)
    assert len(script.requests) == 1  # never retried
    assert json.loads(script.requests[0].content)["dedup_window_ms"] == 60_000


def test_an_html_error_page_keeps_its_status_line(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(500, text="<html>oops</html>"))
    with pytest.raises(ApiError) as caught:
        clients(script).get("t")
    assert (caught.value.code, str(caught.value)) == ("http_500", "500 Internal Server Error")


def test_results(clients: Callable[..., Client]) -> None:
    client = clients(
        Script(
            httpx.Response(200, json={"id": "t", "due_ms": 1002, "at": 1.002}),
            httpx.Response(200, json={"id": "t", "due_ms": 2500, "at": 2.5}),
            httpx.Response(
                200,
                json={"id": "t", "due_ms": 3250, "at": 3.25, "routing_key": "k", "state": "firing"},
            ),
            httpx.Response(201, json={"ids": ["a", "b"]}),
            httpx.Response(204),
            httpx.Response(503, json={"status": "unready", "reasons": ["mysql: down"]}),
        )
    )
    scheduled = client.schedule("t", at_ms=1002)
    assert scheduled == Scheduled("t", 1002, False, "exists")
    assert client.reschedule("t", at="1970-01-01T00:00:02.5Z") == Scheduled(
        "t", 2500, False, "rescheduled"
    )
    status = client.get("t")
    assert status == TaskStatus("t", 3250, "k", TaskState.FIRING)
    assert client.schedule_many([TaskRequest(at_ms=1), TaskRequest(at_ms=2)]) == ["a", "b"]
    client.cancel("t")
    assert client.health() == Health(False, ("mysql: down",))
    # at_ms, the results' old name of due_ms: deprecated, still there.
    with pytest.warns(DeprecationWarning, match="Scheduled.at_ms is deprecated: use due_ms"):
        assert scheduled.at_ms == scheduled.due_ms == 1002
    with pytest.warns(DeprecationWarning, match="TaskStatus.at_ms is deprecated"):
        assert status is not None and status.at_ms == 3250


def test_a_throttled_task_reads_back_with_when_it_goes(clients: Callable[..., Client]) -> None:
    task = {"id": "t", "due_ms": 3250, "routing_key": "k", "state": "scheduled"}
    client = clients(
        Script(
            httpx.Response(200, json={**task, "throttled": True, "fire_ms": 9000}),
            httpx.Response(
                200, json={"tasks": [{**task, "throttled": False}], "next_cursor": None}
            ),
            httpx.Response(200, json={**task, "throttled": "yes"}),
        )
    )
    status = client.get("t")
    assert status is not None and (status.throttled, status.fire_ms) == (True, 9000)
    [listed] = client.list()
    assert (listed.throttled, listed.fire_ms) == (False, None)  # goes at its due time
    with pytest.raises(ApiError, match="throttled"):
        client.get("t")


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="not json"),
        httpx.Response(200, json=[1]),
        httpx.Response(200, json={"id": 5, "due_ms": 1}),
        httpx.Response(200, json={"id": "t", "due_ms": "soon"}),
        httpx.Response(200, json={"id": "t", "due_ms": 1.5}),
        httpx.Response(200, json={"id": "t", "at": 1.0}),  # no due_ms
    ],
)
def test_unexpected_success_bodies_are_api_errors(
    clients: Callable[..., Client], answer: httpx.Response
) -> None:
    with pytest.raises(ApiError) as caught:
        clients(Script(answer)).reschedule("t", at_ms=1)
    assert caught.value.code == "bad_response"


# -- retries ---------------------------------------------------------------------------------


def test_503_is_retried_with_identical_content(clients: Callable[..., Client]) -> None:
    script = Script(error(503, "unavailable"), error(503, "stopping"), CREATED)
    assert clients(script, backoff_s=0.001).schedule(delay_ms=5000).created
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
    clients(script, backoff_s=0.001).schedule("t", at_ms=AT_MS)
    assert time.monotonic() - start >= 0.3
    assert len(script.requests) == 2


def test_close_ends_a_back_off_wait(clients: Callable[..., Client]) -> None:
    script = Script(error(503, "unavailable"))
    client = clients(script, backoff_s=30)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            client.schedule("t", at_ms=AT_MS)
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
            assert (await client.schedule(delay_ms=1000)).created
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


# -- metadata ----------------------------------------------------------------------------------


def test_metadata_on_the_wire(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    client = clients(script)
    client.schedule(
        "t",
        at_ms=AT_MS,
        tags=["tenant:7", "billing"],  # in the caller's order: the daemon's tags[i] names it
        content_type="application/json",
        content_encoding="identity",
        headers={"tenant": "7", "attempt": 3, "urgent": True},
        late={"skip_after_ms": 1500},
    )
    assert script.body() == {
        "id": "t",
        "at_ms": AT_MS,
        "tags": ["tenant:7", "billing"],
        "content_type": "application/json",
        "content_encoding": "identity",
        "headers": {"tenant": "7", "attempt": 3, "urgent": True},
        "late": {"skip_after_ms": 1500},
    }
    client.schedule("t", at_ms=AT_MS, late="fire", tags=())
    assert script.body() == {"id": "t", "at_ms": AT_MS, "tags": [], "late": "fire"}
    # A deadline is a time like ``at``: a naive datetime is UTC.
    client.schedule("t", at_ms=AT_MS, late={"deadline": datetime(2030, 1, 1, 0, 0, 0, 250_000)})
    assert script.body()["late"] == {"deadline": "2030-01-01T00:00:00.250000+00:00"}
    client.schedule("t", at_ms=AT_MS, late={"deadline_ms": 1_893_456_000_250})
    assert script.body()["late"] == {"deadline_ms": 1_893_456_000_250}
    with pytest.warns(DeprecationWarning, match="late.deadline as a number"):
        client.schedule("t", at_ms=AT_MS, late={"deadline": 1_893_456_000.25})
    assert script.body()["late"] == {"deadline_ms": 1_893_456_000_250}  # sent in ms
    client.schedule("t", at_ms=AT_MS)
    assert set(script.body()) == {"id", "at_ms"}  # nothing unset is sent


def test_a_retry_sends_the_same_metadata_bytes(clients: Callable[..., Client]) -> None:
    script = Script(error(503, "unavailable"), error(502, "bad_gateway"), CREATED)
    clients(script, backoff_s=0.001).schedule(
        delay_ms=5000,
        tags={"b", "a", "c"},  # a set: iterated once, before the first attempt
        headers={"h": "v"},
        late={"deadline": datetime(2030, 1, 1)},
    )
    assert len(script.requests) == 3
    assert len({r.content for r in script.requests}) == 1
    tags = script.body()["tags"]
    assert isinstance(tags, list) and sorted(tags) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tags": "billing"}, "tags"),  # one string, not a collection of tags
        ({"tags": 5}, "tags"),
        ({"tags": ["ok", 7]}, "tags[1]"),
        ({"content_type": 5}, "content_type"),
        ({"content_encoding": "caf\udce9"}, "content_encoding"),  # no UTF-8 form
        ({"headers": ["h"]}, "headers"),
        ({"headers": {5: "v"}}, "headers"),
        ({"headers": {"h": 1.5}}, "headers.h"),
        ({"headers": {"h": b"v"}}, "headers.h"),
        ({"headers": {"h": "caf\udce9"}}, "headers.h"),
        ({"late": "skip"}, "late"),
        ({"late": {"skip_after_ms": -1}}, "late.skip_after_ms"),
        ({"late": {"skip_after_ms": True}}, "late.skip_after_ms"),
        ({"late": {"skip_after_ms": 1.5}}, "late.skip_after_ms"),
        ({"late": {"deadline": [1]}}, "late.deadline"),
        ({"late": {"deadline": float("nan")}}, "late.deadline"),
        ({"late": {"deadline_ms": 1.5}}, "late.deadline_ms"),
        ({"late": {"deadline_ms": "5"}}, "late.deadline_ms"),
        ({"late": {"never": 1}}, "late.never"),
        ({"late": {"skip_after_ms": 1, "deadline": 2}}, "late"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # a number as late.deadline
def test_metadata_the_client_can_check_is_refused_without_a_request(
    clients: Callable[..., Client], kwargs: dict[str, object], field: str
) -> None:
    script = Script(CREATED)
    client = clients(script)
    with pytest.raises(InvalidRequest) as caught:
        client.schedule("t", at_ms=AT_MS, **kwargs)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.field) == (None, field)
    with pytest.raises(InvalidRequest) as in_batch:
        client.schedule_many([TaskRequest(at_ms=AT_MS), TaskRequest("u", at_ms=AT_MS, **kwargs)])  # type: ignore[arg-type]
    assert in_batch.value.field == f"tasks[1].{field}"
    assert script.requests == []


def test_the_daemons_metadata_errors_name_the_callers_field(
    clients: Callable[..., Client],
) -> None:
    script = Script(error(422, "invalid", "tasks[0].headers.x-mine"))
    with pytest.raises(InvalidRequest) as caught:
        clients(script).schedule_many([TaskRequest(at_ms=AT_MS, headers={"x-mine": "a"})])
    assert caught.value.field == "tasks[0].headers.x-mine"  # as given: nothing to rename


def test_get_reads_the_metadata(clients: Callable[..., Client]) -> None:
    shown = {
        "id": "t",
        "due_ms": 3250,
        "at": 3.25,
        "routing_key": "k",
        "state": "scheduled",
        "payload": "p",
        "tags": ["a", "b"],
        "content_type": "text/plain",
        "content_encoding": "gzip",
        "headers": {"n": 1, "s": "v", "b": False},
        "late": {"deadline_ms": 1_893_456_000_250, "deadline": 1_893_456_000.25},
    }
    client = clients(Script(httpx.Response(200, json=shown)))
    status = client.get("t")
    assert status == TaskStatus(
        "t",
        3250,
        "k",
        TaskState.SCHEDULED,
        b"p",
        tags=("a", "b"),
        content_type="text/plain",
        content_encoding="gzip",
        headers={"n": 1, "s": "v", "b": False},
        late={"deadline_ms": 1_893_456_000_250},  # as schedule takes it back
    )
    assert isinstance(status, TaskSummary)
    assert hash(status) == hash(status)  # hashable, though it holds a dict
    for late in ("fire", {"skip_after_ms": 0}):
        client = clients(Script(httpx.Response(200, json={**shown, "late": late})))
        got = client.get("t")
        assert got is not None and got.late == late


@pytest.mark.parametrize(
    "extra",
    [
        {"tags": "a"},
        {"tags": [1]},
        {"content_type": 5},
        {"headers": ["h"]},
        {"headers": {"h": 1.5}},
        {"late": "later"},
        {"late": {"skip_after_ms": "5"}},
        {"late": {"deadline": "2030-01-01"}},
        {"late": {"deadline": 1.5}},  # no deadline_ms
        {"late": {"deadline_ms": 1.5, "deadline": 0.0015}},
        {"until_ms": 1.5},
    ],
)
def test_unexpected_metadata_in_an_answer_is_an_api_error(
    clients: Callable[..., Client], extra: dict[str, object]
) -> None:
    shown = {"id": "t", "due_ms": 1, "routing_key": "k", "state": "scheduled", **extra}
    with pytest.raises(ApiError) as caught:
        clients(Script(httpx.Response(200, json=shown))).get("t")
    assert caught.value.code == "bad_response"


@pytest.mark.parametrize("task_id", ["batch", "count", "timeline", "cancel"])
def test_ids_that_are_other_endpoints_are_never_sent_as_a_task(
    clients: Callable[..., Client], task_id: str
) -> None:
    script = Script(httpx.Response(200, json={"count": 5}))
    client = clients(script)
    calls: list[Callable[[], object]] = [
        lambda: client.get(task_id),
        lambda: client.cancel(task_id),
        lambda: client.reschedule(task_id, at_ms=AT_MS),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as caught:
            call()
        assert (caught.value.status, caught.value.field) == (None, "id")
        assert "reserved" in caught.value.message
    assert script.requests == []


# -- listing, counting, the timeline -------------------------------------------------------------


def listed(task_id: str, due_ms: int = AT_MS, **extra: object) -> dict[str, object]:
    return {
        "id": task_id,
        "due_ms": due_ms,
        "at": due_ms / 1000,
        "routing_key": "k",
        "state": "scheduled",
        **extra,
    }


def page(*tasks: dict[str, object], cursor: str | None = None) -> httpx.Response:
    return httpx.Response(200, json={"tasks": list(tasks), "next_cursor": cursor})


def test_list_follows_the_cursor_to_the_last_page(clients: Callable[..., Client]) -> None:
    script = Script(
        page(listed("a"), listed("b", tags=["t"]), cursor="c1"),
        page(listed("c"), listed("d"), cursor="c2"),
        page(),  # a full page has a cursor; the next one may be empty
    )
    tasks = clients(script).list(tag="t", state=TaskState.SCHEDULED, page_size=2)
    assert script.requests == []  # lazy: nothing asked before the iteration
    found = list(tasks)
    assert [t.id for t in found] == ["a", "b", "c", "d"]
    assert found[1] == TaskSummary("b", 4_000_000_000_000, "k", TaskState.SCHEDULED, tags=("t",))
    assert script.paths() == ["/v1/tasks"] * 3
    filters = {"tag": "t", "state": "scheduled", "limit": "2"}
    assert script.params(0) == filters
    assert script.params(1) == {**filters, "cursor": "c1"}
    assert script.params(2) == {**filters, "cursor": "c2"}


def test_list_pages_are_as_large_as_the_api_allows_by_default(
    clients: Callable[..., Client],
) -> None:
    script = Script(page(listed("a")))
    assert [t.id for t in clients(script).list()] == ["a"]
    assert script.params() == {"limit": str(DEFAULT_PAGE_SIZE)}
    assert DEFAULT_PAGE_SIZE == 1000  # the API's largest page


def test_filters_in_the_query_string(clients: Callable[..., Client]) -> None:
    script = Script(httpx.Response(200, json={"count": 3}))
    client = clients(script)
    assert (
        client.count(
            prefix="tenant-7:",
            routing_key="billing.charge",
            due_after=datetime(2030, 1, 1),  # naive = UTC
            due_before="1970-01-01T00:00:00.000015Z",
            state="firing",
        )
        == 3
    )
    assert script.paths() == ["/v1/tasks/count"]
    assert script.params() == {
        "prefix": "tenant-7:",
        "routing_key": "billing.charge",
        "due_after": "2030-01-01T00:00:00+00:00",
        "due_before": "1970-01-01T00:00:00.000015Z",
        "state": "firing",
    }
    # Epoch ms as they are; a number as the text form (deprecated: epoch
    # seconds) goes out in ms, rounded up as the daemon rounds it.
    client.count(due_after_ms=4_000_000_000_000, due_before_ms=-5)
    assert script.params() == {"due_after_ms": "4000000000000", "due_before_ms": "-5"}
    with pytest.warns(DeprecationWarning):
        client.count(due_before=1.5e-05)
    assert script.params() == {"due_before_ms": "1"}
    with pytest.warns(DeprecationWarning, match="due_after as a number") as warned:
        client.count(due_after=4_000_000_000, due_before="2096-10-02T07:06:40+01:00")
    assert len(warned) == 1  # the bounds are read once per call
    assert script.params() == {
        "due_after_ms": "4000000000000",
        "due_before": "2096-10-02T07:06:40+01:00",
    }
    # "+" is a space in a query string: it must go out encoded.
    assert b"%2B01%3A00" in script.requests[-1].url.query


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.count(prefix=5), "prefix"),
        (lambda c: c.count(tag="caf\udce9"), "tag"),
        (lambda c: c.count(due_after=[1]), "due_after"),
        (lambda c: c.count(due_before=True), "due_before"),
        (lambda c: c.count(state=1), "state"),
        (lambda c: c.list(page_size=0), "page_size"),
        (lambda c: c.list(page_size=True), "page_size"),
        (lambda c: c.list_page(limit=-1), "limit"),
        (lambda c: c.list_page(cursor=5), "cursor"),
        (lambda c: c.count(due_after="2030-01-01", due_after_ms=5), "due_after"),
        (lambda c: c.count(due_before_ms=1.5), "due_before_ms"),
        (lambda c: c.count(due_before_ms="5"), "due_before_ms"),
        (lambda c: c.timeline(bucket_s=1.5), "bucket_s"),
        (lambda c: c.timeline(bucket_ms=0), "bucket_ms"),
        (lambda c: c.timeline(bucket_ms=1000, bucket_s=1), "bucket_s"),
        (lambda c: c.timeline(buckets=0), "buckets"),
        (lambda c: c.timeline(start=float("inf")), "start"),
        (lambda c: c.timeline(start="2030-01-01", start_ms=5), "start"),
        (lambda c: c.timeline(start_ms=True), "start_ms"),
        (lambda c: c.cancel_where(), None),  # names no tasks: never "all of them"
        (lambda c: c.cancel_where(due_before=4e9), None),
        (lambda c: c.cancel_where(tag="t", timeout_s=0), "timeout_s"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # a number as a time
def test_bad_filters_are_refused_without_a_request(
    clients: Callable[..., Client], call: Callable[[Client], object], field: str | None
) -> None:
    script = Script(httpx.Response(200, json={"count": 3}))
    with pytest.raises(InvalidRequest) as caught:
        call(clients(script))
    assert (caught.value.status, caught.value.field) == (None, field)
    assert script.requests == []


def test_the_daemons_errors_name_the_callers_arguments(clients: Callable[..., Client]) -> None:
    script = Script(error(422, "invalid", "limit"))
    client = clients(script)
    with pytest.raises(InvalidRequest) as walked:
        list(client.list(page_size=5000))
    assert walked.value.field == "page_size"
    with pytest.raises(InvalidRequest) as one_page:
        client.list_page(limit=5000)
    assert one_page.value.field == "limit"
    script.answers = [error(422, "invalid", "bucket_ms")]
    with pytest.raises(InvalidRequest) as timeline, pytest.warns(DeprecationWarning):
        client.timeline(bucket_s=10**9)
    assert timeline.value.field == "bucket_s"
    # A deprecated number sent in ms: the daemon's error names the caller's field.
    calls: list[tuple[str, Callable[[], int]]] = [
        ("due_after", lambda: client.count(due_after=4e9)),
        ("due_before", lambda: client.count(due_before=4e9)),
    ]
    for name, call in calls:
        script.answers = [error(422, "invalid", f"{name}_ms")]
        with pytest.raises(InvalidRequest) as bound, pytest.warns(DeprecationWarning):
            call()
        assert bound.value.field == name
    script.answers = [error(422, "invalid", "start_ms")]
    with pytest.raises(InvalidRequest) as start, pytest.warns(DeprecationWarning):
        client.timeline(start=4e9)
    assert start.value.field == "start"
    script.answers = [error(422, "invalid", "start_ms")]
    with pytest.raises(InvalidRequest) as start_ms:
        client.timeline(start_ms=5)
    assert start_ms.value.field == "start_ms"


def test_list_page_and_its_cursor(clients: Callable[..., Client]) -> None:
    script = Script(page(listed("a", late="fire"), cursor="next"), page())
    client = clients(script)
    first = client.list_page(prefix="a", limit=1)
    assert first == TaskPage(
        (TaskSummary("a", 4_000_000_000_000, "k", TaskState.SCHEDULED, late="fire"),), "next"
    )
    assert client.list_page(prefix="a", limit=1, cursor=first.next_cursor) == TaskPage((), None)
    assert script.params(1) == {"prefix": "a", "limit": "1", "cursor": "next"}


def test_timeline(clients: Callable[..., Client]) -> None:
    answer = {
        "start_ms": AT_MS,
        "bucket_ms": 2000,
        "start": 4e9,
        "bucket": 2.0,
        "buckets": 3,
        "routing_keys": {"fire.a": [2, 0, 1], "fire.b": [0, 0, 4]},
    }
    script = Script(httpx.Response(200, json=answer))
    start = "2096-10-02T07:06:40Z"
    line = clients(script).timeline(tag="t", bucket_ms=2000, buckets=3, start=start)
    assert line == Timeline(4_000_000_000_000, 2000, 3, {"fire.a": (2, 0, 1), "fire.b": (0, 0, 4)})
    assert line.end_ms == 4_000_000_006_000
    assert script.paths() == ["/v1/tasks/timeline"]
    assert script.params() == {"tag": "t", "bucket_ms": "2000", "buckets": "3", "start": start}
    clients(script).timeline(start_ms=AT_MS)
    assert script.params() == {"start_ms": str(AT_MS)}
    with pytest.warns(DeprecationWarning, match="start as a number"):
        clients(script).timeline(start=4e9)
    assert script.params() == {"start_ms": "4000000000000"}
    with pytest.warns(DeprecationWarning, match="bucket_s is deprecated"):
        clients(script).timeline(bucket_s=2)
    assert script.params() == {"bucket_ms": "2000"}


@pytest.mark.parametrize(
    ("path", "answer"),
    [
        ("/v1/tasks", {"tasks": {}, "next_cursor": None}),
        ("/v1/tasks", {"tasks": [listed("a")], "next_cursor": 5}),
        ("/v1/tasks", {"tasks": [{"id": "a"}], "next_cursor": None}),
        ("/v1/tasks/count", {"count": -1}),
        ("/v1/tasks/count", {"count": True}),
        (
            "/v1/tasks/timeline",
            {"start_ms": 1, "bucket_ms": 1000, "buckets": 2, "routing_keys": {"k": [1]}},
        ),
        (
            "/v1/tasks/timeline",
            {"start_ms": 1, "bucket_ms": 1000, "buckets": 1, "routing_keys": []},
        ),
        (
            "/v1/tasks/timeline",  # no start_ms
            {"start": 1, "bucket_ms": 1000, "buckets": 1, "routing_keys": {}},
        ),
        ("/v1/tasks/cancel", {"cancelled": 1}),
    ],
)
def test_unexpected_listing_answers_are_api_errors(
    clients: Callable[..., Client], path: str, answer: dict[str, object]
) -> None:
    client = clients(Script(httpx.Response(200, json=answer)))
    calls: dict[str, Callable[[], object]] = {
        "/v1/tasks": client.list_page,
        "/v1/tasks/count": client.count,
        "/v1/tasks/timeline": client.timeline,
        "/v1/tasks/cancel": lambda: client.cancel_where(tag="t"),
    }
    with pytest.raises(ApiError) as caught:
        calls[path]()
    assert caught.value.code == "bad_response"


# -- bulk cancel -------------------------------------------------------------------------------


def test_cancel_where_body_and_its_long_timeout(clients: Callable[..., Client]) -> None:
    cancelled = httpx.Response(200, json={"cancelled": 6, "too_late": 1})
    script = Script(cancelled, cancelled, httpx.Response(200, json={"count": 0}))
    client = clients(script)
    done = client.cancel_where(tag="t", routing_key="k", due_after=datetime(2030, 1, 1))
    assert done == BulkCancelled(6, 1)
    request = script.requests[-1]
    assert (request.method, request.url.path) == ("POST", "/v1/tasks/cancel")
    assert script.body() == {
        "routing_key": "k",
        "tag": "t",
        "due_after": "2030-01-01T00:00:00+00:00",
    }
    # Minutes for a million tasks: a timeout of its own, not the client's 30 s.
    assert request.extensions["timeout"]["read"] == DEFAULT_BULK_TIMEOUT_S
    client.cancel_where(prefix="p", timeout_s=42)
    assert script.requests[-1].extensions["timeout"]["read"] == 42
    client.count()
    assert script.requests[-1].extensions["timeout"]["read"] == DEFAULT_TIMEOUT_S


def test_cancel_where_is_retried_after_a_timeout_with_the_same_body(
    clients: Callable[..., Client],
) -> None:
    """Idempotent (a second run cancels nothing more), so retried like any call."""
    sent: list[bytes] = []

    def slow_then_done(request: httpx.Request) -> httpx.Response:
        sent.append(request.read())
        if len(sent) == 1:
            raise httpx.ReadTimeout("no answer in time", request=request)
        return httpx.Response(200, json={"cancelled": 0, "too_late": 0})

    done = clients(slow_then_done, backoff_s=0.001).cancel_where(
        prefix="p", due_before="2096-10-02T07:06:40Z"
    )
    assert done == BulkCancelled(0, 0)  # the first attempt did the work: the last counts
    assert len(sent) == 2 and sent[0] == sent[1]


# -- the async client: the same calls -------------------------------------------------------------


def test_async_client_lists_counts_and_cancels_the_same_way() -> None:
    script = Script(
        page(listed("a"), cursor="c1"),
        page(listed("b")),
        page(listed("c"), cursor="more"),
        httpx.Response(200, json={"count": 2}),
        httpx.Response(
            200,
            json={
                "start_ms": 60_000,
                "bucket_ms": 60_000,
                "start": 60,
                "bucket": 60,
                "buckets": 1,
                "routing_keys": {},
            },
        ),
        error(503, "unavailable"),
        httpx.Response(200, json={"cancelled": 2, "too_late": 0}),
    )

    async def handler(request: httpx.Request) -> httpx.Response:
        return script(request)

    async def scenario() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(URL, transport=transport, backoff_s=0.001) as client:
            with pytest.raises(InvalidRequest):
                client.list(page_size=0)  # checked at the call, not awaited
            assert [t.id async for t in client.list(prefix="p", page_size=1)] == ["a", "b"]
            one = await client.list_page(prefix="p", limit=1)
            assert (one.tasks[0].id, one.next_cursor) == ("c", "more")
            assert await client.count(tag="t") == 2
            assert await client.timeline(bucket_ms=60_000) == Timeline(60_000, 60_000, 1, {})
            with pytest.raises(InvalidRequest):
                await client.cancel_where(due_after="1970-01-01T00:00:01Z")
            assert await client.cancel_where(tag="t") == BulkCancelled(2, 0)

    asyncio.run(scenario())
    assert script.params(1) == {"prefix": "p", "limit": "1", "cursor": "c1"}
    assert script.paths()[3:] == [
        "/v1/tasks/count",
        "/v1/tasks/timeline",
        "/v1/tasks/cancel",
        "/v1/tasks/cancel",  # retried after the 503
    ]
    assert script.requests[-1].content == script.requests[-2].content
    assert script.requests[-1].extensions["timeout"]["read"] == DEFAULT_BULK_TIMEOUT_S


def test_async_client_sends_the_metadata_the_same_way() -> None:
    script = Script(CREATED)

    async def handler(request: httpx.Request) -> httpx.Response:
        return script(request)

    async def scenario() -> None:
        async with AsyncClient(URL, transport=httpx.MockTransport(handler)) as client:
            await client.schedule(
                "t", at_ms=AT_MS, tags=["a"], headers={"h": 1}, late={"skip_after_ms": 5}
            )
            with pytest.raises(InvalidRequest) as caught:
                await client.schedule("t", at_ms=AT_MS, tags="a")
            assert caught.value.field == "tags"
            deprecated = pytest.warns(DeprecationWarning, match="delay_s is deprecated")
            with deprecated as warned, pytest.raises(InvalidRequest):
                await client.reschedule("t", delay_s=-1)
            assert warned[0].filename == __file__  # the caller's line, through the coroutine

    asyncio.run(scenario())
    assert script.body() == {
        "id": "t",
        "at_ms": AT_MS,
        "tags": ["a"],
        "headers": {"h": 1},
        "late": {"skip_after_ms": 5},
    }
    assert len(script.requests) == 1


# -- series -------------------------------------------------------------------------------------


def sent_at_ms(script: Script, index: int = -1) -> int:
    at_ms = script.body(index)["at_ms"]
    assert isinstance(at_ms, int)  # whole milliseconds
    return at_ms


def test_a_series_without_a_time_is_sent_with_the_first_one_the_daemon_would_choose(
    clients: Callable[..., Client],
) -> None:
    """One ``every`` from now, rounded up to the ms (the daemon's choice for an
    untimed series); for cron now itself, which the daemon aligns to the first
    matching minute at or after it, as it does an untimed cron series."""
    script = Script(CREATED)
    client = clients(script)
    before_ms = time.time_ns() / 1e6
    client.schedule("t", every="PT15M", until=datetime(2030, 1, 1))
    client.schedule("u", cron="*/5 * * * *", timezone="Europe/Berlin")
    after_ms = time.time_ns() / 1e6
    every_at, cron_at = sent_at_ms(script, 0), sent_at_ms(script, 1)
    assert before_ms + 900_000 <= every_at < after_ms + 900_000 + 1
    assert before_ms <= cron_at < after_ms + 1
    assert script.body(0) == {
        "id": "t",
        "at_ms": every_at,
        "every": "PT15M",  # as given: the daemon normalizes it
        "until": "2030-01-01T00:00:00+00:00",  # a time like at: naive = UTC
    }
    assert script.body(1) == {
        "id": "u",
        "at_ms": cron_at,
        "cron": "*/5 * * * *",
        "timezone": "Europe/Berlin",
    }


def test_a_series_given_a_time_sends_it_as_given(clients: Callable[..., Client]) -> None:
    script = Script(CREATED)
    client = clients(script)
    client.schedule("t", at_ms=AT_MS, every="P1D", until_ms=4_100_000_000_000)
    assert script.body() == {
        "id": "t",
        "at_ms": AT_MS,
        "every": "P1D",
        "until_ms": 4_100_000_000_000,
    }
    client.schedule("t", at="2096-10-02T07:06:40Z", every="P1D", until="2099-12-31T00:00:00Z")
    assert script.body() == {
        "id": "t",
        "at": "2096-10-02T07:06:40Z",
        "every": "P1D",
        "until": "2099-12-31T00:00:00Z",
    }
    with pytest.warns(DeprecationWarning, match="until as a number"):
        client.schedule("t", at_ms=AT_MS, every="P1D", until=4.1e9)
    assert script.body()["until_ms"] == 4_100_000_000_000  # deprecated seconds, sent in ms
    before_ms = time.time_ns() / 1e6
    client.schedule("t", delay_ms=60_000, cron="0 9 * * 1-5")
    assert before_ms + 60_000 <= sent_at_ms(script) < time.time_ns() / 1e6 + 60_001


@pytest.mark.parametrize(
    "series",
    [{"every": "PT1S"}, {"cron": "* * * * *", "timezone": "UTC"}],
    ids=["every", "cron"],
)
def test_a_retried_untimed_series_sends_the_same_bytes(
    clients: Callable[..., Client], series: dict[str, str]
) -> None:
    script = Script(error(503, "unavailable"), error(504, "timeout"), CREATED)
    assert clients(script, backoff_s=0.01).schedule(**series).created  # type: ignore[arg-type]
    assert len(script.requests) == 3
    assert len({r.content for r in script.requests}) == 1
    script = Script(error(503, "unavailable"), httpx.Response(201, json={"ids": ["a", "b"]}))
    batch = [TaskRequest(**series), TaskRequest("b", every="PT1M")]  # type: ignore[arg-type]
    assert clients(script, backoff_s=0.01).schedule_many(batch) == ["a", "b"]
    assert script.requests[0].content == script.requests[1].content
    tasks = script.body()["tasks"]
    assert isinstance(tasks, list) and all("at_ms" in task for task in tasks)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "at"),  # neither a time nor a series
        ({"timezone": "UTC"}, "at"),
        ({"until": 4e9}, "at"),
        ({"every": "P1M"}, "every"),  # months: cron's job
        ({"every": "PT0.5S"}, "every"),  # below 1 s
        ({"every": "PT0S"}, "every"),
        ({"every": "P"}, "every"),
        ({"every": "PT"}, "every"),
        ({"every": "P1DT"}, "every"),
        ({"every": "pt15m"}, "every"),
        ({"every": "PT1.0001S"}, "every"),
        ({"every": "P999999999W"}, "every"),  # past 9999
        ({"every": 900}, "every"),  # not a duration string
        ({"every": "PT1M", "at": 4e9, "delay_s": 1}, "at"),
        ({"every": "PT1M", "at_ms": AT_MS, "delay_ms": 1}, "at_ms"),
        ({"every": "PT1M", "until": "2099-01-01T00:00:00Z", "until_ms": 1}, "until"),
        ({"cron": 5}, "cron"),
        ({"cron": "* * * * *", "timezone": b"UTC"}, "timezone"),
        ({"cron": "* * * * *", "until": [1]}, "until"),
        ({"every": "PT1M", "until": float("nan")}, "until"),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # delay_s, a number as a time
def test_series_input_the_client_can_check_is_refused_without_a_request(
    clients: Callable[..., Client], kwargs: dict[str, object], field: str
) -> None:
    script = Script(CREATED)
    client = clients(script)
    with pytest.raises(InvalidRequest) as caught:
        client.schedule("t", **kwargs)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.field) == (None, field)
    with pytest.raises(InvalidRequest) as in_batch:
        client.schedule_many([TaskRequest(at_ms=AT_MS), TaskRequest("u", **kwargs)])  # type: ignore[arg-type]
    assert in_batch.value.field == f"tasks[1].{field}"
    assert script.requests == []


def test_the_neither_error_mentions_series(clients: Callable[..., Client]) -> None:
    with pytest.raises(InvalidRequest) as caught:
        clients(Script(CREATED)).schedule("t")
    assert "every or cron" in caught.value.message


def test_the_daemons_error_on_a_time_the_client_chose_names_the_series(
    clients: Callable[..., Client],
) -> None:
    script = Script(error(422, "invalid", "tasks[1].at_ms"), error(422, "invalid", "until"))
    client = clients(script)
    with pytest.raises(InvalidRequest) as caught:
        client.schedule_many([TaskRequest(at_ms=AT_MS), TaskRequest(cron="* * * * *")])
    assert caught.value.field == "tasks[1].cron"  # the caller gave no at
    with pytest.raises(InvalidRequest) as until:
        client.schedule(every="PT1M", until="1970-01-01T00:00:01Z")
    assert until.value.field == "until"


SERIES_SHOWN = {
    "id": "t",
    "due_ms": AT_MS,
    "at": 4e9,
    "routing_key": "k",
    "state": "scheduled",
    "payload": "",
    "every": "PT15M",
    "until_ms": 4_100_000_000_500,
    "until": 4_100_000_000.5,
    "occurrence": 3,
}


def test_get_and_list_read_a_series(clients: Callable[..., Client]) -> None:
    cron: dict[str, object] = {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
    client = clients(
        Script(
            httpx.Response(200, json=SERIES_SHOWN),
            httpx.Response(200, json={**SERIES_SHOWN, "stopping": True}),
            page(listed("c", AT_MS, occurrence=1, **cron), listed("one-off")),
        )
    )
    assert client.get("t") == TaskStatus(
        "t",
        4_000_000_000_000,
        "k",
        TaskState.SCHEDULED,
        every="PT15M",
        until_ms=4_100_000_000_500,
        occurrence=3,
    )
    stopping = client.get("t")
    assert stopping is not None and stopping.stopping is True
    series, one_off = client.list_page().tasks
    assert series == TaskSummary(
        "c",
        4_000_000_000_000,
        "k",
        TaskState.SCHEDULED,
        cron="0 9 * * 1-5",
        timezone="Europe/Berlin",
        occurrence=1,
    )
    assert (one_off.every, one_off.cron, one_off.occurrence, one_off.stopping) == (
        None,
        None,
        None,
        False,
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"every": 900},
        {"cron": ["*"]},
        {"timezone": None},
        {"until_ms": "2030-01-01"},
        {"until_ms": 1.5},
        {"occurrence": 0},
        {"occurrence": True},
        {"occurrence": 1.5},
        {"stopping": False},
        {"stopping": 1},
    ],
)
def test_an_unexpected_series_in_an_answer_is_an_api_error(
    clients: Callable[..., Client], extra: dict[str, object]
) -> None:
    with pytest.raises(ApiError) as caught:
        clients(Script(httpx.Response(200, json={**SERIES_SHOWN, **extra}))).get("t")
    assert caught.value.code == "bad_response"


def test_async_client_schedules_and_reads_a_series_the_same_way() -> None:
    script = Script(error(503, "unavailable"), CREATED, httpx.Response(200, json=SERIES_SHOWN))

    async def handler(request: httpx.Request) -> httpx.Response:
        return script(request)

    async def scenario() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient(URL, transport=transport, backoff_s=0.001) as client:
            await client.schedule("t", every="PT15M", until_ms=4_100_000_000_000)
            status = await client.get("t")
            assert status is not None
            assert (status.every, status.until_ms, status.occurrence) == (
                "PT15M",
                4_100_000_000_000 + 500,
                3,
            )
            with pytest.raises(InvalidRequest) as caught:
                await client.schedule("t", every="P1Y")
            assert caught.value.field == "every"

    before_ms = time.time_ns() / 1e6
    asyncio.run(scenario())
    assert script.requests[0].content == script.requests[1].content  # retried as sent
    assert set(script.body(0)) == {"id", "at_ms", "every", "until_ms"}
    assert sent_at_ms(script, 0) >= before_ms + 900_000
    assert len(script.requests) == 3
