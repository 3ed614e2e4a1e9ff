"""Who a request's bearer token is: ``api_token`` (every namespace, every
scope), a token of the namespaces file (docs/design/shared-service.md), or,
with neither configured, anyone (every namespace: the API is open, as
before namespaces).

The namespaces file is read when :class:`Access` is made (an error there is
a :class:`~triggerhook.errors.ConfigError` naming the file and the entry)
and again when its modification time or size changes, looked at no more
often than every ``reload_s``, on the thread of the request that looks (a
``stat``; a read and parse only when it changed). A changed file that does
not parse is logged, once per change, and the last good contents stay.

Threads: the HTTP API's event loop calls :meth:`Access.principal`, and the
command channel's I/O thread an :class:`Access` of its own; the reload
state is its caller's (a second caller at the same moment at worst reads
the file twice).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable

from triggerhook.domain.namespaces import (
    ALL,
    Namespaces,
    Principal,
    parse_namespaces,
)
from triggerhook.errors import ConfigError
from triggerhook.tomlfile import read_toml_file

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 16 * 1024 * 1024  # a file this size holds ~100,000 tokens
_BEARER = "Bearer "


def read_namespaces(path: str) -> Namespaces:
    """The namespaces file's contents; ConfigError naming the file and what is wrong."""
    data = read_toml_file(path, "namespaces_file", MAX_FILE_BYTES)
    try:
        return parse_namespaces(data)
    except ConfigError as exc:
        raise ConfigError(f"namespaces_file {path!r}: {exc}") from None


def _signature(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


class NamespacesFile:
    """The file's last good contents, looked at again every ``reload_s``."""

    def __init__(
        self, path: str, reload_s: float, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._path = path
        self._reload_s = reload_s
        self._monotonic = monotonic
        self._seen = _signature(path)
        self._contents = read_namespaces(path)
        self._next_look = monotonic() + reload_s
        self.reload_failures = 0  # changes of the file that did not parse

    def current(self) -> Namespaces:
        now = self._monotonic()
        if now >= self._next_look:
            self._next_look = now + self._reload_s
            self._look()
        return self._contents

    def _look(self) -> None:
        seen = _signature(self._path)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            self._contents = read_namespaces(self._path)
        except ConfigError as exc:
            self.reload_failures += 1
            log.error(
                "namespaces_file changed but was not loaded, the last good one stays: %s", exc
            )
            return
        log.info(
            "namespaces_file reloaded",
            extra={"namespaces": len(self._contents.spaces), "tokens": len(self._contents.tokens)},
        )


class Access:
    """The principal of a request's ``Authorization`` header."""

    def __init__(
        self,
        api_token: str,
        namespaces_file: str = "",
        reload_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._token = f"{_BEARER}{api_token}".encode() if api_token else None
        self._file = (
            NamespacesFile(namespaces_file, reload_s, monotonic) if namespaces_file else None
        )

    @property
    def required(self) -> bool:
        """Whether requests must carry a token (else everyone is every namespace)."""
        return self._token is not None or self._file is not None

    @property
    def reload_failures(self) -> int:
        return 0 if self._file is None else self._file.reload_failures

    def carries_api_token(self, authorization: str) -> bool:
        """Whether the header is ``Bearer <api_token>`` (compared in constant
        time); never, without an api_token."""
        if self._token is None:
            return False
        try:
            given = authorization.encode()
        except UnicodeEncodeError:  # not UTF-8: never the token
            return False
        return hmac.compare_digest(given, self._token)

    def named(self, name: str) -> Principal | None:
        """The token of this name (a web view session's): ``api_token``
        (when set), or the namespaces file's as of now; None: no such token."""
        if name == ALL.name:
            return ALL if self._token is not None else None
        return None if self._file is None else self._file.current().named.get(name)

    def user(self, user_id: str) -> Principal | None:
        """Who an AMQP ``user_id`` is in the namespaces file's ``[[amqp_user]]``
        entries; None: none of them."""
        return None if self._file is None else self._file.current().users.get(user_id)

    def principal(self, authorization: str) -> Principal | None:
        """Who the header's bearer token is; None: nobody (401)."""
        if not self.required or self.carries_api_token(authorization):
            return ALL
        if self._file is None or not authorization.startswith(_BEARER):
            return None
        return self._file.current().principal(authorization[len(_BEARER) :])
