"""Log formatting for the CLI: one line per record, with its structured context,
and never a password from a URL."""

from __future__ import annotations

import logging
import re

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

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


class ContextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` where the pairs are the
    record's ``extra`` context (task_id, instance, attempt, ...). The whole
    text (message, context, traceback) passes through :func:`redact`: a safety
    net for a URL that reached a message unredacted (from a library, say)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))

    def formatMessage(self, record: logging.LogRecord) -> str:
        # The message line only: logging appends any traceback after it.
        line = super().formatMessage(record)
        context = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        if context:
            line += " " + " ".join(f"{k}={v}" for k, v in sorted(context.items()))
        return line


def configure(level: str, context: dict[str, object] | None = None) -> None:
    """Log lines to stderr at ``level``; ``context`` goes on every record
    (an API process names itself: ``api_process=0``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(ContextFormatter())
    for key, value in (context or {}).items():
        handler.addFilter(_Tag(key, value))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # pika logs every failed connection attempt at ERROR, several lines each; the
    # publisher logs each failure and recovery itself, once, with its reason.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    # httpx logs every request at INFO (the metrics sink writes every second);
    # the sink reports failures itself. DEBUG shows them all again.
    if level.upper() != "DEBUG":
        logging.getLogger("httpx").setLevel(logging.WARNING)


class _Tag(logging.Filter):
    """Sets one attribute on every record it passes."""

    def __init__(self, key: str, value: object) -> None:
        super().__init__()
        self._key, self._value = key, value

    def filter(self, record: logging.LogRecord) -> bool:
        setattr(record, self._key, self._value)
        return True
