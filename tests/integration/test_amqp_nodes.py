"""amqp_url with several nodes, against the real broker reached three ways: a
port nothing listens on (a node that is down), a TCP proxy (a node that can be
cut) and the broker itself. The daemon skips the dead node without waiting
out a back-off, and when its node's connection is cut it moves on to the next
one at once; every task due meanwhile is delivered, none early. And
amqp_queue_type = quorum: the queues the daemon declares are quorum queues."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from urllib.parse import urlsplit

import pika
import pika.exceptions
import pytest
from support.amqp import AmqpNames, EventConsumer
from support.daemon import (
    DaemonGroup,
    TaskTable,
    closed_port,
    collect_ids,
    daemon_env,
    duplicates,
    fired_ms,
    missing_ids,
    report,
    schedule_tasks,
    spread,
)
from support.tcpproxy import TcpProxy, proxied, via_proxy
from support.waiting import now_ms, wait_for


@pytest.fixture
def proxy(amqp_url: str) -> Iterator[tuple[TcpProxy, str]]:
    with proxied(amqp_url) as (cut_able, url):
        yield cut_able, url


def test_a_daemon_moves_to_the_next_node_when_one_is_down_or_cut(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
    proxy: tuple[TcpProxy, str],
) -> None:
    cut_able, proxied_url = proxy
    down = via_proxy(amqp_url, closed_port())  # the URL, at a port nothing listens on
    nodes = f"{down} {proxied_url},{amqp_url}"
    env = daemon_env(database_url, nodes, amqp_names.exchange, "nodes")
    daemon = daemons.start(env, "nodes")
    line = daemon.wait_for_line("publishing to exchange", 30)
    assert f"127.0.0.1:{cut_able.port}" in line, line  # the down node skipped
    assert daemon.count("cannot connect to RabbitMQ at 127.0.0.1:") >= 1
    daemon.wait_ready()

    start = now_ms()
    tasks = spread("n", 200, start + 1500, start + 4500)
    schedule_tasks(database_url, tasks)
    due = dict(tasks)
    wait_for(lambda: now_ms() >= start + 2500, 10, "clock")
    mark = daemon.mark()
    cut_ms = now_ms()
    cut_able.cut()  # the node "dies" while tasks come due
    daemon.wait_for_line("RabbitMQ connection closed (127.0.0.1:", 10, start=mark)
    moved = daemon.wait_for_line("publishing to exchange", 10, start=mark)
    moved_ms = now_ms()
    # The next node after the cut one is the third: the broker itself.
    broker = urlsplit(amqp_url)
    assert f"{broker.hostname}:{broker.port or 5672}" in moved, moved

    events = collect_ids(event_consumer, due, timeout_s=30)
    assert not missing_ids(due, events), sorted(missing_ids(due, events))[:10]
    early = [e.message_id for e in events if fired_ms(e) < due[e.message_id or ""]]
    assert not early, early[:10]
    extra = duplicates(events)
    report(
        f"amqp nodes: cut to publishing again {moved_ms - cut_ms} ms; {len(events)} events "
        f"for {len(due)} tasks, {sum(extra.values())} duplicates; worst x-fired-ms after due "
        f"{max(fired_ms(e) - due[e.message_id or ''] for e in events)} ms"
    )
    # No back-off between the nodes (the publisher's and the command consumer's).
    assert daemon.count("retrying in", start=mark) == 0, daemon.tail()
    wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
    assert daemon.terminate() == 0


def queue_type_is(amqp_url: str, queue: str, queue_type: str) -> bool:
    """Whether ``queue`` exists with ``queue_type``: RabbitMQ refuses (406) to
    redeclare a queue with another type."""
    with closing(pika.BlockingConnection(pika.URLParameters(amqp_url))) as conn:
        conn.channel().queue_declare(queue, passive=True)  # it exists (else 404)
        try:
            arguments = {"x-queue-type": queue_type}
            conn.channel().queue_declare(queue, durable=True, arguments=arguments)
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 406, exc
            return False
        return True


def test_quorum_queues_when_asked(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,  # the schema
    daemons: DaemonGroup,
) -> None:
    exchange = amqp_names.exchange
    env = daemon_env(database_url, amqp_url, exchange, "quorum", amqp_queue_type="quorum")
    daemon = daemons.start(env, "quorum")
    daemon.wait_ready()
    for queue in (f"{exchange}.dead", f"{exchange}.commands", f"{exchange}.commands.dead"):
        assert queue_type_is(amqp_url, queue, "quorum"), queue
        assert not queue_type_is(amqp_url, queue, "classic"), queue
    start = now_ms()
    tasks = spread("q", 20, start + 500, start + 1000)
    schedule_tasks(database_url, tasks)
    events = collect_ids(event_consumer, dict(tasks), timeout_s=20)
    assert not missing_ids(dict(tasks), events)
    assert daemon.terminate() == 0
