"""The command channel's checks before a body is read (triggerhook.api.command_auth):
bearer token, user_id, reply_to, and the rate-limited warning. The consumer that
applies them is tested against RabbitMQ in tests/integration/test_command_auth.py."""

from __future__ import annotations

import pytest

from triggerhook.api.command_auth import CommandGuard, Unauthorized
from triggerhook.api.command_messages import Rejected
from triggerhook.settings import Settings
from triggerhook.wiring import command_config

TOKEN = "s3cret"
GOOD = {"authorization": f"Bearer {TOKEN}"}
DIRECT = "amq.rabbitmq.reply-to"


def guard(
    users: str = "", reply_prefix: str = "triggerhook.reply.", queue: str = "triggerhook.commands"
) -> CommandGuard:
    return CommandGuard(
        command_config(
            Settings(
                api_token=TOKEN,
                command_allowed_users=users,
                command_reply_prefix=reply_prefix,
                command_queue=queue,
            )
        )
    )


def refusal(check: CommandGuard, headers: object, user_id: object = None) -> Rejected:
    with pytest.raises(Rejected) as info:
        check.check(headers, user_id, None)
    return info.value


# -- authorization -----------------------------------------------------------------------


def test_the_exact_bearer_token_is_authorized() -> None:
    guard().check(GOOD, None, None)
    guard().check({**GOOD, "other": b"\xff"}, "guest", DIRECT)


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"Authorization": f"Bearer {TOKEN}"},  # AMQP header names are case-sensitive
        {"authorization": TOKEN},
        {"authorization": f"Bearer {TOKEN}x"},
        {"authorization": f"Bearer {TOKEN[:-1]}"},
        {"authorization": f"bearer {TOKEN}"},
        {"authorization": f"Bearer  {TOKEN}"},
        {"authorization": f"Bearer {TOKEN}é"},
        {"authorization": "Bearer \udcff"},  # a lone surrogate
        {"authorization": f"Bearer {TOKEN}".encode()},  # bytes: not a string
        {"authorization": 7},
        {"authorization": None},
        {"authorization": [f"Bearer {TOKEN}"]},
        {"authorization": {"Bearer": TOKEN}},
        [("authorization", f"Bearer {TOKEN}")],  # not a table
        f"authorization: Bearer {TOKEN}",
    ],
)
def test_anything_but_the_exact_token_is_unauthorized(headers: object) -> None:
    error = refusal(guard(), headers)
    assert isinstance(error, Unauthorized)
    assert (error.code, error.reason) == ("unauthorized", "unauthorized")
    assert error.message
    assert TOKEN not in error.message


def test_an_allowed_user_id_needs_no_token() -> None:
    check = guard(users="svc-a, svc-b")
    check.check(None, "svc-a", None)
    check.check({"authorization": "Bearer wrong"}, "svc-b", None)
    for user_id in ("guest", "svc", "svc-a ", "SVC-A", "", None, b"svc-a", 1):
        assert isinstance(refusal(check, None, user_id), Unauthorized), user_id
    assert "'guest'" in refusal(check, None, "guest").message


def test_without_a_token_the_channel_is_open() -> None:
    check = CommandGuard(command_config(Settings(api_token="", command_allowed_users="svc-a")))
    assert not check.authenticates
    check.check(None, None, None)
    check.check({"authorization": "Bearer anything"}, "guest", DIRECT)
    assert guard().authenticates


# -- reply_to ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply_to",
    [None, "", DIRECT, f"{DIRECT}.g1h2AA5yZXBseUAxMjM0NTY3OAAAAAAAAAAB", "triggerhook.reply.x"],
)
def test_allowed_reply_to(reply_to: str | None) -> None:
    guard().check(GOOD, None, reply_to)
    CommandGuard(command_config(Settings())).check_reply_to(reply_to)  # also without a token


@pytest.mark.parametrize(
    "reply_to",
    [
        "amq.gen-JzTY20BRgKO-HjmUJj0wLg",
        "victim",
        "x.triggerhook.reply.y",
        "triggerhook.repl",
        f"{DIRECT}x",
        "AMQ.RABBITMQ.REPLY-TO",
        b"triggerhook.reply.x",
        7,
    ],
)
def test_forbidden_reply_to(reply_to: object) -> None:
    with pytest.raises(Rejected) as info:
        guard().check(GOOD, None, reply_to)
    error = info.value
    assert not isinstance(error, Unauthorized)
    assert error.code == "forbidden_reply_to"
    assert error.reason.startswith("forbidden_reply_to: ")
    if isinstance(reply_to, str):
        assert repr(reply_to) in error.reason


def test_an_empty_prefix_allows_direct_reply_to_only() -> None:
    check = guard(reply_prefix="")
    check.check_reply_to(DIRECT)
    check.check_reply_to(f"{DIRECT}.abc")
    with pytest.raises(Rejected) as info:
        check.check_reply_to("triggerhook.reply.x")
    assert info.value.code == "forbidden_reply_to"
    assert "only one allowed" in info.value.message


def test_replies_never_go_to_the_daemons_own_queues() -> None:
    check = guard(reply_prefix="jobs.", queue="jobs.commands")
    check.check_reply_to("jobs.reply-1")
    for own in ("jobs.commands", "jobs.commands.dead"):
        with pytest.raises(Rejected) as info:
            check.check_reply_to(own)
        assert info.value.reason == f"forbidden_reply_to: reply_to {own!r} is a command queue"


def test_authorization_is_checked_before_reply_to() -> None:
    # An intruder learns nothing about the reply_to rule.
    error = refusal(guard(), None)
    with pytest.raises(Unauthorized):
        guard().check(None, None, "victim")
    assert error.code == "unauthorized"
