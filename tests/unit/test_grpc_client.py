"""GrpcClient (triggerhook_client.grpc) against the gRPC API over the
in-memory store: every method, and each error as the HTTP client's exception
of the same code (triggerhook_client.errors), its field and fired_ms kept;
and for every error outcome, the daemon's gRPC error raises what its HTTP
answer raises (the daemon's own answers, both)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from support.daemon import closed_port
from support.dedup import refuse_as_fired
from support.grpc_served import GrpcServed, grpc_served
from triggerhook_client.errors import (
    AlreadyFired,
    Conflict,
    InvalidRequest,
    NotFound,
    TooLate,
    Unauthorized,
    Unavailable,
    error_from,
)
from triggerhook_client.grpc import GrpcClient, error_of

from triggerhook.api.grpc.answers import GRPC_RENDERING, GrpcError
from triggerhook.api.http_answers import ApiError as HttpError
from triggerhook.domain.outcomes import Outcome
from triggerhook.settings import Settings

AT_MS = 1_893_456_000_250
TOKEN = "s3cret"
DAY_MS = 86_400_000


@pytest.fixture
def served() -> Iterator[GrpcServed]:
    settings = Settings(
        instance_id="unit", switch_interval_us=0, shutdown_timeout_s=1, api_token=TOKEN
    )
    with grpc_served(settings, token=TOKEN) as api:
        yield api


@pytest.fixture
def client(served: GrpcServed) -> Iterator[GrpcClient]:
    with GrpcClient(f"127.0.0.1:{served.api.port}", TOKEN) as made:
        yield made


def task(task_id: str = "t-1", **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "at_ms": AT_MS, "routing_key": "a.b", **fields}


def test_every_method(client: GrpcClient) -> None:
    assert client.create(**task(payload=b"hi")).outcome == "created"
    assert list(client.create_batch([task("b-1"), task("b-2")]).ids) == ["b-1", "b-2"]
    assert client.get("t-1").payload == b"hi"
    assert client.reschedule("t-1", delay_ms=60_000).outcome == "rescheduled"
    assert [t.id for t in client.list(prefix="b-", limit=1).tasks] == ["b-1"]
    assert client.count(routing_key="a.b").count == 3
    assert client.cancel("t-1").outcome == "cancelled"


def test_errors_are_the_http_clients(served: GrpcServed, client: GrpcClient) -> None:
    with pytest.raises(NotFound) as gone:
        client.get("nope")
    assert (gone.value.code, gone.value.status) == ("not_found", None)
    client.create(**task())
    with pytest.raises(Conflict) as clash:
        client.create(**task(at_ms=AT_MS + 1))
    assert (type(clash.value), clash.value.field) == (Conflict, "id")
    with pytest.raises(InvalidRequest) as bad:
        client.create(**task("x", routing_key="a b"))
    assert (bad.value.code, bad.value.field) == ("invalid", "routing_key")
    refuse_as_fired(served.daemon.store, {"fired": 1_700_000_000_000})
    with pytest.raises(AlreadyFired) as fired:
        client.create(**task("fired", dedup_window_ms=DAY_MS))
    assert fired.value.fired_ms == 1_700_000_000_000
    stored = served.daemon.store.row("t-1")
    assert stored is not None
    served.daemon.store.put(stored.task, rev=stored.rev, fire_ms=stored.fire_ms, armed=True)
    with pytest.raises(TooLate):
        client.cancel("t-1")


def test_auth_errors_and_no_server(served: GrpcServed) -> None:
    stranger = GrpcClient(f"127.0.0.1:{served.api.port}", "wrong")
    with stranger, pytest.raises(Unauthorized):
        stranger.count()
    nobody = GrpcClient(f"127.0.0.1:{closed_port()}", TOKEN, timeout_s=2)
    with nobody, pytest.raises(Unavailable) as down:
        nobody.count()
    assert down.value.status is None


# -- one vocabulary: each error raises the class the HTTP client raises for it -------------------

VALUES: dict[str, Any] = {
    "id": "t-1",
    "detail": "why",
    "what": "database",
    "limit": 1024,
    "timeout_s": 60,
    "fired_ms": 1_700_000_000_000,
}
GRPC_ERRORS = [o for o, r in GRPC_RENDERING.items() if r is not None and not o.ok]


@dataclass(frozen=True)
class Failed(grpc.RpcError):
    """A failed call as grpc hands it to the client (its grpc.Call methods)."""

    status: grpc.StatusCode
    text: str
    trailing: tuple[tuple[str, str], ...]

    def code(self) -> grpc.StatusCode:
        return self.status

    def details(self) -> str:
        return self.text

    def trailing_metadata(self) -> tuple[Any, ...]:
        Metadatum = collections.namedtuple("Metadatum", ["key", "value"])
        return tuple(Metadatum(k, v) for k, v in self.trailing)


@pytest.mark.parametrize("outcome", GRPC_ERRORS, ids=[o.code for o in GRPC_ERRORS])
def test_a_grpc_error_raises_what_the_http_answer_raises(outcome: Outcome) -> None:
    field = "tasks[1].id" if outcome is Outcome.INVALID else None
    sent = GrpcError(outcome, field=field, **VALUES)
    raised = error_of(Failed(sent.status, sent.message, sent.metadata()))
    answer = HttpError(outcome, field=field, **VALUES).response()
    assert isinstance(answer.body, bytes)
    over_http = error_from(
        httpx.Response(answer.status, headers=list(answer.headers.items()), content=answer.body),
        {},
    )
    assert type(raised) is type(over_http), outcome
    assert (raised.code, raised.message, raised.field) == (
        over_http.code,
        over_http.message,
        over_http.field,
    )
    assert getattr(raised, "fired_ms", None) == getattr(over_http, "fired_ms", None)
