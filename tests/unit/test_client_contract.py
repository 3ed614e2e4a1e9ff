"""The Python client (``triggerhook_client``, which imports none of the daemon's
modules) reads every answer of the HTTP API as the daemon means it.

The daemon's side is its table of outcomes, ``triggerhook.api.http.HTTP_RENDERING``
(status, error code and headers per :class:`~triggerhook.domain.outcomes.Outcome`),
and the bodies it builds from them; the client's side is
``triggerhook_client.errors`` (status and code -> exception class,
``RETRIED_STATUSES``) and ``triggerhook_client.calls`` (which statuses each
call reads as its result, and the retry decision). The answers fed to the
client are the daemon's own (its ``ApiError.response()`` and body builders), not
hand-written copies.

Every test iterates over the daemon's table, so an outcome added to it (or a
status or code changed) fails here until the client's reading of it is decided
in :data:`ERROR_READING` or :data:`SUCCESS_CALLS` below.

The metadata, listing, counting, timeline and bulk-cancel calls answer outside
that table (their handlers, ``triggerhook.api.listing``, build the bodies), so
the last section runs the real :class:`~triggerhook_client.AsyncClient`
against the daemon's own HTTP application (``HttpApi`` over the in-memory
store, served in-process by aiohttp's ``TestServer``): the query strings and
bodies the client builds are parsed by the daemon's parsers, and its answers
read by the client's, and each result is checked against what the store holds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st
from support.dedup import refuse_as_fired
from support.fakes import DEFAULT_NOW_MS, FakeClock, FakeStore
from support.served import served
from triggerhook_client import (
    AlreadyFired,
    ApiError,
    AsyncClient,
    BulkCancelled,
    Conflict,
    Copies,
    Forbidden,
    InvalidRequest,
    Late,
    NotASeries,
    NotFound,
    OverQuota,
    Scheduled,
    SeriesChange,
    TaskRequest,
    TaskStatus,
    TaskSummary,
    Timeline,
    TooLate,
    Unauthorized,
    Unavailable,
    times,
)
from triggerhook_client.calls import RESERVED_IDS, BaseClient, Call, Filter, Retry
from triggerhook_client.errors import RETRIED_STATUSES, error_from
from triggerhook_client.retry import Attempts

from triggerhook.api import bodies as daemon_bodies
from triggerhook.api.http import HTTP_RENDERING, HttpRendering
from triggerhook.api.http import ApiError as DaemonError
from triggerhook.api.render import due_json, series_json
from triggerhook.api.render import task_json as _info
from triggerhook.app import Scheduled as Copy
from triggerhook.app import TriggerHook
from triggerhook.domain.meta import FIRE, LateKind, LatePolicy, Meta
from triggerhook.domain.outcomes import Outcome
from triggerhook.domain.recurrence import Recurrence, parse_every
from triggerhook.domain.task import InsertOutcome, Task, TaskInfo, TaskState
from triggerhook.domain.timeparse import parse_at
from triggerhook.errors import ValidationError
from triggerhook.settings import Settings

AT_MS = 1_893_456_000_250

# The daemon's HTTP answers: errors (with a code in the body) and successes.
ERRORS: dict[Outcome, HttpRendering] = {
    outcome: rendering
    for outcome, rendering in HTTP_RENDERING.items()
    if rendering is not None and rendering.code is not None
}
SUCCESSES: dict[Outcome, HttpRendering] = {
    outcome: rendering
    for outcome, rendering in HTTP_RENDERING.items()
    if rendering is not None and rendering.code is None
}

# How a caller catches each error the daemon answers, and whether the client
# sends the request again (docs/api.md, "Errors" and "Python client"; the
# groups of triggerhook/domain/outcomes.py: the task's state says no, bad
# input, not now, a bug).
ERROR_READING: dict[Outcome, tuple[type[ApiError], bool]] = {
    Outcome.CONFLICT: (Conflict, False),
    Outcome.NOT_FOUND: (NotFound, False),
    Outcome.TOO_LATE: (TooLate, False),
    Outcome.NOT_A_SERIES: (NotASeries, False),
    Outcome.ALREADY_FIRED: (AlreadyFired, False),  # a Conflict, with fired_ms
    Outcome.INVALID: (InvalidRequest, False),
    Outcome.MALFORMED_JSON: (InvalidRequest, False),
    Outcome.UNSUPPORTED_MEDIA_TYPE: (InvalidRequest, False),
    Outcome.TOO_LARGE: (InvalidRequest, False),
    # Bad input too ("nothing written, never worth retrying as is").
    Outcome.REQUEST_TIMEOUT: (InvalidRequest, False),
    # A read over its bounds: the same read costs as much again (narrow the filter).
    Outcome.TOO_COSTLY: (InvalidRequest, False),
    Outcome.UNAUTHORIZED: (Unauthorized, False),
    Outcome.FORBIDDEN: (Forbidden, False),  # the namespace's rule: the same call is refused again
    # Not now, but the caller's doing: the client does not send it again at once.
    Outcome.OVER_QUOTA: (OverQuota, False),
    Outcome.UNAVAILABLE: (Unavailable, True),
    Outcome.OVERLOADED: (Unavailable, True),  # answered as unavailable
    Outcome.STOPPING: (Unavailable, True),
    Outcome.INTERNAL: (ApiError, False),  # the base class: an unexpected failure
}

# Where the client reads an error today other than the daemon means it (none:
# an entry here makes its case an expected failure, strict).
KNOWN_GAPS: dict[Outcome, str] = {}

# The fields the daemon names in these answers (the client renames them to the caller's).
FIELDS: dict[Outcome, str] = {
    Outcome.INVALID: "at_ms",
    Outcome.CONFLICT: "id",
    Outcome.ALREADY_FIRED: "id",
}
FIRED_MS = 1_893_455_999_000
RENAME = {"at_ms": "delay_ms"}


def daemon_answer(outcome: Outcome) -> tuple[httpx.Response, DaemonError]:
    """The daemon's own error answer for ``outcome``, as the client receives it."""
    error = DaemonError(
        outcome,
        field=FIELDS.get(outcome),
        # The values any message template takes (str.format ignores the rest).
        id="t-1",
        detail="must be a number",
        what="database",
        limit=1024,
        timeout_s=60,
        fired_ms=FIRED_MS,
    )
    return as_received(error.response()), error


