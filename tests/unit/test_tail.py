"""``triggerhook tail``'s view of one event (the broker side is tested in
tests/integration/test_cli_tail.py)."""

from __future__ import annotations

import json

import pika

from triggerhook.amqp.tail import describe


def test_an_event_shows_the_engine_headers_and_the_tasks_own() -> None:
    headers = {"x-due-ms": 1000, "x-fired-ms": 1001, "x-rev": 7, "tenant": "acme", "raw": b"\xff"}
    properties = pika.BasicProperties(
        message_id="invoice-42", content_type="application/json", headers=headers
    )
    event = describe("billing.charge", properties, b'{"invoice": 42}')
    assert event == {
        "id": "invoice-42",
        "routing_key": "billing.charge",
        "due_ms": 1000,
        "fired_ms": 1001,
        "rev": 7,
        "content_type": "application/json",
        "headers": {"tenant": "acme", "raw": {"base64": "/w=="}},
        "payload": '{"invoice": 42}',
    }
    assert json.loads(json.dumps(event)) == event  # one JSON line as it is


def test_a_binary_payload_is_base64_and_a_series_shows_its_occurrence() -> None:
    headers = {"x-due-ms": 5, "x-fired-ms": 6, "x-rev": 2, "x-occurrence": 3}
    event = describe("default", pika.BasicProperties(message_id="poll", headers=headers), b"\0\xff")
    assert event["payload"] == {"base64": "AP8="}
    assert event["occurrence"] == 3
    assert "headers" not in event and "content_type" not in event
