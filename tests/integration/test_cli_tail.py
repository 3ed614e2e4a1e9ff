"""``triggerhook tail`` against the real RabbitMQ and a real daemon: a fired
event is printed as one JSON line; the count, the timeout and an unreachable
broker give the documented exit codes, with no traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import httpx
import pytest
from support.amqp import AmqpNames
from support.daemon import (
    DaemonGroup,
    base_env,
    closed_port,
    daemon_env,
    run_cli,
    settings_env,
    triggerhook_command,
)

EXIT_OK, EXIT_FAILURE = 0, 1
BOUND = "tailing exchange"


def bound_tail(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``triggerhook tail ARGS`` started, once it said its queue is bound
    (what is published from then on, it sees)."""
    tail = subprocess.Popen(
        triggerhook_command("tail", *args),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert tail.stderr is not None
    line = tail.stderr.readline()
    if BOUND not in line:
        tail.kill()
        raise AssertionError(f"tail did not bind: {line}")
    return tail


def test_tail_prints_the_event_a_task_fires(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "tailed")
    daemons.start(env, "daemon", "--init-db").wait_ready()
    tail = bound_tail(env, "--routing-key", "tail.*", "--count", "1", "--timeout-s", "60")
    try:
        task = {
            "id": "tail-1",
            "delay": 0.1,
            "routing_key": "tail.test",
            "payload": "hello",
            "content_type": "text/plain",
            "headers": {"tenant": "acme"},
        }
        ignored = {"id": "other-1", "delay": 0, "routing_key": "other.test"}
        with httpx.Client(base_url=f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}") as http:
            assert http.post("/v1/tasks", json=ignored).status_code == 201  # not tail.*
            assert http.post("/v1/tasks", json=task).status_code == 201
        out, errors = tail.communicate(timeout=60)
    finally:
        tail.kill()
    assert tail.returncode == EXIT_OK, errors
    (line,) = out.splitlines()
    event = json.loads(line)
    assert {k: event[k] for k in ("id", "routing_key", "payload", "content_type", "headers")} == {
        "id": "tail-1",
        "routing_key": "tail.test",
        "payload": "hello",
        "content_type": "text/plain",
        "headers": {"tenant": "acme"},
    }
    assert event["fired_ms"] >= event["due_ms"] and event["rev"] >= 1
    assert "Traceback" not in errors


def test_tail_exits_1_when_the_count_does_not_come_in_time(
    amqp_url: str, amqp_names: AmqpNames
) -> None:
    env = {**base_env(), **settings_env(amqp_url=amqp_url, exchange=amqp_names.exchange)}
    result = run_cli(["tail", "--count", "1", "--timeout-s", "1"], env)
    assert result.returncode == EXIT_FAILURE, result.stderr
    assert result.stdout == ""
    assert BOUND in result.stderr and "Traceback" not in result.stderr


def test_tail_says_when_the_broker_is_unreachable(amqp_names: AmqpNames) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F"
    env = {**base_env(), **settings_env(amqp_url=url, exchange=amqp_names.exchange)}
    result = run_cli(["tail", "--timeout-s", "5"], env)
    assert result.returncode == EXIT_FAILURE, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("triggerhook: error: ") and "message broker" in line
    assert result.stdout == ""


@pytest.mark.parametrize("after_s", [0.0, 0.01, 0.3, 0.6])
def test_ctrl_c_ends_tail_with_status_0(
    amqp_url: str, amqp_names: AmqpNames, after_s: float
) -> None:
    """Ctrl-C at any moment once bound: status 0, no traceback, at once. (A CI
    run saw tail still running 30 s after Ctrl-C; a KeyboardInterrupt raised
    inside pika may leave the connection's close waiting: now it is a flag.)"""
    env = {**base_env(), **settings_env(amqp_url=amqp_url, exchange=amqp_names.exchange)}
    tail = bound_tail(env, "--routing-key", "nothing.#")
    try:
        threading.Event().wait(after_s)  # a moment into the wait for events
        tail.send_signal(signal.SIGINT)
        out, errors = tail.communicate(timeout=10)
    finally:
        tail.kill()
    assert tail.returncode == EXIT_OK, errors
    assert out == "" and "Traceback" not in errors
