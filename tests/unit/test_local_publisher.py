"""The local publisher of ``triggerhook dev`` (triggerhook/local/): stdout's
JSON lines, the webhook's requests (a real local HTTP server), and what
becomes of an event not delivered, with fakes for the confirmer and the
retry handler and the engine's real send buffer. Each sink on its own: one
that hangs holds up neither the others nor a stop, and a retry goes only to
the sinks that did not take the event.

Also: the headers every sink takes from :func:`event_headers` are the ones
the AMQP frames carry (decoded by pika), for an event and a dead letter.
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pika.frame
import pytest
from support.daemon import closed_port
from support.fakes import FakeClock
from support.webhook import WebhookServer

from triggerhook.amqp.frames import dead_letter_headers as amqp_dead_letter_headers
from triggerhook.amqp.frames import encode_event
from triggerhook.domain.delivery import DeliveryPolicy
from triggerhook.domain.event import dead_letter_headers, event_headers
from triggerhook.domain.meta import FIRE, LateKind, LatePolicy, make_meta
from triggerhook.domain.recurrence import Recurrence
from triggerhook.domain.task import Task
from triggerhook.engine.sendbuffer import SendBuffer
from triggerhook.local.publisher import LocalConfig, LocalPublisher
from triggerhook.local.sinks import Event, EventSink, StdoutSink, Undelivered, WebhookSink

NOW = 1_700_000_000_000
FIRED = NOW + 5  # the clock when the publisher sends
DEAD_KEY = "triggerhook.dead"
POLICY = DeliveryPolicy(max_attempts=3, max_age_ms=0, retry_max_ms=1000)
WAIT_S = 10.0

META = make_meta(
    content_type="application/json",
    content_encoding="identity",
    headers={"tenant": "é-42", "count": 2**40, "urgent": True},
    recur=Recurrence(every_ms=60_000, occurrence=3),
)
TASK = Task("invoice-42", NOW, "billing.charge", b'{"invoice": 42}', rev=7, meta=META)


@dataclass
class Rig:
    """A publisher over a real send buffer; what it confirmed and retried."""

    buffer: SendBuffer = field(default_factory=lambda: SendBuffer(100))
    confirmed: list[Task] = field(default_factory=list)
    retried: list[tuple[Task, int]] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def confirmed_now(self, tasks: Sequence[Task]) -> None:
        with self._cond:
            self.confirmed.extend(tasks)
            self._cond.notify_all()

    def retry(self, task: Task, delay_ms: int) -> None:
        with self._cond:
            self.retried.append((task, delay_ms))
            self._cond.notify_all()

    def wait(self, predicate: Callable[[], object]) -> None:
        with self._cond:
            assert self._cond.wait_for(predicate, WAIT_S), (self.confirmed, self.retried)

    def fail(self, _name: str, exc: BaseException) -> None:
        self.failures.append(exc)

    def publisher(
        self, sinks: Sequence[EventSink], late_policy: LatePolicy = FIRE, capacity: int = 100
    ) -> LocalPublisher:
        config = LocalConfig(POLICY, DEAD_KEY, late_policy, capacity)
        rig = self

        class Confirms:
            def confirmed(self, tasks: Sequence[Task]) -> None:
                rig.confirmed_now(tasks)

        publisher = LocalPublisher(
            self.buffer, Confirms(), self.retry, self.fail, sinks, config, FakeClock(FIRED)
        )
        self.buffer.on_put = publisher.wake
        return publisher

    def run(self, sinks: Sequence[EventSink], *tasks: Task, **kwargs: Any) -> LocalPublisher:
        """Publish ``tasks`` and everything that follows from them, then stop."""
        publisher = self.publisher(sinks, **kwargs)
        self.buffer.put_many(tasks)
        publisher.start()
        publisher.finish(time.monotonic() + WAIT_S)
        assert publisher.join(WAIT_S)
        assert self.failures == []
        return publisher


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


# -- stdout -----------------------------------------------------------------------


def test_each_event_is_one_json_line_with_the_engines_and_the_tasks_fields() -> None:
    out = io.StringIO()
    rig = Rig()
    publisher = rig.run([StdoutSink(out)], TASK)
    assert _lines(out) == [
        {
            "id": "invoice-42",
            "routing_key": "billing.charge",
            "due_ms": NOW,
            "fired_ms": FIRED,
            "rev": 7,
            "occurrence": 3,
            "content_type": "application/json",
            "content_encoding": "identity",
            "headers": {"count": 2**40, "tenant": "é-42", "urgent": True},
            "payload": '{"invoice": 42}',
        }
    ]
    assert rig.confirmed == [TASK] and rig.retried == []
    assert publisher.counters() == {
        "published": 1,
        "confirmed": 1,
        "returned": 0,
        "nacked": 0,
        "dead_lettered": 0,
        "late_skipped": 0,
        "broker_reconnects": 0,
    }
    assert publisher.take_lateness() == [5] and publisher.take_lateness() == []
    assert publisher.unconfirmed() == 0 and publisher.is_connected()


def test_a_binary_payload_is_base64_and_a_one_off_has_no_occurrence() -> None:
    out = io.StringIO()
    Rig().run([StdoutSink(out)], Task("bin", NOW, "k", b"\0\xff", rev=1))
    [line] = _lines(out)
    assert line["payload"] == {"base64": "AP8="}
    assert "occurrence" not in line and "headers" not in line and "content_type" not in line


def test_a_closed_stdout_is_a_failed_delivery_retried_later() -> None:
    out = io.StringIO()
    out.close()
    rig = Rig()
    publisher = rig.run([StdoutSink(out)], TASK)
    assert rig.confirmed == []
    assert rig.retried == [(TASK, 100)]
    assert publisher.counters()["nacked"] == 1


# -- the webhook ------------------------------------------------------------------


def test_the_webhook_gets_the_payload_and_the_events_headers(webhook: WebhookServer) -> None:
    out = io.StringIO()
    rig = Rig()
    rig.run([WebhookSink(webhook.url(), 5.0, allow_private=True), StdoutSink(out)], TASK)
    [request] = webhook.received
    assert request.path == "/hook"
    assert request.body == b'{"invoice": 42}'
    headers = request.headers
    assert {name: headers.get(name) for name in EXPECTED_HEADERS} == EXPECTED_HEADERS
    assert rig.confirmed == [TASK]
    assert len(_lines(out)) == 1  # delivered to both


EXPECTED_HEADERS = {
    "x-message-id": "invoice-42",
    "x-routing-key": "billing.charge",
    "x-due-ms": str(NOW),
    "x-fired-ms": str(FIRED),
    "x-rev": "7",
    "x-occurrence": "3",
    "content-type": "application/json",
    "content-encoding": "identity",
    "tenant": "é-42",
    "count": str(2**40),
    "urgent": "true",
}


def test_a_non_2xx_answer_is_retried_after_the_policys_back_off(webhook: WebhookServer) -> None:
    webhook.status = 503
    out = io.StringIO()
    rig = Rig()
    failed_before = TASK.replace(attempts=1)
    publisher = rig.run(
        [WebhookSink(webhook.url(), 5.0, allow_private=True), StdoutSink(out)], failed_before
    )
    assert len(webhook.received) == 1
    assert rig.retried == [(failed_before, 200)]  # the second failure: 200 ms
    assert rig.confirmed == []
    assert len(_lines(out)) == 1  # stdout took it: it does not wait for the webhook
    counters = publisher.counters()
    assert (counters["published"], counters["returned"], counters["confirmed"]) == (1, 1, 0)


def test_a_webhook_not_listening_is_retried_too() -> None:
    rig = Rig()
    publisher = rig.run(
        [WebhookSink(f"http://127.0.0.1:{closed_port()}/x", 5.0, allow_private=True)], TASK
    )
    assert rig.retried == [(TASK, 100)] and rig.confirmed == []
    assert publisher.counters()["nacked"] == 1


def test_the_last_failure_sends_a_dead_letter_at_once(webhook: WebhookServer) -> None:
    """Failing its last attempt, the event goes out again as a dead letter;
    the webhook refuses that too: it waits the longest back-off (never dropped)."""
    webhook.status = 500
    rig = Rig()
    last_try = TASK.replace(attempts=2)
    publisher = rig.run([WebhookSink(webhook.url(), 5.0, allow_private=True)], last_try)
    event, dead = webhook.wait_for(2, WAIT_S)
    assert event.headers["x-routing-key"] == "billing.charge"
    assert dead.headers["x-routing-key"] == DEAD_KEY
    assert dead.headers["x-triggerhook-dead-cause"] == "undeliverable"
    assert "not delivered after 3 attempts" in dead.headers["x-triggerhook-dead-reason"]
    assert dead.headers["x-triggerhook-attempts"] == "3"
    assert dead.headers["x-triggerhook-routing-key"] == "billing.charge"
    assert dead.body == TASK.payload
    [(retried, delay_ms)] = rig.retried
    assert (retried.id, retried.attempts, delay_ms) == (TASK.id, 3, POLICY.retry_max_ms)
    assert publisher.counters()["dead_lettered"] == 0


def test_an_exhausted_task_goes_out_as_a_dead_letter_and_is_confirmed() -> None:
    out = io.StringIO()
    rig = Rig()
    exhausted = TASK.replace(attempts=3)
    publisher = rig.run([StdoutSink(out)], exhausted)
    [line] = _lines(out)
    assert line["routing_key"] == DEAD_KEY
    assert line["headers"]["x-triggerhook-dead-cause"] == "undeliverable"
    assert line["headers"]["x-triggerhook-routing-key"] == "billing.charge"
    assert rig.confirmed == [exhausted]
    assert publisher.counters()["dead_lettered"] == 1
    assert publisher.take_lateness() == []  # a dead letter is not a fire


def test_a_task_too_late_by_its_policy_is_a_dead_letter_not_an_event() -> None:
    out = io.StringIO()
    rig = Rig()
    publisher = rig.run([StdoutSink(out)], TASK, late_policy=LatePolicy(LateKind.SKIP_AFTER, 1))
    [line] = _lines(out)
    assert line["routing_key"] == DEAD_KEY
    assert line["headers"]["x-triggerhook-dead-cause"] == "late"
    assert publisher.counters()["late_skipped"] == 1
    assert rig.confirmed == [TASK]


def test_headers_http_cannot_carry_are_left_out_and_the_event_still_goes(
    webhook: WebhookServer,
) -> None:
    meta = make_meta(headers={"a:b": "1", "content-length": "9", "note": "two\nlines", "ok": " v "})
    task = Task("odd", NOW, "k", b"body", rev=1, meta=meta)
    rig = Rig()
    rig.run([WebhookSink(webhook.url(), 5.0, allow_private=True)], task)
    [request] = webhook.received
    assert request.body == b"body"
    assert request.headers["ok"] == "v"
    assert not {"a:b", "note"} & set(request.headers)
    assert request.headers["content-length"] == "4"
    assert rig.confirmed == [task]


# -- the thread -------------------------------------------------------------------


def test_a_running_publisher_sends_what_is_put_later_and_honours_the_lease_check() -> None:
    out = io.StringIO()
    rig = Rig()
    rig.buffer.gate = lambda tasks: [t for t in tasks if t.id != "not-ours"]
    publisher = rig.publisher([StdoutSink(out)])
    publisher.start()
    try:
        rig.buffer.put_many([Task("not-ours", NOW, "k", rev=1), Task("ours", NOW, "k", rev=2)])
        with rig._cond:
            assert rig._cond.wait_for(lambda: rig.confirmed, WAIT_S)
    finally:
        publisher.finish(time.monotonic() + WAIT_S)
        assert publisher.join(WAIT_S)
    assert [t.id for t in rig.confirmed] == ["ours"]
    assert [line["id"] for line in _lines(out)] == ["ours"]
    assert len(rig.buffer) == 0


def test_a_stop_past_its_deadline_leaves_the_rest_in_the_buffer() -> None:
    out = io.StringIO()
    rig = Rig()
    publisher = rig.publisher([StdoutSink(out)])
    rig.buffer.put_many([Task(f"t{i}", NOW, "k", rev=i + 1) for i in range(5)])
    publisher.finish(time.monotonic())  # before it starts: nothing may go
    publisher.start()
    assert publisher.join(WAIT_S)
    assert len(rig.buffer) == 5 and out.getvalue() == ""


# -- one header set for every sink --------------------------------------------------


def _amqp_headers(frames: bytes) -> dict[str, Any]:
    """The headers of the content header frame among ``frames``, as pika decodes them."""
    offset = 0
    while offset < len(frames):
        consumed, frame = pika.frame.decode_frame(frames[offset:])
        offset += consumed
        if isinstance(frame, pika.frame.Header):
            return dict(frame.properties.headers)
    raise AssertionError("no content header frame")


def test_the_event_headers_are_those_of_the_amqp_frames() -> None:
    ours = event_headers(TASK, FIRED)
    frames = encode_event(1, "ex", "rk", b"{}", TASK.id, NOW, FIRED, 7, 4096, meta=META)
    assert ours == _amqp_headers(frames)
    assert list(ours) == list(_amqp_headers(frames))  # in the same order too


def test_a_dead_letters_headers_are_those_of_the_amqp_frames() -> None:
    args = ("undeliverable", "returned 312 NO_ROUTE; é", 4, "billing.charge")
    ours = event_headers(TASK, FIRED, dead_letter_headers(*args))
    extra = amqp_dead_letter_headers(args[1], args[2], args[3], args[0])
    frames = encode_event(1, "ex", DEAD_KEY, b"", TASK.id, NOW, FIRED, 7, 4096, extra, META)
    assert ours == _amqp_headers(frames)


# -- each sink on its own ------------------------------------------------------------


class HeldSink:
    """A webhook that hangs: it takes an event only once released (or fails
    then, ``fail``), and gives up when its deadline or a cut comes first."""

    name = "webhook"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[Event] = []
        self._released = False
        self._cut_s = float("inf")
        self._cond = threading.Condition()

    def deliver(self, event: Event, deadline_s: float) -> None:
        with self._cond:
            self.calls.append(event)
            self._cond.notify_all()
            while not self._released:
                left_s = min(deadline_s, self._cut_s) - time.monotonic()
                if left_s <= 0:
                    raise Undelivered("webhook: cut")
                self._cond.wait(None if left_s == float("inf") else left_s)
        if self.fail:
            raise Undelivered("webhook answered 500", refused=True)

    def cut(self, deadline_s: float) -> None:
        with self._cond:
            self._cut_s = min(self._cut_s, deadline_s)
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def wait_calls(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.calls) >= count, WAIT_S), self.calls

    def close(self) -> None:
        pass


def _tasks(count: int) -> list[Task]:
    return [Task(f"t{i}", NOW, "k", rev=i + 1) for i in range(count)]


def _wait_lines(out: io.StringIO, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    pause = threading.Event()
    while len(out.getvalue().splitlines()) < count:
        assert time.monotonic() < deadline, out.getvalue()
        pause.wait(0.01)


def test_a_webhook_that_hangs_holds_up_neither_stdout_nor_the_events_after_it() -> None:
    out = io.StringIO()
    held = HeldSink()
    rig = Rig()
    publisher = rig.publisher([held, StdoutSink(out)])
    publisher.start()
    try:
        rig.buffer.put_many(_tasks(3))
        _wait_lines(out, 3)  # all printed while the webhook holds the first
        assert [event.message_id for event in held.calls] == ["t0"]
        assert rig.confirmed == [] and publisher.unconfirmed() == 3
        held.release()  # the webhook answers: each is delivered everywhere
        rig.wait(lambda: len(rig.confirmed) == 3)
    finally:
        publisher.finish(time.monotonic() + WAIT_S)
        assert publisher.join(WAIT_S)
    assert [line["id"] for line in _lines(out)] == ["t0", "t1", "t2"]
    assert [task.id for task in rig.confirmed] == ["t0", "t1", "t2"]


def test_a_retry_goes_only_to_the_sinks_that_did_not_take_the_event(
    webhook: WebhookServer,
) -> None:
    webhook.status = 503
    out = io.StringIO()
    rig = Rig()
    publisher = rig.publisher(
        [StdoutSink(out), WebhookSink(webhook.url(), 5.0, allow_private=True)]
    )
    publisher.start()
    try:
        rig.buffer.put_many([TASK])
        rig.wait(lambda: rig.retried)
        webhook.status = 204
        again = TASK.replace(attempts=1, rev=8)  # as the store gives it back
        rig.buffer.put_many([again])
        rig.wait(lambda: rig.confirmed)
    finally:
        publisher.finish(time.monotonic() + WAIT_S)
        assert publisher.join(WAIT_S)
    assert [line["rev"] for line in _lines(out)] == [7]  # printed once, at the first try
    assert [request.headers["x-rev"] for request in webhook.received] == ["7", "8"]
    assert rig.confirmed == [again]


def test_the_dead_letter_goes_only_to_the_sinks_that_did_not_take_the_event(
    webhook: WebhookServer,
) -> None:
    webhook.status = 500
    out = io.StringIO()
    rig = Rig()
    last_try = TASK.replace(attempts=2)
    rig.run([StdoutSink(out), WebhookSink(webhook.url(), 5.0, allow_private=True)], last_try)
    _, dead = webhook.wait_for(2, WAIT_S)
    assert dead.headers["x-routing-key"] == DEAD_KEY
    assert [line["routing_key"] for line in _lines(out)] == ["billing.charge"]  # the event only
    [(retried, delay_ms)] = rig.retried  # the dead letter, refused too
    assert (retried.attempts, delay_ms) == (3, POLICY.retry_max_ms)


def test_a_stop_cuts_a_sink_call_in_flight_and_puts_its_task_back() -> None:
    out = io.StringIO()
    held = HeldSink()
    rig = Rig()
    publisher = rig.publisher([held, StdoutSink(out)])
    publisher.start()
    rig.buffer.put_many(_tasks(1))
    held.wait_calls(1)
    started = time.monotonic()
    publisher.finish(started + 0.3)
    assert publisher.join(WAIT_S)
    assert time.monotonic() - started < 0.3 + 1.0
    assert len(rig.buffer) == 1  # unpublished: its row fires again
    assert rig.confirmed == [] and rig.retried == []  # not counted as a failed try
    assert len(_lines(out)) == 1


def test_a_sink_with_its_capacity_waiting_fails_further_events_at_once() -> None:
    held = HeldSink()
    rig = Rig()
    publisher = rig.publisher([held], capacity=1)
    publisher.start()
    try:
        rig.buffer.put_many(_tasks(1))
        held.wait_calls(1)  # t0 in flight
        rig.buffer.put_many(_tasks(3)[1:])  # t1 waits, t2 finds no room
        rig.wait(lambda: rig.retried)
        held.release()
        rig.wait(lambda: len(rig.confirmed) == 2)
    finally:
        publisher.finish(time.monotonic() + WAIT_S)
        assert publisher.join(WAIT_S)
    assert [(task.id, delay_ms) for task, delay_ms in rig.retried] == [("t2", 100)]
    assert publisher.counters()["nacked"] == 1
