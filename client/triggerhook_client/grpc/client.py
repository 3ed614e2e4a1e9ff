"""A Python client of the gRPC API: :class:`GrpcClient`, the methods of
``triggerhook.v1.Tasks`` over one channel, raising the errors the HTTP
client (``triggerhook_client``) raises, chosen by the same error codes.

It needs grpcio and protobuf (the ``grpc`` extra of ``triggerhook-client``)
and the messages the build generates here (client/setup.py). Requests take
the messages' fields as keywords
(``create(id="t-1", at_ms=..., routing_key=..., payload=b"...")``); replies
are the messages (``Written``, ``Task``, ...). An error's ``status`` is None
(there is no HTTP status); its ``code``, ``message`` and ``field`` are the
daemon's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Self

import grpc
from google.protobuf.message import Message

from triggerhook_client.errors import (
    AlreadyFired,
    ApiError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    OverQuota,
    TooLate,
    Unauthorized,
    Unavailable,
)
from triggerhook_client.grpc import triggerhook_pb2 as pb
from triggerhook_client.grpc.keys import CODE_KEY, FIELD_KEY, SERVICE, shown_key

_BY_CODE: dict[str, type[ApiError]] = {
    "invalid": InvalidRequest,
    "too_large": InvalidRequest,
    "too_costly": InvalidRequest,  # as HTTP's 422: narrow the filter
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "over_quota": OverQuota,
    "not_found": NotFound,
    "conflict": Conflict,
    "already_fired": AlreadyFired,
    "too_late": TooLate,
    "unavailable": Unavailable,
    "stopping": Unavailable,
}
# gRPC's own errors, with no code of the daemon's: no answer, or a call cut short.
_RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def error_of(exc: grpc.RpcError) -> ApiError:
    """The client error a failed call means."""
    call: Any = exc  # a grpc.Call too, as every error of a unary call is
    trailing = {str(m.key): str(m.value) for m in call.trailing_metadata() or ()}
    message = str(call.details() or call.code().name)
    code = trailing.get(CODE_KEY)
    if code is None:  # not the daemon's answer: gRPC's, or a proxy's
        status: grpc.StatusCode = call.code()
        kind = Unavailable if status in _RETRIED else ApiError
        return kind(None, status.name.lower(), message)
    field = trailing.get(FIELD_KEY)
    if code == "already_fired":
        fired = trailing.get(shown_key("fired_ms"), "")
        return AlreadyFired(None, code, message, field, int(fired) if fired.isdigit() else None)
    return _BY_CODE.get(code, ApiError)(None, code, message, field)


class GrpcClient:
    """``triggerhook.v1.Tasks`` at ``target`` (``host:port``), with ``token``
    (sent as ``authorization: Bearer``; None: none). Plaintext unless
    ``credentials`` are given. Use as a context manager, or :meth:`close`."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._channel = (
            grpc.insecure_channel(target)
            if credentials is None
            else grpc.secure_channel(target, credentials)
        )
        self._metadata: tuple[tuple[str, str | bytes], ...] = (
            () if token is None else (("authorization", f"Bearer {token}"),)
        )
        self._timeout_s = timeout_s

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: Message, reply: type[Message]) -> Any:
        stub = self._channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=reply.FromString,
        )
        try:
            return stub(request, metadata=self._metadata, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise error_of(exc) from None

    def create(self, **fields: Any) -> pb.Written:
        written: pb.Written = self._call("Create", pb.CreateRequest(**fields), pb.Written)
        return written

    def create_batch(self, tasks: Iterable[dict[str, Any]]) -> pb.BatchWritten:
        request = pb.CreateBatchRequest(tasks=[pb.CreateRequest(**task) for task in tasks])
        written: pb.BatchWritten = self._call("CreateBatch", request, pb.BatchWritten)
        return written

    def get(self, task_id: str) -> pb.Task:
        task: pb.Task = self._call("Get", pb.GetRequest(id=task_id), pb.Task)
        return task

    def reschedule(self, task_id: str, **when: Any) -> pb.Written:
        """``at``, ``at_ms`` or ``delay_ms``: exactly one."""
        request = pb.RescheduleRequest(id=task_id, **when)
        written: pb.Written = self._call("Reschedule", request, pb.Written)
        return written

    def cancel(self, task_id: str) -> pb.Cancelled:
        done: pb.Cancelled = self._call("Cancel", pb.CancelRequest(id=task_id), pb.Cancelled)
        return done

    def list(self, **where: Any) -> pb.ListReply:
        """The filters of ``GET /v1/tasks``, ``limit`` and ``cursor``."""
        page: pb.ListReply = self._call("List", pb.ListRequest(**where), pb.ListReply)
        return page

    def count(self, **where: Any) -> pb.CountReply:
        counted: pb.CountReply = self._call("Count", pb.CountRequest(**where), pb.CountReply)
        return counted