def as_received(response: Any) -> httpx.Response:
    """An aiohttp ``web.Response`` as httpx hands it to the client."""
    body = response.body
    assert body is None or isinstance(body, bytes)
    return httpx.Response(
        response.status, headers=list(response.headers.items()), content=body or b""
    )


def each(table: dict[Outcome, HttpRendering], gaps: dict[Outcome, str]) -> list[Any]:
    """The outcomes of ``table`` as parameters, those in ``gaps`` xfail (strict)."""
    return [
        pytest.param(
            outcome,
            id=outcome.code,
            marks=[pytest.mark.xfail(strict=True, reason=gaps[outcome])] if outcome in gaps else [],
        )
        for outcome in table
    ]


# -- errors -------------------------------------------------------------------------------------


def test_every_http_answer_of_the_daemon_has_a_decided_client_reading() -> None:
    assert set(ERRORS) == set(ERROR_READING), (
        "an error outcome was added to (or removed from) HTTP_RENDERING: decide how the "
        "client reads it (client/errors.py) and record it in ERROR_READING"
    )
    assert set(SUCCESSES) == set(SUCCESS_CALLS), (
        "a success outcome was added to (or removed from) HTTP_RENDERING: decide which "
        "client call reads it and record it in SUCCESS_CALLS"
    )
    assert ERRORS and SUCCESSES  # the table is read as it is meant


@pytest.mark.parametrize("outcome", each(ERRORS, KNOWN_GAPS))
def test_an_error_answer_raises_the_class_the_daemon_means(outcome: Outcome) -> None:
    expected, _retried = ERROR_READING[outcome]
    response, sent = daemon_answer(outcome)
    error = error_from(response, RENAME)
    assert type(error) is expected, (outcome, sent.status, sent.code, type(error))
    field = FIELDS.get(outcome)
    assert (error.status, error.code, error.message, error.field) == (
        sent.status,
        sent.code,
        sent.message,
        RENAME.get(field, field) if field is not None else None,
    )


def test_already_fired_is_a_conflict_that_says_when_it_fired() -> None:
    response, sent = daemon_answer(Outcome.ALREADY_FIRED)
    assert (sent.status, sent.code) == (409, "already_fired")
    assert response.json()["error"] == {
        "code": "already_fired",
        "message": f"task 't-1' fired at {FIRED_MS} (epoch ms), within its dedup window",
        "field": "id",
        "fired_ms": FIRED_MS,
    }
    error = error_from(response, {})
    assert isinstance(error, AlreadyFired) and isinstance(error, Conflict)
    assert error.fired_ms == FIRED_MS
    # An answer without it (a proxy's rewrite, say) is still already_fired, when unknown.
    bare = httpx.Response(409, json={"error": {"code": "already_fired", "message": "m"}})
    unknown = error_from(bare, {})
    assert isinstance(unknown, AlreadyFired) and unknown.fired_ms is None
    odd = httpx.Response(
        409, json={"error": {"code": "already_fired", "message": "m", "fired_ms": "soon"}}
    )
    assert getattr(error_from(odd, {}), "fired_ms", "absent") is None
    # No other error's answer carries it.
    for outcome in ERRORS:
        if outcome is not Outcome.ALREADY_FIRED:
            assert "fired_ms" not in daemon_answer(outcome)[0].json()["error"], outcome


@pytest.mark.parametrize("outcome", each(ERRORS, {}))
def test_only_the_answers_that_mean_not_now_are_retried(outcome: Outcome) -> None:
    expected, retried = ERROR_READING[outcome]
    response, sent = daemon_answer(outcome)
    assert (sent.status in RETRIED_STATUSES) is retried, (outcome, sent.status)
    # The decision itself, as both clients take it after an answer.
    call = BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS))
    attempts = Attempts(retries=1, backoff_s=0.0)
    with pytest.raises((Retry, ApiError)) as raised:
        attempts.result(call, response)
    if retried:
        assert isinstance(raised.value, Retry), (outcome, raised.value)
        assert isinstance(raised.value.error, expected)
        # After the daemon's Retry-After (the back-off here is 0).
        assert raised.value.delay_s == float(sent.headers.get("Retry-After", 0))
    else:
        assert isinstance(raised.value, ApiError), (outcome, raised.value)
        assert not isinstance(raised.value, Unavailable)
        assert raised.value.status == sent.status


