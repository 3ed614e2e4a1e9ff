"""The gRPC API's server: service ``triggerhook.v1.Tasks`` of ``triggerhook.proto`` (in
:mod:`triggerhook_client.grpc`, with its generated messages and the metadata keys).

Threads: gRPC's synchronous server, on a bounded pool of its own; each call
runs there from start to end and blocks on the library as the HTTP API's
pool threads do (its commits are waited for, bounded by the same timeout).
The server is started and stopped by the API process (:mod:`triggerhook.service`)
beside the HTTP API; it never touches the event loop.

Every call goes through :class:`~triggerhook.api.scoped.ScopedHook` for the
principal of its ``authorization: Bearer <token>`` metadata
(:class:`~triggerhook.api.access.Access`, as HTTP's). A request message is
parsed as the HTTP API's body or query (:mod:`.messages`): the same rules,
the same errors naming the same fields. Errors: :mod:`.answers`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_reflection.v1alpha import reflection
from multidict import MultiDict
from triggerhook_client.grpc import triggerhook_pb2 as pb
from triggerhook_client.grpc.keys import SERVICE

from triggerhook.api.access import Access
from triggerhook.api.bodies import parse_batch, parse_create, parse_reschedule
from triggerhook.api.config import GrpcConfig
from triggerhook.api.grpc.answers import GrpcError
from triggerhook.api.grpc.messages import body_of, fill, query_of
from triggerhook.api.listing import parse_count, parse_list
from triggerhook.api.quotas import QuotaKeeper, keeper_of
from triggerhook.api.render import task_json
from triggerhook.api.scoped import ScopedHook
from triggerhook.app import Scheduled, TriggerHook
from triggerhook.domain.namespaces import ALL
from triggerhook.domain.outcomes import (
    CANCEL_OUTCOMES,
    INSERT_OUTCOMES,
    RESCHEDULE_OUTCOMES,
    Outcome,
    error_outcome,
    refusal_of,
)
from triggerhook.domain.task import validate_id
from triggerhook.errors import (
    ConflictError,
    Overloaded,
    TransientError,
    TriggerHookError,
)
from triggerhook.runtime.interrupt import Interrupt

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)
Handler = Callable[[ScopedHook, Any, grpc.ServicerContext], Message]

_THREADS = 8  # calls running at once; more wait for a thread
_MAX_CALLS = 64  # calls running or waiting; more are refused RESOURCE_EXHAUSTED at once
_COMMIT_TIMEOUT_S = 30.0  # as the HTTP API's: then UNAVAILABLE, never written


def library_error(exc: TriggerHookError, id_field: str = "id") -> GrpcError:
    """A library error as its outcome's answer (:func:`refusal_of`, as the
    HTTP API's)."""
    refusal = refusal_of(exc, id_field)
    return GrpcError(refusal.outcome, refusal.message, refusal.field, **refusal.values)


def _written(task_id: str, due_ms: int, outcome: Outcome) -> pb.Written:
    return pb.Written(id=task_id, due_ms=due_ms, outcome=outcome.code)


class _Read:
    """A read of many tasks (List, Count): one of ``listing_concurrency`` at
    once (more: UNAVAILABLE at once, as HTTP's 503), and :attr:`interrupt` set
    when the call ends before the read does (the client cancelled, its
    deadline passed, the server stops), so the read stops between its steps."""

    def __init__(self, slots: threading.BoundedSemaphore, context: grpc.ServicerContext) -> None:
        if not slots.acquire(blocking=False):
            raise Overloaded("reads of many tasks run already (listing_concurrency)")
        self._slots = slots
        self.interrupt = Interrupt(None)
        self._over = threading.Event()
        context.add_callback(self._ended)

    def __enter__(self) -> Interrupt:
        return self.interrupt

    def __exit__(self, *_exc: object) -> None:
        self._over.set()
        self._slots.release()

    def _ended(self) -> None:
        if not self._over.is_set():  # off this thread: a cut may block (KILL QUERY)
            threading.Thread(
                target=self.interrupt.set,
                args=("its call ended",),
                name="th-grpc-stop",
                daemon=True,
            ).start()


