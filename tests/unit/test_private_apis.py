"""The private attributes of pika and aiohttp the code relies on, each reached
through one adapter (pika 1.4.4 and aiohttp 3.14.5, see ``constraints.txt``):
these fail as soon as an upgrade removes or renames one."""

from __future__ import annotations

import asyncio
import inspect

import pika
import pika.channel
import pika.connection
import pika.frame
import pika.spec
from aiohttp import web

from triggerhook.amqp.connection import Confirm, body_frame_max, read_confirms, write_frames
from triggerhook.amqp.content import CutBody, bound_bodies
from triggerhook.api.limits import GuardedSite


def _unconnected() -> pika.SelectConnection:
    # Never started: no socket is opened until its I/O loop runs.
    return pika.SelectConnection(pika.ConnectionParameters(host="127.0.0.1", port=1))


def test_pika_output_marshaled_frames_takes_a_sequence_of_frames() -> None:
    method = pika.connection.Connection._output_marshaled_frames
    assert callable(method)
    assert list(inspect.signature(method).parameters) == ["self", "marshaled_frames"]


def test_write_frames_hands_the_frames_to_pika() -> None:
    conn = _unconnected()
    written: list[list[bytes]] = []
    conn._output_marshaled_frames = written.append  # as the instance would receive them
    try:
        write_frames(conn, [b"frames"])
    finally:
        conn.ioloop.close()
    assert written == [[b"frames"]]


def test_pika_hands_each_read_to_a_replaceable_on_data_available() -> None:
    conn = _unconnected()
    taken: list[Confirm] = []
    try:
        assert conn._frame_buffer == b""  # no partial frame
        assert (conn.bytes_received, conn.frames_received) == (0, 0)
        read_confirms(conn, lambda: 1, taken.append)
        ack = pika.frame.Method(1, pika.spec.Basic.Ack(delivery_tag=3)).marshal()
        conn._proto_data_received(ack)  # what the transport calls with each read
        assert taken == [(3, False, True)]
        assert (conn.bytes_received, conn.frames_received) == (len(ack), 1)
    finally:
        conn.ioloop.close()


def test_pika_body_max_length_is_a_connection_attribute() -> None:
    conn = _unconnected()
    try:
        assert hasattr(conn, "_body_max_length")  # set from frame_max once tuned
        conn._body_max_length = 4088
        assert body_frame_max(conn) == 4088
    finally:
        conn.ioloop.close()


def test_pika_channels_take_content_frames_through_a_replaceable_assembler() -> None:
    conn = _unconnected()
    delivered: list[bytes] = []
    try:
        channel = pika.channel.Channel(conn, 1, lambda _channel: None)
        assert isinstance(channel._content_assembler, pika.channel.ContentFrameAssembler)
        bound_bodies(channel, 16, 8)
        # What _handle_content_frame hands a finished message to (it calls the consumer).
        channel._on_deliver = lambda _method, _header, body: delivered.append(body)
        deliver = pika.spec.Basic.Deliver("ctag", 1, False, "", "q")
        for frame in (
            pika.frame.Method(1, deliver),
            pika.frame.Header(1, 32, pika.spec.BasicProperties()),
            pika.frame.Body(1, b"x" * 32),
        ):
            channel._handle_content_frame(frame)
    finally:
        conn.ioloop.close()
    assert delivered == [b"x" * 8]
    assert isinstance(delivered[0], CutBody) and delivered[0].declared_size == 32


def test_aiohttp_sites_keep_their_server_in_a_slot() -> None:
    assert "_server" in web.BaseSite.__slots__


def test_a_guarded_site_is_closed_by_aiohttp_as_its_own() -> None:
    async def scenario() -> tuple[int, bool, bool]:
        runner = web.AppRunner(web.Application())
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", 0, asyncio.Protocol)
        await site.start()
        server = site._listening
        assert server is not None
        port, serving = site.port, server.is_serving()
        # BaseRunner.cleanup stops every site, closing its _server: attach_server set it.
        await runner.cleanup()
        return port, serving, server.is_serving()

    port, serving, serving_after = asyncio.run(scenario())
    assert port > 0
    assert serving
    assert not serving_after
