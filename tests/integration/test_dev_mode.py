"""``triggerhook dev`` as a first run meets it: pip installs the repository
(the client and the daemon) into a fresh virtualenv — no system
site-packages — and that venv's ``triggerhook dev`` runs with no database
or broker server: a task scheduled through its HTTP API fires as a JSON line
on its stdout and as a POST to a local webhook, with the event's headers;
SIGTERM stops it with exit 0; started again on the same SQLite file, it
fires a task scheduled before the restart. Also: its bad options exit 2,
naming the option (in-process).

pip builds both wheels and fetches the dependencies at the versions of
constraints.txt from the index or its cache into the session's wheelhouse (the
``wheelhouse`` fixture in tests/integration/conftest.py, shared with
test_client_install.py); the fresh venv installs them from there alone (about
20 s here with the wheelhouse; not marked slow).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.daemon import Daemon, base_env, closed_port
from support.waiting import now_ms, wait_for
from support.webhook import Received, WebhookServer

from triggerhook.cli import main

START_S = 30.0  # a cold start imports the whole daemon from the new venv
FIRE_S = 10.0


@pytest.fixture(scope="module")
def venv(fresh_venv: Callable[..., Path]) -> Path:
    """A fresh venv (pip only) with the client and the daemon (the wheels built
    from client/ and .) and what they require installed by pip."""
    return fresh_venv("dev", "triggerhook-client", "triggerhook")


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


@dataclass(frozen=True)
class Dev:
    """A ``triggerhook dev`` process and its HTTP API's URL."""

    daemon: Daemon
    url: str


@contextlib.contextmanager
def _dev(venv: Path, db: Path, webhook: WebhookServer) -> Iterator[Dev]:
    """The venv's ``triggerhook dev`` on ``db``, its HTTP API on a free port, ready."""
    env = {k: v for k, v in base_env().items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    port = closed_port()
    args = ["--db", str(db), "--http-port", str(port), "--webhook", webhook.url()]
    command = [str(venv / "bin" / "triggerhook"), "dev"]
    with Daemon(env, "dev", args, command) as daemon:
        dev = Dev(daemon, f"http://127.0.0.1:{port}")
        _wait_ready(dev)
        yield dev


def _wait_ready(dev: Dev) -> None:
    def answers() -> bool:
        assert dev.daemon.alive(), dev.daemon.tail()
        try:
            return httpx.get(f"{dev.url}/readyz", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(answers, START_S, dev.daemon.tail)


def _schedule(dev: Dev, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{dev.url}/v1/tasks", json=body, timeout=5.0)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def _event(dev: Dev, task_id: str) -> dict[str, Any]:
    """The task's event on stdout, once it is there (every line must be one)."""
    found: list[dict[str, Any]] = []

    def printed() -> bool:
        events = [json.loads(line) for line in dev.daemon.stdout_lines]
        found[:] = [e for e in events if e["id"] == task_id]
        return bool(found)

    wait_for(printed, FIRE_S, lambda: f"{task_id} not on stdout\n{dev.daemon.tail()}")
    [event] = found
    return event


def _assert_hook(hook: Received, event: dict[str, Any], body: bytes) -> None:
    """The webhook's request carries what the stdout line shows."""
    headers = hook.headers
    assert hook.path == "/hook"
    assert hook.body == body
    assert headers["x-message-id"] == event["id"]
    assert headers["x-routing-key"] == event["routing_key"]
    assert int(headers["x-due-ms"]) == event["due_ms"]
    assert int(headers["x-fired-ms"]) == event["fired_ms"]
    assert int(headers["x-rev"]) == event["rev"]


def test_a_first_run_fires_to_stdout_and_a_webhook_and_keeps_tasks_over_a_restart(
    venv: Path, tmp_path: Path, webhook: WebhookServer
) -> None:
    db = tmp_path / "dev.sqlite3"
    with _dev(venv, db, webhook) as first:
        log = " ".join(first.daemon.lines[:1])
        assert "dev mode: one instance, SQLite at" in log and "not for production" in log, log
        created = _schedule(
            first,
            {
                "id": "dev-first",
                "delay": 0.3,
                "routing_key": "demo.hello",
                "payload": "hello",
                "content_type": "text/plain",
                "headers": {"tenant": "acme"},
            },
        )
        # Due after the restart below: it fires from the file, not from memory.
        later = _schedule(first, {"id": "dev-later", "at": now_ms() / 1000 + 4, "payload": "later"})

        event = _event(first, "dev-first")
        assert event["due_ms"] == created["due_ms"]
        assert event["fired_ms"] >= event["due_ms"]
        assert isinstance(event["rev"], int)
        assert (event["routing_key"], event["payload"]) == ("demo.hello", "hello")
        assert (event["content_type"], event["headers"]) == ("text/plain", {"tenant": "acme"})
        [hook] = webhook.wait_for(1, FIRE_S)
        _assert_hook(hook, event, b"hello")
        assert (hook.headers["content-type"], hook.headers["tenant"]) == ("text/plain", "acme")
        wait_for(  # delivered: its row is gone
            lambda: httpx.get(f"{first.url}/v1/tasks/dev-first").status_code == 404, FIRE_S
        )
        assert first.daemon.terminate() == 0, first.daemon.tail()
        assert not any("dev-later" in line for line in first.daemon.stdout_lines)
        assert os.path.getsize(db) > 0

    with _dev(venv, db, webhook) as second:
        event = _event(second, "dev-later")
        assert event["due_ms"] == later["due_ms"] and event["payload"] == "later"
        assert event["fired_ms"] >= event["due_ms"]
        _assert_hook(webhook.wait_for(2, FIRE_S)[1], event, b"later")
        assert second.daemon.terminate() == 0, second.daemon.tail()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-stdout"], "--no-stdout: events would go nowhere; give --webhook URL too"),
        (["--webhook", "ftp://example.com/x"], "--webhook: expected an http:// or https:// URL"),
        (["--webhook", "http://127.0.0.1:port/"], "--webhook: not a URL"),
        (["--db", "/no/such/dir/dev.sqlite3"], "--db: the directory '/no/such/dir' does not exist"),
        (["--webhook-timeout-s", "0", "--webhook", "http://h/"], "--webhook-timeout-s: must be"),
    ],
)
def test_a_bad_option_exits_2_naming_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["dev", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err
