"""Webhook targets against real RabbitMQ and local receivers on 127.0.0.1
(hence allow_private): the bridge driven directly, events published to the
exchange as the engine publishes them (triggerhook/webhook/bridge.py).

A 2xx is delivered once and signed; 503s are retried, then delivered; a
400 is dead-lettered at once and a 500 after max_attempts, with the
engine's dead-letter headers; a slow receiver fails by the deadline while
another target delivers meanwhile; a trickling answer is cut; an address
not allowed is never called; a message over the limit is dead-lettered
unposted; a consumer stopped with a message unacked leaves it to the next,
and a lost broker connection redelivers what was in flight (at least
once). Then through a real daemon: a task fired reaches its webhook, signed
and counted; a wrong targets file stops it at start (exit 2). Every wait is
on a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pika
import pytest
from support.amqp import AmqpNames, EventConsumer, Received
from support.daemon import daemon_env, run_cli
from support.http import api_daemon
from support.names import unique_name
from support.tcpproxy import proxied
from support.webhook import HostileWebhook, WebhookServer

from triggerhook.amqp.connection import amqp_parameters
from triggerhook.domain.webhooks import WebhookTarget
from triggerhook.webhook.bridge import BridgeConfig, TargetBridge

SECRET = b"whsec_0123456789abcdef"
DEAD_KEY = "wh.dead"
CONNECT_S = 10.0


class Bridges:
    """Target bridges of one test, each started and connected; all stopped
    (and their queues deleted) after it."""

    def __init__(self, amqp_url: str, names: AmqpNames) -> None:
        self._amqp_url = amqp_url
        self.config = BridgeConfig(
            exchange=names.exchange,
            queue_prefix=f"{names.exchange}.wh.",
            dead_letter_routing_key=DEAD_KEY,
            dead_letter_queue=names.dead_letters,
            queue_arguments={},
        )
        self.failures: list[tuple[str, BaseException]] = []
        self._running: list[TargetBridge] = []
        self._queues: set[str] = set()

    def start(self, target: WebhookTarget, amqp_url: str = "") -> TargetBridge:
        bridge = TargetBridge(
            target,
            (SECRET,),
            self.config,
            amqp_parameters(amqp_url or self._amqp_url),
            lambda name, exc: self.failures.append((name, exc)),
            random.Random(33),
        )
        bridge.start()
        self._running.append(bridge)
        self._queues.add(bridge.queue)
        wait_until(bridge.is_connected, CONNECT_S, f"webhook {target.name} connected")
        return bridge

    def stop(self, bridge: TargetBridge, timeout_s: float = 5.0) -> None:
        bridge.stop(timeout_s)
        assert bridge.join(timeout_s + 5.0), "the bridge did not stop"
        self._running.remove(bridge)

    def left_in(self, bridge: TargetBridge) -> int:
        """Messages in the bridge's queue once it is stopped (ready again if unacked)."""
        if bridge in self._running:
            self.stop(bridge)
        with contextlib.closing(pika.BlockingConnection(pika.URLParameters(self._amqp_url))) as c:
            declared = c.channel().queue_declare(queue=bridge.queue, passive=True)
            return int(declared.method.message_count)

    def close(self) -> None:
        for bridge in list(self._running):
            self.stop(bridge, 0.5)
        with contextlib.closing(pika.BlockingConnection(pika.URLParameters(self._amqp_url))) as c:
            channel = c.channel()
            for queue in self._queues:
                channel.queue_delete(queue=queue)


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline_s:
            raise AssertionError(f"not within {timeout_s:.1f}s: {what}")
        time.sleep(0.01)


@pytest.fixture
def bridges(amqp_url: str, amqp_names: AmqpNames) -> Iterator[Bridges]:
    group = Bridges(amqp_url, amqp_names)
    try:
        yield group
    finally:
        group.close()
    assert group.failures == []


@pytest.fixture
def dead_letters(amqp_url: str, amqp_names: AmqpNames) -> Iterator[EventConsumer]:
    names = AmqpNames(exchange=amqp_names.exchange, queue=amqp_names.dead_letters)
    with EventConsumer(amqp_url, names, binding=DEAD_KEY) as consumer:
        yield consumer


