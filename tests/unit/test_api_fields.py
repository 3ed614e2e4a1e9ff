"""Each request body's and query's fields are defined once (the tables of
triggerhook.api.fields and triggerhook.api.fields_task): the names the
parsers allow are the OpenAPI document's properties and parameters, and the
filters' names are the client's."""

from __future__ import annotations

from typing import Any

from triggerhook_client.rules import DUE_RANGE_FIELDS, FILTER_FIELDS, in_ms

from triggerhook.api.bodies import RESCHEDULE_FIELDS
from triggerhook.api.fields_task import CREATE_FIELDS
from triggerhook.api.listing import (
    BULK_FIELDS,
    COUNT_PARAMS,
    FILTER_PARAMS,
    LIST_PARAMS,
    TIMELINE_PARAMS,
)
from triggerhook.api.openapi import document

DOC = document(65_536, 10_000)
PATHS = DOC["paths"]


def _body(operation: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = operation["requestBody"]["content"]["application/json"]["schema"]
    return schema


def _parameters(operation: dict[str, Any]) -> set[str]:
    return {param["name"] for param in operation["parameters"]}


def test_the_bodies_the_parsers_allow_are_the_documents() -> None:
    assert set(DOC["components"]["schemas"]["CreateTask"]["properties"]) == CREATE_FIELDS
    assert set(_body(PATHS["/v1/tasks/{id}"]["patch"])["properties"]) == RESCHEDULE_FIELDS
    assert set(_body(PATHS["/v1/tasks/cancel"]["post"])["properties"]) == BULK_FIELDS


def test_the_queries_the_parsers_allow_are_the_documents() -> None:
    assert _parameters(PATHS["/v1/tasks"]["get"]) == LIST_PARAMS
    assert _parameters(PATHS["/v1/tasks/count"]["get"]) == COUNT_PARAMS
    assert _parameters(PATHS["/v1/tasks/timeline"]["get"]) == TIMELINE_PARAMS


def test_the_filters_are_the_clients() -> None:
    assert set(FILTER_FIELDS) | {in_ms(name) for name in DUE_RANGE_FIELDS} == FILTER_PARAMS
