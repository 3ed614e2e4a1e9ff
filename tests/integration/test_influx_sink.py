"""InfluxV1Sink against a real InfluxDB 1.x (Debian's 1.6, which scripts/test starts).

Points are read back with InfluxQL. Tests that need their own server (stopped
and started, or with authentication on) run a private ``influxd``
(support.influx.InfluxServer: own data directory and ports), never the shared one.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import influx
from support.daemon import closed_port
from support.influx import InfluxServer, query, rows
from support.names import unique_name

from triggerhook.errors import MetricsRejected, MetricsUnavailable
from triggerhook.metrics.influx import InfluxV1Sink
from triggerhook.runtime.points import ENGINE, HTTP, Point

T0_MS = 1_796_000_000_000  # 2026-11-30: inside the default retention policy (infinite)
ADMIN = ("admin", "admin-pw")


@pytest.fixture
def sink(influx_url: str, influx_database: str) -> Iterator[InfluxV1Sink]:
    writer = InfluxV1Sink(influx_url, influx_database, timeout_s=5.0)
    try:
        yield writer
    finally:
        writer.close()


def _needs_influxd() -> None:
    if influx.influxd_path() is None:
        pytest.skip("influxd is not installed locally (scripts/test installs Debian's influxdb)")


def _engine_point(time_ms: int, fired: int, instance: str = "engine-1") -> Point:
    return Point(ENGINE, {"instance": instance, "host": "box"}, {"fired": fired}, time_ms)


def _fired(url: str, database: str, auth: tuple[str, str] | None = None) -> list[tuple[int, int]]:
    return [
        (row["time"], row["fired"])
        for row in rows(url, database, f'SELECT "fired" FROM "{ENGINE}"', auth=auth)
    ]


# -- written points read back -------------------------------------------------------


def test_points_read_back_with_tags_types_and_ms_times(
    sink: InfluxV1Sink, influx_url: str, influx_database: str
) -> None:
    tags = {"instance": "engine-1", "host": "box"}
    sink.write(
        [
            Point(ENGINE, tags, {"fired": 12, "heap": 0, "lateness_p99_ms": 1.5}, T0_MS + 1),
            Point(ENGINE, tags, {"fired": 3, "heap": 7, "lateness_p99_ms": 0.25}, T0_MS + 1001),
            Point(HTTP, tags, {"requests_2xx": 40, "latency_max_ms": 12.75}, T0_MS + 1001),
        ]
    )

    engine = rows(influx_url, influx_database, f'SELECT * FROM "{ENGINE}"')
    assert engine == [
        {**tags, "time": T0_MS + 1, "fired": 12, "heap": 0, "lateness_p99_ms": 1.5},
        {**tags, "time": T0_MS + 1001, "fired": 3, "heap": 7, "lateness_p99_ms": 0.25},
    ]
    (http,) = query(
        influx_url, influx_database, f'SELECT * FROM "{HTTP}" GROUP BY "instance", "host"'
    )
    assert http.tags == tags
    assert http.rows == [
        {**tags, "time": T0_MS + 1001, "requests_2xx": 40, "latency_max_ms": 12.75}
    ]
    types = rows(influx_url, influx_database, f'SHOW FIELD KEYS FROM "{ENGINE}"')
    assert {row["fieldKey"]: row["fieldType"] for row in types} == {
        "fired": "integer",
        "heap": "integer",
        "lateness_p99_ms": "float",
    }
    tag_keys = rows(influx_url, influx_database, f'SHOW TAG KEYS FROM "{ENGINE}"')
    assert {row["tagKey"] for row in tag_keys} == {"host", "instance"}


def test_odd_names_and_tag_values_round_trip(
    sink: InfluxV1Sink, influx_url: str, influx_database: str
) -> None:
    odd_values = [
        "a b",
        "a,b",
        "a=b",
        "lead ,=trail",
        'say "hi"',
        "back\\slash",
        "#hash",
        "ünï-códe 日本",
        "'single'",
    ]
    measurement = "odd meas,urement"
    field = "odd field,=key"
    sink.write(
        [
            Point(measurement, {"instance": value, "tag key,=": "v"}, {field: i}, T0_MS + i)
            for i, value in enumerate(odd_values)
        ]
    )

    keys = rows(
        influx_url, influx_database, f"SHOW TAG KEYS FROM {influx.quote_identifier(measurement)}"
    )
    assert {row["tagKey"] for row in keys} == {"instance", "tag key,="}
    stored = rows(
        influx_url,
        influx_database,
        f"SELECT {influx.quote_identifier(field)}, instance "
        f"FROM {influx.quote_identifier(measurement)}",
    )
    assert [(row["time"] - T0_MS, row["instance"], row[field]) for row in stored] == [
        (i, value, i) for i, value in enumerate(odd_values)
    ]


def test_float_and_int_extremes_round_trip(
    sink: InfluxV1Sink, influx_url: str, influx_database: str
) -> None:
    fields: dict[str, int | float] = {
        "tiny": 1e-07,
        "huge": 1e16,
        "tenth": 0.1,
        "negative": -2.5,
        "whole": 3.0,
        "int_max": 2**63 - 1,
        "int_min": -(2**63) + 1,  # InfluxDB 1.x refuses -2**63 itself
    }
    sink.write([Point("extremes", {"instance": "x"}, fields, T0_MS)])
    (row,) = rows(influx_url, influx_database, 'SELECT * FROM "extremes"')
    assert {key: row[key] for key in fields} == fields
    types = rows(influx_url, influx_database, 'SHOW FIELD KEYS FROM "extremes"')
    assert {r["fieldKey"]: r["fieldType"] for r in types} == {
        key: "integer" if isinstance(value, int) else "float" for key, value in fields.items()
    }


def test_many_points_in_one_write(
    sink: InfluxV1Sink, influx_url: str, influx_database: str
) -> None:
    # What the reporter sends after an outage: its whole buffer at once.
    points = [_engine_point(T0_MS + i * 1000, i) for i in range(3600)]
    sink.write(points)
    counted = rows(
        influx_url, influx_database, f'SELECT COUNT("fired"), SUM("fired") FROM "{ENGINE}"'
    )
    assert (counted[0]["count"], counted[0]["sum"]) == (3600, sum(range(3600)))


# -- database missing ------------------------------------------------------------------


def test_missing_database_is_created_and_written(influx_url: str) -> None:
    name = unique_name()
    writer = InfluxV1Sink(influx_url, name, timeout_s=5.0)
    try:
        assert name not in influx.database_names(influx_url)
        writer.write([_engine_point(T0_MS, 1)])
        assert name in influx.database_names(influx_url)
        assert _fired(influx_url, name) == [(T0_MS, 1)]
        # Dropped while running: created again, once, on the next write.
        influx.drop_database(influx_url, name)
        writer.write([_engine_point(T0_MS + 1, 2)])
        assert _fired(influx_url, name) == [(T0_MS + 1, 2)]
    finally:
        writer.close()
        influx.drop_database(influx_url, name)


def test_missing_database_is_rejected_when_creation_is_off(influx_url: str) -> None:
    name = unique_name()
    writer = InfluxV1Sink(influx_url, name, timeout_s=5.0, create_database=False)
    try:
        with pytest.raises(MetricsRejected, match=f'HTTP 404: database not found: "{name}"'):
            writer.write([_engine_point(T0_MS, 1)])
        assert name not in influx.database_names(influx_url)
    finally:
        writer.close()


def test_unknown_retention_policy_is_rejected(influx_url: str, influx_database: str) -> None:
    writer = InfluxV1Sink(influx_url, influx_database, "no_such_rp", timeout_s=5.0)
    try:
        with pytest.raises(MetricsRejected, match="retention policy not found: no_such_rp"):
            writer.write([_engine_point(T0_MS, 1)])
    finally:
        writer.close()


def test_field_type_conflict_is_rejected_with_influx_text(
    sink: InfluxV1Sink, influx_url: str, influx_database: str
) -> None:
    sink.write([_engine_point(T0_MS, 1)])
    clash = Point(ENGINE, {"instance": "engine-1"}, {"fired": 1.5}, T0_MS + 1)
    with pytest.raises(MetricsRejected, match="HTTP 400: partial write: field type conflict"):
        sink.write([clash, _engine_point(T0_MS + 2, 2)])
    # A 1.x partial write keeps the valid points of the batch.
    assert _fired(influx_url, influx_database) == [(T0_MS, 1), (T0_MS + 2, 2)]


# -- unreachable, unanswering --------------------------------------------------------------


def test_unreachable_influxdb_is_unavailable_quickly() -> None:
    timeout_s = 2.0
    writer = InfluxV1Sink(f"http://127.0.0.1:{closed_port()}", "metrics", timeout_s=timeout_s)
    try:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="Connection refused"):
            writer.write([_engine_point(T0_MS, 1)])
        assert time.monotonic() - started < timeout_s
    finally:
        writer.close()


def test_unanswering_influxdb_is_unavailable_after_the_timeout() -> None:
    # A listening socket nobody accepts on: the kernel completes the handshake,
    # the request goes out, and no answer ever comes.
    timeout_s = 0.5
    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        writer = InfluxV1Sink(url, "metrics", timeout_s=timeout_s)
        try:
            started = time.monotonic()
            with pytest.raises(MetricsUnavailable, match="ReadTimeout"):
                writer.write([_engine_point(T0_MS, 1)])
            elapsed_s = time.monotonic() - started
        finally:
            writer.close()
    assert timeout_s * 0.9 <= elapsed_s < timeout_s + 1.0, elapsed_s


# -- a private influxd: authentication, restart ------------------------------------------


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxServer]:
    """A private influxd with authentication on: an admin, a read-only user, a database."""
    _needs_influxd()
    with InfluxServer(tmp_path_factory.mktemp("influx-auth"), auth_enabled=True) as server:
        query(server.url, None, "CREATE USER admin WITH PASSWORD 'admin-pw' WITH ALL PRIVILEGES")
        query(server.url, None, "CREATE DATABASE metrics", auth=ADMIN)
        query(server.url, None, "CREATE USER reader WITH PASSWORD 'reader-pw'", auth=ADMIN)
        query(server.url, None, "GRANT READ ON metrics TO reader", auth=ADMIN)
        yield server


def test_credentials_are_sent(auth_server: InfluxServer) -> None:
    writer = InfluxV1Sink(auth_server.url, "metrics", "", *ADMIN, timeout_s=5.0)
    try:
        writer.write([_engine_point(T0_MS, 5)])
    finally:
        writer.close()
    assert _fired(auth_server.url, "metrics", ADMIN) == [(T0_MS, 5)]


@pytest.mark.parametrize(
    ("user", "password", "answer"),
    [
        ("", "", "HTTP 401: unable to parse authentication credentials"),
        ("admin", "wrong", "HTTP 401: authorization failed"),
        ("reader", "reader-pw", 'HTTP 403: "reader" user is not authorized to write'),
    ],
)
def test_bad_credentials_are_rejected(
    auth_server: InfluxServer, user: str, password: str, answer: str
) -> None:
    writer = InfluxV1Sink(auth_server.url, "metrics", "", user, password, timeout_s=5.0)
    try:
        with pytest.raises(MetricsRejected, match=answer):
            writer.write([_engine_point(T0_MS + 1, 6)])
    finally:
        writer.close()


def test_database_creation_needs_an_admin(auth_server: InfluxServer) -> None:
    name = unique_name()
    writer = InfluxV1Sink(auth_server.url, name, "", "reader", "reader-pw", timeout_s=5.0)
    try:
        with pytest.raises(MetricsRejected, match=f'CREATE DATABASE "{name}".*admin privilege'):
            writer.write([_engine_point(T0_MS, 1)])
    finally:
        writer.close()
    assert name not in influx.database_names(auth_server.url, auth=ADMIN)


@pytest.mark.slow
def test_writes_resume_after_an_influxdb_restart(tmp_path: Path) -> None:
    _needs_influxd()
    timeout_s = 2.0
    with InfluxServer(tmp_path) as server:
        writer = InfluxV1Sink(server.url, "metrics", timeout_s=timeout_s)
        try:
            writer.write([_engine_point(T0_MS, 1)])  # creates the database
            writer.write([_engine_point(T0_MS + 1000, 2)])  # on the kept-alive connection

            server.stop()
            for attempt in range(3):
                started = time.monotonic()
                with pytest.raises(MetricsUnavailable, match="Connection refused"):
                    writer.write([_engine_point(T0_MS + 2000 + attempt, 3)])
                assert time.monotonic() - started < timeout_s

            server.start()
            writer.write([_engine_point(T0_MS + 3000, 4)])

            # Restarted between two writes: the stale kept-alive connection is
            # replaced, the next write goes through at the first attempt.
            server.stop()
            server.start()
            writer.write([_engine_point(T0_MS + 4000, 5)])
        finally:
            writer.close()
        assert _fired(server.url, "metrics") == [
            (T0_MS, 1),
            (T0_MS + 1000, 2),
            (T0_MS + 3000, 4),
            (T0_MS + 4000, 5),
        ]
