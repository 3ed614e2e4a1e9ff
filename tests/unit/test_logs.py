"""ContextFormatter: ``time level logger: message key=value ...`` from the record's extra."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator

import pytest

from triggerhook.logs import ContextFormatter, configure

PREFIX = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "


def record(
    msg: str,
    *args: object,
    level: int = logging.INFO,
    extra: dict[str, object] | None = None,
    exc_info: bool = False,
) -> logging.LogRecord:
    logger = logging.getLogger("triggerhook.test")
    info = sys.exc_info() if exc_info else None
    return logger.makeRecord(logger.name, level, __file__, 1, msg, args, info, extra=extra)


def test_plain_record_has_no_trailing_context() -> None:
    line = ContextFormatter().format(record("engine %s", "started"))
    assert re.fullmatch(PREFIX + r"INFO triggerhook\.test: engine started", line), line


def test_extra_context_is_appended_as_sorted_key_value_pairs() -> None:
    line = ContextFormatter().format(
        record(
            "retrying",
            level=logging.WARNING,
            extra={"task_id": "t-1", "attempt": 3, "instance": "host-a"},
        )
    )
    assert re.fullmatch(
        PREFIX + r"WARNING triggerhook\.test: retrying attempt=3 instance=host-a task_id=t-1",
        line,
    ), line


def test_standard_record_attributes_are_not_context() -> None:
    rec = record("hello", extra={"instance": "i-1"})
    line = ContextFormatter().format(rec)
    assert line.endswith("hello instance=i-1")
    for standard in ("levelname=", "lineno=", "threadName=", "asctime=", "message="):
        assert standard not in line


def test_context_stays_on_the_message_line_when_there_is_a_traceback() -> None:
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        rec = record("boom", level=logging.ERROR, extra={"task_id": "t-1"}, exc_info=True)
    lines = ContextFormatter().format(rec).splitlines()
    # The pairs describe the record, so they belong after its message, not glued
    # onto the last line of the traceback (where they read as part of the error).
    assert lines[0].endswith("ERROR triggerhook.test: boom task_id=t-1"), lines
    assert lines[-1] == "ZeroDivisionError: division by zero", lines


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    pika_level = logging.getLogger("pika").level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("pika").setLevel(pika_level)


@pytest.mark.usefixtures("restore_logging")
def test_configure_installs_one_context_handler() -> None:
    configure("debug")
    root = logging.getLogger()
    assert root.level == logging.DEBUG
    assert len(root.handlers) == 1
    assert isinstance(root.handlers[0].formatter, ContextFormatter)
    assert logging.getLogger("pika").level == logging.CRITICAL
    configure("WARNING")
    assert len(root.handlers) == 1  # replaced, not added
    assert root.level == logging.WARNING