def test_a_lookup_of_an_unknown_task_is_no_task_rather_than_an_error() -> None:
    response, _sent = daemon_answer(Outcome.NOT_FOUND)
    call = BaseClient._get_call("t-1")
    assert response.status_code in call.ok
    assert call.parse(response) is None
    # Every other call reads 404 as NotFound.
    others: list[Call[Any]] = [
        BaseClient._cancel_call("t-1"),
        BaseClient._reschedule_call("t-1", None, AT_MS),
    ]
    others += [*SERIES_CALLS, BaseClient._backfill_call("t-1", AT_MS, AT_MS + 1)]
    for other in others:
        assert response.status_code not in other.ok
        assert type(error_from(response, other.rename)) is NotFound


# -- successes ---------------------------------------------------------------------------------


def _json(status: int, data: object) -> httpx.Response:
    return httpx.Response(status, json=data)


def _created(status: int) -> httpx.Response:
    # As HttpApi.reschedule builds it (and create before it said its outcome).
    return _json(status, due_json("t-1", AT_MS))


def _create_answer(outcome: str) -> Callable[[int], httpx.Response]:
    def make(status: int) -> httpx.Response:  # as HttpApi.create builds it
        return _json(status, {**due_json("t-1", AT_MS), "outcome": outcome})

    return make


def _empty(status: int) -> httpx.Response:
    return httpx.Response(status)  # as HttpApi.cancel answers: no body


def _found(payload: bytes) -> Callable[[int], httpx.Response]:
    def make(status: int) -> httpx.Response:
        task = Task("t-1", AT_MS, "billing.charge", payload)
        return _json(status, _info(TaskInfo(task, TaskState.FIRING)))

    return make


def _series(outcome: Outcome, *copies: Copy) -> Callable[[int], httpx.Response]:
    def make(status: int) -> httpx.Response:  # as the daemon's series handlers build it
        return _json(status, series_json("t-1", outcome, copies if copies else None))

    return make


SERIES_CALLS: list[Call[Any]] = [
    BaseClient._series_change_call("t-1", "pause"),
    BaseClient._series_change_call("t-1", "resume"),
    BaseClient._trigger_call("t-1"),
]
COPIES = (
    Copy(Task(f"t-1:{AT_MS}", AT_MS, "k"), InsertOutcome.CREATED),
    Copy(Task(f"t-1:{AT_MS + 60_000}", AT_MS + 60_000, "k"), InsertOutcome.EXISTS),
)
READ_COPIES = (
    Scheduled(f"t-1:{AT_MS}", AT_MS, True, "created"),
    Scheduled(f"t-1:{AT_MS + 60_000}", AT_MS + 60_000, False, "exists"),  # an earlier attempt's
)

# Per success outcome: the client calls that get it, the daemon's answer body
# (given the status) and the result the client must read from it.
SUCCESS_CALLS: dict[Outcome, list[tuple[Call[Any], Callable[[int], httpx.Response], object]]] = {
    Outcome.CREATED: [
        (
            BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS)),
            _created,
            Scheduled("t-1", AT_MS, True, "created"),
        ),
        (
            BaseClient._schedule_many_call([TaskRequest("t-1", at_ms=AT_MS)]),
            lambda status: _json(status, {"ids": ["t-1"]}),
            ["t-1"],
        ),
    ],
    Outcome.EXISTS: [
        (
            BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS)),
            _created,
            Scheduled("t-1", AT_MS, False, "exists"),  # a safe repeat: nothing written
        ),
        (
            BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS)),
            _create_answer("exists"),
            Scheduled("t-1", AT_MS, False, "exists"),
        ),
    ],
    Outcome.REPLACED: [
        (
            BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS, on_conflict="replace")),
            _create_answer("replaced"),
            Scheduled("t-1", AT_MS, False, "replaced"),
        ),
    ],
    Outcome.KEPT: [
        (
            BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS, on_conflict="keep")),
            _create_answer("kept"),
            Scheduled("t-1", AT_MS, False, "kept"),  # the stored task's due time
        ),
    ],
    Outcome.RESCHEDULED: [
        (
            BaseClient._reschedule_call("t-1", None, AT_MS),
            _created,
            Scheduled("t-1", AT_MS, False, "rescheduled"),
        ),
    ],
    Outcome.CANCELLED: [
        (BaseClient._cancel_call("t-1"), _empty, None),
    ],
    Outcome.FOUND: [
        (
            BaseClient._get_call("t-1"),
            _found(b"text"),
            TaskStatus("t-1", AT_MS, "billing.charge", TaskState.FIRING, b"text"),
        ),
        (
            BaseClient._get_call("t-1"),
            _found(b"\xff\x00"),  # not UTF-8: sent as payload_b64
            TaskStatus("t-1", AT_MS, "billing.charge", TaskState.FIRING, b"\xff\x00"),
        ),
    ],
    **{
        outcome: [
            (
                BaseClient._series_change_call("t-1", action),
                _series(outcome),
                SeriesChange("t-1", outcome.code),
            )
        ]
        for action, outcome in (
            ("pause", Outcome.PAUSED),
            ("pause", Outcome.PAUSED_AFTER_THIS),
            ("resume", Outcome.RESUMED),
            ("resume", Outcome.ENDED),
        )
    },
    Outcome.TRIGGERED: [
        (
            BaseClient._trigger_call("t-1"),
            _series(Outcome.TRIGGERED, COPIES[0]),
            Copies("t-1", "triggered", READ_COPIES[:1]),
        ),
    ],
    Outcome.BACKFILLED: [
        (
            BaseClient._backfill_call("t-1", AT_MS, AT_MS + 60_001),
            _series(Outcome.BACKFILLED, *COPIES),
            Copies("t-1", "backfilled", READ_COPIES),
        ),
        (  # none in the range: nothing written
            BaseClient._backfill_call("t-1", AT_MS, AT_MS + 1),
            lambda status: _json(status, {"id": "t-1", "outcome": "backfilled", "copies": []}),
            Copies("t-1", "backfilled", ()),
        ),
    ],
}


