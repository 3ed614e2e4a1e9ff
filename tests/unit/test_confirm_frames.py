"""The publisher's confirms read off the connection's data (amqp/connection.py
``confirms_of`` and ``read_confirms``), with pika's own encoder as the oracle:
whatever a read holds, either exactly the confirms pika would decode from it,
in order, or the whole read left to pika."""

from __future__ import annotations

import pika
import pika.frame
import pika.spec
from hypothesis import given
from hypothesis import strategies as st

from triggerhook.amqp.connection import Confirm, confirms_of, read_confirms

CHANNEL = 1
_TAGS = st.integers(1, 2**64 - 1)
_CONFIRMS = st.lists(st.tuples(_TAGS, st.booleans(), st.booleans()), min_size=1, max_size=20)


def frame(tag: int, multiple: bool, acked: bool, channel: int = CHANNEL) -> bytes:
    method = (
        pika.spec.Basic.Ack(delivery_tag=tag, multiple=multiple)
        if acked
        else pika.spec.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=True)
    )
    return bytes(pika.frame.Method(channel, method).marshal())


def pika_reads(data: bytes) -> list[Confirm]:
    """What pika decodes from ``data``: the oracle."""
    out: list[Confirm] = []
    while data:
        used, decoded = pika.frame.decode_frame(data)
        assert isinstance(decoded, pika.frame.Method)
        method = decoded.method
        out.append((method.delivery_tag, method.multiple, isinstance(method, pika.spec.Basic.Ack)))
        data = data[used:]
    return out


@given(_CONFIRMS)
def test_a_read_of_confirms_gives_what_pika_decodes_in_order(confirms: list[Confirm]) -> None:
    data = b"".join(frame(*c) for c in confirms)
    assert confirms_of(data, CHANNEL) == pika_reads(data) == confirms


_OTHERS = st.sampled_from(
    [
        bytes(pika.frame.Heartbeat().marshal()),
        frame(7, False, True, channel=2),  # another channel's
        bytes(
            pika.frame.Method(CHANNEL, pika.spec.Basic.Return(312, "NO_ROUTE", "x", "rk")).marshal()
        ),
        bytes(pika.frame.Method(CHANNEL, pika.spec.Channel.CloseOk()).marshal()),
    ]
)


@given(_CONFIRMS, _OTHERS, st.integers(0, 20))
def test_a_read_holding_anything_else_is_left_to_pika(
    confirms: list[Confirm], other: bytes, where: int
) -> None:
    frames = [frame(*c) for c in confirms]
    frames.insert(min(where, len(frames)), other)
    assert confirms_of(b"".join(frames), CHANNEL) is None


@given(_CONFIRMS, st.data())
def test_a_read_that_ends_inside_a_frame_is_left_to_pika(
    confirms: list[Confirm], data: st.DataObject
) -> None:
    whole = b"".join(frame(*c) for c in confirms)
    cut = data.draw(st.integers(1, len(whole) - 1))
    size = len(whole) // len(confirms)
    if cut % size:
        assert confirms_of(whole[:cut], CHANNEL) is None
    else:  # a whole number of frames: those
        assert confirms_of(whole[:cut], CHANNEL) == confirms[: cut // size]


class _Connection:
    """The attributes of a pika connection that read_confirms touches."""

    def __init__(self) -> None:
        self._frame_buffer = b""
        self.bytes_received = 0
        self.frames_received = 0
        self.to_pika: list[bytes] = []

    def _on_data_available(self, data: bytes) -> None:
        self.to_pika.append(data)


def test_read_confirms_takes_confirms_and_leaves_the_rest_to_pika() -> None:
    conn = _Connection()
    taken: list[Confirm] = []
    number: list[int | None] = [None]
    read_confirms(conn, lambda: number[0], taken.append)
    acks = frame(5, False, True) + frame(9, True, False)
    conn._on_data_available(acks)  # no confirming channel yet: pika's
    assert (conn.to_pika, taken) == ([acks], [])
    number[0] = CHANNEL
    conn._on_data_available(acks)
    assert taken == [(5, False, True), (9, True, False)]
    assert (conn.bytes_received, conn.frames_received) == (42, 2)
    heartbeat = bytes(pika.frame.Heartbeat().marshal())
    conn._on_data_available(heartbeat)
    conn._frame_buffer = b"\x01\x00"  # a partial frame waits: pika's, whatever follows
    conn._on_data_available(acks)
    assert conn.to_pika == [acks, heartbeat, acks]
    assert len(taken) == 2
