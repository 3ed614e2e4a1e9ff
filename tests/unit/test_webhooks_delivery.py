"""One webhook delivery, without a broker: the request a WebhookSink makes
(signed; an address not allowed never called; what an answer means for a
retry; a request sent to the checked address, over http and https) and the
attempts TargetBridge.deliver makes of one message (retried,
dead-lettered with the engine's headers, left unacked on a stop)."""

from __future__ import annotations

import datetime
import logging
import random
import ssl
import threading
from pathlib import Path
from typing import Any, cast

import httpx
import pika
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from support.webhook import WebhookServer

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.amqp.consumer import Delivery, Settle
from triggerhook.domain.webhooks import WebhookTarget
from triggerhook.local import sinks
from triggerhook.local.sinks import Event, Undelivered, WebhookSink
from triggerhook.webhook.bridge import BridgeConfig, TargetBridge, event_of

EVENT = Event("ev-1", "k", {"x-due-ms": 1}, b"body")
SECRET = b"whsec_0123456789abcdef"


def _deliver(sink: WebhookSink) -> Undelivered | None:
    try:
        sink.deliver(EVENT)
    except Undelivered as exc:
        return exc
    finally:
        sink.close()
    return None


def test_a_signed_request_carries_the_timestamp_and_signature() -> None:
    with WebhookServer(204) as server:
        assert (
            _deliver(WebhookSink(server.url(), 5.0, allow_private=True, secrets=(SECRET,))) is None
        )
        (got,) = server.wait_for(1, 5.0)
    assert got.headers["x-triggerhook-timestamp"].isdigit()
    assert got.headers["x-triggerhook-signature"].startswith("v1=")


def test_without_secrets_a_request_is_not_signed() -> None:
    with WebhookServer(204) as server:
        assert _deliver(WebhookSink(server.url(), 5.0, allow_private=True)) is None
        (got,) = server.wait_for(1, 5.0)
    assert "x-triggerhook-signature" not in got.headers


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "169.254.169.254", "[::1]"])
def test_an_address_not_allowed_is_never_called(host: str) -> None:
    with WebhookServer(204) as server:
        url = server.url().replace("127.0.0.1", host)
        failure = _deliver(WebhookSink(url, 5.0, allow_private=False))
        assert server.received == []
    assert isinstance(failure, Undelivered)
    assert failure.host_refused and not failure.retry
    assert "address not allowed" in str(failure)