@pytest.mark.parametrize("outcome", each(SUCCESSES, {}))
def test_a_success_answer_is_read_as_the_result_the_daemon_means(outcome: Outcome) -> None:
    status = SUCCESSES[outcome].status
    calls = SUCCESS_CALLS[outcome]
    assert calls
    for call, answer, result in calls:
        assert status in call.ok, (outcome, call.method, call.path, status)
        assert call.parse(answer(status)) == result, (outcome, call.method, call.path)


# -- metadata, listing and bulk cancel: against the daemon's own HTTP application ---------------

NOW_MS = int(DEFAULT_NOW_MS)  # the engine's clock stands still here: nothing is ever due
DEFAULT_KEY = "fire.default"


@dataclass
class InProcess:
    """A started library façade over the in-memory store, its HTTP API, and its
    clock (standing still)."""

    hook: TriggerHook
    app: web.Application
    clock: FakeClock
    store: FakeStore

    def serve(self, scenario: Callable[[AsyncClient], Awaitable[None]]) -> None:
        """Run ``scenario`` with the real client of this daemon (no retries:
        every answer is the daemon's first)."""

        async def run() -> None:
            server = TestServer(self.app)
            await server.start_server()
            try:
                async with AsyncClient(str(server.make_url("")), retries=0) as client:
                    await scenario(client)
            finally:
                await server.close()

        asyncio.run(run())

    def meta(self, task_id: str) -> Meta:
        info = self.hook.get(task_id)
        assert info is not None, task_id
        return info.task.meta


@pytest.fixture
def daemon() -> Iterator[InProcess]:
    settings = Settings(
        instance_id="unit",
        switch_interval_us=0,  # leave the interpreter's switch interval alone
        shutdown_timeout_s=1,
        default_routing_key=DEFAULT_KEY,
    )
    with served(settings) as made:
        yield InProcess(made.hook, made.api.app, made.clock, made.store)


def client_at_ms(value: float) -> int | None:
    """The epoch ms the client sends for a deprecated number of seconds as
    ``at``; None: it refuses it."""
    try:
        with pytest.warns(DeprecationWarning):
            sent = times.instant(value, "at")
    except InvalidRequest as exc:
        assert (exc.status, exc.field) == (None, "at")
        return None
    assert isinstance(sent, int)
    return sent


def daemon_at_ms(value: float) -> int | None:
    try:
        return parse_at(value, "at", past_ok=True)
    except ValidationError as exc:
        assert exc.field == "at"
        return None


@given(
    st.one_of(
        st.floats(allow_nan=False),
        st.integers(),
        st.integers(-(10**13), 10**13),
        st.floats(-(10**12), 3 * 10**11),
        st.sampled_from([20_261_201, 20_261_201.0, 253_402_300_799.999, 253_402_300_799.9991]),
    )
)
def test_a_number_as_at_is_sent_in_ms_as_the_daemon_reads_it(value: float) -> None:
    """A number given as ``at`` (deprecated: epoch seconds) is sent as
    ``at_ms``: rounded up, clamped and refused exactly as the daemon reads
    the number itself (an 8-digit integer is ambiguous)."""
    assert client_at_ms(value) == daemon_at_ms(value)


def test_the_reserved_ids_are_the_daemons() -> None:
    # One list (triggerhook_client.rules), the same object on both sides.
    assert vars(daemon_bodies)["RESERVED_IDS"] is RESERVED_IDS
    assert {"batch", "count", "timeline", "cancel"} == RESERVED_IDS


DEADLINE_MS = 1_893_456_000_250  # 2030-01-01T00:00:00.250Z


