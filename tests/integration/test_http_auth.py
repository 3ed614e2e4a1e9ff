"""HTTP API authentication, binding rules and readiness (real daemon processes)."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import httpx
import pytest
from support.amqp import AmqpNames
from support.daemon import Daemon, DaemonGroup, closed_port, daemon_env, run_cli
from support.http import Api, api_daemon
from support.tcpproxy import proxied
from support.waiting import wait_for

from triggerhook.cli import EXIT_USAGE

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(mysql_url, amqp_url, api_token=TOKEN) as served:
        yield served
        assert served.daemon.count("Traceback") == 0, served.daemon.tail()


def log_caught_up(api: Api, start: int) -> None:
    """Wait until the daemon's log holds everything it wrote so far: an
    unparsable request makes it log a known line, after any earlier ones."""
    port = int(api.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n")
        sock.recv(65536)
    api.daemon.wait_for_line("unparsable HTTP request", 10, start=start)


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


@pytest.mark.parametrize(
    "authorization",
    [b"Bearer \xff", b"\xff\xfe", b"Bearer \xc3\xa9", f"Bearer {TOKEN}".encode() + b"\x80"],
)
def test_non_ascii_bytes_in_the_authorization_header_get_401_and_no_error(
    api: Api, authorization: bytes
) -> None:
    mark = api.daemon.mark()
    with httpx.Client(base_url=api.url, headers={b"Authorization": authorization}) as client:
        for response in (
            client.get("/v1/tasks/unauth"),
            client.post("/v1/tasks", json={"id": "unauth", "delay": 1}),
        ):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized"
    log_caught_up(api, mark)
    assert api.daemon.count("Traceback", mark) == 0, api.daemon.tail()
    assert api.daemon.count(" ERROR ", mark) == 0, api.daemon.tail()
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
        assert anonymous.get("/metrics").status_code == 200  # metrics_require_token is off


def test_metrics_can_require_the_token(mysql_url: str, amqp_url: str) -> None:
    with api_daemon(mysql_url, amqp_url, api_token=TOKEN, metrics_require_token="true") as api:
        with api.client(authorized=False) as anonymous:
            refused = anonymous.get("/metrics")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["WWW-Authenticate"] == "Bearer"
            assert anonymous.get("/healthz").status_code == 200
        with api.client() as authorized:
            answer = authorized.get("/metrics")
            assert answer.status_code == 200
            assert "# TYPE triggerhook_fired_total counter" in answer.text.splitlines()


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


def test_database_errors_are_named_not_quoted_in_answers_and_logged(
    database_url: str, amqp_url: str, amqp_names: AmqpNames, daemons: DaemonGroup
) -> None:
    with proxied(database_url) as (proxy, proxied_url):
        env = daemon_env(proxied_url, amqp_url, amqp_names.exchange, "db-down")
        daemon = daemons.start(env, "db-down", "--init-db")
        daemon.wait_ready()
        url = f"http://127.0.0.1:{env['TRIGGERHOOK_HTTP_PORT']}"
        assert httpx.get(f"{url}/readyz").status_code == 200
        mark = daemon.mark()
        proxy.cut()  # the database looks unreachable: connections refused

        ready = httpx.get(f"{url}/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.json()["reasons"] == ["mysql: unreachable"]
        lookup = httpx.get(f"{url}/v1/tasks/some-task", timeout=60)
        assert lookup.status_code == 503, lookup.text
        error = lookup.json()["error"]
        assert error["code"] == "unavailable"
        assert error["message"] == "database unavailable; retry"
        for answer in (ready, lookup):
            assert_no_detail(answer.text, proxy.port)
        # The operator gets the full reasons and the error detail, as warnings.
        reason = daemon.wait_for_line("not ready: mysql:", 10, start=mark)
        assert "WARNING" in reason, reason
        answered = daemon.wait_for_line("answered 503", 10, start=mark)
        assert "WARNING" in answered and "database unavailable:" in answered, answered
        # The driver's error, which the client must not see: a pooled
        # connection lost mid-query (2013), or a new one refused at the host
        # (2003 from PyMySQL, 2002 from MariaDB's client library).
        detail = r"database unavailable: \((2013|2003|2002), .(Lost connection|Can't connect) to"
        assert re.search(detail, answered), answered
        assert daemon.count("Traceback", mark) == 0, daemon.tail()
        assert_terminates(daemon)


def assert_no_detail(text: str, port: int) -> None:
    for detail in ("127.0.0.1", str(port), "Errno", "connect", "MySQL", "(20"):
        assert detail not in text, text


def assert_terminates(daemon: Daemon) -> None:
    daemon.kill9()  # the database is gone: a graceful stop would wait for it
    assert not daemon.alive()
