"""Line protocol encoding of metrics points (triggerhook.metrics.lineprotocol).

The round trip through a real InfluxDB is in tests/integration/test_influx_sink.py;
here: the exact text, checked by hand and against influxdb-client's own encoder.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from influxdb_client.client.write.point import Point as ClientPoint
from influxdb_client.domain.write_precision import WritePrecision

from triggerhook.metrics.influx import encode_batch
from triggerhook.metrics.lineprotocol import InvalidPoint, encode_point, encode_points
from triggerhook.runtime.points import Point

T_MS = 1_796_000_000_123


def test_tags_sorted_ints_floats_and_ms_timestamp() -> None:
    point = Point(
        "triggerhook",
        {"instance": "engine-1", "host": "box"},
        {"fired": 12, "lateness_p99_ms": 1.5, "heap": 0},
        T_MS,
    )
    assert encode_point(point) == (
        "triggerhook,host=box,instance=engine-1 fired=12i,heap=0i,lateness_p99_ms=1.5 1796000000123"
    )


def test_escaping_of_names_and_tag_values() -> None:
    point = Point(
        "my meas,urement=x",  # "=" needs no escape in a measurement
        {"tag key,=": 'va lue,a=b "quoted"'},
        {"field key,=": 1},
        T_MS,
    )
    assert encode_point(point) == (
        r"my\ meas\,urement=x,tag\ key\,\==va\ lue\,a\=b\ "
        r'"quoted" field\ key\,\==1i 1796000000123'
    )


def test_backslashes_inside_names_are_kept_as_they_are() -> None:
    # The server's parser unescapes only "\,", "\=" and "\ ": "\\" would stay doubled.
    point = Point("m\\x", {"t": "a\\b"}, {"f\\g": 1}, 1)
    assert encode_point(point) == "m\\x,t=a\\b f\\g=1i 1"


def test_non_ascii_is_written_as_utf8_text() -> None:
    point = Point("m", {"host": "hôte-é", "k": "日本"}, {"f": 1}, 1)
    assert encode_point(point) == "m,host=hôte-é,k=日本 f=1i 1"


def test_empty_tag_values_are_left_out() -> None:
    assert encode_point(Point("m", {"host": "", "instance": "a"}, {"f": 1}, 5)) == (
        "m,instance=a f=1i 5"
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1, "0.1"),
        (-2.5, "-2.5"),
        (3.0, "3.0"),
        (1e-07, "1e-07"),
        (1e16, "1e+16"),
        (0, "0i"),
        (-7, "-7i"),
        (2**63 - 1, "9223372036854775807i"),
        (-(2**63), "-9223372036854775808i"),
        (True, "true"),
        (False, "false"),
    ],
)
def test_field_value_formats(value: int | float, text: str) -> None:
    assert encode_point(Point("m", {}, {"f": value}, 1)) == f"m f={text} 1"


def test_fields_are_sorted_by_key() -> None:
    assert encode_point(Point("m", {}, {"b": 1, "a": 2.5, "c": 3}, 1)) == "m a=2.5,b=1i,c=3i 1"


def test_encode_points_one_line_each() -> None:
    points = [Point("m", {"i": "a"}, {"f": 1}, 1), Point("n", {"i": "b"}, {"g": 0.5}, 2)]
    assert encode_points(points) == "m,i=a f=1i 1\nn,i=b g=0.5 2"
    assert encode_points([]) == ""


@pytest.mark.parametrize(
    ("point", "names"),
    [
        (Point("", {}, {"f": 1}, 1), "measurement"),
        (Point("#m", {}, {"f": 1}, 1), "comment line"),
        (Point("m\n", {}, {"f": 1}, 1), "line break"),
        (Point("m", {"t": "a\nb"}, {"f": 1}, 1), "tag 't'"),
        (Point("m", {"t": "a\rb"}, {"f": 1}, 1), "line break"),
        (Point("m", {"t": "ends\\"}, {"f": 1}, 1), "backslash"),
        (Point("m", {"": "v"}, {"f": 1}, 1), "tag key"),
        (Point("m", {}, {}, 1), "at least one field"),
        (Point("m", {}, {"": 1}, 1), "field key"),
        (Point("m", {}, {"f": float("nan")}, 1), "field 'f'"),
        (Point("m", {}, {"f": float("inf")}, 1), "not finite"),
        (Point("m", {}, {"f": 2**63}, 1), "int64"),
        (Point("m", {}, {"f": "text"}, 1), "not an int or float"),  # type: ignore[dict-item]
        (Point("m", {}, {"f": 1}, 1.5), "time_ms"),  # type: ignore[arg-type]
    ],
)
def test_what_line_protocol_cannot_carry_is_refused_by_name(point: Point, names: str) -> None:
    with pytest.raises(InvalidPoint, match=names):
        encode_point(point)


def _client_line(point: Point) -> str:
    point_class: Any = ClientPoint  # influxdb-client's Point is not annotated
    client_point = point_class(point.measurement).time(point.time_ms, WritePrecision.MS)
    for key, tag in point.tags.items():
        client_point.tag(key, tag)
    for key, value in point.fields.items():
        client_point.field(key, value)
    return str(client_point.to_line_protocol())


@pytest.mark.parametrize(
    "point",
    [
        Point("triggerhook", {"instance": "i-1", "host": "h"}, {"fired": 3, "p": 0.25}, T_MS),
        Point("a b,c", {"k ,=": "v ,=x", "z": "1"}, {"f ,=": 7, "g": 1e-07}, T_MS),
        Point("m", {"t": 'q"uote', "u": "ünï"}, {"ok": True, "n": -(2**63)}, 0),
    ],
)
def test_same_text_as_influxdb_client(point: Point) -> None:
    assert encode_point(point) == _client_line(point)


def test_encode_batch_leaves_out_and_logs_invalid_points(caplog: pytest.LogCaptureFixture) -> None:
    good = Point("m", {"i": "a"}, {"f": 1}, 1)
    bad = Point("m", {"i": "a"}, {"f": float("nan")}, 2)
    with caplog.at_level(logging.ERROR, logger="triggerhook.metrics.influx"):
        assert encode_batch([good, bad, good]) == b"m,i=a f=1i 1\nm,i=a f=1i 1"
    assert "left out 1 metrics point(s)" in caplog.text
    assert "not finite" in caplog.text
