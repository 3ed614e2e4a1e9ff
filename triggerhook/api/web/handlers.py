"""The web view's request handlers, on the HTTP API's aiohttp application.

Threads: handlers run on the event loop; a page's reads (tasks, count,
timeline: one call) and a bulk cancel run as the API's listing work
(:class:`~triggerhook.api.listing_work.ListingWork`: its bound on calls at
once, stopped when the browser goes away; a bulk cancel at its time limit),
a single cancel on the API's thread pool. The HTTP API's middlewares
run first: connection limits, request figures, and :meth:`WebView.refuse`,
its login check for ``/ui``. A bad filter or form value is answered with a
page naming the field (422), never a traceback; other failures (the
database down) get the API's JSON error answer and log line.
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

from triggerhook.api.config import HttpConfig
from triggerhook.api.limits import BodyTimeout, BodyTooLarge, read_body
from triggerhook.api.listing_work import ListingWork
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
from triggerhook.domain.task import validate_id
from triggerhook.errors import TooCostly, ValidationError
from triggerhook.runtime.interrupt import Interrupt

T = TypeVar("T")
Handler = Callable[["WebView", web.Request], Awaitable[web.StreamResponse]]

PAGE_SIZE = 50
# A page counts the matches up to this many (then shows "100,000+"): the count
# of a filter matching millions would read them all.
COUNT_UP_TO = 100_000
_FORM = "application/x-www-form-urlencoded"


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

    return wrapped


class WebView:
    """The pages under ``/ui``; :meth:`add_routes` puts them on the router."""

    def __init__(
        self,
        hook: TriggerHook,
        config: HttpConfig,
        executor: ThreadPoolExecutor,
        figures: Callable[[], Figures],
    ) -> None:
        """``figures``: what ``/v1/status`` shows (the API's own method)."""
        self._hook = hook
        self._config = config
        self._executor = executor
        self._figures = figures
        self._auth = WebAuth(config.api_token)
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

    def refuse(self, request: web.Request, bearer: bool) -> web.Response | None:
        """None when ``request`` may go on: no token is configured, it carried
        the token (``bearer``), it has a valid session, or it asks for the
        login page or a static file. Else: to the login page (the figures'
        JSON: 401)."""
        if not self._auth.required or bearer or request.path in self._open:
            return None
        if self._auth.logged_in(request.cookies, time.time()):
            return None
        if request.path == "/ui/figures.json":
            return secured(web.json_response({"error": "log in at /ui/login"}, status=401))
        return see_other("/ui/login")

    # -- pages --------------------------------------------------------------------------

    def _blocking(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def listing(self, request: web.Request) -> web.Response:
        view = read_view(request.query)
        csrf, fresh = self._form_token(request)
        figures = self._figures()
        listing = Listing(
            view,
            instance=figures.instance,
            figures=figure_texts(figures),
            tasks=[],
            csrf=csrf,
            logout=self._auth.required,
        )
        if view.where is not None:
            listing = await self._found(request, listing, view)
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

    async def _found(self, request: web.Request, listing: Listing, view: View) -> Listing:
        """``listing`` with the tasks, count and timeline of its filter (one
        listing call: one of its slots); a refused cursor, or a read over its
        bounds, as the view's error."""
        where = view.where
        assert where is not None

        def reads(stop: Interrupt) -> tuple[Page, int, Timeline]:
            hook = self._hook
            page = hook.list_tasks(where, limit=PAGE_SIZE, cursor=view.cursor, interrupt=stop)
            count = hook.count(where, up_to=COUNT_UP_TO, interrupt=stop)
            return page, count, hook.timeline(timeline_filter(where), interrupt=stop)

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

    async def figures(self, _request: web.Request) -> web.Response:
        """The figures as the page shows them; its script polls this."""
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
        if not self._auth.token_matches(fields.get("token", "")):
            return html(login_page("That is not the API token."), 401)
        response = see_other("/ui")
        session = self._auth.new_session(time.time())
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
        result = await self._blocking(lambda: self._hook.cancel(task_id))
        return see_other(listing_url(return_values(fields), task=task_id, outcome=result.value))

    @answers_pages
    async def bulk_cancel(self, request: web.Request) -> web.StreamResponse:
        fields = await self._cancel_form(request)
        typed, where = bulk_filter({k: v for k, v in fields.items() if k != CSRF_FIELD})
        done = await self._work.run(
            request,
            lambda stop: self._hook.cancel_where(where, interrupt=stop),
            self._work.bulk_cancel_timeout_s,
        )
        back = {"cancelled": str(done.cancelled), "too_late": str(done.too_late)}
        if done.cursor is not None:  # stopped at its time limit
            back["stopped"] = "1"
        return see_other(listing_url(typed, **back))


__all__ = ["WebView", "is_ui_path"]
