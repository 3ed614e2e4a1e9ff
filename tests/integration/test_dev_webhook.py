"""``triggerhook dev --webhook URL`` (a real process, this checkout's) against
webhooks that misbehave (tests/support/webhook.py): one that trickles its
answer a byte every 2 s is cut at --webhook-timeout-s and the event retried,
while the events due meanwhile reach stdout on time; SIGTERM stops the daemon
within shutdown_timeout_s however long the webhook's call would go on; an
endless answer is a delivery, not read to its end; a webhook that refuses
every event keeps none of them from stdout, where each is printed once
however often the webhook gets it. With --webhook-secret-file the requests
are signed; with --webhook-public-only a webhook on this machine is refused,
never called. The webhook's secret path and query are
in no log line, and a task's ``Authorization``/``Cookie`` headers never
reach the webhook.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from support.daemon import Daemon, base_env, closed_port, settings_env, triggerhook_command
from support.waiting import now_ms, wait_for
from support.webhook import HostileWebhook, WebhookServer

START_S = 20.0
FIRE_S = 10.0
ON_TIME_MS = 1000  # a stdout line this long after its due time at most (a busy machine)
SECRET = "s3cret"
STOP_S = 2  # shutdown_timeout_s of these daemons


@dataclass(frozen=True)
class Dev:
    daemon: Daemon
    url: str

    def schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.post(f"{self.url}/v1/tasks", json=body, timeout=5.0)
        assert answer.status_code == 201, answer.text
        created: dict[str, Any] = answer.json()
        return created

    def stored(self, task_id: str) -> bool:
        """Whether the task's row is still there (not delivered yet)."""
        status = httpx.get(f"{self.url}/v1/tasks/{task_id}", timeout=5.0).status_code
        assert status in (200, 404), status
        return status == 200

    def events(self, task_id: str) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.daemon.stdout_lines]
        return [event for event in lines if event["id"] == task_id]

    def printed_on_time(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task's one stdout line, there by its due time + ON_TIME_MS."""
        left_s = (task["due_ms"] + ON_TIME_MS - now_ms()) / 1000
        wait_for(
            lambda: self.events(task["id"]),
            max(left_s, 0.0),
            lambda: f"{task['id']} not on stdout on time\n{self.daemon.tail()}",
        )
        [event] = self.events(task["id"])
        return event


@contextlib.contextmanager
def _dev(
    tmp_path: Path, webhook: str, timeout_s: float = 10.0, more: tuple[str, ...] = ()
) -> Iterator[Dev]:
    port = closed_port()
    env = {**base_env(), **settings_env(shutdown_timeout_s=STOP_S, log_level="DEBUG")}
    args = ["--db", str(tmp_path / "dev.sqlite3"), "--http-port", str(port)]
    args += ["--webhook", webhook, "--webhook-timeout-s", str(timeout_s), *more]
    with Daemon(env, "dev", args, triggerhook_command("dev")) as daemon:
        dev = Dev(daemon, f"http://127.0.0.1:{port}")

        def ready() -> bool:
            assert daemon.alive(), daemon.tail()
            try:
                return httpx.get(f"{dev.url}/readyz", timeout=1.0).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, START_S, daemon.tail)
        yield dev


def _ids(requests: list[Any]) -> list[str]:
    return [request.headers["x-message-id"] for request in requests]


def test_a_trickling_webhook_is_cut_and_retried_while_stdout_keeps_time(tmp_path: Path) -> None:
    with HostileWebhook("trickle", every_s=2.0) as hook:
        url = hook.url(f"/{SECRET}-path?token={SECRET}")
        with _dev(tmp_path, url, timeout_s=3.0) as dev:
            start = dev.daemon.lines[0]
            assert "dev mode:" in start and f"http://127.0.0.1:{hook.port}/..." in start, start
            slow = dev.schedule({"id": "slow", "delay_ms": 200})
            assert dev.printed_on_time(slow)["id"] == "slow"
            hook.wait_for(1, FIRE_S)  # its webhook call trickles on
            later = [dev.schedule({"id": f"later-{i}", "delay_ms": 300 * i}) for i in (1, 2)]
            for task in later:  # printed at their due time, the webhook's call in flight
                event = dev.printed_on_time(task)
                assert event["fired_ms"] - event["due_ms"] < ON_TIME_MS
            # Cut at 3 s (a byte came every 2 s: no read ever timed out), then tried again.
            wait_for(lambda: _ids(hook.received).count("slow") >= 2, 3.0 + FIRE_S, dev.daemon.tail)
            assert any("no whole answer within 3 s" in line for line in dev.daemon.lines)
            assert dev.stored("slow") and len(dev.events("slow")) == 1  # not printed again
        log = "\n".join(dev.daemon.lines)
        assert SECRET not in log  # at log_level DEBUG, with httpx's and httpcore's lines


