"""Command bodies over the limit, and a command whose database refuses writes.

* :class:`triggerhook.amqp.content.BoundedAssembler` (in pika's place on the
  command consumer's channel) keeps only the first bytes of a body whose
  content header declares it over the limit, dropping each later body frame
  as it arrives; pika's own assembler keeps them all and joins them.
* A delivery's log context never parses a body that is cut or large, and an
  applied command's debug line does not parse it again.
* The consumer's worker (``CommandConsumer._process``) retries a command whose
  database is read-only, with back-off, and applies it once writable: no dead
  letter. An unexpected error is dead-lettered after three tries with a reply
  that carries none of the driver's text.

No broker here: the frames are pika's own objects, fed as its channel would;
the consumer is driven without a connection (tests/integration/
test_oversized_commands.py sends a 100 MiB command to a real daemon).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import tracemalloc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pika.channel
import pika.exceptions
import pika.frame
import pika.spec
import pymysql
import pytest
from support.fakes import FakeClock, FakePublisher, FakeStore

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.amqp.consumer import KEPT_OF_OVERSIZED_BYTES, Delivery, Settle
from triggerhook.amqp.content import BoundedAssembler, CutBody, declared_size
from triggerhook.api.commands import CommandConsumer
from triggerhook.app import TriggerHook
from triggerhook.domain.namespaces import ALL
from triggerhook.settings import Settings
from triggerhook.store.mysql import drivers
from triggerhook.wiring import assemble, command_config

LIMIT = 1024 * 1024
FRAME = 131_072 - 8  # a body frame's payload at RabbitMQ's default frame_max
HUGE = 100 * 1024 * 1024
READ_ONLY = (1290, "The MariaDB server is running with the --read-only option so it cannot ...")
ACCESS_DENIED = (1045, "Access denied for user 'app'@'10.1.2.3' (using password: YES)")


def _message(size: int) -> Iterator[Any]:
    """The frames of one delivery with a body of ``size`` bytes: one fragment
    object, sent again and again (so feeding it allocates nothing itself)."""
    deliver = pika.spec.Basic.Deliver("ctag", 1, False, "", "q")
    yield pika.frame.Method(1, deliver)
    yield pika.frame.Header(1, size, pika.spec.BasicProperties(type="create"))
    fragment = b"{" + b"x" * (FRAME - 1)
    left = size
    while left > 0:
        yield pika.frame.Body(1, fragment if left >= FRAME else fragment[:left])
        left -= FRAME


def _assemble(assembler: Any, size: int) -> tuple[bytes, int]:
    """Feed one message; its body and the peak of memory allocated meanwhile."""
    tracemalloc.start()
    try:
        done = [out for frame in _message(size) if (out := assembler.process(frame))]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    [(_method, header, body)] = done
    assert header.body_size == size
    return body, peak


def test_a_body_within_the_limit_is_assembled_whole() -> None:
    assembler = BoundedAssembler(LIMIT, KEPT_OF_OVERSIZED_BYTES)
    for size in (0, 1, FRAME, FRAME + 1, LIMIT):
        body, _ = _assemble(assembler, size)
        assert type(body) is bytes
        assert len(body) == declared_size(body) == size
    assert assembler.cut == 0


def test_a_body_declared_over_the_limit_is_never_held() -> None:
    body, peak = _assemble(BoundedAssembler(LIMIT, KEPT_OF_OVERSIZED_BYTES), HUGE)
    assert isinstance(body, CutBody)
    assert len(body) == KEPT_OF_OVERSIZED_BYTES  # its start, for the dead letter
    assert body == (b"{" + b"x" * FRAME)[:KEPT_OF_OVERSIZED_BYTES]
    assert declared_size(body) == HUGE
    assert peak < 1024 * 1024  # measured: 258 KiB, mostly the test's own 128 KiB frame
    # pika's own assembler, the same frames: every one kept, then joined.
    _, pika_peak = _assemble(pika.channel.ContentFrameAssembler(), HUGE)
    assert pika_peak > HUGE


def test_a_body_longer_than_declared_is_still_an_error() -> None:
    assembler = BoundedAssembler(16, 8)
    frames = _message(32)
    assembler.process(next(frames))
    assembler.process(pika.frame.Header(1, 20, pika.spec.BasicProperties()))
    with pytest.raises(pika.exceptions.BodyTooLongError):
        assembler.process(pika.frame.Body(1, b"y" * 32))


def _delivery(body: bytes, body_size: int | None = None, channel: object = None) -> Delivery:
    return Delivery(
        channel,
        1,
        False,
        "create",
        "m-1",
        "c-1",
        None,
        None,
        None,
        body,
        len(body) if body_size is None else body_size,
        pika.spec.BasicProperties(type="create"),
    )


def test_log_context_parses_only_whole_small_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []
    loads = json.loads

    def counting(text: str | bytes, **kwargs: Any) -> Any:
        parsed.append(len(text))
        return loads(text, **kwargs)

    monkeypatch.setattr(json, "loads", counting)  # what the consumer's json.loads finds
    small = b'{"id": "t-1", "delay_ms": 1000}'
    assert _delivery(small).context()["task_id"] == "t-1"
    assert parsed == [len(small)]
    large = b'{"id": "t-2", "payload": "' + b"x" * (64 * 1024) + b'"}'
    cut = CutBody(large[:KEPT_OF_OVERSIZED_BYTES], HUGE)
    for delivery in (_delivery(large), _delivery(cut, HUGE)):
        assert delivery.context() == {"type": "create", "message_id": "m-1", "task_id": "m-1"}
    assert parsed == [len(small)]  # neither was parsed


# -- the worker: retries and the unexpected -----------------------------------------


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def hook(store: FakeStore) -> Iterator[TriggerHook]:
    settings = Settings(instance_id="unit", max_payload_bytes=64)
    hook = assemble(settings, store, FakeClock(), lambda buffer, sink, retry, fail: FakePublisher())
    yield hook  # never started: its calls write directly
    hook.close()


@pytest.fixture
def commands(hook: TriggerHook) -> CommandConsumer:
    """A consumer never connected: its worker's ``_process`` is called directly."""
    settings = Settings(instance_id="unit", max_payload_bytes=64)
    nodes = amqp_parameters("amqp://guest:guest@127.0.0.1:1/%2F")
    return CommandConsumer(hook, command_config(settings), nodes, lambda _name, _exc: None)