@pytest.fixture
def publish(amqp_url: str, amqp_names: AmqpNames) -> Iterator[Callable[[str, str, bytes], None]]:
    """Publish an event as the engine does (persistent, mandatory, confirmed)."""
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.confirm_delivery()

    def send(routing_key: str, message_id: str, body: bytes) -> None:
        properties = pika.BasicProperties(
            message_id=message_id,
            delivery_mode=2,
            content_type="application/json",
            headers={"x-due-ms": 1_700_000_000_000, "x-rev": 1, "tenant": "acme"},
        )
        channel.basic_publish(amqp_names.exchange, routing_key, body, properties, mandatory=True)

    try:
        yield send
    finally:
        connection.close()


def target(name: str, url: str, **fields: object) -> WebhookTarget:
    base = WebhookTarget(
        name,
        url,
        (f"{name}.#",),
        secret_env="UNUSED",
        timeout_s=2.0,
        max_attempts=3,
        backoff_initial_ms=50,
        backoff_max_ms=200,
        allow_private=True,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def dead_letter(consumer: EventConsumer, timeout_s: float) -> Received:
    letters = consumer.collect(1, timeout_s)
    assert letters, f"no dead letter within {timeout_s:.1f}s"
    return letters[0]


def test_a_2xx_is_delivered_once_signed_with_the_events_headers(
    bridges: Bridges, publish: Callable[[str, str, bytes], None]
) -> None:
    with WebhookServer(204) as server:
        bridge = bridges.start(target("ok", server.url()))
        publish("ok.created", "task-1", b'{"a":1}')
        (got,) = server.wait_for(1, 10.0)
        wait_until(lambda: bridge.counters()["delivered"] == 1, 5.0, "counted delivered")
        assert bridges.left_in(bridge) == 0  # acked: nothing back in the queue once stopped
        assert len(server.received) == 1
    assert got.body == b'{"a":1}'
    headers = got.headers
    assert headers["x-message-id"] == "task-1"
    assert headers["x-routing-key"] == "ok.created"
    assert headers["tenant"] == "acme" and headers["x-due-ms"] == "1700000000000"
    assert headers["content-type"] == "application/json"
    signed = headers["x-triggerhook-timestamp"].encode() + b"." + got.body
    expected = "v1=" + hmac.new(SECRET, signed, hashlib.sha256).hexdigest()
    assert headers["x-triggerhook-signature"] == expected
    assert abs(int(headers["x-triggerhook-timestamp"]) - time.time()) < 60


def test_503s_are_retried_then_delivered_and_acked_once(
    bridges: Bridges, publish: Callable[[str, str, bytes], None]
) -> None:
    with WebhookServer(200, script=(503, 503)) as server:
        bridge = bridges.start(target("flaky", server.url()))
        publish("flaky.x", "task-2", b"{}")
        server.wait_for(3, 10.0)
        wait_until(lambda: bridge.counters()["delivered"] == 1, 5.0, "counted delivered")
        assert bridges.left_in(bridge) == 0  # acked once
        assert len(server.received) == 3
    assert {r.headers["x-message-id"] for r in server.received} == {"task-2"}
    assert bridge.counters() == {
        "delivered": 1,
        "retried": 2,
        "dead_lettered": 0,
        "refused_host": 0,
    }


def test_a_400_is_dead_lettered_at_once_with_the_cause(
    bridges: Bridges, publish: Callable[[str, str, bytes], None], dead_letters: EventConsumer
) -> None:
    with WebhookServer(400) as server:
        bridge = bridges.start(target("bad", server.url()))
        publish("bad.req", "task-3", b"{}")
        letter = dead_letter(dead_letters, 10.0)
        assert len(server.received) == 1
        # Acked once the dead letter was confirmed (it is, it was delivered).
        wait_until(lambda: bridge.counters()["dead_lettered"] == 1, 5.0, "counted")
        assert bridges.left_in(bridge) == 0
    assert letter.message_id == "task-3" and letter.body == b"{}"
    assert letter.headers["x-triggerhook-dead-cause"] == "webhook_failed"
    assert "answered 400" in str(letter.headers["x-triggerhook-dead-reason"])
    assert letter.headers["x-triggerhook-attempts"] == 1
    assert letter.headers["x-triggerhook-routing-key"] == "bad.req"
    assert letter.headers["x-triggerhook-webhook"] == "bad"
    assert letter.headers["tenant"] == "acme"  # the event's own headers kept


def test_always_500_is_dead_lettered_after_max_attempts(
    bridges: Bridges, publish: Callable[[str, str, bytes], None], dead_letters: EventConsumer
) -> None:
    with WebhookServer(500) as server:
        bridge = bridges.start(target("down", server.url(), max_attempts=3))
        publish("down.x", "task-4", b"{}")
        letter = dead_letter(dead_letters, 10.0)
        assert len(server.received) == 3
    assert letter.headers["x-triggerhook-attempts"] == 3
    assert "answered 500" in str(letter.headers["x-triggerhook-dead-reason"])
    assert bridge.counters()["dead_lettered"] == 1 and bridge.counters()["retried"] == 2


def test_a_slow_receiver_fails_by_the_deadline_while_another_target_delivers(
    bridges: Bridges, publish: Callable[[str, str, bytes], None], dead_letters: EventConsumer
) -> None:
    with WebhookServer(200, delay_s=30.0) as slow, WebhookServer(204) as fast:
        bridges.start(target("slow", slow.url(), timeout_s=1.0, max_attempts=2, concurrency=1))
        bridges.start(target("fast", fast.url()))
        started_s = time.monotonic()
        for n in range(3):  # more than the slow target's one slot
            publish("slow.x", f"slow-{n}", b"{}")
        slow.wait_for(1, 10.0)
        publish("fast.x", "fast-1", b"{}")
        fast.wait_for(1, 5.0)
        assert time.monotonic() - started_s < 1.0 + 0.5  # not behind the slow one's deadline
        letter = dead_letter(dead_letters, 10.0)
        took_s = time.monotonic() - started_s
    assert "no whole answer within 1 s" in str(letter.headers["x-triggerhook-dead-reason"])
    assert 2.0 <= took_s < 2.0 + 3.0  # two attempts of 1 s and a short back-off


def test_a_trickling_answer_is_cut_at_the_deadline(
    bridges: Bridges, publish: Callable[[str, str, bytes], None], dead_letters: EventConsumer
) -> None:
    with HostileWebhook("trickle", every_s=0.5) as server:
        bridges.start(target("drip", server.url(), timeout_s=1.5, max_attempts=1))
        started_s = time.monotonic()
        publish("drip.x", "task-6", b"{}")
        letter = dead_letter(dead_letters, 10.0)
        took_s = time.monotonic() - started_s
        assert server.sent_bytes >= 2  # it did trickle, each byte in time for a per-read timeout
    assert "no whole answer within 1.5 s" in str(letter.headers["x-triggerhook-dead-reason"])
    assert 1.4 <= took_s < 1.5 + 2.0


@pytest.mark.parametrize("host", ["127.0.0.1", "169.254.169.254"])
def test_an_address_not_allowed_is_never_called(
    bridges: Bridges,
    publish: Callable[[str, str, bytes], None],
    dead_letters: EventConsumer,
    host: str,
) -> None:
    with WebhookServer(204) as server:
        url = server.url().replace("127.0.0.1", host)
        bridge = bridges.start(target("inner", url, allow_private=False))
        publish("inner.x", "task-7", b"{}")
        letter = dead_letter(dead_letters, 10.0)
        assert server.received == []
    reason = str(letter.headers["x-triggerhook-dead-reason"])
    assert f"{host} is a" in reason and "address not allowed" in reason
    assert letter.headers["x-triggerhook-attempts"] == 1
    assert bridge.counters()["refused_host"] == 1


def test_a_message_over_the_limit_is_dead_lettered_not_posted(
    bridges: Bridges, publish: Callable[[str, str, bytes], None], dead_letters: EventConsumer
) -> None:
    bridges.config = replace(bridges.config, max_body_bytes=1024)
    with WebhookServer(204) as server:
        bridges.start(target("big", server.url()))
        publish("big.x", "task-9", b"x" * 5000)
        letter = dead_letter(dead_letters, 10.0)
        assert server.received == []
    assert "body of 5000 bytes is over the limit" in str(
        letter.headers["x-triggerhook-dead-reason"]
    )
    assert len(letter.body) == 1024  # its start (up to 4 KiB), as the command channel keeps


def test_a_consumer_stopped_with_a_message_unacked_leaves_it_to_the_next(
    bridges: Bridges, publish: Callable[[str, str, bytes], None]
) -> None:
    with WebhookServer(200, delay_s=30.0) as hung, WebhookServer(204) as server:
        first = bridges.start(target("again", hung.url(), timeout_s=30.0))
        publish("again.x", "task-8", b"{}")
        hung.wait_for(1, 10.0)  # in flight, unacked
        bridges.stop(first, 0.2)  # as a crash would: nothing settled
        assert first.counters()["delivered"] == 0
        second = bridges.start(target("again", server.url()))
        (got,) = server.wait_for(1, 10.0)
        wait_until(lambda: second.counters()["delivered"] == 1, 5.0, "counted delivered")
    assert got.headers["x-message-id"] == "task-8"


# -- through a real daemon -------------------------------------------------------------------


@pytest.mark.parametrize("api_processes", [1, 0])  # the bridge in the firing process either way
def test_a_task_fired_by_the_daemon_reaches_its_webhook_signed(
    mysql_url: str, amqp_url: str, tmp_path: Path, api_processes: int
) -> None:
    secret = tmp_path / "hook.secret"
    secret.write_bytes(SECRET + b"\n")
    prefix = f"{unique_name()}.wh."
    with WebhookServer(204) as server:
        hooks = tmp_path / "webhooks.toml"
        hooks.write_text(
            f'[[webhook]]\nname = "hook"\nurl = "{server.url()}"\n'
            f'routing_keys = ["fire.hook.#"]\nsecret_file = "{secret}"\nallow_private = true\n'
        )
        settings: dict[str, int | str] = {
            "webhooks_file": str(hooks),
            "webhook_queue_prefix": prefix,
            "api_processes": api_processes,
        }
        try:
            with api_daemon(mysql_url, amqp_url, **settings) as api:
                body = {"id": "fired-1", "delay_ms": 200, "routing_key": "fire.hook.x"}
                answer = httpx.post(f"{api.url}/v1/tasks", json=body, timeout=10.0)
                assert answer.status_code == 201, answer.text
                (got,) = server.wait_for(1, 15.0)
                metrics = httpx.get(f"{api.url}/metrics", timeout=10.0).text
                assert api.daemon.terminate() == 0, api.daemon.tail()
                assert api.daemon.count("Traceback") == 0, api.daemon.tail()
        finally:
            with contextlib.closing(pika.BlockingConnection(pika.URLParameters(amqp_url))) as c:
                c.channel().queue_delete(queue=f"{prefix}hook")
    assert got.headers["x-message-id"] == "fired-1"
    assert got.headers["x-routing-key"] == "fire.hook.x"
    signed = got.headers["x-triggerhook-timestamp"].encode() + b"." + got.body
    expected = "v1=" + hmac.new(SECRET, signed, hashlib.sha256).hexdigest()
    assert got.headers["x-triggerhook-signature"] == expected
    assert 'triggerhook_webhook_delivered_total{triggerhook_instance="api",webhook="hook"}' in (
        metrics
    )


def test_a_wrong_targets_file_stops_the_daemon_at_start(
    mysql_url: str, amqp_url: str, tmp_path: Path
) -> None:
    hooks = tmp_path / "webhooks.toml"
    hooks.write_text(
        '[[webhook]]\nname = "hook"\nurl = "ftp://x/"\nrouting_keys = ["a"]\nsecret_env = "S"\n'
    )
    env = daemon_env(f"{mysql_url}/unused", amqp_url, "unused", "wrong", webhooks_file=str(hooks))
    done = run_cli(["run"], env)
    assert done.returncode == 2, done.stderr
    assert "webhook[0].url: an http:// or https:// URL with a host is required" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_lost_connection_redelivers_what_was_in_flight_after_reconnecting(
    bridges: Bridges, publish: Callable[[str, str, bytes], None], amqp_url: str
) -> None:
    with proxied(amqp_url) as (proxy, through), WebhookServer(204, delay_s=1.0) as server:
        bridge = bridges.start(target("cut", server.url()), through)
        publish("cut.x", "task-10", b"{}")
        server.wait_for(1, 10.0)  # in flight: its answer comes in 1 s
        proxy.cut()  # the broker connection is lost meanwhile: the ack cannot go out
        wait_until(lambda: not bridge.is_connected(), 5.0, "the loss seen")
        proxy.restore()
        wait_until(bridge.is_connected, 15.0, "reconnected")
        requests = server.wait_for(2, 15.0)  # delivered again: at least once
        wait_until(lambda: bridge.counters()["delivered"] >= 2, 5.0, "delivered again")
        assert bridges.left_in(bridge) == 0  # and acked this time
    assert {r.headers["x-message-id"] for r in requests} == {"task-10"}
