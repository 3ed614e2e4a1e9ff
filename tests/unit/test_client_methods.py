"""The clients' one-call methods are written once (triggerhook_client.methods)
and the filters' names once (triggerhook_client.rules): both clients take the
same arguments, and a filter a call does not take is refused as Python
refuses an unknown keyword argument, before anything is sent."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest
from triggerhook_client import AsyncClient, Client, methods
from triggerhook_client.bodies import DUE_RANGE_KEYS, WHERE_KEYS, DueRange, Filter, Selection, Where
from triggerhook_client.rules import DUE_RANGE_FIELDS, FILTER_FIELDS, SELECTION_FIELDS, in_ms

ONE_CALL = (
    "schedule",
    "reschedule",
    "cancel",
    "pause",
    "resume",
    "trigger",
    "backfill",
    "get",
    "list_page",
    "count",
    "timeline",
)


def test_the_filters_keyword_arguments_are_the_rules_names() -> None:
    ranges = {n for name in DUE_RANGE_FIELDS for n in (name, in_ms(name))}
    assert set(typing.get_type_hints(Selection)) == set(SELECTION_FIELDS)
    assert set(typing.get_type_hints(DueRange)) == set(SELECTION_FIELDS) | ranges == DUE_RANGE_KEYS
    assert set(typing.get_type_hints(Where)) == set(FILTER_FIELDS) | ranges == WHERE_KEYS
    assert {f.name for f in dataclasses.fields(Filter)} == WHERE_KEYS


@pytest.mark.parametrize("name", ONE_CALL)
def test_both_clients_take_the_table_s_arguments_and_docstring(name: str) -> None:
    build = getattr(methods, name)
    for client in (Client, AsyncClient):
        method = getattr(client, name)
        assert inspect.signature(method) == inspect.signature(build)
        assert method.__doc__ == build.__doc__ and method.__name__ == name
    assert inspect.iscoroutinefunction(getattr(AsyncClient, name))


def test_a_filter_a_call_does_not_take_is_a_type_error() -> None:
    with Client("http://127.0.0.1:9") as client:
        with pytest.raises(TypeError, match=r"cancel_where.*'state'"):
            client.cancel_where(tag="a", state="firing")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"timeline.*'due_after'"):
            client.timeline(due_after="2026-01-01T00:00:00Z")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"list.*'nope'"):
            client.list(nope=1)  # type: ignore[call-arg]
