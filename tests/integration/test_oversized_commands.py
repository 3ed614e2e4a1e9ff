"""A 100 MiB command to a real daemon: refused by its declared size, never held.

RabbitMQ (3.8 and later) takes messages up to 128 MiB. The command consumer
(in the API process) reads a delivery's content header first: a body declared
over the limit is dropped frame by frame as it arrives, but for its first
4 KiB (:mod:`triggerhook.amqp.content`), and the command is dead-lettered as
``invalid: body`` with a reply naming only its size. Before, pika assembled the
whole body (the frames, then their join: twice its size) and a log line parsed
it as JSON: 300 MiB and more for one command, with ``command_prefetch`` (256)
of them allowed in flight, whoever sent them.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from support.amqp import AmqpNames
from support.commands import CommandClient
from support.daemon import Daemon, DaemonGroup, daemon_env, report

from triggerhook.amqp.consumer import KEPT_OF_OVERSIZED_BYTES
from triggerhook.api.command_messages import max_body_bytes
from triggerhook.api.commands import ERROR_HEADER

HUGE = 100 * 1024 * 1024
MAX_PAYLOAD = 65536  # the default max_payload_bytes
WAIT_S = 120.0  # publishing and draining 100 MiB takes seconds on a slow machine


def _api_process(daemon: Daemon) -> int:
    """The pid of the daemon's (only) API process, which consumes the commands."""
    children = Path(f"/proc/{daemon.pid}/task/{daemon.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def _peak_rss_kib(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


def _cpu_s(pid: int) -> float:
    """The process's CPU time so far (user + system), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_100_mib_command_is_refused_unread_and_its_dead_letter_is_capped(
    amqp_url: str,
    amqp_names: AmqpNames,
    client: CommandClient,
    daemons: DaemonGroup,
    database_url: str,
) -> None:
    env = daemon_env(database_url, amqp_url, amqp_names.exchange, "huge", api_processes=1)
    daemon = daemons.start(env, "huge", "--init-db")
    daemon.wait_ready()
    assert client.call("create", {"id": "before", "delay_ms": 60_000})["created"] is True
    api = _api_process(daemon)
    before_kib, before_cpu_s = _peak_rss_kib(api), _cpu_s(api)
    task_id, marker = f"id-{secrets.token_hex(4)}", f"MARKER-{secrets.token_hex(8)}"
    head = f'{{"id": "{task_id}", "payload": "{marker}'.encode()
    body = head + b"Z" * (HUGE - len(head) - 2) + b'"}'

    correlation_id = client.send("create", raw=body, reply=True, message_id="m-huge")
    assert correlation_id is not None
    del body  # this process's copy; the broker has it
    sent_s = time.monotonic()
    reply = client.reply(correlation_id, WAIT_S).json()
    answered_s = time.monotonic() - sent_s
    grown_kib, cpu_s = _peak_rss_kib(api) - before_kib, _cpu_s(api) - before_cpu_s
    report(
        f"a {HUGE >> 20} MiB command: answered {answered_s:.2f} s after it was sent; the API "
        f"process's peak RSS grew {grown_kib} KiB (VmHWM {before_kib} KiB before), "
        f"its CPU {cpu_s:.2f} s"
    )
    assert grown_kib < 32 * 1024, f"the API process's peak grew {grown_kib} KiB"

    limit = max_body_bytes(MAX_PAYLOAD)
    reason = f"body: is {HUGE} bytes, over the limit of {limit}"
    error = {"code": "invalid", "message": reason.removeprefix("body: "), "field": "body"}
    assert reply == {"ok": False, "error": error}
    [letter] = client.dead_letters(1, WAIT_S)
    assert letter.headers[ERROR_HEADER] == f"invalid: {reason}"
    assert letter.properties.message_id == "m-huge"
    assert len(letter.body) == KEPT_OF_OVERSIZED_BYTES  # its start only
    assert letter.body.startswith(head)
    # Nothing of the body in the log (it was never parsed for one); the rest goes on.
    line = daemon.wait_for_line("command rejected: invalid: body: is", 5)
    assert "task_id=m-huge" in line, line  # a create's message_id names its task
    assert daemon.count(task_id) == daemon.count(marker) == 0, daemon.tail()
    assert client.call("create", {"id": "after", "delay_ms": 60_000})["created"] is True
    assert daemon.terminate() == 0, daemon.tail()
