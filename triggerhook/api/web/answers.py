"""How the web view answers: HTML, redirects and its static files, each with
the headers that keep the pages to themselves (a CSP allowing only this
origin's files, so no inline script or style; no framing; no caching of
pages that show tasks)."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from triggerhook.api.web.pages import message_page

CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_TYPES = {"web.css": "text/css", "web.js": "text/javascript"}


class Refused(Exception):
    """A request the web view turns down with a page saying why."""

    def __init__(self, status: int, title: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.title = title
        self.text = text


def secured(response: web.Response) -> web.Response:
    response.headers.update(HEADERS)
    return response


def html(text: str, status: int = 200) -> web.Response:
    return secured(web.Response(text=text, status=status, content_type="text/html"))


def refused(exc: Refused) -> web.Response:
    response = html(message_page(exc.title, exc.text), exc.status)
    if exc.status in (408, 413):  # the body was not read: as the API, do not wait for it
        response.force_close()
    return response


def see_other(location: str) -> web.Response:
    """The answer to a form: go (GET) to ``location``, a path of ours."""
    assert location.startswith("/ui"), location
    return secured(web.Response(status=303, headers={"Location": location}))


def static_files() -> dict[str, tuple[bytes, str]]:
    """The script and stylesheet shipped in the package (read once): body, type."""
    folder = resources.files("triggerhook.api.web") / "static"
    return {name: (folder.joinpath(name).read_bytes(), kind) for name, kind in _TYPES.items()}


def static_answer(body: bytes, kind: str) -> web.Response:
    response = secured(web.Response(body=body, content_type=kind, charset="utf-8"))
    response.headers["Cache-Control"] = "no-cache"  # revalidate: an upgrade changes them
    return response
