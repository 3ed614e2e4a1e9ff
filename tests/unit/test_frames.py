"""Our direct encoding of an event must be byte-identical to pika's."""

from __future__ import annotations

import pika
import pika.frame
import pika.spec
import pytest

from triggerhook.amqp.frames import encode_event
from triggerhook.domain.meta import Meta, make_meta
from triggerhook.domain.recurrence import Recurrence


def pika_frames(
    channel: int, exchange: str, routing_key: str, body: bytes, message_id: str,
    due_ms: int, fired_ms: int, rev: int, max_body: int,
) -> bytes:  # fmt: skip
    method = pika.spec.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=True)
    props = pika.spec.BasicProperties(
        message_id=message_id,
        delivery_mode=2,
        timestamp=fired_ms // 1000,
        headers={"x-due-ms": due_ms, "x-fired-ms": fired_ms, "x-rev": rev},
    )
    frames = [pika.frame.Method(channel, method), pika.frame.Header(channel, len(body), props)]
    frames += [
        pika.frame.Body(channel, body[start : start + max_body])
        for start in range(0, len(body), max_body)
    ]
    return b"".join(bytes(f.marshal()) for f in frames)


@pytest.mark.parametrize(
    ("body", "due_ms", "fired_ms", "rev", "max_body"),
    [
        (b"", 1_796_030_742_248, 1_796_030_742_249, 2**63 - 1, 131_064),
        (b"hello", 0, 5, 0, 131_064),  # small values: pika's int32 table encoding
        (b"x" * 1000, 2**31 - 1, 2**31, 2**31, 300),  # int32/int64 boundary, split body
        (bytes(range(256)) * 300, 253_402_300_799_999, 253_402_300_800_000, 7, 4096),
    ],
)
def test_encoding_matches_pika(
    body: bytes, due_ms: int, fired_ms: int, rev: int, max_body: int
) -> None:
    args = (7, "triggerhook", "billing.charge", body, "task-1:a.b", due_ms, fired_ms, rev, max_body)
    assert encode_event(*args) == pika_frames(*args)


def test_overlong_routing_key_is_refused() -> None:
    with pytest.raises(ValueError, match="255"):
        encode_event(1, "ex", "k" * 256, b"", "id", 0, 0, 0, 1000)


@pytest.mark.parametrize(
    "meta",
    [
        make_meta(content_type="application/json; charset=utf-8"),
        make_meta(content_encoding="gzip"),
        make_meta(
            content_type="text/plain",
            content_encoding="identity",
            headers={"tenant": "é-42", "count": 2**40, "small": -3, "urgent": True, "no": False},
        ),
        make_meta(tags=["only-tags"]),  # tags are not on the wire
        make_meta(headers={"h": "v"}, recur=Recurrence(every_ms=60_000, occurrence=7)),
    ],
)
def test_a_tasks_properties_match_pika(meta: Meta) -> None:
    ours = encode_event(5, "ex", "rk", b"{}", "t-9", 1, 2, 3, 4096, meta=meta)
    props = pika.spec.BasicProperties(
        content_type=meta.content_type,
        content_encoding=meta.content_encoding,
        message_id="t-9",
        delivery_mode=2,
        timestamp=0,
        headers={
            "x-due-ms": 1,
            "x-fired-ms": 2,
            "x-rev": 3,
            **dict(meta.headers),
            **({"x-occurrence": meta.recur.occurrence} if meta.recur else {}),
        },
    )
    method = pika.spec.Basic.Publish(exchange="ex", routing_key="rk", mandatory=True)
    theirs = [pika.frame.Method(5, method), pika.frame.Header(5, 2, props)]
    theirs.append(pika.frame.Body(5, b"{}"))
    assert ours == b"".join(bytes(f.marshal()) for f in theirs)
