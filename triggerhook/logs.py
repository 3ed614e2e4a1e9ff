"""Log formatting for the CLI: one line per record, with its structured context."""

from __future__ import annotations

import logging

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class ContextFormatter(logging.Formatter):
    """``time level logger: message key=value ...`` where the pairs are the
    record's ``extra`` context (task_id, instance, attempt, ...)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        # The message line only: logging appends any traceback after it.
        line = super().formatMessage(record)
        context = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        if context:
            line += " " + " ".join(f"{k}={v}" for k, v in sorted(context.items()))
        return line


def configure(level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(ContextFormatter())
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
