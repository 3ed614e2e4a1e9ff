"""The publisher's confirms read off the connection's data (amqp/connection.py
``confirms_of`` and ``read_confirms``), with pika's own encoder as the oracle:
whatever a read holds, either exactly the confirms pika would decode from it,
in order, or the whole read left to pika."""

from __future__ import annotations

import itertools

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
    assert confirms_of(data, CHANNEL) == (pika_reads(data), b"")
    assert pika_reads(data) == confirms


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


@given(_CONFIRMS, _OTHERS, st.integers(0, 20), st.data())
def test_data_holding_anything_else_is_left_to_pika(
    confirms: list[Confirm], other: bytes, where: int, data: st.DataObject
) -> None:
    frames = [frame(*c) for c in confirms]
    at = min(where, len(frames))
    frames.insert(at, other)
    joined = b"".join(frames)
    # Whole, or cut anywhere once enough of the other frame is in to tell
    # (its type, channel or size: at most its first nine bytes).
    start = sum(map(len, frames[:at])) + min(9, len(other))
    cut = data.draw(st.integers(start, len(joined)))
    assert confirms_of(joined[:cut], CHANNEL) is None


class _Connection:
    """The attributes of a pika connection that read_confirms touches; what
    it leaves to pika is decoded by pika's decoder, as pika would."""

    def __init__(self, confirmed: list[Confirm]) -> None:
        self._frame_buffer = b""
        self.bytes_received = 0
        self.frames_received = 0
        self.to_pika: list[bytes] = []
        self.confirmed = confirmed  # pika's confirms, where read_confirms puts its own

    def _on_data_available(self, data: bytes) -> None:
        self.to_pika.append(data)
        self._frame_buffer += data
        while self._frame_buffer:
            used, decoded = pika.frame.decode_frame(self._frame_buffer)
            if decoded is None:
                return
            self._frame_buffer = self._frame_buffer[used:]
            self.bytes_received += used
            self.frames_received += 1
            if isinstance(decoded, pika.frame.Method) and decoded.channel_number == CHANNEL:
                method = decoded.method
                if isinstance(method, (pika.spec.Basic.Ack, pika.spec.Basic.Nack)):
                    acked = isinstance(method, pika.spec.Basic.Ack)
                    self.confirmed.append((method.delivery_tag, method.multiple, acked))


def _read(conn: _Connection, data: bytes, cuts: list[int]) -> None:
    """``data`` in reads cut at ``cuts`` (each taken modulo its length + 1)."""
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        conn._on_data_available(data[start:end])


_CUTS = st.lists(st.integers(0, 10_000), max_size=6)


@given(_CONFIRMS, _CUTS)
def test_confirms_cut_across_reads_anywhere_all_arrive_in_order_without_pika(
    confirms: list[Confirm], cuts: list[int]
) -> None:
    taken: list[Confirm] = []
    conn = _Connection(taken)
    read_confirms(conn, lambda: CHANNEL, taken.append)
    whole = b"".join(frame(*c) for c in confirms)
    _read(conn, whole, cuts)
    assert taken == confirms
    assert conn.to_pika == []
    assert (conn._frame_buffer, conn.bytes_received, conn.frames_received) == (
        b"",
        len(whole),
        len(confirms),
    )


@given(_CONFIRMS, _OTHERS, st.integers(0, 20), _CUTS)
def test_a_stream_with_other_frames_reaches_the_confirms_once_and_in_order(
    confirms: list[Confirm], other: bytes, where: int, cuts: list[int]
) -> None:
    """Whatever way the reads cut it, each confirm arrives once, in order,
    by one path or the other, and every byte and frame is counted once."""
    taken: list[Confirm] = []
    conn = _Connection(taken)
    read_confirms(conn, lambda: CHANNEL, taken.append)
    frames = [frame(*c) for c in confirms]
    frames.insert(min(where, len(frames)), other)
    whole = b"".join(frames)
    _read(conn, whole, cuts)
    assert taken == confirms
    assert conn.to_pika  # the other frame went to pika
    assert (conn._frame_buffer, conn.bytes_received, conn.frames_received) == (
        b"",
        len(whole),
        len(frames),
    )


def test_read_confirms_takes_confirms_only_for_the_confirming_channel() -> None:
    taken: list[Confirm] = []
    conn = _Connection(taken)
    number: list[int | None] = [None]
    read_confirms(conn, lambda: number[0], taken.append)
    acks = frame(5, False, True) + frame(9, True, False)
    conn._on_data_available(acks)  # no confirming channel yet: pika's
    assert conn.to_pika == [acks]
    number[0] = CHANNEL
    conn._on_data_available(acks)
    assert conn.to_pika == [acks]
    assert taken == [(5, False, True), (9, True, False)] * 2
    assert (conn.bytes_received, conn.frames_received) == (84, 4)
