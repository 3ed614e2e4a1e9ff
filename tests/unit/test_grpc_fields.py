"""The gRPC API's messages name the HTTP API's fields, so the two cannot drift:
each request message's fields are those of the HTTP body or query it is
parsed as (triggerhook/api/fields*.py, the one definition), but for the
documented renames and omissions (triggerhook.api.grpc.messages), and each
answer message has a field for every field of the HTTP answer it stands for
(triggerhook_client.answer_fields), but the deprecated epoch-seconds twins.
And docs/api.md's status table is GRPC_RENDERING's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from google.protobuf.message import Message
from triggerhook_client import answer_fields as af
from triggerhook_client.grpc import triggerhook_pb2 as pb

from triggerhook.api.bodies import RESCHEDULE_FIELDS
from triggerhook.api.fields_task import CREATE_FIELDS
from triggerhook.api.grpc.answers import GRPC_RENDERING
from triggerhook.api.grpc.messages import DEPRECATED_SHOWN, NOT_IN_PROTO, RENAMED
from triggerhook.api.listing import COUNT_PARAMS, LIST_PARAMS

REPO = Path(__file__).resolve().parents[2]


def fields(message: type[Message]) -> set[str]:
    return {field.name for field in message.DESCRIPTOR.fields}


def answered(table: af.AnswerFields) -> set[str]:
    return {field.name for field in table} - DEPRECATED_SHOWN


def test_a_create_message_has_the_http_create_fields() -> None:
    as_http = {RENAMED.get(name, name) for name in fields(pb.CreateRequest)}
    assert as_http == CREATE_FIELDS - NOT_IN_PROTO
    assert NOT_IN_PROTO <= CREATE_FIELDS  # each omission names a real field


def test_a_reschedule_message_has_the_http_fields_and_the_id() -> None:
    assert fields(pb.RescheduleRequest) == (RESCHEDULE_FIELDS - NOT_IN_PROTO) | {"id"}


def test_list_and_count_messages_have_the_http_query_parameters() -> None:
    assert fields(pb.ListRequest) == LIST_PARAMS
    assert fields(pb.CountRequest) == COUNT_PARAMS


def test_answer_messages_have_the_http_answer_fields() -> None:
    shown = answered(af.SHOWN) - {"payload_b64"}  # the payload's bytes: one field
    assert fields(pb.Task) == shown | {"throttled", "fire_ms"} - DEPRECATED_SHOWN
    assert fields(pb.ListReply) == answered(af.PAGE)
    assert fields(pb.CountReply) == answered(af.COUNTED)
    assert fields(pb.Written) == answered(af.CREATE)
    assert fields(pb.BatchWritten) == answered(af.IDS)


def test_the_build_uses_the_grpcio_tools_ci_tests_with() -> None:
    """The generated module needs a protobuf at least as new as the protoc that
    made it: the build's grpcio-tools (the client distribution's, which
    generates it) is the pinned one, not any newer."""
    project = tomllib.loads((REPO / "client" / "pyproject.toml").read_text())
    pinned = {
        line.split("==")[0]: line.split("==")[1]
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    assert f"grpcio-tools=={pinned['grpcio-tools']}" in project["build-system"]["requires"]
    # The daemon's build generates nothing: it needs no protoc.
    daemon = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert not [r for r in daemon["build-system"]["requires"] if r.startswith("grpcio-tools")]


def test_the_documented_status_table_is_the_rendering_table() -> None:
    text = (REPO / "docs" / "api.md").read_text()
    table = text.split("| status | `triggerhook-error-code` | when |\n|---|---|---|\n", 1)[1]
    documented: dict[str, set[str]] = {}
    for row in table.split("\n\n", 1)[0].splitlines():
        status, codes, _when = row.strip("|").split(" | ")
        documented[status.strip("` ")] = set(re.findall(r"`([a-z_]+)`", codes))
    rendered: dict[str, set[str]] = {}
    for rendering in GRPC_RENDERING.values():
        if rendering is not None and rendering.code is not None:
            rendered.setdefault(rendering.status.name, set()).add(rendering.code)
    assert documented == rendered


def test_the_documented_methods_are_the_protos() -> None:
    text = (REPO / "docs" / "api.md").read_text()
    table = text.split("| method | as HTTP | reply |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    documented = {}
    for row in table.splitlines():
        method, _http, reply = row.strip("|").split(" | ")
        documented[method.strip("` ")] = reply.split("`")[1]  # the first name in it
    service = pb.DESCRIPTOR.services_by_name["Tasks"]
    assert documented == {method.name: method.output_type.name for method in service.methods}
