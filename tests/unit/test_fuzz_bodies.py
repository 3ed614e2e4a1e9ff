"""Property-based tests of the body parsers shared by the HTTP API and the AMQP
commands: whatever a client sends, they return a value or raise
:class:`ValidationError` (a 422 naming a field), never anything else (a 500).

Fixed example budgets and no deadline: the whole module runs in a few seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cost import MAX_RATIO, cost_ratio

from triggerhook.api.bodies import (
    MalformedJson,
    decode_json,
    parse_batch,
    parse_create,
    parse_reschedule,
)
from triggerhook.api.fields_task import CREATE_FIELDS
from triggerhook.errors import ValidationError

EXAMPLES = 300

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
# JSON-like values, and a few that JSON cannot give but a caller in Python can.
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
field_values = (
    json_values
    | st.sampled_from(["2026-01-01T00:00:00Z", "1e400", "", "batch", "YQ==", "\ud800", "x" * 70])
    | st.floats(min_value=-1e12, max_value=1e13)
)
# Objects that mostly use the real field names, so the parser gets past the
# "unknown field" check and into every field's own rules.
task_bodies = st.dictionaries(
    st.sampled_from(sorted(CREATE_FIELDS)) | st.text(max_size=6), field_values, max_size=6
)
bodies = task_bodies | json_values


def parses_or_refuses(parse: object, body: object) -> None:
    try:
        parse(body)  # type: ignore[operator]
    except ValidationError as exc:
        # Names the field as the client wrote it (which may be an empty key).
        assert isinstance(exc.field, str)
        assert isinstance(exc.message, str) and exc.message


@settings(max_examples=EXAMPLES, deadline=None)
@given(bodies)
def test_parse_create_returns_or_raises_validation_error(body: object) -> None:
    parses_or_refuses(parse_create, body)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.dictionaries(st.sampled_from(["tasks", "more"]), st.lists(bodies, max_size=5) | bodies))
def test_parse_batch_returns_or_raises_validation_error(body: object) -> None:
    parses_or_refuses(lambda b: parse_batch(b, 3), body)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["at", "delay", "id"]) | st.text(max_size=4), field_values)
    | json_values
)
def test_parse_reschedule_returns_or_raises_validation_error(body: object) -> None:
    parses_or_refuses(parse_reschedule, body)


def decoded_then_parsed(raw: bytes) -> None:
    try:
        body = decode_json(raw)
    except MalformedJson:
        return  # a 400
    for parse in (parse_create, lambda b: parse_batch(b, 3), parse_reschedule):
        parses_or_refuses(parse, body)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_are_malformed(raw: bytes) -> None:
    decoded_then_parsed(raw)


@settings(max_examples=EXAMPLES, deadline=None)
@given(task_bodies, st.integers(min_value=0, max_value=60))
def test_damaged_json_documents_decode_or_are_malformed(body: dict[str, object], cut: int) -> None:
    text = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    decoded_then_parsed(text)  # whole, NaN and lone surrogates included
    decoded_then_parsed(text[:cut] + text[cut + 1 :])  # one byte missing
    decoded_then_parsed(text.replace(b"0", b"9" * 400))  # numbers out of range


# -- linear time ------------------------------------------------------------------------

# HTTP bodies of about n bytes (http_max_body_bytes caps them at 4 MiB by default).
_BODY_SHAPES: dict[str, Callable[[int], bytes]] = {
    "digits in at": lambda n: b'{"at": "' + b"9" * n + b'"}',
    "long number": lambda n: b'{"at": 1.' + b"9" * n + b"}",
    "long id": lambda n: b'{"id": "' + b"a" * n + b'", "delay": 1}',
    "nesting": lambda n: b"[" * n + b"]" * n,
    "batch": lambda n: b'{"tasks": [' + b",".join([b'{"delay": 1}'] * (n // 13)) + b"]}",
    "batch of bad times": lambda n: (
        b'{"tasks": [' + b",".join([b'{"at": "99999999999999999"}'] * (n // 28)) + b"]}"
    ),
}


@pytest.mark.parametrize("shape", sorted(_BODY_SHAPES))
def test_decode_and_parse_cost_grows_linearly_with_the_body(shape: str) -> None:
    def run(raw: object) -> object:
        assert isinstance(raw, bytes)
        body = decode_json(raw)
        return parse_batch(body, 100_000) if shape.startswith("batch") else parse_create(body)

    ratio = cost_ratio(run, _BODY_SHAPES[shape], 40_000, (ValidationError, MalformedJson))
    assert ratio < MAX_RATIO, f"{shape}: 10x the body cost {ratio:.0f}x the time"
