"""The gRPC API over the in-memory store for a unit test (as
:mod:`support.served` serves the HTTP API), on a free port of 127.0.0.1, and
a small typed caller of its methods through a real gRPC channel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from triggerhook_client.grpc import triggerhook_pb2 as pb
from triggerhook_client.grpc.keys import CODE_KEY, FIELD_KEY, SERVICE

from support.served import Served, served
from triggerhook.api.grpc.server import GrpcApi
from triggerhook.settings import Settings
from triggerhook.wiring import grpc_config

R = TypeVar("R", bound=Message)

REPLIES: dict[str, type[Message]] = {
    "Create": pb.Written,
    "CreateBatch": pb.BatchWritten,
    "Get": pb.Task,
    "Reschedule": pb.Written,
    "Cancel": pb.Cancelled,
    "List": pb.ListReply,
    "Count": pb.CountReply,
}


@dataclass(frozen=True, slots=True)
class Refused:
    """A call's error: its status, details and the triggerhook-* metadata."""

    status: grpc.StatusCode
    message: str
    code: str | None
    field: str | None
    metadata: dict[str, str]


class Caller:
    """Calls ``triggerhook.v1.Tasks`` methods with a token (or none)."""

    def __init__(self, channel: grpc.Channel, token: str | None = None) -> None:
        self._channel = channel
        self._token = token

    def as_(self, token: str | None) -> Caller:
        return Caller(self._channel, token)

    def call(self, method: str, request: Message, reply: type[R] | None = None) -> Any:
        """The reply; raises grpc.RpcError on an error status."""
        stub = self._channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=REPLIES[method].FromString,
        )
        metadata: tuple[tuple[str, str | bytes], ...] = (
            () if self._token is None else (("authorization", f"Bearer {self._token}"),)
        )
        return stub(request, metadata=metadata, timeout=30)

    def refused(self, method: str, request: Message) -> Refused:
        """The error the call ends with (it must end with one)."""
        try:
            self.call(method, request)
        except grpc.RpcError as exc:
            trailing = {str(m.key): str(m.value) for m in exc.trailing_metadata() or ()}
            return Refused(
                exc.code(),
                exc.details() or "",
                trailing.get(CODE_KEY),
                trailing.get(FIELD_KEY),
                trailing,
            )
        raise AssertionError(f"{method} succeeded")


@dataclass
class GrpcServed:
    """The engine of :func:`support.served.served`, its gRPC API, a caller."""

    daemon: Served
    api: GrpcApi
    caller: Caller


@contextlib.contextmanager
def grpc_served(settings: Settings, token: str | None = None) -> Iterator[GrpcServed]:
    """The gRPC API of a started engine with ``settings``, on a free port."""
    with served(settings) as daemon:
        # The HTTP API's quotas, as the wiring shares one keeper per process.
        config = replace(grpc_config(settings), host="127.0.0.1", port=0)
        api = GrpcApi(daemon.hook, config, daemon.api.quotas)
        api.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{api.port}") as channel:
                yield GrpcServed(daemon, api, Caller(channel, token))
        finally:
            api.stop(1.0)
