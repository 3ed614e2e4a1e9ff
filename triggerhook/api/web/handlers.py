"""The web view's request handlers, on the HTTP API's aiohttp application.

Threads: handlers run on the event loop; a page's reads (tasks, count,
timeline: one call) and a bulk cancel run as the API's listing work
(:class:`~triggerhook.api.listing_work.ListingWork`: its bound on calls at
once, stopped when the browser goes away; a bulk cancel at its time limit),
a single cancel on the API's thread pool. The HTTP API's middlewares
run first: connection limits, request figures, and :meth:`WebView.refuse`,
its login check for ``/ui``, which says whose token the request acts with:
every read and cancel goes through :class:`~triggerhook.api.scoped.ScopedHook`
for it, so a namespace's token sees and cancels its namespace's tasks only
(a refusal is a page naming the rule, 403). A bad filter or form value is
answered with a page naming the field (422), never a traceback; other
failures (the database down) get the API's JSON error answer and log line.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from aiohttp import web

from triggerhook.api.access import Access
from triggerhook.api.config import HttpConfig
from triggerhook.api.fields import DEFAULT_BUCKET_MS, DEFAULT_BUCKETS
from triggerhook.api.limits import BodyTimeout, BodyTooLarge, read_body
from triggerhook.api.listing_work import ListingWork
from triggerhook.api.scoped import ScopedHook
from triggerhook.api.web.answers import (
    Refused,
    html,
    refused,
    secured,
    see_other,
    static_answer,
    static_files,
)
from triggerhook.api.web.auth import (
    COOKIE_PATH,
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    SESSION_S,
    WebAuth,
)
from triggerhook.api.web.figures import figure_texts
from triggerhook.api.web.forms import (
    MAX_FORM_BYTES,
    View,
    bulk_filter,
    listing_url,
    read_form,
    read_view,
    return_values,
    timeline_filter,
)
from triggerhook.api.web.pages import Listing, listing_page, login_page
from triggerhook.app import Figures, TriggerHook
from triggerhook.domain.listing import Page, Timeline
from triggerhook.domain.namespaces import ALL, READ, Principal
from triggerhook.domain.task import validate_id
from triggerhook.errors import Forbidden, TooCostly, ValidationError
from triggerhook.runtime.interrupt import Interrupt

T = TypeVar("T")
Handler = Callable[["WebView", web.Request], Awaitable[web.StreamResponse]]

PAGE_SIZE = 50
# A page counts the matches up to this many (then shows "100,000+"): the count
# of a filter matching millions would read them all.
COUNT_UP_TO = 100_000
_FORM = "application/x-www-form-urlencoded"
_WHO = web.RequestKey("web_principal", Principal)  # whose token the request acts with


def is_ui_path(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def answers_pages(handler: Handler) -> Handler:
    """Bad input to a form as a page saying what was wrong, not JSON."""

    @functools.wraps(handler)
    async def wrapped(self: WebView, request: web.Request) -> web.StreamResponse:
        try:
            return await handler(self, request)
        except Refused as exc:
            return refused(exc)
        except ValidationError as exc:
            return refused(Refused(422, "refused", f"{exc.field}: {exc.message}"))
        except Forbidden as exc:
            return refused(Refused(403, "forbidden", str(exc)))

    return wrapped


class WebView:
    """The pages under ``/ui``; :meth:`add_routes` puts them on the router."""

    def __init__(
        self,
        hook: TriggerHook,
        config: HttpConfig,
        executor: ThreadPoolExecutor,
        figures: Callable[[], Figures],
        access: Access,
    ) -> None:
        """``figures``: what ``/v1/status`` shows (the API's own method);
        ``access``: the HTTP API's, who a token is."""
        self._hook = hook
        self._config = config
        self._executor = executor
        self._figures = figures
        self._access = access
        self._auth = WebAuth(config.api_token or config.web_session_token, access.required)
        self._static = static_files()
        # Reachable without a login: exact paths, never a prefix.
        self._open = frozenset({"/ui/login", *(f"/ui/static/{name}" for name in self._static)})

    def add_routes(self, router: web.UrlDispatcher, work: ListingWork) -> None:
        """The pages on ``router``; their reads and bulk cancels run as ``work``."""
        self._work = work
        router.add_get("/ui", self.listing, allow_head=False)
        router.add_get("/ui/", self.to_listing, allow_head=False)
        router.add_get("/ui/figures.json", self.figures, allow_head=False)
        router.add_get("/ui/static/{name}", self.static, allow_head=False)
        router.add_get("/ui/login", self.login_form, allow_head=False)
        router.add_post("/ui/login", self.login)
        router.add_post("/ui/logout", self.logout)
        router.add_post("/ui/cancel", self.bulk_cancel)
        router.add_post("/ui/tasks/{id}/cancel", self.cancel)

    # -- the login check (called by the HTTP API's auth middleware) -----------------

    def refuse(self, request: web.Request) -> web.Response | None:
        """None when ``request`` may go on: no token is configured, it carries
        a token, or a valid session of one the API still takes, or it asks
        for the login page or a static file. Else: to the login page (the
        figures' JSON: 401)."""
        who = self._who(request)
        if who is not None:
            request[_WHO] = who
            return None
        if request.path in self._open:
            return None
        if request.path == "/ui/figures.json":
            return secured(web.json_response({"error": "log in at /ui/login"}, status=401))
        return see_other("/ui/login")

    def _who(self, request: web.Request) -> Principal | None:
        if not self._auth.required:
            return ALL
        header = request.headers.get("Authorization")
        if header is not None:
            return self._access.principal(header)
        name = self._auth.logged_in(request.cookies, time.time())
        return None if name is None else self._access.named(name)

    def _scoped(self, request: web.Request) -> ScopedHook:
        return ScopedHook(self._hook, request[_WHO])

    # -- pages --------------------------------------------------------------------------

    def _blocking(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    @answers_pages
    async def listing(self, request: web.Request) -> web.StreamResponse:
        view = read_view(request.query)
        hook = self._scoped(request)
        hook.principal.need(READ)
        csrf, fresh = self._form_token(request)
        figures = self._figures()
        listing = Listing(
            view,
            instance=figures.instance,
            figures=figure_texts(figures),
            tasks=[],
            csrf=csrf,
            who=_shown(hook.principal) if self._auth.required else None,
        )
        if view.where is not None:
            listing = await self._found(request, hook, listing, view)
        response = html(listing_page(listing), 200 if listing.view.error is None else 422)
        if fresh is not None:
            self._cookie(request, response, CSRF_COOKIE, fresh, None)
        return response

    def _form_token(self, request: web.Request) -> tuple[str | None, str | None]:
        """The forms' CSRF token (None: read-only, no forms) and, when the
        browser has no nonce yet, the new one to set as its cookie."""
        if not self._config.web_allow_cancel:
            return None, None
        nonce = self._auth.nonce_of(request.cookies)
        fresh = None
        if nonce is None:
            nonce = fresh = self._auth.new_nonce()
        return self._auth.form_token(nonce), fresh

    async def _found(
        self, request: web.Request, hook: ScopedHook, listing: Listing, view: View
    ) -> Listing:
        """``listing`` with the tasks, count and timeline of its filter (one
        listing call: one of its slots); a refused cursor, or a read over its
        bounds, as the view's error."""
        where = view.where
        assert where is not None

        def reads(stop: Interrupt) -> tuple[Page, int, Timeline]:
            page = hook.list_tasks(where, limit=PAGE_SIZE, cursor=view.cursor, interrupt=stop)
            count = hook.count(where, up_to=COUNT_UP_TO, interrupt=stop)
            timeline = hook.timeline(
                timeline_filter(where),
                bucket_ms=DEFAULT_BUCKET_MS,
                buckets=DEFAULT_BUCKETS,
                interrupt=stop,
            )
            return page, count, timeline

        try:
            page, count, timeline = await self._work.run(request, reads)
        except (ValidationError, TooCostly) as exc:  # the cursor; the filter too broad
            error = exc if isinstance(exc, ValidationError) else ValidationError("filter", str(exc))
            return replace(listing, view=replace(view, where=None, error=error, cursor=None))
        return replace(
            listing,
            tasks=page.tasks,
            count=count,
            count_capped=count == COUNT_UP_TO,
            next_cursor=page.cursor,
            timeline=timeline,
        )

    async def figures(self, request: web.Request) -> web.Response:
        """The figures as the page shows them; its script polls this."""
        if READ not in request[_WHO].scopes:
            return secured(web.json_response({"error": "no 'read' scope"}, status=403))
        return secured(web.json_response({"figures": figure_texts(self._figures())}))

    async def static(self, request: web.Request) -> web.Response:
        found = self._static.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound()
        return static_answer(*found)

    async def to_listing(self, _request: web.Request) -> web.Response:
        return see_other("/ui")

    # -- login -----------------------------------------------------------------------

    async def login_form(self, _request: web.Request) -> web.Response:
        if not self._auth.required:
            return see_other("/ui")
        return html(login_page())

    @answers_pages
    async def login(self, request: web.Request) -> web.StreamResponse:
        if not self._auth.required:
            return see_other("/ui")
        fields = await self._form(request)
        who = self._access.principal(f"Bearer {fields.get('token', '')}")
        if who is None:
            return html(login_page("That is not a token this daemon takes."), 401)
        response = see_other("/ui")
        session = self._auth.new_session(who.name, time.time())
        self._cookie(request, response, SESSION_COOKIE, session, SESSION_S)
        return response

    async def logout(self, _request: web.Request) -> web.Response:
        response = see_other("/ui/login" if self._auth.required else "/ui")
        response.del_cookie(SESSION_COOKIE, path=COOKIE_PATH)
        return response

    @staticmethod
    def _cookie(
        request: web.Request, response: web.Response, name: str, value: str, max_age: int | None
    ) -> None:
        response.set_cookie(
            name,
            value,
            path=COOKIE_PATH,
            max_age=max_age,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )

    # -- cancels -------------------------------------------------------------------

    async def _form(self, request: web.Request) -> dict[str, str]:
        """The POSTed form's fields; Refused when it is not one, or too big or slow."""
        if request.content_type != _FORM:
            raise Refused(415, "refused", f"a form must be sent as {_FORM}")
        try:
            body = await read_body(request, MAX_FORM_BYTES, self._config.body_timeout_s)
        except BodyTooLarge:
            raise Refused(413, "refused", f"a form is at most {MAX_FORM_BYTES} bytes") from None
        except BodyTimeout:
            raise Refused(408, "refused", "the form did not arrive in time") from None
        return read_form(body)

    async def _cancel_form(self, request: web.Request) -> dict[str, str]:
        """A cancel's form, when cancelling is allowed and the form is ours."""
        if not self._config.web_allow_cancel:
            raise Refused(
                403, "read-only", "cancelling from the web view is off (web_allow_cancel)"
            )
        fields = await self._form(request)
        if not self._auth.form_genuine(request.cookies, fields):
            raise Refused(403, "refused", "the form has expired: reload the page and try again")
        return fields

    @answers_pages
    async def cancel(self, request: web.Request) -> web.StreamResponse:
        fields = await self._cancel_form(request)
        task_id = validate_id(request.match_info["id"])
        hook = self._scoped(request)
        result = await self._blocking(lambda: hook.cancel(task_id))
        return see_other(listing_url(return_values(fields), task=task_id, outcome=result.value))

    @answers_pages
    async def bulk_cancel(self, request: web.Request) -> web.StreamResponse:
        fields = await self._cancel_form(request)
        typed, where = bulk_filter({k: v for k, v in fields.items() if k != CSRF_FIELD})
        hook = self._scoped(request)
        done = await self._work.run(
            request,
            lambda stop: hook.cancel_where(where, interrupt=stop),
            self._work.bulk_cancel_timeout_s,
        )
        back = {"cancelled": str(done.cancelled), "too_late": str(done.too_late)}
        if done.cursor is not None:  # stopped at its time limit
            back["stopped"] = "1"
        return see_other(listing_url(typed, **back))


def _shown(who: Principal) -> str:
    """Who the page says is logged in."""
    space = who.namespace
    return who.name if space is None else f"{who.name} (namespace {space.name})"


__all__ = ["WebView", "is_ui_path"]
