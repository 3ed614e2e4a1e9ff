"""Finding and bulk-cancelling tasks over HTTP: ``GET /v1/tasks``,
``/v1/tasks/count``, ``/v1/tasks/timeline`` and ``POST /v1/tasks/cancel``.

The query parameters are parsed here (pure functions: a mapping of strings
in, a :class:`~triggerhook.domain.listing.TaskFilter` out, or a
:class:`ValidationError` naming the parameter); the store calls run on the
API's thread pool. Times are given as ``at`` is: epoch seconds or RFC 3339.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web
from multidict import MultiMapping

from triggerhook.api.render import task_json, timeline_json
from triggerhook.app import TriggerHook
from triggerhook.domain.listing import TaskFilter, make_filter
from triggerhook.domain.timeparse import parse_at
from triggerhook.errors import ValidationError

T = TypeVar("T")

FILTER_PARAMS = frozenset({"prefix", "routing_key", "tag", "due_after", "due_before", "state"})
LIST_PARAMS = FILTER_PARAMS | {"limit", "cursor"}
TIMELINE_PARAMS = frozenset({"prefix", "routing_key", "tag", "start", "bucket", "buckets"})
BULK_FIELDS = frozenset({"prefix", "routing_key", "tag", "due_after", "due_before"})
_INTEGER = re.compile(r"[0-9]{1,9}")
_LONGEST_VALUE = 300  # characters of any parameter (a cursor, a routing key)


def single_values(query: MultiMapping[str], allowed: frozenset[str]) -> dict[str, str]:
    """Each parameter once, and only known ones."""
    values: dict[str, str] = {}
    for key, value in query.items():
        if key not in allowed:
            raise ValidationError(
                key[:64], f"unknown parameter (allowed: {', '.join(sorted(allowed))})"
            )
        if key in values:
            raise ValidationError(key, "given more than once")
        if len(value) > _LONGEST_VALUE:
            raise ValidationError(key, f"longer than {_LONGEST_VALUE} characters")
        values[key] = value
    return values


def _integer(values: Mapping[str, str], key: str) -> int | None:
    if key not in values:
        return None
    if not _INTEGER.fullmatch(values[key]):
        raise ValidationError(key, "must be a whole number")
    return int(values[key])


def _time_ms(values: Mapping[str, object], key: str) -> int | None:
    if key not in values:
        return None
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError(key, "must be epoch seconds (a number) or an RFC 3339 string")
    return parse_at(value, key, past_ok=True)


def parse_filter(values: Mapping[str, object]) -> TaskFilter:
    """A filter from query parameters or a bulk cancel's body."""
    return make_filter(
        prefix=values.get("prefix"),
        routing_key=values.get("routing_key"),
        tag=values.get("tag"),
        due_after_ms=_time_ms(values, "due_after"),
        due_before_ms=_time_ms(values, "due_before"),
        state=values.get("state"),
    )


def parse_bulk_cancel(body: object) -> TaskFilter:
    """``{"prefix"?, "tag"?, "routing_key"?, "due_after"?, "due_before"?}``, at
    least one of the first three."""
    if not isinstance(body, Mapping):
        raise ValidationError("body", "must be a JSON object")
    for key, value in body.items():
        if key not in BULK_FIELDS:
            raise ValidationError(
                str(key)[:64], f"unknown field (allowed: {', '.join(sorted(BULK_FIELDS))})"
            )
        if value is None:  # never "any": leave the field out for that
            raise ValidationError(key, "must not be null")
    where = parse_filter(body)
    if not where.narrowed:
        raise ValidationError("body", "give at least one of prefix, tag and routing_key")
    return where


class ListingApi:
    """The handlers; :meth:`add_routes` puts them on the application (before
    ``/v1/tasks/{id}``, so that these paths are not read as task ids)."""

    def __init__(self, hook: TriggerHook, executor: ThreadPoolExecutor) -> None:
        self._hook = hook
        self._executor = executor

    def add_routes(self, router: web.UrlDispatcher, json_body: Callable[..., Any]) -> None:
        self._json_body = json_body
        router.add_get("/v1/tasks", self.list, allow_head=False)
        router.add_get("/v1/tasks/count", self.count, allow_head=False)
        router.add_get("/v1/tasks/timeline", self.timeline, allow_head=False)
        router.add_post("/v1/tasks/cancel", self.cancel)
        for path, method in (
            ("/v1/tasks/count", "GET"),
            ("/v1/tasks/timeline", "GET"),
            ("/v1/tasks/cancel", "POST"),
        ):
            router.add_route("*", path, only_method(method))

    def _blocking(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def list(self, request: web.Request) -> web.Response:
        values = single_values(request.query, LIST_PARAMS)
        where, limit = parse_filter(values), _integer(values, "limit")
        cursor = values.get("cursor")
        page = await self._blocking(
            lambda: self._hook.list_tasks(where, limit=limit, cursor=cursor)
        )
        return web.json_response(
            {
                "tasks": [task_json(info, payload=False) for info in page.tasks],
                "next_cursor": page.cursor,
            }
        )

    async def count(self, request: web.Request) -> web.Response:
        where = parse_filter(single_values(request.query, FILTER_PARAMS))
        number = await self._blocking(lambda: self._hook.count(where))
        return web.json_response({"count": number})

    async def timeline(self, request: web.Request) -> web.Response:
        values = single_values(request.query, TIMELINE_PARAMS)
        where = parse_filter({k: v for k, v in values.items() if k in FILTER_PARAMS})
        bucket_s = _integer(values, "bucket")
        buckets = _integer(values, "buckets")
        start_ms = _time_ms(values, "start")
        found = await self._blocking(
            lambda: self._hook.timeline(
                where,
                bucket_ms=60_000 if bucket_s is None else bucket_s * 1000,
                buckets=60 if buckets is None else buckets,
                start_ms=start_ms,
            )
        )
        return web.json_response(timeline_json(found))

    async def cancel(self, request: web.Request) -> web.Response:
        where = parse_bulk_cancel(await self._json_body(request))
        done = await self._blocking(lambda: self._hook.cancel_where(where))
        return web.json_response({"cancelled": done.cancelled, "too_late": done.too_late})


def only_method(method: str) -> Callable[[web.Request], Any]:
    """A handler answering 405 (allowed: ``method``): a path that is no task id."""

    async def refuse(_request: web.Request) -> web.Response:
        raise web.HTTPMethodNotAllowed("", [method])

    return refuse