@pytest.mark.parametrize(
    ("late", "policy", "shown"),
    [
        ("fire", FIRE, "fire"),
        ({"skip_after_ms": 1500}, LatePolicy(LateKind.SKIP_AFTER, 1500), {"skip_after_ms": 1500}),
        (
            {"deadline": datetime(2030, 1, 1, 0, 0, 0, 250_000)},  # naive = UTC
            LatePolicy(LateKind.DEADLINE, DEADLINE_MS),
            {"deadline_ms": DEADLINE_MS},
        ),
        (
            {"deadline": "2030-01-01T01:00:00.25+01:00"},
            LatePolicy(LateKind.DEADLINE, DEADLINE_MS),
            {"deadline_ms": DEADLINE_MS},
        ),
        (
            {"deadline": "2030-01-01T00:00:00.25"},  # no offset: UTC
            LatePolicy(LateKind.DEADLINE, DEADLINE_MS),
            {"deadline_ms": DEADLINE_MS},
        ),
        ({"deadline_ms": DEADLINE_MS}, LatePolicy(LateKind.DEADLINE, DEADLINE_MS), None),
        pytest.param(  # deprecated: epoch seconds
            {"deadline": 1_893_456_000.25},
            LatePolicy(LateKind.DEADLINE, DEADLINE_MS),
            None,
            marks=pytest.mark.filterwarnings("ignore::DeprecationWarning"),
        ),
    ],
)
def test_metadata_is_stored_as_sent_and_read_back_as_stored(
    daemon: InProcess, late: Late, policy: LatePolicy, shown: Late | None
) -> None:
    expected = Meta(
        tags=("billing", "tenant:7"),
        content_type="application/json",
        content_encoding="identity",
        headers=(("attempt", 3), ("tenant", "7"), ("urgent", True)),
        late=policy,
    )

    async def scenario(client: AsyncClient) -> None:
        sent = await client.schedule(
            "meta-1",
            at_ms=AT_MS,
            payload="{}",
            tags=["tenant:7", "billing", "tenant:7"],  # a set to the daemon
            content_type="application/json",
            content_encoding="identity",
            headers={"tenant": "7", "attempt": 3, "urgent": True},
            late=late,
        )
        assert sent == Scheduled("meta-1", AT_MS, True, "created")
        assert daemon.meta("meta-1") == expected
        status = await client.get("meta-1")
        assert status == TaskStatus(
            "meta-1",
            AT_MS,
            DEFAULT_KEY,
            TaskState.SCHEDULED,
            b"{}",
            tags=("billing", "tenant:7"),
            content_type="application/json",
            content_encoding="identity",
            headers={"attempt": 3, "tenant": "7", "urgent": True},
            late=shown if shown is not None else {"deadline_ms": DEADLINE_MS},
        )
        # What get shows, sent again, is the same task: a safe repeat, not a conflict.
        again = await client.schedule(
            status.id,
            at_ms=status.due_ms,
            payload=status.payload,
            tags=status.tags,
            content_type=status.content_type,
            content_encoding=status.content_encoding,
            headers=status.headers,
            late=status.late,
        )
        assert again.created is False
        with pytest.raises(Conflict):
            await client.schedule("meta-1", at_ms=AT_MS, payload="{}", tags=["other"])

    daemon.serve(scenario)


def test_a_task_without_metadata_reads_as_none(daemon: InProcess) -> None:
    async def scenario(client: AsyncClient) -> None:
        await client.schedule("plain", at="2030-01-01T00:00:00.250")  # no offset: UTC
        assert await client.get("plain") == TaskStatus(
            "plain", AT_MS, DEFAULT_KEY, TaskState.SCHEDULED
        )
        [listed] = [task async for task in client.list(prefix="plain")]
        assert listed == TaskSummary("plain", AT_MS, DEFAULT_KEY, TaskState.SCHEDULED)

    daemon.serve(scenario)


