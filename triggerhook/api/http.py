"""The HTTP API (aiohttp on the daemon's uvloop event loop).

Threads: every handler runs on the event-loop thread and never blocks it.
Single-task writes go to the engine's group committers without blocking
(:meth:`TriggerHook.schedule_nowait` and friends: the writer thread resolves
the request's future); batch writes, lookups, the readiness probe and a
series' pause, resume, trigger and backfill (:mod:`triggerhook.api.http_series`)
run on a small thread pool. Errors are JSON: ``{"error": {"code", "message",
"field"?}}``; they name a failing dependency but never carry its error text
(host names, driver messages), which goes to the log instead. The outcomes'
statuses and the error answer are in :mod:`triggerhook.api.http_answers`.

Before authentication, :mod:`triggerhook.api.limits` caps the open connections
and bounds how long a request head and a body may take to arrive.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Generic, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from triggerhook.api import openapi
from triggerhook.api.access import Access
from triggerhook.api.bodies import (
    MalformedJson,
    decode_json,
    parse_batch,
    parse_create,
    parse_reschedule,
)
from triggerhook.api.config import HttpConfig
from triggerhook.api.hosts import host_check
from triggerhook.api.http_answers import (
    HTTP_RENDERING,
    JSON,
    ApiError,
    HttpRendering,
    error_response,
    status_of,
)
from triggerhook.api.http_answers import json_answer as _response
from triggerhook.api.http_series import SeriesApi
from triggerhook.api.limits import (
    BodyTimeout,
    BodyTooLarge,
    ConnectionGuard,
    GuardedSite,
    ThrottledWarning,
    read_body,
)
from triggerhook.api.listing import ListingApi, only_method
from triggerhook.api.quotas import QuotaKeeper, keeper_of
from triggerhook.api.render import due_json, task_json
from triggerhook.api.scoped import ScopedHook
from triggerhook.api.web import WebView, is_ui_path
from triggerhook.app import Figures, Scheduled, Ticket, TriggerHook
from triggerhook.domain.namespaces import ALL, READ, Principal
from triggerhook.domain.outcomes import (
    CANCEL_OUTCOMES,
    INSERT_OUTCOMES,
    RESCHEDULE_OUTCOMES,
    Outcome,
    error_outcome,
    refusal_of,
)
from triggerhook.domain.task import CancelResult, validate_id
from triggerhook.errors import (
    ConflictError,
    StoreUnavailable,
    TransientError,
    TriggerHookError,
)
from triggerhook.interfaces import Moved
from triggerhook.metrics import prometheus
from triggerhook.runtime import points
from triggerhook.runtime.counters import RequestStats

# The outcome tables are read from here too (HTTP_RENDERING: the interfaces' tests).
__all__ = ["HTTP_RENDERING", "ApiError", "HttpApi", "HttpRendering", "error_response", "status_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Readiness = Callable[[], list[str]]  # blocking; the reasons the daemon is not ready

# Longest a request waits in its group commit's queue before answering 503; a
# call still queued then is abandoned (never written), one being written is
# waited for (its write is bounded by the database timeouts).
_COMMIT_TIMEOUT_S = 30.0
# After answering a request whose body was not read (413, 408, 401 ...), aiohttp
# reads and discards what the client still sends for this long before closing,
# so the client can read the answer; short, as a refused body is not wanted.
_LINGER_S = 2.0
_PRINCIPAL = web.RequestKey("principal", Principal)  # who the request's token is


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server log. aiohttp reports a request it cannot even parse (a
    bad header, garbage) as an ERROR with a traceback; that is a client's
    mistake, answered 400: log one WARNING line instead."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if level >= logging.ERROR and isinstance(exc, BadHttpMessage):
            self.logger.warning("unparsable HTTP request answered 400: %s", exc.message)
            return
        super().log(level, msg, *args, **kwargs)


def _library_error(exc: TriggerHookError, id_field: str = "id") -> ApiError:
    """A library error as its outcome's answer (:func:`refusal_of`)."""
    refusal = refusal_of(exc, id_field)
    return ApiError(refusal.outcome, refusal.message, refusal.field, **refusal.values)


def _created(scheduled: Scheduled) -> tuple[int, dict[str, Any]]:
    """A create's status and answer: the task's id and due time (the stored
    task's when KEPT), and the outcome."""
    outcome = INSERT_OUTCOMES[scheduled.outcome]
    task = scheduled.task
    return status_of(outcome), {**due_json(task.id, task.due_ms), "outcome": outcome.code}