def _current(commands: CommandConsumer) -> Delivery:
    """A create whose channel is the consumer's own, open one (as when taken)."""
    channel = SimpleNamespace(is_open=True)
    commands._broker._channel = channel
    body = json.dumps({"id": "t-1", "delay_ms": 60_000}).encode()
    return _delivery(body, channel=channel)


def _driver_error(code: int, text: str) -> Exception:
    """What the MySQL store raises for a server error ``code`` (translated)."""
    return drivers.load("pymysql").translate(pymysql.err.OperationalError(code, text), "th")


def test_a_read_only_database_is_retried_with_back_off_then_applied(
    commands: CommandConsumer, store: FakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="triggerhook.api.commands")
    store.fail_next("insert", *[_driver_error(*READ_ONLY) for _ in range(4)])
    started = time.monotonic()

    outcome = commands._process(_current(commands), ALL)

    assert outcome.settle is Settle.ACK  # never dead-lettered
    assert outcome.reply is None  # no reply_to
    assert store.ids() == {"t-1"}
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert [m.split(")")[0] for m in retries] == [
        f"command failed (attempt {n}" for n in range(1, 5)
    ]
    assert all("database read-only" in m for m in retries)
    # Equal jitter from 50 ms, doubling: at least 25 + 50 + 100 + 200 ms.
    assert time.monotonic() - started >= 0.375


def test_an_unexpected_error_is_dead_lettered_without_the_drivers_text(
    commands: CommandConsumer, store: FakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="triggerhook.api.commands")
    store.fail_next("insert", *[_driver_error(*ACCESS_DENIED) for _ in range(3)])
    delivery = dataclasses.replace(_current(commands), reply_to="triggerhook.reply.x")

    outcome = commands._process(delivery, ALL)

    assert outcome.settle is Settle.DEAD
    assert outcome.reply is not None
    reply = json.loads(outcome.reply)
    assert reply == {
        "ok": False,
        "error": {"code": "internal_error", "message": "internal error; see the daemon's log"},
    }
    assert outcome.reason == "internal_error: internal error; see the daemon's log"
    assert "Access denied" in caplog.text  # the operator's copy
    assert store.ids() == set()
