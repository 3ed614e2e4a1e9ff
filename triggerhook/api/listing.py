"""Finding and bulk-cancelling tasks over HTTP: ``GET /v1/tasks``,
``/v1/tasks/count``, ``/v1/tasks/timeline`` and ``POST /v1/tasks/cancel``.

The query parameters are parsed here (pure functions: a mapping of strings
in, a :class:`~triggerhook.domain.listing.TaskFilter` out, or a
:class:`ValidationError` naming the parameter); the store calls run as
:class:`~triggerhook.api.listing_work.ListingWork` (threads of their own, a
bound on how many at once, stopped when the client goes away). A count may
be capped (``up_to``); a bulk cancel stops at ``bulk_cancel_timeout_s`` and
answers a ``next_cursor`` to go on from.

An instant is given as a due time is (docs/api.md, "Units"): epoch
milliseconds in a ``*_ms`` parameter (``due_after_ms``), or RFC 3339 text in
one without the suffix (``due_after``; epoch seconds there are deprecated);
at most one of the two. A timeline's ``bucket_ms`` is milliseconds
(``bucket``, whole seconds, is deprecated).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from multidict import MultiMapping
from triggerhook_client.rules import in_ms

from triggerhook.api.bodies import epoch_ms
from triggerhook.api.config import HttpConfig
from triggerhook.api.fields import (
    BULK_BODY,
    COUNT_QUERY,
    DEFAULT_BUCKET_MS,
    DEFAULT_BUCKETS,
    DUE_RANGE_QUERY,
    FILTER_QUERY,
    LIST_QUERY,
    SELECTION_QUERY,
    TIMELINE_QUERY,
    names,
    pairs,
)
from triggerhook.api.listing_work import ListingWork
from triggerhook.api.render import task_json, timeline_json
from triggerhook.api.scoped import ScopedHook
from triggerhook.domain.listing import (
    MAX_BUCKET_MS,
    MIN_BUCKET_MS,
    TaskFilter,
    count_cap,
    decode_cursor,
    make_filter,
)
from triggerhook.domain.timeparse import parse_at
from triggerhook.errors import ValidationError

# Each operation's parameters, and the bulk cancel's fields, are defined once
# (triggerhook.api.fields, which the OpenAPI document states too).
# Parameters of which at most one of each pair may be given (an OpenAPI
# parameter list cannot say so; the bulk cancel's body schema does).
DUE_RANGE_PAIRS = pairs(DUE_RANGE_QUERY)
TIMELINE_PAIRS = (("start", in_ms("start")), ("bucket", "bucket_ms"))
SELECTION_PARAMS = names(SELECTION_QUERY)
DUE_RANGE_PARAMS = names(DUE_RANGE_QUERY)
FILTER_PARAMS = names(FILTER_QUERY)
LIST_PARAMS = names(LIST_QUERY)
COUNT_PARAMS = names(COUNT_QUERY)
TIMELINE_PARAMS = names(TIMELINE_QUERY)
BULK_FIELDS = names(BULK_BODY)
# Query parameters in epoch ms, read as integers before the filter sees them.
_EPOCH_MS_PARAMS = (*(ms for _text, ms in DUE_RANGE_PAIRS), in_ms("start"))
_INTEGER = re.compile(r"[0-9]{1,12}")  # the range is checked where the value is used
_EPOCH_MS_TEXT = re.compile(r"-?[0-9]+")  # at most _LONGEST_VALUE characters: cheap
_BUCKET_MS_RULE = f"must be {MIN_BUCKET_MS} to {MAX_BUCKET_MS} (1 s to 31 days)"
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


def query_values(query: MultiMapping[str], allowed: frozenset[str]) -> dict[str, object]:
    """:func:`single_values`, with the epoch ms parameters as integers."""
    values: dict[str, object] = dict(single_values(query, allowed))
    for key in _EPOCH_MS_PARAMS:
        text = values.get(key)
        if isinstance(text, str):
            if not _EPOCH_MS_TEXT.fullmatch(text):
                raise ValidationError(key, "must be a whole number of epoch milliseconds")
            values[key] = int(text)
    return values


def _integer(values: Mapping[str, object], key: str) -> int | None:
    value = values.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _INTEGER.fullmatch(value):
        raise ValidationError(key, "must be a whole number")
    return int(value)


def _time_ms(values: Mapping[str, object], key: str) -> int | None:
    """An instant given as ``key`` (RFC 3339 text; deprecated: epoch seconds)
    or as ``key_ms`` (epoch ms), at most one of them; None: neither."""
    ms_key = in_ms(key)
    if ms_key in values:
        if key in values:
            raise ValidationError(key, f"give at most one of {key} and {ms_key} (given: both)")
        return epoch_ms(values[ms_key], ms_key)
    if key not in values:
        return None
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValidationError(key, "must be an RFC 3339 string (or epoch seconds, a number)")
    return parse_at(value, key, past_ok=True)


def timeline_bucket_ms(values: Mapping[str, object]) -> int:
    """``bucket_ms``, or the deprecated ``bucket`` (whole seconds); at most one."""
    bucket_ms, bucket_s = _integer(values, "bucket_ms"), _integer(values, "bucket")
    if bucket_s is None:
        if bucket_ms is not None and not MIN_BUCKET_MS <= bucket_ms <= MAX_BUCKET_MS:
            raise ValidationError("bucket_ms", _BUCKET_MS_RULE)
        return DEFAULT_BUCKET_MS if bucket_ms is None else bucket_ms
    if bucket_ms is not None:
        raise ValidationError("bucket", "give at most one of bucket and bucket_ms (given: both)")
    return bucket_s * 1000


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


def parse_list(query: MultiMapping[str]) -> tuple[TaskFilter, int | None, str | None]:
    """``GET /v1/tasks``'s parameters (the gRPC API's List's too): the filter,
    the page's ``limit`` and the ``cursor`` to go on from."""
    values = query_values(query, LIST_PARAMS)
    cursor = values.get("cursor")  # given once: checked by the listing
    return (
        parse_filter(values),
        _integer(values, "limit"),
        cursor if isinstance(cursor, str) else None,
    )