class GrpcApi:
    """Owns the gRPC server: :meth:`start` binds and serves, :meth:`stop` ends."""

    def __init__(
        self, hook: TriggerHook, config: GrpcConfig, quotas: QuotaKeeper | None = None
    ) -> None:
        """``quotas``: the process's, shared with the HTTP API and the command
        channel (None: one of its own)."""
        self._hook = hook
        self._quotas = quotas or keeper_of(hook)
        self._config = config
        self._access = Access(config.api_token, config.namespaces_file, config.namespaces_reload_s)
        self._server: grpc.Server | None = None
        self._pool: ThreadPoolExecutor | None = None  # grpc's stop leaves it to us
        self._reads = threading.BoundedSemaphore(config.listing_concurrency)
        self.port: int | None = None

    @property
    def address(self) -> str:
        return f"{self._config.host}:{self._config.port}"

    def start(self) -> None:
        """Bind and serve; OSError when the address cannot be bound."""
        limit = self._config.max_message_bytes
        pool = ThreadPoolExecutor(_THREADS, thread_name_prefix="th-grpc")
        server = grpc.server(
            pool,
            handlers=[self._handlers()],
            # Answers are not bounded here: a page of tasks is, by its limit.
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.so_reuseport", 1 if self._config.reuse_port else 0),
            ],
            maximum_concurrent_rpcs=_MAX_CALLS,
        )
        # Reflection: grpcurl and friends list and call the methods without the .proto.
        reflection.enable_server_reflection((SERVICE, reflection.SERVICE_NAME), server)
        try:
            port = server.add_insecure_port(self.address)
        except RuntimeError as exc:  # gRPC's way of saying it could not bind
            pool.shutdown(wait=False)
            raise OSError(f"cannot bind {self.address}: {exc}") from None
        server.start()
        self._server, self._pool, self.port = server, pool, port
        log.info(
            "grpc api listening on %s:%s",
            self._config.host,
            port,
            extra={"auth": self._access.required},
        )

    def stop(self, grace_s: float = 5.0) -> None:
        """Take no new call; those running finish (up to ``grace_s``). Blocks."""
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._quotas.close()

    # -- dispatch -------------------------------------------------------------------

    def _handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        methods: dict[str, tuple[Handler, type[Message], type[Message]]] = {
            "Create": (self._create, pb.CreateRequest, pb.Written),
            "CreateBatch": (self._create_batch, pb.CreateBatchRequest, pb.BatchWritten),
            "Get": (self._get, pb.GetRequest, pb.Task),
            "Reschedule": (self._reschedule, pb.RescheduleRequest, pb.Written),
            "Cancel": (self._cancel, pb.CancelRequest, pb.Cancelled),
            "List": (self._list, pb.ListRequest, pb.ListReply),
            "Count": (self._count, pb.CountRequest, pb.CountReply),
        }
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                name: grpc.unary_unary_rpc_method_handler(
                    self._guarded(handler),
                    request_deserializer=request.FromString,
                    response_serializer=reply.SerializeToString,
                )
                for name, (handler, request, reply) in methods.items()
            },
        )

    def _guarded(self, handler: Handler) -> Callable[[Any, grpc.ServicerContext], Message]:
        """``handler`` for the call's principal, its errors as gRPC statuses."""

        def call(request: Any, context: grpc.ServicerContext) -> Message:
            try:
                return handler(self._scoped(context), request, context)
            except GrpcError as exc:
                return _abort(context, exc)
            except TriggerHookError as exc:
                if error_outcome(exc) is Outcome.INTERNAL:
                    log.error("grpc call failed: %s", exc)
                elif isinstance(exc, TransientError):
                    log.warning("grpc call answered unavailable: %s", exc)
                return _abort(context, library_error(exc))
            except Exception:  # a bug: logged with its traceback, answered INTERNAL
                log.exception("grpc call failed")
                return _abort(context, GrpcError(Outcome.INTERNAL))

        return call

    def _scoped(self, context: grpc.ServicerContext) -> ScopedHook:
        if not self._access.required:
            return ScopedHook(self._hook, ALL, self._quotas)
        given = dict(context.invocation_metadata()).get("authorization", "")
        principal = self._access.principal(given if isinstance(given, str) else "")
        if principal is None:
            raise GrpcError(Outcome.UNAUTHORIZED)
        return ScopedHook(self._hook, principal, self._quotas)

    # -- the methods ------------------------------------------------------------------

    def _create(self, hook: ScopedHook, request: pb.CreateRequest, _c: object) -> Message:
        scheduled = hook.schedule(parse_create(body_of(request)), _COMMIT_TIMEOUT_S)
        task = scheduled.task
        return _written(task.id, task.due_ms, INSERT_OUTCOMES[scheduled.outcome])

    def _create_batch(
        self, hook: ScopedHook, request: pb.CreateBatchRequest, _c: object
    ) -> Message:
        body = {"tasks": [body_of(task) for task in request.tasks]}
        specs = parse_batch(body, self._config.max_batch_tasks)
        try:
            done: list[Scheduled] = hook.schedule_many(specs)
        except ConflictError as exc:
            assert exc.index is not None  # schedule_many names the task
            raise library_error(exc, f"tasks[{exc.index}].id") from None
        return pb.BatchWritten(
            ids=[s.task.id for s in done], outcomes=[INSERT_OUTCOMES[s.outcome].code for s in done]
        )

    def _get(self, hook: ScopedHook, request: pb.GetRequest, _c: object) -> Message:
        task_id = validate_id(request.id)
        info = hook.get(task_id)
        if info is None:
            raise GrpcError(Outcome.NOT_FOUND, id=task_id)
        return fill(pb.Task(), task_json(info))

    def _reschedule(self, hook: ScopedHook, request: pb.RescheduleRequest, _c: object) -> Message:
        task_id = validate_id(request.id)
        body = body_of(request)
        assert isinstance(body, dict)
        body.pop("id", None)
        when = parse_reschedule(body)
        moved = hook.reschedule(task_id, at_ms=when.at_ms, delay_ms=when.delay_ms)
        outcome = RESCHEDULE_OUTCOMES[moved.result]
        if moved.task is None or not outcome.ok:
            raise GrpcError(outcome if not outcome.ok else Outcome.NOT_FOUND, id=task_id)
        return _written(task_id, moved.task.due_ms, outcome)

    def _cancel(self, hook: ScopedHook, request: pb.CancelRequest, _c: object) -> Message:
        task_id = validate_id(request.id)
        outcome = CANCEL_OUTCOMES[hook.cancel(task_id, _COMMIT_TIMEOUT_S)]
        if not outcome.ok:
            raise GrpcError(outcome, id=task_id)
        return pb.Cancelled(id=task_id, outcome=outcome.code)

    def _list(
        self, hook: ScopedHook, request: pb.ListRequest, context: grpc.ServicerContext
    ) -> Message:
        where, limit, cursor = parse_list(MultiDict(query_of(request)))
        with _Read(self._reads, context) as stop:
            page = hook.list_tasks(where, limit=limit, cursor=cursor, interrupt=stop)
        reply = pb.ListReply(next_cursor=page.cursor)
        for info in page.tasks:
            fill(reply.tasks.add(), task_json(info, payload=False))
        return reply

    def _count(
        self, hook: ScopedHook, request: pb.CountRequest, context: grpc.ServicerContext
    ) -> Message:
        where, up_to = parse_count(MultiDict(query_of(request)))
        with _Read(self._reads, context) as stop:
            number = hook.count(where, up_to=up_to, interrupt=stop)
        return pb.CountReply(count=number, at_least=number == up_to)


def _abort(context: grpc.ServicerContext, error: GrpcError) -> Message:
    """End the call with ``error`` (raises: gRPC's way)."""
    context.set_trailing_metadata(error.metadata())
    context.abort(error.status, error.message)
    raise AssertionError("abort returned")  # pragma: no cover
