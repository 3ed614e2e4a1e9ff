"""Authorization and reply_to rules of the AMQP command channel, against real
RabbitMQ and MariaDB: in-process CommandConsumers on a per-test queue (as in
test_commands.py), one test with a RabbitMQ user made by ``rabbitmqctl`` and one
against the real daemon.

A refused command must be dead-lettered with its reason and leave nothing in
the database; every test also sends commands that must be applied, so a
consumer that refuses everything fails as surely as one that refuses nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator

import pika
import pytest
from support.amqp import AmqpNames
from support.commands import (
    DIRECT_REPLY_TO,
    CommandClient,
    Consumers,
    Message,
    RabbitmqctlUnavailable,
    rabbitmq_user,
)
from support.daemon import DaemonGroup, TaskTable, daemon_env
from support.hook import HookFactory, RowReader
from support.waiting import wait_for

from triggerhook.api.command_auth import LOG_INTERVAL_S
from triggerhook.api.commands import ERROR_HEADER
from triggerhook.domain.spec import TaskSpec

TOKEN = "s3cret-token"
REPLY_TIMEOUT_S = 15.0
QUIET_S = 0.3  # listening for replies that must not come, after the dead letters came
UNAUTHORIZED_WARNING = "unauthorized command dead-lettered"


def reason_of(letter: Message) -> str:
    reason = letter.headers[ERROR_HEADER]
    assert isinstance(reason, bytes | str), reason
    return reason.decode() if isinstance(reason, bytes) else reason


def dead_by_id(client: CommandClient, count: int) -> dict[str, Message]:
    """``count`` dead letters by message_id (AssertionError if fewer arrive)."""
    letters = client.dead_letters(count, REPLY_TIMEOUT_S)
    assert len(letters) == count, [(m.properties.message_id, m.headers) for m in letters]
    return {str(letter.properties.message_id): letter for letter in letters}


# -- the bearer token -------------------------------------------------------------------

# message_id -> the authorization header sent (None: no header at all).
REFUSED_TOKENS: dict[str, object] = {
    "no-header": None,
    "wrong": "Bearer not-the-token",
    "no-scheme": TOKEN,
    "lowercase-scheme": f"bearer {TOKEN}",
    "trailing-space": f"Bearer {TOKEN} ",
    "prefix-only": f"Bearer {TOKEN[:-1]}",
    "non-ascii": f"Bearer {TOKEN}é",
    "not-utf8": b"Bearer \xff\xfe",  # sent as a byte array, decoded to bytes
    "a-number": 7,
    "a-table": {"Bearer": TOKEN},
}


def test_commands_without_the_right_token_are_dead_lettered_unauthorized(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    hook = hooks()
    hook.schedule(TaskSpec("victim", delay_ms=60_000))
    consumer = consumers.start(hook, command_queue, api_token=TOKEN)
    commands = [
        ("create", {"id": "intruder", "delay": 60, "routing_key": "evil.key"}),
        ("cancel", {"id": "victim"}),
        ("reschedule", {"id": "victim", "delay": 1}),
    ]
    for name, value in REFUSED_TOKENS.items():
        for type_, body in commands:
            headers = {} if value is None else {"authorization": value}
            client.send(type_, body, reply=True, message_id=f"{name}.{type_}", headers=headers)
    # A body the parser would refuse is refused for authorization first: the
    # body of an unauthorized command is never read.
    client.send("create", raw=b"{not json", reply=True, message_id="garbage")

    dead = dead_by_id(client, len(REFUSED_TOKENS) * len(commands) + 1)

    for message_id, letter in dead.items():
        assert reason_of(letter) == "unauthorized", message_id
        assert "authorization" not in letter.headers, "token attempt copied to the dead queue"
    assert dead["garbage"].body == b"{not json"
    assert client.replies_pending(QUIET_S) == 0  # no answer to an unauthorized command
    assert set(rows.rows()) == {"victim"}
    victim = rows.row("victim")
    assert victim is not None
    assert victim.due_ms > time.time() * 1000 + 30_000  # not rescheduled
    assert consumer.applied == 0
    assert consumer.refused == len(dead)

    # The right token is applied, for every type.
    client.token = TOKEN
    assert client.call("create", {"id": "allowed", "delay": 60})["created"] is True
    assert client.call("reschedule", {"id": "victim", "delay": 120})["ok"] is True
    assert client.call("cancel", {"id": "allowed"}) == {"ok": True, "id": "allowed"}
    assert set(rows.rows()) == {"victim"}
    # Counted just after the reply is published (same I/O-thread callback).
    wait_for(lambda: consumer.applied == 3, 5, lambda: f"applied {consumer.applied}")


def test_a_malformed_command_with_the_token_keeps_the_token_out_of_the_dead_queue(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    consumers.start(hooks(), command_queue, api_token=TOKEN)
    client.token = TOKEN

    client.send("create", raw=b"{not json", message_id="bad", headers={"n": 1})

    [letter] = client.dead_letters(1, REPLY_TIMEOUT_S)
    assert reason_of(letter).startswith("malformed_json: ")
    assert letter.headers["n"] == 1
    assert "authorization" not in letter.headers
    assert rows.count() == 0


def test_an_unauthorized_flood_logs_a_few_warnings_not_one_per_message(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="triggerhook.api.commands")
    consumer = consumers.start(hooks(), command_queue, api_token=TOKEN)
    flood = 300
    started_s = time.monotonic()

    for n in range(flood):
        client.send("create", {"id": f"flood-{n}", "delay": 60}, persistent=False)
    assert len(client.dead_letters(flood, REPLY_TIMEOUT_S)) == flood

    elapsed_s = time.monotonic() - started_s
    warnings = [r for r in caplog.records if UNAUTHORIZED_WARNING in r.getMessage()]
    assert 1 <= len(warnings) <= 1 + elapsed_s / LOG_INTERVAL_S, len(warnings)
    assert all(r.levelno == logging.WARNING for r in warnings)
    assert not any("command rejected" in r.getMessage() for r in caplog.records)
    assert consumer.refused == flood
    assert rows.count() == 0


def test_a_flood_of_invalid_commands_logs_a_few_warnings_not_one_per_message(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Invalid commands (here a 300,000-digit time: no token is set) are
    dead-lettered each; the log gets one line per kind of rejection per interval."""
    caplog.set_level(logging.WARNING, logger="triggerhook.api.commands")
    consumers.start(hooks(), command_queue)
    flood = 300
    started_s = time.monotonic()

    for n in range(flood):
        client.send("create", {"id": f"bad-{n}", "at": "9" * 300_000}, persistent=False)
    assert len(client.dead_letters(flood, REPLY_TIMEOUT_S)) == flood

    elapsed_s = time.monotonic() - started_s
    warnings = [r for r in caplog.records if "command rejected: invalid" in r.getMessage()]
    assert 1 <= len(warnings) <= 1 + elapsed_s / LOG_INTERVAL_S, len(warnings)
    assert rows.count() == 0


