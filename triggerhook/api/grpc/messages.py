"""The gRPC API's messages as the HTTP API's bodies and answers, so that one
parser checks both (:mod:`triggerhook.api.bodies`, :mod:`triggerhook.api.listing`)
and one renderer shows both (:func:`triggerhook.api.render.task_json`).

A request message becomes the JSON value the HTTP API would have decoded:
each field that is set (an ``optional`` one given, a list or map not empty)
under its own name, but ``payload`` (bytes) as ``payload_b64``, a
:class:`HeaderValue` as its one value and a :class:`Late` as the HTTP
spelling (``"fire"``, ``{"skip_after_ms": N}`` ...). A listing's request
becomes the query parameters (text) ``GET /v1/tasks`` takes. An answer's
dict fills a message field by field, its deprecated epoch-seconds twins
(``at``, ``until``, a deadline's ``deadline``) left out.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

# The HTTP fields a create message spells otherwise: its payload is bytes.
RENAMED = {"payload": "payload_b64"}
# The HTTP create fields the messages leave out: ``delay`` (deprecated, seconds:
# delay_ms) and ``payload`` as text (the bytes carry any payload).
NOT_IN_PROTO = frozenset({"delay", "payload"})
# What the HTTP answers show that the messages do not: epoch-seconds twins.
DEPRECATED_SHOWN = frozenset({"at", "until"})


def _value(value: Any) -> object:
    if isinstance(value, Message):
        return body_of(value)
    return value


def body_of(message: Message) -> object:
    """``message`` as the HTTP API's JSON value (see the module's docstring)."""
    kind = message.DESCRIPTOR.name
    if kind in ("HeaderValue", "Late"):
        which = message.WhichOneof(message.DESCRIPTOR.oneofs[0].name)
        if which is None:  # an empty one: null, refused by the parser, naming the field
            return None
        value = getattr(message, which)
        if kind == "HeaderValue":
            return value
        return "fire" if which == "fire" else {which: value}
    body: dict[str, object] = {}
    for field, value in message.ListFields():
        name = RENAMED.get(field.name, field.name)
        if field.name == "payload":
            body[name] = base64.b64encode(value).decode("ascii")
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            body[name] = {key: _value(item) for key, item in value.items()}
        elif field.is_repeated:
            body[name] = [_value(item) for item in value]
        else:
            body[name] = _value(value)
    return body


def query_of(message: Message) -> dict[str, str]:
    """A listing's request as ``GET /v1/tasks``'s query parameters (all text)."""
    return {field.name: str(value) for field, value in message.ListFields()}


def fill(message: Message, data: Mapping[str, Any]) -> Message:
    """``message`` with the fields of an HTTP answer's ``data`` (its payload,
    text or base64, as bytes); a key the message has no field for is a bug."""
    for key, value in data.items():
        if key in DEPRECATED_SHOWN:
            continue
        if key in ("payload", "payload_b64"):
            raw = value.encode() if key == "payload" else base64.b64decode(value)
            message.payload = raw  # type: ignore[attr-defined]
        elif key == "headers":
            for name, item in value.items():
                _header(message.headers[name], item)  # type: ignore[attr-defined]
        elif key == "late":
            _late(message.late, value)  # type: ignore[attr-defined]
        elif key == "tags":
            message.tags.extend(value)  # type: ignore[attr-defined]
        else:
            setattr(message, key, value)
    return message


def _header(target: Any, value: object) -> None:
    if isinstance(value, bool):  # before int: a bool is one
        target.flag = value
    elif isinstance(value, int):
        target.number = value
    else:
        target.text = value


def _late(target: Any, value: object) -> None:
    if value == "fire":
        target.fire = True
        return
    assert isinstance(value, Mapping)
    for key, item in value.items():
        if key != "deadline":  # the deadline in epoch seconds: deprecated
            setattr(target, key, item)
