"""ContextFormatter: ``time level logger: message key=value ...`` from the record's extra;
redact: no password from a URL in any log line."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator

import pytest

from triggerhook.logs import ContextFormatter, configure, redact

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


# -- passwords in URLs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("amqp://guest:s3cret@127.0.0.1:5672/%2F", "amqp://guest:***@127.0.0.1:5672/%2F"),
        (
            "mysql+pymysql://app:s3cret@db.internal:3306/th",
            "mysql+pymysql://app:***@db.internal:3306/th",
        ),
        ("InfluxDB at 'http://u:s3cret@h:8086': down", "InfluxDB at 'http://u:***@h:8086': down"),
        # An unescaped "@" or ":" in the password: masked whole.
        ("http://u:s3@c:ret@h:8086/write", "http://u:***@h:8086/write"),
        # Several URLs in one text.
        ("a://x:s3cret@h b://y:s3cret@k", "a://x:***@h b://y:***@k"),
        # Nothing to hide: left as it is.
        ("mysql+pymysql://root:@127.0.0.1:3306/th", "mysql+pymysql://root:@127.0.0.1:3306/th"),
        ("http://127.0.0.1:8086/write?db=x", "http://127.0.0.1:8086/write?db=x"),
        ("mailto someone@example.com", "mailto someone@example.com"),
        ("http://h:8086/path@x", "http://h:8086/path@x"),
    ],
)
def test_redact_masks_url_passwords(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_formatter_masks_passwords_wherever_they_appear() -> None:
    """Safety net: the message, its arguments, the context pairs and the traceback."""
    try:
        raise ConnectionError("cannot reach amqp://guest:in-traceback@h:5672/")
    except ConnectionError:
        rec = record(
            "writing to %s",
            "http://influx:in-args@h:8086",
            level=logging.ERROR,
            extra={"url": "mysql+pymysql://app:in-context@db/th"},
            exc_info=True,
        )
    text = ContextFormatter().format(rec)
    for secret in ("in-traceback", "in-args", "in-context"):
        assert secret not in text, text
    assert "http://influx:***@h:8086" in text
    assert "url=mysql+pymysql://app:***@db/th" in text
    assert text.splitlines()[-1] == "ConnectionError: cannot reach amqp://guest:***@h:5672/"


@pytest.mark.usefixtures("restore_logging")
def test_configure_installs_the_masking_formatter(capsys: pytest.CaptureFixture[str]) -> None:
    configure("INFO")
    logging.getLogger("some.library").warning("connecting to %s", "amqp://u:s3cret@h/")
    err = capsys.readouterr().err
    assert "s3cret" not in err
    assert "connecting to amqp://u:***@h/" in err
