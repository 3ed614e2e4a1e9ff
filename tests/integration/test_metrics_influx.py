"""A daemon writing its metrics to a real InfluxDB 1.x (read back with InfluxQL),
and keeping them — and its firing — going across an InfluxDB restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import influx
from support.amqp import AmqpNames, EventConsumer
from support.daemon import DaemonGroup, daemon_env, fired_ms, schedule_tasks, spread
from support.influx import InfluxServer
from support.waiting import now_ms, wait_for

INTERVAL_MS = 200


def engine_rows(url: str, database: str, instance: str, where: str = "") -> list[dict[str, Any]]:
    statement = f'SELECT * FROM "triggerhook" WHERE "instance" = \'{instance}\' {where}'
    return influx.rows(url, database, statement)


def test_the_daemon_writes_its_figures_to_influxdb(
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    daemons: DaemonGroup,
    influx_url: str,
    influx_database: str,
) -> None:
    env = daemon_env(
        database_url,
        amqp_url,
        amqp_names.exchange,
        "metered",
        metrics_url=influx_url,
        metrics_database=influx_database,
        metrics_interval_ms=INTERVAL_MS,
    )
    daemon = daemons.start(env, "metered", "--init-db")
    daemon.wait_ready()
    daemon.wait_for_line("metrics: writing to", 10)
    start = now_ms()
    schedule_tasks(database_url, spread("m", 20, start + 500, start + 1000))
    assert len(event_consumer.collect(20, timeout_s=15)) == 20

    def totals() -> dict[str, float]:
        series = influx.rows(
            influx_url,
            influx_database,
            'SELECT sum("fired") AS fired, sum("published") AS published, '
            'sum("deleted") AS deleted FROM "triggerhook" WHERE "instance" = \'metered\'',
        )
        return {k: float(v or 0) for k, v in series[0].items() if k != "time"} if series else {}

    wait_for(lambda: totals().get("deleted") == 20, 10, lambda: str(totals()))
    assert totals() == {"fired": 20.0, "published": 20.0, "deleted": 20.0}
    rows = engine_rows(influx_url, influx_database, "metered")
    assert {row["host"] for row in rows} and all(row["period_ms"] for row in rows)
    late = [row for row in rows if row.get("lateness_max_ms") is not None]
    assert late and all(float(row["lateness_p50_ms"]) >= 0 for row in late)
    assert daemon.terminate() == 0
    assert daemon.count("Traceback") == 0


@pytest.mark.slow
def test_metrics_and_firing_go_on_across_an_influxdb_restart(
    tmp_path: Path,
    database_url: str,
    amqp_url: str,
    amqp_names: AmqpNames,
    event_consumer: EventConsumer,
    daemons: DaemonGroup,
) -> None:
    with InfluxServer(tmp_path) as server:
        influx.create_database(server.url, "metrics")
        env = daemon_env(
            database_url,
            amqp_url,
            amqp_names.exchange,
            "restart",
            metrics_url=server.url,
            metrics_database="metrics",
            metrics_interval_ms=INTERVAL_MS,
        )
        daemon = daemons.start(env, "restart", "--init-db")
        daemon.wait_ready()
        start = now_ms()
        tasks = spread("r", 60, start + 1000, start + 7000)  # firing all through the outage
        schedule_tasks(database_url, tasks)
        wait_for(lambda: engine_rows(server.url, "metrics", "restart"), 10)

        server.stop()
        down_ms = now_ms()
        daemon.wait_for_line("metrics: InfluxDB unavailable", 10)
        wait_for(lambda: now_ms() - down_ms >= 2000, 5)
        server.start()
        up_ms = now_ms()
        daemon.wait_for_line("metrics: InfluxDB reachable again", 15)

        events = event_consumer.collect(len(tasks), timeout_s=20)
        due = dict(tasks)
        assert sorted(e.message_id or "" for e in events) == sorted(due)
        assert all(fired_ms(e) >= due[e.message_id or ""] for e in events)  # never early
        # The periods of the outage were kept and written once it was back.
        outage = engine_rows(
            server.url, "metrics", "restart", f"AND time > {down_ms}ms AND time < {up_ms}ms"
        )
        assert len(outage) >= 5, outage
        assert all(int(row["metrics_dropped"]) == 0 for row in outage)
        assert daemon.terminate() == 0
        assert daemon.count(" ERROR ") == 0 and daemon.count("Traceback") == 0
