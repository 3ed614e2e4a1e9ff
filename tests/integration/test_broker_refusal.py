"""A broker that refuses the daemon's credentials, met while stopping: the
publisher and the command consumer must stop cleanly at any moment of their
connection handshake (pika cannot abort a handshake by closing: that killed
the thread with an AssertionError, and the daemon exited 1)."""

from __future__ import annotations

import threading
import time

import pytest
from support.hook import HookFactory, make_settings, open_hook

from triggerhook import TriggerHook
from triggerhook.amqp.connection import amqp_parameters
from triggerhook.api.commands import CommandConsumer
from triggerhook.wiring import command_config

# From "just started" to "handshake refused and retrying"; several land
# inside the handshake on any machine.
STOP_AFTER_S = (0.0, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128)


@pytest.fixture
def refused_url(amqp_url: str) -> str:
    user_part, _, rest = amqp_url.partition("@")
    scheme, _, user = user_part.rpartition("/")
    name = user.partition(":")[0]
    return f"{scheme}/{name}:not-the-password@{rest}"


@pytest.mark.parametrize("stop_after_s", STOP_AFTER_S)
def test_command_consumer_stops_cleanly_during_a_refused_handshake(
    hooks: HookFactory, refused_url: str, stop_after_s: float
) -> None:
    hook = hooks(start=False)
    settings = make_settings(hooks.database_url, refused_url, hooks.exchange)
    failures: list[tuple[str, BaseException]] = []
    consumer = CommandConsumer(
        hook,
        command_config(settings),
        amqp_parameters(settings.amqp_url),
        lambda name, exc: failures.append((name, exc)),
    )
    consumer.start()
    threading.Event().wait(stop_after_s)
    consumer.stop(1.0)
    assert consumer.join(5.0)
    assert failures == []


@pytest.mark.parametrize("stop_after_s", STOP_AFTER_S)
def test_engine_stops_cleanly_during_a_refused_handshake(
    hooks: HookFactory, refused_url: str, stop_after_s: float
) -> None:
    with open_hook(
        make_settings(hooks.database_url, refused_url, hooks.exchange), start=False
    ) as hook:
        _start_and_stop(hook, stop_after_s)


def _start_and_stop(hook: TriggerHook, stop_after_s: float) -> None:
    hook.start()
    threading.Event().wait(stop_after_s)
    started_s = time.monotonic()
    hook.stop(timeout_s=1.0)
    assert time.monotonic() - started_s < 10.0  # bounded, not wedged
    assert hook.engine.failure is None
