"""Undeliverable events against real MariaDB and RabbitMQ: retried with a
back-off while unarmed (cancellable, holding no room in memory), then
dead-lettered with headers saying why; the row is deleted only once the dead
letter is confirmed, and never while nothing can take it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
from support.amqp import AmqpNames, EventConsumer
from support.daemon import DaemonGroup, daemon_env
from support.hook import HookFactory, RowReader, publisher_of
from support.mysql import connect, old_schema
from support.waiting import now_ms, wait_until

from triggerhook import CancelResult
from triggerhook.domain.arming import shard_of
from triggerhook.domain.spec import TaskSpec
from triggerhook.errors import SchemaError
from triggerhook.store.mysql import MySQLStore, init_schema
from triggerhook.store.mysql.sql import SCHEMA_VERSION


@dataclass(frozen=True)
class Message:
    message_id: str
    routing_key: str
    body: bytes
    headers: dict[str, Any]


class Queues:
    """The test's own queues on the test exchange, read with basic_get."""

    def __init__(self, amqp_url: str, exchange: str) -> None:
        self._connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        self._channel = self._connection.channel()
        self._exchange = exchange
        self._declared: list[str] = []
        self._channel.exchange_declare(exchange=exchange, exchange_type="topic", durable=True)

    def bind(self, queue: str, pattern: str, arguments: dict[str, Any] | None = None) -> None:
        self._channel.queue_declare(queue=queue, durable=True, arguments=arguments)
        self._declared.append(queue)
        self._channel.queue_bind(queue=queue, exchange=self._exchange, routing_key=pattern)

    def get_all(self, queue: str) -> list[Message]:
        out: list[Message] = []
        while True:
            method, properties, body = self._channel.basic_get(queue=queue, auto_ack=True)
            if method is None:
                return out
            headers = dict(properties.headers or {})
            out.append(Message(properties.message_id, method.routing_key, bytes(body), headers))

    def wait_for(self, queue: str, message_id: str, timeout_s: float) -> list[Message]:
        """Messages taken from ``queue`` until one with ``message_id`` (or the deadline)."""
        got: list[Message] = []

        def arrived() -> bool:
            got.extend(self.get_all(queue))
            return any(m.message_id == message_id for m in got)

        wait_until(arrived, timeout_s)
        return got

    def delete(self, queue: str) -> None:
        self._channel.queue_delete(queue=queue)
        self._declared.remove(queue)

    def close(self) -> None:
        try:
            for queue in self._declared:
                with contextlib.suppress(pika.exceptions.AMQPError):
                    self._channel.queue_delete(queue=queue)
        finally:
            with contextlib.suppress(pika.exceptions.AMQPError):
                self._connection.close()