def test_sigterm_stops_within_the_stop_timeout_a_webhook_call_in_flight(tmp_path: Path) -> None:
    hook = HostileWebhook("trickle", every_s=2.0)
    with hook, _dev(tmp_path, hook.url(), timeout_s=600.0) as dev:
        dev.schedule({"id": "stuck", "delay_ms": 100})
        hook.wait_for(1, FIRE_S)
        assert dev.daemon.terminate(timeout_s=STOP_S + 3.0) == 0, dev.daemon.tail()
    assert len(dev.events("stuck")) == 1  # printed at once, the webhook's call in flight
    # Cut at the stop's deadline and put back: counted as unpublished (its row fires again).
    assert any("engine stopped" in line and "unpublished=1" in line for line in dev.daemon.lines)


def test_an_endless_answer_is_a_delivery_read_no_further_than_its_start(tmp_path: Path) -> None:
    with HostileWebhook("endless", status=200) as hook, _dev(tmp_path, hook.url()) as dev:
        dev.schedule({"id": "endless", "delay_ms": 100})
        wait_for(lambda: not dev.stored("endless"), FIRE_S, dev.daemon.tail)
        assert hook.hung_up == 1  # the daemon closed the connection
        assert hook.sent_bytes < 64 * 1024 * 1024
        assert _ids(hook.received) == ["endless"]  # once: delivered


def test_a_failing_webhook_keeps_no_event_from_stdout_nor_prints_one_twice(
    tmp_path: Path,
) -> None:
    with WebhookServer(status=500) as hook, _dev(tmp_path, hook.url()) as dev:
        tasks = [dev.schedule({"id": f"ev-{i}", "delay_ms": 200 * i}) for i in (1, 2, 3)]
        for task in tasks:
            dev.printed_on_time(task)
        wait_for(lambda: len(hook.received) >= 6, FIRE_S, dev.daemon.tail)  # retried
        assert all(dev.stored(task["id"]) for task in tasks)  # not delivered everywhere
        hook.status = 204
        ids = [task["id"] for task in tasks]
        wait_for(lambda: not any(dev.stored(i) for i in ids), FIRE_S, dev.daemon.tail)
        assert all(len(dev.events(task["id"])) == 1 for task in tasks)


def test_a_tasks_credentials_do_not_reach_the_webhook(tmp_path: Path) -> None:
    headers = {"Authorization": "Bearer t0ken", "Cookie": "session=t0ken", "tenant": "acme"}
    with WebhookServer() as hook, _dev(tmp_path, hook.url()) as dev:
        task = dev.schedule({"id": "creds", "delay_ms": 100, "headers": headers})
        assert dev.printed_on_time(task)["headers"] == headers  # the task's own data
        [request] = hook.wait_for(1, FIRE_S)
    assert request.headers["tenant"] == "acme"
    assert not {"authorization", "cookie"} & set(request.headers), request.headers


def test_requests_are_signed_with_the_secret_file(tmp_path: Path) -> None:
    secret = tmp_path / "webhook.secret"
    secret.write_text("whsec_dev_0123456789abcdef\n", encoding="utf-8")
    more = ("--webhook-secret-file", str(secret))
    with WebhookServer() as hook, _dev(tmp_path, hook.url(), more=more) as dev:
        dev.schedule({"id": "signed", "delay_ms": 100, "payload": "hello"})
        [request] = hook.wait_for(1, FIRE_S)
    signed = request.headers["x-triggerhook-timestamp"].encode() + b"." + request.body
    digest = hmac.new(b"whsec_dev_0123456789abcdef", signed, hashlib.sha256).hexdigest()
    assert request.headers["x-triggerhook-signature"] == f"v1={digest}"


def test_public_only_refuses_a_webhook_on_this_machine(tmp_path: Path) -> None:
    more = ("--webhook-public-only",)
    with WebhookServer() as hook, _dev(tmp_path, hook.url(), more=more) as dev:
        task = dev.schedule({"id": "inner", "delay_ms": 100})
        dev.printed_on_time(task)
        wait_for(
            lambda: any("address not allowed" in line for line in dev.daemon.lines),
            FIRE_S,
            dev.daemon.tail,
        )
        assert hook.received == []