def test_a_public_only_sink_connects_to_the_checked_address(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A name no resolver knows, resolved (once) by a fake to this machine's
    # address, taken as public here: the request reaches the receiver, so it
    # went to the address checked, with the name in Host. Its URL with the
    # address is in no log line either (the path holds a secret).
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(sinks, "address_refusal", lambda address: None)
    calls: list[str] = []

    async def resolve(host: str, port: int, **_: Any) -> list[Any]:
        calls.append(host)
        return [(2, 1, 6, "", ("127.0.0.1", port))]

    with WebhookServer(204) as server:
        url = f"http://hooks.example.test:{server.port}/s3cret?token=s3cret"
        sink = WebhookSink(url, 5.0, allow_private=False)
        monkeypatch.setattr(sink._loop_now(), "getaddrinfo", resolve)
        assert _deliver(sink) is None
        (got,) = server.wait_for(1, 5.0)
    assert calls == ["hooks.example.test"]
    assert got.headers["host"] == f"hooks.example.test:{server.port}"
    assert "HTTP Request: POST" in caplog.text and "s3cret" not in caplog.text


@pytest.mark.parametrize(
    ("status", "retry"), [(400, False), (404, False), (408, True), (429, True), (503, True)]
)
def test_what_an_answer_means_for_a_retry(status: int, retry: bool) -> None:
    with WebhookServer(status) as server:
        failure = _deliver(WebhookSink(server.url(), 5.0, allow_private=True))
    assert isinstance(failure, Undelivered) and failure.refused
    assert failure.retry is retry


class FakeSink:
    """Fails with ``failures`` in turn, then delivers."""

    def __init__(self, *failures: Undelivered, on_call: threading.Event | None = None) -> None:
        self.failures = list(failures)
        self.calls = 0
        self._on_call = on_call

    def deliver(self, event: Event, deadline_s: float) -> None:
        self.calls += 1
        if self._on_call is not None:
            self._on_call.set()
        if self.failures:
            raise self.failures.pop(0)


def _bridge(max_attempts: int = 3, backoff_ms: int = 1) -> TargetBridge:
    target = WebhookTarget(
        "t",
        "http://h/",
        ("t.#",),
        secret_env="X",
        max_attempts=max_attempts,
        backoff_initial_ms=backoff_ms,
        backoff_max_ms=backoff_ms,
    )
    config = BridgeConfig("ex", "wh.", "dead", "dead", {})
    nodes = amqp_parameters("amqp://guest:guest@127.0.0.1:1/%2F")
    bridge = TargetBridge(target, (), config, nodes, lambda *_: None, random.Random(1))
    # Never connected here: every delivery's channel counts as open.
    setattr(bridge._broker, "is_current", lambda _delivery: True)  # noqa: B010
    return bridge


def _delivery() -> Delivery:
    props = pika.BasicProperties(
        message_id="m-1", content_type="application/json", headers={"a": b"long", "n": 3}
    )
    return Delivery(
        None, 1, False, None, "m-1", None, None, None, props.headers, b"{}", 2, props, "t.x"
    )


def test_an_event_from_a_delivery() -> None:
    event = event_of(_delivery())
    assert event == Event("m-1", "t.x", {"a": "long", "n": 3}, b"{}", "application/json", None)


def test_retried_then_delivered() -> None:
    bridge = _bridge()
    sink = FakeSink(Undelivered("503"), Undelivered("503"))
    outcome = bridge.deliver(cast(WebhookSink, sink), _delivery())
    assert outcome.settle is Settle.ACK and sink.calls == 3
    assert bridge.counters() == {
        "delivered": 1,
        "retried": 2,
        "dead_lettered": 0,
        "refused_host": 0,
    }


def test_dead_after_max_attempts_with_the_engines_headers() -> None:
    bridge = _bridge(max_attempts=2)
    sink = FakeSink(Undelivered("a"), Undelivered("webhook answered 500: ''"))
    outcome = bridge.deliver(cast(WebhookSink, sink), _delivery())
    assert outcome.settle is Settle.DEAD and sink.calls == 2
    assert "webhook answered 500" in outcome.reason and "attempts: 2" in outcome.reason
    assert dict(outcome.headers) == {
        "x-triggerhook-dead-cause": "webhook_failed",
        "x-triggerhook-attempts": 2,
        "x-triggerhook-routing-key": "t.x",
        "x-triggerhook-webhook": "t",
    }


def test_not_retried_when_no_retry_helps() -> None:
    bridge = _bridge()
    sink = FakeSink(Undelivered("address not allowed", retry=False, host_refused=True))
    outcome = bridge.deliver(cast(WebhookSink, sink), _delivery())
    assert outcome.settle is Settle.DEAD and sink.calls == 1
    assert bridge.counters()["refused_host"] == 1


def test_a_delivery_whose_channel_is_gone_is_not_posted() -> None:
    bridge = _bridge()
    setattr(bridge._broker, "is_current", lambda _delivery: False)  # noqa: B010
    sink = FakeSink()
    assert bridge.deliver(cast(WebhookSink, sink), _delivery()).settle is Settle.LEAVE
    assert sink.calls == 0  # delivered again by the broker: not POSTed twice


def test_a_stop_during_the_back_off_leaves_it_unacked() -> None:
    bridge = _bridge(backoff_ms=60_000)
    called = threading.Event()
    sink = FakeSink(Undelivered("503"), on_call=called)
    result: list[Settle] = []
    thread = threading.Thread(
        target=lambda: result.append(bridge.deliver(cast(WebhookSink, sink), _delivery()).settle)
    )
    thread.start()
    assert called.wait(5.0)
    bridge.stop(0.0)
    thread.join(5.0)
    assert result == [Settle.LEAVE] and sink.calls == 1


def _tls_files(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_an_https_request_to_the_checked_address_verifies_the_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As above, over TLS: the connection goes to the address, the handshake
    # names the host (SNI) and the certificate is checked against the name.
    name = "hooks.example.test"
    cert_file, key_file = _tls_files(tmp_path, name)
    monkeypatch.setattr(sinks, "address_refusal", lambda address: None)

    async def resolve(host: str, port: int, **_: Any) -> list[Any]:
        return [(2, 1, 6, "", ("127.0.0.1", port))]

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert_file, key_file)
    seen_names: list[str | None] = []

    def sni(_sock: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        seen_names.append(server_name)

    server_tls.sni_callback = sni
    with WebhookServer(204) as server:
        server.wrap(server_tls)
        sink = WebhookSink(f"https://{name}:{server.port}/x", 5.0, allow_private=False)
        loop = sink._loop_now()
        monkeypatch.setattr(loop, "getaddrinfo", resolve)
        client_tls = ssl.create_default_context(cafile=str(cert_file))
        sink._client = httpx.AsyncClient(verify=client_tls, trust_env=False, timeout=5.0)
        assert _deliver(sink) is None
        (got,) = server.wait_for(1, 5.0)
    assert got.headers["host"] == f"{name}:{server.port}"
    assert seen_names == [name]