class Commit(Generic[T]):
    """A non-blocking engine call's outcome, awaited on the event loop: pass
    :attr:`done` to the call (a writer thread calls it), :meth:`hold` the
    ticket the call returns, then await :meth:`wait`.

    Giving up (the timeout, or the request being cancelled) abandons the call:
    a call still queued is then never written, so its 503 is the truth; a call
    a writer took already is waited for, and answered with its real outcome.
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._future: asyncio.Future[T] = self._loop.create_future()
        self._ticket: Ticket | None = None

    @property
    def done(self) -> Commit[T]:
        """The call's ``done`` callback (this object)."""
        return self

    def __call__(self, result: T | None, error: TriggerHookError | None) -> None:
        self._loop.call_soon_threadsafe(_settle, self._future, result, error)

    def hold(self, ticket: Ticket) -> None:
        self._ticket = ticket

    async def wait(self) -> T:
        timer = self._loop.call_later(_COMMIT_TIMEOUT_S, _expire, self._future, self._ticket)
        try:
            return await self._future
        except asyncio.CancelledError:
            if self._ticket is not None:  # nobody waits for it any more
                self._ticket.abandon()
            raise
        finally:
            timer.cancel()


class HttpApi:
    """Owns the aiohttp application, its runner and its site."""

    def __init__(
        self,
        hook: TriggerHook,
        config: HttpConfig,
        readiness: Readiness,
        executor: ThreadPoolExecutor,
        figures: Callable[[], Figures] | None = None,
        quotas: QuotaKeeper | None = None,
    ) -> None:
        """``figures``: what ``/v1/status`` and ``/metrics`` show when the engine
        runs in another process (they then include every API process's request
        figures); None: this process's own. ``quotas``: the process's (None:
        one of its own)."""
        self._hook = hook
        self.quotas = quotas or keeper_of(hook)
        self._remote_figures = figures
        self._config = config
        self._readiness = readiness
        self._executor = executor
        self._access = Access(config.api_token, config.namespaces_file, config.namespaces_reload_s)
        self._metrics_tokens = _metrics_tokens(config)  # none: /metrics is open
        self._runner: web.AppRunner | None = None
        # Keyword arguments of every connection's aiohttp RequestHandler.
        self._handler_args: dict[str, Any] = {
            "access_log": None,
            "keepalive_timeout": config.keepalive_timeout_s,
            "lingering_time": _LINGER_S,
            "logger": _ServerLog(logging.getLogger(f"{__name__}.server")),
        }
        self.guard = ConnectionGuard(
            config.max_connections,
            config.header_timeout_s,
            self._handler_args,
        )
        self._unavailable_log = ThrottledWarning(
            log, "answered 503 to %d requests in the last %.0fs: %s", 10.0
        )
        self._last_unready: list[str] = []
        self.port: int | None = None
        self.stats = RequestStats()  # read by the metrics thread
        self._openapi = openapi.document(config.max_payload_bytes, config.max_batch_tasks)
        self._web = (
            WebView(hook, config, executor, self._figures, self._access)
            if config.web_view
            else None
        )
        # The engine runs in our parent process when its figures come from afar
        # (triggerhook.processes): /metrics reports that process too.
        firing_pid = os.getppid() if figures is not None else None
        self._registry = prometheus.build_registry(self._figures, firing_pid)
        self.app = self._build()

    def _build(self) -> web.Application:
        hosts = host_check(self._config)  # DNS rebinding: before anything reads the request
        app = web.Application(
            client_max_size=self._config.max_body_bytes,
            middlewares=[self.guard.middleware, self._observe, hosts, self._errors, self._auth],
        )
        listing = ListingApi(self._scoped, self._config)  # and the web view's: one bound for all
        if self._web is not None:  # /ui/...: no other route starts so
            self._web.add_routes(app.router, listing.work)
        app.router.add_post("/v1/tasks", self.create)
        app.router.add_post("/v1/tasks/batch", self.create_batch)
        # Not a task id: other methods on this path are 405, not a lookup of "batch".
        app.router.add_route("*", "/v1/tasks/batch", only_method("POST"))
        listing.add_routes(app, self._body)
        app.router.add_get("/v1/tasks/{id}", self.get, allow_head=False)
        app.router.add_patch("/v1/tasks/{id}", self.reschedule)
        app.router.add_delete("/v1/tasks/{id}", self.cancel)
        SeriesApi(self._scoped, self._blocking, self._body).add_routes(app.router)
        app.router.add_get("/healthz", self.healthz, allow_head=False)
        app.router.add_get("/readyz", self.readyz, allow_head=False)
        app.router.add_get("/openapi.json", self.openapi, allow_head=False)
        app.router.add_get("/v1/status", self.status, allow_head=False)
        app.router.add_get("/metrics", self.prometheus, allow_head=False)
        return app

    # -- lifecycle --------------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` as configured (the port is 0 for any free one)."""
        return f"{self._config.host}:{self._config.port}"

    async def start(self) -> None:
        """Bind and serve; raises OSError when the address is taken."""
        self._runner = web.AppRunner(self.app, shutdown_timeout=5.0, **self._handler_args)
        await self._runner.setup()
        assert self._runner.server is not None  # set by setup()
        site = GuardedSite(
            self._runner,
            self._config.host,
            self._config.port,
            self.guard.factory(self._runner.server),
            reuse_port=self._config.reuse_port,
        )
        await site.start()
        self.port = site.port
        self.guard.start()
        log.info(
            "http api listening on %s:%s",
            self._config.host,
            self.port,
            extra={"auth": self._access.required},
        )

    async def stop(self) -> None:
        """Stop accepting; requests in flight finish (up to the runner's timeout)."""
        await self.guard.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.quotas.close()

    # -- middlewares -------------------------------------------------------------

    @web.middleware
    async def _observe(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500  # unless the handler answers: aiohttp turns a bug into a 500
        try:
            response = await handler(request)
            status = response.status
            return response
        finally:
            self.stats.record(status, (time.perf_counter() - started) * 1000)

    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return exc.response()
        except web.HTTPException as exc:
            # aiohttp's own answers: unknown route (404), method (405), body too big (413).
            headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
            code = exc.reason.lower().replace(" ", "_")
            return error_response(exc.status, code, exc.reason, **headers)
        except TriggerHookError as exc:
            if isinstance(exc, TransientError):
                # The detail (driver message, host name) is for the operator only.
                self._unavailable_log.event(exc)
            elif error_outcome(exc) is Outcome.INTERNAL:
                log.error("request failed: %s", exc, extra={"path": request.path})
            return _library_error(exc).response()

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if self._web is not None and is_ui_path(request.path):
            refused = self._web.refuse(request)  # its own login: a token, or its session
            return refused if refused is not None else await handler(request)
        if self._access.required and request.path.startswith("/v1/"):  # /metrics: its handler
            principal = self._access.principal(request.headers.get("Authorization", ""))
            if principal is None:
                return ApiError(Outcome.UNAUTHORIZED).response()
            request[_PRINCIPAL] = principal
        return await handler(request)

    def _scoped(self, request: web.Request) -> ScopedHook:
        """The library as this request's token may use it."""
        return ScopedHook(self._hook, request.get(_PRINCIPAL, ALL), self.quotas)

    # -- request helpers -----------------------------------------------------------

    async def _body(self, request: web.Request) -> object:
        if request.content_type != JSON:
            raise ApiError(Outcome.UNSUPPORTED_MEDIA_TYPE)
        limit = self._config.max_body_bytes
        timeout_s = self._config.body_timeout_s
        try:
            raw = await read_body(request, limit, timeout_s)
        except BodyTooLarge:
            raise ApiError(Outcome.TOO_LARGE, close=True, limit=limit) from None
        except BodyTimeout:
            self.guard.body_timeouts_total += 1
            raise ApiError(Outcome.REQUEST_TIMEOUT, close=True, timeout_s=timeout_s) from None
        try:
            return decode_json(raw)
        except MalformedJson as exc:
            raise ApiError(Outcome.MALFORMED_JSON, what="valid JSON", detail=exc) from None

    @staticmethod
    def _path_id(request: web.Request) -> str:
        return validate_id(request.match_info["id"])

    def _blocking(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # -- handlers -------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.Response:
        spec = parse_create(await self._body(request))
        commit: Commit[Scheduled] = Commit()
        commit.hold(self._scoped(request).schedule_nowait(spec, commit.done))
        scheduled = await commit.wait()
        return _response(*_created(scheduled))

    async def create_batch(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        hook = self._scoped(request)
        scheduled = await self._blocking(lambda: self._schedule_batch(hook, body))
        ids = [s.task.id for s in scheduled]
        outcomes = [INSERT_OUTCOMES[s.outcome].code for s in scheduled]
        return _response(status_of(Outcome.CREATED), {"ids": ids, "outcomes": outcomes})

    def _schedule_batch(self, hook: ScopedHook, body: object) -> list[Scheduled]:
        """On a pool thread: validating 10,000 tasks takes a while."""
        specs = parse_batch(body, self._config.max_batch_tasks)
        try:
            return hook.schedule_many(specs)
        except ConflictError as exc:  # TooLateError, AlreadyFiredError too: their own outcomes
            assert exc.index is not None  # schedule_many names the task
            raise _library_error(exc, f"tasks[{exc.index}].id") from None

    async def get(self, request: web.Request) -> web.Response:
        task_id = self._path_id(request)
        hook = self._scoped(request)
        info = await self._blocking(lambda: hook.get(task_id))
        if info is None:
            raise ApiError(Outcome.NOT_FOUND, id=task_id)
        return _response(status_of(Outcome.FOUND), task_json(info))

    async def reschedule(self, request: web.Request) -> web.Response:
        task_id = self._path_id(request)
        when = parse_reschedule(await self._body(request))
        commit: Commit[Moved] = Commit()
        commit.hold(
            self._scoped(request).reschedule_nowait(
                task_id, commit.done, at_ms=when.at_ms, delay_ms=when.delay_ms
            )
        )
        moved = await commit.wait()
        outcome = RESCHEDULE_OUTCOMES[moved.result]
        if outcome is Outcome.RESCHEDULED and moved.task is None:
            outcome = Outcome.NOT_FOUND
        if moved.task is None or not outcome.ok:
            raise ApiError(outcome, id=task_id)
        return _response(status_of(outcome), due_json(task_id, moved.task.due_ms))

    async def cancel(self, request: web.Request) -> web.Response:
        task_id = self._path_id(request)
        commit: Commit[CancelResult] = Commit()
        commit.hold(self._scoped(request).cancel_nowait(task_id, commit.done))
        outcome = CANCEL_OUTCOMES[await commit.wait()]
        if not outcome.ok:
            raise ApiError(outcome, id=task_id)
        return web.Response(status=status_of(outcome))

    async def healthz(self, _request: web.Request) -> web.Response:
        return _response(200, {"status": "ok"})

    async def readyz(self, _request: web.Request) -> web.Response:
        reasons = await self._blocking(self._readiness)
        if reasons != self._last_unready:  # log each change, not every probe
            if reasons:
                log.warning("not ready: %s", "; ".join(reasons))
            self._last_unready = reasons
        if reasons:
            # The reasons name dependencies, never their error text (see
            # Service.readiness, which logs the detail).
            return _response(503, {"status": "unready", "reasons": reasons})
        return _response(200, {"status": "ready"})

    async def status(self, request: web.Request) -> web.Response:
        """The live figures: the last metrics period, and totals since start."""
        self._scoped(request).principal.need(READ)
        figures = self._figures()
        return _response(
            200,
            {
                "instance": figures.instance,
                "running": figures.running,
                "period": figures.latest.get(points.ENGINE, {}),
                "http": figures.latest.get(points.HTTP, {}),
                "totals": figures.totals,
            },
        )

    async def prometheus(self, request: web.Request) -> web.Response:
        """The figures, read now, for Prometheus (see triggerhook.metrics.prometheus)."""
        if self._metrics_tokens and not _carries(request, self._metrics_tokens):
            raise ApiError(Outcome.UNAUTHORIZED)
        accept = request.headers.get("Accept", "")
        body, content_type = prometheus.exposition(self._registry, accept)
        return web.Response(body=body, headers={"Content-Type": content_type})

    def _figures(self) -> Figures:
        if self._remote_figures is not None:
            return self._remote_figures()
        figures = self._hook.figures()
        return replace(figures, totals={**figures.totals, **self.counters()})

    def counters(self) -> dict[str, int]:
        """This API's totals since start, for the figures and /metrics."""
        return {
            **self.stats.counters(),
            **self.guard.counters(),
            "quota_refused": self.quotas.refused,
            "namespaces_reload_failures": self._access.reload_failures,
        }

    async def openapi(self, _request: web.Request) -> web.Response:
        return _response(200, self._openapi)


def _metrics_tokens(config: HttpConfig) -> tuple[bytes, ...]:
    """The ``Authorization`` values ``/metrics`` accepts: Bearer
    ``metrics_scrape_token``, and ``api_token`` with ``metrics_require_token``."""
    tokens = [config.metrics_scrape_token] if config.metrics_scrape_token else []
    if config.api_token and config.metrics_require_token:
        tokens.append(config.api_token)
    return tuple(f"Bearer {token}".encode() for token in tokens)


def _carries(request: web.Request, accepted: tuple[bytes, ...]) -> bool:
    try:
        given = request.headers.get("Authorization", "").encode()
    except UnicodeEncodeError:  # bytes that are not UTF-8: never a token
        return False
    # Every one compared (constant time each), not just up to the first match.
    return any([hmac.compare_digest(given, token) for token in accepted])


def _settle(future: asyncio.Future[T], result: T | None, error: TriggerHookError | None) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


def _expire(future: asyncio.Future[Any], ticket: Ticket | None) -> None:
    """The commit timeout: answer 503 only if the call is never to be written."""
    if future.done():
        return
    if ticket is not None and not ticket.abandon():
        # A writer took it: its outcome follows (the write is bounded by the
        # database's timeouts); a 503 now could be a lie about a commit.
        return
    future.set_exception(
        StoreUnavailable(f"not committed within {_COMMIT_TIMEOUT_S:.0f}s; not written")
    )
