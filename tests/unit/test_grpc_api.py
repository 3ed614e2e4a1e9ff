"""The gRPC API (triggerhook.v1.Tasks) over the in-memory store, called through
a real gRPC channel: every method, the outcomes as status codes with the HTTP
API's error codes and fields in the trailing metadata (the cases of
test_http_api.py), authentication, and the bound on a message's size."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from support.dedup import refuse_as_fired
from support.fakes import FakeStore
from support.grpc_served import Caller, GrpcServed, grpc_served
from support.waiting import wait_for
from triggerhook_client.grpc import triggerhook_pb2 as pb

from triggerhook.api.grpc.server import GrpcApi
from triggerhook.settings import Settings
from triggerhook.wiring import grpc_config

AT_MS = 1_893_456_000_250  # far beyond arm_ahead_ms: never armed meanwhile
LATER_MS = AT_MS + 3_600_000
TOKEN = "s3cret"
FIRED_MS = 1_700_000_000_000
DAY_MS = 86_400_000
S = grpc.StatusCode


def settings(**overrides: Any) -> Settings:
    return Settings(instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1, **overrides)


@pytest.fixture
def api() -> Iterator[GrpcServed]:
    with grpc_served(settings(max_payload_bytes=64)) as served:
        yield served


def create(task_id: str = "t-1", **fields: Any) -> pb.CreateRequest:
    if not {"at", "at_ms", "delay_ms"} & fields.keys():
        fields["at_ms"] = AT_MS
    return pb.CreateRequest(id=task_id, **fields)


def arm(store: FakeStore, task_id: str) -> None:
    """The task committed to firing (being published), as if armed elsewhere."""
    stored = store.row(task_id)
    assert stored is not None
    store.put(stored.task, rev=stored.rev, fire_ms=stored.fire_ms, armed=True)


# -- every method ----------------------------------------------------------------------------


def test_create_get_reschedule_cancel(api: GrpcServed) -> None:
    call = api.caller.call
    written = call("Create", create(routing_key="a.b", payload=b"\xff\x00"))
    assert (written.id, written.due_ms, written.outcome) == ("t-1", AT_MS, "created")
    assert call("Create", create(routing_key="a.b", payload=b"\xff\x00")).outcome == "exists"
    found = call("Get", pb.GetRequest(id="t-1"))
    assert (found.id, found.due_ms, found.routing_key, found.state) == (
        "t-1",
        AT_MS,
        "a.b",
        "scheduled",
    )
    assert found.payload == b"\xff\x00" and not found.throttled
    moved = call("Reschedule", pb.RescheduleRequest(id="t-1", at_ms=LATER_MS))
    assert (moved.id, moved.due_ms, moved.outcome) == ("t-1", LATER_MS, "rescheduled")
    assert call("Cancel", pb.CancelRequest(id="t-1")).outcome == "cancelled"
    assert api.daemon.store.ids() == set()


def test_a_create_takes_rfc_3339_text_metadata_and_a_series(api: GrpcServed) -> None:
    call = api.caller.call
    request = create(
        "meta",
        at="2030-01-01T00:00:00.250Z",
        tags=["b", "a"],
        content_type="text/plain",
        headers={"n": pb.HeaderValue(number=7), "s": pb.HeaderValue(text="x")},
        late=pb.Late(skip_after_ms=5000),
        dedup_window_ms=DAY_MS,
        on_conflict="replace",
    )
    assert call("Create", request).due_ms == AT_MS
    found = call("Get", pb.GetRequest(id="meta"))
    assert list(found.tags) == ["a", "b"]
    assert found.content_type == "text/plain"
    assert found.headers["n"].number == 7 and found.headers["s"].text == "x"
    assert found.late.skip_after_ms == 5000 and found.dedup_window_ms == DAY_MS
    series = call("Create", pb.CreateRequest(id="every", every="PT15M", routing_key="s.x"))
    assert series.outcome == "created"
    shown = call("Get", pb.GetRequest(id="every"))
    assert (shown.every, shown.occurrence) == ("PT15M", 1)
    assert not shown.HasField("payload") or shown.payload == b""


def test_a_batch_creates_all_or_none_naming_the_task_at_fault(api: GrpcServed) -> None:
    call = api.caller.call
    batch = pb.CreateBatchRequest(tasks=[create("a"), create("b", delay_ms=60_000)])
    written = call("CreateBatch", batch)
    assert (list(written.ids), list(written.outcomes)) == (["a", "b"], ["created", "created"])
    bad = pb.CreateBatchRequest(tasks=[create("c"), create("d", routing_key="no spaces")])
    refused = api.caller.refused("CreateBatch", bad)
    assert (refused.status, refused.code, refused.field) == (
        S.INVALID_ARGUMENT,
        "invalid",
        "tasks[1].routing_key",
    )
    clash = pb.CreateBatchRequest(tasks=[create("e"), create("a", at_ms=LATER_MS)])
    refused = api.caller.refused("CreateBatch", clash)
    assert (refused.status, refused.code, refused.field) == (
        S.ALREADY_EXISTS,
        "conflict",
        "tasks[1].id",
    )
    assert api.daemon.store.ids() == {"a", "b"}


def test_list_pages_with_the_cursor_and_count(api: GrpcServed) -> None:
    call = api.caller.call
    for n in range(5):
        call("Create", create(f"p-{n}", at_ms=AT_MS + n, payload=b"x"))
    call("Create", create("q-1"))
    first = call("List", pb.ListRequest(prefix="p-", limit=3))
    assert [t.id for t in first.tasks] == ["p-0", "p-1", "p-2"]
    assert not first.tasks[0].HasField("payload")  # a listing shows none
    rest = call("List", pb.ListRequest(prefix="p-", limit=3, cursor=first.next_cursor))
    assert [t.id for t in rest.tasks] == ["p-3", "p-4"] and not rest.HasField("next_cursor")
    counted = call("Count", pb.CountRequest(prefix="p-"))
    assert (counted.count, counted.at_least) == (5, False)
    capped = call("Count", pb.CountRequest(up_to=2))
    assert (capped.count, capped.at_least) == (2, True)
    ranged = call("Count", pb.CountRequest(due_after_ms=AT_MS + 3, state="scheduled"))
    assert ranged.count == 2


# -- outcomes as status codes -------------------------------------------------------------------


def test_not_found_conflict_and_too_late(api: GrpcServed) -> None:
    caller = api.caller
    missing = caller.refused("Get", pb.GetRequest(id="nope"))
    assert (missing.status, missing.code, missing.message) == (
        S.NOT_FOUND,
        "not_found",
        "task 'nope' is unknown or has fired",
    )
    assert caller.refused("Cancel", pb.CancelRequest(id="nope")).status is S.NOT_FOUND
    moved = caller.refused("Reschedule", pb.RescheduleRequest(id="nope", delay_ms=1000))
    assert moved.status is S.NOT_FOUND
    caller.call("Create", create())
    clash = caller.refused("Create", create(at_ms=LATER_MS))
    assert (clash.status, clash.code, clash.field, clash.message) == (
        S.ALREADY_EXISTS,
        "conflict",
        "id",
        "task 't-1' already exists with different content",
    )
    assert caller.call("Create", create(at_ms=LATER_MS, on_conflict="keep")).outcome == "kept"
    arm(api.daemon.store, "t-1")
    late = caller.refused("Cancel", pb.CancelRequest(id="t-1"))
    assert (late.status, late.code, late.message) == (
        S.FAILED_PRECONDITION,
        "too_late",
        "task 't-1' is being published",
    )


def test_already_fired_shows_when(api: GrpcServed) -> None:
    refuse_as_fired(api.daemon.store, {"t-1": FIRED_MS})
    refused = api.caller.refused("Create", create(dedup_window_ms=DAY_MS))
    assert (refused.status, refused.code, refused.field) == (
        S.ALREADY_EXISTS,
        "already_fired",
        "id",
    )
    assert refused.metadata["triggerhook-fired-ms"] == str(FIRED_MS)


@pytest.mark.parametrize(
    ("request_", "field", "message"),
    [
        (pb.CreateRequest(id="x"), "at", "give exactly one of at, at_ms and delay_ms"),
        (create(at_ms=AT_MS, delay_ms=5), "at_ms", "give exactly one of at, at_ms and delay_ms"),
        (create(routing_key="a b"), "routing_key", "must be 1-255 characters"),
        (create(at="tomorrow"), "at", "ISO-8601"),
        (create(payload=b"x" * 65), "payload", "over the limit of 64"),
        (create(headers={"x-own": pb.HeaderValue(text="v")}), "headers", "x-"),
        (create(late=pb.Late()), "late", "must be"),
        (create(on_conflict="sometimes"), "on_conflict", "error"),
        (create("bad id!"), "id", ""),
    ],
)
def test_a_bad_field_is_invalid_argument_naming_it(
    api: GrpcServed, request_: pb.CreateRequest, field: str, message: str
) -> None:
    refused = api.caller.refused("Create", request_)
    assert (refused.status, refused.code) == (S.INVALID_ARGUMENT, "invalid")
    assert refused.field is not None and refused.field.startswith(field), refused
    assert message in refused.message, refused
    assert api.daemon.store.ids() == set()


def test_bad_ids_and_filters_are_invalid_argument(api: GrpcServed) -> None:
    caller = api.caller
    for method, request in (
        ("Get", pb.GetRequest(id="")),
        ("Cancel", pb.CancelRequest(id="a b")),
        ("Reschedule", pb.RescheduleRequest(id="t-1")),  # no due time
        ("List", pb.ListRequest(limit=-1)),
        ("List", pb.ListRequest(cursor="!!")),
        ("List", pb.ListRequest(due_after="x", due_after_ms=1)),
        ("Count", pb.CountRequest(state="gone")),
    ):
        refused = caller.refused(method, request)
        assert (refused.status, refused.code) == (S.INVALID_ARGUMENT, "invalid"), (method, refused)
        assert refused.field, (method, refused)


def test_a_message_over_the_limit_is_refused_unread() -> None:
    with grpc_served(settings(grpc_max_message_bytes=4096, max_payload_bytes=65536)) as api:
        refused = api.caller.refused("Create", create(payload=b"x" * 5000))
        assert refused.status is S.RESOURCE_EXHAUSTED
        assert api.caller.call("Create", create(payload=b"x" * 3000)).outcome == "created"
        assert api.daemon.store.ids() == {"t-1"}


# -- authentication -----------------------------------------------------------------------------


@pytest.fixture
def guarded() -> Iterator[GrpcServed]:
    with grpc_served(settings(api_token=TOKEN), token=TOKEN) as served:
        yield served


@pytest.mark.parametrize("token", [None, "wrong", ""])
def test_without_the_token_every_method_is_unauthenticated(
    guarded: GrpcServed, token: str | None
) -> None:
    stranger: Caller = guarded.caller.as_(token)
    for method, request in (
        ("Create", create()),
        ("CreateBatch", pb.CreateBatchRequest(tasks=[create()])),
        ("Get", pb.GetRequest(id="t-1")),
        ("Reschedule", pb.RescheduleRequest(id="t-1", delay_ms=1)),
        ("Cancel", pb.CancelRequest(id="t-1")),
        ("List", pb.ListRequest()),
        ("Count", pb.CountRequest()),
    ):
        refused = stranger.refused(method, request)
        assert (refused.status, refused.code, refused.message) == (
            S.UNAUTHENTICATED,
            "unauthorized",
            "missing or wrong bearer token",
        ), method
    assert guarded.daemon.store.ids() == set()
    assert guarded.caller.call("Create", create()).outcome == "created"


def test_a_task_the_engine_is_publishing_is_too_late_to_cancel(api: GrpcServed) -> None:
    api.caller.call("Create", create("soon", delay_ms=100))  # within arm_ahead_ms
    wait_for(
        lambda: api.caller.call("Get", pb.GetRequest(id="soon")).state == "firing",
        5.0,
        "the task being published",
    )
    assert api.caller.refused("Cancel", pb.CancelRequest(id="soon")).status is S.FAILED_PRECONDITION


def test_a_taken_port_is_an_oserror_unless_shared(api: GrpcServed) -> None:
    """One process: the port is its own (SO_REUSEPORT off, so a second daemon
    on it fails at start); API processes share theirs (reuse_port)."""
    config = replace(grpc_config(settings()), host="127.0.0.1", port=api.api.port or 0)
    with pytest.raises(OSError, match="cannot bind"):
        GrpcApi(api.daemon.hook, config).start()
    first = GrpcApi(api.daemon.hook, replace(config, port=0, reuse_port=True))
    first.start()
    try:
        second = GrpcApi(api.daemon.hook, replace(config, port=first.port or 0, reuse_port=True))
        second.start()
        second.stop(0)
    finally:
        first.stop(0)


def test_a_bug_is_internal_and_logged(api: GrpcServed, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api.daemon.hook, "get", broken)
    refused = api.caller.refused("Get", pb.GetRequest(id="t-1"))
    assert (refused.status, refused.code, refused.message) == (
        S.INTERNAL,
        "internal",
        "internal error; see the daemon's log",
    )


def test_reads_beyond_listing_concurrency_are_unavailable_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with grpc_served(settings(listing_concurrency=1)) as api:
        entered, release = threading.Event(), threading.Event()
        count = api.daemon.hook.count

        def slow(*args: Any, **kwargs: Any) -> int:
            entered.set()
            release.wait(10)
            return count(*args, **kwargs)

        monkeypatch.setattr(api.daemon.hook, "count", slow)
        first = threading.Thread(target=api.caller.call, args=("Count", pb.CountRequest()))
        first.start()
        try:
            assert entered.wait(10)
            refused = api.caller.refused("List", pb.ListRequest())
            assert (refused.status, refused.code) == (S.UNAVAILABLE, "unavailable")
        finally:
            release.set()
            first.join(10)
        monkeypatch.setattr(api.daemon.hook, "count", count)
        assert api.caller.call("Count", pb.CountRequest()).count == 0


def test_the_service_is_listed_by_reflection(api: GrpcServed) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{api.api.port}") as channel:
        found = ProtoReflectionDescriptorDatabase(channel)
        assert "triggerhook.v1.Tasks" in found.get_services()
        pool = DescriptorPool(found)
        service = pool.FindServiceByName("triggerhook.v1.Tasks")
        assert {m.name for m in service.methods} == {
            "Create",
            "CreateBatch",
            "Get",
            "Reschedule",
            "Cancel",
            "List",
            "Count",
        }
