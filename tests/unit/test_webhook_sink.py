"""The webhook sink of ``triggerhook dev`` against misbehaving local servers
(tests/support/webhook.py): one deadline for a whole call, a bounded read of
the answer, a call in flight cut by a stop; the headers it never forwards;
and the URL as logs show it (:func:`triggerhook.logs.url_origin`).

Each call runs on a thread of the test, joined with a deadline: a sink that
hangs fails the test instead of hanging it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
from support.waiting import wait_until
from support.webhook import HostileWebhook, WebhookServer

from triggerhook.local.sinks import ANSWER_PREFIX_BYTES, Event, Undelivered, WebhookSink
from triggerhook.logs import url_origin

EVENT = Event("ev-1", "k", {"x-due-ms": 1, "tenant": "acme"}, b"body")
SLACK_S = 1.5  # a call's end past its deadline, on a busy machine
MAX_READ_BYTES = 8 * 1024 * 1024  # the socket buffers' share of an endless body


class _Call:
    """``fn`` running on a thread of its own."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._raised: list[BaseException] = []
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the test
            self._raised.append(exc)

    def result(self, within_s: float) -> tuple[BaseException | None, float]:
        """What ``fn`` raised and how long it took; AssertionError if it still
        runs after ``within_s``."""
        self._thread.join(within_s)
        assert not self._thread.is_alive(), f"the call still runs after {within_s:.1f}s"
        return (self._raised[0] if self._raised else None), time.monotonic() - self._started


def _call(fn: Callable[[], None], within_s: float) -> tuple[BaseException | None, float]:
    return _Call(fn).result(within_s)


def test_a_webhook_that_trickles_its_answer_is_cut_at_the_deadline() -> None:
    with HostileWebhook("trickle", every_s=0.2) as server:
        sink = WebhookSink(server.url(), 1.0, allow_private=True)
        try:
            error, took_s = _call(lambda: sink.deliver(EVENT), 1.0 + SLACK_S)
        finally:
            sink.close()
        assert server.sent_bytes >= 3  # it did trickle: each read got a byte in time
    assert isinstance(error, Undelivered) and not error.refused
    assert "no whole answer within 1 s" in str(error)
    assert took_s >= 0.9


def test_a_stop_cuts_a_call_in_flight() -> None:
    with HostileWebhook("trickle", every_s=0.2) as server:
        sink = WebhookSink(server.url(), 60.0, allow_private=True)
        try:
            call = _Call(lambda: sink.deliver(EVENT))
            server.wait_for(1, 5.0)  # the call is in flight
            sink.cut(time.monotonic() + 0.2)  # as the engine's thread does, stopping
            error, took_s = call.result(0.2 + SLACK_S)
        finally:
            sink.close()
    assert isinstance(error, Undelivered)
    assert took_s < 0.2 + SLACK_S


@pytest.mark.parametrize("status", [200, 500])
def test_an_endless_answer_is_read_no_further_than_its_start(status: int) -> None:
    with HostileWebhook("endless", status=status) as server:
        sink = WebhookSink(server.url(), 30.0, allow_private=True)
        try:
            error, _ = _call(lambda: sink.deliver(EVENT), 5.0)
        finally:
            sink.close()
        # The sink hung up: the server's next write failed.
        assert wait_until(lambda: server.hung_up == 1, 5.0)
        assert server.sent_bytes < MAX_READ_BYTES
    if status == 200:
        assert error is None  # a 2xx is a delivery, whatever follows
        return
    assert isinstance(error, Undelivered) and error.refused
    text = str(error)
    assert text.startswith("webhook answered 500: 'xxx")
    assert len(text) < ANSWER_PREFIX_BYTES + 100


def test_credentials_and_hop_by_hop_headers_are_not_forwarded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    headers: dict[str, str | int | bool] = {
        "Authorization": "Bearer task-secret",
        "cookie": "session=task-secret",
        "Proxy-Authorization": "Basic task-secret",
        "SET-COOKIE": "a=task-secret",
        "Upgrade": "h2c",
        "Proxy-Authenticate": "Basic",
        "Trailers": "x",
        "tenant": "acme",
    }
    event = Event("ev-2", "k", dict(headers), b"")
    with WebhookServer() as server:
        sink = WebhookSink(server.url(), 5.0, allow_private=True)
        try:
            with caplog.at_level(logging.WARNING):
                error, _ = _call(lambda: sink.deliver(event), 10.0)
        finally:
            sink.close()
        [request] = server.received
    assert error is None
    assert request.headers["tenant"] == "acme"
    sent = set(request.headers)
    never = {"authorization", "cookie", "proxy-authorization", "set-cookie", "upgrade"}
    assert not sent & (never | {"proxy-authenticate", "trailers"}), request.headers
    assert "task-secret" not in " ".join(request.headers.values())
    assert "header 'Authorization' left out of the webhook's request: credentials" in caplog.text
    assert "task-secret" not in caplog.text


def test_a_refused_connection_is_undelivered_and_names_no_secret() -> None:
    url = "http://user:pw-s3cret@127.0.0.1:1/s3cret-path?token=s3cret"
    sink = WebhookSink(url, 5.0, allow_private=True)
    try:
        error, _ = _call(lambda: sink.deliver(EVENT), 10.0)
    finally:
        sink.close()
    assert isinstance(error, Undelivered) and not error.refused
    assert "s3cret" not in str(error)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:9000/events", "http://127.0.0.1:9000/..."),
        ("https://hooks.example.com/T0/B1/s3cret?token=s3cret#x", "https://hooks.example.com/..."),
        ("http://user:s3cret@host:81", "http://host:81"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("http://host?token=s3cret", "http://host/..."),
        ("http://host:port/x", "(a malformed URL)"),
    ],
)
def test_a_url_is_shown_without_its_path_query_or_user(url: str, shown: str) -> None:
    assert url_origin(url) == shown


def test_httpx_debug_lines_show_the_url_redacted(caplog: pytest.LogCaptureFixture) -> None:
    with WebhookServer() as server:
        sink = WebhookSink(server.url("/s3cret-path?token=s3cret"), 5.0, allow_private=True)
        try:
            # Its own level too: logs.configure() (another test's) may have raised it.
            with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, "httpx"):
                error, _ = _call(lambda: sink.deliver(EVENT), 10.0)
        finally:
            sink.close()
    assert error is None
    assert "HTTP Request: POST" in caplog.text  # httpx's own line is there...
    assert "s3cret" not in caplog.text  # ...without the secret
