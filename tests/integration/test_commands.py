"""The AMQP command channel against real RabbitMQ and MariaDB.

In-process: a started TriggerHook (the ``hooks`` fixture) and a CommandConsumer
on a per-test command queue; commands are sent by tests/support/commands.py's
CommandClient, which owns an exclusive reply queue. The last test runs the real
daemon and kills it with SIGKILL between receiving a command and committing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.amqp import AmqpNames, EventConsumer
from support.commands import CONNECT_TIMEOUT_S, CommandClient, Consumers, Message
from support.daemon import DaemonGroup, TaskTable, closed_port, daemon_env, settings_env
from support.hook import HookFactory, RowReader, collect_until, header_int, make_settings, open_hook
from support.tcpproxy import TcpProxy, proxied
from support.waiting import now_ms, wait_for, wait_until

from triggerhook.api.commands import ERROR_HEADER, CommandConsumer
from triggerhook.domain.spec import TaskSpec

REPLY_TIMEOUT_S = 15.0


def error_of(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["ok"] is False, reply
    error = reply["error"]
    assert isinstance(error, dict)
    return error


# -- create -----------------------------------------------------------------------------


def test_create_replies_and_fires(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    event_consumer: EventConsumer,
    command_queue: str,
) -> None:
    consumer = consumers.start(hooks(), command_queue)
    due = now_ms() + 400
    body = {"id": "cmd-a", "at_ms": due, "routing_key": "orders.created", "payload": "hé"}

    correlation_id = client.send("create", body, reply=True)
    assert correlation_id is not None
    reply = client.reply(correlation_id, REPLY_TIMEOUT_S)

    assert reply.properties.correlation_id == correlation_id
    assert reply.properties.content_type == "application/json"
    assert reply.json() == {
        "ok": True,
        "id": "cmd-a",
        "due_ms": due,
        "at": due / 1000,  # deprecated: epoch seconds
        "created": True,
        "outcome": "created",
    }
    event = collect_until(event_consumer, "cmd-a", 15)[-1]
    assert event.routing_key == "orders.created"
    assert event.body == "hé".encode()
    assert header_int(event, "x-due-ms") == due
    assert header_int(event, "x-fired-ms") >= due

    # The same command again is a no-op success (a due time given by "delay"
    # would differ: a conflict).
    later = {"id": "cmd-b", "at": (now_ms() + 60_000) / 1000}
    assert client.call("create", later)["created"] is True
    assert client.call("create", later)["created"] is False
    wait_for(lambda: consumer.applied == 3 and consumer.replied == 3, 5, "counters")
    assert consumer.received == 3
    assert consumer.dead_lettered == 0
    # cmd-a's row is deleted once the broker confirmed its event.
    wait_for(lambda: set(rows.rows()) == {"cmd-b"}, 10, lambda: f"rows {set(rows.rows())}")


def test_create_without_reply_is_applied_and_acked(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    consumer = consumers.start(hooks(), command_queue)
    before_ms = now_ms()

    assert client.send("create", {"id": "quiet", "delay": 60, "payload_b64": "AP8="}) is None

    wait_for(lambda: rows.row("quiet") is not None, REPLY_TIMEOUT_S, "row not written")
    row = rows.row("quiet")
    assert row is not None
    assert row.payload == b"\x00\xff"
    assert before_ms + 60_000 <= row.due_ms <= now_ms() + 60_000
    wait_for(lambda: consumer.applied == 1, 5, "not counted as applied")
    assert consumer.replied == 0
    assert client.replies_pending(0.2) == 0
    # Acked, not merely delivered: after the consumer's connection closed,
    # nothing came back to the queue.
    consumer.stop(5.0)
    assert client.depth(command_queue) == 0


def test_create_names_the_task_after_the_message_id(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    consumers.start(hooks(), command_queue)

    body = {"at": (now_ms() + 60_000) / 1000}
    first = client.call("create", body, message_id="msg-7")
    again = client.call("create", body, message_id="msg-7")
    anonymous = client.call("create", body)
    invalid_id = client.call("create", body, message_id="no spaces allowed")

    assert (first["id"], first["created"]) == ("msg-7", True)
    assert (again["id"], again["created"]) == ("msg-7", False)
    assert uuid.UUID(anonymous["id"]).version == 4
    assert uuid.UUID(invalid_id["id"]).version == 4
    assert set(rows.rows()) == {"msg-7", anonymous["id"], invalid_id["id"]}


def test_conflict_is_an_answer_not_a_dead_letter(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    consumer = consumers.start(hooks(), command_queue)
    assert client.call("create", {"id": "same", "delay": 60, "payload": "a"})["ok"] is True

    reply = client.call("create", {"id": "same", "delay": 60, "payload": "b"})

    error = error_of(reply)
    assert error["code"] == "conflict"
    assert "same" in error["message"]
    row = rows.row("same")
    assert row is not None
    assert row.payload == b"a"
    wait_for(lambda: consumer.applied == 2, 5, "conflict not acked")
    assert consumer.dead_lettered == 0
    assert client.depth(f"{command_queue}.dead") == 0


# -- cancel and reschedule -----------------------------------------------------------


def test_cancel_with_and_without_reply(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    hook = hooks()
    consumers.start(hook, command_queue)
    for task_id in ("c1", "c2", "c3"):
        hook.schedule(TaskSpec(task_id, delay_ms=60_000))

    assert client.call("cancel", {"id": "c1"}) == {"ok": True, "id": "c1"}
    assert rows.row("c1") is None
    assert error_of(client.call("cancel", {"id": "c1"}))["code"] == "not_found"
    client.send("cancel", {"id": "c2"})
    wait_for(lambda: rows.row("c2") is None, REPLY_TIMEOUT_S, "c2 not cancelled")
    assert set(rows.rows()) == {"c3"}


def test_cancel_prevents_firing(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    event_consumer: EventConsumer,
    command_queue: str,
) -> None:
    hook = hooks()
    consumers.start(hook, command_queue)
    start = now_ms()
    hook.schedule(TaskSpec("doomed", at_ms=start + 1500))
    hook.schedule(TaskSpec("sentinel", at_ms=start + 1800))

    assert client.call("cancel", {"id": "doomed"})["ok"] is True
    assert now_ms() < start + 1300, "cancel too slow for this test (armed already)"

    received = collect_until(event_consumer, "sentinel", 15)
    assert "doomed" not in {event.message_id for event in received}


def test_series_commands_reply_as_the_http_api_answers_and_fire_copies(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    event_consumer: EventConsumer,
    command_queue: str,
) -> None:
    hook = hooks()
    consumers.start(hook, command_queue)
    end_ms = now_ms() - 1000  # a backfill's range is in the past
    first_ms = end_ms + 3_600_000
    series = {"id": "cmd-s", "at_ms": first_ms, "every": "PT1M", "routing_key": "orders.s"}
    assert client.call("create", series)["outcome"] == "created"
    hook.schedule(TaskSpec("cmd-once", delay_ms=60_000))

    assert client.call("pause", {"id": "cmd-s"}) == {"ok": True, "id": "cmd-s", "outcome": "paused"}
    assert client.call("resume", {"id": "cmd-s"}) == {
        "ok": True,
        "id": "cmd-s",
        "outcome": "resumed",
    }
    row = rows.row("cmd-s")
    assert row is not None and row.due_ms == first_ms  # back where it was
    triggered = client.call("trigger", {"id": "cmd-s"})
    assert (triggered["ok"], triggered["outcome"]) == (True, "triggered")
    [copy] = triggered["copies"]
    assert (
        header_int(collect_until(event_consumer, copy["id"], 15)[-1], "x-due-ms")
        == (copy["due_ms"])
    )
    span = {"id": "cmd-s", "from_ms": end_ms - 60_000, "to_ms": end_ms}
    backfilled = client.call("backfill", span)
    assert backfilled == {
        "ok": True,
        "id": "cmd-s",
        "outcome": "backfilled",
        "copies": [
            {"id": f"cmd-s:{end_ms - 60_000}", "due_ms": end_ms - 60_000, "outcome": "created"}
        ],
    }
    collect_until(event_consumer, f"cmd-s:{end_ms - 60_000}", 15)
    # The task's state says no: answered (and acked), never dead-lettered.
    assert error_of(client.call("pause", {"id": "cmd-once"}))["code"] == "not_a_series"
    assert error_of(client.call("trigger", {"id": "cmd-gone"}))["code"] == "not_found"


def test_reschedule_moves_the_fire_time(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    event_consumer: EventConsumer,
    command_queue: str,
) -> None:
    hook = hooks()
    consumers.start(hook, command_queue)
    start = now_ms()
    hook.schedule(TaskSpec("moved", at_ms=start + 60_000))
    hook.schedule(TaskSpec("moved-quietly", at_ms=start + 60_000))
    new_due = start + 500

    # "at" as a number (epoch seconds): deprecated, still taken.
    reply = client.call("reschedule", {"id": "moved", "at": new_due / 1000})
    client.send("reschedule", {"id": "moved-quietly", "delay_ms": 600})

    assert reply == {"ok": True, "id": "moved", "due_ms": new_due, "at": new_due / 1000}
    events = {e.message_id: e for e in collect_until(event_consumer, "moved", 15)}
    assert header_int(events["moved"], "x-due-ms") == new_due
    if "moved-quietly" not in events:
        events.update((e.message_id, e) for e in collect_until(event_consumer, "moved-quietly", 15))
    assert start + 600 <= header_int(events["moved-quietly"], "x-due-ms") < start + 60_000
    assert error_of(client.call("reschedule", {"id": "moved", "delay": 1}))["code"] == ("not_found")
    wait_for(lambda: rows.count() == 0, 10, "rows of fired tasks not deleted")


def test_too_late_is_an_answer(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    # A far-future row marked armed by another instance: committed to firing,
    # so both commands come too late.
    hook = hooks()
    consumer = consumers.start(hook, command_queue)
    hook.schedule(TaskSpec("stuck", at_ms=now_ms() + 3_600_000))
    rows.mark_firing("stuck")

    cancel = client.call("cancel", {"id": "stuck"})
    reschedule = client.call("reschedule", {"id": "stuck", "delay": 60})

    assert error_of(cancel)["code"] == "too_late"
    assert error_of(reschedule)["code"] == "too_late"
    assert rows.row("stuck") is not None
    wait_for(lambda: consumer.applied == 2, 5, "answers not acked")
    assert consumer.dead_lettered == 0


# -- malformed commands -----------------------------------------------------------------

MALFORMED: list[tuple[str | None, bytes, str, str | None]] = [
    ("create", b"{not json", "malformed_json", None),
    ("create", b"\xff\xfe\x00", "malformed_json", None),
    (None, b'{"delay": 1}', "unknown_type", None),
    ("delete", b'{"id": "x"}', "unknown_type", None),
    ("create", b'{"delay": 1, "routing_key": "bad key!"}', "invalid", "routing_key"),
    ("create", b'{"at": 1, "delay": 1}', "invalid", "at"),
    ("create", b'{"delay": 1, "colour": "red"}', "invalid", "colour"),
    ("create", b'{"at": 1e15}', "invalid", "at"),
    ("create", b'{"delay": 1, "payload": "' + b"x" * 65 + b'"}', "invalid", "payload"),
    ("cancel", b"{}", "invalid", "id"),
    ("reschedule", b'{"id": "x", "at": "tomorrow"}', "invalid", "at"),
]


def test_malformed_commands_are_dead_lettered(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    consumer = consumers.start(hooks(max_payload_bytes=64), command_queue)
    sent: dict[str, tuple[str | None, bytes, str, str | None, str | None]] = {}
    for index, (type_, raw, code, field) in enumerate(MALFORMED):
        message_id = f"bad-{index}"
        # Every other one asks for a reply; all of them must be dead-lettered.
        correlation_id = client.send(
            type_, raw=raw, reply=index % 2 == 0, message_id=message_id, headers={"n": index}
        )
        sent[message_id] = (type_, raw, code, field, correlation_id)

    dead = client.dead_letters(len(MALFORMED), REPLY_TIMEOUT_S)

    assert len(dead) == len(MALFORMED)
    for letter in dead:
        type_, raw, code, field, correlation_id = sent[letter.properties.message_id]
        _check_dead_letter(letter, type_, raw, code, field, correlation_id)
        if correlation_id is not None:
            error = error_of(client.reply(correlation_id, REPLY_TIMEOUT_S).json())
            assert error["code"] == code
            assert error.get("field") == field
            assert error["message"]
    assert client.replies_pending(0.2) == 0
    assert rows.count() == 0
    wait_for(lambda: consumer.dead_lettered == len(MALFORMED), 5, "dead letters not counted")
    assert consumer.applied == 0
    # Garbage did not stop the consumer.
    assert client.call("create", {"id": "after-garbage", "delay": 60})["created"] is True
    consumer.stop(5.0)
    assert client.depth(command_queue) == 0
    assert client.depth(f"{command_queue}.dead") == 0  # all taken above


def _check_dead_letter(
    letter: Message,
    type_: str | None,
    raw: bytes,
    code: str,
    field: str | None,
    correlation_id: str | None,
) -> None:
    assert letter.body == raw
    assert letter.properties.type == type_
    assert letter.properties.correlation_id == correlation_id
    assert letter.properties.delivery_mode == 2
    headers = letter.headers
    assert headers["n"] == int(str(letter.properties.message_id).removeprefix("bad-"))
    reason = headers[ERROR_HEADER]
    assert isinstance(reason, bytes | str)
    text = reason.decode() if isinstance(reason, bytes) else reason
    expected = f"{code}: {field}: " if field else f"{code}: "
    assert text.startswith(expected), text


def test_unexpected_error_dead_letters_after_retries(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The database itself rejects this id (a trigger signals an error): not
    # transient, not the caller's validation, so it ends as internal_error.
    caplog.set_level(logging.ERROR, logger="triggerhook.api.commands")
    consumer = consumers.start(hooks(), command_queue)
    rows.execute(
        "CREATE TRIGGER th_test_poison BEFORE INSERT ON th_tasks FOR EACH ROW "
        "IF NEW.id = 'poison' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no poison'; "
        "END IF"
    )

    reply = client.call("create", {"id": "poison", "delay": 60})

    error = error_of(reply)
    assert error["code"] == "internal_error"
    # The server's text goes to the log, never to whoever may publish a command.
    assert error["message"] == "internal error; see the daemon's log"
    [letter] = client.dead_letters(1, REPLY_TIMEOUT_S)
    assert str(letter.headers[ERROR_HEADER]) == f"internal_error: {error['message']}"
    assert "no poison" in caplog.text  # the traceback of "command failed"
    assert client.call("create", {"id": "healthy", "delay": 60})["created"] is True
    assert set(rows.rows()) == {"healthy"}
    assert consumer.dead_lettered == 1


# -- failures: database, broker, stop ---------------------------------------------------


@dataclasses.dataclass
class Stalled:
    """A create command received by a consumer whose database is cut off."""

    proxy: TcpProxy
    consumer: CommandConsumer
    correlation_id: str


@contextlib.contextmanager
def stalled_create(
    task_id: str,
    retries: int,
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    consumers: Consumers,
    client: CommandClient,
    command_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> Iterator[Stalled]:
    """Cut the database, send a create (with reply), wait for ``retries`` retries."""
    caplog.set_level(logging.WARNING, logger="triggerhook.api.commands")
    with proxied(database_url) as (proxy, proxied_url):
        settings = make_settings(proxied_url, amqp_url, amqp_names.exchange)
        with open_hook(settings) as hook:
            consumer = consumers.start(hook, command_queue)
            proxy.cut()
            correlation_id = client.send("create", {"id": task_id, "delay": 60}, reply=True)
            assert correlation_id is not None
            wait_for(lambda: _retries(caplog) >= retries, 10, "no retries logged")
            yield Stalled(proxy, consumer, correlation_id)


def _retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum("command failed (attempt" in r.getMessage() for r in caplog.records)


def test_database_outage_retries_then_applies_once(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    services = (database_url, amqp_url, amqp_names, consumers, client, command_queue, caplog)
    with stalled_create("patient", 2, *services) as stalled:
        consumer = stalled.consumer
        assert consumer.applied == 0
        assert rows.count() == 0

        stalled.proxy.restore()
        reply = client.reply(stalled.correlation_id, REPLY_TIMEOUT_S).json()

        assert reply["created"] is True
        assert set(rows.rows()) == {"patient"}
        assert (consumer.received, consumer.applied, consumer.dead_lettered) == (1, 1, 0)
        consumer.stop(5.0)


def test_stop_leaves_an_uncommitted_command_in_the_queue(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    services = (database_url, amqp_url, amqp_names, consumers, client, command_queue, caplog)
    with stalled_create("left", 1, *services) as stalled:
        consumer = stalled.consumer
        consumer.stop(2.0)

        assert consumer.join(1.0)
        assert client.depth(command_queue) == 1
        assert consumer.applied == 0
        assert rows.count() == 0
        stalled.proxy.restore()

    # Another consumer (database reachable) applies it, once.
    consumers.start(hooks(), command_queue)
    reply = client.reply(stalled.correlation_id, REPLY_TIMEOUT_S).json()
    assert reply["created"] is True
    assert set(rows.rows()) == {"left"}


def test_reconnects_after_losing_the_broker(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    amqp_url: str,
    command_queue: str,
) -> None:
    with proxied(amqp_url) as (proxy, proxied_url):
        consumer = consumers.start(hooks(), command_queue, amqp_url=proxied_url)
        assert client.call("create", {"id": "before", "delay": 60})["ok"] is True

        proxy.cut()
        wait_for(lambda: not consumer.is_connected(), 10, "still connected")
        proxy.restore()
        wait_for(consumer.is_connected, CONNECT_TIMEOUT_S, "did not reconnect")

        assert consumer.reconnects == 1
        assert client.call("create", {"id": "after", "delay": 60})["ok"] is True
        assert consumer.is_alive()


def test_two_consumers_share_one_queue(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    first = consumers.start(hooks(), command_queue)
    second = consumers.start(hooks(), command_queue)
    ids = [f"shared-{n}" for n in range(20)]

    correlation_ids = [client.send("create", {"id": i, "delay": 60}, reply=True) for i in ids]
    replies = [client.reply(str(c), REPLY_TIMEOUT_S).json() for c in correlation_ids]

    assert all(r["created"] is True for r in replies)
    assert set(rows.rows()) == set(ids)
    assert first.applied + second.applied == len(ids)
    assert first.is_connected() and second.is_connected()


# -- the daemon -------------------------------------------------------------------------


@pytest.mark.slow
def test_daemon_killed_before_commit_applies_the_command_once(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    table: TaskTable,
    daemons: DaemonGroup,
    client: CommandClient,
    command_queue: str,
) -> None:
    with proxied(database_url) as (proxy, proxied_url):
        env = daemon_env(
            proxied_url,
            amqp_url,
            amqp_names.exchange,
            "cmd-kill",
            command_queue=command_queue,
            http_port=closed_port(),
        )
        first = daemons.start(env, "first")
        first.wait_ready()
        first.wait_for_line("consuming commands", 20)

        mark = first.mark()
        proxy.cut()
        due = now_ms() + 2000
        correlation_id = client.send("create", {"id": "once", "at": due / 1000}, reply=True)
        assert correlation_id is not None
        # Received, and failing to commit: not acked.
        first.wait_for_line("command failed (attempt", 15, start=mark)
        assert first.kill9() == -9
        proxy.restore()

        # Its successor under another name (the dead one's name stays taken
        # until its heartbeat runs out); it takes the shards over after the lease.
        successor = {**env, **settings_env(instance_id="cmd-kill-2")}
        second = daemons.start(successor, "second")
        reply = client.reply(correlation_id, 30).json()

        assert reply == {
            "ok": True,
            "id": "once",
            "due_ms": due,
            "at": due / 1000,
            "created": True,
            "outcome": "created",
        }
        events = collect_until(event_consumer, "once", 30)
        events += event_consumer.drain_quiet(1.0)
        assert [e.message_id for e in events].count("once") == 1
        wait_for(lambda: table.count() == 0, 15, lambda: f"{table.count()} rows left")
        assert second.terminate() == 0
        # Acked: nothing came back to the queue when the daemon disconnected.
        assert client.depth(command_queue) == 0
        assert wait_until(lambda: client.replies_pending(0.1) == 0, 1)