# -- user_id ----------------------------------------------------------------------------


@pytest.fixture
def other_user(amqp_url: str) -> Iterator[tuple[str, str]]:
    """(name, amqp_url) of a temporary RabbitMQ user with full permissions."""
    name = f"th-test-{uuid.uuid4().hex[:12]}"
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(rabbitmq_user(amqp_url, name))
        except RabbitmqctlUnavailable as exc:
            pytest.skip(str(exc))
        yield name, url


def test_an_allowed_user_id_needs_no_token_and_others_are_unauthorized(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
    other_user: tuple[str, str],
) -> None:
    name, url = other_user
    consumer = consumers.start(
        hooks(), command_queue, api_token=TOKEN, command_allowed_users=f"someone, {name}"
    )

    with CommandClient(url, command_queue) as allowed:
        created = allowed.call("create", {"id": "by-user", "delay": 60}, user_id=True)
        # Without the user_id property the same connection is not recognised.
        allowed.send("create", {"id": "no-user-id", "delay": 60}, message_id="no-user-id")
    # guest is a real user (RabbitMQ checks the property), but not in the list.
    client.send("create", {"id": "by-guest", "delay": 60}, message_id="guest", user_id=True)

    assert (created["ok"], created["id"], created["created"]) == (True, "by-user", True)
    dead = dead_by_id(client, 2)
    assert {reason_of(letter) for letter in dead.values()} == {"unauthorized"}
    assert set(rows.rows()) == {"by-user"}
    assert consumer.refused == 2
    wait_for(lambda: consumer.applied == 1, 5, lambda: f"applied {consumer.applied}")


def test_a_forged_user_id_is_refused_by_the_broker(
    amqp_url: str, command_queue: str, other_user: tuple[str, str]
) -> None:
    # What makes user_id trustworthy: guest cannot claim to be the allowed user.
    name, _url = other_user
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = connection.channel()
        channel.queue_declare(queue=command_queue, durable=True)
        channel.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            channel.basic_publish(
                exchange="",
                routing_key=command_queue,
                body=b"{}",
                properties=pika.BasicProperties(type="create", user_id=name),
            )
        assert info.value.reply_code == 406  # PRECONDITION_FAILED
        assert channel.is_closed
    finally:
        connection.close()


