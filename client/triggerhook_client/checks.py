"""Small checks of what a caller passes, shared by the request builders: each
refusal is an :class:`InvalidRequest` with ``status`` None (nothing was sent),
naming the argument as the caller called it. And the one way the client warns
of a deprecated spelling."""

from __future__ import annotations

import sys
import warnings
from types import FrameType
from typing import TypeGuard

from triggerhook_client.errors import InvalidRequest


def invalid(name: str | None, message: str) -> InvalidRequest:
    return InvalidRequest(None, "invalid", message, name)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def utf8(value: object, name: str) -> str:
    """``value`` if it is text with a UTF-8 form: a lone surrogate (a
    non-UTF-8 byte from argv) would make the daemon refuse the whole body as
    malformed JSON, naming no field."""
    if not isinstance(value, str):
        raise invalid(name, "must be a string")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise invalid(name, f"is not valid UTF-8 text: {exc.reason}") from None
    return value


def deprecated(message: str) -> None:
    """A :class:`DeprecationWarning` pointing at the caller's own line: the
    first frame outside this package (Python's default filters show it when
    that code is ``__main__``; test runners show it always)."""
    frame = sys._getframe(1)
    level = 2  # warnings.warn's stacklevel for the frame that called this
    while frame.f_back is not None and _ours(frame):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)


def _ours(frame: FrameType) -> bool:
    name = str(frame.f_globals.get("__name__", ""))
    return name == __package__ or name.startswith(f"{__package__}.")
