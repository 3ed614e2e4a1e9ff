"""Log formatting for the CLI: one line per record, with its structured context,
in UTC, and never a password from a URL.

Two formats (the ``log_format`` setting): ``text``, ``time level logger:
message key=value ...``; and ``json``, one JSON object per line for a log
shipper: ``time``, ``level``, ``logger``, ``message``, the context keys, and
``traceback`` when the record has one. Times are RFC 3339 in UTC with
milliseconds (``2026-12-04T12:00:00.123Z``) in both.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from types import TracebackType
from urllib.parse import urlsplit

FORMATS = ("text", "json")

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# The keys of a JSON line itself; a context key of the same name is written
# as ``context_<key>`` rather than overwrite them.
_JSON_KEYS = ("time", "level", "logger", "message", "traceback", "stack")

# ``scheme://user:password@``: the password runs to the last "@" before the
# host, so one with an unescaped "@" is masked whole. An empty password
# (``root:@``) shows nothing and is left alone.
_URL_PASSWORD = re.compile(r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s/]+@")
MASK = "***"


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` URL in it
    replaced by ``***``. Use it on any URL (or error text that may hold one)
    before it is logged or printed."""
    return _URL_PASSWORD.sub(rf"\g<keep>{MASK}@", text)


def url_origin(url: str) -> str:
    """``url`` as a log may show it: its scheme, host and port only, ``/...``
    marking a path, query or fragment left out. A webhook's URL may carry its
    secret anywhere (``user:password@``, a path, ``?token=``), which
    :func:`redact` does not know of."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(a malformed URL)"
    host = parts.hostname or ""
    shown = f"{parts.scheme}://[{host}]" if ":" in host else f"{parts.scheme}://{host}"
    if port is not None:
        shown += f":{port}"
    rest = parts.path not in ("", "/") or parts.query or parts.fragment
    return shown + "/..." if rest else shown


def utc_time(record: logging.LogRecord) -> str:
    """The record's creation time, RFC 3339 in UTC with milliseconds."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{whole}.{int(record.msecs):03d}Z"


def context_of(record: logging.LogRecord) -> dict[str, object]:
    """The record's ``extra`` context (task_id, instance, attempt, ...)."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class ContextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` where the pairs are the
    record's ``extra`` context (task_id, instance, attempt, ...). The whole
    text (message, context, traceback) passes through :func:`redact`: a safety
    net for a URL that reached a message unredacted (from a library, say)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return utc_time(record)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))

    def formatMessage(self, record: logging.LogRecord) -> str:
        # The message line only: logging appends any traceback after it.
        line = super().formatMessage(record)
        context = context_of(record)
        if context:
            line += " " + " ".join(f"{k}={v}" for k, v in sorted(context.items()))
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``time``, ``level``,
    ``logger``, ``message``, the context keys, ``traceback`` (and ``stack``)
    when there is one. Every string is passed through :func:`redact`; a
    context value JSON cannot hold is written as its ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": utc_time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in sorted(context_of(record).items()):
            data[f"context_{key}" if key in _JSON_KEYS else key] = _plain(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["traceback"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        return json.dumps(_redacted(data))


def _plain(value: object) -> object:
    """``value`` as JSON can hold it: scalars as they are, anything else as text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _redacted(data: dict[str, object]) -> dict[str, object]:
    return {k: redact(v) if isinstance(v, str) else v for k, v in data.items()}


def configure(
    level: str, context: dict[str, object] | None = None, log_format: str = "text"
) -> None:
    """Log lines to stderr at ``level`` in ``log_format`` (text or json);
    ``context`` goes on every record (an API process names itself:
    ``api_process=0``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else ContextFormatter())
    for key, value in (context or {}).items():
        handler.addFilter(_Tag(key, value))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _route_stray_output(log_format == "json")
    # pika logs every failed connection attempt at ERROR, several lines each; the
    # publisher logs each failure and recovery itself, once, with its reason.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    # httpx logs every request at INFO (the metrics sink writes every second);
    # the sink reports failures itself. DEBUG shows them all again.
    if level.upper() != "DEBUG":
        logging.getLogger("httpx").setLevel(logging.WARNING)


def json_configured() -> bool:
    """Whether :func:`configure` set up the json format (then every line on
    stderr, the CLI's error line too, should be a JSON object)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def _route_stray_output(on: bool) -> None:
    """In json, an uncaught exception (of the main thread or another) and a
    warning are logged as records: else they print bare text, which a log
    shipper could not parse. Text leaves Python's hooks alone."""
    logging.captureWarnings(on)  # warnings too: py.warnings records, not bare lines
    if on:
        sys.excepthook, threading.excepthook = _log_uncaught, _log_uncaught_in_thread
        return
    if sys.excepthook is _log_uncaught:
        sys.excepthook = sys.__excepthook__
    if threading.excepthook is _log_uncaught_in_thread:
        threading.excepthook = threading.__excepthook__


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    logging.getLogger("triggerhook").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return  # as threading's own hook: a thread's sys.exit() is no error
    thread = args.thread.name if args.thread is not None else "?"
    if args.exc_value is None:
        logging.getLogger("triggerhook").critical(
            "uncaught %s in thread %s", args.exc_type.__name__, thread
        )
        return
    logging.getLogger("triggerhook").critical(
        "uncaught exception in thread %s",
        thread,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


class _Tag(logging.Filter):
    """Sets one attribute on every record it passes."""

    def __init__(self, key: str, value: object) -> None:
        super().__init__()
        self._key, self._value = key, value

    def filter(self, record: logging.LogRecord) -> bool:
        setattr(record, self._key, self._value)
        return True
