"""The HTTP API's guard against DNS rebinding: a request whose ``Host`` names
a server this is not gets 421, before anything looks at it.

A page of another site may not read this API's answers, unless its own
name comes to resolve to this machine (rebinding ``evil.example`` to
127.0.0.1): the browser then takes the API for the page's own origin, and
lets it send anything and read every answer — but its requests still say
``Host: evil.example``. So a Host is accepted when it is

* absent (HTTP/1.0: no browser sends such a request);
* an IP address (``127.0.0.1:8080``, ``[::1]``, a pod's address in an
  orchestrator's probe): no name, nothing to rebind;
* ``localhost``, or ``http_host`` itself when that is a name;
* a name of ``http_allowed_hosts`` (``.example.com``: that name and every
  name under it);

with any port (a tunnel or a container's port mapping changes it; it has no
part in a rebinding). Any Host is accepted when ``http_allowed_hosts`` is
``*``, or when it is empty and ``api_token`` is set and ``http_host`` is not
a loopback address: behind a proxy, the names the API is reached by are not
known here, and a rebinding page lacks the token (a browser does not send
it, nor the web view's cookie, to another name). ``/healthz`` and
``/readyz`` answer any Host: probes send what their orchestrator likes, and
the answers give nothing away.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from triggerhook.api.config import HttpConfig
from triggerhook.ratelimit import RateLimitedLog
from triggerhook.settings import is_loopback

log = logging.getLogger(__name__)

PROBES = frozenset({"/healthz", "/readyz"})
ANY = "*"
_LABELS = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_PORT = re.compile(r"[0-9]{0,5}")  # RFC 3986: port = *DIGIT
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})  # a bind address that names no host
_SHOWN_CHARS = 100  # of a refused Host, in the answer and the log
_LOG_EVERY_S = 60.0


def host_name(header: str) -> str | None:
    """The host in a ``Host`` header's value: lower-case, without its port
    or a name's trailing dot, an IPv6 address without brackets; None when
    the value is no valid Host (RFC 9110 7.2)."""
    text = header.lower()
    if text.startswith("["):
        name, bracket, port = text[1:].partition("]")
        if not bracket or not _ipv6(name):
            return None
    else:
        name, colon, port = text.partition(":")
        port = colon + port
        name = name.removesuffix(".")
        if not _LABELS.fullmatch(name):
            return None
    if port and not (port.startswith(":") and _PORT.fullmatch(port[1:])):
        return None
    if port[1:] and int(port[1:]) > 65535:
        return None
    return name


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class HostRule:
    """Which ``Host`` headers the API answers (see the module's docstring)."""

    names: frozenset[str]  # lower-case, no trailing dot
    suffixes: tuple[str, ...]  # ".example.com": every name under it
    any_host: bool = False

    @classmethod
    def of(cls, bind_host: str, api_token: bool, allowed: Sequence[str]) -> HostRule:
        """For the API bound to ``bind_host``, with an ``api_token`` or not,
        and ``allowed``: http_allowed_hosts (lower-case, ``*``: any)."""
        if ANY in allowed or (not allowed and api_token and not is_loopback(bind_host)):
            return cls(frozenset(), (), any_host=True)
        names = {"localhost", *(name.removeprefix(".") for name in allowed)}
        bound = bind_host.lower().strip("[]").removesuffix(".")
        if bound not in _WILDCARDS:
            names.add(bound)
        suffixes = tuple(name for name in allowed if name.startswith("."))
        return cls(frozenset(names), suffixes)

    def accepts(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header value (None: none) is answered."""
        if self.any_host or header is None:
            return True
        name = host_name(header)
        if name is None:
            return False
        return _ip(name) or name in self.names or name.endswith(self.suffixes)


def host_check(config: HttpConfig) -> Middleware:
    """The middleware that answers 421 to a request for a Host ``config`` does not accept."""
    rule = HostRule.of(config.host, bool(config.api_token), config.allowed_hosts)
    refusals = RateLimitedLog(log, _LOG_EVERY_S)

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")  # aiohttp refuses a second one (400)
        if request.path in PROBES or rule.accepts(header):
            return await handler(request)
        shown = str(header)[:_SHOWN_CHARS]
        refusals.warning(
            "host",
            "refused a request for Host %r: not a name of this server (http_allowed_hosts)",
            shown,
            extra={"path": request.path[:_SHOWN_CHARS]},
        )
        return refusal(shown)

    return check_host


def refusal(shown: str) -> web.Response:
    """421, with the API's error body naming the Host."""
    message = (
        f"Host {shown!r} is not a name of this server: refused against DNS rebinding "
        "(the daemon's http_allowed_hosts setting lists the names it answers to)"
    )
    error = {"code": "misdirected_request", "message": message, "field": "Host"}
    return web.json_response({"error": error}, status=421)
