"""Live figures of a running daemon: GET /v1/status, GET /metrics and
``triggerhook status`` (real daemon, MariaDB, RabbitMQ; no InfluxDB needed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.daemon import run_cli
from support.hook import collect_until
from support.http import ROUTED, Api, api_daemon
from support.waiting import now_ms, wait_for

from triggerhook.cli import EXIT_FAILURE, EXIT_OK

TOKEN = "status-token"


@pytest.fixture(scope="module")
def api(mysql_url: str, amqp_url: str) -> Iterator[Api]:
    with api_daemon(
        mysql_url,
        amqp_url,
        api_token=TOKEN,
        metrics_interval_ms=200,
        default_routing_key=ROUTED,
    ) as served:
        yield served


def test_status_shows_the_engine_at_work(api: Api) -> None:
    with api.client() as client:
        due = now_ms() + 300
        for n in range(5):
            assert client.post("/v1/tasks", json={"id": f"st-{n}", "at": due / 1000}).is_success
        assert client.post("/v1/tasks", json={"id": "st-far", "delay": 3600}).is_success
        collect_until(api.events, "st-4", timeout_s=15)

        def totals() -> dict[str, int]:
            answer = client.get("/v1/status")
            assert answer.status_code == 200, answer.text
            return dict(answer.json()["totals"])

        wait_for(lambda: totals()["deleted"] >= 5, 10, lambda: str(totals()))

        # The totals are live; the period is the last one collected (every
        # 200 ms), which may predate the deletes: wait for one that follows them.
        seen: list[dict[str, Any]] = []

        def settled() -> bool:
            seen.append(client.get("/v1/status").json())
            return bool(seen[-1]["period"].get("oldest_overdue_ms") == 0)

        wait_for(settled, 5, lambda: str(seen[-1]))
        status = seen[-1]
    assert status["instance"] == "api" and status["running"] is True
    assert status["totals"]["scheduled"] >= 6 and status["totals"]["published"] >= 5
    period = status["period"]
    assert 100 <= period["period_ms"] <= 5000
    assert period["tasks_db"] >= 1  # st-far
    assert period["oldest_overdue_ms"] == 0
    assert {"in_memory", "heap", "send_buffer", "unconfirmed", "shards", "members"} <= set(period)
    assert status["http"]["period_ms"] == period["period_ms"]
    with api.client(authorized=False) as anonymous:
        assert anonymous.get("/v1/status").status_code == 401


def test_status_period_carries_lateness_while_events_are_published(api: Api) -> None:
    with api.client() as client:
        start = now_ms()
        tasks = [{"at": (start + 300 + 10 * n) / 1000} for n in range(40)]
        assert client.post("/v1/tasks/batch", json={"tasks": tasks}).status_code == 201

        def lateness_seen() -> bool:
            return "lateness_p99_ms" in client.get("/v1/status").json()["period"]

        wait_for(lateness_seen, 10)


def test_prometheus_endpoint(api: Api) -> None:
    answer = httpx.get(f"{api.url}/metrics")  # open, like the health endpoints
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    lines = answer.text.splitlines()
    assert "# TYPE triggerhook_fired_total counter" in lines
    assert any(
        line.startswith('triggerhook_heap_tasks{triggerhook_instance="api"} ') for line in lines
    )
    ok = 'triggerhook_http_requests_total{status_class="2xx",triggerhook_instance="api"} '
    assert any(line.startswith(ok) for line in lines)


def test_status_command(api: Api) -> None:
    env = {**api.daemon.env, "TRIGGERHOOK_API_TOKEN": TOKEN}
    text = run_cli(["--url", api.url, "status"], env)
    assert text.returncode == EXIT_OK, text.stderr
    assert "instance   api  (running)" in text.stdout
    assert "lateness" in text.stdout and "since start" in text.stdout
    raw = run_cli(["status", "--json"], env)  # the configured http_port: the same daemon
    assert raw.returncode == EXIT_OK, raw.stderr
    assert json.loads(raw.stdout)["instance"] == "api"
    unreachable = run_cli(["--url", "http://127.0.0.1:9", "status"], env)
    assert unreachable.returncode == EXIT_FAILURE
    assert "Traceback" not in unreachable.stderr