def parse_count(query: MultiMapping[str]) -> tuple[TaskFilter, int | None]:
    """``GET /v1/tasks/count``'s parameters (the gRPC API's Count's too): the
    filter and the cap (``up_to``)."""
    values = query_values(query, COUNT_PARAMS)
    return parse_filter(values), count_cap(_integer(values, "up_to"))


def parse_bulk_cancel(body: object) -> TaskFilter:
    """``{"prefix"?, "tag"?, "routing_key"?, "due_after"? | "due_after_ms"?,
    "due_before"? | "due_before_ms"?}``, at least one of the first three."""
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
    if "cursor" in body:
        decode_cursor(body["cursor"])  # checked here; bulk_cursor gives it
    return where


def bulk_cursor(body: Mapping[str, object]) -> str | None:
    """A bulk cancel's ``cursor`` (checked by :func:`parse_bulk_cancel`): the
    ``next_cursor`` of one that stopped before its end, to go on from."""
    cursor = body.get("cursor")
    return cursor if isinstance(cursor, str) else None


class ListingApi:
    """The handlers; :meth:`add_routes` puts them on the application (before
    ``/v1/tasks/{id}``, so that these paths are not read as task ids).
    :attr:`work` runs them (the web view's reads and bulk cancels too)."""

    def __init__(self, hook_of: Callable[[web.Request], ScopedHook], config: HttpConfig) -> None:
        """``hook_of``: the library as a request's token may use it."""
        self._hook_of = hook_of
        self.work = ListingWork(config.listing_concurrency, config.bulk_cancel_timeout_s)

    def add_routes(self, app: web.Application, json_body: Callable[..., Any]) -> None:
        """The routes, and at the application's shutdown (before it waits for
        the requests in flight) the interruption of the calls in flight."""
        self._json_body = json_body
        app.on_shutdown.append(self._shutdown)
        router = app.router
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

    async def _shutdown(self, _app: web.Application) -> None:
        self.work.close()

    async def list(self, request: web.Request) -> web.Response:
        where, limit, cursor = parse_list(request.query)
        hook = self._hook_of(request)
        page = await self.work.run(
            request,
            lambda stop: hook.list_tasks(where, limit=limit, cursor=cursor, interrupt=stop),
        )
        return web.json_response(
            {
                "tasks": [task_json(info, payload=False) for info in page.tasks],
                "next_cursor": page.cursor,
            }
        )

    async def count(self, request: web.Request) -> web.Response:
        where, up_to = parse_count(request.query)
        hook = self._hook_of(request)
        number = await self.work.run(
            request, lambda stop: hook.count(where, up_to=up_to, interrupt=stop)
        )
        # at_least: the count stopped at up_to; there may be more.
        return web.json_response({"count": number, "at_least": number == up_to})

    async def timeline(self, request: web.Request) -> web.Response:
        values = query_values(request.query, TIMELINE_PARAMS)
        where = parse_filter({k: v for k, v in values.items() if k in SELECTION_PARAMS})
        bucket_ms, buckets = timeline_bucket_ms(values), _integer(values, "buckets")
        start_ms = _time_ms(values, "start")
        hook = self._hook_of(request)
        found = await self.work.run(
            request,
            lambda stop: hook.timeline(
                where,
                bucket_ms=bucket_ms,
                buckets=DEFAULT_BUCKETS if buckets is None else buckets,
                start_ms=start_ms,
                interrupt=stop,
            ),
        )
        return web.json_response(timeline_json(found))

    async def cancel(self, request: web.Request) -> web.Response:
        body = await self._json_body(request)
        where = parse_bulk_cancel(body)
        cursor = bulk_cursor(body)
        hook = self._hook_of(request)
        done = await self.work.run(
            request,
            lambda stop: hook.cancel_where(where, cursor=cursor, interrupt=stop),
            self.work.bulk_cancel_timeout_s,
        )
        return web.json_response(
            {"cancelled": done.cancelled, "too_late": done.too_late, "next_cursor": done.cursor}
        )


def only_method(method: str) -> Callable[[web.Request], Any]:
    """A handler answering 405 (allowed: ``method``): a path that is no task id."""

    async def refuse(_request: web.Request) -> web.Response:
        raise web.HTTPMethodNotAllowed("", [method])

    return refuse
