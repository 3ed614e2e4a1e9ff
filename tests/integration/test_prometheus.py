"""``GET /metrics`` of a real daemon, as Prometheus reads it: one firing
process with its API process (the default) and one process alone, and the
scrape token.

Tasks fire over the HTTP API first, so that every family has moved: the
exposition is parsed with prometheus_client's parser and checked for what
docs/metrics.md promises (HELP and TYPE, ``_total``, seconds, cumulative
buckets, the ``triggerhook_instance`` label, process and GC metrics).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from support.amqp import AmqpNames, EventConsumer
from support.daemon import DaemonGroup, collect_ids, daemon_env, missing_ids
from support.names import unique_name
from support.waiting import wait_for

from triggerhook.metrics import prometheus

TASKS = 10
SCRAPE_TOKEN = "scrape-s3cret"
API_TOKEN = "api-s3cret"


@pytest.fixture
def event_queue(amqp_url: str, amqp_names: AmqpNames) -> Iterator[EventConsumer]:
    consumer = EventConsumer(amqp_url, amqp_names, binding="fire.#")
    consumer.declare()
    try:
        yield consumer
    finally:
        consumer.close()


def samples(text: str) -> dict[str, Sample]:
    """``name{labels}`` -> sample (labels sorted, ``le`` included)."""
    found: dict[str, Sample] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}"] = s
    return found


def one(text: str, name: str) -> float:
    (value,) = [s.value for key, s in samples(text).items() if key.startswith(name + "{")]
    return value


def fire_tasks(http_url: str, consumer: EventConsumer) -> None:
    ids = [f"p-{n}" for n in range(TASKS)]
    with httpx.Client(base_url=http_url, timeout=30) as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, 20, "never ready")
        for n, task_id in enumerate(ids):
            body = {"id": task_id, "delay": 0.2 + n * 0.02, "routing_key": "fire.prom"}
            assert client.post("/v1/tasks", json=body).status_code == 201
        assert client.get("/v1/tasks/p-unknown").status_code == 404
    assert not missing_ids(ids, collect_ids(consumer, ids, timeout_s=30))


@pytest.mark.parametrize("api_processes", [1, 0])
def test_a_real_daemons_metrics_are_prometheus_shaped(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_queue: EventConsumer,
    daemons: DaemonGroup,
    api_processes: int,
) -> None:
    instance = unique_name("prom-")
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        instance,
        api_processes=api_processes,
        metrics_interval_ms=200,
    )
    daemon = daemons.start(env, "prom", "--init-db")
    daemon.wait_ready()
    fire_tasks(daemon.http_url, event_queue)

    def scrape() -> str:
        answer = httpx.get(f"{daemon.http_url}/metrics", timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
        return answer.text

    lateness = "triggerhook_fire_lateness_seconds"
    # The histograms advance once per metrics period.
    wait_for(lambda: one(scrape(), f"{lateness}_count") >= TASKS, 10, "lateness not counted")
    text = scrape()
    found = samples(text)

    helped = set(re.findall(r"^# HELP (\S+) \S", text, re.MULTILINE))
    typed = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert helped == set(typed), set(helped) ^ set(typed)
    for name, kind in typed.items():
        assert name.endswith("_total") == (kind == "counter"), (name, kind)
    generic = [n for n in re.findall(r"^# HELP (\S+) The engine's", text, re.MULTILINE)]
    assert not generic, f"totals without a HELP of their own: {generic}"

    firing = [s for s in found.values() if s.name.startswith("triggerhook_firing_process_")]
    ours = [s for s in found.values() if s.name.startswith("triggerhook_") and s not in firing]
    assert all(s.labels.get(prometheus.INSTANCE_LABEL) == instance for s in ours)
    assert not any("instance" in s.labels for s in found.values())

    assert one(text, "triggerhook_fired_total") >= TASKS
    assert one(text, "triggerhook_confirmed_total") >= TASKS
    assert one(text, "triggerhook_running") == 1
    assert one(text, "triggerhook_members") >= 1
    requests = [s for s in found.values() if s.name == "triggerhook_http_requests_total"]
    by_class = {s.labels["status_class"]: s.value for s in requests}
    assert by_class["2xx"] >= TASKS and by_class["4xx"] >= 1, by_class

    # Seconds: every event here fired within a second of its due time.
    assert 0 <= one(text, f"{lateness}_sum") < TASKS * 1.0
    for family in (lateness, "triggerhook_http_request_duration_seconds"):
        buckets = sorted(
            (float(s.labels["le"]), s.value) for s in found.values() if s.name == f"{family}_bucket"
        )
        counts = [count for _, count in buckets]
        assert counts == sorted(counts) and buckets[-1][0] == float("inf"), buckets
        assert counts[-1] == one(text, f"{family}_count") > 0, family
    assert one(text, "triggerhook_http_request_duration_seconds_count") >= TASKS

    assert one(text, "process_resident_memory_bytes") > 0
    assert one(text, "process_cpu_seconds_total") > 0
    assert any(s.name == "python_gc_collections_total" for s in found.values())
    if api_processes:
        # The firing process started its API process: it is the older of the two.
        started = one(text, "triggerhook_firing_process_start_time_seconds")
        assert started <= one(text, "process_start_time_seconds")
        assert one(text, "triggerhook_firing_process_resident_memory_bytes") > 0
    else:
        assert not firing, firing
    assert daemon.terminate() == 0


def test_a_scrape_token_guards_metrics_and_grants_nothing_else(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    daemons: DaemonGroup,
) -> None:
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        unique_name("prom-"),
        metrics_scrape_token=SCRAPE_TOKEN,
        api_token=API_TOKEN,
    )
    daemon = daemons.start(env, "prom-token", "--init-db")
    daemon.wait_ready()

    def get(path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.get(f"{daemon.http_url}{path}", headers=headers, timeout=10)

    for refused in (get("/metrics"), get("/metrics", "wrong"), get("/metrics", API_TOKEN)):
        assert refused.status_code == 401, refused.text
        assert refused.headers["WWW-Authenticate"] == "Bearer"
        assert refused.json()["error"]["code"] == "unauthorized"
        assert "triggerhook_" not in refused.text
    answer = get("/metrics", SCRAPE_TOKEN)
    assert answer.status_code == 200
    assert "# TYPE triggerhook_fired_total counter" in answer.text.splitlines()
    assert get("/v1/status", SCRAPE_TOKEN).status_code == 401  # not an API token
    assert get("/v1/status", API_TOKEN).status_code == 200
    assert daemon.terminate() == 0