def test_listing_counting_the_timeline_and_bulk_cancel(daemon: InProcess) -> None:
    base_s = 1_900_000_000  # 2030-03-17: epoch seconds, whole
    ids = [f"tenant-7:{n:02}" for n in range(9)]
    requests = [
        TaskRequest(
            task_id,
            at_ms=(base_s + n // 2) * 1000,
            routing_key=("fire.a", "fire.b")[n % 2],
            tags=["tenant:7", *(["vip"] if n < 3 else [])],
        )
        for n, task_id in enumerate(ids)
    ]

    async def scenario(client: AsyncClient) -> None:
        assert await client.schedule_many(requests) == ids
        await client.schedule("other-1", at_ms=base_s * 1000, tags=["tenant:8"])
        # Pages of 2, followed by cursor: every task once, in due order (ties by id).
        walked = [t async for t in client.list(tag="tenant:7", page_size=2)]
        assert [t.id for t in walked] == ids
        assert walked[0] == TaskSummary(
            ids[0], base_s * 1000, "fire.a", TaskState.SCHEDULED, tags=("tenant:7", "vip")
        )
        first = await client.list_page(prefix="tenant-7:", limit=4)
        assert [t.id for t in first.tasks] == ids[:4] and first.next_cursor is not None
        rest = await client.list_page(prefix="tenant-7:", limit=4, cursor=first.next_cursor)
        assert [t.id for t in rest.tasks] == ids[4:8] and rest.next_cursor is not None
        last = await client.list_page(prefix="tenant-7:", limit=4, cursor=rest.next_cursor)
        assert ([t.id for t in last.tasks], last.next_cursor) == (ids[8:], None)
        # Times as the caller has them: a datetime, RFC 3339 with an offset (and, deprecated,
        # epoch seconds).
        ranged = client.list(
            prefix="tenant-7:",
            due_after=datetime.fromtimestamp(base_s + 1, timezone(timedelta(hours=5))),
            due_before=datetime.fromtimestamp(
                base_s + 3, timezone(timedelta(hours=-2))
            ).isoformat(),
        )
        assert [t.id async for t in ranged] == ids[2:6]
        assert await client.count(tag="tenant:7", routing_key="fire.b") == 4
        with pytest.warns(DeprecationWarning, match="due_before as a number"):
            assert await client.count(tag="vip", due_before=base_s + 1) == 2
        assert await client.count(prefix="tenant-7:", state=TaskState.FIRING) == 0
        assert await client.count(prefix="tenant-7:", state="scheduled") == 9
        start = datetime.fromtimestamp(base_s, UTC)
        assert await client.count(due_after_ms=base_s * 1000 + 1000, prefix="tenant-7:") == 7
        assert await client.count(due_before_ms=base_s * 1000 + 1000, tag="vip") == 2
        line = await client.timeline(prefix="tenant-7:", bucket_ms=2000, buckets=3, start=start)
        assert line == Timeline(base_s * 1000, 2000, 3, {"fire.a": (2, 2, 1), "fire.b": (2, 2, 0)})
        assert (
            await client.timeline(
                prefix="tenant-7:", bucket_ms=2000, buckets=3, start_ms=base_s * 1000
            )
            == line
        )
        with pytest.warns(DeprecationWarning, match="bucket_s"):
            assert (
                await client.timeline(prefix="tenant-7:", bucket_s=2, buckets=3, start=start)
                == line
            )
        done = await client.cancel_where(tag="tenant:7", routing_key="fire.a")
        assert done == BulkCancelled(5, 0)
        assert await client.cancel_where(tag="tenant:7", routing_key="fire.a") == BulkCancelled(
            0, 0
        )  # a second run: nothing more
        with pytest.warns(DeprecationWarning, match="due_after as a number"):
            assert await client.cancel_where(prefix="tenant-7:", due_after=base_s + 3) == (
                BulkCancelled(1, 0)
            )
        assert [t.id async for t in client.list(prefix="tenant-")] == ids[1:7:2]

    daemon.serve(scenario)
    assert daemon.hook.get("other-1") is not None  # never named: untouched


# -- the dedup window ---------------------------------------------------------------------------

DAY_MS = 86_400_000


def _sent(call: Call[Any]) -> Any:
    assert call.body is not None
    return json.loads(call.body)


def test_the_client_sends_a_dedup_window_only_when_given() -> None:
    # An older daemon refuses a field it does not know: none is sent unless asked for.
    plain = _sent(BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS)))
    assert "dedup_window_ms" not in plain
    given = BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS, dedup_window_ms=0))
    assert _sent(given)["dedup_window_ms"] == 0  # given: "none", whatever the daemon's default
    batch = BaseClient._schedule_many_call(
        [TaskRequest("a", at_ms=AT_MS), TaskRequest("b", at_ms=AT_MS, dedup_window_ms=DAY_MS)]
    )
    assert [t.get("dedup_window_ms") for t in _sent(batch)["tasks"]] == [None, DAY_MS]
    for wrong in (1.5, "60000", True):
        with pytest.raises(InvalidRequest) as refused:
            BaseClient._schedule_call(TaskRequest("t-1", at_ms=AT_MS, dedup_window_ms=wrong))  # type: ignore[arg-type]
        assert (refused.value.status, refused.value.field) == (None, "dedup_window_ms")


def test_a_dedup_window_is_stored_as_sent_and_read_back(daemon: InProcess) -> None:
    async def scenario(client: AsyncClient) -> None:
        sent = await client.schedule("w-1", at_ms=AT_MS, dedup_window_ms=DAY_MS)
        assert sent == Scheduled("w-1", AT_MS, True, "created")
        assert daemon.meta("w-1").dedup_window_ms == DAY_MS
        status = await client.get("w-1")
        assert status == TaskStatus(
            "w-1", AT_MS, DEFAULT_KEY, TaskState.SCHEDULED, dedup_window_ms=DAY_MS
        )
        [listed] = [task async for task in client.list(prefix="w-")]
        assert listed.dedup_window_ms == DAY_MS
        # As shown, sent again: the same task. Without it (the daemon's default, none): other.
        again = await client.schedule("w-1", at_ms=AT_MS, dedup_window_ms=status.dedup_window_ms)
        assert again.outcome == "exists"
        with pytest.raises(Conflict) as conflict:
            await client.schedule("w-1", at_ms=AT_MS)
        assert not isinstance(conflict.value, AlreadyFired)
        assert await client.schedule_many(
            [TaskRequest("w-2", at_ms=AT_MS, dedup_window_ms=1500)]
        ) == ["w-2"]
        assert daemon.meta("w-2").dedup_window_ms == 1500

    daemon.serve(scenario)