# -- reply_to ---------------------------------------------------------------------------


def test_forbidden_reply_to_is_dead_lettered_and_not_applied(
    hooks: HookFactory,
    consumers: Consumers,
    client: CommandClient,
    rows: RowReader,
    command_queue: str,
) -> None:
    consumer = consumers.start(hooks(), command_queue)  # no token: reply_to is checked anyway
    victim_queue = f"victim-{uuid.uuid4().hex}"
    forbidden = {
        "victim": victim_queue,
        "server-named": "amq.gen-abcdef",
        "prefix-inside": f"x.triggerhook.reply.{uuid.uuid4().hex}",
        "direct-lookalike": "amq.rabbitmq.reply-tox",
    }
    client.declare_queue(victim_queue)
    for name, reply_to in forbidden.items():
        client.send(
            "create",
            {"id": f"via-{name}", "delay": 60},
            reply=True,
            reply_to=reply_to,
            message_id=name,
        )
    dead = dead_by_id(client, len(forbidden))

    for name, letter in dead.items():
        assert reason_of(letter).startswith("forbidden_reply_to: "), name
        assert repr(forbidden[name]) in reason_of(letter)
        assert letter.properties.reply_to == forbidden[name]
    assert client.depth(victim_queue) == 0  # nothing was published into it
    assert rows.count() == 0
    assert consumer.applied == 0
    # An allowed reply_to still gets its answer on the same consumer.
    assert client.call("create", {"id": "fine", "delay": 60})["created"] is True
    assert set(rows.rows()) == {"fine"}


def test_replies_reach_direct_reply_to_and_queues_with_the_prefix(
    hooks: HookFactory,
    consumers: Consumers,
    rows: RowReader,
    amqp_url: str,
    command_queue: str,
) -> None:
    consumers.start(hooks(), command_queue, command_reply_prefix="myapp.replies.")

    with CommandClient(amqp_url, command_queue, direct_reply=True) as direct:
        assert direct.call("create", {"id": "direct", "delay": 60})["created"] is True
    with CommandClient(amqp_url, command_queue, reply_prefix="myapp.replies.") as prefixed:
        assert prefixed.reply_queue.startswith("myapp.replies.")
        assert prefixed.call("create", {"id": "prefixed", "delay": 60})["created"] is True
    # The default prefix is no longer allowed once another one is configured.
    with CommandClient(amqp_url, command_queue) as default:
        default.send("create", {"id": "default", "delay": 60}, reply=True, message_id="d")
        [letter] = default.dead_letters(1, REPLY_TIMEOUT_S)
        assert reason_of(letter).startswith("forbidden_reply_to: ")
        assert default.replies_pending(QUIET_S) == 0
    assert set(rows.rows()) == {"direct", "prefixed"}


def test_an_empty_prefix_allows_direct_reply_to_only(
    hooks: HookFactory,
    consumers: Consumers,
    rows: RowReader,
    amqp_url: str,
    command_queue: str,
) -> None:
    consumers.start(hooks(), command_queue, command_reply_prefix="")

    with CommandClient(amqp_url, command_queue, direct_reply=True) as direct:
        assert direct.reply_queue == DIRECT_REPLY_TO
        assert direct.call("create", {"id": "direct", "delay": 60})["created"] is True
    with CommandClient(amqp_url, command_queue) as named:
        named.send("create", {"id": "named", "delay": 60}, reply=True, message_id="n")
        [letter] = named.dead_letters(1, REPLY_TIMEOUT_S)
        assert reason_of(letter).startswith("forbidden_reply_to: ")
    assert set(rows.rows()) == {"direct"}


# -- the daemon -------------------------------------------------------------------------


def test_daemon_requires_the_token_on_the_command_channel(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    table: TaskTable,
    daemons: DaemonGroup,
    command_queue: str,
) -> None:
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "cmd-auth", api_token=TOKEN)
    daemon = daemons.start(env, "auth")
    daemon.wait_ready()
    daemon.wait_for_line("consuming commands", 20)

    with CommandClient(amqp_url, command_queue) as client:
        client.send("create", {"id": "intruder", "delay": 60}, reply=True, message_id="x")
        [letter] = client.dead_letters(1, REPLY_TIMEOUT_S)
        assert reason_of(letter) == "unauthorized"
        client.token = TOKEN
        assert client.call("create", {"id": "member", "delay": 60})["created"] is True
        assert client.replies_pending(QUIET_S) == 0  # the intruder got no answer

    wait_for(lambda: table.count() == 1, 5, lambda: f"{table.count()} rows")
    daemon.wait_for_line(UNAUTHORIZED_WARNING, 5)
    assert daemon.terminate() == 0
