"""Consumed message bodies, bounded by their declared size before they are read.

A message arrives as a method frame, a content header that declares the body's
size, and body frames (at most ``frame_max`` bytes each). pika keeps every body
frame of a message and joins them once the last arrived: a 100 MiB command is
held twice over (the frames, then the joined body) before any code of ours sees
it, whatever the command queue's limit, with RabbitMQ's own limit at 128 MiB
(3.8 and later, ``max_message_size``) and up to ``command_prefetch`` messages
in flight.

:class:`BoundedAssembler` takes the place of pika's assembler on a consuming
channel. A body declared at most ``max_body_bytes`` is assembled as pika does;
of a larger one it keeps only the first ``kept_bytes`` and drops every later
frame as it arrives (the broker sends them anyway: AMQP has no way to refuse a
delivery's body), and hands on a :class:`CutBody`, which says the size declared.

pika's private API, one adapter (checked against pika 1.4.4, ``constraints.txt``;
``tests/unit/test_private_apis.py`` fails when it disappears): a channel's
``_content_assembler``, whose ``process(frame)`` the channel calls with every
content frame and which returns ``(method, header, body)`` once a message is
complete.
"""

from __future__ import annotations

from typing import Any

import pika.channel
import pika.exceptions
import pika.frame
import pika.spec

ContentFrames = tuple[pika.frame.Method, pika.frame.Header, bytes]


class CutBody(bytes):
    """The first bytes of a body declared larger than the limit: the rest
    was dropped unread. ``declared_size``: the size its header declared."""

    declared_size: int

    def __new__(cls, head: bytes, declared_size: int) -> CutBody:
        body = super().__new__(cls, head)
        body.declared_size = declared_size
        return body


def declared_size(body: bytes) -> int:
    """The size of the body a consumer callback was given, as declared (a
    :class:`CutBody` holds less)."""
    return body.declared_size if isinstance(body, CutBody) else len(body)


class BoundedAssembler:
    """pika's ``ContentFrameAssembler``, keeping at most ``kept_bytes`` of a
    body declared over ``max_body_bytes``. One channel's; its I/O thread only."""

    def __init__(self, max_body_bytes: int, kept_bytes: int) -> None:
        self._max_body_bytes = max_body_bytes
        self._kept_bytes = min(kept_bytes, max_body_bytes)
        self.cut = 0  # bodies cut short
        self._reset()

    def _reset(self) -> None:
        self._method: pika.frame.Method | None = None
        self._header: pika.frame.Header | None = None
        self._fragments: list[bytes] = []
        self._seen = 0  # body bytes received, kept or not
        self._room = 0  # body bytes still to keep

    def process(self, frame_value: Any) -> ContentFrames | None:
        """The message, once ``frame_value`` completed it; else None."""
        if isinstance(frame_value, pika.frame.Method) and pika.spec.has_content(
            frame_value.method.INDEX
        ):
            self._method = frame_value
            return None
        if isinstance(frame_value, pika.frame.Header):
            self._header = frame_value
            size = frame_value.body_size
            self._room = size if size <= self._max_body_bytes else self._kept_bytes
            return self._finish() if size == 0 else None
        if isinstance(frame_value, pika.frame.Body) and self._header is not None:
            return self._body(frame_value.fragment)
        raise pika.exceptions.UnexpectedFrameError(frame_value)

    def _body(self, fragment: bytes) -> ContentFrames | None:
        assert self._header is not None
        self._seen += len(fragment)
        if self._room > 0:
            kept = fragment[: self._room]
            self._fragments.append(kept)
            self._room -= len(kept)
        declared = self._header.body_size
        if self._seen > declared:
            raise pika.exceptions.BodyTooLongError(self._seen, declared)
        return self._finish() if self._seen == declared else None

    def _finish(self) -> ContentFrames:
        assert self._method is not None and self._header is not None
        body = b"".join(self._fragments)
        declared = self._header.body_size
        if declared > self._max_body_bytes:
            self.cut += 1
            body = CutBody(body, declared)
        content = (self._method, self._header, body)
        self._reset()
        return content


def bound_bodies(channel: pika.channel.Channel, max_body_bytes: int, kept_bytes: int) -> None:
    """Make ``channel`` keep at most ``kept_bytes`` of a body declared over
    ``max_body_bytes`` (call before it consumes).

    pika 1.4.4: ``Channel._content_assembler``, made in its constructor and
    used only through ``process``.
    """
    channel._content_assembler = BoundedAssembler(max_body_bytes, kept_bytes)