def test_a_create_of_an_id_fired_within_its_window_raises_already_fired(
    daemon: InProcess,
) -> None:
    fired_ms = NOW_MS - 1000
    refuse_as_fired(daemon.store, {"f-1": fired_ms})

    async def scenario(client: AsyncClient) -> None:
        with pytest.raises(AlreadyFired) as fired:
            await client.schedule("f-1", at_ms=AT_MS, dedup_window_ms=DAY_MS)
        assert (fired.value.status, fired.value.code, fired.value.field) == (
            409,
            "already_fired",
            "id",
        )
        assert fired.value.fired_ms == fired_ms
        assert await client.get("f-1") is None  # nothing written
        with pytest.raises(AlreadyFired) as in_batch:
            await client.schedule_many(
                [TaskRequest("f-0", at_ms=AT_MS), TaskRequest("f-1", at_ms=AT_MS)]
            )
        assert (in_batch.value.field, in_batch.value.fired_ms) == ("tasks[1].id", fired_ms)
        assert await client.get("f-0") is None  # all or nothing

    daemon.serve(scenario)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.schedule(at_ms=AT_MS, dedup_window_ms=31 * DAY_MS), "dedup_window_ms"),
        (lambda c: c.schedule(at_ms=AT_MS, dedup_window_ms=-1), "dedup_window_ms"),
        (
            lambda c: c.schedule_many(
                [TaskRequest(at_ms=AT_MS), TaskRequest(at_ms=AT_MS, dedup_window_ms=-1)]
            ),
            "tasks[1].dedup_window_ms",
        ),
        (lambda c: c.list_page(limit=1001), "limit"),
        (lambda c: c.list_page(cursor="bm9wZQ"), "cursor"),
        (lambda c: c.count(prefix="bad prefix"), "prefix"),
        (lambda c: c.count(due_after="soon"), "due_after"),
        (lambda c: c.count(state="done"), "state"),
        (lambda c: c.timeline(bucket_ms=10**11), "bucket_ms"),
        (lambda c: c.timeline(start_ms=10**16), "start_ms"),
        (lambda c: c.count(due_after_ms=10**16), "due_after_ms"),
        (lambda c: c.timeline(buckets=1441), "buckets"),
        (lambda c: c.cancel_where(tag="not a tag"), "tag"),
        (lambda c: c.schedule(at_ms=AT_MS, headers={"X-Mine": "a"}), "headers.X-Mine"),
        (lambda c: c.schedule(at_ms=AT_MS, tags=["ok", "not ok"]), "tags[1]"),
        (lambda c: c.schedule(at_ms=AT_MS, late={"deadline": "someday"}), "late.deadline"),
        (lambda c: c.schedule(at_ms=AT_MS, content_type=""), "content_type"),
        (
            lambda c: c.schedule_many(
                [TaskRequest(at_ms=AT_MS), TaskRequest(at_ms=AT_MS, tags=[""])]
            ),
            "tasks[1].tags[0]",
        ),
    ],
)
def test_the_daemons_refusals_name_the_callers_arguments(
    daemon: InProcess, call: Callable[[AsyncClient], Awaitable[object]], field: str
) -> None:
    async def scenario(client: AsyncClient) -> None:
        with pytest.raises(InvalidRequest) as caught:
            await call(client)
        assert (caught.value.status, caught.value.code, caught.value.field) == (
            422,
            "invalid",
            field,
        )

    daemon.serve(scenario)


def test_the_walk_renames_the_daemons_page_size_error(daemon: InProcess) -> None:
    async def scenario(client: AsyncClient) -> None:
        with pytest.raises(InvalidRequest) as caught:
            [t async for t in client.list(page_size=1001)]
        assert (caught.value.status, caught.value.field) == (422, "page_size")

    daemon.serve(scenario)


# -- series: the client's reading of every, its choice of a first time ---------------------------


def client_every_ms(text: str) -> int | None:
    """The length the client takes ``text`` for; None: it refuses it."""
    try:
        return times.every_ms(text, "every")
    except InvalidRequest as exc:
        assert (exc.status, exc.field) == (None, "every")
        return None


def daemon_every_ms(text: str) -> int | None:
    try:
        return parse_every(text)
    except ValidationError as exc:
        assert exc.field == "every"
        return None


@pytest.mark.parametrize(
    "text",
    [
        "PT15M",
        "P1D",
        "P2W",
        "PT1S",
        "PT1.5S",
        "PT1,5S",
        "PT0.999S",
        "PT1.001S",
        "P1W2DT3H4M5.006S",
        "PT90M",
        "PT999999999S",
        "P999999999W",  # past 9999
        "P1M",
        "P1Y",
        "P",
        "PT",
        "P1DT",
        "pt15m",
        " PT1M",
        "PT1M\n",
        "PT1.0001S",
        "PT-1S",
        "PT0S",
        "P0D",
        "PT1H1H",
        "PT\u0661S",  # a digit, but not an ASCII one
        "",
        "P" + "1" * 70 + "D",
    ],
)
def test_the_client_reads_every_as_the_daemon_does(text: str) -> None:
    """The client may not import domain/recurrence.py, so it has its own
    parser (it needs the length for an untimed series' first time): it must
    accept exactly what the daemon accepts, with the same length."""
    assert client_every_ms(text) == daemon_every_ms(text)


@given(
    st.one_of(
        st.text(alphabet="PTWDHMS0123456789.,", max_size=24),
        st.from_regex(
            r"P([0-9]{1,10}W)?([0-9]{1,10}D)?(T([0-9]{1,10}H)?([0-9]{1,10}M)?"
            r"([0-9]{1,10}([.,][0-9]{1,4})?S)?)?",
            fullmatch=True,
        ),
    )
)
def test_the_client_reads_any_every_as_the_daemon_does(text: str) -> None:
    assert client_every_ms(text) == daemon_every_ms(text)


