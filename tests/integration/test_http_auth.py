"""HTTP API authentication, binding rules and readiness (real daemon processes)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from support.amqp import AmqpNames
from support.daemon import DaemonGroup, closed_port, daemon_env, run_cli
from support.http import Api, api_daemon
from support.waiting import wait_for

from triggerhook.cli import EXIT_USAGE

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, api_token=TOKEN) as served:
        yield served


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong", f"bearer {TOKEN}", f"Basic {TOKEN}", f"Bearer {TOKEN}x"],
)
def test_v1_requests_without_the_right_token_get_401(api: Api, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    with httpx.Client(base_url=api.url, headers=headers) as client:
        for response in (
            client.post("/v1/tasks", json={"id": "unauth", "delay": 1}),
            client.get("/v1/tasks/unauth"),
            client.delete("/v1/tasks/unauth"),
            client.patch("/v1/tasks/unauth", json={"delay": 1}),
            client.post("/v1/tasks/batch", json={"tasks": [{"delay": 1}]}),
        ):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"] == "Bearer"
    with api.client() as authorized:
        assert authorized.get("/v1/tasks/unauth").status_code == 404  # nothing was written


def test_the_right_token_is_accepted_and_health_stays_open(api: Api) -> None:
    with api.client() as client:
        assert client.post("/v1/tasks", json={"id": "auth-ok", "delay": 60}).status_code == 201
        assert client.get("/v1/tasks/auth-ok").status_code == 200
    with api.client(authorized=False) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/readyz").status_code == 200
        assert anonymous.get("/openapi.json").status_code == 200


def test_non_loopback_bind_without_token_is_refused(database_url: str) -> None:
    env = daemon_env(database_url, "amqp://guest:guest@127.0.0.1:5672/%2F", "x", "bind")
    env["TRIGGERHOOK_HTTP_HOST"] = "0.0.0.0"
    result = run_cli(["run"], env, timeout_s=30)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "http_host" in result.stderr and "api_token" in result.stderr
    assert "Traceback" not in result.stderr


def test_non_loopback_bind_is_allowed_with_a_token_or_explicitly(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        "public",
        http_host="0.0.0.0",
        http_allow_public_without_token="true",
    )
    daemon = daemons.start(env, "public", "--init-db")
    daemon.wait_for_line("http api listening on 0.0.0.0", 20)
    port = env["TRIGGERHOOK_HTTP_PORT"]
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    assert daemon.terminate() == 0


def test_readyz_reports_an_unreachable_broker_and_the_port_in_use_fails_the_start(
    database_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    dead_amqp = f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F"
    env = daemon_env(database_url, dead_amqp, amqp_names.exchange, "unready", shutdown_timeout_s=1)
    daemon = daemons.start(env, "unready", "--init-db")
    daemon.wait_for_line("http api listening", 20)
    url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
    assert httpx.get(f"{url}/healthz").status_code == 200
    ready = httpx.get(f"{url}/readyz")
    assert ready.status_code == 503
    reasons = ready.json()["reasons"]
    assert any("rabbitmq" in reason for reason in reasons), reasons
    assert not any("mysql" in reason for reason in reasons), reasons

    # A second daemon on the same port cannot serve: it says so and exits 1.
    clash = daemons.start({**env, "TRIGGERHOOK_INSTANCE_ID": "clash"}, "clash")
    assert clash.wait_exit(30) == 1
    wait_for(lambda: clash.count("cannot listen on") == 1, 5, clash.tail)
    assert clash.count("Traceback") == 0
    assert daemon.terminate() == 0
