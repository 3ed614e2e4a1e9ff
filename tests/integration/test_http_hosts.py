"""The HTTP API against DNS rebinding, over real HTTP to a ``triggerhook dev``
process (SQLite: no shared server): a request for another ``Host`` gets 421
naming it, and writes nothing; ``localhost`` and IP addresses with the port
are answered; ``http_allowed_hosts`` adds names; the probes answer any Host;
on a public address with a token any Host is answered unless a list is set.
A bad list is a start-up error naming the setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest
from support.daemon import Daemon, base_env, closed_port, settings_env, triggerhook_command
from support.waiting import wait_for

from triggerhook.cli import main

START_S = 20.0
EVIL = "evil.example"
TOKEN = "host-test-token"


@contextlib.contextmanager
def _dev(**settings: str) -> Iterator[str]:
    """A ``triggerhook dev`` with ``settings``; its URL (over 127.0.0.1), once ready."""
    port = closed_port()
    env = {**base_env(), **settings_env(http_port=port, **settings)}
    command = triggerhook_command("dev")
    with Daemon(env, "dev", ["--db", ":memory:"], command) as daemon:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert daemon.alive(), daemon.tail()
            try:
                return httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, START_S, daemon.tail)
        yield url


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _create(url: str, host: str, task_id: str, token: str = "") -> httpx.Response:
    headers = {"Host": host}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {"id": task_id, "delay_ms": 3_600_000}
    return httpx.post(f"{url}/v1/tasks", json=body, headers=headers, timeout=5.0)


def _stored(url: str, task_id: str, token: str = "") -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    status = httpx.get(f"{url}/v1/tasks/{task_id}", headers=headers, timeout=5.0).status_code
    assert status in (200, 404)
    return status == 200


def _refused(answer: httpx.Response, host: str) -> None:
    assert answer.status_code == 421, answer.text
    error = answer.json()["error"]
    assert error["code"] == "misdirected_request" and error["field"] == "Host"
    assert repr(host) in error["message"]


def test_a_request_for_another_host_is_refused_and_writes_nothing() -> None:
    with _dev() as url:
        evil = f"{EVIL}:{_port(url)}"
        _refused(_create(url, evil, "rebound"), evil)
        assert not _stored(url, "rebound")
        batch = {"tasks": [{"id": "rebound-2", "delay_ms": 3_600_000}]}
        answer = httpx.post(f"{url}/v1/tasks/batch", json=batch, headers={"Host": evil})
        _refused(answer, evil)
        assert not _stored(url, "rebound-2")
        for path in ("/v1/tasks", "/ui", "/metrics", "/openapi.json"):
            _refused(httpx.get(f"{url}{path}", headers={"Host": evil}), evil)
        # The names of this machine, with the port, are answered.
        for number, host in enumerate(("localhost", "127.0.0.1", "LOCALHOST.")):
            answer = _create(url, f"{host}:{_port(url)}", f"ok-{number}")
            assert answer.status_code == 201, answer.text
        # Probes answer whatever the Host: a pod's address, a name of the orchestrator's.
        for host in (evil, f"10.1.2.3:{_port(url)}"):
            for probe in ("/healthz", "/readyz"):
                answer = httpx.get(f"{url}{probe}", headers={"Host": host}, timeout=5.0)
                assert answer.status_code == 200, (probe, host, answer.text)


def test_the_allowed_hosts_setting_adds_names() -> None:
    with _dev(http_allowed_hosts="api.test, .svc.example") as url:
        port = _port(url)
        for number, host in enumerate(("api.test", "svc.example", "a.b.svc.example")):
            answer = _create(url, f"{host}:{port}", f"listed-{number}")
            assert answer.status_code == 201, answer.text
        _refused(_create(url, f"{EVIL}:{port}", "not-listed"), f"{EVIL}:{port}")
        assert not _stored(url, "not-listed")


def test_a_public_address_with_a_token_answers_any_host_unless_given_a_list() -> None:
    with _dev(http_host="0.0.0.0", api_token=TOKEN) as url:
        answer = _create(url, f"{EVIL}:{_port(url)}", "behind-a-proxy", TOKEN)
        assert answer.status_code == 201, answer.text
    listed = {"http_host": "0.0.0.0", "api_token": TOKEN, "http_allowed_hosts": "api.test"}
    with _dev(**listed) as url:
        _refused(_create(url, EVIL, "not-listed", TOKEN), EVIL)
        assert not _stored(url, "not-listed", TOKEN)
        assert _create(url, "api.test", "listed", TOKEN).status_code == 201


def test_a_bad_allowed_host_is_a_usage_error_naming_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--http-allowed-hosts", "http://api.test", "dev", "--db", ":memory:"])
    assert code == 2
    err = capsys.readouterr().err
    assert "http_allowed_hosts: 'http://api.test' is not a host name" in err
    assert "Traceback" not in err