WEDNESDAY_9H_MS = 1_700_038_800_000  # 2023-11-15T09:00:00Z, 10:00 in Berlin
UNTIMED_SERIES: list[dict[str, Any]] = [
    {"every": "PT15M"},
    {"every": "PT1.5S", "until_ms": 1_800_000_000_000},
    {"every": "PT1M", "until": "2030-01-01T00:00:00"},  # no offset: UTC
    {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"},
    {"cron": "0 9 * * 1-5"},  # UTC
]


@pytest.mark.parametrize("series", UNTIMED_SERIES)
def test_an_untimed_series_is_due_when_the_daemon_would_have_made_it(
    daemon: InProcess, monkeypatch: pytest.MonkeyPatch, series: dict[str, Any]
) -> None:
    """The client sends an at for a series given none: the first occurrence
    the daemon then stores is the one it chooses for the same body without
    an at (with both clocks at the same, fractional, millisecond)."""
    daemon.clock.set(WEDNESDAY_9H_MS - 59_999.75)  # a fraction: rounded up, as the daemon does
    monkeypatch.setattr(times, "now_ms", lambda: Decimal(repr(daemon.clock.now)))

    async def scenario(client: AsyncClient) -> None:
        made = await client.schedule("by-client", **series)
        async with httpx.AsyncClient(base_url=client.base_url) as raw:
            untimed = await raw.post("/v1/tasks", json={"id": "untimed", **series})
        assert untimed.status_code == 201, untimed.text
        assert made == Scheduled("by-client", untimed.json()["due_ms"], True, "created")
        if "cron" in series:  # the next matching minute
            assert made.due_ms == WEDNESDAY_9H_MS
        else:
            assert made.due_ms == WEDNESDAY_9H_MS - 59_999 + times.every_ms(series["every"], "")
        shown = await client.get("by-client")
        assert shown is not None and shown.occurrence == 1

    daemon.serve(scenario)
    by_client, untimed = (daemon.hook.get(task_id) for task_id in ("by-client", "untimed"))
    assert by_client is not None and untimed is not None
    assert by_client.task.due_ms == untimed.task.due_ms
    assert daemon.meta("by-client") == daemon.meta("untimed")


def test_the_clients_series_body_repeats_safely_where_an_untimed_one_conflicts(
    daemon: InProcess,
) -> None:
    """Why the client sends an at: the daemon compares the first occurrence,
    and an untimed body sent again a millisecond later names a later one."""
    body = BaseClient._schedule_call(TaskRequest("mine", every="PT1M")).body
    assert body is not None

    async def scenario(client: AsyncClient) -> None:
        headers = {"Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=client.base_url, headers=headers) as raw:
            assert (await raw.post("/v1/tasks", content=body)).status_code == 201
            untimed = {"id": "untimed", "every": "PT1M"}
            assert (await raw.post("/v1/tasks", json=untimed)).status_code == 201
            daemon.clock.advance(1)  # the retry arrives a millisecond later
            assert (await raw.post("/v1/tasks", content=body)).status_code == 200
            again = await raw.post("/v1/tasks", json=untimed)
            assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")

    daemon.serve(scenario)


@pytest.mark.parametrize(
    ("recur", "shown"),
    [
        (
            Recurrence(every_ms=900_000, until_ms=AT_MS + 5, occurrence=4, stopped=True),
            {"every": "PT15M", "until_ms": AT_MS + 5, "occurrence": 4, "stopping": True},
        ),
        (
            Recurrence(every_ms=1500),
            {"every": "PT1.5S", "occurrence": 1},
        ),
        (
            Recurrence(cron="0 9 * * 1-5", timezone="Europe/Berlin", occurrence=2),
            {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "occurrence": 2},
        ),
    ],
)
def test_a_series_is_read_as_the_daemon_shows_it(recur: Recurrence, shown: dict[str, Any]) -> None:
    info = TaskInfo(Task("t-1", AT_MS, "k", b"p", meta=Meta(recur=recur)), TaskState.SCHEDULED)
    expected = TaskSummary("t-1", AT_MS, "k", TaskState.SCHEDULED, **shown)
    found = BaseClient._get_call("t-1").parse(_json(200, _info(info)))
    assert found == TaskStatus(**{**_fields(expected), "payload": b"p"})
    page = BaseClient._list_call(Filter(), None, None).parse(
        _json(200, {"tasks": [_info(info, payload=False)], "next_cursor": None})
    )
    assert page.tasks == (expected,)


def _fields(summary: TaskSummary) -> dict[str, Any]:
    return {name: getattr(summary, name) for name in TaskSummary.__dataclass_fields__}


def test_a_series_to_the_end_of_time_is_refused_by_the_client_as_by_the_daemon(
    daemon: InProcess,
) -> None:
    every = "P2913300D"  # a valid every, but one from now is past 9999-12-31
    assert times.every_ms(every, "every") == parse_every(every)

    async def scenario(client: AsyncClient) -> None:
        with pytest.raises(InvalidRequest) as caught:
            await client.schedule("far", every=every)
        assert (caught.value.status, caught.value.field) == (None, "every")
        async with httpx.AsyncClient(base_url=client.base_url) as raw:
            refused = await raw.post("/v1/tasks", json={"id": "far", "every": every})
        assert refused.status_code == 422, refused.text

    daemon.serve(scenario)