@pytest.fixture
def queues(amqp_url: str, amqp_names: AmqpNames) -> Iterator[Queues]:
    q = Queues(amqp_url, amqp_names.exchange)
    try:
        yield q
    finally:
        q.close()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_unroutable_events_do_not_stop_routable_ones_and_can_be_cancelled(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    """Defect: returned events were retried in memory, armed, for ever; with
    the memory bound at 5, five of them kept a routable task from being armed."""
    queues.bind(amqp_names.queue, "bound.#")
    hook = hooks(max_tasks_in_memory=5, publish_retry_max_ms=300, publish_max_attempts=1000)
    for n in range(5):
        hook.schedule(TaskSpec(f"lost-{n}", delay_ms=0, routing_key="nobody.home"))
    publisher = publisher_of(hook)
    assert wait_until(lambda: publisher.returned >= 5, 10), publisher.returned

    hook.schedule(TaskSpec("found", delay_ms=1000, routing_key="bound.y"))

    assert [m.message_id for m in queues.wait_for(amqp_names.queue, "found", 15)] == ["found"]
    assert wait_until(lambda: rows.row("found") is None, 10)
    # A task waiting for its next try is not armed: cancel takes it (while
    # its event is in flight the answer is too late, so ask until it is not).
    outcomes: list[CancelResult] = []

    def cancelled_or_decided() -> bool:
        outcomes.append(hook.cancel("lost-0"))
        return outcomes[-1] is not CancelResult.TOO_LATE

    assert wait_until(cancelled_or_decided, 10), outcomes
    assert outcomes[-1] is CancelResult.CANCELLED
    assert rows.row("lost-0") is None
    # The others stay stored, with their failed attempts counted.
    assert wait_until(lambda: all((r.attempts >= 2) for r in rows.rows().values()), 10)
    assert set(rows.rows()) == {f"lost-{n}" for n in range(1, 5)}


def test_a_nacked_event_reopens_the_channel_and_is_retried_until_taken(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    """A queue that refuses every message (full, reject-publish) makes the
    broker nack each event routed to it, though another queue took it. The
    publisher retries the event and reopens its channel (a channel can keep
    nacking after a quorum queue's leader died: amqp/publisher.py), on the
    same connection. Once the refusing queue is gone the event is taken."""
    queues.bind(amqp_names.queue, "both.#")
    full = f"{amqp_names.queue}_full"
    queues.bind(full, "both.#", {"x-max-length": 0, "x-overflow": "reject-publish"})
    hook = hooks(publish_retry_max_ms=200, publish_max_attempts=1000)
    publisher = publisher_of(hook)
    hook.schedule(TaskSpec("refused", delay_ms=0, routing_key="both.x"))

    assert wait_until(lambda: publisher.nacked >= 3 and publisher.channel_reopens >= 1, 15), (
        publisher.nacked,
        publisher.channel_reopens,
    )
    assert publisher.reconnects == 0  # the channel was reopened, not the connection
    row = rows.row("refused")
    assert row is not None and row.attempts >= 1  # retried, never dropped
    queues.delete(full)

    assert wait_until(lambda: rows.row("refused") is None, 15)
    copies = queues.get_all(amqp_names.queue)  # one per publish (each nacked one too)
    assert {m.message_id for m in copies} == {"refused"}
    assert len(copies) == publisher.nacked + 1


def test_after_its_attempts_an_event_is_dead_lettered_with_why_then_deleted(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    dead_queue = amqp_names.dead_letters  # declared and bound by the engine
    hook = hooks(publish_retry_max_ms=200, publish_max_attempts=3)
    due_ms = now_ms()
    hook.schedule(TaskSpec("lost", at_ms=due_ms, routing_key="nobody.home", payload=b"keep me"))
    hook.schedule(TaskSpec("later", at_ms=due_ms + 60_000, routing_key="nobody.home"))

    [dead] = queues.wait_for(dead_queue, "lost", 20)

    assert (dead.routing_key, dead.body) == ("triggerhook.dead", b"keep me")
    assert dead.headers["x-due-ms"] == due_ms
    assert dead.headers["x-fired-ms"] >= due_ms
    assert dead.headers["x-triggerhook-attempts"] == 3
    assert _text(dead.headers["x-triggerhook-routing-key"]) == "nobody.home"
    reason = _text(dead.headers["x-triggerhook-dead-reason"])
    assert "312 NO_ROUTE" in reason and "3 attempts" in reason, reason
    assert wait_until(lambda: rows.row("lost") is None, 10), rows.row("lost")
    publisher = publisher_of(hook)
    assert (publisher.returned, publisher.dead_lettered) == (3, 1)
    assert hook.engine.counters()["publish_retries"] == 2
    assert set(rows.rows()) == {"later"}  # others untouched


def test_an_event_past_its_age_limit_is_dead_lettered_at_its_first_failure(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    hook = hooks(publish_max_attempts=1000, publish_max_age_ms=1)
    hook.schedule(TaskSpec("old", at_ms=now_ms() - 5000, routing_key="nobody.home"))

    [dead] = queues.wait_for(amqp_names.dead_letters, "old", 15)

    assert "after its due time" in _text(dead.headers["x-triggerhook-dead-reason"])
    assert dead.headers["x-triggerhook-attempts"] == 1
    assert wait_until(lambda: rows.row("old") is None, 10)


def test_a_dead_letter_nobody_takes_keeps_its_row_until_a_queue_is_bound(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    late_queue = f"{amqp_names.queue}_dead"
    hook = hooks(publish_retry_max_ms=200, publish_max_attempts=2, dead_letter_queue="")
    hook.schedule(TaskSpec("stuck", delay_ms=0, routing_key="nobody.home", payload=b"p"))
    publisher = publisher_of(hook)

    # Its dead letter is returned too (nothing bound to the dead-letter key)...
    assert wait_until(lambda: publisher.returned >= 4, 20), publisher.returned
    row = rows.row("stuck")
    assert row is not None and row.attempts >= 3  # ...and the row stays.
    assert publisher.dead_lettered == 0

    queues.bind(late_queue, "triggerhook.dead")

    [dead] = queues.wait_for(late_queue, "stuck", 20)
    assert dead.body == b"p"
    assert wait_until(lambda: rows.row("stuck") is None, 10)


def test_stop_with_an_undeliverable_event_keeps_its_row_for_later(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    late_queue = f"{amqp_names.queue}_late"
    # A lease longer than the test: the next engine takes over only because
    # the stop released the shards.
    hook = hooks(publish_retry_max_ms=300, shard_lease_ms=60_000)
    publisher = publisher_of(hook)
    hook.schedule(TaskSpec("stuck", delay_ms=0, routing_key="unbound.x", payload="p"))
    assert wait_until(lambda: publisher.returned >= 1, 10)

    clean = hook.stop(timeout_s=2)

    row = rows.row("stuck")
    assert row is not None  # never lost
    # Its shard released, the name given up: the next engine takes it at once.
    assert rows.owners()[row.shard] is None and rows.members() == set()
    assert clean is (row.firing == 0)  # an armed row left behind is not a clean stop
    queues.bind(late_queue, "unbound.#")
    hooks(instance_id="next")  # another engine takes the row over and delivers it
    assert [m.body for m in queues.wait_for(late_queue, "stuck", 15)] == [b"p"]
    assert wait_until(lambda: rows.count() == 0, 10), rows.rows()


def test_an_event_delivered_on_a_later_try_is_deleted_and_not_sent_again(
    hooks: HookFactory, rows: RowReader, queues: Queues, amqp_names: AmqpNames
) -> None:
    late_queue = f"{amqp_names.queue}_late"
    hook = hooks(publish_retry_max_ms=300, publish_max_attempts=1000)
    publisher = publisher_of(hook)
    hook.schedule(TaskSpec("lost", delay_ms=0, routing_key="unbound.x", payload=b"keep me"))
    assert wait_until(lambda: publisher.returned >= 3, 15), publisher.returned

    queues.bind(late_queue, "unbound.#")

    [found] = queues.wait_for(late_queue, "lost", 15)
    assert (found.routing_key, found.body) == ("unbound.x", b"keep me")
    assert wait_until(lambda: rows.count() == 0, 10), rows.rows()
    returned = publisher.returned
    # Sentinel: any further retry of "lost" would have arrived before this one.
    hook.schedule(TaskSpec("after", delay_ms=500, routing_key="unbound.after"))
    assert [m.message_id for m in queues.wait_for(late_queue, "after", 15)] == ["after"]
    assert publisher.returned == returned
    assert publisher.dead_lettered == 0


# -- the schema upgrade that carries the attempts ------------------------------------------

_V1_TABLE = old_schema(1)[0]  # th_tasks as release 1 made it


def test_a_version_1_database_is_upgraded_with_nothing_lost(
    database_url: str, rows: RowReader
) -> None:
    rows.execute("DROP TABLE th_task_tags, th_tasks")  # a version 1 database has neither
    rows.execute(_V1_TABLE)
    rows.execute("UPDATE th_meta SET value = '1' WHERE name = 'schema_version'")
    rows.execute("INSERT INTO th_tasks (id, due_ms, payload, rev) VALUES ('old', 42, 'x', 7)")
    store = MySQLStore(database_url, "rk")
    try:
        with pytest.raises(SchemaError, match=f"schema version 1, expected {SCHEMA_VERSION}"):
            store.check_schema()
    finally:
        store.close()

    # 1 -> 2 (attempts) -> 3 (shards; see tests/integration/test_upgrade_v3.py) -> 4 (metadata).
    assert init_schema(database_url) == SCHEMA_VERSION
    assert init_schema(database_url) == SCHEMA_VERSION  # idempotent

    row = rows.row("old")
    assert row is not None and (row.due_ms, row.payload, row.attempts) == (42, b"x", 0)
    assert (row.shard, row.fire_ms, row.firing) == (shard_of("old", 64), 42, 0)
    conn = connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT rev FROM th_tasks WHERE id = 'old'")
            assert cur.fetchone() == (7,)
    finally:
        conn.close()


# -- the daemon ------------------------------------------------------------------------------


def test_daemon_keeps_firing_past_unroutable_tasks_and_they_can_be_cancelled(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    """The defect as reported, against ``triggerhook run``: memory bound 5, five
    tasks on a routing key nobody is bound to, then a routable task due in 1 s."""
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        "unroutable",
        max_tasks_in_memory=5,
        publish_max_attempts=1000,
        publish_retry_max_ms=300,
    )
    url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
    with EventConsumer(amqp_url, amqp_names, binding="bound.#") as events:
        daemon = daemons.start(env, "unroutable", "--init-db")
        daemon.wait_ready()
        with httpx.Client(base_url=url, timeout=30) as http:
            for n in range(5):
                body = {"id": f"lost-{n}", "delay": 0, "routing_key": "nobody.home"}
                assert http.post("/v1/tasks", json=body).status_code == 201
            daemon.wait_for_line("event not delivered (returned 312 NO_ROUTE)", 10)
            found = {"id": "found", "delay": 1, "routing_key": "bound.y"}
            assert http.post("/v1/tasks", json=found).status_code == 201

            [event] = events.collect(1, 15)
            assert event.message_id == "found"
            answers: list[int] = []

            def cancelled() -> bool:
                answers.append(http.delete("/v1/tasks/lost-0").status_code)
                return answers[-1] != 409  # 409: its event is in flight right now

            assert wait_until(cancelled, 10), answers
            assert answers[-1] == 204
        assert daemon.terminate() == 0, daemon.tail()
    assert daemon.count("Traceback") == 0, daemon.tail()
