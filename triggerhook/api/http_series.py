"""A series' life over HTTP: ``POST /v1/tasks/{id}/pause``, ``/resume``,
``/trigger`` and ``/backfill`` (docs/api.md, "A series' life").

Answers: ``200 {"id", "outcome"}`` (paused, paused_after_this, resumed,
ended), and for a trigger or a backfill also ``"copies": [{"id", "due_ms",
"outcome"}]``, the one-off tasks written (created, or exists: a repeated
backfill finds its copies); ``404 not_found``; ``409 not_a_series`` (a
one-off task). Library errors take the API's way (its middleware): a
ValidationError is 422 naming the field, a ConflictError (a copy's id taken
by other content) 409, a database down 503.

Threads: the library's calls block (a pause or resume is one store
transaction of its own, a trigger waits for its copy's group commit, a
backfill writes its copies in one transaction), so they run on the API's
thread pool, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from triggerhook.api.bodies import parse_backfill, parse_no_fields
from triggerhook.api.http_answers import ApiError, json_answer, status_of
from triggerhook.api.render import series_json
from triggerhook.api.scoped import ScopedHook
from triggerhook.app import Copied, Scheduled
from triggerhook.domain.outcomes import SERIES_OUTCOMES
from triggerhook.domain.task import SeriesResult, validate_id

T = TypeVar("T")
# HttpApi's: run a blocking call on its thread pool; read a request's JSON body.
Blocking = Callable[[Callable[[], T]], Awaitable[T]]
JsonBody = Callable[[web.Request], Awaitable[object]]

ACTIONS = ("pause", "resume", "trigger", "backfill")


def series_answer(
    task_id: str, result: SeriesResult, copies: Iterable[Scheduled] | None = None
) -> web.Response:
    """The answer of a series' operation: ``result`` as its outcome's status,
    an error (NOT_FOUND, NOT_A_SERIES) raised as :class:`ApiError`."""
    outcome = SERIES_OUTCOMES[result]
    if not outcome.ok:
        raise ApiError(outcome, id=task_id)
    return json_answer(status_of(outcome), series_json(task_id, outcome, copies))


def _copied(task_id: str, copied: Copied) -> web.Response:
    return series_answer(task_id, copied.result, copied.copies)


class SeriesApi:
    """The handlers; :meth:`add_routes` puts them on the application."""

    def __init__(
        self,
        hook_of: Callable[[web.Request], ScopedHook],
        blocking: Blocking[Any],
        json_body: JsonBody,
    ) -> None:
        """``hook_of``: the library as a request's token may use it."""
        self._hook_of = hook_of
        self._blocking = blocking
        self._json_body = json_body

    def add_routes(self, router: web.UrlDispatcher) -> None:
        for action, handler in zip(
            ACTIONS, (self.pause, self.resume, self.trigger, self.backfill), strict=True
        ):
            router.add_post(f"/v1/tasks/{{id}}/{action}", handler)

    async def pause(self, request: web.Request) -> web.Response:
        task_id = await self._bodiless(request)
        hook = self._hook_of(request)
        result: SeriesResult = await self._blocking(lambda: hook.pause(task_id))
        return series_answer(task_id, result)

    async def resume(self, request: web.Request) -> web.Response:
        task_id = await self._bodiless(request)
        hook = self._hook_of(request)
        result: SeriesResult = await self._blocking(lambda: hook.resume(task_id))
        return series_answer(task_id, result)

    async def trigger(self, request: web.Request) -> web.Response:
        task_id = await self._bodiless(request)
        hook = self._hook_of(request)
        copied: Copied = await self._blocking(lambda: hook.trigger(task_id))
        return _copied(task_id, copied)

    async def backfill(self, request: web.Request) -> web.Response:
        task_id = validate_id(request.match_info["id"])
        span = parse_backfill(await self._json_body(request))
        hook = self._hook_of(request)
        copied: Copied = await self._blocking(
            lambda: hook.backfill(task_id, from_ms=span.from_ms, to_ms=span.to_ms)
        )
        return _copied(task_id, copied)

    async def _bodiless(self, request: web.Request) -> str:
        """The path's task id, once the body is none at all (``curl -X POST``)
        or ``{}``: a field sent is refused (422, naming it), as in every body."""
        task_id = validate_id(request.match_info["id"])
        if request.body_exists:
            parse_no_fields(await self._json_body(request))
        return task_id
