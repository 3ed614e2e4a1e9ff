"""Property-based fuzzing of the command channel's parsing: whatever arrives,
:func:`~triggerhook.api.command_messages.execute` (type, body, message_id),
:func:`~triggerhook.api.command_messages.decode` (body) and
:class:`~triggerhook.api.command_auth.CommandGuard` (headers, user_id,
reply_to) either succeed or raise :class:`~triggerhook.api.command_messages.Rejected`
— never anything else, which the consumer would count as an internal error.

Fixed example budgets (a few seconds in all); no example database is
written, so runs do not depend on earlier ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cost import MAX_RATIO, cost_ratio
from support.fakes import FakeClock, FakePublisher, FakeStore

from triggerhook.api.command_auth import AUTH_HEADER, CommandGuard, Unauthorized
from triggerhook.api.command_messages import (
    COMMAND_TYPES,
    Command,
    Rejected,
    decode,
    execute,
)
from triggerhook.api.scoped import ScopedHook
from triggerhook.app import TriggerHook
from triggerhook.domain.namespaces import ALL
from triggerhook.settings import Settings
from triggerhook.wiring import assemble, command_config

LIMIT = 4096
TOKEN = "s3cret"
USERS = "svc-a,svc-b"
BUDGET = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

_FIELDS = (
    *("id", "at", "delay", "routing_key", "payload", "payload_b64", "colour"),
    *("from_ms", "to_ms"),  # a backfill's
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=80)
    | st.sampled_from(["2026-12-01T09:00:00Z", "abc", "A.b:c-1", "AAH/", "***", ""])
)
_json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
# Bodies near the valid ones (known field names), so the field parsers are reached.
_documents = st.dictionaries(st.sampled_from(_FIELDS), _json_values, max_size=5)
_json_bodies = (_documents | _json_values).map(lambda doc: json.dumps(doc).encode())
# Over-long bodies are fixed examples: generating kilobytes of random bytes is slow.
_edge_bodies = st.sampled_from([b"NaN", b"[" * 5000, b" " * (LIMIT + 1), b"\xff" * 64])
_bodies = st.binary(max_size=256) | _json_bodies | _edge_bodies
_types = st.none() | st.sampled_from([*COMMAND_TYPES, "CREATE", ""]) | st.text(max_size=12)

# What pika may hand over as a header value or property: text, bytes, numbers,
# nested tables and arrays, and anything else a peer could encode.
_wire_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=40)
    | st.binary(max_size=40)
    | st.sampled_from([f"Bearer {TOKEN}", f"Bearer {TOKEN}é", "Bearer ", "Bearer \udcff"])
)
_wire_values = st.recursive(
    _wire_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_headers = (
    st.none()
    | st.dictionaries(
        st.sampled_from([AUTH_HEADER, "Authorization", "x"]) | st.text(), _wire_values
    )
    | _wire_values
)
_user_ids = _wire_scalars | st.sampled_from(["svc-a", "svc-b", "guest"])
_reply_tos = _wire_scalars | st.sampled_from(
    ["amq.rabbitmq.reply-to", "amq.rabbitmq.reply-to.abc", "triggerhook.reply.x", "victim"]
)


def _hook() -> TriggerHook:
    settings_ = Settings(instance_id="fuzz", max_payload_bytes=64)
    return assemble(
        settings_, FakeStore(), FakeClock(), lambda buffer, sink, retry, fail: FakePublisher()
    )


@BUDGET
@given(body=_bodies)
def test_decode_returns_a_document_or_rejects(body: bytes) -> None:
    try:
        decode(body, LIMIT)
    except Rejected as exc:
        assert exc.code in ("malformed_json", "invalid")
        assert exc.reason


@BUDGET
@given(type_=_types, body=_bodies, message_id=st.none() | st.text(max_size=70), again=st.booleans())
def test_execute_answers_or_rejects(
    type_: str | None, body: bytes, message_id: str | None, again: bool
) -> None:
    hook = _hook()
    try:
        reply = execute(ScopedHook(hook, ALL), Command(type_, body, message_id, again), LIMIT)
    except Rejected as exc:
        assert exc.code in ("unknown_type", "malformed_json", "invalid")
        assert isinstance(exc.reply()["error"], dict)
        return
    assert type_ in COMMAND_TYPES
    assert isinstance(reply["ok"], bool)
    json.dumps(reply)  # an answer is always serialisable


@BUDGET
@given(headers=_headers, user_id=_user_ids, reply_to=_reply_tos)
def test_guard_accepts_only_the_token_or_an_allowed_user(
    headers: object, user_id: object, reply_to: object
) -> None:
    guard = CommandGuard(command_config(Settings(api_token=TOKEN, command_allowed_users=USERS)))
    try:
        guard.authorize(headers, user_id)
    except Unauthorized as exc:
        assert exc.reason == "unauthorized"
    else:
        token_ok = isinstance(headers, dict) and headers.get(AUTH_HEADER) == f"Bearer {TOKEN}"
        assert token_ok or user_id in ("svc-a", "svc-b")
    try:
        guard.check(headers, user_id, reply_to)
    except Rejected as exc:
        assert exc.code in ("unauthorized", "forbidden_reply_to")


# -- linear time ------------------------------------------------------------------------

# Command bodies of about n bytes (the consumer caps bodies at max_body_bytes,
# about 400 KB by default; the sizes here reach 400 KB).
_BODY_SHAPES: dict[str, Callable[[int], bytes]] = {
    "digits in at": lambda n: b'{"at": "' + b"9" * n + b'"}',
    "digits in delay": lambda n: b'{"delay": ' + b"9" * min(n, 4000) + b"}",
    "long id": lambda n: b'{"id": "' + b"a" * n + b'", "delay": 1}',
    "long payload": lambda n: b'{"payload": "' + b"x" * n + b'", "delay": 1}',
    "nesting": lambda n: b"[" * n + b"]" * n,
    "many fields": lambda n: json.dumps({f"f{k}": k for k in range(n // 10)}).encode(),
}


@pytest.mark.parametrize("shape", sorted(_BODY_SHAPES))
def test_execute_cost_grows_linearly_with_the_body(shape: str) -> None:
    hook = _hook()
    limit = 1_000_000

    def run(body: object) -> object:
        assert isinstance(body, bytes)
        return execute(ScopedHook(hook, ALL), Command("create", body, "m", False), limit)

    ratio = cost_ratio(run, _BODY_SHAPES[shape], 40_000, (Rejected,))
    assert ratio < MAX_RATIO, f"{shape}: 10x the body cost {ratio:.0f}x the time"
