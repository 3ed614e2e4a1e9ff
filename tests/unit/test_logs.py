"""ContextFormatter: ``time level logger: message key=value ...`` from the record's extra;
JsonFormatter: the same as one JSON object per line; both in UTC; redact: no
password from a URL in any log line."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from triggerhook.logs import ContextFormatter, JsonFormatter, configure, json_configured, redact

# RFC 3339 in UTC, with milliseconds.
PREFIX = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "


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
    hooks = sys.excepthook, threading.excepthook
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("pika").setLevel(pika_level)
        sys.excepthook, threading.excepthook = hooks
        logging.captureWarnings(False)


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


# -- UTC, both formats -------------------------------------------------------------------------

NOON_MS = 1796385600123  # 2026-12-04T12:00:00.123Z


def at_noon(rec: logging.LogRecord) -> logging.LogRecord:
    rec.created, rec.msecs = NOON_MS / 1000, NOON_MS % 1000
    return rec


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A local zone 5:30 off UTC: a local time would show 17:30."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_text_times_are_utc_with_milliseconds_and_the_zone() -> None:
    line = ContextFormatter().format(at_noon(record("tick")))
    assert line == "2026-12-04T12:00:00.123Z INFO triggerhook.test: tick", line


@pytest.mark.usefixtures("far_from_utc")
def test_json_line_fields_and_utc_time() -> None:
    line = JsonFormatter().format(at_noon(record("engine %s", "started")))
    assert "\n" not in line
    data = json.loads(line)
    assert data == {
        "time": "2026-12-04T12:00:00.123Z",
        "level": "INFO",
        "logger": "triggerhook.test",
        "message": "engine started",
    }
    parsed = datetime.fromisoformat(str(data["time"]))
    assert parsed.utcoffset() == timedelta(0)
    assert parsed == datetime.fromtimestamp(NOON_MS / 1000, UTC)


class Opaque:
    def __str__(self) -> str:
        return "opaque-thing"


def test_json_context_keys_are_fields_with_their_types() -> None:
    extra = {"task_id": "t-1", "attempt": 3, "ratio": 0.5, "ok": True, "none": None}
    extra |= {"thing": Opaque(), "level": "not-the-level"}
    data = json.loads(
        JsonFormatter().format(record("retrying", level=logging.WARNING, extra=extra))
    )
    assert data["level"] == "WARNING"  # a context key never overwrites a field of the line
    assert data["context_level"] == "not-the-level"
    assert data["task_id"] == "t-1" and data["attempt"] == 3 and data["ratio"] == 0.5
    assert data["ok"] is True and data["none"] is None
    assert data["thing"] == "opaque-thing"  # what JSON cannot hold: as text
    for standard in ("levelname", "lineno", "threadName", "asctime", "msg", "args"):
        assert standard not in data


def test_json_traceback_is_one_string_field_and_the_line_stays_one_line() -> None:
    assert "traceback" not in json.loads(JsonFormatter().format(record("calm")))
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        rec = record("boom\nsecond line", level=logging.ERROR, exc_info=True)
    line = JsonFormatter().format(rec)
    assert len(line.splitlines()) == 1, line
    data = json.loads(line)
    assert data["message"] == "boom\nsecond line"
    assert str(data["traceback"]).startswith("Traceback (most recent call last):")
    assert str(data["traceback"]).endswith("ZeroDivisionError: division by zero")


def test_json_masks_passwords_in_every_string() -> None:
    try:
        raise ConnectionError("cannot reach amqp://guest:in-traceback@h:5672/")
    except ConnectionError:
        rec = record(
            "writing to %s",
            "http://influx:in-args@h:8086",
            level=logging.ERROR,
            extra={"url": "mysql+pymysql://app:in-context@db/th", "obj": Opaque()},
            exc_info=True,
        )
    line = JsonFormatter().format(rec)
    for secret in ("in-traceback", "in-args", "in-context"):
        assert secret not in line, line
    data = json.loads(line)
    assert data["message"] == "writing to http://influx:***@h:8086"
    assert data["url"] == "mysql+pymysql://app:***@db/th"
    assert str(data["traceback"]).endswith("cannot reach amqp://guest:***@h:5672/")


@pytest.mark.usefixtures("restore_logging")
def test_configure_json_with_context(capsys: pytest.CaptureFixture[str]) -> None:
    configure("INFO", {"api_process": 2}, log_format="json")
    assert json_configured()
    logging.getLogger("triggerhook.x").info("serving %s", "amqp://u:s3cret@h/")
    data = json.loads(capsys.readouterr().err)
    assert data["api_process"] == 2
    assert data["message"] == "serving amqp://u:***@h/"
    configure("INFO")
    assert not json_configured()
    assert isinstance(logging.getLogger().handlers[0].formatter, ContextFormatter)


@pytest.mark.usefixtures("restore_logging")
def test_json_logs_uncaught_exceptions_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """A thread's uncaught exception (and the main thread's, through
    sys.excepthook) is a JSON record too, not a bare traceback; a warning too."""
    configure("INFO", log_format="json")
    thread = threading.Thread(target=lambda: 1 / 0, name="th-doomed")
    thread.start()
    thread.join(timeout=10)
    try:
        raise KeyError("main")
    except KeyError:
        sys.excepthook(*sys.exc_info())
    lines = capsys.readouterr().err.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["level"] for r in records] == ["CRITICAL", "CRITICAL"], lines
    assert "th-doomed" in records[0]["message"]
    assert records[0]["traceback"].endswith("ZeroDivisionError: division by zero")
    assert records[1]["traceback"].endswith("KeyError: 'main'")
    warnings.warn("careful", UserWarning, stacklevel=1)
    (warned,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert warned["logger"] == "py.warnings" and "UserWarning: careful" in warned["message"]
    configure("INFO")  # text again: Python's own hooks back
    assert sys.excepthook is sys.__excepthook__
    assert threading.excepthook is threading.__excepthook__
